"""
model.py: the transformer of "Transformers Are Born Biased", with every knob the paper turns, and
the Hugging Face checkpoints people fingerprint and probe, loaded exactly.

One GPTConfig and one GPT module express, by config alone, each architecture the paper probes
(Sections 2.1, 3, 4.1, 6.2): GPT-2 / LLaMA / Qwen-style blocks, the full / attention-only / MLP-only
ablation, residual-free MLP0-like stacks, uniform ("Attn0"-like) attention, and the positional
variance calibration and head-wise RMSNorm that act on attention sinks.

A block is pre-norm:  x <- x + Attn(Norm(x));  x <- x + MLP(Norm(x)).
Inside attention, after the values are aggregated and before W_O, each head's output at 1-indexed
position t can be rescaled (calibration, Section 6.2.1) and/or RMS-normalized (head_norm).
Weights are NOT initialized here: init.py owns that (GPT-2 scheme, seeded).

    model(idx, targets)       -> (logits, loss), as nanoGPT: the training and sampling path
    model.trace(idx, ...)     -> dict of hidden states, attention probabilities, head outputs:
                                 everything the probes read, from one explicit pass
    GPT.from_checkpoint(path) -> a train.py checkpoint
    GPT.from_pretrained(dir)  -> a Hugging Face LLaMA / Mistral / Qwen2 / Qwen3 / GPT-2 directory

    python model.py           # table of presets with parameter counts -> out/model/presets.json
    python model.py DIR       # load a checkpoint; report its config, load time and peak memory
"""
import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import numbers
import os
import platform
import re
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional
try:
    import fcntl                      # POSIX file locks: one run per output directory (lock_dir)
except ImportError:                   # Windows has none: runs there are not locked, and lock_dir says so
    fcntl = None


def check_requirements(names=("numpy", "scipy", "torch", "matplotlib")) -> None:
    """Before any of them is imported: are the requirements installed? A script of this project run without
    them still answers --help (its docstring; the list of flags needs them) and otherwise says in one line what
    to install, exit code 2. Imported from elsewhere (a notebook, a test), the usual ModuleNotFoundError.
    Every script imports model.py before any other requirement, so that this runs first."""
    import importlib.util
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if not missing:
        return
    message = f"needs {', '.join(missing)}: pip install -r requirements.txt"
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or ""
    if os.path.dirname(os.path.abspath(script)) != os.path.dirname(os.path.abspath(__file__)):
        raise ModuleNotFoundError(message, name=missing[0])
    name = os.path.basename(script)
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print((main.__doc__ or name).strip())
        print(f"\n(the full list of {name}'s flags {message})")
        sys.exit(0)
    sys.stderr.write(f"{name}: error: {message}\n")
    sys.exit(2)


check_requirements()

import numpy
import torch
import torch.distributed as dist
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
    """RoPE's inverse frequencies theta^(-2i/hd), i < hd/2, float32, rescaled by config.rope_type:
    default  unchanged;
    linear   all divided by rope_factor (positions stretched by that factor);
    llama3   Llama 3.1's rule: wavelengths shorter than original_context / high_freq_factor are kept,
             those longer than original_context / low_freq_factor are divided by rope_factor, and the
             band between is interpolated linearly in original_context / wavelength."""
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
    """Rotate (x_i, x_{i+hd/2}) by angle t * inv_freq_i: the "rotate-half" layout of Hugging Face
    LLaMA / Qwen / Mistral checkpoints (not Meta's interleaved pairs). Scores q_m . k_n then depend
    on m - n only."""
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
    """Attention weights (B, H, T, T), float32, from scores q.k / sqrt(hd) over the allowed keys. Beside
    softmax, the sink controls of Section 6.2's comparison, each a few lines:
      softmax1  exp(s_j) / (1 + sum_k exp(s_k)): one extra zero logit per row, with a zero value, so a
                head can attend to "nothing" (Miller 2023, "Attention is off by one");
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


def allowed_keys(T: int, window: Optional[int], device=None) -> torch.Tensor:
    """(T, T) bool, True where query t may attend to key s: s <= t, and t - s < window if a window is set."""
    t = torch.arange(T, device=device)
    allowed = t[None, :] <= t[:, None]
    if window is not None:
        allowed &= t[None, :] > t[:, None] - window
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
        allowed = mask if mask is not None else (allowed_keys(T, window, x.device) if window or explicit else None)
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
        h = self.c_fc(x)
        act = self.activation
        if act == "swiglu":
            h = F.silu(self.c_gate(x)) * h
        elif act in ("gelu", "gelu_tanh"):
            h = F.gelu(h, approximate="tanh" if act == "gelu_tanh" else "none")
        else:
            h = {"relu": F.relu, "tanh": torch.tanh, "silu": F.silu}[act](h)
        return self.c_proj(h)


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
        """idx (B, T) token ids -> (logits, loss). With targets (B, T): logits at every position and the
        mean next-token cross-entropy (targets -1 are ignored); without: the last position's logits
        (B, vocab) and None. Token ids are not range-checked here (that would sync a GPU every call):
        check_token_ids checks them where data enters."""
        x = self._embed(idx, None)
        rope = self._rope(x)
        for block in self.transformer.h:
            x = block(x, rope)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.unembed(x[:, -1]), None       # the LM head on the last position only
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
        rope = self._rope(x)
        states, per_layer, finite = [keep(x)], [], [torch.isfinite(x).all()]
        for block in self.transformer.h:
            rec = {k: None for k, wanted in (("attn_probs", attn_probs), ("head_out", head_out)) if wanted}
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
        raise_if_nonfinite(torch.stack(finite), self.config.n_layer)
        out = {}
        if hidden:
            out["hidden"] = states
        for key, wanted in (("attn_probs", attn_probs), ("head_out", head_out)):
            if wanted:     # MLP-only blocks have no attention: they add nothing
                out[key] = [rec[key] for rec in per_layer if rec[key] is not None]
        if logits:
            out["logits"] = last_logits
        return out

    def unembed(self, x):
        """The LM head: final-norm states -> logits."""
        return F.linear(x, self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight)

    def num_params(self, include_embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if not include_embeddings:
            n -= self.transformer.wte.weight.numel()
            if self.lm_head is not None:
                n -= self.lm_head.weight.numel()
            if "wpe" in self.transformer:
                n -= self.transformer.wpe.weight.numel()
        return n

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

    @classmethod
    def from_checkpoint(cls, path: str, device="cpu") -> "GPT":
        """Rebuild the model of a train.py checkpoint from the file alone (config + weights). Weights that
        hold NaN or inf are refused."""
        ckpt = read_checkpoint(path)
        with torch.device("meta"):      # shapes only; the weights come from the file
            model = cls(GPTConfig(**ckpt["config"]))
        model = model.to_empty(device=device)
        expected, got = model.state_dict(), ckpt["model"]
        if not all(isinstance(v, torch.Tensor) for v in got.values()):
            raise ValueError(f"{path}: its 'model' entry holds something other than weight tensors")
        wrong = sorted(set(expected) ^ set(got)) + sorted(
            k for k in set(expected) & set(got) if expected[k].shape != got[k].shape)
        if wrong:
            raise ValueError(f"{path}: weights do not match the config stored beside them "
                             f"(first mismatches: {wrong[:5]}); the file is damaged or was edited")
        model.load_state_dict(got)
        return check_model_weights_finite(model, path)

    @classmethod
    def from_pretrained(cls, path: str, device="cpu", dtype: Optional[torch.dtype] = None) -> "GPT":
        """A Hugging Face directory (config.json + *.safetensors) of a supported family, without the
        transformers library. The model is built in the checkpoint's dtype (bf16 stays bf16; `dtype`
        overrides) and filled tensor by tensor, so loading peaks near the checkpoint's own size."""
        config, hf = read_hf_config(path)
        shards = hf_shards(path)
        headers = {s: read_safetensors_header(s) for s in shards}
        dtype = dtype or widest_float_dtype(headers)
        with torch.device("meta"):
            model = cls(config).to(dtype)        # dtype on the meta device: nothing allocated yet
        model = model.to_empty(device=device)
        load_hf_weights(model, headers, hf["architectures"][0], path)
        return check_model_weights_finite(model, path)


