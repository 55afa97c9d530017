"""
model.py: the transformer of "Transformers Are Born Biased", with every knob the paper turns, and its
checkpoint format.

One GPTConfig and one GPT module express, by config alone, each architecture the paper probes
(Sections 2.1, 3, 4.1, 6.2): GPT-2 / LLaMA / Qwen-style blocks, the full / attention-only / MLP-only
ablation, residual-free MLP0-like stacks, uniform ("Attn0"-like) attention, and the positional
variance calibration and head-wise RMSNorm that act on attention sinks.

A block is pre-norm:  x <- x + Attn(Norm(x));  x <- x + MLP(Norm(x)).
Inside attention, after the values are aggregated and before W_O, each head's output at 1-indexed
position t can be rescaled (calibration, Section 6.2.1) and/or RMS-normalized (head_norm).
Weights are NOT initialized here: init.py owns that (GPT-2 scheme, seeded).

    model(idx, targets)            -> (logits, loss), as nanoGPT: the training and sampling path
    model.trace(idx, ...)          -> dict of hidden states, attention probabilities, head outputs:
                                      everything the probes read, from one explicit pass
    write_checkpoint(path, model)  -> one file: the config beside the weights
    load_checkpoint(path)          -> the GPT of such a file, from the file alone

This file needs torch alone and imports no other file of the project: copy it anywhere. Hugging Face
directories are read by hf.py, which maps each family onto these knobs.
"""
import dataclasses
import functools
import math
import numbers
import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

