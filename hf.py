"""
hf.py: Hugging Face checkpoints, loaded exactly into model.py's GPT -- the released models whose birth
bias, lineage and sinks the paper's questions are asked of.

A Hugging Face directory holds config.json (an architecture in transformers' field names) and
*.safetensors files (its weights in transformers' tensor names). Each family here is mapped field by
field onto GPTConfig's knobs and tensor by tensor onto GPT's parameters, so that the project's own
forward pass computes what transformers computes, within float32 rounding, without transformers:
  - a field that changes the forward pass is read, in both spellings found on the Hub (transformers 4.x
    rope_theta + rope_scaling, 5.x rope_parameters); a field left out takes transformers' class default;
  - a field present but not understood, a tensor missing, unknown, misshapen or stored twice, an
    architecture not carried: each is one error naming it, before any weight is read. Nothing is
    approximated in silence.

    load(dir)              -> a GPT in the checkpoint's dtype, filled tensor by tensor
    read_config(dir)       -> its GPTConfig, the weight files' headers checked against it, no weight read
    config_from_json(dict) -> the GPTConfig of a config.json
    tensors(dir)           -> (name, tensor), one at a time: to check a model's weights before any work
    token_rows(dir, lo, hi)-> rows lo..hi of the token table alone

Needs model.py and the safetensors package (pip install safetensors); copy the two files together.
"""
import itertools
import json
import math
import os
import re
from typing import Optional

import torch

from model import GPT, GPTConfig, check_model_weights_finite, qkv_sizes

FAMILIES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel")


def load(path: str, device="cpu", dtype: Optional[torch.dtype] = None) -> GPT:
    """The model of a Hugging Face directory (config.json + *.safetensors) of a supported family. It is built
    in the checkpoint's dtype (bf16 stays bf16; `dtype` overrides) and filled tensor by tensor, so loading
    peaks near the checkpoint's own size. Weights that hold NaN or inf are refused."""
    config, arch, headers = read_dir(path)
    found = {kind for header in headers.values() for kind, _ in header.values()}
    dtype = dtype or next((SAFETENSORS_FLOATS[k] for k in SAFETENSORS_FLOATS if k in found), torch.float32)
    with torch.device("meta"):
        model = GPT(config).to(dtype)        # dtype on the meta device: nothing allocated yet
    load_weights(model.to_empty(device=device), headers, arch, path)
    return check_model_weights_finite(model, path)


def read_config(path: str) -> GPTConfig:
    """The GPTConfig of a directory, without reading a weight: its tensors' names, shapes and dtypes are
    checked against it (a model built on the meta device), so a damaged directory is refused here."""
    config, arch, headers = read_dir(path)
    with torch.device("meta"):
        plan_weights(GPT(config), headers, arch, path)
    return config


def tensors(path: str):
    """(name, tensor) of every floating-point tensor of a directory, one at a time (memory: the largest)."""
    for file, header in read_dir(path)[2].items():
        for name, (kind, _) in header.items():
            if kind in SAFETENSORS_FLOATS:
                yield name, read_tensor(file, name)


def token_rows(path: str, lo: int, hi: int):
    """Rows [lo, hi) of the token embedding table, float32 numpy (rows x width): one slice of one tensor."""
    _, arch, headers = read_dir(path)
    wanted = "transformer.wte.weight" if arch == "GPT2LMHeadModel" else "model.embed_tokens.weight"
    found = [(file, name) for file, header in headers.items() for name in header
             if name == wanted or name == wanted.removeprefix("transformer.")]
    if not found:
        raise ValueError(f"{path}: no token table ({wanted}) in its safetensors files")
    file, name = found[0]
    with safetensors_library().safe_open(file, framework="pt") as f:
        return f.get_slice(name)[lo:hi].float().numpy()


# ----------------------------------------------------------------------------- config.json -> GPTConfig
# Every field is popped as it is read; what is left at the end was not understood, and is refused.

# transformers' class defaults of the fields a config.json may leave out
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
    "summary_first_dropout",
    "pretraining_tp",               # LLaMA: the same matmuls, split in slices
    "reorder_and_upcast_attn", "n_ctx",   # GPT-2: float32 upcast of the scores; a legacy alias of n_positions
}
# fields that are inert only at these values
INERT_IF = {"is_encoder_decoder": False, "add_cross_attention": False, "pruned_heads": {},
               "tie_encoder_decoder": False}

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
               "a list of names": lambda v: type(v) is list and all(type(a) is str for a in v)}
FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "max_position_embeddings", "head_dim", "sliding_window", "n_positions",
                     "n_layer", "n_head", "n_embd", "n_inner", "original_max_position_embeddings"), "an integer >= 1"),
    "max_window_layers": "an integer >= 0",
    **dict.fromkeys(("rms_norm_eps", "layer_norm_epsilon", "rope_theta", "factor", "low_freq_factor",
                     "high_freq_factor", "partial_rotary_factor"), "a finite number > 0"),
    **dict.fromkeys(("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "scale_attn_weights",
                     "scale_attn_by_inverse_layer_idx"), "true or false"),
    **dict.fromkeys(("hidden_act", "activation_function", "rope_type", "type"), "a string"),
    **dict.fromkeys(("rope_scaling", "rope_parameters"), "an object or null"),
    **dict.fromkeys(("architectures", "layer_types"), "a list of names"),
}


def check_field_types(hf: dict) -> None:
    """Refuse, by name, any read field (also inside rope_scaling / rope_parameters) of the wrong type or range."""
    nested = [(f"{key}.", hf[key]) for key in ("rope_scaling", "rope_parameters") if isinstance(hf.get(key), dict)]
    for where, fields in [("", hf)] + nested:
        for key, value in fields.items():
            kind = FIELD_TYPES.get(key)
            if kind and value is not None and not FIELD_KINDS[kind](value):
                raise ValueError(f"field {where}{key} must be {kind}, got {value!r}")