@torch.compiler.disable      # a host sync and a raise: a compiled trace (probe.py --compile) runs it eagerly
def raise_if_nonfinite(finite: torch.Tensor, n_layer: int) -> None:
    """NaN/inf activations are an error, never a result. `finite` holds one flag per state of a pass (the
    input, each block, the final norm, then the logits if computed), gathered on the device, so the check
    costs one host sync per pass; the error names the first state that went bad."""
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


def check_token_ids(idx: torch.Tensor, vocab_size: int, where: str = "the input") -> torch.Tensor:
    """Token ids must index the embedding table; checked once where data enters (one host sync)."""
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise ValueError(f"token ids of {where} must lie in [0, {vocab_size}); got min {int(idx.min())}, max "
                         f"{int(idx.max())} -- is it tokenized for this model's vocabulary?")
    return idx


def read_model_config(path) -> GPTConfig:
    """The GPTConfig of any model this project reads, without reading its weights: for the checks a
    script makes before any work (context length, vocabulary, layer indices). The weight files are checked
    as far as that costs nothing: a Hugging Face directory's tensor names, shapes and sizes against its
    config.json; a checkpoint's file structure (memory-mapped)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path!r}: give a train.py checkpoint (.pt) or a Hugging Face directory")
    if os.path.isdir(path):
        config, hf = read_hf_config(path)
        with torch.device("meta"):      # shapes only: the weight files' headers are checked against them
            plan_hf_weights(GPT(config), {f: read_safetensors_header(f) for f in hf_shards(path)},
                            hf["architectures"][0], path)
        return config
    return GPTConfig(**read_checkpoint(path, mmap=True)["config"])


def check_file_weights_finite(path: str) -> None:
    """Stream every weight of the model at `path` once, tensor by tensor (memory: the largest tensor), and
    refuse one that holds NaN or inf, naming it. For scripts that read several models: all are checked
    before the work on any begins."""
    if os.path.isdir(path):
        for file in hf_shards(path):
            with open(file, "rb") as fh:
                for name, (kind, shape, offset, nbytes) in read_safetensors_header(file).items():
                    dtype = SAFETENSORS_DTYPES.get(kind)
                    if dtype is None or not dtype.is_floating_point:
                        continue
                    fh.seek(offset)
                    t = torch.frombuffer(bytearray(fh.read(nbytes)), dtype=dtype) if nbytes else torch.zeros(0)
                    if not torch.isfinite(t).all():
                        raise nonfinite_weight(path, name, t)
        return
    for name, t in read_checkpoint(path, mmap=True)["model"].items():
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise nonfinite_weight(path, name, t)


def check_model_weights_finite(model: GPT, where: str) -> GPT:
    """A weight that holds NaN or inf is an error naming it: such a model can only produce fake results."""
    for name, p in model.named_parameters():     # in slices: a whole-tensor check would double the peak memory
        if not all(torch.isfinite(part).all() for part in p.detach().reshape(-1).split(1 << 20)):
            raise nonfinite_weight(where, name, p)
    return model


def nonfinite_weight(where: str, name: str, t: torch.Tensor) -> ValueError:
    return ValueError(f"{where}: weight {name} holds {int((~torch.isfinite(t)).sum())} NaN/inf value(s); the "
                      f"checkpoint is damaged, came from a diverged run, or overflows the dtype it is loaded in")


def load_model(path, device="cpu", dtype: Optional[torch.dtype] = None) -> GPT:
    """Any model this project reads: a train.py checkpoint file or a Hugging Face directory."""
    path, device = os.fspath(path), resolve_device(str(device))
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ValueError(f"a model loads in a floating-point dtype ({', '.join(DTYPES)}), not {dtype}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path!r}: give a train.py checkpoint (.pt) or a Hugging Face directory")
    if os.path.isdir(path):
        return GPT.from_pretrained(path, device=device, dtype=dtype)
    model = GPT.from_checkpoint(path, device=device)      # checked finite as stored ...
    return check_model_weights_finite(model.to(dtype), path) if dtype is not None else model   # ... and as cast


# ----------------------------------------------------------------------------- random inputs, one way for every script

def seed_of(*parts) -> int:
    """A 63-bit seed from any parts (a seed and a name, a seed and an index), the same in every process:
    sha256, not hash(), which Python salts per process. Generators seeded this way are independent."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def random_batches(kind: str, n: int, T: int, batch_size: int, seed: int, vocab: int = None, width: int = None,
                   mean: float = 0.0, std: float = 1.0, low: int = 0):
    """n random input sequences of T positions, in CPU batches of batch_size, the same whatever the batch size
    and whatever device they are moved to. kind="tokens": ids uniform in [low, vocab), all drawn at once from one
    seeded CPU generator, (b, T) int64. kind="gaussian": vectors N(mean, std^2) of `width` (Section 4.1's stand-in
    for tokens, without repeats), each sequence from its own CPU generator seeded by (seed, its index), (b, T, width)."""
    if kind == "tokens":
        ids = torch.randint(low, vocab, (n, T), generator=torch.Generator().manual_seed(seed))
        yield from ids.split(batch_size)
    elif kind == "gaussian":
        for start in range(0, n, batch_size):
            yield torch.stack([torch.randn(T, width, generator=torch.Generator().manual_seed(seed_of(seed, i)))
                               for i in range(start, min(start + batch_size, n))]) * std + mean
    else:
        raise ValueError(f"unknown input kind {kind!r}: choose 'tokens' or 'gaussian'")


# ----------------------------------------------------------------------------- checkpoints: written and read here
# One file per checkpoint, a dict saved with torch.save: "config" (the GPTConfig's fields), "model" (the state
# dict), "step", and whatever the writer adds: train.py stores "optimizer", "rng", "args", "seeds",
# "tokenizer", "init_from", "data_meta" and "provenance". Read with weights_only=True: data, never code.