CHOICES = {
    "norm": ("layernorm", "rmsnorm", "none"),
    "activation": ("gelu", "gelu_tanh", "relu", "tanh", "silu", "swiglu"),
    "position": ("rope", "learned", "none"),
    "rope_type": ("default", "linear", "llama3"),
    "sublayers": ("both", "attn", "mlp"),
    "attention": ("softmax", "uniform", "softmax1", "softpick"),
    "calibration": ("none", "amplify", "attenuate"),
}


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 1024            # context length T (also the T of calibration=attenuate)
    vocab_size: int = 50257
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: Optional[int] = None   # grouped-query attention; None = n_head (plain multi-head)
    n_embd: int = 768
    head_size: Optional[int] = None   # width of one head; None = n_embd / n_head (Qwen3 sets it apart)
    mlp_hidden: Optional[int] = None  # MLP hidden width; None = 4 * n_embd
    norm: str = "layernorm"           # pre-norm of each sublayer, and the final norm
    norm_eps: float = 1e-5
    activation: str = "gelu"          # gelu is exact (erf); gelu_tanh is GPT-2's approximation
    position: str = "rope"
    rope_theta: float = 10000.0
    rope_type: str = "default"        # how RoPE's inverse frequencies are rescaled: none, / factor, Llama 3
    rope_factor: float = 1.0          # linear and llama3
    rope_low_freq_factor: float = 1.0     # llama3 only
    rope_high_freq_factor: float = 4.0    # llama3 only
    rope_original_context: int = 8192     # llama3 only: the context the frequencies were trained for
    sliding_window: Optional[int] = None  # each query sees at most this many keys, itself included (Mistral)
    self_only: Optional[int] = None   # this 1-indexed position attends only to itself (Sec 6.2's mask edit, from birth)
    qk_norm: bool = False             # per-head RMSNorm of q and k before RoPE (Qwen3)
    sublayers: str = "both"           # both | attn (self-attention-only) | mlp (MLP-only), Sec 4.1
    residual: bool = True             # False: x <- sublayer(Norm(x)), as in MLP0 stacks
    attention: str = "softmax"        # uniform: causal running mean of V, still through W_V, W_O; the sink
                                      # controls: softmax1 (softmax + 1), softpick (rectified softmax)
    attn_sink: bool = False           # sink control: a learned sink logit per head (gpt-oss)
    attn_gate: bool = False           # sink control: sigmoid gate on each head's output (gated attention)
    calibration: str = "none"         # none | amplify (x sqrt(t)) | attenuate (x sqrt(t / T))
    head_norm: bool = False           # head-wise RMSNorm before W_O, gain of size head_dim
    bias: bool = True                 # biases of every linear layer and of LayerNorm (GPT-2)
    qkv_bias: bool = False            # biases on the q, k, v projections only (Qwen2)
    attn_bias: bool = False           # biases on q, k, v and W_O (LLaMA's attention_bias)
    mlp_bias: bool = False            # biases on the MLP projections (LLaMA's mlp_bias)
    tie_embeddings: bool = True       # LM head = token embedding (GPT-2); False: own matrix

    def __post_init__(self):
        """Every knob checked by type and range, each error naming the knob: a config that cannot describe
        a model is refused here, before any weight exists."""
        for f in dataclasses.fields(self):
            value, optional = getattr(self, f.name), f.type is Optional[int]
            if f.name in CHOICES:
                if value not in CHOICES[f.name]:
                    raise ValueError(f"unknown {f.name}={value!r}; choose one of {CHOICES[f.name]}")
            elif f.type is bool:
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} must be true or false, got {value!r}")
            elif f.type is float:
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                        or value <= 0:
                    raise ValueError(f"{f.name} must be a finite number > 0, got {value!r}")
                object.__setattr__(self, f.name, float(value))      # 10000 and 10000.0 are one config
            elif not (optional and value is None):
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                    raise ValueError(f"{f.name} must be an integer >= 1{' or unset' if optional else ''}, "
                                     f"got {value!r}")
                object.__setattr__(self, f.name, int(value))
        if self.head_size is None and self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head} (or set head_size)")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head={self.n_head} is not a multiple of n_kv_head={self.kv_heads}")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
        if self.attn_sink and self.attention != "softmax":
            raise ValueError(f"attn_sink adds a learned logit to softmax attention; attention={self.attention!r} "
                             f"has {'its own fixed one' if self.attention == 'softmax1' else 'none to add it to'}")
        sizes = {"vocab_size": self.vocab_size, "block_size": self.block_size if self.position == "learned" else 1,
                 "MLP width": self.mlp_width, "n_head x head_dim": self.n_head * self.head_dim}
        too_big = [k for k, v in sizes.items() if v * self.n_embd > MAX_TENSOR]
        if too_big:
            raise ValueError(f"{too_big[0]} = {sizes[too_big[0]]} makes a weight of more than 2^40 numbers with "
                             f"n_embd={self.n_embd}; no machine holds it")
        if not self.rope_low_freq_factor < self.rope_high_freq_factor:
            raise ValueError(f"RoPE llama3 scaling needs rope_low_freq_factor < rope_high_freq_factor, got "
                             f"{self.rope_low_freq_factor} and {self.rope_high_freq_factor}")

    @property
    def rows_sum_to_one(self) -> bool:
        """False for the sink controls whose attention rows may sum to less than 1 (softmax1, attn_sink, softpick)."""
        return self.attention in ("softmax", "uniform") and not self.attn_sink

    @property
    def head_dim(self) -> int:
        return self.head_size or self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def mlp_width(self) -> int:
        return self.mlp_hidden or 4 * self.n_embd


MAX_TENSOR = 2 ** 40      # numbers in one weight matrix: 4 TiB in float32, far beyond any machine here


