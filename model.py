"""
The transformer of "Transformers Are Born Biased", with every knob the paper turns.

One GPTConfig and one GPT module express, by config alone, each architecture the paper
probes (Sections 2.1, 3, 4.1, 6.2): GPT-2 / LLaMA-2 / Qwen-style blocks, the
full / attention-only / MLP-only ablation, residual-free MLP0-like stacks, uniform
("Attn0"-like) attention, and the positional variance calibration and head-wise RMSNorm that
remove attention sinks.

A block is pre-norm:  x <- x + Attn(Norm(x));  x <- x + MLP(Norm(x)).
Inside attention, after values are aggregated and before W_O, each head's output at
1-indexed position t can be rescaled (calibration, Section 6.2.1) and/or RMS-normalized
(head_norm). Weights are NOT initialized here: init.py owns that (GPT-2 scheme, seeded).

    python model.py              # table of presets with parameter counts -> out/model/presets.json

A train.py checkpoint rebuilds its model from the file alone: GPT.from_checkpoint(path).
"""
import argparse
import dataclasses
import json
import math
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
    "sublayers": ("both", "attn", "mlp"),
    "attention": ("softmax", "uniform"),
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
    mlp_hidden: Optional[int] = None  # MLP hidden width; None = 4 * n_embd
    norm: str = "layernorm"           # pre-norm of each sublayer, and the final norm
    norm_eps: float = 1e-5
    activation: str = "gelu"          # gelu is exact (erf); gelu_tanh is GPT-2's approximation
    position: str = "rope"
    rope_theta: float = 10000.0
    sublayers: str = "both"           # both | attn (self-attention-only) | mlp (MLP-only), Sec 4.1
    residual: bool = True             # False: x <- sublayer(Norm(x)), as in MLP0 stacks
    attention: str = "softmax"        # uniform: causal running mean of V, still through W_V, W_O
    calibration: str = "none"         # none | amplify (x sqrt(t)) | attenuate (x sqrt(t / T))
    head_norm: bool = False           # head-wise RMSNorm before W_O, gain of size head_dim
    bias: bool = True                 # biases of every linear layer and of LayerNorm
    qkv_bias: bool = False            # bias on the q, k, v projections only (Qwen style)
    tie_embeddings: bool = True       # LM head = token embedding (GPT-2); False: own matrix

    def __post_init__(self):
        for knob, allowed in CHOICES.items():
            if getattr(self, knob) not in allowed:
                raise ValueError(f"unknown {knob}={getattr(self, knob)!r}; choose one of {allowed}")
        for knob in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            if int(getattr(self, knob)) < 1:
                raise ValueError(f"{knob} must be a positive integer, got {getattr(self, knob)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head={self.n_head} is not a multiple of n_kv_head={self.kv_heads}")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def hidden(self) -> int:
        return self.mlp_hidden or 4 * self.n_embd


# Dense bf16 peak of known GPUs (flop/s), matched as a substring of torch.cuda.get_device_name;
# more specific names first. MFU = achieved flop/s / this. Scripts take --peak_tflops to override.
BF16_PEAK_FLOPS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12,
                   "A10G": 70e12, "RTX 4090": 165e12}


def peak_flops(device) -> Optional[float]:
    """The bf16 peak of `device` from BF16_PEAK_FLOPS, or None (CPU, unknown GPU)."""
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peak in BF16_PEAK_FLOPS.items():
        if key in name:
            return peak
    return None


# Presets: the papers' numbers. "RoPE GPT-2" = GPT-2 blocks with rotary instead of learned positions.
PRESETS: dict[str, GPTConfig] = {
    "gpt2-nano": GPTConfig(),
    "llama2-nano": GPTConfig(vocab_size=32000, block_size=2048, norm="rmsnorm", activation="swiglu",
                             mlp_hidden=2048, bias=False, tie_embeddings=False),   # paper Table 13
    "qwen-nano": GPTConfig(vocab_size=32000, block_size=2048, norm="rmsnorm", activation="swiglu",
                           mlp_hidden=3072, bias=False, qkv_bias=True, tie_embeddings=False),
    "gpt2-1.2b": GPTConfig(n_layer=24, n_head=32, n_embd=2048),
    "tiny": GPTConfig(n_layer=4, n_head=4, n_embd=64, vocab_size=512, block_size=256),
}


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

