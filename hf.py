"""
hf.py: models on disk, loaded exactly -- the released models whose birth bias, lineage and sinks the paper's
questions are asked of, and the project's own checkpoints, through one door: load(path).

A Hugging Face directory holds config.json (an architecture in transformers' field names) and
*.safetensors files (its weights in transformers' tensor names). Each family here is mapped field by
field onto GPTConfig's knobs and tensor by tensor onto GPT's parameters, so that the project's own
forward pass computes what transformers computes, within float32 rounding, without transformers:

    family (architectures)          what sets it apart, as model.py's knobs
    LlamaForCausalLM                pre-norm RMSNorm, SwiGLU, RoPE (default, linear, llama3), GQA
    MistralForCausalLM              + a sliding window on every layer
    Qwen2ForCausalLM                + q/k/v biases; windows from max_window_layers on
    Qwen3ForCausalLM                + per-head q/k RMSNorm, head_dim set apart
    GPT2LMHeadModel                 LayerNorm, learned positions, tanh GELU, Conv1D layout
    GPTNeoXForCausalLM (Pythia)     parallel residual, partial RoPE, LayerNorm, fused per-head [q|k|v]
    Olmo2ForCausalLM                RMSNorm on each sublayer's output, q/k RMSNorm over all heads at once
    GemmaForCausalLM                embeddings x sqrt(width), RMSNorm x (1 + w), GeGLU (tanh), head_dim apart
    Gemma2ForCausalLM               + norms around each sublayer, soft-capped scores and logits,
                                    query_pre_attn_scalar, sliding and global layers alternating
    Gemma3ForCausalLM               + per-head q/k norm, layer_types, the local layers' own RoPE base
    (Gemma3ForConditionalGeneration: its language model, the vision tower left unread)
    Phi3ForCausalLM (Phi-3, -4-mini) fused qkv_proj and gate_up_proj, partial RoPE, LongRoPE up to its
                                    original context

  - a field that changes the forward pass is read, in both spellings found on the Hub (transformers 4.x
    rope_theta + rope_scaling, 5.x rope_parameters); a field left out takes transformers' class default;
  - a field present but not understood, a tensor missing, unknown, misshapen or stored twice, an
    architecture not carried: each is one error naming it, before any weight is read. Nothing is
    approximated in silence.

A model here is a path: a Hugging Face directory, or a train.py checkpoint file (model.py's format). Every
script that takes a model reads it through these five, whichever it is:

    load(path)               -> a GPT, in the checkpoint's dtype, its weights checked finite
    read_config(path)        -> its GPTConfig, the weight files checked against it, no weight read
    check_weights_finite(path) -> every weight streamed once, one that holds NaN/inf refused by name
    token_rows(path, lo, hi) -> rows lo..hi of the token table alone
    tensors(path)            -> (name, tensor), one at a time
    main([path, ...])        -> hf.py's command line: what each model maps onto (its family, the knobs it sets,
                                its parameters), nothing loaded

Needs model.py and the safetensors package (pip install safetensors); copy the two files together.
"""
import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import sys
from typing import Optional

import torch

from model import (GPT, GPTConfig, check_model_weights_finite, load_checkpoint, nonfinite_weight, qkv_sizes,
                   read_checkpoint)

LLAMA_LIKE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Olmo2ForCausalLM",
              "GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM")
FAMILIES = (*LLAMA_LIKE, "GPT2LMHeadModel", "GPTNeoXForCausalLM", "Gemma3ForConditionalGeneration")


def load(path, device="cpu", dtype: Optional[torch.dtype] = None) -> GPT:
    """The model at `path`: a Hugging Face directory (config.json + *.safetensors) of a supported family, or a
    train.py checkpoint file. It is built in its stored dtype (bf16 stays bf16; `dtype` overrides) and filled
    tensor by tensor, so loading peaks near the checkpoint's own size. Weights that hold NaN or inf, as stored
    or as cast to `dtype`, are refused."""
    path = checked_path(path)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ValueError(f"a model loads in a floating-point dtype (float32, bfloat16, float16), not {dtype}")
    if os.path.isfile(path):
        model = load_checkpoint(path, device=device)               # checked finite as stored ...
        return model if dtype is None else check_model_weights_finite(model.to(dtype), path)    # ... and as cast
    config, arch, headers = read_dir(path)
    found = {kind for header in headers.values() for kind, _ in header.values()}
    dtype = dtype or next((SAFETENSORS_FLOATS[k] for k in SAFETENSORS_FLOATS if k in found), torch.float32)
    with torch.device("meta"):
        model = GPT(config).to(dtype)        # dtype on the meta device: nothing allocated yet
    load_weights(model.to_empty(device=device), headers, arch, path)
    return check_model_weights_finite(model, path)


def checked_path(path) -> str:
    """`path` as a string, refused in one line where nothing is there."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path!r}: give a train.py checkpoint (.pt) or a Hugging Face directory")
    return path


def read_config(path) -> GPTConfig:
    """The GPTConfig of the model at `path`, without reading a weight: for the checks a script makes before any
    work (context length, vocabulary, layer indices). The weight files are checked as far as that costs
    nothing: a Hugging Face directory's tensor names, shapes and dtypes against its config.json (a model built
    on the meta device); a checkpoint's file structure (memory-mapped)."""
    path = checked_path(path)
    if os.path.isfile(path):
        return GPTConfig(**read_checkpoint(path, mmap=True)["config"])
    return planned(path)[0]


def planned(path: str):
    """(GPTConfig, architecture, the GPT on the meta device, plan_weights' plan) of a directory: every check the
    loader makes before it reads a weight, and no weight read."""
    config, arch, headers = read_dir(path)
    with torch.device("meta"):
        model = GPT(config)
    return config, arch, model, plan_weights(model, headers, arch, path)