# Presets: the papers' numbers. "RoPE GPT-2" = GPT-2 blocks with rotary instead of learned positions.
PRESETS: dict[str, GPTConfig] = {
    "gpt2-nano": GPTConfig(),
    "llama2-nano": GPTConfig(vocab_size=32000, block_size=2048, norm="rmsnorm", activation="swiglu",
                             mlp_hidden=2048, bias=False, tie_embeddings=False),   # paper Table 13
    "qwen-nano": GPTConfig(vocab_size=32000, block_size=2048, norm="rmsnorm", activation="swiglu",
                           mlp_hidden=3072, bias=False, qkv_bias=True, tie_embeddings=False),
    "gpt2-1.2b": GPTConfig(n_layer=24, n_head=32, n_embd=2048),
    "llama2-7b": GPTConfig(n_layer=32, n_head=32, n_embd=4096, vocab_size=32000, block_size=4096, norm="rmsnorm",
                           activation="swiglu", mlp_hidden=11008, bias=False, tie_embeddings=False),   # its shape
    "tiny": GPTConfig(n_layer=4, n_head=4, n_embd=64, vocab_size=512, block_size=256),
}
# The LLaMA-style block (paper Table 13) on top of any preset's sizes: what the paper's toy experiments train.
LLAMA_KNOBS = dict(norm="rmsnorm", activation="swiglu", bias=False, tie_embeddings=False)


