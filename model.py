"""
model.py: the transformer of "Transformers Are Born Biased", with every knob the paper turns, and its
checkpoint format.

One GPTConfig and one GPT module express, by config alone, each architecture the paper probes
(Sections 2.1, 3, 4.1, 6.2): GPT-2 / LLaMA / Qwen-style blocks, the full / attention-only / MLP-only
ablation, residual-free MLP0-like stacks, uniform ("Attn0"-like) attention, and the positional
variance calibration and head-wise RMSNorm that act on attention sinks. The same knobs describe the
released families people probe and fingerprint (Pythia, OLMo-2, Gemma, Phi-3, Mixtral, ...): hf.py maps each
family's Hugging Face checkpoint onto them, and any of them can be built from scratch and probed at birth.

A block is pre-norm:  x <- x + Attn(Norm(x));  x <- x + MLP(Norm(x)).
Knobs move its norms after the sublayer (OLMo-2) or on both sides (Gemma 2 and 3), or run the two
sublayers side by side on the same x (GPT-NeoX's parallel residual). The MLP may be a mixture of experts
(n_experts, experts_per_token): a router sends each token through k of n MLPs (Mixtral, Qwen2-MoE, OLMoE).
Inside attention, after the values are aggregated and before W_O, each head's output at 1-indexed
position t can be rescaled (calibration, Section 6.2.1) and/or RMS-normalized (head_norm).
Weights are NOT initialized here: init.py owns that (GPT-2 scheme, seeded).

    model(idx, targets)            -> (logits, loss), as nanoGPT: the training and sampling path
    model.trace(idx, ...)          -> dict of hidden states, attention probabilities, head outputs:
                                      everything the probes read, from one explicit pass
    write_checkpoint(path, model)  -> one file: the config beside the weights
    load_checkpoint(path)          -> the GPT of such a file, from the file alone

This file needs torch alone and imports no other file of the project: copy it anywhere.
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
    "norm": ("layernorm", "rmsnorm", "rmsnorm_1p", "none"),
    "norm_position": ("pre", "post", "sandwich"),
    "activation": ("gelu", "gelu_tanh", "relu", "tanh", "silu", "swiglu", "geglu", "geglu_tanh"),
    "position": ("rope", "learned", "none"),
    "rope_type": ("default", "linear", "llama3", "longrope"),
    "qk_norm": ("none", "head", "all"),
    "sublayers": ("both", "attn", "mlp"),
    "attention": ("softmax", "uniform", "softmax1", "softpick"),
    "calibration": ("none", "amplify", "attenuate"),
    "router_norm": ("topk", "none"),
}


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 1024            # context length T (also the T of calibration=attenuate)
    vocab_size: int = 50257
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: Optional[int] = None   # grouped-query attention; None = n_head (plain multi-head)
    n_embd: int = 768
    head_size: Optional[int] = None   # width of one head; None = n_embd / n_head (Qwen3, Gemma set it apart)
    mlp_hidden: Optional[int] = None  # MLP hidden width; None = 4 * n_embd
    n_experts: Optional[int] = None   # a mixture-of-experts MLP of this many experts (Mixtral, OLMoE); None: dense
    experts_per_token: Optional[int] = None   # k: each token goes through its k top-routed experts
    expert_hidden: Optional[int] = None   # one expert's hidden width; None = the MLP's (mlp_hidden)
    router_norm: str = "topk"         # topk: the k routing weights renormalized to sum to 1 (Mixtral); none: the
                                      # softmax's own probabilities (Qwen2-MoE, OLMoE: norm_topk_prob false)
    shared_expert: Optional[int] = None   # hidden width of an MLP every token goes through, sigmoid-gated (Qwen2-MoE)
    moe_layers: Optional[str] = None  # per layer "m" (experts) or "d" (the dense MLP); None: every layer has experts
    norm: str = "layernorm"           # every norm of the model; rmsnorm_1p: RMSNorm times (1 + w), w stored (Gemma)
    norm_eps: float = 1e-5
    norm_position: str = "pre"        # pre: x + f(N(x)); post: x + N(f(x)) (OLMo-2); sandwich: x + N(f(N(x))) (Gemma 2)
    norm_bias: bool = False           # LayerNorm's biases even where bias is off (GPT-NeoX without attention biases)
    parallel_residual: bool = False   # x + Attn(N1(x)) + MLP(N2(x)): both sublayers read the block's input (GPT-NeoX)
    activation: str = "gelu"          # gelu is exact (erf), gelu_tanh GPT-2's approximation; swiglu and geglu gate
    position: str = "rope"
    rope_theta: float = 10000.0
    rope_type: str = "default"        # how RoPE's inverse frequencies are rescaled: none, / factor, Llama 3, LongRoPE
    rope_factor: float = 1.0          # linear and llama3
    rope_low_freq_factor: float = 1.0     # llama3 only
    rope_high_freq_factor: float = 4.0    # llama3 only
    rope_original_context: int = 8192     # llama3 and longrope: the context the frequencies were trained for
    rope_factors: Optional[tuple] = None  # longrope only: each inverse frequency divided by its own factor
    rope_attention_factor: float = 1.0    # longrope only: cos and sin multiplied by this
    rope_dims: Optional[int] = None       # RoPE on the first rope_dims dims of each head; None: all (partial: Pythia)
    rope_local_theta: Optional[float] = None  # RoPE base of the sliding-window layers, unscaled (Gemma 3)
    sliding_window: Optional[int] = None  # each query sees at most this many keys, itself included (Mistral)
    sliding_layers: Optional[str] = None  # per layer "s" (sliding window) or "f" (full); None: every layer slides
    self_only: Optional[int] = None   # this 1-indexed position attends only to itself (Sec 6.2's mask edit, from birth)
    qk_norm: str = "none"             # RMSNorm of q and k before RoPE: per head (Qwen3), or all heads at once (OLMo-2)
    attn_scale: Optional[float] = None    # multiplies q.k; None = 1 / sqrt(head_dim) (Gemma 2: query_pre_attn_scalar)
    attn_softcap: Optional[float] = None  # scores c tanh(s / c) before the mask (Gemma 2)
    logit_softcap: Optional[float] = None  # logits c tanh(l / c) (Gemma 2 and 3)
    embed_scale: float = 1.0          # token embeddings times this, first cast to their dtype (Gemma: sqrt(n_embd))
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
            object.__setattr__(self, f.name, checked_knob(f, getattr(self, f.name)))
        self.check_combinations()

    def check_combinations(self):
        """Knobs that make sense alone but not together, refused by name."""
        if self.head_size is None and self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head} (or set head_size)")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head={self.n_head} is not a multiple of n_kv_head={self.kv_heads}")
        if self.attn_sink and self.attention != "softmax":
            raise ValueError(f"attn_sink adds a learned logit to softmax attention; attention={self.attention!r} "
                             f"has {'its own fixed one' if self.attention == 'softmax1' else 'none to add it to'}")
        sizes = {"vocab_size": self.vocab_size, "block_size": self.block_size if self.position == "learned" else 1,
                 "MLP width": self.mlp_width, "n_head x head_dim": self.n_head * self.head_dim,
                 "expert_hidden": self.expert_width, "shared_expert": self.shared_expert or 1}
        too_big = [k for k, v in sizes.items() if v * self.n_embd > MAX_TENSOR]
        if too_big:
            raise ValueError(f"{too_big[0]} = {sizes[too_big[0]]} makes a weight of more than 2^40 numbers with "
                             f"n_embd={self.n_embd}; no machine holds it")
        if self.norm == "none" and self.norm_position != "pre":
            raise ValueError(f"norm_position={self.norm_position!r} places norms, but norm='none' has none")
        if self.norm_bias and self.norm != "layernorm":
            raise ValueError(f"norm_bias is LayerNorm's bias; norm={self.norm!r} has none")
        if self.parallel_residual and not self.residual:
            raise ValueError("parallel_residual adds both sublayers to the residual stream; residual=False has none")
        if self.attention == "uniform" and (self.attn_scale is not None or self.attn_softcap is not None):
            raise ValueError("attention='uniform' computes no scores to scale or soft-cap (attn_scale, attn_softcap)")
        self.check_rope()
        self.check_experts()
        if self.sliding_layers is not None:
            if self.sliding_window is None:
                raise ValueError("sliding_layers says which layers use sliding_window, which is not set")
            if len(self.sliding_layers) != self.n_layer or set(self.sliding_layers) - {"s", "f"}:
                raise ValueError(f"sliding_layers must give each of the {self.n_layer} layers an 's' (sliding "
                                 f"window) or an 'f' (full attention), got {self.sliding_layers!r}")

    def check_rope(self):
        """RoPE's knobs: each only where RoPE is, and LongRoPE's factors one per frequency."""
        rope_only = {"rope_dims": self.rope_dims, "rope_local_theta": self.rope_local_theta,
                     "rope_factors": self.rope_factors,
                     "rope_attention_factor": None if self.rope_attention_factor == 1.0 else 1}
        if self.position != "rope":
            given = [k for k, v in rope_only.items() if v is not None]
            if given:
                raise ValueError(f"{given[0]} is a RoPE knob; position={self.position!r} has no RoPE")
            return
        if self.rope_dims is not None and (self.rope_dims % 2 or self.rope_dims > self.head_dim):
            raise ValueError(f"rope_dims must be even and at most head_dim={self.head_dim}, got {self.rope_dims}")
        if self.rotary_dims % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
        if not self.rope_low_freq_factor < self.rope_high_freq_factor:
            raise ValueError(f"RoPE llama3 scaling needs rope_low_freq_factor < rope_high_freq_factor, got "
                             f"{self.rope_low_freq_factor} and {self.rope_high_freq_factor}")
        longrope = self.rope_type == "longrope"
        if longrope != (self.rope_factors is not None):
            raise ValueError("rope_type='longrope' and rope_factors go together: one factor per frequency")
        if longrope and len(self.rope_factors) != self.rotary_dims // 2:
            raise ValueError(f"rope_factors needs one factor per RoPE frequency ({self.rotary_dims // 2}), got "
                             f"{len(self.rope_factors)}")
        if self.rope_attention_factor != 1.0 and not longrope:
            raise ValueError("rope_attention_factor is LongRoPE's; set rope_type='longrope'")
        if self.rope_local_theta is not None and self.sliding_window is None:
            raise ValueError("rope_local_theta is the RoPE base of the sliding-window layers; set sliding_window")

    def check_experts(self):
        """The mixture-of-experts knobs: each only with n_experts, k experts of them per token."""
        experts_only = {"experts_per_token": self.experts_per_token, "expert_hidden": self.expert_hidden,
                        "shared_expert": self.shared_expert, "moe_layers": self.moe_layers,
                        "router_norm": None if self.router_norm == "topk" else self.router_norm}
        if self.n_experts is None:
            given = [k for k, v in experts_only.items() if v is not None]
            if given:
                raise ValueError(f"{given[0]} is a mixture-of-experts knob; set n_experts (the dense MLP has none)")
            return
        if self.sublayers == "attn":
            raise ValueError("n_experts makes each MLP a mixture of experts; sublayers='attn' has no MLP")
        if self.experts_per_token is None:
            raise ValueError(f"n_experts={self.n_experts} needs experts_per_token, the number of experts each token "
                             f"goes through (k)")
        if self.experts_per_token > self.n_experts:
            raise ValueError(f"experts_per_token={self.experts_per_token} exceeds n_experts={self.n_experts}: each "
                             f"token goes through k different experts")
        layers = self.moe_layers
        if layers is not None and (len(layers) != self.n_layer or set(layers) - {"m", "d"} or "m" not in layers):
            raise ValueError(f"moe_layers must give each of the {self.n_layer} layers an 'm' (experts) or a 'd' (the "
                             f"dense MLP), at least one 'm', got {layers!r}")

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

    @property
    def expert_width(self) -> int:
        return self.expert_hidden or self.mlp_width

    @property
    def rotary_dims(self) -> int:
        """The dims of each head that RoPE rotates (the first ones); the rest pass through."""
        return self.rope_dims or self.head_dim

    def slides(self, layer: int) -> bool:
        """Whether layer `layer` (0-indexed) uses sliding_window."""
        return self.sliding_window is not None and (self.sliding_layers is None or self.sliding_layers[layer] == "s")

    def has_experts(self, layer: int) -> bool:
        """Whether layer `layer` (0-indexed) has a mixture of experts for its MLP."""
        return self.n_experts is not None and (self.moe_layers is None or self.moe_layers[layer] == "m")


MAX_TENSOR = 2 ** 40      # numbers in one weight matrix: 4 TiB in float32, far beyond any machine here
OPTIONAL = {Optional[int]: int, Optional[float]: float, Optional[str]: str, Optional[tuple]: tuple}


def checked_knob(field: dataclasses.Field, value):
    """One knob's value checked against its field's type and range (a number > 0 or >= 1), in its canonical
    form: 10000 and 10000.0 are one rope_theta, [1.0, 1.2] (read from JSON) the tuple (1.0, 1.2)."""
    name, kind = field.name, OPTIONAL.get(field.type, field.type)
    if field.type in OPTIONAL and value is None:
        return None
    unset = " or unset" if field.type in OPTIONAL else ""
    if name in CHOICES:
        if value not in CHOICES[name]:
            raise ValueError(f"unknown {name}={value!r}; choose one of {CHOICES[name]}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string{unset}, got {value!r}")
        return value
    if kind is tuple:
        if not isinstance(value, (list, tuple)) or not value or not all(positive_number(v) for v in value):
            raise ValueError(f"{name} must be a list of finite numbers > 0{unset}, got {value!r}")
        return tuple(float(v) for v in value)
    if kind is float:
        if not positive_number(value):
            raise ValueError(f"{name} must be a finite number > 0{unset}, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1{unset}, got {value!r}")
    return int(value)


def positive_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value) and value > 0


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

def rope_inv_freq(config: GPTConfig, local: bool = False) -> torch.Tensor:
    """RoPE's inverse frequencies theta^(-2i/d), i < d/2, d = config.rotary_dims, float32, rescaled by
    config.rope_type:
      default   unchanged;
      linear    all divided by rope_factor (positions stretched by that factor);
      llama3    (Llama 3.1's rule) wavelengths shorter than original_context / high_freq_factor kept, those longer
                than original_context / low_freq_factor divided by rope_factor, the band between interpolated
                linearly in original_context / wavelength;
      longrope  (Phi-3) each divided by its own factor, rope_factors[i] (the short factors: sequences up to
                rope_original_context).
    local=True: the sliding-window layers' frequencies, base rope_local_theta and never rescaled (Gemma 3)."""
    d = config.rotary_dims
    theta = config.rope_local_theta if local else config.rope_theta
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    if local or config.rope_type == "default":
        return inv
    if config.rope_type == "linear":
        return inv / config.rope_factor
    if config.rope_type == "longrope":
        return inv / torch.tensor(config.rope_factors, dtype=torch.float32)
    wavelen = 2 * math.pi / inv
    ratio = config.rope_original_context / wavelen          # how many wavelengths fit the trained context
    low, high = config.rope_low_freq_factor, config.rope_high_freq_factor
    smooth = ((ratio - low) / (high - low)).clamp(0.0, 1.0)  # 0: long waves (scaled), 1: short (kept)
    return (1 - smooth) * inv / config.rope_factor + smooth * inv


def rope_tables(T: int, config: GPTConfig, device=None, local: bool = False):
    """cos and sin of the rotary angles t * inv_freq, (T, rotary_dims/2), computed in float32 (LongRoPE: both
    times rope_attention_factor)."""
    inv = rope_inv_freq(config, local).to(device)
    angles = torch.outer(torch.arange(T, device=device, dtype=torch.float32), inv)
    scale = 1.0 if local else config.rope_attention_factor
    return angles.cos() * scale, angles.sin() * scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x_i, x_{i+d/2}) by angle t * inv_freq_i within the first d = 2 cos.shape[-1] dims of each head,
    the "rotate-half" layout of Hugging Face checkpoints (not Meta's interleaved pairs): scores q_m . k_n then
    depend on m - n only. The dims past d pass through (partial rotary: GPT-NeoX, Phi-4-mini)."""
    d = 2 * cos.shape[-1]
    rotated, rest = x[..., :d], x[..., d:]
    x1, x2 = rotated.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class RMSNorm(nn.Module):
    """x / RMS(x) * gain over the last dimension. The statistic is taken in float32 and the normalized x cast
    back before the gain multiplies it, as Hugging Face LLaMA does, so that bf16 models match.
    plus_one=True (norm="rmsnorm_1p", Gemma): the gain is 1 + w with w stored, multiplied in float32 before the
    cast back, as Gemma does."""

    def __init__(self, width: int, eps: float, plus_one: bool = False):
        super().__init__()
        self.eps, self.plus_one = eps, plus_one
        self.weight = nn.Parameter(torch.zeros(width) if plus_one else torch.ones(width))

    def forward(self, x):
        xf = x.float()
        ms = xf.pow(2).mean(-1, keepdim=True)
        # |x| beyond ~1e19 overflows the float32 statistic to inf, and rsqrt(inf) = 0 would quietly zero the
        # vector: make it NaN instead, so the pass's finiteness check names the block
        ms = torch.where(torch.isinf(ms), torch.nan, ms)
        normed = xf * torch.rsqrt(ms + self.eps)
        if self.plus_one:
            return (normed * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * normed.to(x.dtype)


def rms_norm(config: GPTConfig, width: int) -> RMSNorm:
    """An RMSNorm in the model's form (q/k norms and head_norm are RMSNorms whatever config.norm is)."""
    return RMSNorm(width, config.norm_eps, plus_one=config.norm == "rmsnorm_1p")


def make_norm(config: GPTConfig, width: int) -> nn.Module:
    if config.norm == "layernorm":
        return nn.LayerNorm(width, eps=config.norm_eps, bias=config.bias or config.norm_bias)
    if config.norm in ("rmsnorm", "rmsnorm_1p"):
        return rms_norm(config, width)
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
    if sink is None:
        extra = torch.zeros_like(s[..., :1])
    else:
        extra = sink.float().view(1, -1, 1, 1).expand_as(s[..., :1])
    return F.softmax(torch.cat([s, extra], dim=-1), dim=-1)[..., :-1]        # the extra column's value is zero


def allowed_keys(T: int, window: Optional[int] = None, self_only: Optional[int] = None,
                 device=None) -> torch.Tensor:
    """(T, T) bool, True where query t may attend to key s: s <= t, t - s < window if a window is set, and only
    s = t for the query at 1-indexed position self_only, which then averages nothing, like the first position."""
    t = torch.arange(T, device=device)
    allowed = t[None, :] <= t[:, None]
    if window is not None:
        allowed &= t[None, :] > t[:, None] - window
    if self_only is not None and self_only <= T:
        allowed[self_only - 1] = t == self_only - 1
    return allowed


def softcap(x: torch.Tensor, cap: Optional[float]) -> torch.Tensor:
    """c tanh(x / c): x kept within (-c, c), nearly unchanged where |x| << c (Gemma 2's soft-capping)."""
    return x if cap is None else cap * torch.tanh(x / cap)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        self.config = config
        self.window = config.sliding_window if config.slides(layer) else None
        H, Hkv, hd = config.n_head, config.kv_heads, config.head_dim
        self.c_attn = nn.Linear(config.n_embd, sum(qkv_sizes(config)),
                                bias=config.bias or config.qkv_bias or config.attn_bias)
        self.c_proj = nn.Linear(H * hd, config.n_embd, bias=config.bias or config.attn_bias)   # W_O
        if config.qk_norm == "head":                          # one gain of size head_dim (Qwen3, Gemma 3)
            self.q_norm, self.k_norm = rms_norm(config, hd), rms_norm(config, hd)
        elif config.qk_norm == "all":                         # over every head's dims at once (OLMo-2)
            self.q_norm, self.k_norm = rms_norm(config, H * hd), rms_norm(config, Hkv * hd)
        if config.head_norm:
            self.head_norm = rms_norm(config, hd)             # one gain of size head_dim, shared by heads
        if config.attn_sink:
            self.sink = nn.Parameter(torch.zeros(H))          # one learned sink logit per head
        if config.attn_gate:                                  # gate logits from the block's (normed) input
            self.c_gate = nn.Linear(config.n_embd, H * hd, bias=config.bias or config.attn_bias)

    def forward(self, x, rope=None, mask=None, trace=None):
        """x (B, T, n_embd) -> (B, T, n_embd). mask: an edited (T, T) bool mask instead of the causal one.
        trace: a dict to fill with what a probe asked for, by its keys: "attn_probs" (B, H, T, T),
        float32 whatever the model's dtype, and "head_out" (B, H, T, hd), the heads as W_O sees them."""
        cfg = self.config
        B, T, _ = x.shape
        H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
        q, k, v = self.c_attn(x).split(qkv_sizes(cfg), dim=-1)
        if cfg.qk_norm == "all":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.view(B, T, H, hd), k.view(B, T, Hkv, hd), v.view(B, T, Hkv, hd)
        if cfg.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)    # (B, heads, T, hd)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        want_probs = trace is not None and "attn_probs" in trace
        # SDPA computes plain softmax of unscaled-by-a-cap scores only: the rest goes the explicit way
        explicit = want_probs or not cfg.rows_sum_to_one or cfg.attn_softcap is not None
        window = self.window if self.window is not None and self.window < T else None
        edited = window or cfg.self_only is not None and cfg.self_only <= T
        allowed = mask
        if allowed is None and (edited or explicit):
            allowed = allowed_keys(T, window, cfg.self_only, x.device)
        scale = cfg.attn_scale or 1.0 / math.sqrt(hd)
        t = torch.arange(1, T + 1, device=x.device, dtype=torch.float32).view(T, 1)    # 1-indexed positions
        if cfg.attention == "uniform" and allowed is None:
            # Attn0-like: position t averages the values of positions 1..t (summed in fp32)
            y = (v.float().cumsum(dim=2) / t).to(v.dtype).repeat_interleave(H // Hkv, dim=1)
        elif explicit or cfg.attention == "uniform":
            # the explicit path, for probes and the sink controls: SDPA's maths with the weights kept
            if cfg.attention == "uniform":
                probs = (allowed.float() / allowed.sum(dim=-1, keepdim=True)).expand(B, H, T, T)
            else:
                scores = softcap(q @ k.repeat_interleave(H // Hkv, dim=1).transpose(-2, -1) * scale, cfg.attn_softcap)
                probs = attention_weights(scores, allowed, cfg.attention, self.sink if cfg.attn_sink else None)
            y = probs.to(v.dtype) @ v.repeat_interleave(H // Hkv, dim=1)
            if want_probs:
                trace["attn_probs"] = probs
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None, scale=scale,
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
GATED = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh"}    # act(gate(x)) * up(x): LLaMA, Gemma


class MLP(nn.Module):
    """The MLP of hidden width `width` (None: config.mlp_width); an expert and a shared expert are MLPs too."""

    def __init__(self, config: GPTConfig, width: Optional[int] = None):
        super().__init__()
        width = width or config.mlp_width
        self.gated = config.activation in GATED
        self.act = ACTIVATIONS[GATED.get(config.activation, config.activation)]
        bias = config.bias or config.mlp_bias
        self.c_fc = nn.Linear(config.n_embd, width, bias=bias)        # up
        if self.gated:
            self.c_gate = nn.Linear(config.n_embd, width, bias=bias)  # gate
        self.c_proj = nn.Linear(width, config.n_embd, bias=bias)      # down (residual projection)

    def forward(self, x):
        if self.gated:
            return self.c_proj(self.act(self.c_gate(x)) * self.c_fc(x))
        return self.c_proj(self.act(self.c_fc(x)))


class MixtureOfExperts(nn.Module):
    """The MLP as a mixture of experts (Mixtral, Qwen2-MoE, OLMoE): n_experts MLPs of width expert_width and a
    router, a linear map to one logit per expert. Each token goes through the k = experts_per_token experts of
    highest softmax probability, every token through all k of them (no capacity drops one), and its output is their
    outputs weighted by those probabilities, renormalized over the k (router_norm "topk") or as they are ("none").
    A shared expert, where there is one, is an MLP every token goes through, times sigmoid of a linear gate."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.k, self.renormalize = config.experts_per_token, config.router_norm == "topk"
        self.router = nn.Linear(config.n_embd, config.n_experts, bias=False)
        self.experts = nn.ModuleList([MLP(config, config.expert_width) for _ in range(config.n_experts)])
        if config.shared_expert:
            self.shared_expert = MLP(config, config.shared_expert)
            self.shared_expert_gate = nn.Linear(config.n_embd, 1, bias=False)

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        probs = F.softmax(self.router(tokens).float(), dim=-1)        # in float32, as the families route
        weights, chosen = probs.topk(self.k, dim=-1)                   # (tokens, k): the k most probable experts
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):          # each expert on exactly the tokens routed to it
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            out.index_add_(0, token, expert(tokens[token]) * weights[token, slot, None])
        if hasattr(self, "shared_expert"):
            out = out + torch.sigmoid(self.shared_expert_gate(tokens)) * self.shared_expert(tokens)
        return out.view_as(x)


class Block(nn.Module):
    """A transformer block. Its norms by config.norm_position: ln_1 / ln_2 read each sublayer's input (pre,
    sandwich), ln_1_out / ln_2_out its output before the residual add (post, sandwich); absent ones are
    identities."""

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        self.residual, self.parallel = config.residual, config.parallel_residual
        norm_in = config.norm_position in ("pre", "sandwich")
        norm_out = config.norm_position in ("post", "sandwich")
        norm = lambda on: make_norm(config, config.n_embd) if on else nn.Identity()
        if config.sublayers in ("both", "attn"):
            self.ln_1, self.ln_1_out = norm(norm_in), norm(norm_out)
            self.attn = CausalSelfAttention(config, layer)
        if config.sublayers in ("both", "mlp"):
            self.ln_2, self.ln_2_out = norm(norm_in), norm(norm_out)
            self.mlp = MixtureOfExperts(config) if config.has_experts(layer) else MLP(config)

    def forward(self, x, rope=None, mask=None, trace=None):
        a = self.ln_1_out(self.attn(self.ln_1(x), rope, mask, trace)) if hasattr(self, "attn") else None
        if self.parallel:                        # GPT-NeoX: the MLP reads the block's input, not x + a
            m = self.ln_2_out(self.mlp(self.ln_2(x))) if hasattr(self, "mlp") else 0
            return x + (0 if a is None else a) + m
        if a is not None:
            x = x + a if self.residual else a
        if hasattr(self, "mlp"):
            m = self.ln_2_out(self.mlp(self.ln_2(x)))
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
            h=nn.ModuleList([Block(config, layer) for layer in range(config.n_layer)]),
            ln_f=make_norm(config, config.n_embd),
        ))
        if config.position == "learned":
            self.transformer.wpe = nn.Embedding(config.block_size, config.n_embd)
        # tied: the head reads wte.weight directly, so a tie can never come undone
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self._rope_cache = {}      # RoPE's tables by (config, length, device): made once, not at every pass

    def forward(self, idx, targets=None):
        """idx (B, T) token ids -> (logits, loss), as nanoGPT: with targets (B, T), logits (B, T, vocab) and the mean
        next-token cross-entropy (targets -1 ignored); without, the last position's logits (B, 1, vocab) and None.
        Token ids are not range-checked here (a GPU sync per call): the scripts check them where data enters."""
        x = self._embed(idx, None)
        ropes = self._ropes(x)
        for block in self.transformer.h:
            x = block(x, self._rope_of(block, ropes))
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.unembed(x[:, [-1]]), None     # the LM head on the last position only (a list keeps T)
        logits = self.unembed(x)
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-1)

    def trace(self, idx=None, *, embeds=None, hidden=None, attn_probs=False, head_out=False, logits=False,
              attn_mask=None, check_finite=True) -> dict:
        """One pass that keeps what the probes read, on token ids idx (B, T) or input embeddings
        embeds (B, T, n_embd), taken as they are (no embed_scale). Returns a dict holding only what was asked:
          hidden="all" | "last": the n_layer + 2 residual-stream states -- the input (after the position
              table), after each block, after the final norm -- each (B, T, d), or (B, d) at the last token
          attn_probs: per layer (B, H, T, T), float32 (an explicit softmax instead of SDPA)
          head_out: per layer (B, H, T, head_dim), each head's aggregated output as W_O sees it
          logits: the last position's logits (B, vocab)
        attn_mask: a (T, T) bool mask used in every layer instead of the causal one; it must stay causal
        and leave each query a key (sink.py's mask edit: "token k attends only to itself").
        A NaN or inf in a state is a FloatingPointError naming the first state that holds one. Where the pass
        returns the last position alone (hidden "last" or None, no attn_probs and no head_out), only the last
        position is read, and the error names the first state where a NaN has reached it. check_finite=False: the
        pass's flags, one a state, are returned on the device as out["finite"] instead, to be refused after many
        passes at once (trace_passes): checking them here waits for the device, a host sync per pass."""
        if hidden not in (None, "all", "last"):
            raise ValueError(f"hidden must be None, 'all' or 'last', got {hidden!r}")
        x = self._embed(idx, embeds)
        T = x.shape[1]
        if attn_mask is not None:
            attn_mask = check_attn_mask(attn_mask, T).to(x.device)
        keep = (lambda h: h) if hidden == "all" else (lambda h: h[:, -1])
        asked = [key for key, wanted in (("attn_probs", attn_probs), ("head_out", head_out)) if wanted]
        last_only = last_position_only(hidden, logits, attn_probs, head_out)
        watched = (lambda h: h[:, -1]) if last_only else (lambda h: h)
        ropes = self._ropes(x)
        states, per_layer, finite = [keep(x)], [], [torch.isfinite(watched(x)).all()]
        for block in self.transformer.h:
            rec = dict.fromkeys(asked)
            x = block(x, self._rope_of(block, ropes), attn_mask, rec)
            states.append(keep(x))
            per_layer.append(rec)
            finite.append(torch.isfinite(watched(x)).all())
        x = self.transformer.ln_f(x)
        states.append(keep(x))
        finite.append(torch.isfinite(watched(x)).all())
        last_logits = self.unembed(x[:, -1]) if logits else None
        if logits:
            finite.append(torch.isfinite(last_logits).all())
        out = {key: [rec[key] for rec in per_layer if rec[key] is not None] for key in asked}   # MLP-only: none
        if check_finite:
            # inside torch.compile the check runs eagerly: a host sync and a raise
            eager(raise_if_nonfinite)(torch.stack(finite), self.config.n_layer, last_only)
        else:
            out["finite"] = torch.stack(finite)
        if hidden:
            out["hidden"] = states
        if logits:
            out["logits"] = last_logits
        return out

    def trace_passes(self, batches, trace=None, **options):
        """self.trace(**batch, **options) for each batch (a pass's inputs, on the model's device), yielding each
        pass's output, with no host sync between passes (the device is never left waiting for the host): RoPE's
        tables are made once (_ropes), and each pass's finiteness flags stay on the device, to be refused once
        after the last pass, naming the first pass's first non-finite state as a check after each pass would
        (raise_if_nonfinite). trace: the pass to run instead of self.trace, a compiled_trace()."""
        flags = []
        for batch in batches:
            if trace is not None:     # CUDA graphs (reduce-overhead): each pass a new replay, over the last one's outputs
                torch.compiler.cudagraph_mark_step_begin()
            out = (trace or self.trace)(**batch, **options, check_finite=False)
            flags.append(out.pop("finite").clone())     # a copy: a replay of CUDA graphs reuses its outputs' memory
            yield out
        if flags:
            last_only = last_position_only(options.get("hidden"), options.get("logits"), options.get("attn_probs"),
                                           options.get("head_out"))
            raise_if_nonfinite(torch.stack(flags), self.config.n_layer, last_only)

    def compiled_trace(self, mode: str = "default"):
        """self.trace through torch.compile in `mode` ("default", "max-autotune-no-cudagraphs", ...), for
        trace_passes: static shapes, and past dynamo's recompile limit an error rather than eager passes without a
        word. Made once and handed to each trace_passes call that should share its graphs (a compile of the same
        mode made again shares them too, until torch._dynamo.reset())."""
        from torch._dynamo import config      # here: importing the compiler costs a second at every start-up
        return config.patch(fail_on_recompile_limit_hit=True)(torch.compile(self.trace, mode=mode, dynamic=False))

    def unembed(self, x):
        """The LM head: final-norm states -> logits (soft-capped where the config says)."""
        head = self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight
        return softcap(F.linear(x, head), self.config.logit_softcap)

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
            if cfg.embed_scale != 1.0:      # Gemma rounds sqrt(n_embd) to the model's dtype first: so do we
                x = x * torch.tensor(cfg.embed_scale, dtype=x.dtype, device=x.device)
        else:
            if embeds.dim() != 3 or embeds.shape[-1] != cfg.n_embd:
                raise ValueError(f"embeds must have shape (B, T, n_embd={cfg.n_embd}), got {tuple(embeds.shape)}")
            x = embeds
        T = x.shape[1]
        if T > cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds the context block_size={cfg.block_size}")
        if T == 0:
            raise ValueError("empty sequence: T must be at least 1")
        if cfg.position == "rope" and cfg.rope_type == "longrope" and T > cfg.rope_original_context:
            raise ValueError(f"sequence length {T} exceeds rope_original_context={cfg.rope_original_context}: past "
                             f"it LongRoPE switches to its long factors, which this model does not carry")
        if cfg.position == "learned":
            x = x + self.transformer.wpe(torch.arange(T, device=x.device))
        return x

    def _ropes(self, x):
        """RoPE's (cos, sin) for the full-attention layers and for the sliding-window ones (the same tables
        unless rope_local_theta sets the latter apart); None without RoPE."""
        cfg = self.config
        if cfg.position != "rope":
            return None
        # Under torch.compile the tables are made eagerly, outside the graph: inside it the compiler fuses their
        # pow, sin and cos into each layer's rotation and recomputes them for every element of q and k, in every
        # layer (docs/reproduce.md has what that cost a compiled probe pass on a GPU)
        return eager(self._rope_tables)(x.shape[1], x.device)

    def _rope_tables(self, T: int, device) -> dict:
        """_ropes' tables, made once for each (config, length, device) and kept: made at each pass, they would copy
        the frequencies from the host, a copy that waits for the device (a host sync every pass)."""
        cfg, key = self.config, (self.config, T, device)
        if key not in self._rope_cache:
            with torch.inference_mode(False):     # made in a probe's inference mode, they must still serve training
                full = rope_tables(T, cfg, device)
                local = rope_tables(T, cfg, device, local=True) if cfg.rope_local_theta else full
            self._rope_cache[key] = dict(full=full, sliding=local)
        return self._rope_cache[key]

    @staticmethod
    def _rope_of(block, ropes):
        if ropes is None or not hasattr(block, "attn"):
            return None
        return ropes["full" if block.attn.window is None else "sliding"]


def last_position_only(hidden, logits, attn_probs, head_out) -> bool:
    """Whether a trace returns the last position alone (hidden "last", or the logits alone), where its finiteness is
    read at that position only: a NaN elsewhere that never reaches it changes no result, and a check of the whole
    state would read every state of the pass once more."""
    return (hidden == "last" or (hidden is None and bool(logits))) and not attn_probs and not head_out


def raise_if_nonfinite(finite: torch.Tensor, n_layer: int, last_only: bool = False) -> None:
    """NaN/inf activations are an error, never a result. `finite`: one flag per state of a pass (the input, each
    block, the final norm, the logits if computed), gathered on the device, or a row of them for each of many
    passes (trace_passes): one host sync for all. The error names the first state holding one in the first pass
    that does. last_only: the flags read the last position alone, so a NaN elsewhere shows where it has reached
    that position."""
    if bool(finite.all()):
        return
    first = int((~finite).flatten().nonzero()[0]) % finite.shape[-1]    # row by row: the first pass's first state
    if first == 0:
        where = "the input embeddings"
    elif first <= n_layer:
        where = f"block {first} of {n_layer}"
    else:
        where = "the final norm" if first == n_layer + 1 else "the LM head (logits)"
    read = " (read at the last position, all the pass returns)" if last_only else ""
    raise FloatingPointError(f"non-finite activations (NaN/inf), first in {where}{read}: no result is computed from "
                             f"them. Check the config's knobs and the weights, or run in float32 (--dtype float32)")


def eager(fn):
    """fn, run outside the graph (a graph break) when called under torch.compile, as itself otherwise. Wrapped only
    there, since torch.compiler.disable imports the compiler, a second at every start-up."""
    return torch.compiler.disable(fn) if torch.compiler.is_compiling() else fn


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
      - each weight matrix once per token (embedding lookups, biases and norm gains are not matmuls; neither are
        RoPE, soft-caps and the embedding scale, all elementwise), but of a mixture of experts' experts only the
        k = experts_per_token that each token goes through (the router's matrix and a shared expert: every token);
      - 4 H hd per attended (query, key) pair and layer: its score and its weighted value. Causal attention
        attends T (T + 1) / 2 pairs, fewer in a sliding-window layer and one fewer per query that attends only
        to itself; uniform attention is a running sum, no matmul;
      - the LM head on `logits_positions` positions (1: the last only, as the probes; 0: none, a fingerprint).
    train.py's MFU counts as nanoGPT does instead (PaLM's 6 N + 12 L H hd T), so the two compare."""
    cfg = model.config
    tables = [model.transformer.wte, getattr(model.transformer, "wpe", None), model.lm_head]
    tables = [t.weight for t in tables if t is not None]
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2 and not any(p is t for t in tables))
    if cfg.n_experts is not None:                  # every expert has the same matrices: k of n_experts run per token
        experts = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and ".experts." in name)
        matrices -= experts - experts // cfg.n_experts * cfg.experts_per_token
    attention = 0
    if cfg.sublayers != "mlp" and cfg.attention != "uniform":
        for layer in range(cfg.n_layer):
            w = min(cfg.sliding_window if cfg.slides(layer) else seq_len, seq_len)
            pairs = w * (w + 1) // 2 + (seq_len - w) * w              # sum over t of min(t, w) keys ...
            if cfg.self_only and cfg.self_only <= seq_len:
                pairs -= min(cfg.self_only, w) - 1                    # ... but one at self_only
            attention += 4 * cfg.n_head * cfg.head_dim * pairs
    return 2 * matrices * seq_len + attention + logits_positions * 2 * cfg.n_embd * cfg.vocab_size


# ----------------------------------------------------------------------------- checkpoints: written and read here
# One file per checkpoint, a dict saved with torch.save: "config" (the GPTConfig's fields), "model" (the state
# dict), "step", and whatever the writer adds: train.py stores "optimizer", "rng", "args", "seeds",
# "tokenizer", "init_from", "data_meta" and "provenance". Read with weights_only=True: data, never code.

def write_checkpoint(path: str, model: GPT, step: int = 0, **meta) -> None:
    """Save `model` (and any metadata) at `path`; load_checkpoint rebuilds the model from the file alone.
    The project's scripts write it through common.atomic_write (whole or not at all), with the run's provenance."""
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
    if isinstance(ckpt["config"].get("qk_norm"), bool):      # written when qk_norm was per head or nothing
        ckpt["config"]["qk_norm"] = "head" if ckpt["config"]["qk_norm"] else "none"
    try:
        GPTConfig(**ckpt["config"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: its config is invalid: {e}") from None
    return ckpt


def load_checkpoint(path, device="cpu") -> GPT:
    """The model of a checkpoint, rebuilt from the file alone (config + weights). Weights that do not fit
    the config, or that hold NaN or inf, are refused."""
    return model_from_checkpoint(read_checkpoint(path), path, device)


def model_from_checkpoint(ckpt: dict, where: str, device="cpu") -> GPT:
    """The model of a checkpoint read by read_checkpoint (`where` names it in errors)."""
    with torch.device("meta"):      # shapes only; the weights come from the file
        model = GPT(GPTConfig(**ckpt["config"])).to_empty(device=device)
    expected, got = model.state_dict(), ckpt["model"]
    wrong = sorted(set(expected) ^ set(got))
    wrong += sorted(k for k in set(expected) & set(got)
                    if not isinstance(got[k], torch.Tensor) or expected[k].shape != got[k].shape)
    if wrong:
        raise ValueError(f"{where}: weights do not match the config stored beside them "
                         f"(first mismatches: {wrong[:5]}); the file is damaged or was edited")
    model.load_state_dict(got)
    return check_model_weights_finite(model, where)


def check_model_weights_finite(model: GPT, where: str) -> GPT:
    """A weight that holds NaN or inf is an error naming it: such a model can only produce fake results."""
    for name, p in model.named_parameters():
        if not all_finite(p.detach()):
            raise nonfinite_weight(where, name, p)
    return model


def all_finite(t: torch.Tensor) -> bool:
    """Whether every value of `t` is finite, checked in slices: a whole-tensor check would double the peak memory."""
    return all(torch.isfinite(part).all() for part in t.reshape(-1).split(1 << 20))


def nonfinite_weight(where: str, name: str, t: torch.Tensor) -> ValueError:
    return ValueError(f"{where}: weight {name} holds {int((~torch.isfinite(t)).sum())} NaN/inf value(s); the "
                      f"checkpoint is damaged, came from a diverged run, or overflows the dtype it is loaded in")
