"""Ground truth for ten more Hugging Face families: tiny random checkpoints and naive float64 forwards.

Pure torch + safetensors. Nothing here imports transformers, model.py, hf.py or common.py, so the forwards
below are an implementation independent of both the loader and transformers. The six dense families were checked
against transformers 5.24.0 and 4.57.6 (eager attention, float64) to ~1e-14 relative error; the checking script
and its output live outside the repo (see the report that came with this file). The four mixtures of experts
(Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE) are written from transformers 4.57.6's and 5.24.0's modeling and
configuration code, as read, token by token. tests/test_against_transformers.py compares every checkpoint here with
transformers where it is installed (each within 1.2e-6 of 4.57.6 and 5.24.0, float64 but for their float32 RoPE).
Families and variants:

    CASES[name] = dict(family=..., ids=[(B, T), ...], **variant defaults)
    spec, config, tensors = checkpoint(name, spelling="5.x" | "4.x", seed=0, **overrides)
    logits, final_hidden = naive_forward(spec, tensors, ids)      # float64; final_hidden is after the final norm
    write_checkpoint(path, config, tensors, shards=1)             # config.json + safetensors (+ index if sharded)

`config` is the config.json dict (with `architectures`) in transformers 5.x spelling (`rope_parameters`, per
layer type for Gemma3) or 4.x spelling (`rope_theta` + `rope_scaling`; GPT-NeoX `rotary_pct` +
`rotary_emb_base`; Gemma3 `rope_local_base_freq`; Phi3 `rope_scaling={"type": "longrope", ...}`). `tensors`
holds float32 tensors under exactly the names save_pretrained writes (same layouts). `spec` states every knob
that changes the eval forward plainly (see SPEC KEYS below), so a loader author can map config -> knobs and
compare with spec. Random values are ~0.2 scale; norm gains are random too (1 + 0.2 randn, or 0.2 randn for
Gemma's x * (1 + w) norms), so a misread gain, bias, layout or scale shows.

Every `ids` shape listed in CASES has T larger than the case's sliding window, so windows bite, and the Phi3
longrope cases list one T <= original_max_position_embeddings (short factors) and one T above it (long factors).

SPEC KEYS
    family        "gpt_neox" | "olmo2" | "gemma" | "gemma2" | "gemma3" | "phi3" | "mixtral" | "qwen2_moe" | "olmoe"
                  | "qwen3_moe"
    arch          architectures[0]; prefix: tensor-name prefix of the decoder ("gpt_neox.", "model.",
                  "language_model.model." for Gemma3ForConditionalGeneration); lm_head: its tensor name or None
                  when tied (tie=True: logits = final_hidden @ embed.T)
    V d L H KV hd ffn P   vocab, hidden, layers, query heads, kv heads, head_dim, intermediate, max positions
    norm          "layernorm" (weight+bias) | "rmsnorm" (x * w) | "rmsnorm_plus1" (x * (1 + w), Gemma); norm_eps
    block         "parallel" (NeoX: x + attn(ln1 x) + mlp(ln2 x)) | "sequential" (x + attn(n1 x), then + mlp(n2 h))
                  | "post" (OLMo2: x + n_attn(attn(x)), then + n_ffn(mlp(h)); no input norm)
                  | "sandwich" (Gemma2/3: x + n_post_attn(attn(n_in x)), then + n_post_ffn(mlp(n_pre_ffn h)))
    activation    "gelu" (exact erf) | "gelu_tanh" | "silu";  mlp: "plain" (NeoX, biased) | "gated" (act(gate)*up)
    qkv           "neox_fused" (per-head [q|k|v] rows) | "phi3_fused" ([all q | all k | all v] rows) | "separate"
    attention_bias  biases on q/k/v/o (or query_key_value/dense); qkv_bias (Qwen2-MoE): biases on q/k/v alone
    qk_norm       None | "whole" (OLMo2: RMSNorm over the whole q (H*hd) / k (KV*hd) projection, before RoPE)
                  | "per_head_plus1" (Gemma3: x*(1+w) RMSNorm over each head's hd, before RoPE)
                  | "per_head" (Qwen3-MoE: x*w RMSNorm over each head's hd, before RoPE)
    attn_scale    the factor on q.k (hd**-0.5, or query_pre_attn_scalar**-0.5 for Gemma2/3)
    attn_softcap  None or c: scores = c * tanh(scores / c) before the mask (Gemma2 only; Gemma3 ignores it)
    final_softcap None or c: logits = c * tanh(logits / c)
    embed_scale   None or sqrt(d): embeddings are multiplied by sqrt(d) rounded to the model dtype (Gemma)
    windows       per layer: None (full causal) or W: key j visible from query i iff i - W < j <= i (W keys,
                  the query's own position included)
    ropes         per layer: dict(type="default"|"linear"|"longrope", theta, dim, ...) where dim =
                  int(hd * partial_rotary_factor); inv_freq[i] = theta ** (-2i/dim) for i < ceil(dim/2); the
                  first 2*ceil(dim/2) dims of every head are rotated (rotate-half pairing i <-> i + n_freq), the
                  rest pass through. linear: inv_freq / factor. longrope: see _inv_freq.
  a mixture of experts (absent in the dense families):
    experts       E, the experts of an MoE layer; moe_layers: per layer, whether its MLP is the experts (else the
                  dense gated MLP mlp.{gate,up,down}_proj of width ffn)
    top_k         k: each token goes through its k experts of highest softmax(router x) probability
    norm_topk     the k probabilities divided by their sum (Mixtral always; norm_topk_prob) or used as they are
    shared_expert a gated MLP mlp.shared_expert.* of width shared_ffn that every token goes through, times
                  sigmoid(mlp.shared_expert_gate x) (Qwen2-MoE)
    expert_layout "per_expert": {moe_module}.gate.weight (E, d) and {moe_module}.experts.{e}.{gate,up,down}.weight
                  under the family's names (expert_names); "fused" (transformers 5's own): mlp.gate.weight,
                  mlp.experts.gate_up_proj (E, 2 expert_ffn, d), rows [gate | up], and mlp.experts.down_proj
                  (E, d, expert_ffn)
"""
import functools
import json
import math
import os

import torch

# ----------------------------------------------------------------------------- cases