def tensors(path):
    """(name, tensor) of every floating-point tensor of the model at `path`, one at a time (memory: the largest;
    a checkpoint is memory-mapped)."""
    path = checked_path(path)
    if os.path.isfile(path):
        yield from ((name, t) for name, t in read_checkpoint(path, mmap=True)["model"].items() if t.is_floating_point())
        return
    for file, header in read_dir(path)[2].items():
        for name, (kind, _) in header.items():
            if kind in SAFETENSORS_FLOATS:
                yield name, read_tensor(file, name)


def check_weights_finite(path) -> None:
    """Stream every weight of the model at `path` once, tensor by tensor, and refuse one that holds NaN or inf,
    naming it. For scripts that read several models: all are checked before the work on any begins."""
    for name, t in tensors(path):
        if not torch.isfinite(t).all():
            raise nonfinite_weight(path, name, t)


def token_rows(path, lo: int, hi: int):
    """Rows [lo, hi) of the token embedding table, float32 numpy (rows x width): one slice of one tensor (a
    checkpoint memory-mapped)."""
    path = checked_path(path)
    if os.path.isfile(path):
        return read_checkpoint(path, mmap=True)["model"]["transformer.wte.weight"][lo:hi].float().numpy()
    plan = planned(path)[3]
    file, name = next((file, name) for file, name, pieces in plan if pieces[0][0] == "transformer.wte.weight")
    with safetensors_library().safe_open(file, framework="pt") as f:
        return f.get_slice(name)[lo:hi].float().numpy()


# ----------------------------------------------------------------------------- config.json -> GPTConfig
# Every field is popped as it is read; what is left at the end was not understood, and is refused.

# transformers' class defaults of the fields a config.json may leave out (Gemma 3's published multimodal
# configs leave out every text field at its default, sizes included)
DEFAULTS = {
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
    "Olmo2ForCausalLM": dict(num_key_value_heads=None, head_dim=None, max_position_embeddings=2048,
                             rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False),
    "GemmaForCausalLM": dict(num_key_value_heads=16, head_dim=256, max_position_embeddings=8192, rms_norm_eps=1e-6,
                             tie_word_embeddings=True, attention_bias=False, hidden_act="gelu_pytorch_tanh"),
    "Gemma2ForCausalLM": dict(num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, rms_norm_eps=1e-6,
                              tie_word_embeddings=True, attention_bias=False, hidden_activation="gelu_pytorch_tanh",
                              query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
                              final_logit_softcapping=30.0),
    "Gemma3ForCausalLM": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                              num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                              max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True,
                              attention_bias=False, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256,
                              sliding_window=4096, sliding_window_pattern=6, final_logit_softcapping=None,
                              rope_theta=1e6, rope_local_base_freq=1e4),
    "Phi3ForCausalLM": dict(num_key_value_heads=None, head_dim=None, max_position_embeddings=4096, rms_norm_eps=1e-5,
                            tie_word_embeddings=False, original_max_position_embeddings=4096, sliding_window=None),
    "GPTNeoXForCausalLM": dict(max_position_embeddings=2048, layer_norm_eps=1e-5, tie_word_embeddings=False,
                               attention_bias=True, use_parallel_residual=True, hidden_act="gelu", rotary_pct=0.25,
                               rotary_emb_base=10000.0),
}

# fields that never change the forward pass of a causal LM in eval mode: bookkeeping, token ids,
# initialization, dropout, caching, generation defaults, heads other than the LM head
INERT = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "_model_name_or_path", "name_or_path", "_commit_hash", "bos_token_id", "eos_token_id", "pad_token_id",
    "unk_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range", "initializer_factor",
    "attention_dropout", "hidden_dropout", "dropout", "attn_pdrop", "embd_pdrop", "resid_pdrop", "use_cache",
    "output_attentions", "output_hidden_states", "return_dict", "use_return_dict", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "chunk_size_feed_forward", "is_decoder", "problem_type", "id2label", "label2id",
    "finetuning_task", "prefix", "tokenizer_class", "task_specific_params", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout", "classifier_dropout", "cache_implementation", "auto_map",
    "pretraining_tp",               # LLaMA: the same matmuls, split in slices
    "reorder_and_upcast_attn", "n_ctx",   # GPT-2: float32 upcast of the scores; a legacy alias of n_positions
    "_sliding_window_pattern",      # Gemma 3: a private echo that transformers writes and never reads
}
# fields that are inert only at these values
INERT_IF = {"is_encoder_decoder": False, "add_cross_attention": False, "pruned_heads": {},
            "tie_encoder_decoder": False, "use_bidirectional_attention": False}
# the top level of a Gemma 3 multimodal config.json around its text_config (the vision tower is not read)
GEMMA3_MULTIMODAL = {"text_config", "vision_config", "boi_token_index", "eoi_token_index", "image_token_index",
                     "mm_tokens_per_image"}

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                    "gelu_accurate": "gelu_tanh", "gelu_python_tanh": "gelu_tanh", "gelu": "gelu",
                    "gelu_python": "gelu", "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}


# The type of every field the loader reads (null always means "absent"): a value of another type is refused
# by name before it is interpreted, so "12", 12.5, true or -4 never becomes a model. JSON gives exact types.
FIELD_KINDS = {"an integer >= 1": lambda v: type(v) is int and v >= 1,
               "an integer >= 0": lambda v: type(v) is int and v >= 0,
               "a finite number > 0": lambda v: type(v) in (int, float) and math.isfinite(v) and v > 0,
               "true or false": lambda v: type(v) is bool,
               "a string": lambda v: type(v) is str,
               "an object or null": lambda v: type(v) is dict,
               "a list of names": lambda v: type(v) is list and all(type(a) is str for a in v),
               "a list of numbers > 0": lambda v: type(v) is list and all(
                   type(a) in (int, float) and math.isfinite(a) and a > 0 for a in v)}
FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "max_position_embeddings", "head_dim", "sliding_window", "n_positions",
                     "n_layer", "n_head", "n_embd", "n_inner", "original_max_position_embeddings",
                     "sliding_window_pattern"), "an integer >= 1"),
    "max_window_layers": "an integer >= 0",
    **dict.fromkeys(("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "rope_theta", "factor",
                     "low_freq_factor", "high_freq_factor", "partial_rotary_factor", "rotary_pct", "rotary_emb_base",
                     "rope_local_base_freq", "query_pre_attn_scalar", "attn_logit_softcapping",
                     "final_logit_softcapping", "attention_factor"), "a finite number > 0"),
    **dict.fromkeys(("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "scale_attn_weights",
                     "scale_attn_by_inverse_layer_idx", "use_parallel_residual"), "true or false"),
    **dict.fromkeys(("hidden_act", "hidden_activation", "activation_function", "rope_type", "type"), "a string"),
    **dict.fromkeys(("rope_scaling", "rope_parameters", "text_config", "full_attention", "sliding_attention"),
                    "an object or null"),
    **dict.fromkeys(("architectures", "layer_types"), "a list of names"),
    **dict.fromkeys(("short_factor", "long_factor"), "a list of numbers > 0"),
}


def check_field_types(fields: dict, where: str = "") -> None:
    """Refuse, by name, any read field of the wrong type or range, also inside the objects that hold fields
    (rope_scaling, rope_parameters and their per-layer-type parts, text_config)."""
    for key, value in fields.items():
        kind = FIELD_TYPES.get(key)
        if kind and value is not None and not FIELD_KINDS[kind](value):
            raise ValueError(f"field {where}{key} must be {kind}, got {value!r}")
        if kind == "an object or null" and isinstance(value, dict):
            check_field_types(value, f"{where}{key}.")


def config_from_json(hf: dict) -> GPTConfig:
    """The GPTConfig of a config.json dict; a ValueError names any field, value or architecture not exactly met."""
    if not isinstance(hf, dict):
        raise ValueError(f"config.json must hold a JSON object, got {type(hf).__name__}")
    check_field_types(hf)
    arch = (hf.get("architectures") or [None])[0]
    if arch not in FAMILIES:
        raise ValueError(f"unsupported architecture {arch!r}; hf.py loads exactly {', '.join(FAMILIES)}. "
                         f"For any other family, fingerprint a model you load yourself: seedprint.fingerprint "
                         f"accepts a callable ids -> final-norm last-token states (see docs/real_checkpoints.md)")
    if arch == "Gemma3ForConditionalGeneration":
        return _gemma3_multimodal_config(hf)
    fields = {k: v for k, v in hf.items() if k not in INERT}   # every field is popped as it is read
    for key, inert in INERT_IF.items():
        if key in fields and fields.pop(key) not in (inert, None):
            raise ValueError(f"config.json sets {key}={hf[key]!r}; hf.py loads decoder-only causal LMs only")
    if arch == "GPT2LMHeadModel":
        config = _gpt2_config(fields)
    elif arch == "GPTNeoXForCausalLM":
        config = _neox_config(fields)
    else:
        config = _decoder_config(fields, arch)
    if fields:
        raise ValueError(f"config.json field(s) {sorted(fields)} of this {arch} are not understood by hf.py; a "
                         f"field it cannot read may change the forward pass: refused, not approximated")
    return config


def _gemma3_multimodal_config(hf: dict) -> GPTConfig:
    """A Gemma 3 vision-language directory: the config of its language model (text_config, a Gemma3ForCausalLM),
    read as such. The vision tower and its projector serve images, which a text forward never sees."""
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise ValueError("config.json of a Gemma3ForConditionalGeneration lacks its text_config")
    unknown = sorted(set(hf) - INERT - set(INERT_IF) - GEMMA3_MULTIMODAL - {"tie_word_embeddings"})
    if unknown:
        raise ValueError(f"config.json field(s) {unknown} of this Gemma3ForConditionalGeneration are not "
                         f"understood by hf.py; refused, not approximated")
    fields = dict(text, architectures=["Gemma3ForCausalLM"])
    if "tie_word_embeddings" in hf:
        fields["tie_word_embeddings"] = hf["tie_word_embeddings"]
    try:
        return config_from_json(fields)
    except ValueError as e:
        raise ValueError(f"its text_config: {e}") from None


def _need(f: dict, key: str, defaults: dict = None, where: str = "config.json"):
    """A field that must be there (or have a class default)."""
    value = f.pop(key, None)
    if value is None:
        value = (defaults or {}).get(key)
    if value is None:
        raise ValueError(f"{where} lacks the field {key!r}")
    return value


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