def get_config(name: str, **overrides) -> GPTConfig:
    """A preset by name, with any knob overridden: get_config("tiny", calibration="attenuate")."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    known = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown config knob(s) {unknown}; known knobs: {sorted(known)}")
    return dataclasses.replace(PRESETS[name], **overrides)


# ----------------------------------------------------------------------------- building blocks

def rope_inv_freq(config: GPTConfig) -> torch.Tensor:
    """RoPE's inverse frequencies theta^(-2i/hd), i < hd/2, float32, rescaled by config.rope_type: default
    unchanged; linear all divided by rope_factor (positions stretched by that factor); llama3 (Llama 3.1's rule)
    wavelengths shorter than original_context / high_freq_factor kept, those longer than original_context /
    low_freq_factor divided by rope_factor, the band between interpolated linearly in original_context / wavelength."""
    hd = config.head_dim
    inv = 1.0 / config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    if config.rope_type == "linear":
        return inv / config.rope_factor
    if config.rope_type == "llama3":
        wavelen = 2 * math.pi / inv
        ratio = config.rope_original_context / wavelen          # how many wavelengths fit the trained context
        low, high = config.rope_low_freq_factor, config.rope_high_freq_factor
        smooth = ((ratio - low) / (high - low)).clamp(0.0, 1.0)  # 0: long waves (scaled), 1: short (kept)
        return (1 - smooth) * inv / config.rope_factor + smooth * inv
    return inv


def rope_tables(T: int, config: GPTConfig, device=None):
    """cos and sin of the rotary angles t * inv_freq, (T, head_dim/2), computed in float32."""
    angles = torch.outer(torch.arange(T, device=device, dtype=torch.float32), rope_inv_freq(config).to(device))
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x_i, x_{i+hd/2}) by angle t * inv_freq_i, the "rotate-half" layout of Hugging Face LLaMA / Qwen /
    Mistral checkpoints (not Meta's interleaved pairs): scores q_m . k_n then depend on m - n only."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RMSNorm(nn.Module):
    """x / RMS(x) * gain over the last dimension. The statistic is taken in float32 and the normalized
    x cast back before the gain multiplies it, as Hugging Face LLaMA does, so that bf16 models match."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        xf = x.float()
        ms = xf.pow(2).mean(-1, keepdim=True)
        # |x| beyond ~1e19 overflows the float32 statistic to inf, and rsqrt(inf) = 0 would quietly zero the
        # vector: make it NaN instead, so the pass's finiteness check names the block
        ms = torch.where(torch.isinf(ms), torch.nan, ms)
        return self.weight * (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)


def make_norm(config: GPTConfig, width: int) -> nn.Module:
    if config.norm == "layernorm":
        return nn.LayerNorm(width, eps=config.norm_eps, bias=config.bias)
    if config.norm == "rmsnorm":
        return RMSNorm(width, config.norm_eps)
    return nn.Identity()


def qkv_sizes(config: GPTConfig) -> list:
    """Rows of the fused q/k/v matrix c_attn (and of its bias): H hd of q, then Hkv hd of k, then of v."""
    H, Hkv, hd = config.n_head, config.kv_heads, config.head_dim
    return [H * hd, Hkv * hd, Hkv * hd]


SOFTPICK_EPS = 1e-8         # softpick's denominator guard, in the unshifted scale: 0/0 only if every score is 0


def attention_weights(scores: torch.Tensor, allowed: torch.Tensor, kind: str, sink=None) -> torch.Tensor:
    """Attention weights (B, H, T, T), float32, from scores q.k / sqrt(hd) over the allowed keys. Beside softmax,
    the sink controls of Section 6.2's comparison, each a few lines:
      softmax1  exp(s_j) / (1 + sum_k exp(s_k)): an extra zero logit with a zero value: attend to "nothing" (Miller);
      sink      the same with a learned logit per head instead of 0 (gpt-oss's attention sinks);
      softpick  relu(exp(s_j) - 1) / sum_k |exp(s_k) - 1| (Zuhri et al. 2025, 2504.20966): a key with
                s_j <= 0 gets exactly 0, and a row may be all zeros.
    Only softmax rows sum to 1; the others sum to at most 1, and the sink metric reads them as they are."""
    s = scores.float().masked_fill(~allowed, float("-inf"))
    if kind == "softmax" and sink is None:
        return F.softmax(s, dim=-1)
    if kind == "softpick":
        m = s.amax(dim=-1, keepdim=True).clamp_min(0.0)          # exp(s - m) <= 1 and exp(-m) <= 1: no overflow
        e = torch.exp(s - m) - torch.exp(-m)                       # (exp(s) - 1) exp(-m)
        e = e.masked_fill(~allowed, 0.0)
        return F.relu(e) / (e.abs().sum(dim=-1, keepdim=True) + SOFTPICK_EPS * torch.exp(-m))
    extra = torch.zeros_like(s[..., :1]) if sink is None else sink.float().view(1, -1, 1, 1).expand_as(s[..., :1])
    return F.softmax(torch.cat([s, extra], dim=-1), dim=-1)[..., :-1]        # the extra column's value is zero


def allowed_keys(T: int, window: Optional[int] = None, self_only: Optional[int] = None, device=None) -> torch.Tensor:
    """(T, T) bool, True where query t may attend to key s: s <= t, t - s < window if a window is set, and only
    s = t for the query at 1-indexed position self_only, which then averages nothing, like the first position."""
    t = torch.arange(T, device=device)
    allowed = t[None, :] <= t[:, None]
    if window is not None:
        allowed &= t[None, :] > t[:, None] - window
    if self_only is not None and self_only <= T:
        allowed[self_only - 1] = t == self_only - 1
    return allowed


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        hd = config.head_dim
        self.c_attn = nn.Linear(config.n_embd, sum(qkv_sizes(config)),
                                bias=config.bias or config.qkv_bias or config.attn_bias)
        self.c_proj = nn.Linear(config.n_head * hd, config.n_embd, bias=config.bias or config.attn_bias)   # W_O
        if config.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(hd, config.norm_eps), RMSNorm(hd, config.norm_eps)
        if config.head_norm:
            self.head_norm = RMSNorm(hd, config.norm_eps)    # one gain of size head_dim, shared by heads
        if config.attn_sink:
            self.sink = nn.Parameter(torch.zeros(config.n_head))         # one learned sink logit per head
        if config.attn_gate:                                  # gate logits from the block's (normed) input
            self.c_gate = nn.Linear(config.n_embd, config.n_head * hd, bias=config.bias or config.attn_bias)

    def forward(self, x, rope=None, mask=None, trace=None):
        """x (B, T, n_embd) -> (B, T, n_embd). mask: an edited (T, T) bool mask instead of the causal one.
        trace: a dict to fill with what a probe asked for, by its keys: "attn_probs" (B, H, T, T),
        float32 whatever the model's dtype, and "head_out" (B, H, T, hd), the heads as W_O sees them."""
        cfg = self.config
        B, T, _ = x.shape
        H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
        q, k, v = self.c_attn(x).split(qkv_sizes(cfg), dim=-1)
        q, k, v = q.view(B, T, H, hd), k.view(B, T, Hkv, hd), v.view(B, T, Hkv, hd)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)    # (B, heads, T, hd)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        want_probs = trace is not None and "attn_probs" in trace
        explicit = want_probs or not cfg.rows_sum_to_one              # SDPA computes plain softmax only
        window = cfg.sliding_window if cfg.sliding_window is not None and cfg.sliding_window < T else None
        edited = window or cfg.self_only is not None and cfg.self_only <= T
        allowed = mask if mask is not None else (allowed_keys(T, window, cfg.self_only, x.device)
                                                 if edited or explicit else None)
        t = torch.arange(1, T + 1, device=x.device, dtype=torch.float32).view(T, 1)    # 1-indexed positions
        if cfg.attention == "uniform" and allowed is None:
            # Attn0-like: position t averages the values of positions 1..t (summed in fp32)
            y = (v.float().cumsum(dim=2) / t).to(v.dtype).repeat_interleave(H // Hkv, dim=1)
        elif explicit or cfg.attention == "uniform":
            # the explicit path, for probes and the sink controls: SDPA's maths with the weights kept
            if cfg.attention == "uniform":
                probs = (allowed.float() / allowed.sum(dim=-1, keepdim=True)).expand(B, H, T, T)
            else:
                scores = q @ k.repeat_interleave(H // Hkv, dim=1).transpose(-2, -1) * (1.0 / math.sqrt(hd))
                probs = attention_weights(scores, allowed, cfg.attention, self.sink if cfg.attn_sink else None)
            y = probs.to(v.dtype) @ v.repeat_interleave(H // Hkv, dim=1)
            if want_probs:
                trace["attn_probs"] = probs
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None,
                                               enable_gqa=Hkv != H)
        # Section 6.2.1: the running average leaves position t with variance ~ 1/t; undo it
        if cfg.calibration == "amplify":
            y = y * t.sqrt().to(y.dtype)
        elif cfg.calibration == "attenuate":
            y = y * (t / cfg.block_size).sqrt().to(y.dtype)
        if cfg.head_norm:
            y = self.head_norm(y)
        if cfg.attn_gate:     # Qiu et al. 2025 (2505.06708), as in Qwen3-Next: elementwise, after SDPA, before W_O
            y = y * torch.sigmoid(self.c_gate(x)).view(B, T, H, hd).transpose(1, 2)
        if trace is not None and "head_out" in trace:
            trace["head_out"] = y
        return self.c_proj(y.transpose(1, 2).reshape(B, T, H * hd))


ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "relu": F.relu,
               "tanh": torch.tanh, "silu": F.silu}     # gelu is exact (erf); gelu_tanh is GPT-2's approximation


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.activation = config.activation
        bias = config.bias or config.mlp_bias
        self.c_fc = nn.Linear(config.n_embd, config.mlp_width, bias=bias)        # up
        if config.activation == "swiglu":
            self.c_gate = nn.Linear(config.n_embd, config.mlp_width, bias=bias)  # gate
        self.c_proj = nn.Linear(config.mlp_width, config.n_embd, bias=bias)      # down (residual projection)

    def forward(self, x):
        if self.activation == "swiglu":
            return self.c_proj(F.silu(self.c_gate(x)) * self.c_fc(x))
        return self.c_proj(ACTIVATIONS[self.activation](self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.residual = config.residual
        if config.sublayers in ("both", "attn"):
            self.ln_1 = make_norm(config, config.n_embd)
            self.attn = CausalSelfAttention(config)
        if config.sublayers in ("both", "mlp"):
            self.ln_2 = make_norm(config, config.n_embd)
            self.mlp = MLP(config)

    def forward(self, x, rope=None, mask=None, trace=None):
        if hasattr(self, "attn"):
            a = self.attn(self.ln_1(x), rope, mask, trace)
            x = x + a if self.residual else a
        if hasattr(self, "mlp"):
            m = self.mlp(self.ln_2(x))
            x = x + m if self.residual else m
        return x


# ----------------------------------------------------------------------------- the model

class GPT(nn.Module):
    """The transformer. GPT(config) holds PyTorch's default init, not the paper's: init.build(config, seed) gives
    the seeded GPT-2 init every experiment of the project starts from."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=make_norm(config, config.n_embd),
        ))
        if config.position == "learned":
            self.transformer.wpe = nn.Embedding(config.block_size, config.n_embd)
        # tied: the head reads wte.weight directly, so a tie can never come undone
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        """idx (B, T) token ids -> (logits, loss), as nanoGPT: with targets (B, T), logits (B, T, vocab) and the mean
        next-token cross-entropy (targets -1 ignored); without, the last position's logits (B, 1, vocab) and None.
        Token ids are not range-checked here (a GPU sync per call): the scripts check them where data enters."""
        x = self._embed(idx, None)
        rope = self._rope(x)
        for block in self.transformer.h:
            x = block(x, rope)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.unembed(x[:, [-1]]), None     # the LM head on the last position only (a list keeps T)
        logits = self.unembed(x)
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-1)

    def trace(self, idx=None, *, embeds=None, hidden=None, attn_probs=False, head_out=False, logits=False,
              attn_mask=None) -> dict:
        """One pass that keeps what the probes read, on token ids idx (B, T) or input embeddings
        embeds (B, T, n_embd). Returns a dict holding only what was asked:
          hidden="all" | "last": the n_layer + 2 residual-stream states -- the input (after the position
              table), after each block, after the final norm -- each (B, T, d), or (B, d) at the last token
          attn_probs: per layer (B, H, T, T), float32 (an explicit softmax instead of SDPA)
          head_out: per layer (B, H, T, head_dim), each head's aggregated output as W_O sees it
          logits: the last position's logits (B, vocab)
        attn_mask: a (T, T) bool mask used in every layer instead of the causal one; it must stay causal
        and leave each query a key (sink.py's mask edit: "token k attends only to itself")."""
        if hidden not in (None, "all", "last"):
            raise ValueError(f"hidden must be None, 'all' or 'last', got {hidden!r}")
        x = self._embed(idx, embeds)
        T = x.shape[1]
        if attn_mask is not None:
            attn_mask = check_attn_mask(attn_mask, T).to(x.device)
        keep = (lambda h: h) if hidden == "all" else (lambda h: h[:, -1])
        asked = [key for key, wanted in (("attn_probs", attn_probs), ("head_out", head_out)) if wanted]
        rope = self._rope(x)
        states, per_layer, finite = [keep(x)], [], [torch.isfinite(x).all()]
        for block in self.transformer.h:
            rec = dict.fromkeys(asked)
            x = block(x, rope, attn_mask, rec)
            states.append(keep(x))
            per_layer.append(rec)
            finite.append(torch.isfinite(x).all())
        x = self.transformer.ln_f(x)
        states.append(keep(x))
        finite.append(torch.isfinite(x).all())
        last_logits = self.unembed(x[:, -1]) if logits else None
        if logits:
            finite.append(torch.isfinite(last_logits).all())
        # inside torch.compile (probe.py --compile) the check runs eagerly: a host sync and a raise. Wrapped only
        # there, since torch.compiler.disable imports the compiler, a second at every start-up
        check = torch.compiler.disable(raise_if_nonfinite) if torch.compiler.is_compiling() else raise_if_nonfinite
        check(torch.stack(finite), self.config.n_layer)
        out = {key: [rec[key] for rec in per_layer if rec[key] is not None] for key in asked}   # MLP-only: none
        if hidden:
            out["hidden"] = states
        if logits:
            out["logits"] = last_logits
        return out

    def unembed(self, x):
        """The LM head: final-norm states -> logits."""
        return F.linear(x, self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight)

    def num_params(self, include_embeddings: bool = True) -> int:
        tables = [self.transformer.wte, self.lm_head, getattr(self.transformer, "wpe", None)]
        embedded = 0 if include_embeddings else sum(t.weight.numel() for t in tables if t is not None)
        return sum(p.numel() for p in self.parameters()) - embedded

    def _embed(self, idx, embeds):
        cfg = self.config
        if (idx is None) == (embeds is None):
            raise ValueError("pass exactly one of idx (token ids, B x T) or embeds (B x T x n_embd)")
        if idx is not None:
            if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
                raise ValueError(f"idx must be integer token ids of shape (B, T), got {idx.dtype} {tuple(idx.shape)}")
            x = self.transformer.wte(idx.long())
        else:
            if embeds.dim() != 3 or embeds.shape[-1] != cfg.n_embd:
                raise ValueError(f"embeds must have shape (B, T, n_embd={cfg.n_embd}), got {tuple(embeds.shape)}")
            x = embeds
        T = x.shape[1]
        if T > cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds the context block_size={cfg.block_size}")
        if T == 0:
            raise ValueError("empty sequence: T must be at least 1")
        if cfg.position == "learned":
            x = x + self.transformer.wpe(torch.arange(T, device=x.device))
        return x

    def _rope(self, x):
        return rope_tables(x.shape[1], self.config, x.device) if self.config.position == "rope" else None


def raise_if_nonfinite(finite: torch.Tensor, n_layer: int) -> None:
    """NaN/inf activations are an error, never a result. `finite`: one flag per state of a pass (the input, each
    block, the final norm, the logits if computed), gathered on the device: one host sync per pass."""
    if bool(finite.all()):
        return
    first = int((~finite).nonzero()[0])
    where = ("the input embeddings" if first == 0 else f"block {first} of {n_layer}" if first <= n_layer
             else "the final norm" if first == n_layer + 1 else "the LM head (logits)")
    raise FloatingPointError(f"non-finite activations (NaN/inf), first in {where}: no result is computed from "
                             f"them. Check the config's knobs and the weights, or run in float32 (--dtype float32)")


def check_attn_mask(mask: torch.Tensor, T: int) -> torch.Tensor:
    """An edited attention mask must be (T, T) bool, causal, and give every query a key."""
    if mask.shape != (T, T) or mask.dtype != torch.bool:
        raise ValueError(f"attn_mask must be a ({T}, {T}) bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    if mask.triu(diagonal=1).any():
        raise ValueError("attn_mask lets a query see a later key; an edited mask must stay causal")
    if not mask.any(dim=-1).all():
        raise ValueError("attn_mask leaves a query with no key to attend to")
    return mask


def forward_flops(model: GPT, seq_len: int, logits_positions: int = 1) -> float:
    """Forward flops of one sequence of T = seq_len tokens, 2 per multiply-add, as the probes' TFLOP/s and MFU count:
      - each weight matrix once per token (embedding lookups, biases and norm gains are not matmuls);
      - 4 H hd per attended (query, key) pair and layer: its score and its weighted value. Causal attention
        attends T (T + 1) / 2 pairs (fewer with a sliding window); uniform attention is a running sum, no matmul;
      - the LM head on `logits_positions` positions (1: the last only, as the probes; 0: none, a fingerprint).
    train.py's MFU counts as nanoGPT does instead (PaLM's 6 N + 12 L H hd T), so the two compare."""
    cfg = model.config
    tables = [t.weight for t in (model.transformer.wte, getattr(model.transformer, "wpe", None), model.lm_head) if t]
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2 and not any(p is t for t in tables))
    w = min(cfg.sliding_window or seq_len, seq_len)
    pairs = w * (w + 1) // 2 + (seq_len - w) * w                  # sum over t of min(t, w) keys ...
    pairs -= min(cfg.self_only, w) - 1 if cfg.self_only and cfg.self_only <= seq_len else 0   # ... but one at self_only
    attends = cfg.sublayers != "mlp" and cfg.attention != "uniform"
    attention = 4 * cfg.n_layer * cfg.n_head * cfg.head_dim * pairs if attends else 0
    return 2 * matrices * seq_len + attention + logits_positions * 2 * cfg.n_embd * cfg.vocab_size


# ----------------------------------------------------------------------------- checkpoints: written and read here
# One file per checkpoint, a dict saved with torch.save: "config" (the GPTConfig's fields), "model" (the state
# dict), "step", and whatever the writer adds: train.py stores "optimizer", "rng", "args", "seeds",
# "tokenizer", "init_from", "data_meta" and "provenance". Read with weights_only=True: data, never code.

def write_checkpoint(path: str, model: GPT, step: int = 0, **meta) -> None:
    """Save `model` (and any metadata) at `path`; load_checkpoint rebuilds the model from the file alone.
    The project's scripts write through common.save_checkpoint: atomically, with the run's provenance."""
    state = dict(config=dataclasses.asdict(model.config), model=model.state_dict(), step=step, **meta)
    torch.save(state, path)


def read_checkpoint(path, mmap: bool = False) -> dict:
    """A checkpoint as a dict: config, model (state dict), step, and what its writer added (train.py:
    optimizer, seeds, tokenizer, args, ...), loaded with weights_only=True (data, never code).
    mmap=True maps the tensors instead of reading them."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        hint = ""
        if os.path.isdir(path):
            hint = (" (a Hugging Face directory: a checkpoint file is wanted here; write one with "
                    "model.write_checkpoint(PATH, hf.load(DIR)))")
        raise FileNotFoundError(f"no checkpoint file at {path!r}{hint}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:     # torch raises many kinds (zip, pickle, EOF) for an empty, cut or foreign file
        why = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} is not a readable train.py checkpoint: empty, truncated, or another "
                         f"format ({why})") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("config"), dict) \
            or not isinstance(ckpt.get("model"), dict):
        raise ValueError(f"{path} is not a train.py checkpoint (it has no 'config' and 'model' entries)")
    unknown = sorted(set(ckpt["config"]) - {f.name for f in dataclasses.fields(GPTConfig)})
    if unknown:
        raise ValueError(f"{path} has config knobs this model.py does not know: {unknown}")
    try:
        GPTConfig(**ckpt["config"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: its config is invalid: {e}") from None
    return ckpt


def load_checkpoint(path, device="cpu") -> GPT:
    """The model of a checkpoint, rebuilt from the file alone (config + weights). Weights that do not fit
    the config, or that hold NaN or inf, are refused."""
    ckpt = read_checkpoint(path)
    with torch.device("meta"):      # shapes only; the weights come from the file
        model = GPT(GPTConfig(**ckpt["config"])).to_empty(device=device)
    expected, got = model.state_dict(), ckpt["model"]
    wrong = sorted(set(expected) ^ set(got))
    wrong += sorted(k for k in set(expected) & set(got)
                    if not isinstance(got[k], torch.Tensor) or expected[k].shape != got[k].shape)
    if wrong:
        raise ValueError(f"{path}: weights do not match the config stored beside them "
                         f"(first mismatches: {wrong[:5]}); the file is damaged or was edited")
    model.load_state_dict(got)
    return check_model_weights_finite(model, path)


def check_model_weights_finite(model: GPT, where: str) -> GPT:
    """A weight that holds NaN or inf is an error naming it: such a model can only produce fake results."""
    for name, p in model.named_parameters():     # in slices: a whole-tensor check would double the peak memory
        if not all(torch.isfinite(part).all() for part in p.detach().reshape(-1).split(1 << 20)):
            raise nonfinite_weight(where, name, p)
    return model


def nonfinite_weight(where: str, name: str, t: torch.Tensor) -> ValueError:
    return ValueError(f"{where}: weight {name} holds {int((~torch.isfinite(t)).sum())} NaN/inf value(s); the "
                      f"checkpoint is damaged, came from a diverged run, or overflows the dtype it is loaded in")