def write_checkpoint(path: str, model: GPT, step: int = 0, **meta) -> None:
    """Save `model` (and any metadata) as a checkpoint, atomically: a run killed mid-write leaves the old file
    or the new one. GPT.from_checkpoint (or load_model) rebuilds the model from the file alone."""
    state = dict(config=dataclasses.asdict(model.config), model=model.state_dict(), step=step,
                 provenance=provenance(next(model.parameters()).device, next(model.parameters()).dtype), **meta)
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def read_checkpoint(path, mmap: bool = False) -> dict:
    """A train.py checkpoint as a dict: config, model (state dict), optimizer, step, seeds,
    tokenizer, args, ... Loaded with weights_only=True: a checkpoint is data, never code.
    mmap=True maps the tensors instead of reading them: cheap when only the config is wanted."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        hint = (" (a Hugging Face directory: a checkpoint file is wanted here; write one with "
                "model.write_checkpoint(PATH, GPT.from_pretrained(DIR)))" if os.path.isdir(path) else "")
        raise FileNotFoundError(f"no checkpoint file at {path!r}{hint}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:     # torch raises many kinds (zip, pickle, EOF) for an empty, cut or foreign file
        why = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} is not a readable train.py checkpoint: empty, truncated, or another format "
                         f"({why})") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("config"), dict) or not isinstance(ckpt.get("model"), dict):
        raise ValueError(f"{path} is not a train.py checkpoint (it has no 'config' and 'model' entries)")
    known = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(ckpt["config"]) - known)
    if unknown:
        raise ValueError(f"{path} has config knobs this model.py does not know: {unknown}")
    try:
        GPTConfig(**ckpt["config"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: its config is invalid: {e}") from None
    return ckpt


# ----------------------------------------------------------------------------- Hugging Face checkpoints
# config.json is read field by field. Every field that changes the forward pass is understood, in both
# spellings found on the Hub (transformers 4.x: rope_theta + rope_scaling; 5.x: rope_parameters); a
# field absent from the file takes the value transformers' own config class gives it; a field present
# but not understood is an error naming it. Nothing is approximated in silence.

HF_FAMILIES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel")

# transformers' class defaults of the fields a config.json may leave out
HF_DEFAULTS = {
    "LlamaForCausalLM": dict(num_key_value_heads=None, head_dim=None, max_position_embeddings=2048,
                             rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
    "MistralForCausalLM": dict(num_key_value_heads=8, head_dim=None, max_position_embeddings=131072,
                               rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=4096),
    "Qwen2ForCausalLM": dict(num_key_value_heads=32, max_position_embeddings=32768, rms_norm_eps=1e-6,
                             tie_word_embeddings=False, use_sliding_window=False, sliding_window=4096,
                             max_window_layers=28),
    "Qwen3ForCausalLM": dict(num_key_value_heads=32, head_dim=128, max_position_embeddings=32768,
                             rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
                             use_sliding_window=False, sliding_window=4096, max_window_layers=28),
}

# fields that never change the forward pass of a causal LM in eval mode: bookkeeping, token ids,
# initialization, dropout, caching, generation defaults, heads other than the LM head
HF_INERT = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "_model_name_or_path", "name_or_path", "_commit_hash", "bos_token_id", "eos_token_id", "pad_token_id",
    "unk_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range", "initializer_factor",
    "attention_dropout", "hidden_dropout", "dropout", "attn_pdrop", "embd_pdrop", "resid_pdrop", "use_cache",
    "output_attentions", "output_hidden_states", "return_dict", "use_return_dict", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward", "is_decoder", "problem_type", "id2label",
    "label2id", "finetuning_task", "prefix", "tokenizer_class", "task_specific_params", "max_length",
    "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "pretraining_tp",               # LLaMA: the same matmuls, split in slices
    "reorder_and_upcast_attn", "n_ctx",   # GPT-2: float32 upcast of the scores; a legacy alias of n_positions
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
}
# fields that are inert only at these values
HF_INERT_IF = {"is_encoder_decoder": False, "add_cross_attention": False, "pruned_heads": {},
               "tie_encoder_decoder": False}

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                    "gelu_accurate": "gelu_tanh", "gelu_python_tanh": "gelu_tanh", "gelu": "gelu",
                    "gelu_python": "gelu", "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}


# The type of every field the loader reads (null always means "absent"): a value of another type is refused
# by name before it is interpreted, so "12", 12.5, true or -4 never becomes a model.
POSITIVE_INT, NONNEGATIVE_INT, POSITIVE_FLOAT, BOOL, STR = "an integer >= 1", "an integer >= 0", \
    "a finite number > 0", "true or false", "a string"
HF_FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "max_position_embeddings", "head_dim", "sliding_window", "n_positions",
                     "n_layer", "n_head", "n_embd", "n_inner", "original_max_position_embeddings"), POSITIVE_INT),
    "max_window_layers": NONNEGATIVE_INT,
    **dict.fromkeys(("rms_norm_eps", "layer_norm_epsilon", "rope_theta", "factor", "low_freq_factor",
                     "high_freq_factor", "partial_rotary_factor"), POSITIVE_FLOAT),
    **dict.fromkeys(("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "scale_attn_weights",
                     "scale_attn_by_inverse_layer_idx"), BOOL),
    **dict.fromkeys(("hidden_act", "activation_function", "rope_type", "type"), STR),
}


def _type_ok(value, kind: str) -> bool:
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind == POSITIVE_FLOAT:
        return math.isfinite(value) and value > 0
    return isinstance(value, int) and value >= (1 if kind == POSITIVE_INT else 0)


def check_hf_field_types(hf: dict) -> None:
    """Refuse, by name, any read field (also inside rope_scaling / rope_parameters) of the wrong type or range."""
    for where, fields in [("", hf)] + [(f"{key}.", hf[key]) for key in ("rope_scaling", "rope_parameters")
                                       if isinstance(hf.get(key), dict)]:
        for key, value in fields.items():
            kind = HF_FIELD_TYPES.get(key)
            if kind and value is not None and not _type_ok(value, kind):
                raise ValueError(f"field {where}{key} must be {kind}, got {value!r}")
    for key in ("rope_scaling", "rope_parameters"):
        if hf.get(key) is not None and not isinstance(hf[key], dict):
            raise ValueError(f"field {key} must be an object or null, got {hf[key]!r}")
    for key in ("architectures", "layer_types"):
        value = hf.get(key, [] if key == "layer_types" else None)
        if value is not None and (not isinstance(value, list) or not all(isinstance(a, str) for a in value)):
            raise ValueError(f"field {key} must be a list of names, got {value!r}")


def _need(fields: dict, key: str, where: str = "config.json"):
    if key not in fields or fields[key] is None:
        raise ValueError(f"{where} lacks the field {key!r}")
    return fields.pop(key)


def hf_config(hf: dict) -> GPTConfig:
    """The GPTConfig of a Hugging Face config.json dict. Raises ValueError naming any field, value or
    architecture this model cannot reproduce exactly."""
    if not isinstance(hf, dict):
        raise ValueError(f"config.json must hold a JSON object, got {type(hf).__name__}")
    check_hf_field_types(hf)
    arch = (hf.get("architectures") or [None])[0]
    if arch not in HF_FAMILIES:
        raise ValueError(f"unsupported architecture {arch!r}; model.py loads exactly {', '.join(HF_FAMILIES)}. "
                         f"For any other family, fingerprint a model you load yourself: seedprint.fingerprint "
                         f"accepts a callable ids -> final-norm last-token states (see docs/real_checkpoints.md)")
    fields = {k: v for k, v in hf.items() if k not in HF_INERT}   # every field is popped as it is read
    for key, inert in HF_INERT_IF.items():
        if key in fields and fields.pop(key) not in (inert, None):
            raise ValueError(f"config.json sets {key}={hf[key]!r}; model.py loads decoder-only causal LMs only")
    config = _gpt2_config(fields) if arch == "GPT2LMHeadModel" else _llama_family_config(fields, arch)
    if fields:
        raise ValueError(f"config.json field(s) {sorted(fields)} of this {arch} are not understood by model.py; "
                         f"a field it cannot read may change the forward pass, so the checkpoint is refused "
                         f"rather than loaded approximately")
    return config


def _gpt2_config(f: dict) -> GPTConfig:
    act = f.pop("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise ValueError(f"unsupported GPT-2 activation_function {act!r}; known: {sorted(GPT2_ACTIVATIONS)}")
    for key, expected in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if f.pop(key, expected) != expected:
            raise ValueError(f"GPT-2 config sets {key}={not expected}: attention scaled other than by "
                             f"1/sqrt(head_dim) is not supported")
    return GPTConfig(block_size=_need(f, "n_positions"), vocab_size=_need(f, "vocab_size"), n_layer=_need(f, "n_layer"),
                     n_head=_need(f, "n_head"), n_embd=_need(f, "n_embd"), mlp_hidden=f.pop("n_inner", None),
                     norm="layernorm", norm_eps=f.pop("layer_norm_epsilon", 1e-5), position="learned",
                     activation=GPT2_ACTIVATIONS[act], bias=True, tie_embeddings=f.pop("tie_word_embeddings", True))


def _llama_family_config(f: dict, arch: str) -> GPTConfig:
    """LLaMA, Mistral, Qwen2 and Qwen3 share the block (RMSNorm, RoPE, SwiGLU, GQA); they differ in
    biases, q/k norm, head width and sliding windows."""
    d = HF_DEFAULTS[arch]
    get = lambda key: f.pop(key, d.get(key))
    act = f.pop("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"unsupported hidden_act {act!r} for {arch}: its gated MLP is SwiGLU (silu)")
    H, n_embd, L = _need(f, "num_attention_heads"), _need(f, "hidden_size"), _need(f, "num_hidden_layers")
    max_pos, head_dim = get("max_position_embeddings"), get("head_dim")
    # biases: LLaMA reads attention_bias (q, k, v, o) and mlp_bias, Qwen3 attention_bias; Qwen2 always
    # has q, k, v biases; a bias field the family's transformers class ignores must not claim biases
    reads = {"LlamaForCausalLM": ("attention_bias", "mlp_bias"), "Qwen3ForCausalLM": ("attention_bias",)}.get(arch, ())
    bias = {key: bool(f.pop(key, d.get(key, False))) for key in ("attention_bias", "mlp_bias")}
    for key, on in bias.items():
        if on and key not in reads:
            raise ValueError(f"config.json sets {key}=true, which transformers' {arch} does not read")
    rope = _hf_rope(f, max_pos)
    window = _hf_sliding_window(f, arch, d, L)
    return GPTConfig(block_size=max_pos, vocab_size=_need(f, "vocab_size"), n_layer=L, n_head=H,
                     n_kv_head=get("num_key_value_heads") or H, n_embd=n_embd,
                     head_size=head_dim if head_dim not in (None, n_embd // H) else None,
                     mlp_hidden=_need(f, "intermediate_size"), norm="rmsnorm", norm_eps=get("rms_norm_eps"),
                     activation="swiglu", position="rope", **rope, sliding_window=window,
                     qk_norm=arch == "Qwen3ForCausalLM", bias=False, qkv_bias=arch == "Qwen2ForCausalLM",
                     attn_bias=bias["attention_bias"], mlp_bias=bias["mlp_bias"],
                     tie_embeddings=bool(get("tie_word_embeddings")))


def _hf_rope(f: dict, max_pos: int) -> dict:
    """RoPE's knobs from either spelling: 4.x rope_theta + rope_scaling, or 5.x rope_parameters."""
    theta = f.pop("rope_theta", None)
    scaling, params = f.pop("rope_scaling", None), f.pop("rope_parameters", None)
    if scaling and params and scaling != params:
        raise ValueError(f"config.json has both rope_scaling {scaling} and rope_parameters {params}, and they differ")
    p = dict(scaling or params or {})
    if any(isinstance(v, dict) for v in p.values()):
        raise ValueError(f"per-layer-type RoPE parameters {sorted(p)} are not supported")
    kind, old_kind = p.pop("rope_type", None), p.pop("type", None)    # "type" is the older spelling
    if kind and old_kind and kind != old_kind:
        raise ValueError(f"RoPE parameters name two types: rope_type={kind!r}, type={old_kind!r}")
    kind = kind or old_kind or "default"
    theta = p.pop("rope_theta", theta if theta is not None else 10000.0)   # rope_parameters' own value wins
    for src in (p, f):
        if src.pop("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError("partial_rotary_factor != 1 (RoPE on part of each head) is not supported")
    out = dict(rope_theta=float(theta))
    if kind == "linear":
        out.update(rope_type="linear", rope_factor=float(_need(p, "factor", "rope scaling")))
    elif kind == "llama3":
        out.update(rope_type="llama3", rope_factor=float(_need(p, "factor", "rope scaling")),
                   rope_low_freq_factor=float(_need(p, "low_freq_factor", "rope scaling")),
                   rope_high_freq_factor=float(_need(p, "high_freq_factor", "rope scaling")),
                   rope_original_context=int(p.pop("original_max_position_embeddings", max_pos)))
    elif kind != "default":
        raise ValueError(f"RoPE type {kind!r} is not supported; model.py computes 'default', 'linear' and "
                         f"'llama3' exactly")
    if p:
        raise ValueError(f"RoPE parameter(s) {sorted(p)} are not understood for rope_type {kind!r}")
    return out


def _hf_sliding_window(f: dict, arch: str, defaults: dict, n_layer: int) -> Optional[int]:
    """The one window every layer uses, or None; per-layer windows are refused."""
    if arch == "LlamaForCausalLM":
        return None
    window = f.pop("sliding_window", defaults["sliding_window"])
    layers = f.pop("layer_types", None)
    if arch == "MistralForCausalLM":
        kinds = set(layers or ["sliding_attention"])
    else:   # Qwen2 / Qwen3: a window only with use_sliding_window, and then from layer max_window_layers on
        on, first = f.pop("use_sliding_window", False), f.pop("max_window_layers", defaults["max_window_layers"])
        window = window if on else None
        kinds = set(layers) if layers else {"sliding_attention" if window is not None and i >= first
                                            else "full_attention" for i in range(n_layer)}
    if not kinds <= {"sliding_attention", "full_attention"}:
        raise ValueError(f"layer_types {sorted(kinds)} are not supported")
    windows = {window if kind == "sliding_attention" else None for kind in kinds}
    if len(windows) > 1:
        raise ValueError(f"this {arch} mixes full and sliding-window ({window}) layers; model.py applies one "
                         f"window to every layer or none")
    return windows.pop()


def read_json(path: str, what: str = "JSON"):
    """A JSON file's content; a missing, unreadable or malformed file is one error naming it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: {'is a directory, not' if os.path.isdir(path) else 'no'} {what} file")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid {what} ({e})") from None


def read_hf_config(path: str):
    """(GPTConfig, the raw config.json dict) of a Hugging Face directory."""
    if not os.path.isdir(path):
        what = "a file; a train.py checkpoint is read by read_checkpoint" if os.path.isfile(path) else "no such directory"
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory (config.json + *.safetensors): {what}")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory (no config.json)")
    hf = read_json(cfg_path, "config.json")
    try:
        return hf_config(hf), hf
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {str(e).removeprefix('config.json ')}") from None


def hf_shards(path: str) -> list:
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        weight_map = read_json(index, "safetensors index")
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index} has no weight_map object of tensor name -> shard file")
        names = sorted(set(weight_map.values()))
    else:
        names = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not names:
        raise FileNotFoundError(f"no *.safetensors weights in {path!r} (.bin pickles are not loaded: they run code)")
    missing = [n for n in names if not os.path.isfile(os.path.join(path, n))]
    if missing:
        raise FileNotFoundError(f"{path}: shard(s) {missing} named in model.safetensors.index.json are missing")
    return [os.path.join(path, n) for n in names]


# safetensors: 8 bytes little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
# then the raw little-endian bytes. Read with plain file reads straight into the parameters' memory:
# no memory map, so a process's peak memory is the model's own size, not the model plus the file.
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors_header(file: str) -> dict:
    """{tensor name: (dtype name, shape, absolute byte offset, byte length)} of one .safetensors file.
    An empty, truncated or foreign file is one error naming it, found here, before any weight is read."""
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{file}: {'is a directory, not' if os.path.isdir(file) else 'no'} .safetensors file")
    size = os.path.getsize(file)
    bad = lambda why: ValueError(f"{file} is not a valid .safetensors file ({why})")
    with open(file, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise bad(f"{size} bytes, shorter than its 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise bad(f"its header claims {n} bytes, the file holds {size - 8}; truncated, or not safetensors")
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise bad("its header is not JSON") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        ok = isinstance(e, dict) and isinstance(e.get("dtype"), str) and isinstance(e.get("shape"), list) \
            and all(isinstance(s, int) and s >= 0 for s in e["shape"]) and isinstance(e.get("data_offsets"), list) \
            and len(e["data_offsets"]) == 2 and all(isinstance(o, int) for o in e["data_offsets"]) \
            and 0 <= e["data_offsets"][0] <= e["data_offsets"][1]
        if not ok:
            raise bad(f"tensor {name!r} has no valid dtype, shape and data_offsets")
        if 8 + n + e["data_offsets"][1] > size:
            raise bad(f"tensor {name!r} ends at byte {8 + n + e['data_offsets'][1]} of a {size}-byte file; truncated")
        out[name] = (e["dtype"], tuple(e["shape"]), 8 + n + e["data_offsets"][0],
                     e["data_offsets"][1] - e["data_offsets"][0])
    return out


def widest_float_dtype(headers: dict) -> torch.dtype:
    """The widest floating dtype among the tensors: the model is built in it, so no weight is rounded."""
    found = {SAFETENSORS_DTYPES.get(e[0]) for h in headers.values() for e in h.values()}
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        if dtype in found:
            return dtype
    raise ValueError("the checkpoint holds no floating-point tensor this loader reads (F64/F32/BF16/F16)")


def hf_tensor_targets(config: GPTConfig, arch: str) -> dict:
    """Hugging Face tensor name (prefix "model." / "transformer." stripped) -> (this model's parameter,
    its rows the tensor fills -- None for all of them --, transpose). q, k and v fill row ranges of
    the fused c_attn; GPT-2 stores Conv1D weights as (in, out), so they are transposed."""
    whole = lambda name, transpose=False: (name, None, transpose)
    t = {}
    if arch == "GPT2LMHeadModel":
        t.update({name: whole("transformer." + name) for name in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")})
        for i in range(config.n_layer):
            o = f"transformer.h.{i}."
            for name in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.bias", "attn.c_proj.bias",
                         "mlp.c_fc.bias", "mlp.c_proj.bias"):
                t[f"h.{i}.{name}"] = whole(o + name)
            for name in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"):
                t[f"h.{i}.{name}"] = whole(o + name, transpose=True)
    else:
        t.update({"embed_tokens.weight": whole("transformer.wte.weight"), "norm.weight": whole("transformer.ln_f.weight")})
        q, k, v = qkv_sizes(config)
        rows = dict(q=slice(0, q), k=slice(q, q + k), v=slice(q + k, q + k + v))
        for i in range(config.n_layer):
            p, o = f"layers.{i}.", f"transformer.h.{i}."
            for kind in ["weight"] + (["bias"] if config.qkv_bias or config.attn_bias else []):
                for proj in "qkv":
                    t[p + f"self_attn.{proj}_proj.{kind}"] = (o + f"attn.c_attn.{kind}", rows[proj], False)
            for kind in ["weight"] + (["bias"] if config.attn_bias else []):
                t[p + f"self_attn.o_proj.{kind}"] = whole(o + f"attn.c_proj.{kind}")
            if config.qk_norm:
                t[p + "self_attn.q_norm.weight"] = whole(o + "attn.q_norm.weight")
                t[p + "self_attn.k_norm.weight"] = whole(o + "attn.k_norm.weight")
            t[p + "input_layernorm.weight"] = whole(o + "ln_1.weight")
            t[p + "post_attention_layernorm.weight"] = whole(o + "ln_2.weight")
            for hf_name, ours in (("up_proj", "c_fc"), ("gate_proj", "c_gate"), ("down_proj", "c_proj")):
                for kind in ["weight"] + (["bias"] if config.mlp_bias else []):
                    t[p + f"mlp.{hf_name}.{kind}"] = whole(o + f"mlp.{ours}.{kind}")
    if not config.tie_embeddings:
        t["lm_head.weight"] = whole("lm_head.weight")
    return t


def _hf_skipped(name: str, config: GPTConfig) -> bool:
    """Tensors that are not weights of the forward pass: GPT-2's causal-mask buffers, old checkpoints'
    RoPE tables, and a tied model's saved copy of its embedding."""
    return (name.endswith((".attn.bias", ".attn.masked_bias")) and name.startswith("h.")) or \
        name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and config.tie_embeddings)