def _neox_config(f: dict) -> GPTConfig:
    """GPT-NeoX (Pythia): LayerNorm with biases, an MLP with biases, attention biases where attention_bias says,
    the two sublayers side by side or one after the other, RoPE on the first rotary_pct of each head."""
    d = DEFAULTS["GPTNeoXForCausalLM"]
    get = lambda key: f.pop(key, d.get(key))
    H, n_embd, L = _need(f, "num_attention_heads"), _need(f, "hidden_size"), _need(f, "num_hidden_layers")
    act = get("hidden_act")
    if act not in GPT2_ACTIVATIONS:
        raise ValueError(f"unsupported GPT-NeoX hidden_act {act!r}; known: {sorted(GPT2_ACTIVATIONS)}")
    max_pos, head_dim = get("max_position_embeddings"), n_embd // H
    # 4.x reads rotary_emb_base / rotary_pct; 5.x rope_parameters, else those two. The top-level rope_theta and
    # partial_rotary_factor that 4.x writes beside them are echoes neither reads: they must agree, or be absent
    base, pct = get("rotary_emb_base"), get("rotary_pct")
    params = f.get("rope_parameters") or {}
    base, pct = params.get("rope_theta", base), params.get("partial_rotary_factor", pct)
    for echo, value in (("rope_theta", base), ("partial_rotary_factor", pct)):
        if f.get(echo) is not None and f.pop(echo) != value:
            raise ValueError(f"config.json's {echo} disagrees with the value GPT-NeoX reads ({value}); which one "
                             f"holds is unclear: refused")
        f.pop(echo, None)
    rope = _rope(f, max_pos, head_dim, theta=base, partial=pct, kinds=("default", "linear"), partial_ok=True)
    attention_bias = bool(get("attention_bias"))
    return GPTConfig(block_size=max_pos, vocab_size=_need(f, "vocab_size"), n_layer=L, n_head=H, n_embd=n_embd,
                     mlp_hidden=_need(f, "intermediate_size"), norm="layernorm", norm_eps=get("layer_norm_eps"),
                     norm_bias=True, parallel_residual=bool(get("use_parallel_residual")),
                     activation=GPT2_ACTIVATIONS[act], position="rope", **rope, bias=attention_bias,
                     mlp_bias=True, tie_embeddings=bool(get("tie_word_embeddings")))


# what each family of the LLaMA lineage sets apart: its norm, where its norms sit, its q/k norm
NORMS = {"Olmo2ForCausalLM": ("rmsnorm", "post", "all"), "Qwen3ForCausalLM": ("rmsnorm", "pre", "head"),
         "GemmaForCausalLM": ("rmsnorm_1p", "pre", "none"), "Gemma2ForCausalLM": ("rmsnorm_1p", "sandwich", "none"),
         "Gemma3ForCausalLM": ("rmsnorm_1p", "sandwich", "head")}
GEMMA = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
# the bias fields each family's transformers class reads (Qwen2 always has q/k/v biases; Mistral and Phi-3 none)
BIAS_FIELDS = {"LlamaForCausalLM": ("attention_bias", "mlp_bias"), "Qwen3ForCausalLM": ("attention_bias",),
               "Olmo2ForCausalLM": ("attention_bias",), **dict.fromkeys(GEMMA, ("attention_bias",))}