CASES = {
    # GPT-NeoX / Pythia: fused per-head qkv, parallel residual, partial rotary (rotary_pct), exact GELU, LayerNorm
    "pythia": dict(family="gpt_neox", ids=[(2, 12)]),
    "pythia-old-buffers": dict(family="gpt_neox", old_buffers=True, ids=[(2, 12)]),   # attention.bias etc.
    "neox-sequential-tied-nobias": dict(family="gpt_neox", parallel=False, rotary_pct=0.5, theta=5000.0,
                                        attention_bias=False, tie=True, eps=1e-6, ids=[(2, 12)]),
    "neox-linear-rope": dict(family="gpt_neox", rope_scaling=dict(type="linear", factor=2.0), ids=[(2, 12)]),
    # OLMo2: post-sublayer RMSNorms, q/k RMSNorm over the whole projection
    "olmo2": dict(family="olmo2", ids=[(2, 12)]),
    "olmo2-bias-tied-linear": dict(family="olmo2", attention_bias=True, tie=True,
                                   rope_scaling=dict(type="linear", factor=2.0), ids=[(2, 12)]),
    # Gemma: sqrt(d) embedding scale, x*(1+w) RMSNorm, GeGLU (tanh), head_dim != d/H, MQA, tied
    "gemma": dict(family="gemma", ids=[(2, 12)]),
    "gemma-legacy-gelu-untied-bias": dict(family="gemma", kv=4, legacy_gelu=True, tie=False, attention_bias=True,
                                          ids=[(2, 12)]),
    # Gemma2: sandwich norms, softcaps (small, so tanh bites), query_pre_attn_scalar, window on even layers
    "gemma2": dict(family="gemma2", ids=[(2, 12)]),
    "gemma2-defaults-no-softcap": dict(family="gemma2", softcaps=False, minimal=True, ids=[(2, 12)]),
    # Gemma 2 and 3 read hidden_activation "gelu" as exact (erf) GELU, in transformers 4.x and 5.x alike
    "gemma2-exact-gelu": dict(family="gemma2", hidden_activation="gelu", ids=[(2, 12)]),
    # Gemma3: per-head q/k norm, layer_types, local rope base, global rope scaling
    "gemma3-1b-like": dict(family="gemma3", L=7, minimal=True, ids=[(2, 12)]),          # default pattern 6
    "gemma3-4b-like": dict(family="gemma3", pattern=2, kv=2, rope_scaling=dict(rope_type="linear", factor=8.0),
                           ids=[(2, 12)]),
    "gemma3-custom-types-softcap": dict(family="gemma3", layer_types=["full_attention", "sliding_attention",
                                                                      "sliding_attention", "full_attention"],
                                        final_softcap=3.0, attn_softcap_in_config=2.0, theta=5e5, local_theta=2e4,
                                        ids=[(2, 12)]),
    "gemma3-conditional-generation": dict(family="gemma3", pattern=2, kv=2, conditional=True,
                                          rope_scaling=dict(rope_type="linear", factor=8.0), ids=[(2, 12)]),
    "gemma3-exact-gelu": dict(family="gemma3", pattern=2, hidden_activation="gelu", ids=[(2, 12)]),
    # Phi3: fused qkv_proj and gate_up_proj, SwiGLU, optional window on every layer, longrope, partial rotary
    "phi3-mini-4k-like": dict(family="phi3", window=5, ids=[(2, 12)]),
    "phi3.5-longrope": dict(family="phi3", longrope=True, window=262144, ids=[(2, 12), (2, 20)]),
    "phi4-mini-longrope-partial": dict(family="phi3", longrope=True, d=64, kv=2, partial=0.75, tie=True,
                                       ids=[(2, 12), (2, 20)]),
    # mixtures of experts, one tensor per expert as published, or fused as transformers 5 holds them
    "mixtral": dict(family="mixtral", theta=1e6, ids=[(2, 12)]),
    "mixtral-fused-window-tied": dict(family="mixtral", layout="fused", window=5, tie=True, E=3, ids=[(2, 12)]),
    "qwen2-moe": dict(family="qwen2_moe", ids=[(2, 12)]),
    "qwen2-moe-fused-dense-first-renormalized": dict(family="qwen2_moe", layout="fused", mlp_only=(0,), norm_topk=True,
                                                     ids=[(2, 12)]),
    "olmoe": dict(family="olmoe", ids=[(2, 12)]),
    "olmoe-fused-bias-renormalized-top1": dict(family="olmoe", layout="fused", attention_bias=True, norm_topk=True,
                                               k=1, ids=[(2, 12)]),
    "qwen3-moe-head-dim-16": dict(family="qwen3_moe", hd=16, ids=[(2, 12)]),
    "qwen3-moe-fused-window-dense-first-renormalized-bias-tied": dict(
        family="qwen3_moe", layout="fused", window=5, mlp_only=(0,), norm_topk=True, attention_bias=True, tie=True,
        ids=[(2, 12)]),
}

# ----------------------------------------------------------------------------- random tensors


def _rand(g, *shape, scale=0.2):
    return torch.randn(*shape, generator=g) * scale


def _gain(g, n, plus1):
    """A norm weight as stored: Gemma stores w with output x * (1 + w); the others store the gain itself."""
    return _rand(g, n) if plus1 else 1.0 + _rand(g, n)


# ----------------------------------------------------------------------------- builders, one per family


def _neox(spelling, g, *, d=64, L=3, H=4, ffn=128, V=100, P=64, rotary_pct=0.25, theta=10000.0, parallel=True,
          attention_bias=True, tie=False, eps=1e-5, rope_scaling=None, old_buffers=False):
    hd = d // H
    dim = int(hd * rotary_pct)
    rope = dict(type="default", theta=theta, dim=dim)
    if rope_scaling:
        rope.update(type=rope_scaling["type"], factor=rope_scaling["factor"])
    spec = dict(family="gpt_neox", arch="GPTNeoXForCausalLM", prefix="gpt_neox.",
                lm_head=None if tie else "embed_out.weight", tie=tie, V=V, d=d, L=L, H=H, KV=H, hd=hd, ffn=ffn,
                P=P, norm="layernorm", norm_eps=eps, block="parallel" if parallel else "sequential",
                activation="gelu", mlp="plain", qkv="neox_fused", attention_bias=attention_bias, qk_norm=None,
                attn_scale=hd ** -0.5, attn_softcap=None, final_softcap=None, embed_scale=None,
                windows=[None] * L, ropes=[rope] * L)
    t = {"gpt_neox.embed_in.weight": _rand(g, V, d),
         "gpt_neox.final_layer_norm.weight": _gain(g, d, False), "gpt_neox.final_layer_norm.bias": _rand(g, d)}
    for i in range(L):
        p = f"gpt_neox.layers.{i}."
        t.update({p + "input_layernorm.weight": _gain(g, d, False), p + "input_layernorm.bias": _rand(g, d),
                  p + "post_attention_layernorm.weight": _gain(g, d, False),
                  p + "post_attention_layernorm.bias": _rand(g, d),
                  p + "attention.query_key_value.weight": _rand(g, 3 * d, d),    # rows: head h -> [q_h | k_h | v_h]
                  p + "attention.dense.weight": _rand(g, d, d),
                  p + "mlp.dense_h_to_4h.weight": _rand(g, ffn, d), p + "mlp.dense_h_to_4h.bias": _rand(g, ffn),
                  p + "mlp.dense_4h_to_h.weight": _rand(g, d, ffn), p + "mlp.dense_4h_to_h.bias": _rand(g, d)})
        if attention_bias:
            t.update({p + "attention.query_key_value.bias": _rand(g, 3 * d), p + "attention.dense.bias": _rand(g, d)})
        if old_buffers:     # what pre-2023 Pythia checkpoints carry; transformers ignores them, so must a loader
            t.update({p + "attention.bias": torch.ones(P, P, dtype=torch.bool).tril().view(1, 1, P, P),
                      p + "attention.masked_bias": torch.tensor(-1e9),
                      p + "attention.rotary_emb.inv_freq":
                          1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)})
    if not tie:
        t["embed_out.weight"] = _rand(g, V, d)
    cfg = dict(architectures=["GPTNeoXForCausalLM"], model_type="gpt_neox", vocab_size=V, hidden_size=d,
               num_hidden_layers=L, num_attention_heads=H, intermediate_size=ffn, hidden_act="gelu",
               max_position_embeddings=P, layer_norm_eps=eps, use_parallel_residual=parallel,
               attention_bias=attention_bias, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=2,
               attention_dropout=0.0, hidden_dropout=0.0, classifier_dropout=0.1, initializer_range=0.02,
               use_cache=True)
    if spelling == "4.x":       # Pythia's own spelling; 4.57 also writes rope_theta/partial_rotary_factor copies
        cfg.update(rotary_pct=rotary_pct, rotary_emb_base=theta, torch_dtype="float32",
                   rope_scaling=dict(rope_scaling) if rope_scaling else None)
    else:
        rp = dict(rope_type="default", rope_theta=theta, partial_rotary_factor=rotary_pct)
        if rope_scaling:
            rp.update(rope_type=rope_scaling["type"], factor=rope_scaling["factor"])
        cfg.update(rope_parameters=rp, dtype="float32")
    return spec, cfg, t