def plan_hf_weights(model: GPT, headers: dict, arch: str, where: str) -> list:
    """Check every tensor of the safetensors headers against `model` (which may live on the meta device)
    before any weight is read: a missing, unknown, misshapen or mis-sized tensor is an error naming it.
    Returns the reads: (file, HF name, parameter name, rows, transpose, dtype, offset, nbytes)."""
    config = model.config
    targets = hf_tensor_targets(config, arch)
    params = dict(model.named_parameters())
    rows_filled = {name: 0 for name in params}
    prefix = "transformer." if arch == "GPT2LMHeadModel" else "model."
    plan = []
    for file, header in headers.items():
        for hf_name, (kind, shape, offset, nbytes) in header.items():
            name = hf_name[len(prefix):] if hf_name.startswith(prefix) else hf_name
            if _hf_skipped(name, config):
                continue
            if name not in targets:
                raise ValueError(f"{where}: tensor {hf_name!r} is not part of a {arch} with this config.json")
            if kind not in SAFETENSORS_DTYPES or not SAFETENSORS_DTYPES[kind].is_floating_point:
                raise ValueError(f"{where}: tensor {hf_name!r} has dtype {kind}; only F64/F32/BF16/F16 load")
            param_name, rows, transpose = targets[name]
            dest = params[param_name][rows] if rows is not None else params[param_name]
            want = tuple(dest.shape[::-1] if transpose else dest.shape)
            if shape != want:
                raise ValueError(f"{where}: tensor {hf_name!r} has shape {list(shape)}, config.json implies {list(want)}")
            dtype = SAFETENSORS_DTYPES[kind]
            if math.prod(shape) * dtype.itemsize != nbytes:
                raise ValueError(f"{where}: the header of {file} gives tensor {hf_name!r} {nbytes} bytes for "
                                 f"{kind} {list(shape)}; the file is damaged")
            rows_filled[param_name] += dest.shape[0]
            plan.append((file, hf_name, param_name, rows, transpose, dtype, offset, nbytes))
    missing = [n for n, p in params.items() if rows_filled[n] != p.shape[0]]
    if missing:
        raise ValueError(f"{where}: the tensors for {missing[:5]}{' ...' if len(missing) > 5 else ''} of a {arch} "
                         f"are missing from the checkpoint (or stored twice)")
    return plan