def _decoder_config(f: dict, arch: str) -> GPTConfig:
    """The LLaMA lineage: RMSNorm (Gemma: x (1 + w)), a gated MLP, RoPE, GQA. They differ in where the norms sit,
    biases, q/k norms, head width, windows, RoPE's variants, and Gemma's scales and soft-caps."""
    d = DEFAULTS[arch]
    get = lambda key: f.pop(key, d.get(key))
    H, n_embd, L = _need(f, "num_attention_heads", d), _need(f, "hidden_size", d), _need(f, "num_hidden_layers", d)
    max_pos, head_dim = get("max_position_embeddings"), get("head_dim")
    activation = _gated_activation(f, arch, d)
    # biases: a bias field the family's transformers class ignores must not claim biases
    bias = {key: bool(f.pop(key, d.get(key, False))) for key in ("attention_bias", "mlp_bias")}
    for key, on in bias.items():
        if on and key not in BIAS_FIELDS.get(arch, ()):
            raise ValueError(f"config.json sets {key}=true, which transformers' {arch} does not read")
    norm, norm_position, qk_norm = NORMS.get(arch, ("rmsnorm", "pre", "none"))
    hd = head_dim or n_embd // H
    window, sliding_layers = _windows(f, arch, d, L)
    gemma = {}
    if arch in GEMMA:
        gemma["embed_scale"] = math.sqrt(n_embd)           # rounded to the model's dtype at run time, as Gemma does
    if arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        gemma["attn_scale"] = get("query_pre_attn_scalar") ** -0.5
        gemma["logit_softcap"] = get("final_logit_softcapping")
    if arch == "Gemma2ForCausalLM":
        gemma["attn_softcap"] = get("attn_logit_softcapping")
    if arch == "Gemma3ForCausalLM":
        f.pop("attn_logit_softcapping", None)    # stored, but transformers' Gemma 3 never applies it: neither do we
        rope = _gemma3_rope(f, max_pos, hd, d, sliding=window is not None)
    else:
        rope = _rope(f, max_pos, hd, theta=get("rope_theta"), partial=f.pop("partial_rotary_factor", None),
                     original=get("original_max_position_embeddings") if arch == "Phi3ForCausalLM" else None,
                     kinds=("default", "linear", "llama3", "longrope") if arch == "Phi3ForCausalLM"
                     else ("default", "linear", "llama3"), partial_ok=arch == "Phi3ForCausalLM")
    return GPTConfig(block_size=max_pos, vocab_size=_need(f, "vocab_size", d), n_layer=L, n_head=H,
                     n_kv_head=get("num_key_value_heads") or H, n_embd=n_embd,
                     head_size=head_dim if head_dim not in (None, n_embd // H) else None,
                     mlp_hidden=_need(f, "intermediate_size", d), norm=norm, norm_eps=get("rms_norm_eps"),
                     norm_position=norm_position, qk_norm=qk_norm, activation=activation, position="rope", **rope,
                     sliding_window=window, sliding_layers=sliding_layers, **gemma, bias=False,
                     qkv_bias=arch == "Qwen2ForCausalLM", attn_bias=bias["attention_bias"], mlp_bias=bias["mlp_bias"],
                     tie_embeddings=bool(get("tie_word_embeddings")))


def _gated_activation(f: dict, arch: str, defaults: dict) -> str:
    """The gated MLP's activation. SwiGLU for all but Gemma, whose gate is tanh GELU (GeGLU): Gemma 1 reads
    hidden_act (transformers 5.x runs its "gelu" as tanh GELU, as Gemma was trained; 4.x ran exact GELU), Gemma
    2 and 3 hidden_activation; each ignores the other field, and so does this loader."""
    if arch in GEMMA:
        read, ignored = ("hidden_act", "hidden_activation") if arch == "GemmaForCausalLM" else \
            ("hidden_activation", "hidden_act")
        f.pop(ignored, None)
        act = f.pop(read, None) or defaults[read]
        if act not in ("gelu_pytorch_tanh", "gelu", "gelu_new"):
            raise ValueError(f"unsupported {read} {act!r} for {arch}: its gated MLP is GeGLU (tanh GELU)")
        return "geglu_tanh"
    act = f.pop("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"unsupported hidden_act {act!r} for {arch}: its gated MLP is SwiGLU (silu)")
    return "swiglu"


def _windows(f: dict, arch: str, defaults: dict, n_layer: int) -> tuple:
    """(sliding_window, sliding_layers): the window and which layers use it (None: every layer), from each
    family's fields: Mistral and Phi-3 slide every layer; Qwen2/3 from max_window_layers on where
    use_sliding_window says; Gemma 2 even layers, Gemma 3 all but every sliding_window_pattern-th; layer_types,
    where given, say it layer by layer."""
    if arch in ("LlamaForCausalLM", "Olmo2ForCausalLM", "GemmaForCausalLM"):
        return None, None
    window = f.pop("sliding_window", defaults.get("sliding_window"))
    layers = f.pop("layer_types", None)
    if arch.startswith("Qwen"):      # a window only with use_sliding_window, and then from max_window_layers on
        on, first = f.pop("use_sliding_window", False), f.pop("max_window_layers", defaults["max_window_layers"])
        window = window if on else None
        layers = layers or ["sliding_attention" if window is not None and i >= first else "full_attention"
                            for i in range(n_layer)]
    elif arch == "Gemma2ForCausalLM":
        layers = layers or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layer)]
    elif arch == "Gemma3ForCausalLM":
        pattern = f.pop("sliding_window_pattern", defaults["sliding_window_pattern"])
        layers = layers or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                            for i in range(n_layer)]
    layers = layers or ["sliding_attention"] * n_layer          # Mistral, Phi-3: the window on every layer
    if len(layers) != n_layer or set(layers) - {"sliding_attention", "full_attention"}:
        raise ValueError(f"layer_types must name each of the {n_layer} layers sliding_attention or full_attention, "
                         f"got {sorted(set(layers))} for {len(layers)} layers")
    if window is None or "sliding_attention" not in layers:
        return None, None
    if "full_attention" not in layers:
        return window, None
    return window, "".join("s" if kind == "sliding_attention" else "f" for kind in layers)


def _rope(f: dict, max_pos: int, head_dim: int, theta, partial=None, original=None,
          kinds=("default", "linear", "llama3"), partial_ok: bool = False) -> dict:
    """RoPE's knobs from either spelling: 4.x rope_theta + rope_scaling, or 5.x rope_parameters (whose own
    values win over the top-level fields they repeat). `theta`, `partial` and `original`: the family's top-level
    base, rotary fraction and original context (the caller reads them, in the family's spelling). partial_ok:
    the family rotates part of each head (GPT-NeoX, Phi-3; the others' transformers classes rotate whole heads)."""
    scaling, params = f.pop("rope_scaling", None), f.pop("rope_parameters", None)
    if scaling and params and scaling != params:
        raise ValueError(f"config.json has both rope_scaling {scaling} and rope_parameters {params}, and they differ")
    p = dict(scaling or params or {})
    if any(isinstance(v, dict) for v in p.values()):
        raise ValueError(f"per-layer-type RoPE parameters {sorted(p)} are not supported for this family")
    kind, old_kind = p.pop("rope_type", None), p.pop("type", None)    # "type" is the older spelling
    if kind and old_kind and kind != old_kind:
        raise ValueError(f"RoPE parameters name two types: rope_type={kind!r}, type={old_kind!r}")
    kind = {"su": "longrope"}.get(kind or old_kind, kind or old_kind or "default")  # Phi-3's first name for it
    theta = p.pop("rope_theta", theta if theta is not None else 10000.0)
    partial = p.pop("partial_rotary_factor", partial if partial is not None else 1.0)
    if not 0 < partial <= 1:
        raise ValueError(f"partial_rotary_factor (rotary_pct) must lie in (0, 1], got {partial}")
    if partial != 1 and not partial_ok:
        raise ValueError(f"partial_rotary_factor {partial}: RoPE on part of each head is not supported for this "
                         f"family (its transformers class rotates whole heads)")
    dims = int(head_dim * partial)
    if dims % 2 or dims < 2:
        raise ValueError(f"RoPE on {dims} dims of each head (head_dim {head_dim} x {partial}) is not supported: an "
                         f"even number is")
    out = dict(rope_theta=float(theta), rope_dims=dims if dims < head_dim else None)
    if kind not in kinds:
        raise ValueError(f"RoPE type {kind!r} is not supported for this family; model.py computes {kinds} exactly")
    if kind == "linear":
        out.update(rope_type="linear", rope_factor=float(_need(p, "factor", where="rope scaling")))
    elif kind == "llama3":
        out.update(rope_type="llama3", rope_factor=float(_need(p, "factor", where="rope scaling")),
                   rope_low_freq_factor=float(_need(p, "low_freq_factor", where="rope scaling")),
                   rope_high_freq_factor=float(_need(p, "high_freq_factor", where="rope scaling")),
                   rope_original_context=int(p.pop("original_max_position_embeddings", max_pos)))
    elif kind == "longrope":
        out.update(_longrope(p, max_pos, dims, original))
    if p:
        raise ValueError(f"RoPE parameter(s) {sorted(p)} are not understood for rope_type {kind!r}")
    return out


