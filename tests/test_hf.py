"""hf.py, the Hugging Face loader, against naive re-implementations of each family, written here.

Each test writes a tiny HF-format directory itself (HF tensor names and layouts, sharded with an
index, config.json in the transformers 4.x or 5.x spelling) and compares hf.load with a
float64 forward pass written from the family's definition, head by head: logits and the final
hidden state, relative error <= 1e-5 in fp32."""
import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_matches, llama_family, naive_llama_family, write_hf
import hf
from model import GPTConfig

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(2)


def gpt2_checkpoint(seed=0):
    g = torch.Generator().manual_seed(seed)
    d, L, V, P = 16, 2, 50, 32
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    t = {"transformer.wte.weight": r(V, d), "transformer.wpe.weight": r(P, d),
         "transformer.ln_f.weight": 1 + r(d), "transformer.ln_f.bias": r(d)}
    for i in range(L):
        p = f"transformer.h.{i}."
        t.update({p + "ln_1.weight": 1 + r(d), p + "ln_1.bias": r(d),
                  p + "ln_2.weight": 1 + r(d), p + "ln_2.bias": r(d),
                  p + "attn.c_attn.weight": r(d, 3 * d), p + "attn.c_attn.bias": r(3 * d),    # Conv1D: (in, out)
                  p + "attn.c_proj.weight": r(d, d), p + "attn.c_proj.bias": r(d),
                  p + "mlp.c_fc.weight": r(d, 4 * d), p + "mlp.c_fc.bias": r(4 * d),
                  p + "mlp.c_proj.weight": r(4 * d, d), p + "mlp.c_proj.bias": r(d),
                  p + "attn.bias": torch.ones(1, 1, P, P).tril()})                          # a mask buffer
    cfg = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", n_embd=d, n_layer=L, n_head=2, n_positions=P,
               n_ctx=P, vocab_size=V, layer_norm_epsilon=1e-5, activation_function="gelu_new", attn_pdrop=0.1,
               embd_pdrop=0.1, resid_pdrop=0.1, summary_type="cls_index", summary_use_proj=True,
               task_specific_params={"text-generation": {"do_sample": True, "max_length": 50}})
    return cfg, t


def naive_gpt2(cfg, t, ids):
    d, H, T = cfg["n_embd"], cfg["n_head"], ids.shape[1]
    hd = d // H
    w = {k: v.double() for k, v in t.items()}
    ln = lambda x, p: F.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], 1e-5)
    gelu_new = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(d, -1)
        heads = []
        for j in range(H):
            sl = slice(j * hd, (j + 1) * hd)
            s = (q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(hd)).masked_fill(
                torch.ones(T, T).triu(1).bool(), -math.inf)
            heads.append(s.softmax(-1) @ v[..., sl])
        x = x + torch.cat(heads, -1) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        x = x + gelu_new(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) \
            @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    hidden = ln(x, "transformer.ln_f")
    return hidden @ w["transformer.wte.weight"].T, hidden          # tied head


# ----------------------------------------------------------------------------- every family, both spellings

LLAMA3 = dict(kind="llama3", theta=50000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=32)     # head_dim 16: short, middle and long wavelengths all occur
FAMILIES = {
    "llama, llama3 RoPE, GQA, biases, head_dim 16 != 32/4": dict(
        arch="LlamaForCausalLM", rope=LLAMA3, head_dim=16, attention_bias=True, mlp_bias=True),
    "llama, linear RoPE, tied": dict(
        arch="LlamaForCausalLM", rope=dict(kind="linear", theta=20000.0, factor=4.0), tie=True),
    "mistral, window 5 < T": dict(arch="MistralForCausalLM", window=5),
    "qwen2, q/k/v biases, tied": dict(arch="Qwen2ForCausalLM", tie=True),
    "qwen3, q/k norm, head_dim 12 != 32/4": dict(arch="Qwen3ForCausalLM", head_dim=12),
}


@pytest.mark.parametrize("spelling", ["4.x", "5.x"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_matches_a_naive_forward(tmp_path, family, spelling):
    spec, cfg, t = llama_family(spelling=spelling, **FAMILIES[family])
    write_hf(tmp_path, cfg, t)
    model = hf.load(str(tmp_path)).eval()
    ids = torch.randint(0, spec["V"], (2, 12), generator=torch.Generator().manual_seed(1))
    assert_matches(model, *naive_llama_family(spec, t, ids), ids)


def test_gpt2_with_conv1d_layout_and_old_config_fields_matches_a_naive_forward(tmp_path):
    cfg, t = gpt2_checkpoint()
    write_hf(tmp_path, cfg, t)
    model = hf.load(str(tmp_path)).eval()
    ids = torch.randint(0, cfg["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(1))
    assert_matches(model, *naive_gpt2(cfg, t, ids), ids)


def test_the_knobs_the_families_need_are_read_not_defaulted(tmp_path):
    """The reference forwards above would still pass if a knob were silently dropped only when it does
    not matter; check that each one changes the output, so the comparisons are not vacuous."""
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    for family, change in (("llama, llama3 RoPE, GQA, biases, head_dim 16 != 32/4",
                            dict(rope=dict(LLAMA3, kind="default"))),
                           ("mistral, window 5 < T", dict(window=None)),
                           ("qwen3, q/k norm, head_dim 12 != 32/4", dict(qk_norm=False))):
        spec, cfg, t = llama_family(**FAMILIES[family])
        logits, _ = naive_llama_family(spec, t, ids)
        changed, _ = naive_llama_family(dict(spec, **change), t, ids)
        assert (changed - logits).abs().max() > 1e-2 * logits.abs().max(), family


def test_smollm2_config_as_saved_by_transformers_5_keeps_rope_theta():
    """SmolLM2-135M's config.json, as transformers 5 writes it: theta 1e5 inside rope_parameters."""
    smollm2 = {"_model_name_or_path": "Smollm2 135M 8k Lc100K Mix1 Ep2", "architectures": ["LlamaForCausalLM"],
               "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "dtype": "float32",
               "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.02,
               "intermediate_size": 1536, "max_position_embeddings": 8192, "mlp_bias": False, "model_type": "llama",
               "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": 2,
               "pretraining_tp": 1, "rms_norm_eps": 1e-05,
               "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
               "tie_word_embeddings": True, "transformers_version": "5.23.0", "unk_token_id": 0, "use_cache": True,
               "vocab_size": 49152}
    c = hf.config_from_json(smollm2)
    assert (c.rope_theta, c.rope_type, c.n_kv_head, c.head_dim, c.tie_embeddings, c.block_size) == \
        (1e5, "default", 3, 64, True, 8192)


def test_llama31_and_qwen25_configs_as_published():
    llama31 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
               "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
               "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
               "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
               "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
               "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
               "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256}
    c = hf.config_from_json(llama31)
    assert (c.rope_type, c.rope_theta, c.rope_factor, c.rope_original_context, c.n_kv_head) == \
        ("llama3", 5e5, 8.0, 8192, 8)
    qwen25 = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
              "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
              "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
              "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
              "use_sliding_window": False, "vocab_size": 151936}
    c = hf.config_from_json(qwen25)
    assert (c.sliding_window, c.qkv_bias, c.attn_bias, c.rope_theta, c.tie_embeddings) == (None, True, False, 1e6, True)


SMOLLM2_135M = {   # HuggingFaceTB/SmolLM2-135M's config.json as published (written by nanotron's converter)
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0,
    "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
    "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "vocab_size": 49152}
PHI4_MINI = {   # microsoft/Phi-4-mini-instruct's config.json as published
    "_name_or_path": "Phi-4-mini-instruct", "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config", "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM",
                 "AutoTokenizer": "Xenova/gpt-4o"},
    "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999, "full_attn_mod": 1, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "interpolate_factor": 1,
    "lm_head_bias": False, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "phi3",
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "original_max_position_embeddings": 4096, "pad_token_id": 199999, "partial_rotary_factor": 0.75,
    "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "long_factor": [1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649,
                        2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845,
                        5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158,
                        11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105,
                        25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71,
                        32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77],
        "short_factor": [1.0] * 48,
        "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0", "use_cache": True, "vocab_size": 200064}


def test_smollm2_and_phi4_mini_configs_as_published():
    """Both carry fields that other code wrote beside transformers' own, at the values that change nothing: they
    load as the models transformers builds; the same fields at another value are refused by name."""
    c = hf.config_from_json(SMOLLM2_135M)
    assert (c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.mlp_hidden, c.vocab_size, c.block_size) == \
        (30, 576, 9, 3, 64, 1536, 49152, 8192)
    assert (c.rope_type, c.rope_theta, c.rope_dims, c.tie_embeddings, c.norm_eps) == ("default", 1e5, None, True, 1e-5)
    c = hf.config_from_json(PHI4_MINI)
    assert (c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.mlp_hidden, c.vocab_size, c.block_size) == \
        (32, 3072, 24, 8, 128, 8192, 200064, 131072)
    assert (c.rope_type, c.rope_dims, c.rope_original_context, c.rope_factors, c.sliding_window, c.tie_embeddings) == \
        ("longrope", 96, 4096, (1.0,) * 48, 262144, True)
    assert c.rope_attention_factor == pytest.approx(math.sqrt(1 + math.log(131072 / 4096) / math.log(4096)))
    for published, key, value in ((SMOLLM2_135M, "rope_interleaved", True), (PHI4_MINI, "lm_head_bias", True),
                                  (PHI4_MINI, "full_attn_mod", 2), (PHI4_MINI, "interpolate_factor", 4)):
        with pytest.raises(ValueError, match=f"{key}={json.dumps(value)}, which transformers' .* does not read"):
            hf.config_from_json(dict(published, **{key: value}))


def test_the_command_line_counts_parameters_on_the_model_its_checks_built(tmp_path, monkeypatch):
    """hf.py PATH: the parameter count is the stored tensors', read off the meta model that the checks built (one
    build per model, not a second one for the count)."""
    spec, cfg, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path, cfg, t)
    built = []
    monkeypatch.setattr(hf, "GPT", lambda config, GPT=hf.GPT: built.append(config) or GPT(config))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        hf.main([str(tmp_path)])
    assert printed.getvalue().splitlines()[0] == \
        f"{tmp_path}: LlamaForCausalLM, {sum(v.numel() for v in t.values()):,} parameters"
    assert len(built) == 1


# ----------------------------------------------------------------------------- refusals, each naming its cause

def refused(cfg_change=None, tensor_change=None, match="", tmp=None, arch="LlamaForCausalLM", **family):
    spec, cfg, t = llama_family(arch, **family)
    cfg.update(cfg_change or {})
    if tensor_change:
        tensor_change(t)
    write_hf(tmp, cfg, t)
    with pytest.raises(ValueError, match=match):
        hf.load(str(tmp))


def test_unsupported_architecture_lists_the_families_and_the_escape_hatch(tmp_path):
    refused(dict(architectures=["PhimoeForCausalLM"]), match=r"unsupported architecture 'PhimoeForCausalLM'.*"
            r"LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Olmo2ForCausalLM, "
            r"GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, GPT2LMHeadModel, "
            r"GPTNeoXForCausalLM.*callable", tmp=tmp_path)


@pytest.mark.parametrize("change,match", [
    (dict(quantization_config={"quant_method": "gptq"}), r"\['quantization_config'\].*not understood"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "RoPE type 'yarn' is not supported"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "RoPE type 'dynamic'"),
    (dict(rope_scaling={"rope_type": "linear"}), "lacks the field 'factor'"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "beta": 1}), r"\['beta'\] are not understood"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
    (dict(is_encoder_decoder=True), "is_encoder_decoder"),
])
def test_fields_that_cannot_be_honoured_are_refused_by_name(tmp_path, change, match):
    refused(change, match=match, tmp=tmp_path, spelling="4.x")