@torch.no_grad()
def load_hf_weights(model: GPT, headers: dict, arch: str, where: str) -> None:
    """Fill every parameter of `model` from the safetensors files, one tensor at a time, after
    plan_hf_weights has checked them all."""
    params = dict(model.named_parameters())
    handles = {}
    try:
        plan = plan_hf_weights(model, headers, arch, where)
        for file, hf_name, param_name, rows, transpose, dtype, offset, nbytes in plan:
            fh = handles.get(file) or handles.setdefault(file, open(file, "rb"))
            dest = params[param_name][rows] if rows is not None else params[param_name]
            fh.seek(offset)
            if dtype == dest.dtype and not transpose and dest.device.type == "cpu" and dest.is_contiguous():
                buf = dest                                   # read straight into the parameter
            else:
                buf = torch.empty(tuple(dest.shape[::-1]) if transpose else tuple(dest.shape), dtype=dtype)
            if fh.readinto(memoryview(buf.view(torch.uint8).numpy()).cast("B")) != nbytes:
                raise ValueError(f"{where}: {file} ends inside tensor {hf_name!r}; the file is truncated")
            if buf is not dest:
                dest.copy_(buf.T if transpose else buf)
    finally:
        for fh in handles.values():
            fh.close()


# ----------------------------------------------------------------------------- tokenizers