def _longrope(p: dict, max_pos: int, dims: int, original: Optional[int]) -> dict:
    """Phi-3's LongRoPE up to its original context: each frequency divided by its short factor, cos and sin
    times the attention factor sqrt(1 + ln(factor) / ln(original)), factor = max_position_embeddings / original
    (5.x's own factor and attention_factor, where given, win). The top-level original_max_position_embeddings
    wins over rope_parameters' copy, as in transformers. Past the original context transformers switches to the
    long factors; the model refuses such sequences instead."""
    p.pop("original_max_position_embeddings", None)
    original = original or 4096
    short, long = _need(p, "short_factor", where="longrope"), _need(p, "long_factor", where="longrope")
    if len(short) != dims // 2 or len(long) != dims // 2:
        raise ValueError(f"longrope needs one short and one long factor per frequency ({dims // 2}), got "
                         f"{len(short)} and {len(long)}")
    factor = p.pop("factor", None) or max_pos / original
    attention = p.pop("attention_factor", None)
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return dict(rope_type="longrope", rope_factors=tuple(float(s) for s in short), rope_attention_factor=attention,
                rope_original_context=original)


def _gemma3_rope(f: dict, max_pos: int, head_dim: int, defaults: dict, sliding: bool) -> dict:
    """Gemma 3's two RoPEs: the global (full_attention) layers' base with its scaling, the sliding layers' own
    base, unscaled. 4.x: rope_theta + rope_scaling, rope_local_base_freq; 5.x: rope_parameters per layer type."""
    params = f.pop("rope_parameters", None)
    if params is not None:
        if set(params) - {"full_attention", "sliding_attention"} or not all(isinstance(v, dict)
                                                                           for v in params.values()):
            raise ValueError(f"Gemma 3's rope_parameters name each layer type's RoPE (full_attention, "
                             f"sliding_attention), got {sorted(params)}: transformers would ignore a flat one")
        full = dict(params.get("full_attention") or {"rope_theta": defaults["rope_theta"]})
        local = dict(params.get("sliding_attention") or {"rope_theta": defaults["rope_local_base_freq"]})
        if local.pop("rope_type", "default") != "default" or set(local) - {"rope_theta"}:
            raise ValueError(f"Gemma 3's sliding layers use plain RoPE; got sliding_attention "
                             f"{params.get('sliding_attention')}")
        local_theta = local.get("rope_theta", defaults["rope_local_base_freq"])
        for key in ("rope_theta", "rope_scaling", "rope_local_base_freq"):
            if f.pop(key, None) is not None:
                raise ValueError(f"config.json has both rope_parameters and {key}: which one holds is unclear")
        rope = _rope(dict(rope_parameters=full), max_pos, head_dim, theta=defaults["rope_theta"])
    else:
        local_theta = f.pop("rope_local_base_freq", defaults["rope_local_base_freq"])
        rope = _rope(f, max_pos, head_dim, theta=f.pop("rope_theta", defaults["rope_theta"]))
    return dict(rope, rope_local_theta=float(local_theta) if sliding else None)


# ----------------------------------------------------------------------------- the directory and its files