def rope_tables(T: int, head_dim: int, theta: float, device=None):
    """cos and sin of the rotary angles, (T, head_dim/2), always computed in float32."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(T, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x_i, x_{i+hd/2}) by angle t * theta^(-2i/hd): the "rotate-half" layout of
    Hugging Face LLaMA / Qwen2 / GPT-NeoX checkpoints (not Meta's interleaved pairs).
    Scores q_m . k_n then depend on m - n only."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def make_norm(config: GPTConfig, width: int) -> nn.Module:
    if config.norm == "layernorm":
        return nn.LayerNorm(width, eps=config.norm_eps, bias=config.bias)
    if config.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=config.norm_eps)
    return nn.Identity()


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        H, Hkv, hd = config.n_head, config.kv_heads, config.head_dim
        # q, k, v in one matrix: rows [0, H hd) are q, then Hkv hd rows of k, then of v
        self.c_attn = nn.Linear(config.n_embd, (H + 2 * Hkv) * hd, bias=config.bias or config.qkv_bias)
        self.c_proj = nn.Linear(H * hd, config.n_embd, bias=config.bias)   # W_O, a residual projection
        if config.head_norm:
            # one gain vector of size head_dim, shared by all heads
            self.head_norm = nn.RMSNorm(hd, eps=config.norm_eps)

    def forward(self, x, rope=None, want_probs=False, want_head_out=False, mask=None):
        cfg = self.config
        B, T, _ = x.shape
        H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
        q, k, v = self.c_attn(x).split([H * hd, Hkv * hd, Hkv * hd], dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)                  # (B, H, T, hd)
        k = k.view(B, T, Hkv, hd).transpose(1, 2)                # (B, Hkv, T, hd)
        v = v.view(B, T, Hkv, hd).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        t = torch.arange(1, T + 1, device=x.device, dtype=torch.float32).view(T, 1)   # 1-indexed
        probs = None
        if cfg.attention == "uniform" and mask is None:
            # Attn0-like: position t averages the values of positions 1..t (summed in fp32)
            y = (v.float().cumsum(dim=2) / t).to(v.dtype).repeat_interleave(H // Hkv, dim=1)
            if want_probs:
                probs = (torch.ones(T, T, device=x.device).tril() / t).to(q.dtype).expand(B, H, T, T)
        elif want_probs or mask is not None:
            # explicit path, only when the probabilities or an edited mask (sink.py) are asked for;
            # with the causal mask it is the same maths as SDPA
            allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if mask is None else mask
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
            if cfg.attention == "uniform":
                probs = (allowed.float() / allowed.sum(dim=-1, keepdim=True)).to(q.dtype).expand(B, H, T, T)
            else:
                scores = ((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))).masked_fill(~allowed, float("-inf"))
                probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            y = probs @ v
            probs = probs if want_probs else None
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
        # Section 6.2.1: the running average leaves position t with variance ~ 1/t; undo it
        if cfg.calibration == "amplify":
            y = y * t.sqrt().to(y.dtype)
        elif cfg.calibration == "attenuate":
            y = y * (t / cfg.block_size).sqrt().to(y.dtype)
        if cfg.head_norm:
            y = self.head_norm(y)
        head_out = y if want_head_out else None
        y = y.transpose(1, 2).reshape(B, T, H * hd)
        return self.c_proj(y), probs, head_out


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.activation = config.activation
        self.c_fc = nn.Linear(config.n_embd, config.hidden, bias=config.bias)      # up
        if config.activation == "swiglu":
            self.c_gate = nn.Linear(config.n_embd, config.hidden, bias=config.bias)  # gate
        self.c_proj = nn.Linear(config.hidden, config.n_embd, bias=config.bias)    # down (residual proj)

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
        self.config = config
        if config.sublayers in ("both", "attn"):
            self.ln_1 = make_norm(config, config.n_embd)
            self.attn = CausalSelfAttention(config)
        if config.sublayers in ("both", "mlp"):
            self.ln_2 = make_norm(config, config.n_embd)
            self.mlp = MLP(config)

    def forward(self, x, rope=None, want_probs=False, want_head_out=False, mask=None):
        probs = head_out = None
        if hasattr(self, "attn"):
            a, probs, head_out = self.attn(self.ln_1(x), rope, want_probs, want_head_out, mask)
            x = x + a if self.config.residual else a
        if hasattr(self, "mlp"):
            m = self.mlp(self.ln_2(x))
            x = x + m if self.config.residual else m
        return x, probs, head_out


def check_attn_mask(mask: torch.Tensor, T: int) -> torch.Tensor:
    """An edited attention mask must be (T, T) bool, causal, and give every query a key."""
    if mask.shape != (T, T) or mask.dtype != torch.bool:
        raise ValueError(f"attn_mask must be a ({T}, {T}) bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    if mask.triu(diagonal=1).any():
        raise ValueError("attn_mask lets a query see a later key; an edited mask must stay causal")
    if not mask.any(dim=-1).all():
        raise ValueError("attn_mask leaves a query with no key to attend to")
    return mask


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

    def num_params(self, include_embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if not include_embeddings:
            n -= self.transformer.wte.weight.numel()
            if self.lm_head is not None:
                n -= self.lm_head.weight.numel()
            if "wpe" in self.transformer:
                n -= self.transformer.wpe.weight.numel()
        return n

    def head(self, x):
        """The LM head (unembedding) on final-norm states."""
        return F.linear(x, self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight)

    @classmethod
    def from_checkpoint(cls, path: str, device="cpu") -> "GPT":
        """Rebuild the model of a train.py checkpoint from the file alone (config + weights)."""
        ckpt = read_checkpoint(path)
        with torch.device("meta"):      # shapes only; the weights come from the file
            model = cls(GPTConfig(**ckpt["config"]))
        model = model.to_empty(device=device)
        expected, got = model.state_dict(), ckpt["model"]
        wrong = sorted(set(expected) ^ set(got)) + sorted(
            k for k in set(expected) & set(got) if expected[k].shape != got[k].shape)
        if wrong:
            raise ValueError(f"{path}: weights do not match the config stored beside them "
                             f"(first mismatches: {wrong[:5]}); the file is damaged or was edited")
        model.load_state_dict(got)
        return model

    @classmethod
    def from_pretrained(cls, path: str, device="cpu") -> "GPT":
        """A Hugging Face directory of LLaMA, Qwen2 or GPT-2 architecture, loaded without the
        transformers library; the weights keep their dtype (bf16 stays bf16)."""
        config, sd = read_pretrained(path)
        with torch.device("meta"):
            model = cls(config)
        model = model.to_empty(device=device).to(sd["transformer.wte.weight"].dtype)
        model.load_state_dict(sd)
        return model

    def forward(self, idx=None, targets=None, *, embeds=None, hidden=None, attn_probs=False,
                head_out=False, logits=True, attn_mask=None):
        """Run the model on token ids idx (B, T) or input embeddings embeds (B, T, n_embd).

        Plain call: last-position logits (B, vocab). With targets (B, T): (logits (B, T, vocab), loss).
        Asking for anything else returns a dict holding only what was asked, from this one pass:
          hidden="all" | "last": list of n_layer + 2 residual-stream states -- the input (after
              position embedding), after each block, after the final norm -- each (B, T, d) or (B, d)
          attn_probs=True: list over layers of (B, H, T, T) attention probabilities (explicit softmax)
          head_out=True: list over layers of (B, H, T, head_dim), each head's aggregated output as
              W_O sees it (after calibration and head_norm)
          logits=False: skip the LM head ("logits" absent from the dict)
        attn_mask: optional (T, T) bool, True where query t may attend to key s, used in every layer
            instead of the causal mask; it must stay causal and leave each query a key (sink.py's
            mask edit: "token k attends only to itself").
        """
        cfg = self.config
        x = self._embed(idx, embeds)
        B, T, _ = x.shape
        rope = rope_tables(T, cfg.head_dim, cfg.rope_theta, x.device) if cfg.position == "rope" else None
        if attn_mask is not None:
            attn_mask = check_attn_mask(attn_mask, T).to(x.device)
        want_dict = hidden is not None or attn_probs or head_out or not logits
        if hidden not in (None, "all", "last"):
            raise ValueError(f"hidden must be None, 'all' or 'last', got {hidden!r}")
        keep = (lambda h: h) if hidden == "all" else (lambda h: h[:, -1])
        states, probs_list, heads_list = [], [], []
        if hidden:
            states.append(keep(x))
        for block in self.transformer.h:
            x, probs, heads = block(x, rope, attn_probs, head_out, attn_mask)
            if hidden:
                states.append(keep(x))
            if attn_probs:
                probs_list.append(probs)
            if head_out:
                heads_list.append(heads)
        x = self.transformer.ln_f(x)
        if hidden:
            states.append(keep(x))

        out = {}
        loss = None
        if logits:
            if targets is not None:
                out["logits"] = self.head(x)
                loss = F.cross_entropy(out["logits"].flatten(0, 1).float(), targets.flatten(), ignore_index=-1)
                out["loss"] = loss
            else:
                out["logits"] = self.head(x[:, -1])     # the LM head on the last position only
        if not want_dict:
            return (out["logits"], loss) if targets is not None else out["logits"]
        if hidden:
            out["hidden"] = states
        if attn_probs:
            out["attn_probs"] = [p for p in probs_list if p is not None]
        if head_out:
            out["head_out"] = [h for h in heads_list if h is not None]
        return out

    def _embed(self, idx, embeds):
        cfg = self.config
        if (idx is None) == (embeds is None):
            raise ValueError("pass exactly one of idx (token ids, B x T) or embeds (B x T x n_embd)")
        if idx is not None:
            if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
                raise ValueError(f"idx must be integer token ids of shape (B, T), got {idx.dtype} {tuple(idx.shape)}")
            if not torch.compiler.is_compiling() and idx.numel() and (idx.min() < 0 or idx.max() >= cfg.vocab_size):
                raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); got min {int(idx.min())}, "
                                 f"max {int(idx.max())} -- is the data tokenized for this vocabulary?")
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


# ----------------------------------------------------------------------------- checkpoints

def read_checkpoint(path: str) -> dict:
    """A train.py checkpoint as a dict: config, model (state dict), optimizer, step, seeds,
    tokenizer, args, ... Loaded with weights_only=True: a checkpoint is data, never code."""
    if not os.path.isfile(path):
        hint = " (a Hugging Face directory? use GPT.from_pretrained)" if os.path.isdir(path) else ""
        raise FileNotFoundError(f"no checkpoint file at {path!r}{hint}")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or "config" not in ckpt or "model" not in ckpt:
        raise ValueError(f"{path} is not a train.py checkpoint (it has no 'config' and 'model' entries)")
    known = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(ckpt["config"]) - known)
    if unknown:
        raise ValueError(f"{path} has config knobs this model.py does not know: {unknown}")
    return ckpt


# ----------------------------------------------------------------------------- Hugging Face checkpoints

HF_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel")


def hf_config(cfg: dict) -> GPTConfig:
    """The GPTConfig of a Hugging Face config.json (LLaMA, Qwen2, GPT-2); anything this model cannot
    reproduce exactly is an error, not an approximation."""
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch not in HF_ARCHITECTURES:
        raise ValueError(f"unsupported architecture {arch!r}; model.py loads {', '.join(HF_ARCHITECTURES)}")
    if arch == "GPT2LMHeadModel":
        if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
            raise ValueError(f"unsupported GPT-2 activation {cfg['activation_function']!r}")
        return GPTConfig(block_size=cfg["n_positions"], vocab_size=cfg["vocab_size"], n_layer=cfg["n_layer"],
                         n_head=cfg["n_head"], n_embd=cfg["n_embd"], mlp_hidden=cfg.get("n_inner"),
                         norm_eps=cfg.get("layer_norm_epsilon", 1e-5), position="learned",
                         activation="gelu" if cfg.get("activation_function") == "gelu" else "gelu_tanh",
                         bias=True, tie_embeddings=True)
    if cfg.get("rope_scaling"):
        raise ValueError(f"rope_scaling {cfg['rope_scaling']} is not implemented; only plain RoPE loads exactly")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r} (SwiGLU needs silu)")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if head_dim * cfg["num_attention_heads"] != cfg["hidden_size"]:
        raise ValueError("head_dim x heads != hidden_size is not supported")
    qkv_bias = arch == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias", False))
    return GPTConfig(block_size=cfg.get("max_position_embeddings", 2048), vocab_size=cfg["vocab_size"],
                     n_layer=cfg["num_hidden_layers"], n_head=cfg["num_attention_heads"],
                     n_kv_head=cfg.get("num_key_value_heads"), n_embd=cfg["hidden_size"],
                     mlp_hidden=cfg["intermediate_size"], norm="rmsnorm", norm_eps=cfg.get("rms_norm_eps", 1e-6),
                     activation="swiglu", position="rope", rope_theta=cfg.get("rope_theta", 10000.0),
                     bias=False, qkv_bias=qkv_bias, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))


def hf_state_dict(tensors: dict, config: GPTConfig, gpt2: bool) -> dict:
    """Hugging Face tensor names and layouts -> this model's. GPT-2 stores Conv1D weights as
    (in, out): transpose. LLaMA/Qwen2 store q, k, v apart: concatenate them into c_attn."""
    strip = lambda name: name.split("transformer.", 1)[-1] if gpt2 else name.split("model.", 1)[-1]
    t = {strip(k): v for k, v in tensors.items()}
    sd = {}
    if gpt2:
        sd["transformer.wte.weight"], sd["transformer.wpe.weight"] = t["wte.weight"], t["wpe.weight"]
        sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = t["ln_f.weight"], t["ln_f.bias"]
        for i in range(config.n_layer):
            for name in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.bias",
                         "attn.c_proj.bias", "mlp.c_fc.bias", "mlp.c_proj.bias"):
                sd[f"transformer.h.{i}.{name}"] = t[f"h.{i}.{name}"]
            for name in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"):
                sd[f"transformer.h.{i}.{name}"] = t[f"h.{i}.{name}"].t().contiguous()   # Conv1D: (in, out)
        return sd
    sd["transformer.wte.weight"], sd["transformer.ln_f.weight"] = t["embed_tokens.weight"], t["norm.weight"]
    if not config.tie_embeddings:
        sd["lm_head.weight"] = tensors["lm_head.weight"]
    for i in range(config.n_layer):
        p, o = f"layers.{i}.", f"transformer.h.{i}."
        sd[o + "attn.c_attn.weight"] = torch.cat([t[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        if config.qkv_bias:
            sd[o + "attn.c_attn.bias"] = torch.cat([t[p + f"self_attn.{x}_proj.bias"] for x in "qkv"])
        sd[o + "attn.c_proj.weight"] = t[p + "self_attn.o_proj.weight"]
        sd[o + "ln_1.weight"], sd[o + "ln_2.weight"] = t[p + "input_layernorm.weight"], t[p + "post_attention_layernorm.weight"]
        sd[o + "mlp.c_fc.weight"], sd[o + "mlp.c_gate.weight"] = t[p + "mlp.up_proj.weight"], t[p + "mlp.gate_proj.weight"]
        sd[o + "mlp.c_proj.weight"] = t[p + "mlp.down_proj.weight"]
    return sd


def read_pretrained(path: str):
    """(GPTConfig, state dict) of a Hugging Face directory: config.json + *.safetensors, sharded or not."""
    from safetensors.torch import load_file     # the one optional dependency, only here
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory (no config.json)")
    hf = json.load(open(cfg_path))
    try:
        config = hf_config(hf)
    except KeyError as e:
        raise ValueError(f"{cfg_path} lacks the field {e}") from None
    index = os.path.join(path, "model.safetensors.index.json")
    shards = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.isfile(index) else \
        sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not shards:
        raise FileNotFoundError(f"no *.safetensors weights in {path!r} (.bin pickles are not loaded: they run code)")
    tensors = {}
    for shard in shards:
        tensors.update(load_file(os.path.join(path, shard)))
    gpt2 = hf["architectures"][0] == "GPT2LMHeadModel"
    try:
        sd = hf_state_dict(tensors, config, gpt2)
    except KeyError as e:
        raise ValueError(f"{path}: tensor {e} missing for a {hf['architectures'][0]} checkpoint") from None
    return config, sd


def load_model(path: str, device="cpu") -> GPT:
    """Any model this project reads: a train.py checkpoint file or a Hugging Face directory."""
    if os.path.isdir(path):
        return GPT.from_pretrained(path, device=device)
    return GPT.from_checkpoint(path, device=device)


# ----------------------------------------------------------------------------- command line

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


def main():
    parser = argparse.ArgumentParser(description="List the presets with their parameter counts.")
    parser.add_argument("--out", default="out/model", help="directory for presets.json")
    args = parser.parse_args()
    rows = {}
    print(f"{'preset':<12} {'layers':>6} {'heads':>5} {'width':>5} {'mlp':>5} {'vocab':>6} {'ctx':>5}  "
          f"{'params':>14} {'non-embedding':>14}")
    for name, cfg in PRESETS.items():
        with torch.device("meta"):   # shapes only: no memory, no init
            model = GPT(cfg)
        rows[name] = dict(config=dataclasses.asdict(cfg), params=model.num_params(),
                          params_non_embedding=model.num_params(include_embeddings=False))
        print(f"{name:<12} {cfg.n_layer:>6} {cfg.n_head:>5} {cfg.n_embd:>5} {cfg.hidden:>5} {cfg.vocab_size:>6} "
              f"{cfg.block_size:>5}  {rows[name]['params']:>14,} {rows[name]['params_non_embedding']:>14,}")
    write_json(os.path.join(args.out, "presets.json"), rows)
    print(f"wrote {os.path.join(args.out, 'presets.json')}")


def write_json(path: str, obj) -> None:
    """Write JSON atomically: a temp file in the same directory, then rename."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