def _olmo2(spelling, g, *, d=48, L=3, H=4, kv=2, ffn=96, V=100, P=64, theta=500000.0, eps=1e-6,
           attention_bias=False, tie=False, rope_scaling=None):
    hd = d // H
    rope = dict(type="default", theta=theta, dim=hd)
    if rope_scaling:
        rope.update(type=rope_scaling["type"], factor=rope_scaling["factor"])
    spec = dict(family="olmo2", arch="Olmo2ForCausalLM", prefix="model.", lm_head=None if tie else "lm_head.weight",
                tie=tie, V=V, d=d, L=L, H=H, KV=kv, hd=hd, ffn=ffn, P=P, norm="rmsnorm", norm_eps=eps, block="post",
                activation="silu", mlp="gated", qkv="separate", attention_bias=attention_bias, qk_norm="whole",
                attn_scale=hd ** -0.5, attn_softcap=None, final_softcap=None, embed_scale=None,
                windows=[None] * L, ropes=[rope] * L)
    t = {"model.embed_tokens.weight": _rand(g, V, d), "model.norm.weight": _gain(g, d, False)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": _rand(g, H * hd, d),
                  p + "self_attn.k_proj.weight": _rand(g, kv * hd, d),
                  p + "self_attn.v_proj.weight": _rand(g, kv * hd, d),
                  p + "self_attn.o_proj.weight": _rand(g, d, H * hd),
                  p + "self_attn.q_norm.weight": _gain(g, H * hd, False),
                  p + "self_attn.k_norm.weight": _gain(g, kv * hd, False),
                  p + "post_attention_layernorm.weight": _gain(g, d, False),
                  p + "post_feedforward_layernorm.weight": _gain(g, d, False),
                  p + "mlp.gate_proj.weight": _rand(g, ffn, d), p + "mlp.up_proj.weight": _rand(g, ffn, d),
                  p + "mlp.down_proj.weight": _rand(g, d, ffn)})
        if attention_bias:
            t.update({p + "self_attn.q_proj.bias": _rand(g, H * hd), p + "self_attn.k_proj.bias": _rand(g, kv * hd),
                      p + "self_attn.v_proj.bias": _rand(g, kv * hd), p + "self_attn.o_proj.bias": _rand(g, d)})
    if not tie:
        t["lm_head.weight"] = _rand(g, V, d)
    cfg = dict(architectures=["Olmo2ForCausalLM"], model_type="olmo2", vocab_size=V, hidden_size=d,
               intermediate_size=ffn, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=kv,
               hidden_act="silu", max_position_embeddings=P, rms_norm_eps=eps, attention_bias=attention_bias,
               attention_dropout=0.0, tie_word_embeddings=tie, pad_token_id=1, bos_token_id=None, eos_token_id=2,
               initializer_range=0.02, use_cache=True)
    _rope_fields(cfg, spelling, theta, rope_scaling, four_x_key="type")
    return spec, cfg, t


def _rope_fields(cfg, spelling, theta, scaling, four_x_key="rope_type"):
    """Llama-style single RoPE: 4.x rope_theta + rope_scaling, 5.x rope_parameters."""
    if spelling == "4.x":
        s = None
        if scaling:
            s = {four_x_key: scaling.get("type", scaling.get("rope_type")), "factor": scaling["factor"]}
        cfg.update(rope_theta=theta, rope_scaling=s, torch_dtype="float32")
    else:
        rp = dict(rope_type="default", rope_theta=theta)
        if scaling:
            rp.update(rope_type=scaling.get("type", scaling.get("rope_type")), factor=scaling["factor"])
        cfg.update(rope_parameters=rp, dtype="float32")


def _norms_and_attention(g, p, d, H, kv, hd, plus1):
    """A LLaMA-lineage layer's two norms and q/k/v/o projections, under the layer's prefix `p`."""
    return {p + "input_layernorm.weight": _gain(g, d, plus1), p + "post_attention_layernorm.weight": _gain(g, d, plus1),
            p + "self_attn.q_proj.weight": _rand(g, H * hd, d), p + "self_attn.k_proj.weight": _rand(g, kv * hd, d),
            p + "self_attn.v_proj.weight": _rand(g, kv * hd, d), p + "self_attn.o_proj.weight": _rand(g, d, H * hd)}


def _gemma_common_tensors(g, prefix, V, d, L, H, kv, hd, ffn, sandwich, qk_norm, attention_bias):
    t = {prefix + "embed_tokens.weight": _rand(g, V, d), prefix + "norm.weight": _gain(g, d, True)}
    for i in range(L):
        p = f"{prefix}layers.{i}."
        t.update(_norms_and_attention(g, p, d, H, kv, hd, True))
        t.update({p + "mlp.gate_proj.weight": _rand(g, ffn, d), p + "mlp.up_proj.weight": _rand(g, ffn, d),
                  p + "mlp.down_proj.weight": _rand(g, d, ffn)})
        if sandwich:
            t.update({p + "pre_feedforward_layernorm.weight": _gain(g, d, True),
                      p + "post_feedforward_layernorm.weight": _gain(g, d, True)})
        if qk_norm:
            t.update({p + "self_attn.q_norm.weight": _gain(g, hd, True),
                      p + "self_attn.k_norm.weight": _gain(g, hd, True)})
        if attention_bias:
            t.update({p + "self_attn.q_proj.bias": _rand(g, H * hd), p + "self_attn.k_proj.bias": _rand(g, kv * hd),
                      p + "self_attn.v_proj.bias": _rand(g, kv * hd), p + "self_attn.o_proj.bias": _rand(g, d)})
    return t