def get_tokenizer(name: str):
    """(encode, decode, vocab_size) for "bytes" (UTF-8 bytes, vocab 256, offline), "gpt2" (tiktoken
    BPE), or a Hugging Face directory holding tokenizer.json (the `tokenizers` library). Each library is
    imported only here, only when asked for. No special tokens are added: --bos does that explicitly."""
    if name == "bytes":
        return (lambda text: list(text.encode("utf-8")),
                lambda ids: bytes(int(i) for i in ids).decode("utf-8", errors="replace"), 256)
    if name == "gpt2":
        import tiktoken                    # only for GPT-2's tokenizer (it downloads its files)
        try:
            enc = tiktoken.get_encoding("gpt2")   # downloads the BPE files unless TIKTOKEN_CACHE_DIR has them
        except Exception as e:
            raise OSError("tiktoken could not load the GPT-2 BPE files (offline?). Point TIKTOKEN_CACHE_DIR "
                          "at a cache that holds them, or use --tokenizer bytes") from e
        return (lambda text: enc.encode_ordinary(text)), enc.decode, enc.n_vocab
    file = os.path.join(name, "tokenizer.json") if os.path.isdir(name) else name
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no tokenizer {name!r}: give bytes, gpt2, or a directory with tokenizer.json"
                                + (f" ({name} has none)" if os.path.isdir(name) else ""))
    from tokenizers import Tokenizer       # optional dependency: pip install tokenizers
    try:
        tok = Tokenizer.from_file(file)
    except Exception as e:                 # the Rust library raises its own exception type
        raise ValueError(f"{file} is not a readable tokenizer.json ({str(e)[:120]})") from None
    return ((lambda text: tok.encode(text, add_special_tokens=False).ids), tok.decode,
            tok.get_vocab_size(with_added_tokens=True))


# ----------------------------------------------------------------------------- command line

SEED_LIMIT = 2 ** 63            # seeds lie in [0, 2^63): numpy and torch take no other


def seed_int(s: str) -> int:
    """An argparse type for seeds: an integer in [0, SEED_LIMIT)."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is an integer, got {s!r}") from None
    if not 0 <= v < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"a seed lies in [0, 2^63), got {v}")
    return v


def check_output(path: str, flag: str = "--out") -> str:
    """An output directory given on the command line, checked before any work: not empty, not a file, and
    not under a file."""
    if not path:
        raise ValueError(f"{flag} is empty; give a directory")
    here = os.path.abspath(path)
    while here and not os.path.exists(here):
        here = os.path.dirname(here)
    if os.path.exists(path) and not os.path.isdir(path) or (here and not os.path.isdir(here)):
        culprit = here if here != os.path.abspath(path) else path
        raise FileExistsError(f"{flag} {path}: {culprit} is a file, not a directory")
    return path


def parse_bool(s: str) -> bool:
    low = str(s).lower()
    if low in ("1", "true", "on", "yes"):
        return True
    if low in ("0", "false", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on/off, got {s!r}")


def add_config_flags(parser: argparse.ArgumentParser, default_model: Optional[str] = "gpt2-nano") -> None:
    """--model PRESET plus one flag per GPTConfig knob (--n_layer 4, --calibration attenuate, ...).
    Knobs left unset are None, so a caller can tell which ones were given."""
    parser.add_argument("--model", default=default_model, help=f"preset: {', '.join(PRESETS)}")
    group = parser.add_argument_group("config knobs (override the preset)")
    for f in dataclasses.fields(GPTConfig):
        if f.name in CHOICES:
            group.add_argument(f"--{f.name}", choices=CHOICES[f.name], default=None)
        elif f.type is bool:
            group.add_argument(f"--{f.name}", type=parse_bool, default=None, metavar="on|off")
        else:
            kind = float if f.type is float else int
            group.add_argument(f"--{f.name}", type=kind, default=None, metavar=kind.__name__.upper())


def config_overrides(args: argparse.Namespace) -> dict:
    """The config knobs given on the command line (those not None)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(GPTConfig)
            if getattr(args, f.name, None) is not None}


def config_from_flags(args: argparse.Namespace) -> GPTConfig:
    return get_config(args.model, **config_overrides(args))


def main(argv=None):
    parser = ArgumentParser(prog="model.py", description="List the presets with their parameter counts, or load "
                            "one model and report what loading it cost.")
    parser.add_argument("model", nargs="?", help="a train.py checkpoint or a Hugging Face directory to load")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                        help="load in this dtype (default: the checkpoint's own)")
    parser.add_argument("--out", default="out/model", help="directory for presets.json / load.json")
    args = parser.parse_args(argv)
    check_output(args.out)
    if args.model:
        if not os.path.exists(args.model):
            raise FileNotFoundError(f"no model at {args.model!r}: give a train.py checkpoint or a Hugging Face directory")
        if args.dtype:
            check_dtype_runs(torch.device("cpu"), DTYPES[args.dtype])
        res = report_load(args.model, args.dtype)
        with lock_dir(args.out):
            write_json(os.path.join(args.out, "load.json"), dict(res, provenance=provenance("cpu", args.dtype)))
        return res
    rows = {}
    for name, cfg in PRESETS.items():
        with torch.device("meta"):   # shapes only: no memory, no init
            model = GPT(cfg)
        rows[name] = dict(layers=cfg.n_layer, heads=cfg.n_head, width=cfg.n_embd, mlp=cfg.mlp_width,
                          vocab=cfg.vocab_size, context=cfg.block_size, params=model.num_params(),
                          params_non_embedding=model.num_params(include_embeddings=False))
    print_table([dict(preset=name, **row) for name, row in rows.items()])
    path = os.path.join(args.out, "presets.json")
    with lock_dir(args.out):
        write_json(path, {name: dict(config=dataclasses.asdict(PRESETS[name]), **row) for name, row in rows.items()}
                   | dict(provenance=provenance()))
    print(f"wrote {path}")