def _need(fields: dict, key: str, where: str = "config.json"):
    if key not in fields or fields[key] is None:
        raise ValueError(f"{where} lacks the field {key!r}")
    return fields.pop(key)


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
    fields = {k: v for k, v in hf.items() if k not in INERT}   # every field is popped as it is read
    for key, inert in INERT_IF.items():
        if key in fields and fields.pop(key) not in (inert, None):
            raise ValueError(f"config.json sets {key}={hf[key]!r}; hf.py loads decoder-only causal LMs only")
    config = _gpt2_config(fields) if arch == "GPT2LMHeadModel" else _llama_family_config(fields, arch)
    if fields:
        raise ValueError(f"config.json field(s) {sorted(fields)} of this {arch} are not understood by hf.py; a "
                         f"field it cannot read may change the forward pass: refused, not approximated")
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
    d = DEFAULTS[arch]
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



# ----------------------------------------------------------------------------- the directory and its files

def read_json(path: str, what: str):
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
    hf = read_json(cfg_path, "config.json")
    try:
        config = config_from_json(hf)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {str(e).removeprefix('config.json ')}") from None
    if os.path.exists(index):
        weight_map = read_json(index, "safetensors index")
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
    return config, hf["architectures"][0], {os.path.join(path, f): read_header(os.path.join(path, f))
                                            for f in files}


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

# The LLaMA family's names for this model's modules; GPT-2 checkpoints use this model's own names.
LLAMA_NAMES = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "attn.c_proj": "self_attn.o_proj",
               "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm", "mlp.c_fc": "mlp.up_proj",
               "mlp.c_gate": "mlp.gate_proj", "mlp.c_proj": "mlp.down_proj",
               "transformer.wte": "embed_tokens", "transformer.ln_f": "norm", "lm_head": "lm_head"}
GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def tensor_targets(model: GPT, arch: str) -> dict:
    """HF tensor name (prefix "model." / "transformer." stripped) -> (this model's parameter, the rows it fills or None,
    transpose): GPT-2's Conv1D weights are stored (in, out); LLaMA's q, k, v fill row ranges of the fused c_attn."""
    targets = {}
    for name in dict(model.named_parameters()):
        layer = re.fullmatch(r"transformer\.h\.(\d+)\.(.+)\.(weight|bias)", name)
        if arch == "GPT2LMHeadModel":
            targets[name.removeprefix("transformer.")] = (name, None, name.endswith(GPT2_CONV1D))
        elif layer is None:                                  # embedding, final norm, LM head
            module, kind = name.rsplit(".", 1)
            targets[f"{LLAMA_NAMES[module]}.{kind}"] = (name, None, False)
        elif layer[2] == "attn.c_attn":
            ends = list(itertools.accumulate(qkv_sizes(model.config)))
            for proj, start, end in zip("qkv", [0] + ends, ends):
                targets[f"layers.{layer[1]}.self_attn.{proj}_proj.{layer[3]}"] = (name, slice(start, end), False)
        else:
            targets[f"layers.{layer[1]}.{LLAMA_NAMES[layer[2]]}.{layer[3]}"] = (name, None, False)
    return targets


def plan_weights(model: GPT, headers: dict, arch: str, where: str) -> list:
    """Every tensor of the headers checked against `model` (on any device, meta too) before a weight is read: a
    missing, unknown, misshapen or twice-stored one is an error naming it. -> [(file, name, ours, rows, transpose)]"""
    targets, params = tensor_targets(model, arch), dict(model.named_parameters())
    prefix = "transformer." if arch == "GPT2LMHeadModel" else "model."
    plan = {}
    for file, header in headers.items():
        for hf_name, (kind, shape) in header.items():
            name = hf_name.removeprefix(prefix)
            if name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")) \
                    or name == "lm_head.weight" and model.config.tie_embeddings:
                continue       # not weights: GPT-2's mask buffers, old RoPE tables, a tied head's saved copy
            if name not in targets or name in plan:
                raise ValueError(f"{where}: tensor {hf_name!r} is " + ("stored twice" if name in plan else
                                 f"not part of a {arch} with this config.json"))
            if kind not in SAFETENSORS_FLOATS:
                raise ValueError(f"{where}: tensor {hf_name!r} has dtype {kind}; only F64/F32/BF16/F16 load")
            param_name, rows, transpose = targets[name]
            dest = params[param_name] if rows is None else params[param_name][rows]
            want = tuple(dest.shape[::-1] if transpose else dest.shape)
            if shape != want:
                raise ValueError(f"{where}: tensor {hf_name!r} has shape {list(shape)}, config.json implies "
                                 f"{list(want)}")
            plan[name] = (file, hf_name, param_name, rows, transpose)
    missing = [f"{prefix}{name} ({targets[name][0]})" for name in targets if name not in plan]
    if missing:
        raise ValueError(f"{where}: the tensor(s) {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                         f"of a {arch} are missing from the checkpoint")
    return list(plan.values())


@torch.no_grad()
def load_weights(model: GPT, headers: dict, arch: str, where: str) -> None:
    """Fill every parameter of `model` from the safetensors files, one tensor at a time, after
    plan_hf_weights has checked them all."""
    params = dict(model.named_parameters())
    for file, hf_name, param_name, rows, transpose in plan_weights(model, headers, arch, where):
        dest = params[param_name][rows] if rows is not None else params[param_name]
        t = read_tensor(file, hf_name)
        dest.copy_(t.T if transpose else t)