def json_file(path: str, what: str):
    """config.json and the shard index: a malformed file is one error naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid {what} ({e})") from None


def read_dir(path: str):
    """(GPTConfig, architecture, {shard file: its header}) of a Hugging Face directory: config.json read and
    checked, the shards found (those the index names, else every *.safetensors) and their headers read."""
    cfg_path, index = os.path.join(path, "config.json"), os.path.join(path, "model.safetensors.index.json")
    if not os.path.isfile(cfg_path):
        why = "no config.json" if os.path.isdir(path) else "a file" if os.path.isfile(path) else "no such directory"
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory (config.json + *.safetensors): {why}")
    hf = json_file(cfg_path, "config.json")
    try:
        config = config_from_json(hf)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {str(e).removeprefix('config.json ')}") from None
    if os.path.exists(index):
        weight_map = json_file(index, "safetensors index")
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index} has no weight_map object of tensor name -> shard file")
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path!r} (.bin pickles are not loaded: they run code)")
    missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise FileNotFoundError(f"{path}: shard(s) {missing} named in model.safetensors.index.json are missing")
    headers = {os.path.join(path, f): read_header(os.path.join(path, f)) for f in files}
    return config, hf["architectures"][0], headers


# The safetensors library reads the files: a header of tensor names, dtypes, shapes and byte ranges, then the
# raw bytes. The floating-point dtypes it may hold, widest first: the model is built in the widest one found.
SAFETENSORS_FLOATS = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def safetensors_library():
    """The safetensors package, imported here only: nothing but a Hugging Face directory needs it."""
    try:
        import safetensors
    except ImportError:
        raise ValueError("a Hugging Face directory needs the safetensors package: pip install safetensors") from None
    return safetensors


def read_header(file: str) -> dict:
    """{tensor name: (dtype name, shape)} of one .safetensors file, without reading a tensor. An empty, truncated
    or foreign file is one error naming it, found here, before any weight is read."""
    library = safetensors_library()
    size = os.path.getsize(file)
    if size < 8:
        raise ValueError(f"{file} is not a valid .safetensors file ({size} bytes, shorter than its 8-byte header "
                         f"length)")
    try:
        with library.safe_open(file, framework="pt") as f:
            return {name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape())) for name in f.keys()}
    except library.SafetensorError as e:
        raise ValueError(f"{file} is not a valid .safetensors file (truncated, damaged or another format: "
                         f"{str(e).removeprefix('Error while deserializing header: ')})") from None


def read_tensor(file: str, name: str) -> torch.Tensor:
    """One tensor of a .safetensors file. The file is mapped for this tensor alone and closed again, so a loading
    process never holds a whole file's pages beside the model (its peak stays near the model's own size)."""
    with safetensors_library().safe_open(file, framework="pt") as f:
        return f.get_tensor(name)


# ----------------------------------------------------------------------------- tensors -> parameters
# Each family's tensor names, relative to its decoder's prefix, for this model's parameters. A piece says which
# rows of the checkpoint's tensor fill which rows of one parameter: LLaMA's q, k and v fill row ranges of the fused
# c_attn, Phi-3's gate_up_proj fills two parameters, GPT-NeoX's per-head [q|k|v] rows are reordered into c_attn's
# [all q | all k | all v]; GPT-2's Conv1D weights are stored transposed.

PREFIXES = {"GPT2LMHeadModel": ("transformer.",), "GPTNeoXForCausalLM": ("gpt_neox.",),
            "Gemma3ForConditionalGeneration": ("language_model.model.", "model.language_model.", "language_model.")}
# tensors that are not weights (mask buffers, old RoPE tables) or that a text forward never reads (a vision tower)
NOT_READ = {"GPT2LMHeadModel": (r".*\.attn\.(masked_)?bias",),
            "GPTNeoXForCausalLM": (r".*\.attention\.(masked_)?bias", r".*rotary_emb\.inv_freq"),
            "Gemma3ForConditionalGeneration": (r"vision_tower\..*", r"multi_modal_projector\..*")}
NAMES = {   # this model's module -> the family's, per layer (a norm's name depends on where it sits)
    "llama": {"attn.c_proj": "self_attn.o_proj", "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
              "mlp.c_fc": "mlp.up_proj", "mlp.c_gate": "mlp.gate_proj", "mlp.c_proj": "mlp.down_proj"},
    "pre": {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"},
    "post": {"ln_1_out": "post_attention_layernorm", "ln_2_out": "post_feedforward_layernorm"},
    "sandwich": {"ln_1": "input_layernorm", "ln_1_out": "post_attention_layernorm",
                 "ln_2": "pre_feedforward_layernorm", "ln_2_out": "post_feedforward_layernorm"},
    "neox": {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "attn.c_attn": "attention.query_key_value",
             "attn.c_proj": "attention.dense", "mlp.c_fc": "mlp.dense_h_to_4h", "mlp.c_proj": "mlp.dense_4h_to_h"},
}
TOP_NAMES = {"llama": {"transformer.wte": "embed_tokens", "transformer.ln_f": "norm", "lm_head": "lm_head"},
             "neox": {"transformer.wte": "embed_in", "transformer.ln_f": "final_layer_norm", "lm_head": "embed_out"}}
GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def tensor_targets(model: GPT, arch: str) -> dict:
    """The family's tensor name (relative to its prefix) -> [(this model's parameter, its rows filled or None,
    the checkpoint tensor's rows read or None, transpose)], for every parameter of `model`."""
    cfg, targets = model.config, {}
    names = {**NAMES["llama"], **NAMES[cfg.norm_position]} if arch != "GPTNeoXForCausalLM" else NAMES["neox"]
    top = TOP_NAMES["neox" if arch == "GPTNeoXForCausalLM" else "llama"]
    add = lambda hf_name, *piece: targets.setdefault(hf_name, []).append(piece)
    for name in dict(model.named_parameters()):
        layer = re.fullmatch(r"transformer\.h\.(\d+)\.(.+)\.(weight|bias)", name)
        if arch == "GPT2LMHeadModel":
            add(name.removeprefix("transformer."), name, None, None, name.endswith(GPT2_CONV1D))
        elif layer is None:                                  # embedding, final norm, LM head
            module, kind = name.rsplit(".", 1)
            add(f"{top[module]}.{kind}", name, None, None, False)
        elif arch == "GPTNeoXForCausalLM" and layer[2] == "attn.c_attn":
            add(f"layers.{layer[1]}.{names['attn.c_attn']}.{layer[3]}", name, None, neox_qkv_rows(cfg), False)
        elif layer[2] == "attn.c_attn" and arch == "Phi3ForCausalLM":
            add(f"layers.{layer[1]}.self_attn.qkv_proj.{layer[3]}", name, None, None, False)
        elif layer[2] == "attn.c_attn":
            ends = list(itertools.accumulate(qkv_sizes(cfg)))
            for proj, start, end in zip("qkv", [0] + ends, ends):
                add(f"layers.{layer[1]}.self_attn.{proj}_proj.{layer[3]}", name, slice(start, end), None, False)
        elif layer[2] in ("mlp.c_gate", "mlp.c_fc") and arch == "Phi3ForCausalLM":
            width = cfg.mlp_width
            rows = slice(0, width) if layer[2] == "mlp.c_gate" else slice(width, 2 * width)   # [gate | up]
            add(f"layers.{layer[1]}.mlp.gate_up_proj.{layer[3]}", name, None, rows, False)
        else:
            add(f"layers.{layer[1]}.{names[layer[2]]}.{layer[3]}", name, None, None, False)
    for pieces in targets.values():    # a fused tensor's pieces in the order of its rows
        pieces.sort(key=lambda piece: piece[2].start if isinstance(piece[2], slice) else 0)
    return targets