def report_load(path: str, dtype: Optional[str]) -> dict:
    """Load one model and report its config, parameter count, load time and the growth of the process's
    peak resident memory against the size of the weight files (Unix: resource.getrusage)."""
    import resource                  # Unix only
    kib = 1 if sys.platform == "darwin" else 1024          # ru_maxrss is bytes on macOS, KiB on Linux
    files = [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors")] \
        if os.path.isdir(path) else [path]
    size = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    before, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib, time.time()
    model = load_model(path, dtype=getattr(torch, dtype) if dtype else None)
    seconds, grown = time.time() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib - before
    p = next(model.parameters())
    res = dict(model=path, params=model.num_params(), dtype=str(p.dtype).replace("torch.", ""), seconds=seconds,
               file_bytes=size, peak_rss_growth_bytes=grown, ratio=grown / size if size else None,
               config=dataclasses.asdict(model.config))
    print(f"{path}: {res['params']:,} parameters in {res['dtype']}, loaded in {seconds:.1f} s; peak memory grew by "
          f"{grown / 2**30:.2f} GiB for {size / 2**30:.2f} GiB of weight files ({res['ratio']:.3f}x)")
    return res


# ----------------------------------------------------------------------------- plumbing shared by the scripts
# Every script imports model.py, so the few helpers they all need live here once: copying model.py and
# one script is enough to run it.

# Dense bf16 peak of known GPUs (flop/s), matched as a substring of torch.cuda.get_device_name, more
# specific names first: MFU = achieved flop/s / this. train.py's --peak_tflops overrides it.
BF16_PEAK_FLOPS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12,
                   "A10G": 70e12, "RTX 4090": 165e12}


def forward_flops(model: "GPT", seq_len: int, logits_positions: int = 1) -> float:
    """Forward flops of one sequence of T = seq_len tokens, 2 per multiply-add, as the probes' and fingerprints'
    TFLOP/s and MFU count them:
      - each weight matrix once per token (embedding lookups, biases and norm gains are not matmuls);
      - 4 H hd per attended (query, key) pair and layer: its score and its weighted value. Causal attention
        attends T (T + 1) / 2 pairs (fewer with a sliding window); uniform attention is a running sum, no matmul;
      - the LM head on `logits_positions` positions (1: the last only, as the probes; 0: none, a fingerprint).
    train.py's MFU counts as nanoGPT does instead (PaLM's 6 N + 12 L H hd T), so the two compare."""
    cfg = model.config
    tables = [model.transformer.wte.weight]                        # read by lookup (and a head: below)
    tables += [model.transformer.wpe.weight] if "wpe" in model.transformer else []
    tables += [model.lm_head.weight] if model.lm_head is not None else []
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2 and not any(p is t for t in tables))
    w = min(cfg.sliding_window or seq_len, seq_len)
    pairs = w * (w + 1) // 2 + (seq_len - w) * w                  # sum over t of min(t, w) keys
    attends = cfg.sublayers != "mlp" and cfg.attention != "uniform"
    attention = 4 * cfg.n_layer * cfg.n_head * cfg.head_dim * pairs if attends else 0
    return 2 * matrices * seq_len + attention + logits_positions * 2 * cfg.n_embd * cfg.vocab_size


def peak_flops(device) -> Optional[float]:
    """The bf16 peak of `device` from BF16_PEAK_FLOPS, or None (CPU, unknown GPU)."""
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK_FLOPS.items() if key in name), None)


def atomic_write(path: str, write) -> None:
    """write(tmp) to a temp file beside `path`, flush it to disk, then rename it into place: a run killed
    at any moment leaves the old file or the new one, never half a file. For everything a script saves."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: str, obj) -> None:
    def dump(tmp):
        with open(tmp, "w") as fh:
            json.dump(obj, fh, indent=2)
    atomic_write(path, dump)


STARTED = time.time()            # when this process imported model.py: the wall time of a run starts here


def code_version() -> Optional[dict]:
    """The git commit of this file's repository and whether tracked files differ from it; None outside one."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}      # a status that never takes index.lock from a user's commit
    git = lambda *a: subprocess.run(["git", "-C", here, *a], capture_output=True, text=True, timeout=10, env=env)
    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return dict(commit=commit.stdout.strip(), dirty=bool(dirty))
    except (OSError, subprocess.SubprocessError):
        return None


CODE_VERSION = code_version()    # read as the process starts: a long run is recorded as the code it ran, not as
                                 # whatever the repository holds when it writes its results


