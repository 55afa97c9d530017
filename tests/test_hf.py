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
    ("phi3-mini-4k-like", dict(rope_scaling={"type": "yarn", "factor": 4.0}), "RoPE type 'yarn'"),
    ("phi3-mini-4k-like", dict(attention_bias=True), "attention_bias=true"),
    ("olmo2", dict(partial_rotary_factor=0.5), "RoPE on part of each head is not supported"),
    ("gemma3-1b-like", dict(layer_types=["full_attention"]), "layer_types must name each of the 7 layers"),
])
def test_family_fields_that_cannot_be_honoured_are_refused(tmp_path, case, change, match):
    spec, cfg, t = hf_families.checkpoint(case, "4.x")
    hf_families.write_checkpoint(tmp_path, dict(cfg, **change), t)
    with pytest.raises(ValueError, match=match):
        hf.read_config(str(tmp_path))


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