def _gemma(spelling, g, *, d=48, L=3, H=4, kv=1, hd=16, ffn=96, V=100, P=64, theta=10000.0, eps=1e-6, tie=True,
           attention_bias=False, legacy_gelu=False):
    spec = dict(family="gemma", arch="GemmaForCausalLM", prefix="model.", lm_head=None if tie else "lm_head.weight",
                tie=tie, V=V, d=d, L=L, H=H, KV=kv, hd=hd, ffn=ffn, P=P, norm="rmsnorm_plus1", norm_eps=eps,
                block="sequential", activation="gelu_tanh", mlp="gated", qkv="separate",
                attention_bias=attention_bias, qk_norm=None, attn_scale=hd ** -0.5, attn_softcap=None,
                final_softcap=None, embed_scale=math.sqrt(d), windows=[None] * L,
                ropes=[dict(type="default", theta=theta, dim=hd)] * L)
    t = _gemma_common_tensors(g, "model.", V, d, L, H, kv, hd, ffn, False, False, attention_bias)
    if not tie:
        t["lm_head.weight"] = _rand(g, V, d)
    cfg = dict(architectures=["GemmaForCausalLM"], model_type="gemma", vocab_size=V, hidden_size=d,
               intermediate_size=ffn, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=kv, head_dim=hd,
               hidden_act="gelu_pytorch_tanh", max_position_embeddings=P, rms_norm_eps=eps,
               attention_bias=attention_bias, attention_dropout=0.0, tie_word_embeddings=tie, pad_token_id=0,
               eos_token_id=1, bos_token_id=2, initializer_range=0.02, use_cache=True)
    if legacy_gelu:     # google/gemma-7b style: "gelu" meant the tanh approximation (see FAMILY_FACTS)
        cfg.update(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh")
    _rope_fields(cfg, spelling, theta, None)
    return spec, cfg, t


# Gemma 2 and 3's hidden_activation: transformers' ACT2FN names, as the naive forward's activation
GELU_NAMES = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def _gemma2(spelling, g, *, d=48, L=4, H=4, kv=2, hd=16, ffn=96, V=100, P=64, theta=10000.0, eps=1e-6, window=5,
            softcaps=True, qpas=20, minimal=False, hidden_activation="gelu_pytorch_tanh"):
    if minimal:
        qpas = 256      # the class default, left out of config.json
    attn_cap, final_cap = (2.0, 3.0) if softcaps else (None, None)
    types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    spec = dict(family="gemma2", arch="Gemma2ForCausalLM", prefix="model.", lm_head=None, tie=True, V=V, d=d, L=L,
                H=H, KV=kv, hd=hd, ffn=ffn, P=P, norm="rmsnorm_plus1", norm_eps=eps, block="sandwich",
                activation=GELU_NAMES[hidden_activation], mlp="gated", qkv="separate", attention_bias=False,
                qk_norm=None, attn_scale=qpas ** -0.5, attn_softcap=attn_cap, final_softcap=final_cap,
                embed_scale=math.sqrt(d), windows=[window if ty == "sliding_attention" else None for ty in types],
                ropes=[dict(type="default", theta=theta, dim=hd)] * L, layer_types=types)
    t = _gemma_common_tensors(g, "model.", V, d, L, H, kv, hd, ffn, True, False, False)
    cfg = dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", vocab_size=V, hidden_size=d,
               intermediate_size=ffn, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=kv,
               head_dim=hd, hidden_activation=hidden_activation, max_position_embeddings=P, rms_norm_eps=eps,
               sliding_window=window, attn_logit_softcapping=attn_cap, final_logit_softcapping=final_cap,
               query_pre_attn_scalar=qpas, pad_token_id=0, eos_token_id=1, bos_token_id=2,
               attention_bias=False, attention_dropout=0.0, initializer_range=0.02, use_cache=True,
               cache_implementation="hybrid")
    if minimal:         # like a 4.42-era gemma-2 config: no layer_types, default query_pre_attn_scalar
        del cfg["query_pre_attn_scalar"]
    elif spelling == "5.x":
        cfg["layer_types"] = types
    _rope_fields(cfg, spelling, theta, None)
    return spec, cfg, t