def provenance(device=None, dtype=None, started: float = None) -> dict:
    """How a result was made, so that every number can be traced to its run: the command line, the git commit
    of the code (with a dirty flag) where there is a repository, the versions of torch and numpy, the device's
    name, the dtype, the thread count, the date and the wall time so far (since `started`, a time.time(), where
    one process makes several results, e.g. an experiment's training runs; else since the process started).
    The commit is the one checked out when the process started (CODE_VERSION)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine()
        if os.path.isfile("/proc/cpuinfo"):
            with open("/proc/cpuinfo") as fh:
                name = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), name)
    return dict(command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), git=CODE_VERSION,
                torch=str(torch.__version__), numpy=str(numpy.__version__), device=str(device) if device is not None else None, device_name=name,
                dtype=str(dtype).replace("torch.", "") if dtype is not None else None, threads=torch.get_num_threads(),
                date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                wall_seconds=round(time.time() - (STARTED if started is None else started), 1))


def update_results(path: str, results: dict, device=None, dtype=None) -> None:
    """Merge `results` into the JSON file at `path`, keeping the entries other runs wrote. Its "provenance" maps
    each entry to how it was made (the command, the code's commit, the machine: provenance())."""
    old = read_json(path, "results") if os.path.isfile(path) else {}
    old = old if isinstance(old, dict) else {}
    how = provenance(device, dtype)
    made = {**old.get("provenance", {}), **{k: how for k in results}}        # entry -> the run that wrote it
    write_json(path, {**old, **jsonable(results), "provenance": made})
    print(f"wrote {path}")


def jsonable(obj):
    """numpy scalars and arrays, tuples and non-string keys -> plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):            # numpy / torch arrays and scalars
        return obj.tolist()
    return obj


def figure(*subplots, figsize=(5, 3.5)):
    """(matplotlib.pyplot, fig, axes) on the Agg backend (no display needed)."""
    import matplotlib                # only where a figure is drawn: importing it costs a second
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(*subplots, figsize=figsize)
    return plt, fig, axes


def save_figure(fig, path: str) -> None:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format=os.path.splitext(path)[1][1:] or "png"))
    plt.close(fig)
    print(f"wrote {path}")


def print_table(rows: list, floats: str = "{:.4g}") -> None:
    """Print a list of dicts as aligned columns (the keys of the first row are the header)."""
    if not rows:
        return
    cols = list(rows[0])
    cell = lambda v: floats.format(v) if isinstance(v, float) else "-" if v is None else str(v)
    cells = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in cells:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))


class Progress:
    """`label: done/total (rate/s, ETA m:ss)` on stderr, at most every `every` seconds."""

    def __init__(self, total: int, label: str, unit: str = "", every: float = 5.0):
        self.total, self.label, self.unit, self.every = total, label, unit, every
        self.done, self.t0, self.last = 0, time.time(), time.time()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.time()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            print(f"  {self.label}: {self.done:,}/{self.total:,} {self.unit} ({rate:,.1f}/s, ETA "
                  f"{int(eta // 60)}:{int(eta % 60):02d})", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- one convention for every script
# Bad input is refused before any work, in one line on stderr that says what is wrong and what to do,
# with exit code 2; a traceback only when BORN_BIASED_DEBUG=1 asks for one. An error that is not bad input
# (a bug) is one line too, exit code 1, and says how to get its traceback.

DEBUG_ENV = "BORN_BIASED_DEBUG"


def one_line(message) -> str:
    return " ".join(str(message).split())


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (no usage block) and exit code 2, as every other refusal."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")
        sys.exit(2)


def run_script(main_fn, name: str, argv=None):
    """Run a script's main under the convention above."""
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    out_of_memory = "not enough memory ({}); use a smaller model, fewer or shorter sequences, or another --device"
    try:
        return main_fn(argv)
    except KeyboardInterrupt:
        sys.stderr.write(f"{name}: interrupted\n")
        sys.exit(130)
    except Exception as e:
        if debug:
            raise
        if isinstance(e, (OSError, ValueError, FloatingPointError)):     # bad input, a missing file, NaN activations
            sys.stderr.write(f"{name}: error: {one_line(e)}\n")
        elif isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(e):
            sys.stderr.write(f"{name}: error: {out_of_memory.format(one_line(e)[:120])}\n")
        else:
            sys.stderr.write(f"{name}: internal error {type(e).__name__}: {one_line(e)} (a bug: rerun with "
                             f"{DEBUG_ENV}=1 for the traceback and report it)\n")
            sys.exit(1)
        sys.exit(2)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_device_flags(parser: argparse.ArgumentParser, dtype_help: str, dtype_default: Optional[str] = None) -> None:
    """--device and --dtype with one vocabulary in every script."""
    parser.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, cuda:N, mps")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=dtype_default, help=dtype_help)


def resolve_device(name: Optional[str] = "auto") -> torch.device:
    """The torch.device a --device flag names; one that is unknown or absent on this machine is refused."""
    name = "auto" if name is None else name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: this machine has no CUDA device that torch {torch.__version__} can "
                             f"use; run with --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"--device {name}: MPS is not available here; run with --device cpu")
    elif device.type != "cpu" or device.index:
        raise ValueError(f"unsupported device {name!r}; use auto, cpu, cuda, cuda:N or mps")
    return device


def check_dtype_runs(device: torch.device, dtype: torch.dtype) -> None:
    """Refuse a dtype the device cannot run, by running the ops a forward pass uses once on tiny tensors."""
    try:
        x = torch.ones(1, 2, 4, 8, device=device, dtype=dtype)
        y = F.scaled_dot_product_attention(x, x, x, is_causal=True)
        F.softmax(F.linear(y, torch.ones(8, 8, device=device, dtype=dtype)).float(), dim=-1)
        torch.rsqrt(x.float().pow(2).mean(-1)).to(dtype).cumsum(-1)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{device} cannot run {str(dtype).replace('torch.', '')} ({one_line(e)[:100]}); "
                         f"choose another --dtype") from None


_HELD = set()                          # the output directories this process holds locked


@contextlib.contextmanager
def lock_dir(path: str, flag: str = "--out"):
    """Hold an exclusive lock on the output directory `path` (created if needed) while a run writes there:
    a second run into it is refused at once, and the first run's files stay as they are. The lock is an
    flock on the directory itself, so it creates no file and dies with its process, however it ends.
    Temp files that a killed run left behind (atomic_write's *.tmpPID) are removed once the lock is held;
    directories made here and still empty when the run stops (it failed before writing) are removed."""
    check_output(path, flag)
    if os.path.realpath(path) in _HELD:              # this process holds it already (a nested writer)
        yield path
        return
    made, parent = [], os.path.abspath(path)
    while not os.path.exists(parent):
        made.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(path, exist_ok=True)
    fd = None
    try:
        if fcntl is None:
            print(f"note: {path} is not locked (no POSIX file locks on this system); run one job per {flag}",
                  file=sys.stderr)
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise OSError(f"{path} is in use by another run that holds its lock; wait for it to finish, or "
                              f"choose another {flag}") from None
        for f in os.listdir(path):
            if re.fullmatch(r".+\.tmp\d+", f) and os.path.isfile(os.path.join(path, f)):
                os.remove(os.path.join(path, f))
        _HELD.add(os.path.realpath(path))
        yield path
    finally:
        _HELD.discard(os.path.realpath(path))
        if fd is not None:
            os.close(fd)                 # closing the descriptor releases the lock
        for d in made:                   # innermost first
            if os.path.isdir(d) and not os.listdir(d):
                os.rmdir(d)


TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")      # what torchrun sets for every process it starts


def torchrun_rank() -> tuple:
    """(rank, world size, local rank) of a process that torchrun started; (0, 1, 0) for a plain `python` run.
    An environment that sets some of torchrun's variables but not all is refused: it is neither."""
    present = [k for k in TORCHRUN_VARS if k in os.environ]
    if not present:
        return 0, 1, 0
    if len(present) < len(TORCHRUN_VARS):
        missing = [k for k in TORCHRUN_VARS if k not in present]
        raise ValueError(f"{', '.join(present)} set but not {', '.join(missing)}: start multi-process runs with "
                         f"torchrun, or unset {', '.join(present)} for a plain run")
    return tuple(int(os.environ[k]) for k in TORCHRUN_VARS)


def rank_device(device: torch.device) -> torch.device:
    """The device this process runs on, made current: under torchrun a CUDA job puts rank r on cuda:LOCAL_RANK
    (one process per GPU); anything else is `device` itself. Refused before any group forms: more processes
    per node than GPUs (NCCL would fail later and less clearly), and a GPU index under torchrun (the local
    rank chooses the GPU; CUDA_VISIBLE_DEVICES chooses which GPUs the job sees)."""
    _, _, local = torchrun_rank()
    if device.type != "cuda" or "RANK" not in os.environ:
        return device
    if device.index is not None:
        raise ValueError(f"--device {device}: under torchrun each process takes cuda:LOCAL_RANK; pass --device cuda "
                         f"(and CUDA_VISIBLE_DEVICES to choose the GPUs)")
    if local >= torch.cuda.device_count():
        raise ValueError(f"torchrun started local rank {local}, but this machine has {torch.cuda.device_count()} "
                         f"CUDA device(s): one process per GPU, so lower --nproc_per_node")
    torch.cuda.set_device(local)         # before any CUDA work, so no rank makes a context on GPU 0
    return torch.device("cuda", local)


def join_process_group(device: torch.device) -> bool:
    """Under torchrun, join the job's process group and return True; a plain run joins nothing (False).
    NCCL for a CUDA device (rank_device has made this rank's GPU current), gloo otherwise. A one-process
    torchrun job joins a group of one, so a single GPU runs the same code path (DDP, gathers) as eight.
    Pair with leave_process_group()."""
    if "RANK" not in os.environ:
        return False
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True


def leave_process_group() -> None:
    """End a torchrun job's process group with every rank at once. A rank that tears gloo down while another
    still works (rank 0 writing results.json) can abort at exit ("terminate called without an active
    exception", SIGABRT); the barrier makes the ranks leave together."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    run_script(main, "model.py")