def test_qwen2_windows_from_max_window_layers_on_load_layer_by_layer(tmp_path):
    """Qwen2's use_sliding_window: full attention below max_window_layers, the window from there on; a naive
    forward with a window per layer is the reference (T = 12 > window 5, so the window bites)."""
    spec, cfg, t = llama_family("Qwen2ForCausalLM", spelling="4.x")
    cfg.update(use_sliding_window=True, sliding_window=5, max_window_layers=1)
    write_hf(tmp_path, cfg, t)
    model = hf.load(str(tmp_path)).eval()
    assert model.config.sliding_layers == "fs"
    ids = torch.randint(0, spec["V"], (2, 12), generator=torch.Generator().manual_seed(1))
    assert_matches(model, *naive_llama_family(dict(spec, windows=[None, 5]), t, ids), ids)


def test_family_specific_refusals(tmp_path):
    refused(dict(attention_bias=True),
            match="attention_bias=true, which transformers' MistralForCausalLM does not read",
            tmp=tmp_path / "mistral", arch="MistralForCausalLM")
    cfg, t = gpt2_checkpoint()
    write_hf(tmp_path / "gpt2", dict(cfg, scale_attn_by_inverse_layer_idx=True), t)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        hf.load(str(tmp_path / "gpt2"))


def test_missing_unknown_and_misshapen_tensors_are_refused(tmp_path):
    refused(tensor_change=lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), match=r"mlp.c_fc.weight.*missing",
            tmp=tmp_path / "a")
    refused(tensor_change=lambda t: t.update({"model.layers.0.mlp.extra.weight": torch.zeros(2)}),
            match="'model.layers.0.mlp.extra.weight' is not part of", tmp=tmp_path / "b")
    refused(tensor_change=lambda t: t.update({"model.norm.weight": torch.ones(31)}), match=r"shape \[31\].*\[32\]",
            tmp=tmp_path / "c")
    with pytest.raises(FileNotFoundError, match="no model at"):
        hf.load(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a Hugging Face model directory .*: no config.json"):
        hf.load(str(tmp_path / "empty"))


def test_a_truncated_shard_is_refused(tmp_path):
    spec, cfg, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path, cfg, t, shards=1)
    shard = next(tmp_path.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(ValueError, match="truncated"):
        hf.load(str(tmp_path))


# the model each read-once check loads, and two of its tensors as stored: (their names, the parameters they fill)
READ_ONCE = {
    "llama": (("model.embed_tokens.weight", None, "transformer.wte.weight"),
              ("model.layers.1.mlp.down_proj.weight", None, "transformer.h.1.mlp.c_proj.weight")),
    "mixtral": (("model.layers.1.block_sparse_moe.experts.2.w3.weight", None,
                 "transformer.h.1.mlp.experts.2.c_fc.weight"),
                ("model.layers.0.block_sparse_moe.gate.weight", None, "transformer.h.0.mlp.router.weight")),
    "qwen2-moe-fused-dense-first-renormalized": (   # transformers 5's layout: an expert is a slice of one tensor
        ("model.layers.1.mlp.experts.gate_up_proj", (2, slice(24, 48)), "transformer.h.1.mlp.experts.2.c_fc.weight"),
        ("model.layers.2.mlp.experts.down_proj", (3, slice(None)), "transformer.h.2.mlp.experts.3.c_proj.weight")),
}


@pytest.mark.parametrize("case", list(READ_ONCE))
def test_a_model_is_read_once_config_and_every_shard_opened_once(tmp_path, monkeypatch, case):
    """hf.read then hf.load, the way every script reads a model: config.json opened once, each shard once (its
    header read by hf.read, its weights by hf.load on the same open file), the shard index once, and every byte of
    every shard's data read once, a mixture of experts' fused tensors too (one read each, not one per expert); the
    model equals one loaded by the safetensors library (an independent reader)."""
    import builtins
    from safetensors.torch import load_file
    if case == "llama":
        spec, cfg, t = llama_family("LlamaForCausalLM")
    else:
        spec, cfg, t = hf_families.checkpoint(case)
    write_hf(tmp_path, cfg, t, shards=3)
    opened, reads = [], []
    real_open, real_read_bytes = builtins.open, hf.read_bytes
    monkeypatch.setattr(builtins, "open", lambda file, *a, **k: opened.append(os.fspath(file)) or real_open(file, *a,
                                                                                                           **k))
    monkeypatch.setattr(hf, "read_bytes", lambda shard, begin, count, dtype: reads.append(
        (shard.file, begin, count)) or real_read_bytes(shard, begin, count, dtype))
    model = hf.load(hf.read(str(tmp_path)))
    monkeypatch.undo()
    counts = {os.path.basename(f): opened.count(f) for f in set(opened) if f.startswith(str(tmp_path))}
    shards = sorted(f.name for f in tmp_path.glob("*.safetensors"))
    assert counts == {"config.json": 1, "model.safetensors.index.json": 1, **{f: 1 for f in shards}}, counts
    for f in shards:      # the reads of a shard tile its data: each byte once, after the header
        ranges = sorted((begin, count) for file, begin, count in reads if os.path.basename(file) == f)
        header = 8 + int.from_bytes((tmp_path / f).read_bytes()[:8], "little")
        assert all(begin == sum(c for _, c in ranges[:i]) for i, (begin, _) in enumerate(ranges)), (f, ranges)
        assert sum(count for _, count in ranges) == os.path.getsize(tmp_path / f) - header, f
    stored = {k: v for f in shards for k, v in load_file(str(tmp_path / f)).items()}
    params = dict(model.named_parameters())
    for name, rows, param in READ_ONCE[case]:
        assert torch.equal(params[param], stored[name] if rows is None else stored[name][rows]), (name, param)


def test_the_digests_of_a_load_are_each_files_sha256_unread_tensors_included(tmp_path):
    """load(digests=...) takes each file's sha256 on the bytes it reads for the weights: equal to hashlib's over the
    whole file, a tensor the loader never reads (Gemma 3's vision tower) included; a checkpoint file's too."""
    import hashlib
    spec, cfg, t = hf_families.checkpoint("gemma3-conditional-generation", "5.x")
    hf_families.write_checkpoint(tmp_path / "hf", cfg, t, shards=2)
    digests = {}
    hf.load(str(tmp_path / "hf"), digests=digests)
    files = sorted(p for p in (tmp_path / "hf").glob("*.safetensors"))
    assert digests == {p.name: dict(bytes=p.stat().st_size, sha256=hashlib.sha256(p.read_bytes()).hexdigest())
                       for p in files}
    from init import build
    from model import get_config, write_checkpoint
    write_checkpoint(str(tmp_path / "c.pt"), build(get_config("tiny", n_layer=1), 0, 0))
    digests = {}
    model = hf.load(str(tmp_path / "c.pt"), digests=digests)
    data = (tmp_path / "c.pt").read_bytes()
    assert digests == {"c.pt": dict(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())}
    assert torch.equal(model.transformer.wte.weight, hf.load(str(tmp_path / "c.pt")).transformer.wte.weight)


def test_a_header_whose_byte_ranges_leave_a_gap_or_overlap_is_refused(tmp_path):
    """The data of a .safetensors file is every tensor's bytes, end to end, as the safetensors library requires: a
    header that leaves a gap, overlaps two tensors or runs past the file is refused, naming the file."""
    def write(entries: dict, data: bytes, name: str):
        head = json.dumps(entries).encode()
        file = tmp_path / name
        file.write_bytes(len(head).to_bytes(8, "little") + head + data)
        return str(file)
    good = write({"a": dict(dtype="F32", shape=[2], data_offsets=[0, 8])}, bytes(8), "good.safetensors")
    assert hf.open_shard(good).tensors == {"a": ("F32", (2,), (0, 8))}
    for name, entries, data, match in (
            ("gap", {"a": dict(dtype="F32", shape=[1], data_offsets=[4, 8])}, bytes(8), "gap or overlap"),
            ("overlap", {"a": dict(dtype="F32", shape=[2], data_offsets=[0, 8]),
                         "b": dict(dtype="F32", shape=[1], data_offsets=[4, 8])}, bytes(8), "gap or overlap"),
            ("past", {"a": dict(dtype="F32", shape=[4], data_offsets=[0, 16])}, bytes(8), "span 16 bytes"),
            ("size", {"a": dict(dtype="F32", shape=[3], data_offsets=[0, 8])}, bytes(8), "need 12"),
            ("dtype", {"a": dict(dtype="F33", shape=[2], data_offsets=[0, 8])}, bytes(8), "no valid dtype")):
        with pytest.raises(ValueError, match=f"{name}.safetensors is not a valid .safetensors file.*{match}"):
            hf.open_shard(write(entries, data, f"{name}.safetensors"))


# ----------------------------------------------------------------------------- dtype and memory

def test_bf16_stays_bf16_and_dtype_float32_is_its_exact_upcast(tmp_path):
    spec, cfg, t = llama_family("Qwen2ForCausalLM", dtype=torch.bfloat16)
    write_hf(tmp_path, cfg, t)
    bf16 = hf.load(str(tmp_path))
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    assert torch.equal(bf16.transformer.wte.weight, t["model.embed_tokens.weight"])
    fp32 = hf.load(str(tmp_path), dtype=torch.float32)
    assert all(p.dtype == torch.float32 for p in fp32.parameters())
    for (name, a), b in zip(bf16.named_parameters(), fp32.parameters()):
        assert torch.equal(a.float(), b), name


def test_a_file_mixing_dtypes_loads_in_the_widest_so_nothing_is_rounded(tmp_path):
    spec, cfg, t = llama_family("LlamaForCausalLM", dtype=torch.bfloat16)
    t["model.norm.weight"] = torch.full((spec["d"],), 1.0 + 2 ** -12)      # not representable in bf16
    write_hf(tmp_path, cfg, t)
    model = hf.load(str(tmp_path))
    assert model.transformer.ln_f.weight.dtype == torch.float32
    assert torch.equal(model.transformer.ln_f.weight, t["model.norm.weight"])


MEMORY_PROBE = """
import sys, torch
import hf
def status(key):
    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024
before = status('VmRSS')
model = hf.load(sys.argv[1])
assert next(model.parameters()).dtype == torch.bfloat16
print(status('VmHWM') - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads peak memory from /proc (Linux)")
def test_loading_a_bf16_checkpoint_peaks_near_its_own_size(tmp_path):
    """A ~330 MB bf16 checkpoint in 3 shards: the loading process's peak memory grows by at most 1.5x the
    files' size (an fp32 shell, or a memory-mapped copy beside the model, would each exceed it)."""
    from safetensors.torch import save_file
    d, L, ff, V = 1024, 8, 2816, 32000
    names = {"model.embed_tokens.weight": (V, d), "lm_head.weight": (V, d), "model.norm.weight": (d,)}
    for i in range(L):
        p = f"model.layers.{i}."
        names.update({p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (d, d),
                      p + "self_attn.v_proj.weight": (d, d), p + "self_attn.o_proj.weight": (d, d),
                      p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
                      p + "mlp.down_proj.weight": (d, ff), p + "input_layernorm.weight": (d,),
                      p + "post_attention_layernorm.weight": (d,)})
    cfg = dict(architectures=["LlamaForCausalLM"], hidden_size=d, num_hidden_layers=L, num_attention_heads=16,
               num_key_value_heads=16, intermediate_size=ff, vocab_size=V, rms_norm_eps=1e-5, rope_theta=10000.0)
    with open(tmp_path / "config.json", "w") as fh:
        json.dump(cfg, fh)
    keys = sorted(names)
    weight_map = {}
    for i in range(3):
        file = f"model-{i + 1:05d}-of-00003.safetensors"
        save_file({k: torch.full(names[k], 0.01, dtype=torch.bfloat16) for k in keys[i::3]}, str(tmp_path / file))
        weight_map.update({k: file for k in keys[i::3]})
    with open(tmp_path / "model.safetensors.index.json", "w") as fh:
        json.dump({"weight_map": weight_map}, fh)
    size = sum(f.stat().st_size for f in tmp_path.glob("*.safetensors"))
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    grown = int(out.stdout.split()[-1])
    assert grown <= 1.5 * size, (grown / 2 ** 20, size / 2 ** 20)
    # the load-cost study's report on the same directory, run in this process: its sizes and dtype (its ratio is
    # a high-water mark of this process, which earlier tests may have set; the subprocess above measured it)
    from studies import load_cost
    load_cost.main([str(tmp_path), "--out", str(tmp_path / "out")])
    report = json.loads((tmp_path / "out" / "results.json").read_text())["load"]
    assert report["params"] == sum(math.prod(shape) for shape in names.values())
    assert report["file_bytes"] == size and report["dtype"] == "bfloat16"


# ----------------------------------------------------------------------------- the families people study:
# GPT-NeoX (Pythia), OLMo-2, Gemma 1/2/3, Phi-3. tests/hf_families.py writes tiny checkpoints of each, in both
# config spellings, and computes their forward head by head in float64 from each family's definition.

import hf_families  # noqa: E402


@pytest.mark.parametrize("spelling", ["4.x", "5.x"])
@pytest.mark.parametrize("case", list(hf_families.CASES))
def test_each_family_loads_exactly(tmp_path, case, spelling):
    """Logits and the final hidden state within 1e-5 (relative, fp32) of the naive float64 forward, every
    variant, both spellings, sharded; a LongRoPE model refuses, in one error, the lengths past its original
    context, where transformers switches to the long factors."""
    spec, cfg, t = hf_families.checkpoint(case, spelling)
    hf_families.write_checkpoint(tmp_path, cfg, t, shards=2)
    model = hf.load(str(tmp_path)).eval()
    for B, T in hf_families.CASES[case]["ids"]:
        ids = torch.randint(0, spec["V"], (B, T), generator=torch.Generator().manual_seed(1))
        longrope = model.config.rope_type == "longrope"
        if longrope and T > model.config.rope_original_context:
            with pytest.raises(ValueError, match="LongRoPE switches to its long factors"):
                model(ids)
            continue
        assert_matches(model, *hf_families.naive_forward(spec, t, ids), ids)


def test_a_tensor_never_read_neither_refuses_nor_sets_the_dtype(tmp_path):
    """Gemma 3's vision tower is not read (NOT_READ): a NaN in it, or its dtype, does not touch the text model that
    loads; a NaN in a tensor that is read is still refused by the weight check."""
    spec, cfg, t = hf_families.checkpoint("gemma3-conditional-generation", "5.x")
    tower = "vision_tower.vision_model.post_layernorm.weight"
    t = {k: v.to(torch.bfloat16) if k.startswith("language_model") else v for k, v in t.items()}
    t[tower] = torch.full_like(t[tower], float("nan"))
    hf_families.write_checkpoint(tmp_path / "nan_in_tower", cfg, t, shards=2)
    model = hf.load(str(tmp_path / "nan_in_tower"))
    assert model.transformer.wte.weight.dtype == torch.bfloat16         # the text weights' dtype, not the tower's
    hf.check_weights_finite(str(tmp_path / "nan_in_tower"))
    read = next(k for k in t if k.startswith("language_model") and k.endswith("embed_tokens.weight"))
    t[read] = t[read].clone()
    t[read][0, 0] = float("nan")
    hf_families.write_checkpoint(tmp_path / "nan_in_text", cfg, t, shards=2)
    with pytest.raises(ValueError, match="NaN"):
        hf.check_weights_finite(str(tmp_path / "nan_in_text"))


SPEC_CHANGES = [   # (case, a change of the naive forward's spec): each must move the logits, or a test passes
    ("pythia", dict(block="sequential")),  # vacuously on a knob the loader drops
    ("pythia", dict(ropes=None)),
    ("olmo2", dict(qk_norm=None)),
    ("olmo2", dict(block="sequential")),
    ("gemma", dict(embed_scale=None)),
    ("gemma", dict(norm="rmsnorm")),
    ("gemma", dict(activation="gelu")),
    ("gemma2", dict(attn_softcap=None)),
    ("gemma2", dict(final_softcap=None)),
    ("gemma2", dict(windows=None)),
    ("gemma2", dict(block="sequential")),
    ("gemma3-4b-like", dict(ropes=None)),
    ("gemma3-4b-like", dict(qk_norm=None)),
    ("phi4-mini-longrope-partial", dict(ropes=None)),
]


@pytest.mark.parametrize("case,change", SPEC_CHANGES)
def test_the_knobs_of_each_family_matter_to_its_reference(case, change):
    """Each knob a family sets apart changes the reference forward by far more than the 1e-5 the loader must
    meet, so that the comparisons above are not vacuous: the naive forward with that knob undone (RoPE: the
    first layer's partial, scaled or local RoPE replaced by a plain full one; windows: none) is another model."""
    spec, _, t = hf_families.checkpoint(case)
    changed = dict(spec, **change)
    if change.get("ropes", 1) is None:
        changed["ropes"] = [dict(type="default", theta=10000.0, dim=spec["hd"])] * spec["L"]
    if change.get("windows", 1) is None:
        changed["windows"] = [None] * spec["L"]
    if change.get("block") == "sequential":     # its norms read as the sequential block's input norms
        t = dict(t)
        for i in range(spec["L"]):
            p = f"{spec['prefix']}layers.{i}."
            for name in ("input_layernorm", "post_attention_layernorm"):
                for kind in ("weight", "bias"):
                    t.setdefault(f"{p}{name}.{kind}", t.get(f"{p}post_feedforward_layernorm.{kind}"))
            t = {k: v for k, v in t.items() if v is not None}
    ids = torch.randint(0, spec["V"], (2, 12), generator=torch.Generator().manual_seed(1))
    logits, _ = hf_families.naive_forward(spec, t, ids)
    other, _ = hf_families.naive_forward(changed, t, ids)
    assert (other - logits).abs().max() > 1e-4 * logits.abs().max(), (case, change)     # 10x the bound


@pytest.mark.parametrize("spelling", ["4.x", "5.x"])
@pytest.mark.parametrize("case", ["pythia", "olmo2", "gemma", "gemma2", "gemma3-1b-like", "phi3-mini-4k-like",
                                  "gemma3-conditional-generation"])
def test_a_field_no_family_reads_is_refused_by_name_in_every_family(tmp_path, case, spelling):
    spec, cfg, t = hf_families.checkpoint(case, spelling)
    if "text_config" in cfg:
        cfg = dict(cfg, text_config=dict(cfg["text_config"], moe_num_experts=8))
    else:
        cfg = dict(cfg, moe_num_experts=8)
    hf_families.write_checkpoint(tmp_path, cfg, t)
    with pytest.raises(ValueError, match=r"\['moe_num_experts'\].*not understood"):
        hf.read_config(str(tmp_path))


@pytest.mark.parametrize("case,change,match", [
    ("pythia", dict(rotary_pct=0.2), "RoPE on 3 dims"),        # head_dim 16 x 0.2: 3 dims, odd
    ("pythia", dict(rope_theta=12.0), "rope_theta disagrees"),
    ("gemma2", dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
    ("gemma", dict(hidden_act="relu"), "hidden_act 'relu'"),
    # Phi-3's class reads default and LongRoPE (also by the older names su and yarn), in 4.x and 5.x: linear is
    # refused by both; a yarn without LongRoPE's factors is a LongRoPE lacking them
    ("phi3-mini-4k-like", dict(rope_scaling={"type": "linear", "factor": 4.0}),
     "RoPE type 'linear' is not supported for Phi3ForCausalLM"),
    ("phi3-mini-4k-like", dict(rope_scaling={"type": "yarn", "factor": 4.0}),
     "rope_scaling lacks the field 'short_factor'"),
    ("phi3-mini-4k-like", dict(attention_bias=True), "attention_bias=true"),
    ("olmo2", dict(partial_rotary_factor=0.5), "RoPE on part of each head is not supported"),
    ("gemma3-1b-like", dict(layer_types=["full_attention"]), "layer_types must name each of the 7 layers"),
    ("gemma2", dict(layer_types=[]), "layer_types must name each of the"),   # names no layer: transformers fails
])
def test_family_fields_that_cannot_be_honoured_are_refused(tmp_path, case, change, match):
    spec, cfg, t = hf_families.checkpoint(case, "4.x")
    hf_families.write_checkpoint(tmp_path, dict(cfg, **change), t)
    with pytest.raises(ValueError, match=match):
        hf.read_config(str(tmp_path))


def without(*names):
    """A tensor change: the tensors `names` removed."""
    return lambda t: [t.pop(name) for name in names]


def resized(name, *shape):
    """A tensor change: the tensor `name` cut to `shape` (its leading slices)."""
    return lambda t: t.update({name: t[name][tuple(slice(n) for n in shape)].clone()})


@pytest.mark.parametrize("case,cfg_change,tensor_change,match", [
    # more experts per token than experts: transformers' top-k fails on it
    ("olmoe", dict(num_experts_per_tok=5), None, r"num_experts_per_tok=5 exceeds num_experts=4"),
    ("qwen3-moe-head-dim-16", dict(num_experts_per_tok=5), None, r"num_experts_per_tok=5 exceeds num_local_experts=4"),
    ("mixtral", dict(num_experts_per_tok=9), None, r"num_experts_per_tok=9 exceeds num_local_experts=4"),
    # a router field the family's class does not read, at a value that says another model
    ("mixtral", dict(norm_topk_prob=False), None, r"norm_topk_prob=false, which transformers' MixtralForCausalLM "
                                                   r"does not read"),
    ("olmoe", dict(shared_expert_intermediate_size=16), None,
     r"shared_expert_intermediate_size=16, which transformers' OlmoeForCausalLM does not read"),
    ("qwen2-moe", dict(num_local_experts=8), None, r"num_local_experts=8, which transformers' Qwen2MoeForCausalLM"),
    # a Qwen2-MoE window: 4.57 slides every layer, 5.x every other one below max_window_layers -- whether or not this
    # reader would have found a sliding layer (max_window_layers at the depth: none; full-attention layer_types: none)
    ("qwen2-moe", dict(use_sliding_window=True, sliding_window=4, max_window_layers=3, layer_types=None), None,
     r"field use_sliding_window must be false \(where it is true, transformers 4\.57 slides every layer"),
    ("qwen2-moe", dict(use_sliding_window=True, sliding_window=4, max_window_layers=3), None,
     r"field use_sliding_window must be false"),
    # an expert's weight missing, in either layout: the tensor and the fields that make it part of the model
    ("mixtral", None, without("model.layers.1.block_sparse_moe.experts.3.w2.weight"),
     r"layers\.1\.block_sparse_moe\.experts\.3\.w2\.weight .* missing .*num_local_experts=4"),
    ("qwen2-moe", None, without("model.layers.2.mlp.experts.0.up_proj.weight"),
     r"layers\.2\.mlp\.experts\.0\.up_proj\.weight .* missing .*num_experts=4, decoder_sparse_step=1, "
     r"mlp_only_layers=\[\]"),
    ("qwen2-moe-fused-dense-first-renormalized", None, without("model.layers.2.mlp.experts.down_proj"),
     r"layers\.2\.mlp\.experts\.down_proj .* missing .*mlp_only_layers=\[0\]"),
    # a fused tensor of the wrong shape: an expert short, or the gate rows without the up rows
    ("qwen2-moe-fused-dense-first-renormalized", None, resized("model.layers.1.mlp.experts.gate_up_proj", 3, 48, 48),
     r"'model\.layers\.1\.mlp\.experts\.gate_up_proj' has shape \[3, 48, 48\], config\.json implies "
     r"\[4, 48, 48\] .*num_experts=4, moe_intermediate_size=24"),
    ("mixtral-fused-window-tied", None, resized("model.layers.0.mlp.experts.gate_up_proj", 3, 40, 48),
     r"'model\.layers\.0\.mlp\.experts\.gate_up_proj' has shape \[3, 40, 48\], config\.json implies "
     r"\[3, 80, 48\] .*intermediate_size=40.*num_local_experts=3"),
    ("olmoe-fused-bias-renormalized-top1", None, resized("model.layers.0.mlp.experts.down_proj", 4, 48, 20),
     r"'model\.layers\.0\.mlp\.experts\.down_proj' has shape \[4, 48, 20\], config\.json implies \[4, 48, 40\]"),
])
def test_a_mixture_of_experts_that_cannot_be_loaded_is_refused_in_one_line_before_any_weight_is_read(
        tmp_path, monkeypatch, case, cfg_change, tensor_change, match):
    spec, cfg, t = hf_families.checkpoint(case)
    if tensor_change:
        tensor_change(t)
    hf_families.write_checkpoint(tmp_path, dict(cfg, **(cfg_change or {})), t)
    monkeypatch.setattr(hf, "read_bytes", lambda *a: pytest.fail("a weight was read before the refusal"))
    with pytest.raises(ValueError, match=match) as refusal:
        hf.load(str(tmp_path))
    assert "\n" not in str(refusal.value)


def test_gemma_rounds_its_embedding_scale_to_the_model_dtype(tmp_path):
    """Gemma multiplies its embeddings by sqrt(width) rounded to the model's dtype (width 48: 6.928... is 6.9375
    in bf16): the residual stream's input is the table row times exactly that number, in bf16 as in fp32."""
    spec, cfg, t = hf_families.checkpoint("gemma")
    hf_families.write_checkpoint(tmp_path, cfg, {k: v.to(torch.bfloat16) for k, v in t.items()})
    ids = torch.tensor([[3, 5, 7]])
    for dtype in (torch.bfloat16, torch.float32):
        model = hf.load(str(tmp_path), dtype=dtype).eval()
        table = t["model.embed_tokens.weight"].to(torch.bfloat16).to(dtype)
        scale = torch.tensor(math.sqrt(spec["d"]), dtype=dtype)
        with torch.no_grad():
            first = model.trace(ids, hidden="all")["hidden"][0]
        assert torch.equal(first[0], table[ids[0]] * scale)
    assert torch.tensor(math.sqrt(48), dtype=torch.bfloat16).item() == 6.9375


@pytest.mark.parametrize("case", ["pythia", "olmo2", "gemma", "gemma2", "gemma3-4b-like", "phi4-mini-longrope-partial"])
def test_each_family_through_every_script(tmp_path, case):
    """What the project asks of a model, asked of each family through the commands a user types: probe.py's
    Table 1, contraction and hidden dimensions on the directory; sink.py's metric (its attention rows are
    distributions, checked by the metric); seedprint.py calls the model related to a noised copy of itself.
    Their numbers are the scripts' own (tested elsewhere); here, that each family runs through each."""
    import json
    import probe
    import seedprint
    import sink
    spec, cfg, t = hf_families.checkpoint(case)
    base, copy = tmp_path / "base", tmp_path / "copy"
    hf_families.write_checkpoint(base, cfg, t)
    g = torch.Generator().manual_seed(9)
    hf_families.write_checkpoint(copy, cfg, {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in t.items()})
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        hf.main([str(base)])                   # what the directory maps onto: its parameters, from the files
    head, knobs = printed.getvalue().splitlines()
    assert head == f"{base}: {cfg['architectures'][0]}, {sum(v.numel() for v in t.values()):,} parameters"
    assert eval(knobs.strip(), {"GPTConfig": GPTConfig}) == hf.read_config(str(base))
    probe.main(["--model", str(base), "--exp", "table1", "contraction", "dims", "--sequences", "16", "--seq_len", "12",
                "--batch_size", "8", "--device", "cpu", "--out", str(tmp_path / "probe")])
    res = json.loads((tmp_path / "probe" / "results.json").read_text())
    assert res["table1"]["rows"][0]["n"] == 16 and len(res["contraction"]["cosine"]) == spec["L"] + 2
    sink.main([str(base), "--sequences", "6", "--lengths", "12", "--out", str(tmp_path / "sink")])
    rates = json.loads((tmp_path / "sink" / "results.json").read_text())["measure"]["rates"]["12"]
    assert len(rates["per_layer"]) == spec["L"] and 0 <= rates["rate"] <= 100
    seedprint.main([str(base), str(copy), "--sequences", "40", "--seq_len", "12", "--k", "8", "--device", "cpu",
                    "--out", str(tmp_path / "seedprint")])
    assert json.loads((tmp_path / "seedprint" / "results.json").read_text())["compare"]["related"]


def test_phi3_reads_longrope_by_its_older_names(tmp_path):
    """Phi-3's config class renames rope_scaling type "su" and "yarn" to "longrope" (4.x and 5.x alike): the same
    model as the LongRoPE it is."""
    spec, cfg, t = hf_families.checkpoint("phi3.5-longrope", "4.x")
    ids = torch.randint(0, spec["V"], (2, 12), generator=torch.Generator().manual_seed(1))
    reference = hf_families.naive_forward(spec, t, ids)
    for name in ("su", "yarn"):
        hf_families.write_checkpoint(tmp_path / name, dict(cfg, rope_scaling=dict(cfg["rope_scaling"], type=name)), t)
        assert_matches(hf.load(str(tmp_path / name)).eval(), *reference, ids)


def test_a_longrope_original_context_of_one_is_refused_in_one_line():
    """LongRoPE scales cos and sin by sqrt(1 + ln(factor) / ln(original)): an original context of 1 divides by ln(1) =
    0 (transformers too). Refused naming the field where no attention_factor is given; with one, it loads."""
    spec, cfg, t = hf_families.checkpoint("phi3.5-longrope", "4.x")
    bad = dict(cfg, original_max_position_embeddings=1)
    bad["rope_scaling"] = {k: v for k, v in cfg["rope_scaling"].items() if k != "original_max_position_embeddings"}
    with pytest.raises(ValueError, match="original_max_position_embeddings 1 gives longrope no scale"):
        hf.config_from_json(bad)
    assert hf.config_from_json(dict(bad, rope_scaling=dict(bad["rope_scaling"], attention_factor=1.2))) \
        .rope_attention_factor == 1.2


# ----------------------------------------------------------------------------- nothing in silence, class by class
# A tiny checkpoint of each family, its config.json edited by class of bad input: every field the family's
# transformers class reads (and every field of the file) set to null; a field the class does not read, at a value
# that would change the forward if it were obeyed; a tied LM head stored apart from the embedding; a model_type of
# another family. Each edit is either refused by one error that names the field (or both tensors), or loads to the
# logits of the naive float64 forward of the model transformers builds from the edited file. What transformers builds
# is written down below, family by family, from its source (4.57 and 5.x: where one refuses the file and the other
# builds a model, that model; where both fail, or they build two models, nothing: a refusal).

CLASS_FAMILIES = {   # name: the tiny checkpoint (conftest's llama_family, GPT-2 above, or an hf_families case)
    "llama": ("llama_family", dict(arch="LlamaForCausalLM", rope=LLAMA3, head_dim=16, attention_bias=True,
                                   mlp_bias=True)),
    "mistral": ("llama_family", dict(arch="MistralForCausalLM", window=5)),
    "qwen2": ("llama_family", dict(arch="Qwen2ForCausalLM", tie=True)),
    "qwen3": ("llama_family", dict(arch="Qwen3ForCausalLM", head_dim=12)),
    "gpt2": ("gpt2", None),
    "pythia": ("hf_families", "pythia"),
    "olmo2": ("hf_families", "olmo2"),
    "gemma": ("hf_families", "gemma"),
    "gemma2": ("hf_families", "gemma2"),
    "gemma3": ("hf_families", "gemma3-4b-like"),
    "gemma3-multimodal": ("hf_families", "gemma3-conditional-generation"),
    "phi3": ("hf_families", "phi3-mini-4k-like"),
    "phi4-longrope": ("hf_families", "phi4-mini-longrope-partial"),
    "mixtral": ("hf_families", "mixtral"),
    "qwen2-moe": ("hf_families", "qwen2-moe"),
    "olmoe": ("hf_families", "olmoe"),
    "qwen3-moe": ("hf_families", "qwen3-moe-head-dim-16"),
}


class Checkpoint:
    """One family's tiny checkpoint in one config spelling: its weights written once (`root`/weights), then loaded
    with edited config.json files (and, for the tied head, edited tensors) against its naive float64 forward."""

    def __init__(self, name: str, spelling: str, root: Path):
        kind, case = CLASS_FAMILIES[name]
        if kind == "llama_family":     # its config.json with the model_type transformers writes beside it
            self.spec, self.cfg, self.t = llama_family(spelling=spelling, **case)
            self.cfg["model_type"] = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                                      "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}[case["arch"]]
            self.naive, vocab = naive_llama_family, self.spec["V"]
        elif kind == "gpt2":
            self.cfg, self.t = gpt2_checkpoint()
            self.spec, vocab = {}, self.cfg["vocab_size"]
            self.naive = lambda spec, t, ids: naive_gpt2(self.cfg, t, ids)
        else:
            self.spec, self.cfg, self.t = hf_families.checkpoint(case, spelling)
            self.naive, vocab = hf_families.naive_forward, self.spec["V"]
        self.ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(1))
        self.root, self.edits, self.base = root, 0, None
        write_hf(root / "weights", self.cfg, self.t)

    def load(self, cfg: dict, tensors: dict = None):
        """(the model, None) or (None, the refusal's message) for this checkpoint with config.json `cfg`."""
        self.edits += 1
        path = self.root / f"edit{self.edits}"
        if tensors is None:
            path.mkdir()
            for file in (self.root / "weights").iterdir():
                if file.name != "config.json":
                    (path / file.name).symlink_to(file)
            (path / "config.json").write_text(json.dumps(cfg))
        else:
            write_hf(path, cfg, tensors)
        try:
            return hf.load(str(path)).eval(), None
        except ValueError as e:
            return None, str(e)

    def mismatch(self, model, change: dict = None, tensors: dict = None) -> float:
        """The largest relative error of the model's logits and final hidden state against the naive forward of the
        checkpoint with `change` made to its spec (the unedited one computed once)."""
        if change or tensors:
            reference = self.naive(dict(self.spec, **(change or {})), tensors or self.t, self.ids)
        else:
            self.base = self.base or self.naive(self.spec, self.t, self.ids)
            reference = self.base
        with torch.no_grad():
            logits = model(self.ids, self.ids)[0]
            hidden = model.trace(self.ids, hidden="all")["hidden"][-1]
        return max(((got.double() - ref).abs().max() / ref.abs().max()).item()
                   for got, ref in zip((logits, hidden), reference))


def edited(cfg: dict, path: str, value) -> dict:
    """A copy of `cfg` with the field at the dotted `path` set to `value` (added where absent)."""
    cfg = json.loads(json.dumps(cfg))
    *parents, leaf = path.split(".")
    inner = cfg
    for key in parents:
        inner = inner[key]
    inner[leaf] = value
    return cfg


def field_paths(cfg: dict, prefix: str = ""):
    """The dotted path of every field of `cfg`, nested objects' fields too."""
    for key, value in cfg.items():
        yield prefix + key
        if isinstance(value, dict):
            yield from field_paths(value, f"{prefix}{key}.")


def names_the_field(message: str, path: str) -> bool:
    """Whether a refusal names the field at `path`: every part of its dotted name appears in the message."""
    return all(part in message for part in path.split("."))


# ----- what a null means to each family's transformers class

SAME = {}               # the edit leaves the model as it is
REFUSED = "refused"     # transformers builds no one model from it: refused, naming the field
# fields that never change an eval forward (token ids, dropout, initialization, caching, bookkeeping, a vision tower):
# a null there changes nothing, nor does anything inside them
INERT_FIELDS = {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype", "use_cache",
                "initializer_range", "attention_dropout", "hidden_dropout", "classifier_dropout", "attn_pdrop",
                "embd_pdrop", "resid_pdrop", "transformers_version", "pretraining_tp", "cache_implementation",
                "n_ctx", "reorder_and_upcast_attn", "summary_type", "summary_use_proj", "summary_activation",
                "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "_sliding_window_pattern",
                "is_decoder", "add_cross_attention", "use_bidirectional_attention", "vision_config",
                "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"}
LLAMA_LINEAGE_READS = ["num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "hidden_act",
                       "tie_word_embeddings", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor"]
READS = {   # the fields each family's class reads, beyond those of its tiny config.json: nulled as well
    "llama": LLAMA_LINEAGE_READS + ["attention_bias", "mlp_bias"],
    "mistral": LLAMA_LINEAGE_READS + ["sliding_window"],
    "qwen2": LLAMA_LINEAGE_READS + ["use_sliding_window", "sliding_window", "max_window_layers", "layer_types"],
    "qwen3": LLAMA_LINEAGE_READS + ["attention_bias", "use_sliding_window", "sliding_window", "max_window_layers",
                                    "layer_types"],
    "gpt2": ["n_inner", "activation_function", "layer_norm_epsilon", "scale_attn_weights",
             "scale_attn_by_inverse_layer_idx", "tie_word_embeddings"],
    "pythia": ["hidden_act", "max_position_embeddings", "layer_norm_eps", "use_parallel_residual", "attention_bias",
               "tie_word_embeddings", "rotary_pct", "rotary_emb_base", "rope_scaling", "rope_parameters",
               "rope_theta", "partial_rotary_factor"],
    "olmo2": LLAMA_LINEAGE_READS + ["attention_bias"],
    "gemma": LLAMA_LINEAGE_READS + ["attention_bias", "hidden_activation"],
    "gemma2": LLAMA_LINEAGE_READS + ["attention_bias", "hidden_activation", "query_pre_attn_scalar", "sliding_window",
                                     "layer_types", "attn_logit_softcapping", "final_logit_softcapping"],
    "gemma3": LLAMA_LINEAGE_READS + ["attention_bias", "hidden_activation", "query_pre_attn_scalar", "sliding_window",
                                     "layer_types", "sliding_window_pattern", "final_logit_softcapping",
                                     "attn_logit_softcapping", "rope_local_base_freq"],
    "phi3": LLAMA_LINEAGE_READS + ["sliding_window", "original_max_position_embeddings"],
}
MOE_READS = ["num_experts_per_tok", "norm_topk_prob"]      # and each family's count of experts
READS.update({
    "mixtral": LLAMA_LINEAGE_READS + ["sliding_window", "num_local_experts", "num_experts_per_tok"],
    "qwen2-moe": READS["qwen2"] + MOE_READS + ["qkv_bias", "num_experts", "moe_intermediate_size",
                                               "shared_expert_intermediate_size", "decoder_sparse_step",
                                               "mlp_only_layers"],
    "olmoe": LLAMA_LINEAGE_READS + MOE_READS + ["attention_bias", "clip_qkv", "num_experts"],
    "qwen3-moe": LLAMA_LINEAGE_READS + MOE_READS + ["attention_bias", "use_sliding_window", "sliding_window",
                                                    "num_experts", "moe_intermediate_size", "decoder_sparse_step",
                                                    "mlp_only_layers"]})
READS["phi4-longrope"] = READS["phi3"]
READS["gemma3-multimodal"] = ["tie_word_embeddings"] + [f"text_config.{key}" for key in READS["gemma3"]]


def from_rope_parameters(key: str):
    """A null top-level RoPE field (its base, its rotary fraction): 5.x takes rope_parameters' own value where it
    has one (the null is moot); 4.x fails on the None (None ** x, int(head_dim * None))."""
    return lambda cfg, spec: SAME if (cfg.get("rope_parameters") or {}).get(key) is not None else REFUSED


def llama_rope_nulls(theta: float) -> dict:
    """The RoPE nulls of a conftest family (its spec: one RoPE) whose class's default base is `theta`: null
    rope_scaling is none (the top-level base stays); null rope_parameters is none in 5.x, which then takes the base
    from rope_theta, absent from its spelling: the class default; partial_rotary_factor null: whole heads (5.x)."""
    return {"partial_rotary_factor": SAME, "rope_theta": from_rope_parameters("rope_theta"),
            "rope_scaling": lambda cfg, spec: SAME if not cfg.get("rope_scaling") else
            dict(rope=dict(kind="default", theta=cfg["rope_theta"])),
            "rope_parameters": lambda cfg, spec: SAME if not cfg.get("rope_parameters") else
            dict(rope=dict(kind="default", theta=theta))}


def plain_ropes(spec: dict, theta: float, partial: float = 1.0) -> dict:
    """hf_families' spec change: one unscaled RoPE on every layer."""
    return dict(ropes=[dict(type="default", theta=theta, dim=int(spec["hd"] * partial))] * spec["L"])


def family_rope_nulls(theta: float, partial: float = 1.0) -> dict:
    """As llama_rope_nulls, for an hf_families spec (a RoPE per layer)."""
    return {"partial_rotary_factor": SAME, "rope_theta": from_rope_parameters("rope_theta"),
            "rope_scaling": lambda cfg, spec: SAME if not cfg.get("rope_scaling") else
            plain_ropes(spec, cfg["rope_theta"], partial),
            "rope_parameters": lambda cfg, spec: SAME if not cfg.get("rope_parameters") else
            plain_ropes(spec, theta, partial)}


def gemma3_layer_types(spec: dict, pattern: int) -> dict:
    """Gemma 3's layers derived from sliding_window_pattern: layer i slides unless (i + 1) % pattern == 0; a sliding
    layer has the window and the local RoPE, a full one neither (the spec's own of each kind)."""
    sliding = [(i + 1) % pattern != 0 for i in range(spec["L"])]
    kinds = list(zip(spec["windows"], spec["ropes"], spec["layer_types"]))
    local = next((w, r) for w, r, kind in kinds if kind == "sliding_attention")
    full = next((w, r) for w, r, kind in kinds if kind == "full_attention")
    return dict(windows=[(local if s else full)[0] for s in sliding],
                ropes=[(local if s else full)[1] for s in sliding])


def gemma3_unscaled_global(spec: dict, theta: float) -> dict:
    """Gemma 3 with its global layers' RoPE plain (no scaling) at base `theta`; the local layers' as they are."""
    return dict(ropes=[dict(type="default", theta=theta, dim=spec["hd"]) if kind == "full_attention" else rope
                       for rope, kind in zip(spec["ropes"], spec["layer_types"])])


GEMMA3_NULLS = {
    "final_logit_softcapping": SAME, "partial_rotary_factor": SAME, "attention_bias": SAME,   # none here already
    "attn_logit_softcapping": SAME, "hidden_act": SAME,       # stored, never applied; Gemma 3 reads hidden_activation
    # layer_types null: derived from sliding_window_pattern (absent: 6), which is read only then
    "layer_types": lambda cfg, spec: gemma3_layer_types(spec, cfg.get("sliding_window_pattern", 6)),
    "sliding_window_pattern": lambda cfg, spec: SAME if cfg.get("layer_types") else REFUSED,
    # 4.x spelling: each base read (a null fails); 5.x: rope_parameters per layer type gives them, the nulls are moot
    "rope_theta": lambda cfg, spec: SAME if cfg.get("rope_parameters") else REFUSED,
    "rope_local_base_freq": lambda cfg, spec: SAME if cfg.get("rope_parameters") else REFUSED,
    "rope_scaling": lambda cfg, spec: SAME if not cfg.get("rope_scaling") else
    gemma3_unscaled_global(spec, cfg.get("rope_theta", 1e6)),
    "rope_parameters": lambda cfg, spec: SAME if not cfg.get("rope_parameters") else gemma3_unscaled_global(spec, 1e6),
    "rope_parameters.full_attention": lambda cfg, spec: gemma3_unscaled_global(spec, 1e6),   # 5.x: its defaults
    "rope_parameters.sliding_attention": SAME,                   # its defaults: plain RoPE at 1e4, the spec's own
}
PHI3_NULLS = {
    "sliding_window": lambda cfg, spec: SAME if cfg.get("sliding_window") is None else
    dict(windows=[None] * spec["L"]),                            # null: no window (both versions)
    "partial_rotary_factor": from_rope_parameters("partial_rotary_factor"), "rope_theta":
    from_rope_parameters("rope_theta"),
    "rope_parameters.original_max_position_embeddings": SAME,    # the top-level field wins over it, in both versions
    # null: no scaling, the top-level base and rotary fraction (5.x: rope_theta absent from its spelling, 10000)
    "rope_scaling": lambda cfg, spec: SAME if not cfg.get("rope_scaling") else
    plain_ropes(spec, cfg["rope_theta"], cfg["partial_rotary_factor"]),
    "rope_parameters": lambda cfg, spec: SAME if not cfg.get("rope_parameters") else
    plain_ropes(spec, 10000.0, cfg["partial_rotary_factor"]),
}
NULLS = {   # family: {dotted path: what a null there builds (a change of the naive forward's spec), SAME or REFUSED,
            # or a function (the object holding the field, the spec) -> one of those}; any other field: REFUSED
    # num_key_value_heads and head_dim null mean num_attention_heads and hidden_size // heads for LLaMA and Mistral
    # (and Qwen, OLMo-2, Phi-3 for the heads), which this checkpoint's k/v and head widths do not fit: refused
    "llama": dict(tie_word_embeddings=SAME, **llama_rope_nulls(10000.0)),
    "mistral": dict(head_dim=SAME, sliding_window=dict(window=None), tie_word_embeddings=SAME,
                    **llama_rope_nulls(10000.0)),
    "qwen2": dict(use_sliding_window=SAME, sliding_window=SAME, max_window_layers=SAME, layer_types=SAME,
                  **llama_rope_nulls(10000.0)),                  # the window is off: none of its fields is used
    "qwen3": dict(attention_bias=SAME, tie_word_embeddings=SAME, use_sliding_window=SAME, sliding_window=SAME,
                  max_window_layers=SAME, layer_types=SAME, **llama_rope_nulls(10000.0)),
    "gpt2": dict(n_inner=SAME, scale_attn_by_inverse_layer_idx=SAME),   # 4 * n_embd; off (4.x), as stored
    "pythia": {"use_parallel_residual": dict(block="sequential"), "tie_word_embeddings": SAME,   # 4.x: None is false
               "rope_scaling": SAME, "rope_parameters": SAME,    # 5.x: from rotary_pct / rotary_emb_base, or their
               "rope_theta": SAME, "partial_rotary_factor": SAME,   # defaults (this checkpoint's); echoes: unread
               "rotary_pct": from_rope_parameters("partial_rotary_factor"),
               "rotary_emb_base": from_rope_parameters("rope_theta")},
    "olmo2": dict(attention_bias=SAME, tie_word_embeddings=SAME, **family_rope_nulls(10000.0)),
    "gemma": dict(attention_bias=SAME, hidden_activation=SAME, **family_rope_nulls(10000.0)),   # Gemma 1: hidden_act
    "gemma2": dict(attn_logit_softcapping=dict(attn_softcap=None), final_logit_softcapping=dict(final_softcap=None),
                   layer_types=SAME, attention_bias=SAME, hidden_act=SAME, **family_rope_nulls(10000.0)),
    "gemma3": GEMMA3_NULLS,
    "gemma3-multimodal": {f"text_config.{path}": means for path, means in GEMMA3_NULLS.items()},
    "phi3": dict(PHI3_NULLS, num_key_value_heads=SAME, original_max_position_embeddings=SAME,   # heads: 4; no
                 tie_word_embeddings=SAME),                                                     # LongRoPE; untied
    "phi4-longrope": PHI3_NULLS,
    # mixtures of experts (nulls checked against 4.57.6 and 5.24.0): a null count, k, width or sparse step fails in
    # both; a null norm_topk_prob is false (4.x's `if`), a null mlp_only_layers no layer, a null clip_qkv no clamp;
    # the router's training fields change no eval forward
    "mixtral": dict(head_dim=SAME, sliding_window=SAME, tie_word_embeddings=SAME, output_router_logits=SAME,
                    router_aux_loss_coef=SAME, router_jitter_noise=SAME, **family_rope_nulls(1e6)),
    "qwen2-moe": dict(use_sliding_window=SAME, sliding_window=SAME, max_window_layers=SAME, layer_types=SAME,
                      tie_word_embeddings=SAME, norm_topk_prob=SAME, mlp_only_layers=SAME, output_router_logits=SAME,
                      router_aux_loss_coef=SAME, **family_rope_nulls(10000.0)),
    "olmoe": dict(head_dim=SAME, attention_bias=SAME, clip_qkv=SAME, tie_word_embeddings=SAME, norm_topk_prob=SAME,
                  output_router_logits=SAME, router_aux_loss_coef=SAME, **family_rope_nulls(10000.0)),
    "qwen3-moe": dict(attention_bias=SAME, tie_word_embeddings=SAME, use_sliding_window=SAME, sliding_window=SAME,
                      norm_topk_prob=SAME, mlp_only_layers=SAME, output_router_logits=SAME, router_aux_loss_coef=SAME,
                      **family_rope_nulls(10000.0)),
}


def null_means(name: str, path: str, ck: Checkpoint):
    """What transformers builds from a null at `path` of family `name`'s checkpoint: a spec change, SAME or
    REFUSED."""
    if path.removeprefix("text_config.").split(".")[0] in INERT_FIELDS:
        return SAME
    means = NULLS[name].get(path, REFUSED)
    if callable(means):
        holder = ck.cfg["text_config"] if path.startswith("text_config.") else ck.cfg
        means = means(holder, ck.spec)
    return means


@pytest.mark.parametrize("spelling", ["4.x", "5.x"])
@pytest.mark.parametrize("name", list(CLASS_FAMILIES))
def test_a_null_in_any_field_is_refused_by_name_or_read_as_transformers_reads_it(tmp_path, name, spelling):
    """Every field of the file, and every field the family's class reads, set to null one at a time: refused by one
    error naming the field, or the logits of the model transformers builds from it (within 1e-5)."""
    ck = Checkpoint(name, spelling, tmp_path)
    paths = dict.fromkeys([*field_paths(ck.cfg), *READS.get(name, ())])
    failures = []
    for path in paths:
        means = null_means(name, path, ck)
        model, refusal = ck.load(edited(ck.cfg, path, None))
        if means == REFUSED and refusal is None:
            failures.append(f"{path}: loaded, but transformers builds no one model from its null")
        elif means == REFUSED and not names_the_field(refusal, path):
            failures.append(f"{path}: refused without naming it: {refusal}")
        elif means != REFUSED and refusal is not None:
            failures.append(f"{path}: refused ({refusal}), but transformers reads its null as {means or 'absent'}")
        elif means != REFUSED and ck.mismatch(model, means) > 1e-5:
            failures.append(f"{path}: loaded another model than transformers builds from its null ({means})")
    assert not failures, "\n".join(failures)


# ----- a field the family's class does not read

def layer_list(cfg: dict, *kinds: str) -> list:
    """A layer_types value for this checkpoint: `kinds` repeated over its layers."""
    n = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    return [kinds[i % len(kinds)] for i in range(n)]


ALTERNATING = ("sliding_attention", "full_attention")
UNREAD = {   # family: fields its transformers class never reads (4.57 and 5.x), at values that would change the
             # forward if obeyed: refused by name, or ignored as transformers ignores them (the unedited model)
    "llama": [("sliding_window", 4), ("layer_types", ALTERNATING), ("use_sliding_window", True),
              ("max_window_layers", 1), ("sliding_window_pattern", 2), ("final_logit_softcapping", 3.0),
              ("attn_logit_softcapping", 2.0), ("query_pre_attn_scalar", 20), ("rope_local_base_freq", 2e4),
              ("use_parallel_residual", True), ("hidden_activation", "gelu")],
    "mistral": [("use_sliding_window", False), ("max_window_layers", 1), ("attention_bias", True),
                ("mlp_bias", True), ("final_logit_softcapping", 3.0)],
    "qwen2": [("attention_bias", True), ("mlp_bias", True), ("sliding_window_pattern", 2),
              ("attn_logit_softcapping", 2.0)],
    "qwen3": [("mlp_bias", True), ("query_pre_attn_scalar", 20)],
    "gpt2": [("sliding_window", 4), ("layer_types", ALTERNATING), ("use_parallel_residual", True),
             ("rope_theta", 5e5), ("rotary_pct", 0.5), ("hidden_act", "relu")],
    "pythia": [("rms_norm_eps", 0.5), ("sliding_window", 4), ("mlp_bias", False), ("final_logit_softcapping", 3.0),
               ("head_dim", 8)],
    "olmo2": [("mlp_bias", True), ("sliding_window", 4), ("layer_types", ALTERNATING), ("query_pre_attn_scalar", 20)],
    "gemma": [("hidden_activation", "gelu"), ("mlp_bias", True), ("sliding_window", 4),
              ("final_logit_softcapping", 3.0), ("attn_logit_softcapping", 2.0), ("query_pre_attn_scalar", 20)],
    "gemma2": [("hidden_act", "gelu"), ("sliding_window_pattern", 3), ("rope_local_base_freq", 2e4),
               ("mlp_bias", True), ("use_sliding_window", False)],
    "gemma3": [("hidden_act", "gelu"), ("attn_logit_softcapping", 1.0), ("mlp_bias", True),
               ("use_sliding_window", False), ("max_window_layers", 1)],
    "gemma3-multimodal": [("text_config.hidden_act", "gelu"), ("text_config.attn_logit_softcapping", 1.0),
                          ("text_config.mlp_bias", True), ("sliding_window", 4), ("final_logit_softcapping", 3.0)],
    "phi3": [("layer_types", ("full_attention",)), ("attention_bias", True), ("mlp_bias", True),
             ("use_sliding_window", False), ("final_logit_softcapping", 3.0)],
    "phi4-longrope": [("layer_types", ALTERNATING), ("rope_local_base_freq", 2e4)],
    # a router field of another family: Mixtral always renormalizes, has no shared expert, no dense layers, no
    # q/k/v biases; Qwen2-MoE no clamp; OLMoE no shared expert, experts intermediate_size wide, no window
    "mixtral": [("norm_topk_prob", False), ("moe_intermediate_size", 16), ("shared_expert_intermediate_size", 16),
                ("decoder_sparse_step", 2), ("mlp_only_layers", [0]), ("qkv_bias", True), ("clip_qkv", 1.0)],
    "qwen2-moe": [("num_local_experts", 3), ("attention_bias", True), ("clip_qkv", 1.0)],
    "olmoe": [("shared_expert_intermediate_size", 16), ("moe_intermediate_size", 16), ("decoder_sparse_step", 2),
              ("mlp_only_layers", [0]), ("qkv_bias", True), ("sliding_window", 4)],
    "qwen3-moe": [("shared_expert_intermediate_size", 16), ("qkv_bias", True), ("clip_qkv", 1.0),
                  ("layer_types", ALTERNATING)],
}
AGREEING = {   # unread fields at the value that says what the class builds anyway: must load, the unedited model
    "llama": [("layer_types", ("full_attention",)), ("use_sliding_window", False), ("sliding_window", None)],
    "mistral": [("layer_types", ("sliding_attention",))],        # the window on every layer, as Mistral has it
    "qwen2": [("attention_bias", False)],
    "pythia": [("rope_theta", 10000.0), ("partial_rotary_factor", 0.25)],   # 4.x's echoes, agreeing
    "gemma2": [("sliding_window_pattern", 2), ("use_sliding_window", True)],
    "phi3": [("layer_types", ("sliding_attention",))],
    "mixtral": [("norm_topk_prob", True), ("num_experts", 4), ("mlp_only_layers", [])],   # 4 experts, renormalized
    "qwen2-moe": [("num_local_experts", 4)],
    "olmoe": [("num_local_experts", 4), ("moe_intermediate_size", 40)],   # its experts are intermediate_size wide
    "qwen3-moe": [("num_local_experts", 4), ("max_window_layers", 1)],    # no window: max_window_layers moot
}
NO_ONE_MODEL = {   # (spelling, field, value) that transformers 4.x and 5.x (or AutoModel and the class) read as two
                   # models, or both fail on: refused by name
    "llama": [("4.x", "original_max_position_embeddings", 16),   # 5.x: llama3's original context; 4.x: unread
              ("5.x", "rope_theta", 1234.0)],                    # 4.x: this base; 5.x: rope_parameters'
    "mistral": [("5.x", "layer_types", ALTERNATING)],            # AutoModel reads it as a MinistralForCausalLM
    "qwen2": [("5.x", "layer_types", ALTERNATING)],              # sliding layers, the window off: both fail
    "pythia": [("5.x", "rotary_pct", 0.5)],                      # 4.x: this; 5.x: rope_parameters' 0.25
    "gemma3": [("5.x", "rope_local_base_freq", 2e4)],            # 4.x: this; 5.x: rope_parameters' own
    "phi3": [("5.x", "partial_rotary_factor", 0.5)],             # 4.x: this; 5.x: rope_parameters' 1.0
    "mixtral": [("5.x", "num_experts", 3)],                      # 5.x: num_local_experts' alias; 4.x: unread
    "olmoe": [("5.x", "num_local_experts", 3)],                  # 5.x: num_experts' alias; 4.x: unread
    "qwen3-moe": [("5.x", "num_local_experts", 3)],              # as OLMoE
}


def with_value(cfg: dict, path: str, value) -> dict:
    """`cfg` with the field at `path` set to `value` (a tuple of layer kinds: repeated over the layers)."""
    holder = cfg["text_config"] if path.startswith("text_config.") else cfg
    return edited(cfg, path, layer_list(holder, *value) if isinstance(value, tuple) else value)


@pytest.mark.parametrize("name", list(CLASS_FAMILIES))
def test_a_field_the_class_does_not_read_is_refused_by_name_or_ignored_as_there(tmp_path, name):
    ck = Checkpoint(name, "5.x", tmp_path)
    failures = []
    for path, value in UNREAD.get(name, []):
        model, refusal = ck.load(with_value(ck.cfg, path, value))
        if refusal is not None and not names_the_field(refusal, path):
            failures.append(f"{path}={value}: refused without naming it: {refusal}")
        elif refusal is None and ck.mismatch(model) > 1e-5:
            failures.append(f"{path}={value}: obeyed, though transformers' class does not read it")
    for path, value in AGREEING.get(name, []):
        model, refusal = ck.load(with_value(ck.cfg, path, value))
        if refusal is not None or ck.mismatch(model) > 1e-5:
            failures.append(f"{path}={value}: says what the class builds anyway, yet {refusal or 'another model'}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", list(NO_ONE_MODEL))
def test_a_field_transformers_reads_as_two_models_or_none_is_refused_by_name(tmp_path, name):
    for spelling, path, value in NO_ONE_MODEL[name]:
        ck = Checkpoint(name, spelling, tmp_path / spelling)
        model, refusal = ck.load(with_value(ck.cfg, path, value))
        assert refusal is not None and names_the_field(refusal, path), (path, refusal)


# ----- a tied LM head stored apart from the embedding

HEADS = {"gpt2": ("transformer.wte.weight", "lm_head.weight"),
         "pythia": ("gpt_neox.embed_in.weight", "embed_out.weight"),
         "gemma3-multimodal": ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight")}


@pytest.mark.parametrize("name", list(CLASS_FAMILIES))
def test_a_tied_head_stored_apart_loads_only_as_the_embedding_itself(tmp_path, monkeypatch, name):
    """tie_word_embeddings true and the LM head stored too: transformers 4.x uses the embedding as the head, 5.x a
    stored head that differs. A head equal to the embedding is one model (it loads as the tied one); a head that
    differs is two: refused, naming both tensors, by load's one pass over the weights and by check_weights_finite;
    the checks that read no weight (hf.read) read no value."""
    ck = Checkpoint(name, "5.x", tmp_path)
    embedding, head = HEADS.get(name, ("model.embed_tokens.weight", "lm_head.weight"))
    cfg = dict(ck.cfg, tie_word_embeddings=True)
    if "text_config" in cfg:
        cfg["text_config"] = dict(cfg["text_config"], tie_word_embeddings=True)
    other = torch.randn(ck.t[embedding].shape, generator=torch.Generator().manual_seed(5)) * 0.2
    model, refusal = ck.load(cfg, dict(ck.t, **{head: other}))
    assert refusal is not None and embedding in refusal and head in refusal, refusal
    path = str(ck.root / f"edit{ck.edits}")
    with monkeypatch.context() as m:
        m.setattr(hf, "read_bytes", lambda *a: pytest.fail("hf.read read a weight"))
        hf.read_config(path)
    with pytest.raises(ValueError, match="tie_word_embeddings is true") as refused:
        hf.check_weights_finite(path)
    assert embedding in str(refused.value) and head in str(refused.value)
    nan = ck.t[embedding].clone()          # one table stored twice, NaN in both: the NaN is named, not a difference
    nan[1, 2] = float("nan")
    model, refusal = ck.load(cfg, dict(ck.t, **{embedding: nan, head: nan.clone()}))
    assert refusal is not None and "NaN" in refusal and "tie_word_embeddings" not in refusal, refusal
    same = dict(ck.t, **{head: ck.t[embedding].clone()})
    model, refusal = ck.load(cfg, same)
    assert refusal is None and ck.mismatch(model, dict(tie=True), same) <= 1e-5, refusal


def test_gemma3_multimodal_ties_by_one_field_both_versions_read_alike(tmp_path):
    """4.x ties Gemma 3's head by text_config.tie_word_embeddings, 5.x by the top level's: differing (a null is
    false, an absent one true), they are refused by name."""
    ck = Checkpoint("gemma3-multimodal", "5.x", tmp_path)
    for top, text in ((False, True), (None, True), (True, None)):
        cfg = dict(ck.cfg, tie_word_embeddings=top, text_config=dict(ck.cfg["text_config"], tie_word_embeddings=text))
        model, refusal = ck.load(cfg)
        assert refusal is not None and "text_config.tie_word_embeddings" in refusal, (top, text, refusal)


# ----- a config that contradicts its own architecture

@pytest.mark.parametrize("name", list(CLASS_FAMILIES))
def test_a_model_type_of_another_family_is_refused(tmp_path, name):
    """transformers' AutoModelForCausalLM builds the class of the model_type, the named class's from_pretrained its
    own: a model_type naming another family (or none, a null) is two models, refused by name; absent, the class."""
    ck = Checkpoint(name, "5.x", tmp_path)
    cfg = {k: v for k, v in ck.cfg.items() if k != "model_type"}
    assert hf.config_from_json(cfg) == hf.config_from_json(ck.cfg)
    for other in ("llama", "mistral", "ministral", "qwen2", "qwen3", "olmo2", "gemma", "gemma2", "gemma3",
                  "gemma3_text", "phi3", "gpt2", "gpt_neox", "mixtral", "qwen2_moe", "olmoe", "qwen3_moe", None):
        if other != ck.cfg["model_type"]:
            with pytest.raises(ValueError, match="model_type"):
                hf.config_from_json(dict(cfg, model_type=other))
    with pytest.raises(ValueError, match="architectures names several classes"):
        hf.config_from_json(dict(ck.cfg, architectures=[*ck.cfg["architectures"], "LlamaForCausalLM"]
                                 if name != "llama" else ["LlamaForCausalLM", "MistralForCausalLM"]))
    if "text_config" in cfg:
        with pytest.raises(ValueError, match="text_config.model_type"):
            hf.config_from_json(dict(cfg, text_config=dict(cfg["text_config"], model_type="gemma2")))


# ----- the table of transformers' two spellings

SPELLING_ROWS = {   # a row of hf.SPELLINGS: the families above that read it
    "LLaMA lineage": ["llama", "mistral", "qwen2", "qwen3", "olmo2", "gemma", "gemma2", "qwen2-moe", "olmoe",
                      "qwen3-moe"],
    "MixtralForCausalLM": ["mixtral"],
    "Phi3ForCausalLM": ["phi3", "phi4-longrope"], "GPTNeoXForCausalLM": ["pythia"], "Gemma3ForCausalLM": ["gemma3"],
    "Gemma3ForConditionalGeneration": ["gemma3-multimodal"]}


def spelled_config(name: str) -> dict:
    """The 5.x config.json of CLASS_FAMILIES[name]'s checkpoint, no RoPE field of either spelling left in it."""
    kind, case = CLASS_FAMILIES[name]
    cfg = llama_family(spelling="5.x", **case)[1] if kind == "llama_family" else hf_families.checkpoint(case, "5.x")[1]
    rope = {v4 for row in hf.SPELLINGS.values() for v4 in row} | {"rope_parameters"}
    return {k: v for k, v in cfg.items() if k not in rope}


def in_rope_parameters(cfg: dict, path: str, value) -> dict:
    """`cfg` with rope_parameters holding `value` at the dotted `path` ("": rope_parameters itself)."""
    if not path:
        return dict(cfg, rope_parameters=value)
    *parents, leaf = path.split(".")
    params = json.loads(json.dumps(cfg.get("rope_parameters") or {}))
    holder = params
    for key in parents:
        holder = holder.setdefault(key, {})
    holder[leaf] = value
    return dict(cfg, rope_parameters=params)


def read_as(cfg: dict) -> str:
    """What the loader makes of a config.json: its GPTConfig, or its refusal."""
    try:
        return repr(hf.config_from_json(cfg))
    except ValueError as e:
        return f"refused: {e}"


@pytest.mark.parametrize("row", list(SPELLING_ROWS))
def test_each_field_of_the_spellings_table_is_read_by_its_families_as_the_other_spelling(row):
    """hf.SPELLINGS names, per family, each 4.x field and where 5.x reads the same value: given in either spelling,
    a value is the same model (or the same refusal), another than the class default's; given both ways and different,
    the file is refused, naming the 4.x field and rope_parameters; an echo, which neither version reads, must agree
    with the value read. Independent of hf.py's readers: each side is a config.json written here."""
    assert set(hf.SPELLINGS) == set(SPELLING_ROWS)
    two_values = {"rope_theta": (12345.0, 23456.0), "partial_rotary_factor": (0.5, 1.0),
                  "": ({"rope_type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 4.0}),
                  "full_attention": ({"rope_type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 4.0})}
    for name in SPELLING_ROWS[row]:
        base = spelled_config(name)
        if row == "Gemma3ForConditionalGeneration":      # the LM head's tie: 4.x reads text_config's, 5.x the top's
            (v4, (v5, _)), = hf.SPELLINGS[row].items()
            inner = v4.removeprefix("text_config.")
            for top, text, tied in ((False, False, False), (True, True, True), (False, None, None),
                                    (None, False, None)):      # None: the field absent; tied None: refused
                cfg = dict(base, text_config={k: v for k, v in base["text_config"].items() if k != inner})
                cfg.update({v5: top} if top is not None else {})
                cfg["text_config"].update({inner: text} if text is not None else {})
                got = read_as(cfg)
                if tied is None:        # the two spellings say two models: refused, naming both
                    assert got.startswith("refused") and v4 in got and f"fields {v5}" in got, (top, text, got)
                else:
                    assert f"tie_embeddings={tied}" in got, (top, text, got)
            continue
        assert set(hf.SPELLINGS[row]) <= set(hf.FIELDS[base["architectures"][0]]), name   # fields the family reads
        for v4, (v5, field) in hf.SPELLINGS[row].items():
            x, y = two_values[v5.split(".")[-1]]
            if field is hf.ECHO:
                read = next(k for k, (key, f) in hf.SPELLINGS[row].items() if key == v5 and f is not hf.ECHO)
                assert read_as(dict(base, **{read: x, v4: x})) == read_as(dict(base, **{read: x})), (name, v4)
                refusal = read_as(dict(base, **{read: x, v4: y}))
                assert refusal.startswith("refused") and v4 in refusal, (name, v4, refusal)
                continue
            four, five = dict(base, **{v4: x}), in_rope_parameters(base, v5, x)
            assert read_as(four) == read_as(five) != read_as(base), (name, v4, v5)
            refusal = read_as(in_rope_parameters(four, v5, y))
            assert refusal.startswith("refused") and v4 in refusal and "rope_parameters" in refusal, \
                (name, v4, refusal)


def test_load_cost_counts_the_shards_the_index_names_only(tmp_path):
    """studies.load_cost sets the peak memory against the files the loader reads: a stray shard is not counted."""
    from studies.load_cost import weight_files
    spec, cfg, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path, cfg, t, shards=2)
    (tmp_path / "stray.safetensors").write_bytes(b"\0" * 64)
    with open(tmp_path / "model.safetensors.index.json") as fh:
        named = {os.path.join(tmp_path, f) for f in json.load(fh)["weight_map"].values()}
    assert sorted(weight_files(hf.read(str(tmp_path)))) == sorted(named)