def _gemma3(spelling, g, *, d=48, L=4, H=4, kv=1, hd=16, ffn=96, V=100, P=128, theta=1e6, local_theta=1e4, eps=1e-6,
            window=4, qpas=20, pattern=None, layer_types=None, rope_scaling=None, final_softcap=None,
            attn_softcap_in_config=None, minimal=False, conditional=False, hidden_activation="gelu_pytorch_tanh"):
    if minimal:         # gemma-3-1b style: defaults left out (theta 1e6, local 1e4, pattern 6, qpas 256, ...)
        theta, local_theta, qpas, pattern = 1e6, 1e4, 256, None
    types = layer_types or ["sliding_attention" if (i + 1) % (pattern or 6) else "full_attention" for i in range(L)]
    full_rope = dict(type="default", theta=theta, dim=hd)
    if rope_scaling:
        full_rope.update(type=rope_scaling["rope_type"], factor=rope_scaling["factor"])
    local_rope = dict(type="default", theta=local_theta, dim=hd)      # local layers: never scaled
    prefix = "language_model.model." if conditional else "model."
    arch = "Gemma3ForConditionalGeneration" if conditional else "Gemma3ForCausalLM"
    spec = dict(family="gemma3", arch=arch, prefix=prefix, lm_head=None, tie=True, V=V, d=d, L=L, H=H, KV=kv, hd=hd,
                ffn=ffn, P=P, norm="rmsnorm_plus1", norm_eps=eps, block="sandwich",
                activation=GELU_NAMES[hidden_activation], mlp="gated", qkv="separate", attention_bias=False,
                qk_norm="per_head_plus1", attn_scale=qpas ** -0.5,
                attn_softcap=None,                                   # Gemma3 never applies attn_logit_softcapping
                final_softcap=final_softcap, embed_scale=math.sqrt(d),
                windows=[window if ty == "sliding_attention" else None for ty in types],
                ropes=[local_rope if ty == "sliding_attention" else full_rope for ty in types], layer_types=types)
    t = _gemma_common_tensors(g, prefix, V, d, L, H, kv, hd, ffn, True, True, False)
    text = dict(model_type="gemma3_text", vocab_size=V, hidden_size=d, intermediate_size=ffn, num_hidden_layers=L,
                num_attention_heads=H, num_key_value_heads=kv, head_dim=hd, hidden_activation=hidden_activation,
                max_position_embeddings=P, rms_norm_eps=eps, sliding_window=window, query_pre_attn_scalar=qpas,
                final_logit_softcapping=final_softcap, attn_logit_softcapping=attn_softcap_in_config,
                pad_token_id=0, eos_token_id=1, bos_token_id=2, attention_bias=False, attention_dropout=0.0,
                initializer_range=0.02, use_cache=True, use_bidirectional_attention=False)
    if spelling == "4.x":
        text.update(rope_theta=theta, rope_local_base_freq=local_theta,
                    rope_scaling=dict(rope_scaling) if rope_scaling else None)
        if layer_types:
            text["layer_types"] = types
        elif pattern:
            text["sliding_window_pattern"] = pattern
    else:               # what 5.x save_pretrained writes: layer_types always, rope_parameters per layer type
        fr = dict(rope_type="default", rope_theta=theta)
        if rope_scaling:
            fr.update(rope_type=rope_scaling["rope_type"], factor=rope_scaling["factor"])
        text.update(layer_types=types, _sliding_window_pattern=pattern or 6,
                    rope_parameters=dict(full_attention=fr,
                                         sliding_attention=dict(rope_type="default", rope_theta=local_theta)))
    if minimal:
        for k in ("query_pre_attn_scalar", "final_logit_softcapping", "attn_logit_softcapping",
                  "use_bidirectional_attention", "rms_norm_eps", "hidden_activation"):
            text.pop(k, None)
        if spelling == "4.x":
            for k in ("rope_theta", "rope_local_base_freq", "rope_scaling"):
                text.pop(k)
    if not conditional:
        cfg = dict(architectures=[arch], **text)
        cfg["torch_dtype" if spelling == "4.x" else "dtype"] = "float32"
        return spec, cfg, t
    # Gemma3ForConditionalGeneration: text_config nested, text weights under language_model.model.*, a SigLIP
    # vision tower under vision_tower.vision_model.* and the projector; the causal LM head is tied (absent).
    vd, vffn, img, patch, vL = 16, 32, 28, 7, 1
    vision = dict(model_type="siglip_vision_model", hidden_size=vd, intermediate_size=vffn, num_hidden_layers=vL,
                  num_attention_heads=2, image_size=img, patch_size=patch, vision_use_head=False,
                  layer_norm_eps=1e-6)
    vp = "vision_tower.vision_model."
    t.update({vp + "embeddings.patch_embedding.weight": _rand(g, vd, 3, patch, patch),
              vp + "embeddings.patch_embedding.bias": _rand(g, vd),
              vp + "embeddings.position_embedding.weight": _rand(g, (img // patch) ** 2, vd),
              vp + "post_layernorm.weight": _gain(g, vd, False), vp + "post_layernorm.bias": _rand(g, vd),
              "multi_modal_projector.mm_input_projection_weight": _rand(g, vd, d),      # (vision d, text d)
              "multi_modal_projector.mm_soft_emb_norm.weight": _gain(g, vd, True)})
    for i in range(vL):
        p = f"{vp}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            t.update({p + n + ".weight": _gain(g, vd, False), p + n + ".bias": _rand(g, vd)})
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t.update({p + "self_attn." + n + ".weight": _rand(g, vd, vd), p + "self_attn." + n + ".bias": _rand(g, vd)})
        t.update({p + "mlp.fc1.weight": _rand(g, vffn, vd), p + "mlp.fc1.bias": _rand(g, vffn),
                  p + "mlp.fc2.weight": _rand(g, vd, vffn), p + "mlp.fc2.bias": _rand(g, vd)})
    cfg = dict(architectures=[arch], model_type="gemma3", text_config=text, vision_config=vision,
               mm_tokens_per_image=4, boi_token_index=V - 3, eoi_token_index=V - 2, image_token_index=V - 1,
               eos_token_id=[1, 97], initializer_range=0.02)
    cfg["torch_dtype" if spelling == "4.x" else "dtype"] = "float32"
    return spec, cfg, t


def _phi3(spelling, g, *, d=48, L=3, H=4, kv=4, ffn=96, V=100, P=64, theta=10000.0, eps=1e-5, window=None,
          partial=1.0, longrope=False, orig=16, tie=False):
    hd = d // H
    dim = int(hd * partial)
    n = (dim + 1) // 2
    rope = dict(type="default", theta=theta, dim=dim)
    if longrope:
        # factors like Phi-3.5's: short ~1, long growing with wavelength; random so a swapped list shows
        short = [round(1.0 + 0.1 * abs(float(x)), 4) for x in torch.randn(n, generator=g)]
        long = [round(1.0 + 3.0 * i / max(n - 1, 1) + 0.2 * abs(float(x)), 4)
                for i, x in enumerate(torch.randn(n, generator=g))]
        rope = dict(type="longrope", theta=theta, dim=dim, short_factor=short, long_factor=long,
                    original_max_position_embeddings=orig, max_position_embeddings=P, factor=None,
                    attention_factor=None)
    spec = dict(family="phi3", arch="Phi3ForCausalLM", prefix="model.", lm_head=None if tie else "lm_head.weight",
                tie=tie, V=V, d=d, L=L, H=H, KV=kv, hd=hd, ffn=ffn, P=P, norm="rmsnorm", norm_eps=eps,
                block="sequential", activation="silu", mlp="gated", qkv="phi3_fused", attention_bias=False,
                qk_norm=None, attn_scale=hd ** -0.5, attn_softcap=None, final_softcap=None, embed_scale=None,
                windows=[window] * L, ropes=[rope] * L)
    t = {"model.embed_tokens.weight": _rand(g, V, d), "model.norm.weight": _gain(g, d, False)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": _gain(g, d, False),
                  p + "post_attention_layernorm.weight": _gain(g, d, False),
                  p + "self_attn.qkv_proj.weight": _rand(g, (H + 2 * kv) * hd, d),   # rows [q (H*hd) | k | v]
                  p + "self_attn.o_proj.weight": _rand(g, d, H * hd),
                  p + "mlp.gate_up_proj.weight": _rand(g, 2 * ffn, d),              # rows [gate (ffn) | up (ffn)]
                  p + "mlp.down_proj.weight": _rand(g, d, ffn)})
    if not tie:
        t["lm_head.weight"] = _rand(g, V, d)
    cfg = dict(architectures=["Phi3ForCausalLM"], model_type="phi3", vocab_size=V, hidden_size=d, intermediate_size=ffn,
               num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=kv, hidden_act="silu",
               max_position_embeddings=P, original_max_position_embeddings=orig if longrope else P,
               rms_norm_eps=eps, sliding_window=window, partial_rotary_factor=partial, tie_word_embeddings=tie,
               bos_token_id=1, eos_token_id=V - 1, pad_token_id=V - 1, resid_pdrop=0.0, embd_pdrop=0.0,
               attention_dropout=0.0, initializer_range=0.02, use_cache=True)
    if spelling == "4.x":
        cfg.update(rope_theta=theta, torch_dtype="float32",
                   rope_scaling=dict(type="longrope", short_factor=rope["short_factor"],
                                     long_factor=rope["long_factor"]) if longrope else None)
    else:       # as 5.x writes it: the top-level original_max_position_embeddings stays (5.x reads it first)
        rp = dict(rope_type="default", rope_theta=theta, partial_rotary_factor=partial)
        if longrope:
            rp.update(rope_type="longrope", short_factor=rope["short_factor"], long_factor=rope["long_factor"],
                      original_max_position_embeddings=orig)
        cfg.update(rope_parameters=rp, dtype="float32")
    return spec, cfg, t


def _moe(spelling, g, *, family, d=48, L=3, H=4, kv=2, hd=None, ffn=40, expert_ffn=24, shared_ffn=32, E=4, k=2, V=100,
         P=64, theta=10000.0, eps=1e-5, window=None, norm_topk=False, mlp_only=(), sparse_step=1, attention_bias=False,
         tie=False, layout="per_expert"):
    """Mixtral, Qwen2-MoE and OLMoE: a LLaMA-like pre-norm block whose MLP is a mixture of experts, as each family's
    transformers class builds it (Mixtral: Mistral's attention, w1/w3/w2 experts, the k weights renormalized, its
    experts as wide as intermediate_size; Qwen2-MoE: q/k/v biases, moe_intermediate_size experts, a shared expert,
    dense layers by decoder_sparse_step and mlp_only_layers; OLMoE: q/k RMSNorm over all heads, biases where
    attention_bias says; Qwen3-MoE: Qwen3's per-head q/k RMSNorm and head_dim, experts as Qwen2-MoE's, none shared,
    a window on every layer where use_sliding_window says)."""
    hd = hd or d // H
    arch = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "olmoe": "OlmoeForCausalLM",
            "qwen3_moe": "Qwen3MoeForCausalLM"}[family]
    module, names = ("block_sparse_moe", ("w1", "w3", "w2")) if family == "mixtral" else \
        ("mlp", ("gate_proj", "up_proj", "down_proj"))
    if family not in ("qwen2_moe", "qwen3_moe"):     # Mixtral's and OLMoE's experts are intermediate_size wide
        expert_ffn = ffn
    if family == "mixtral":
        norm_topk = True
    moe_layers = [(i + 1) % sparse_step == 0 and i not in mlp_only for i in range(L)]
    spec = dict(family=family, arch=arch, prefix="model.", lm_head=None if tie else "lm_head.weight", tie=tie, V=V,
                d=d, L=L, H=H, KV=kv, hd=hd, ffn=ffn, P=P, norm="rmsnorm", norm_eps=eps, block="sequential",
                activation="silu", mlp="gated", qkv="separate", attention_bias=attention_bias,
                qkv_bias=family == "qwen2_moe", qk_norm={"olmoe": "whole", "qwen3_moe": "per_head"}.get(family),
                attn_scale=hd ** -0.5,
                attn_softcap=None, final_softcap=None, embed_scale=None, windows=[window] * L,
                ropes=[dict(type="default", theta=theta, dim=hd)] * L, experts=E, top_k=k, norm_topk=norm_topk,
                expert_ffn=expert_ffn, shared_expert=family == "qwen2_moe", shared_ffn=shared_ffn,
                moe_layers=moe_layers, expert_layout=layout, moe_module=module, expert_names=names)
    t = {"model.embed_tokens.weight": _rand(g, V, d), "model.norm.weight": _gain(g, d, False)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update(_norms_and_attention(g, p, d, H, kv, hd, False))
        if family == "olmoe":
            t.update({p + "self_attn.q_norm.weight": _gain(g, H * hd, False),
                      p + "self_attn.k_norm.weight": _gain(g, kv * hd, False)})
        if family == "qwen3_moe":
            t.update({p + "self_attn.q_norm.weight": _gain(g, hd, False),
                      p + "self_attn.k_norm.weight": _gain(g, hd, False)})
        if attention_bias or family == "qwen2_moe":
            t.update({p + "self_attn.q_proj.bias": _rand(g, H * hd), p + "self_attn.k_proj.bias": _rand(g, kv * hd),
                      p + "self_attn.v_proj.bias": _rand(g, kv * hd)})
        if attention_bias:
            t[p + "self_attn.o_proj.bias"] = _rand(g, d)
        if not moe_layers[i]:
            t.update({p + "mlp.gate_proj.weight": _rand(g, ffn, d), p + "mlp.up_proj.weight": _rand(g, ffn, d),
                      p + "mlp.down_proj.weight": _rand(g, d, ffn)})
            continue
        t[f"{p}{module}.gate.weight"] = _rand(g, E, d)
        for e in range(E):
            gate, up, down = (f"{p}{module}.experts.{e}.{n}.weight" for n in names)
            t.update({gate: _rand(g, expert_ffn, d), up: _rand(g, expert_ffn, d), down: _rand(g, d, expert_ffn)})
        if family == "qwen2_moe":
            t.update({p + "mlp.shared_expert.gate_proj.weight": _rand(g, shared_ffn, d),
                      p + "mlp.shared_expert.up_proj.weight": _rand(g, shared_ffn, d),
                      p + "mlp.shared_expert.down_proj.weight": _rand(g, d, shared_ffn),
                      p + "mlp.shared_expert_gate.weight": _rand(g, 1, d)})
    if not tie:
        t["lm_head.weight"] = _rand(g, V, d)
    if layout == "fused":
        t = fused_experts(spec, t)
    cfg = dict(architectures=[arch], model_type=family, vocab_size=V, hidden_size=d, intermediate_size=ffn,
               num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=kv, hidden_act="silu",
               max_position_embeddings=P, rms_norm_eps=eps, tie_word_embeddings=tie, num_experts_per_tok=k,
               output_router_logits=False, router_aux_loss_coef=0.02, attention_dropout=0.0, initializer_range=0.02,
               use_cache=True, bos_token_id=1, eos_token_id=2)
    if family == "mixtral":     # as 4.57 and 5.x write it: head_dim null (derived), no window unless one is set
        cfg.update(num_local_experts=E, sliding_window=window, head_dim=None, router_jitter_noise=0.0)
    elif family == "qwen2_moe":
        cfg.update(num_experts=E, norm_topk_prob=norm_topk, moe_intermediate_size=expert_ffn,
                   shared_expert_intermediate_size=shared_ffn, decoder_sparse_step=sparse_step,
                   mlp_only_layers=list(mlp_only), qkv_bias=True, use_sliding_window=False, max_window_layers=L)
        if spelling == "4.x":     # 4.57 stores no window where use_sliding_window is false ...
            cfg["sliding_window"] = None
        else:                     # ... 5.x a window of 0, and every layer's type
            cfg.update(sliding_window=0, layer_types=["full_attention"] * L)
    elif family == "qwen3_moe":   # as both write it: the window null unless use_sliding_window; 5.x writes its
        cfg["num_local_experts" if spelling == "5.x" else "num_experts"] = E          # num_experts so (an alias)
        cfg.update(norm_topk_prob=norm_topk, moe_intermediate_size=expert_ffn, head_dim=hd,
                   decoder_sparse_step=sparse_step, mlp_only_layers=list(mlp_only), attention_bias=attention_bias,
                   use_sliding_window=window is not None, sliding_window=window)
    else:
        cfg.update(num_experts=E, norm_topk_prob=norm_topk, attention_bias=attention_bias, clip_qkv=None,
                   pad_token_id=1)
    _rope_fields(cfg, spelling, theta, None)
    return spec, cfg, t


def fused_experts(spec: dict, tensors: dict) -> dict:
    """`tensors` (one tensor per expert) in the layout transformers 5 holds them: each layer's experts stacked, an
    expert's gate and up matrices concatenated (its MergeModulelist(dim=0), then Concatenate(dim=1)), under mlp."""
    t = dict(tensors)
    module, (gate, up, down) = spec["moe_module"], spec["expert_names"]
    for i in range(spec["L"]):
        p = f"model.layers.{i}."
        if not spec["moe_layers"][i]:
            continue
        take = lambda name: torch.stack([t.pop(f"{p}{module}.experts.{e}.{name}.weight")
                                         for e in range(spec["experts"])])
        t[p + "mlp.gate.weight"] = t.pop(f"{p}{module}.gate.weight")
        t[p + "mlp.experts.gate_up_proj"] = torch.cat([take(gate), take(up)], dim=1)
        t[p + "mlp.experts.down_proj"] = take(down)
    return t


BUILDERS = {"gpt_neox": _neox, "olmo2": _olmo2, "gemma": _gemma, "gemma2": _gemma2, "gemma3": _gemma3, "phi3": _phi3,
            **{family: functools.partial(_moe, family=family)
               for family in ("mixtral", "qwen2_moe", "olmoe", "qwen3_moe")}}


def checkpoint(name: str, spelling: str = "5.x", seed: int = 0, **variant):
    """(spec, config, tensors) for CASES[name] (or a bare family name), `variant` overriding the case's knobs."""
    if spelling not in ("4.x", "5.x"):
        raise ValueError(spelling)
    case = dict(CASES[name]) if name in CASES else dict(family=name)
    family = case.pop("family")
    case.pop("ids", None)
    case.update(variant)
    g = torch.Generator().manual_seed(seed)
    spec, cfg, t = BUILDERS[family](spelling, g, **case)
    spec["case"], spec["spelling"] = name, spelling
    spec["ropes"] = [dict(r) for r in spec["ropes"]]
    for r in spec["ropes"]:         # informative only; naive_forward recomputes both from the fields above
        r["rotated_dims"] = 2 * ((r["dim"] + 1) // 2)
        if r["type"] == "longrope":
            r["attention_scaling"] = _inv_freq(r, 1)[1]
    return spec, cfg, t


def write_checkpoint(path, config: dict, tensors: dict, shards: int = 1):
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(config, fh, indent=1)
    names = sorted(tensors)
    if shards == 1:
        save_file({k: tensors[k].contiguous() for k in names}, os.path.join(path, "model.safetensors"),
                  metadata={"format": "pt"})
        return
    files = {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": names[i::shards] for i in range(shards)}
    for file, keys in files.items():
        save_file({k: tensors[k].contiguous() for k in keys}, os.path.join(path, file), metadata={"format": "pt"})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": {k: f for f, keys in files.items() for k in keys}}, fh)


# ----------------------------------------------------------------------------- the naive forward


def _inv_freq(rope: dict, T: int):
    """(inv_freq [n], attention_scaling) for a sequence of T tokens at positions 0..T-1.

    default:  inv_freq[i] = theta ** (-2i / dim), i = 0 .. ceil(dim/2)-1, scaling 1
    linear:   the same divided by factor
    longrope: ext = long_factor if T > original_max_position_embeddings else short_factor (one choice for the
              whole forward call: transformers uses max(position_ids) + 1 > original); inv_freq[i] =
              1 / (ext[i] * theta ** (2i / dim)); scaling = attention_factor if given, else with
              factor = rope "factor" if given (5.x) else max_position_embeddings / original_max_position_embeddings:
              1 if factor <= 1 else sqrt(1 + ln(factor) / ln(original_max_position_embeddings)).
              The scaling multiplies cos and sin, i.e. the rotated dims of q and k (not the pass-through dims),
              for short and long factors alike.
    """
    dim, theta = rope["dim"], float(rope["theta"])
    i = torch.arange(0, dim, 2, dtype=torch.float64)
    if rope["type"] in ("default", "linear"):
        inv = theta ** (-i / dim)
        if rope["type"] == "linear":
            inv = inv / rope["factor"]
        return inv, 1.0
    if rope["type"] != "longrope":
        raise ValueError(rope["type"])
    orig = rope["original_max_position_embeddings"]
    ext = torch.tensor(rope["long_factor"] if T > orig else rope["short_factor"], dtype=torch.float64)
    inv = 1.0 / (ext * theta ** (i / dim))
    scaling = rope.get("attention_factor")
    if scaling is None:
        factor = rope.get("factor") or rope["max_position_embeddings"] / orig
        scaling = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    return inv, scaling


def _rotate(x, inv_freq, scaling):
    """RoPE on one head's vectors x [T, hd] at positions 0..T-1, rotate-half pairing within the first 2n dims."""
    T, n = x.shape[0], inv_freq.shape[0]
    out = x.clone()
    for pos in range(T):
        angle = pos * inv_freq                                       # [n]: the angle of pair i at this position
        c, s = torch.cos(angle) * scaling, torch.sin(angle) * scaling
        a, b = x[pos, :n], x[pos, n:2 * n]                           # pair i is (dim i, dim i + n)
        out[pos, :n] = a * c - b * s
        out[pos, n:2 * n] = b * c + a * s
    return out


def _norm(kind, x, w, b, eps):
    """x [..., n]; LayerNorm (biased variance), RMSNorm x*w, or Gemma's RMSNorm x*(1+w)."""
    if kind == "layernorm":
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * w + b
    r = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return r * (1.0 + w) if kind == "rmsnorm_plus1" else r * w


def _act(kind, x):
    if kind == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "silu":
        return x / (1.0 + torch.exp(-x))
    raise ValueError(kind)


def naive_forward(spec: dict, tensors: dict, ids: torch.Tensor):
    """(logits [B, T, V], final hidden [B, T, d]) in float64, from the family's definition, head by head."""
    w = {k: v.double() for k, v in tensors.items() if v.is_floating_point()}
    s = spec
    pre, H, KV, hd, L = s["prefix"], s["H"], s["KV"], s["hd"], s["L"]
    B, T = ids.shape
    eps = s["norm_eps"]

    def W(name):
        return w[pre + name]

    def bias(name):
        qkv = s.get("qkv_bias") and not name.endswith("o_proj.bias")
        return w.get(pre + name) if s["attention_bias"] or qkv else None

    def lin(x, weight, b=None):
        y = x @ weight.T
        return y if b is None else y + b

    def norm(x, name):
        return _norm(s["norm"], x, w[pre + name + ".weight"], w.get(pre + name + ".bias"), eps)

    embed = (W("embed_in.weight") if s["family"] == "gpt_neox" else W("embed_tokens.weight"))
    x = embed[ids]                                                           # [B, T, d]
    if s["embed_scale"] is not None:
        x = x * s["embed_scale"]

    def attention(x, i):
        p = f"layers.{i}."
        if s["qkv"] == "neox_fused":
            fused = lin(x, W(p + "attention.query_key_value.weight"), bias(p + "attention.query_key_value.bias"))
            q = torch.cat([fused[..., h * 3 * hd: h * 3 * hd + hd] for h in range(H)], -1)
            k = torch.cat([fused[..., h * 3 * hd + hd: h * 3 * hd + 2 * hd] for h in range(H)], -1)
            v = torch.cat([fused[..., h * 3 * hd + 2 * hd: h * 3 * hd + 3 * hd] for h in range(H)], -1)
        elif s["qkv"] == "phi3_fused":
            fused = lin(x, W(p + "self_attn.qkv_proj.weight"))
            q, k, v = fused[..., :H * hd], fused[..., H * hd:(H + KV) * hd], fused[..., (H + KV) * hd:]
        else:
            q = lin(x, W(p + "self_attn.q_proj.weight"), bias(p + "self_attn.q_proj.bias"))
            k = lin(x, W(p + "self_attn.k_proj.weight"), bias(p + "self_attn.k_proj.bias"))
            v = lin(x, W(p + "self_attn.v_proj.weight"), bias(p + "self_attn.v_proj.bias"))
        if s["qk_norm"] == "whole":                                          # OLMo2: over all heads at once
            q = _norm("rmsnorm", q, W(p + "self_attn.q_norm.weight"), None, eps)
            k = _norm("rmsnorm", k, W(p + "self_attn.k_norm.weight"), None, eps)
        inv_freq, scaling = _inv_freq(s["ropes"][i], T)
        window = s["windows"][i]
        visible = torch.zeros(T, T, dtype=torch.bool)
        for qi in range(T):
            for kj in range(T):
                visible[qi, kj] = kj <= qi and (window is None or qi - window < kj)
        out = torch.zeros(B, T, H * hd, dtype=torch.float64)
        for b in range(B):
            for h in range(H):
                g = h // (H // KV)                                           # the kv head this query head reads
                qh, kh, vh = q[b, :, h * hd:(h + 1) * hd], k[b, :, g * hd:(g + 1) * hd], v[b, :, g * hd:(g + 1) * hd]
                if s["qk_norm"] in ("per_head_plus1", "per_head"):          # Gemma3 x*(1+w), Qwen3-MoE x*w
                    kind = "rmsnorm_plus1" if s["qk_norm"] == "per_head_plus1" else "rmsnorm"
                    qh = _norm(kind, qh, W(p + "self_attn.q_norm.weight"), None, eps)
                    kh = _norm(kind, kh, W(p + "self_attn.k_norm.weight"), None, eps)
                qh, kh = _rotate(qh, inv_freq, scaling), _rotate(kh, inv_freq, scaling)
                scores = (qh @ kh.T) * s["attn_scale"]
                if s["attn_softcap"] is not None:
                    scores = s["attn_softcap"] * torch.tanh(scores / s["attn_softcap"])
                scores = scores.masked_fill(~visible, -math.inf)
                out[b, :, h * hd:(h + 1) * hd] = torch.softmax(scores, -1) @ vh
        if s["family"] == "gpt_neox":
            return lin(out, W(p + "attention.dense.weight"), bias(p + "attention.dense.bias"))
        return lin(out, W(p + "self_attn.o_proj.weight"), bias(p + "self_attn.o_proj.bias"))

    def experts(x, i):
        """Each token on its own: softmax of the router's logits, its k most probable experts, their outputs
        weighted by those probabilities (divided by their sum where norm_topk), and the gated shared expert."""
        p, E, F = f"layers.{i}.", s["experts"], s["expert_ffn"]
        gate_name, up_name, down_name = s["expert_names"]
        module = s["moe_module"] if s["expert_layout"] == "per_expert" else "mlp"

        def expert(e, v):
            if s["expert_layout"] == "per_expert":
                gate = W(f"{p}{module}.experts.{e}.{gate_name}.weight") @ v
                up = W(f"{p}{module}.experts.{e}.{up_name}.weight") @ v
                down = W(f"{p}{module}.experts.{e}.{down_name}.weight")
            else:                                       # transformers 5: linear(v, gate_up_proj[e]).chunk(2)
                gate, up = (W(p + "mlp.experts.gate_up_proj")[e] @ v).split(F)
                down = W(p + "mlp.experts.down_proj")[e]
            return down @ (_act("silu", gate) * up)

        out = torch.zeros_like(x)
        for b in range(x.shape[0]):
            for pos in range(x.shape[1]):
                v = x[b, pos]
                probs = torch.softmax(W(f"{p}{module}.gate.weight") @ v, -1)
                chosen = sorted(range(E), key=lambda e: -probs[e].item())[:s["top_k"]]
                weights = probs[chosen] / (probs[chosen].sum() if s["norm_topk"] else 1.0)
                y = sum(weight * expert(e, v) for weight, e in zip(weights, chosen))
                if s["shared_expert"]:
                    shared = W(p + "mlp.shared_expert.down_proj.weight") @ (
                        _act("silu", W(p + "mlp.shared_expert.gate_proj.weight") @ v)
                        * (W(p + "mlp.shared_expert.up_proj.weight") @ v))
                    y = y + torch.sigmoid(W(p + "mlp.shared_expert_gate.weight") @ v) * shared
                out[b, pos] = y
        return out

    def mlp(x, i):
        p = f"layers.{i}.mlp."
        if s.get("experts") and s["moe_layers"][i]:
            return experts(x, i)
        if s["mlp"] == "plain":
            hmid = _act(s["activation"], lin(x, W(p + "dense_h_to_4h.weight"), W(p + "dense_h_to_4h.bias")))
            return lin(hmid, W(p + "dense_4h_to_h.weight"), W(p + "dense_4h_to_h.bias"))
        if s["qkv"] == "phi3_fused":
            gu = lin(x, W(p + "gate_up_proj.weight"))
            gate, up = gu[..., :s["ffn"]], gu[..., s["ffn"]:]
        else:
            gate, up = lin(x, W(p + "gate_proj.weight")), lin(x, W(p + "up_proj.weight"))
        return lin(_act(s["activation"], gate) * up, W(p + "down_proj.weight"))

    for i in range(L):
        p = f"layers.{i}."
        if s["block"] == "parallel":
            x = x + attention(norm(x, p + "input_layernorm"), i) + mlp(norm(x, p + "post_attention_layernorm"), i)
        elif s["block"] == "sequential":
            x = x + attention(norm(x, p + "input_layernorm"), i)
            x = x + mlp(norm(x, p + "post_attention_layernorm"), i)
        elif s["block"] == "post":
            x = x + norm(attention(x, i), p + "post_attention_layernorm")
            x = x + norm(mlp(x, i), p + "post_feedforward_layernorm")
        elif s["block"] == "sandwich":
            x = x + norm(attention(norm(x, p + "input_layernorm"), i), p + "post_attention_layernorm")
            x = x + norm(mlp(norm(x, p + "pre_feedforward_layernorm"), i), p + "post_feedforward_layernorm")
        else:
            raise ValueError(s["block"])
    hidden = norm(x, "final_layer_norm" if s["family"] == "gpt_neox" else "norm")
    head = embed if s["tie"] else w[s["lm_head"]]
    logits = hidden @ head.T
    if s["final_softcap"] is not None:
        logits = s["final_softcap"] * torch.tanh(logits / s["final_softcap"])
    return logits, hidden