def neox_qkv_rows(config: GPTConfig) -> torch.Tensor:
    """GPT-NeoX's query_key_value rows in c_attn's order: its rows are per head [q_h | k_h | v_h], c_attn's
    [q_1 .. q_H | k_1 .. k_H | v_1 .. v_H]. Row j*H*hd + h*hd + i of c_attn is row h*3*hd + j*hd + i of NeoX's."""
    H, hd = config.n_head, config.head_dim
    return torch.arange(3 * H * hd).view(H, 3, hd).transpose(0, 1).reshape(-1)


def relative_name(hf_name: str, arch: str) -> Optional[str]:
    """A checkpoint's tensor name relative to its family's decoder prefix; None for a tensor never read."""
    if any(re.fullmatch(pattern, hf_name) for pattern in NOT_READ.get(arch, ())):
        return None
    for prefix in PREFIXES.get(arch, ("model.",)):
        if hf_name.startswith(prefix):
            return hf_name.removeprefix(prefix)
    return hf_name


def plan_weights(model: GPT, headers: dict, arch: str, where: str) -> list:
    """Every tensor of the headers checked against `model` (on any device, meta too) before a weight is read: a
    missing, unknown, misshapen or twice-stored one is an error naming it. -> [(file, name, pieces)]"""
    targets, params = tensor_targets(model, arch), dict(model.named_parameters())
    head = "embed_out.weight" if arch == "GPTNeoXForCausalLM" else "lm_head.weight"
    plan = {}
    for file, header in headers.items():
        for hf_name, (kind, shape) in header.items():
            name = relative_name(hf_name, arch)
            if name is None or name == head and model.config.tie_embeddings:
                continue       # not weights, a vision tower, a tied head's saved copy
            if name not in targets or name in plan:
                raise ValueError(f"{where}: tensor {hf_name!r} is " + ("stored twice" if name in plan else
                                 f"not part of a {arch} with this config.json"))
            if kind not in SAFETENSORS_FLOATS:
                raise ValueError(f"{where}: tensor {hf_name!r} has dtype {kind}; only F64/F32/BF16/F16 load")
            want = expected_shape(targets[name], params)
            if shape != want:
                raise ValueError(f"{where}: tensor {hf_name!r} has shape {list(shape)}, config.json implies "
                                 f"{list(want)}")
            plan[name] = (file, hf_name, targets[name])
    missing = [f"{name} ({targets[name][0][0]})" for name in targets if name not in plan]
    if missing:
        raise ValueError(f"{where}: the tensor(s) {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                         f"of a {arch} are missing from the checkpoint")
    return list(plan.values())


def expected_shape(pieces: list, params: dict) -> tuple:
    """The shape a checkpoint tensor must have to fill its pieces: the one parameter's (transposed where stored
    so), or the pieces' rows stacked."""
    param, rows, read, transpose = pieces[0]
    dest = params[param] if rows is None else params[param][rows]
    if len(pieces) == 1:
        return tuple(dest.shape[::-1] if transpose else dest.shape)
    # pieces of one fused tensor: each reads as many of its rows as it fills
    total = sum((params[p] if r is None else params[p][r]).shape[0] for p, r, _, _ in pieces)
    return (total, *dest.shape[1:])


@torch.no_grad()
def load_weights(model: GPT, headers: dict, arch: str, where: str) -> None:
    """Fill every parameter of `model` from the safetensors files, one tensor at a time, after plan_weights has
    checked them all. A fused tensor is read once and split (or reordered) into its parameters."""
    params = dict(model.named_parameters())
    for file, hf_name, pieces in plan_weights(model, headers, arch, where):
        t = read_tensor(file, hf_name)
        for param, rows, read, transpose in pieces:
            dest = params[param] if rows is None else params[param][rows]
            src = t if read is None else t[read]
            dest.copy_(src.T if transpose else src)


# ----------------------------------------------------------------------------- command line

def main(argv=None) -> None:
    """python hf.py PATH [PATH ...]: what each model becomes here -- its family, the knobs it sets apart from
    GPTConfig's defaults, its parameter count -- after every check the loader makes, no weight read. A model
    that would not load is one line on stderr and exit code 2, before anything is printed."""
    parser = argparse.ArgumentParser(prog="hf.py", description="What a model on disk maps onto in model.py: its "
                                     "family, the GPTConfig knobs it sets, its parameters. No weight is read.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="Hugging Face directories (config.json + "
                        "*.safetensors) or train.py checkpoints")
    args = parser.parse_args(argv)
    found = []
    try:
        for path in args.paths:
            path = checked_path(path)
            config, arch = (read_config(path), "train.py checkpoint") if os.path.isfile(path) else planned(path)[:2]
            with torch.device("meta"):
                found.append((path, config, arch, GPT(config).num_params()))
    except (ValueError, FileNotFoundError, ImportError) as e:
        sys.stderr.write(f"hf.py: error: {' '.join(str(e).split())}\n")
        sys.exit(2)
    default = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    for path, config, arch, params in found:
        knobs = {k: v for k, v in dataclasses.asdict(config).items() if v != default[k]}
        print(f"{path}: {arch}, {params:,} parameters")
        print("  GPTConfig(" + ", ".join(f"{k}={v!r}" for k, v in knobs.items()) + ")")


if __name__ == "__main__":
    main()
