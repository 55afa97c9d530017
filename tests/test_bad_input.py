"""Bad input, across every script, every study and the loaders: each case is refused with exit code 2 and one stderr
line that names the culprit, and nothing is written anywhere (the fixtures' files are unchanged and no
output directory appears). Then the process-boundary cases (a second run into a locked directory, a run
killed while it writes checkpoints) and a field-by-field mutation of a valid Hugging Face config.json."""
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import data
import train
from conftest import assert_matches, cli_error, forge_fingerprint, llama_family, naive_llama_family, write_hf
from init import build
import hf
from model import get_config, load_checkpoint, read_checkpoint, write_checkpoint
from studies import HELPERS

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--n_layer", "2", "--n_embd", "32", "--n_head", "2", "--block_size", "64"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny valid world (prepared data, a checkpoint, a Hugging Face directory) and damaged copies of it."""
    root = tmp_path_factory.mktemp("inputs")
    f = {"root": root}
    (root / "text.txt").write_text("the cat sat on the mat. " * 300)
    f["text"] = root / "text.txt"
    f["data"] = root / "data"
    data.prepare([str(f["text"])], str(f["data"]), tokenizer="bytes")
    run = root / "run"
    train.train(train.parse_args(["--data", str(f["data"]), "--out_dir", str(run), *TINY, "--max_steps", "1",
                                  "--eval_every", "0", "--log_every", "0", "--device", "cpu"]))
    f["ckpt"] = Path(train.checkpoint_path(str(run), 1))
    state = read_checkpoint(str(f["ckpt"]))
    state["model"]["transformer.h.1.mlp.c_fc.weight"][0, 0] = float("nan")
    f["nan_ckpt"] = root / "nan.pt"
    torch.save(state, f["nan_ckpt"])
    state = read_checkpoint(str(f["ckpt"]))
    state["config"]["n_layer"] = "2"
    f["typo_ckpt"] = root / "typo.pt"
    torch.save(state, f["typo_ckpt"])
    raw = f["ckpt"].read_bytes()
    (root / "empty.pt").write_bytes(b"")
    (root / "cut.pt").write_bytes(raw[:len(raw) // 2])
    (root / "foreign.pt").write_text("just some text, not a checkpoint\n")
    f.update(empty_pt=root / "empty.pt", cut_pt=root / "cut.pt", foreign_pt=root / "foreign.pt")

    spec, cfg, t = llama_family("LlamaForCausalLM")
    cfg_hf = cfg
    f["hf"] = root / "hf"
    write_hf(f["hf"], cfg, t, shards=1)
    weights = (f["hf"] / "model-00001-of-00001.safetensors").read_bytes()
    for name, mutate in {"hf_cut": lambda d: (d / "model-00001-of-00001.safetensors").write_bytes(weights[:-100]),
                         "hf_empty": lambda d: (d / "model-00001-of-00001.safetensors").write_bytes(b""),
                         "hf_foreign": lambda d: (d / "model-00001-of-00001.safetensors").write_bytes(b"\x89PNG" * 64),
                         "hf_list": lambda d: (d / "config.json").write_text("[1, 2, 3]"),
                         "hf_badjson": lambda d: (d / "config.json").write_text("{\"hidden_size\": 32,"),
                         "hf_types": lambda d: (d / "config.json").write_text(
                             json.dumps(dict(cfg, num_hidden_layers="2"))),
                         "hf_nan": None, "hf_moe": None}.items():
        d = root / name
        write_hf(d, cfg, t, shards=1)
        if mutate:
            mutate(d)
    nan_t = dict(t)
    nan_t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"].clone()
    nan_t["model.layers.0.mlp.up_proj.weight"][3, 3] = float("inf")
    write_hf(root / "hf_nan", cfg, nan_t, shards=1)
    (root / "hf_moe" / "config.json").write_text(json.dumps(dict(cfg, architectures=["PhimoeForCausalLM"])))
    f.update({k: root / k for k in ("hf_cut", "hf_empty", "hf_foreign", "hf_list", "hf_badjson", "hf_types",
                                     "hf_nan", "hf_moe")})

    (root / "ids.npy").write_bytes(b"not an npy file at all")
    (root / "odd.bin").write_bytes(b"\x01\x02\x03")
    (root / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1") * 20)
    f.update(bad_npy=root / "ids.npy", odd_bin=root / "odd.bin", latin1=root / "latin1.txt")
    f["broken_meta"] = root / "broken_meta"
    f["broken_meta"].mkdir()
    (f["broken_meta"] / "meta.json").write_text(json.dumps({"tokenizer": "bytes", "vocab_size": "256"}))
    f["a_dir"] = root / "a_dir"
    f["a_dir"].mkdir()
    for name, knobs in (("mlp_only", dict(sublayers="mlp")), ("wide", dict(n_embd=64))):
        cfg = get_config("tiny", **{**dict(n_layer=2, n_embd=32, n_head=2, block_size=64, vocab_size=256), **knobs})
        write_checkpoint(str(root / f"{name}.pt"), build(cfg, 0))
        f[name] = root / f"{name}.pt"
    import evidence
    import seedprint
    f["reg"], f["reg_empty"] = root / "reg", root / "reg_empty"
    f["reg_empty"].mkdir()
    f["fp"], f["fp_other"] = f["reg"] / "base.npz", root / "other.npz"
    evidence.write(str(f["fp"]), seedprint.make_fingerprint(str(f["ckpt"]), sequences=20, seq_len=8))
    evidence.write(str(f["fp_other"]), seedprint.make_fingerprint(str(f["ckpt"]), sequences=20, seq_len=4))
    f["fp_nan"] = root / "fp_nan.npz"        # whole (its sha256 computed again), but NaN: refused, never "unrelated"
    forge_fingerprint(f["fp"], f["fp_nan"], edit_arrays=lambda a: a["exact"].fill(np.nan))
    np.savez(root / "foreign.npz", H=np.zeros(3))
    f["foreign_npz"] = root / "foreign.npz"
    f["reg_foreign"] = root / "reg_foreign"
    f["reg_foreign"].mkdir()
    shutil.copy(f["foreign_npz"], f["reg_foreign"] / "x.npz")
    f["big_ids"] = root / "big_ids"
    shutil.copytree(f["data"], f["big_ids"])
    np.full(json.loads((f["data"] / "meta.json").read_text())["train_tokens"], 300, np.uint16).tofile(
        f["big_ids"] / "train.bin")                                        # the right size, ids beyond the vocab
    f["resume_bad"] = root / "resume_bad"
    shutil.copytree(run, f["resume_bad"])
    state = read_checkpoint(str(f["ckpt"]))
    del state["optimizer"]
    torch.save(state, f["resume_bad"] / f["ckpt"].name)
    np.save(root / "short.npy", np.arange(20))
    f["short_npy"] = root / "short.npy"
    f["hf_huge"] = root / "hf_huge"                   # finite weights whose squares overflow float32 in RMSNorm
    write_hf(f["hf_huge"], cfg_hf, {k: v * 1e30 if v.dim() == 2 else v for k, v in t.items()}, shards=1)
    f["resume_empty"] = root / "resume_empty"
    f["resume_empty"].mkdir()
    return f


def snapshot(root: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
CASES = [
    # script, argv ({name} = a fixture path, OUT = a fresh output directory), what the line must name
    ("studies.load_cost", ["{missing}"], "no model at"),
    ("studies.load_cost", ["{empty_pt}"], "empty.pt is not a readable train.py checkpoint"),
    ("studies.load_cost", ["{cut_pt}"], "cut.pt is not a readable train.py checkpoint"),
    ("studies.load_cost", ["{foreign_pt}"], "foreign.pt is not a readable train.py checkpoint"),
    ("studies.load_cost", ["{typo_ckpt}"], "n_layer must be an integer"),
    ("studies.load_cost", ["{nan_ckpt}"], "transformer.h.1.mlp.c_fc.weight holds 1 NaN/inf"),
    ("studies.load_cost", ["{hf_cut}"], "model-00001-of-00001.safetensors is not a valid .safetensors file"),
    ("studies.load_cost", ["{hf_empty}"], "shorter than its 8-byte header"),
    ("studies.load_cost", ["{hf_foreign}"], "model-00001-of-00001.safetensors is not a valid .safetensors file"),
    ("studies.load_cost", ["{hf_list}"], "config.json: must hold a JSON object"),
    ("studies.load_cost", ["{hf_badjson}"], "config.json is not valid config.json"),
    ("studies.load_cost", ["{hf_types}"], "num_hidden_layers must be an integer >= 1, got '2'"),
    ("studies.load_cost", ["{hf_nan}"], "mlp.up_proj.weight holds 1 NaN/inf"),
    ("studies.load_cost", ["{hf}", "--dtype", "float64"], "invalid choice: 'float64'"),
    ("hf", ["{missing}"], "no model at"),
    ("hf", ["{hf}", "{hf_cut}"], "model-00001-of-00001.safetensors is not a valid .safetensors file"),
    ("hf", ["{hf_list}"], "config.json: must hold a JSON object"),
    ("hf", ["{hf_types}"], "num_hidden_layers must be an integer >= 1, got '2'"),
    ("init", ["--model", "nope"], "unknown preset 'nope'"),
    ("init", ["--model", "tiny", "--n_layer", "0"], "n_layer must be an integer >= 1"),
    ("init", ["--model", "tiny", "--norm_eps=-1e-5"], "norm_eps must be a finite number > 0"),
    ("init", ["--model", "tiny", "--n_head", "5"], "not divisible by n_head=5"),
    ("init", ["--model", "tiny", "--n_layer", "two"], "invalid int value: 'two'"),
    ("init", ["--model", "tiny", "--rope_factor", "nan"], "rope_factor must be a finite number > 0"),
    ("init", ["--model", "tiny", "--vocab_size", "4611686018427387904"], "more than 2^40 numbers"),
    ("init", ["--model", "tiny", "--out", "{text}"], "is a file, not a directory"),
    ("studies.load_cost", ["{ckpt}", "--out", ""], "--out is empty"),
    ("studies.theory_tables", ["--width", "8"], "--width: must be an integer in [64, 4096], got 8"),
    ("studies.theory_tables", ["--width", "1000000000"], "--width: must be an integer in [64, 4096]"),
    ("studies.theory_tables", ["--width", "wide"], "--width: must be an integer in [64, 4096], got 'wide'"),
    ("studies.theory_tables", ["--seed", "-1"], "must be an integer in [0, 2^63)"),
    ("probe", ["--model", "tiny", "--rope_theta", "0"], "rope_theta must be a finite number > 0"),
    ("probe", ["--model", "tiny", "--seq_len", "4096"], "--seq_len 4096 is outside [1, the model's block_size 256]"),
    ("probe", ["--model", "tiny", "--sequences", "1"], "--sequences: must be an integer >= 2, got 1"),
    ("probe", ["--model", "tiny", "--batch_size", "0"], "--batch_size: must be an integer >= 1, got 0"),
    ("probe", ["--model", "tiny", "--n_kv_head", "3"], "not a multiple of n_kv_head=3"),
    ("probe", ["--model", "tiny", "--sliding_window", "0"], "sliding_window must be an integer >= 1"),
    ("probe", ["--model", "tiny", "--device", "gpu"], "unknown device 'gpu'"),
    pytest.param("probe", ["--model", "tiny", "--device", "cuda"], "no CUDA device", marks=NO_CUDA),
    ("studies.seed_preference", ["--model", "tiny", "--models", "0"], "--models: must be an integer >= 1, got 0"),
    ("studies.seed_preference", ["--model", "tiny", "--seeds", "9223372036854775800", "--models", "20"],
     "pass the largest seed"),
    ("studies.attention_averaging", ["--model", "tiny", "--exp", "variance", "--sublayers", "mlp"],
     "needs attention layers"),
    ("studies.attention_averaging", ["--model", "tiny", "--attn_sink", "on"], "--exp intra builds a model"),
    ("studies.contraction_origin", ["--model", "tiny", "--exp", "table3", "--seq_len", "1"], "compares two positions"),
    ("studies.contraction_origin", ["--model", "tiny", "--seq_len", "300"], "--seq_len 300 is outside [1, the model"),
    ("probe", ["--model", "tiny", "--device", "cpu:1"], "unsupported device 'cpu:1'"),
    ("probe", ["--model", "tiny", "--data_seed", "99999999999999999999999"], "must be an integer in [0, 2^63)"),
    ("studies.contraction_origin", ["--model", "{hf}"], "builds fresh inits from seeds"),
    ("studies.seed_preference", ["--model", "{ckpt}", "--exp", "direction"], "builds fresh inits from seeds"),
    ("probe", ["--model", "tiny", "--exp", "table1", "ablation"], "ablation"),     # a study's now
    ("probe", ["--model", "{hf}", "--n_layer", "2"], "drop the knob flags (--n_layer)"),
    ("probe", ["--model", "nope"], "no preset"),
    ("probe", ["--model", "{hf_moe}"], "unsupported architecture 'PhimoeForCausalLM'"),
    ("seedprint", ["{ckpt}", "{ckpt}", "--k", "0"], "--k: must be an integer >= 2, got 0"),
    ("seedprint", ["{ckpt}"], "give two or more models (base first), or one model with --save FILE or --against"),
    ("seedprint", ["{missing}", "{ckpt}"], "no model at"),
    ("seedprint", ["{hf_moe}", "{hf}"], "unsupported architecture 'PhimoeForCausalLM'"),
    ("seedprint", ["{hf}", "{hf_cut}"], "not a valid .safetensors file"),
    ("seedprint", ["{ckpt}", "{nan_ckpt}"], "NaN/inf"),
    ("seedprint", ["{ckpt}", "{ckpt}", "--seq_len", "999"], "--seq_len 999 exceeds the context"),
    ("seedprint", ["{ckpt}", "{ckpt}", "--device", "tpu"], "unknown device 'tpu'"),
    ("studies.lineage_fpr", ["--fpr_trained", "99"], "--fpr_trained"),
    ("seedprint", ["{ckpt}", "{wide}", "--k", "20"], "--k 20 is more than the narrowest width 32 allows"),
    # fingerprint files and the registry
    ("seedprint", ["{fp}", "{fp_other}"], "were made with other options (seq_len 8 vs 4)"),
    ("seedprint", ["{fp}", "{ckpt}", "--sequences", "30"], "other options than asked for (sequences 30 vs"),
    ("seedprint", ["{foreign_npz}", "{ckpt}"], "is not a SeedPrint fingerprint file"),
    ("seedprint", ["{fp_nan}", "{ckpt}"], "fp_nan.npz holds NaN or inf in its exact array: make it again"),
    ("seedprint", ["{bad_npy}.npz", "{ckpt}"], "no fingerprint file at"),
    ("seedprint", ["{ckpt}", "--against", "{reg_empty}"], "holds no fingerprint file"),
    ("seedprint", ["{ckpt}", "--against", "{reg_foreign}"], "x.npz is not a SeedPrint fingerprint file"),
    ("seedprint", ["{ckpt}", "--against", "{text}"], "a file folder"),
    ("seedprint", ["{ckpt}", "{ckpt}", "--against", "{reg}"], "or one model with --save FILE or --against DIR"),
    ("seedprint", ["{ckpt}", "--save", "{root}/x.pt"], "--save FILE.npz writes the fingerprint file of a model"),
    ("seedprint", ["{fp}", "--save", "{root}/x.npz"], "--save FILE.npz writes the fingerprint file of a model"),
    ("seedprint", ["{ckpt}", "--save", "{root}/x.npz", "--against", "{reg}"], "or one model with --save FILE or"),
    ("seedprint", ["{ckpt}", "--save", "{root}/x.npz", "--vocab", "9999"], "beyond the vocabulary of"),
    ("seedprint", ["{ckpt}", "--save", "{root}/x.npz", "--align", "on"], "--align would do nothing with --save"),
    ("studies.registry", ["--dtype", "bfloat16"], "bf16 against bf16 would compare nothing"),
    # a given --k must fit the width (the tiny preset's 64, or --n_embd's): it was capped in silence and recorded as
    # asked
    ("studies.registry", ["--k", "33"], "--k 33 is more than the width (--n_embd) 64 allows"),
    ("studies.registry_scale", ["--widths", "32", "96", "--k", "20"],
     "--k 20 is more than the narrowest of --widths 32 allows"),
    ("studies.registry_scale", ["--bases", "3", "--related", "4"], "at most --bases 3 bases can be continued"),
    ("studies.registry_scale", ["--widths", "64", "50"], "n_embd=50 is not divisible by n_head=4"),
    ("studies.lineage_fpr", ["--n_embd", "32", "--k", "17"], "--k 17 is more than the width (--n_embd) 32 allows"),
    ("studies.aligned_floor", ["--conditions", "bytes_w128", "--k", "65"],
     "--k 65 is more than the narrowest width of --conditions 128 allows"),
    ("studies.seedprint_tables", ["--exp", "table4b", "--lr", "nan"], "--lr: must be a finite number > 0, got nan"),
    ("studies.derivatives", ["--base", "{hf}"], "no tokenizer"),
    ("seedprint", ["{hf_huge}", "{hf}"], "non-finite activations (NaN/inf), first in block 1"),
    ("sink", ["{missing}"], "no model at"),
    ("sink", ["{ckpt}", "--bos", "on"], "names no bos_token_id"),
    ("sink", ["{ckpt}", "--bos", "maybe"], "expected on/off"),
    ("sink", ["{ckpt}", "--text", "nowhere"], "no text file 'nowhere'"),
    ("sink", ["{ckpt}", "--text", "wikitext2", "--data_from", "{a_dir}"], "holds no wikitext2_test.txt"),
    ("studies.sink_calibration", ["--text", "{text}", "--sequences", "500"], "fewer than the 500 sequences"),
    ("studies.lineage_fpr", ["--max_steps", "0"], "--max_steps: must be an integer >= 1, got 0"),
    ("sink", ["{ckpt}", "--ids", "{text}"], ".npy or data.py .bin"),
    ("sink", ["{ckpt}", "--ids", "{a_dir}"], "is a directory, not a token-id file"),
    ("sink", ["{ckpt}", "--ids", "{bad_npy}"], "ids.npy is not a readable .npy array"),
    ("sink", ["{ckpt}", "--ids", "{odd_bin}"], "odd.bin has an odd number of bytes"),
    ("sink", ["{ckpt}", "--lengths", "4096"], "--lengths 4096 exceeds the context"),
    ("sink", ["{ckpt}", "--eps", "1.5"], "--eps: must be a number in (0, 1), got 1.5"),
    ("sink", ["{hf}", "--text", "{text}"], "no tokenizer"),
    ("sink", ["{nan_ckpt}"], "NaN/inf"),
    ("sink", ["{ckpt}", "--exp", "interventions", "--lengths", "16", "--k", "1"],
     "--k: must be an integer >= 2, got 1"),
    ("sink", ["{ckpt}", "--exp", "interventions", "--lengths", "16", "--k", "17"],
     "--k positions must lie in [2, T=16]"),
    ("sink", ["{ckpt}", "--exp", "interventions", "--lengths", "16", "--layer", "7"], "--layer must index"),
    ("sink", ["{ckpt}", "--exp", "interventions", "--lengths", "8"], "the default --k (T/8, T/4, T/2) needs T >= 16"),
    ("sink", ["{ckpt}", "--exp", "interventions", "--lengths", "16", "--lambdas", "nan"],
     "--lambdas: must be a finite number >= 0, got nan"),
    ("studies.sink_testbed", ["--max_steps", "0"], "--max_steps: must be an integer >= 1, got 0"),
    ("sink", ["{mlp_only}"], "no attention layers"),
    ("sink", ["{ckpt}", "--ids", "{short_npy}", "--sequences", "4", "--lengths", "16", "30"], "short.npy holds 20"),
    ("studies.sink_calibration", ["--text", "{missing}.txt"], "no text file"),
    ("studies.sink_testbed", ["--variants", "sink_logit", "--attention", "uniform"], "--variants sink_logit"),
    ("studies.sink_calibration", ["--lengths", "4096"], "exceeds the trained models' block_size"),
    ("studies.sink_calibration", ["--train_text", "{data}", "--tokenizer", "gpt2"],
     "holds bytes tokens; drop --tokenizer gpt2"),
    ("studies.sink_calibration", ["--ids", "{big_ids}/train.bin"], "outside the bytes vocabulary of 256"),
    ("studies.sink_calibration", ["--micro_batch", "5"],
     "--batch_size 32 (sequences per step) must be a multiple of --micro_batch 5"),
    ("sink", ["{ckpt}", "--compile", "on"], "unrecognized arguments: --compile on"),
    # a repeated seed, length or variant: one model or run counted twice (a self-pair, an interval of zero width)
    ("probe", ["--model", "tiny", "--seeds", "1", "2", "1"], "--seeds lists 1 more than once"),
    ("studies.seedprint_tables", ["--seeds", "5", "5"], "--seeds lists 5 more than once"),
    ("studies.aligned_floor", ["--fit_seeds", "1", "2", "1"], "--fit_seeds lists 1 more than once"),
    ("studies.aligned_floor", ["--finetune_steps", "50", "50"], "--finetune_steps lists 50 more than once"),
    ("studies.sink_testbed", ["--seeds", "3", "4", "3"], "--seeds lists 3 more than once"),
    ("studies.sink_calibration", ["--variants", "baseline", "baseline"], "--variants lists baseline more than once"),
    ("sink", ["{ckpt}", "--lengths", "16", "16"], "--lengths lists 16 more than once"),
    ("probe", ["--model", "tiny", "--seq_len", "8", "8"], "--seq_len lists 8 more than once"),
    # a count, length or width out of its range, refused as it is parsed
    ("studies.lineage_fpr", ["--fpr_descendants", "-1"], "--fpr_descendants: must be an integer >= 0, got -1"),
    ("studies.fresh_inits", ["--fpr_inits", "1"], "--fpr_inits: must be an integer >= 2, got 1"),
    ("studies.fresh_inits", ["--fpr_seed0", "9223372036854775800", "--fpr_inits", "20"], "pass the largest seed"),
    ("studies.fingerprint_speed", ["--seq_len", "-5"], "--seq_len: must be an integer >= 1, got -5"),
    ("studies.probe_bench", ["--seq_len", "0"], "--seq_len: must be an integer >= 1, got 0"),
    ("studies.derivatives", ["--base", "{hf}", "--deriv_steps", "0"], "--deriv_steps: must be an integer >= 1"),
    ("studies.sink_testbed", ["--testbed_vocab", "4"], "--testbed_vocab: must be an integer >= 8, got 4"),
    ("studies.sink_testbed", ["--seeds", "0"], "needs two or more seeds"),
    ("studies.sink_calibration", ["--sequences", "-1"], "--sequences: must be an integer >= 1, got -1"),
    ("sink", ["{ckpt}", "--exp", "variance", "--sequences", "1"], "needs --sequences 2 or more"),
    ("studies.sink_testbed", ["--sequences", "1"], "across sequences, which needs two or more"),
    ("seedprint", ["{ckpt}", "{ckpt}", "--sequences", "-3"], "--sequences: must be an integer >= 10, got -3"),
    ("seedprint", ["{ckpt}", "{ckpt}", "--seq_len", "0"], "--seq_len: must be an integer >= 1, got 0"),
    ("studies.lineage_fpr", ["--k", "1"], "--k: must be an integer >= 2, got 1"),
    # a flag that would do nothing is refused, never recorded as if it had done something
    ("probe", ["--model", "{ckpt}", "--seeds", "1", "2"], "--seeds (fresh inits' seeds) would do nothing"),
    ("probe", ["--model", "tiny", "--compile_mode", "max-autotune"], "--compile_mode max-autotune goes with --compile on"),
    ("probe", ["--model", "tiny", "--compile", "on", "--compile_mode", "fast"], "invalid choice: 'fast'"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--compile_mode", "reduce-overhead"],
     "--compile_mode reduce-overhead goes with --compile on"),
    ("studies.probe_bench", ["--compile_mode", "max-autotune"], "--compile_mode max-autotune goes with --compile on"),
    ("studies.fingerprint_speed", ["--compile_mode", "max-autotune-no-cudagraphs"],
     "--compile_mode max-autotune-no-cudagraphs goes with --compile on"),
    ("probe", ["--model", "{hf}", "--embed_seed", "3"], "--embed_seed (fresh inits' seeds) would do nothing"),
    ("studies.seed_preference", ["--model", "tiny", "--exp", "seed_dependence", "--models", "3"],
     "--models counts the seeds of --exp direction"),
    ("studies.attention_averaging", ["--model", "tiny", "--exp", "intra", "--sequences", "8"],
     "--sequences would do nothing"),
    ("sink", ["{ckpt}", "--k", "4"], "--k would do nothing without --exp interventions"),
    ("sink", ["{ckpt}", "--mu", "sequence", "--lambdas", "2"], "--lambdas, --mu would do nothing without --exp"),
    ("sink", ["{ckpt}", "--tokenizer", "bytes"], "--tokenizer would do nothing without --text"),
    ("train", ["--data", "{missing}", "--out_dir", "OUT"], "no prepared data"),
    ("train", ["--data", "{text}", "--out_dir", "OUT"], "a file, not a directory"),
    ("train", ["--data", "{broken_meta}", "--out_dir", "OUT"], "meta.json lacks valid vocab_size"),
    ("train", ["--data", "{data}", "--out_dir", "{text}"], "--out_dir"),
    ("train", ["--data", "{data}", "--out_dir", "{resume_empty}", "--resume"], "holds no checkpoint to resume"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--lr", "0"], "--lr: must be a finite number > 0, got 0"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--beta2", "1"], "--beta2: must be a number in [0, 1), got 1"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--init_from", "{a_dir}"], "no checkpoint file"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--init_from", "{empty_pt}"],
     "not a readable train.py checkpoint"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--eval_sequences", "100000"], "--eval_sequences 100000"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--n_layer", "-1"], "n_layer must be an integer >= 1"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--lr", "1e300"], "--lr: must be a finite number > 0"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--data_seed", "-1"], "must be an integer in [0, 2^63)"),
    ("train", ["--data", "{data}", "--out_dir", "OUT", "--init_from", "{nan_ckpt}"], "NaN/inf"),
    ("train", ["--data", "{big_ids}", "--out_dir", "OUT"], "holds token id 300"),
    ("train", ["--data", "{data}", "--out_dir", "{resume_bad}", *TINY, "--eval_every", "0", "--resume"],
     "lacks the optimizer"),
    ("data", ["{text}", "--tokenizer", "bytes", "--out", "OUT", "--val_fraction", "0.0001"], "too few"),
    pytest.param("train", ["--data", "{data}", "--out_dir", "OUT", "--device", "cuda"], "no CUDA device",
                 marks=NO_CUDA),
    ("data", ["{a_dir}", "--out", "OUT"], "is a directory, not a text file"),
    ("data", ["{latin1}", "--tokenizer", "bytes", "--out", "OUT"], "latin1.txt is not UTF-8 text"),
    ("data", ["{text}", "--tokenizer", "bytes", "--out", "OUT", "--val_fraction", "1.5"], "--val_fraction"),
]


@pytest.mark.parametrize("script,argv,culprit", CASES)
def test_bad_input_is_refused_in_one_line_and_writes_nothing(files, tmp_path, script, argv, culprit, monkeypatch):
    monkeypatch.chdir(tmp_path)                 # a clean working directory: no data/ a user may have fetched
    out = tmp_path / "out"
    paths = dict({k: str(v) for k, v in files.items()}, missing=str(files["root"] / "missing.pt"))
    argv = [str(out) if a == "OUT" else a.format(**paths) for a in argv]
    if script not in ("train", "hf", "data") and "--out" not in argv and "--save" not in argv:   # hf.py writes nothing
        argv += ["--out", str(out)]
    before = snapshot(files["root"])
    name = script if script.startswith("studies.") else f"{script}.py"
    line = cli_error(importlib.import_module(script).main, name, argv)
    assert culprit in line, line
    assert not out.exists(), f"{script}.py wrote {sorted(os.listdir(out))} while refusing"
    assert os.listdir(tmp_path) == [], f"{script}.py wrote {os.listdir(tmp_path)} into its working directory"
    assert snapshot(files["root"]) == before


def test_nonfinite_activations_are_an_error_naming_the_first_bad_block(files):
    """A weight made inf after loading (as a bf16 overflow would): the probe pass refuses, naming block 2."""
    import probe
    model = load_checkpoint(str(files["ckpt"])).eval()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_proj.weight[0, 0] = float("inf")
    with pytest.raises(FloatingPointError, match="first in block 2 of 2"):
        probe.probe(model, sequences=4, seq_len=8, batch_size=4)
    with torch.no_grad():
        model.transformer.wte.weight[5, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="first in the input embeddings"):
        model.trace(torch.full((1, 4), 5))


# ----------------------------------------------------------------------------- across the process boundary

def _trainer(data, out_dir, *flags):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--data", str(data), "--out_dir", str(out_dir),
                             *TINY, "--device", "cpu", "--eval_every", "0", "--log_every", "0", *flags],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond, timeout=60.0):
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.02)


def test_a_second_run_into_a_locked_directory_is_refused_and_the_first_finishes(files, tmp_path):
    out = tmp_path / "run"
    first = _trainer(files["data"], out, "--max_steps", "150", "--ckpt_every", "50")
    _wait_for(lambda: train.list_checkpoints(str(out)) or first.poll() is not None)
    listing = sorted(os.listdir(out))
    for extra in ([], ["--resume"]):       # a new run and a resume are refused alike while it works
        line = cli_error(train.main, "train.py", ["--data", str(files["data"]), "--out_dir", str(out), *TINY,
                                                  "--device", "cpu", "--max_steps", "150", "--ckpt_every", "50",
                                                  "--eval_every", "0", *extra])
        assert "in use by another run" in line
    assert first.poll() is None, "the first run ended before the second tried: the test proved nothing"
    assert set(listing) <= set(os.listdir(out))
    assert first.wait(timeout=120) == 0, first.stderr.read()
    assert [s for s, _ in train.list_checkpoints(str(out))] == [0, 50, 100, 150]


def test_a_run_killed_while_checkpointing_leaves_every_checkpoint_loadable(files, tmp_path):
    """Killed at staggered moments of a run that checkpoints every step (so most kills land in or near a
    save): each time, every ckpt_*.pt loads, and --resume then finishes the run."""
    out = tmp_path / "run"
    started = False
    for delay in (0.0, 0.07, 0.19):
        resume = ["--resume"] if started else []
        proc = _trainer(files["data"], out, "--max_steps", "80", "--ckpt_every", "1", *resume)
        _wait_for(lambda: len(train.list_checkpoints(str(out))) >= 2 or proc.poll() is not None)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        started = True
        for _, path in train.list_checkpoints(str(out)):
            read_checkpoint(path)                                  # raises if one is half-written
    done = _trainer(files["data"], out, "--max_steps", "80", "--ckpt_every", "1", "--resume")
    assert done.wait(timeout=300) == 0, done.stderr.read()
    assert train.list_checkpoints(str(out))[-1][0] == 80
    assert not [f for f in os.listdir(out) if ".tmp" in f]


# ----------------------------------------------------------------------------- config.json, field by field

# transformers' LlamaConfig defaults for the fields the loader fills in when absent (written here from the
# transformers source, independently of model.py's table): a missing field must load as this value
HF_LLAMA_DEFAULTS = dict(rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                         max_position_embeddings=2048, hidden_act="silu", rope_parameters=None)


def _expected_spec(spec: dict, cfg: dict, removed: str):
    """The spec a config without field `removed` describes under transformers' defaults, or None when
    the field has no default that keeps the checkpoint loadable."""
    if removed == "rope_parameters":
        return dict(spec, rope=dict(kind="default", theta=10000.0))
    if removed == "num_key_value_heads":
        return None                       # defaults to num_attention_heads: the k/v tensors no longer fit
    if removed in ("rms_norm_eps",):
        return dict(spec, eps=HF_LLAMA_DEFAULTS["rms_norm_eps"])
    if removed in HF_LLAMA_DEFAULTS or removed in ("torch_dtype", "bos_token_id", "eos_token_id"):
        return spec if removed != "tie_word_embeddings" or not spec["tie"] else None
    return None


def test_every_config_field_mutated_either_loads_exactly_or_is_refused_in_one_line(tmp_path):
    spec, cfg, t = llama_family("LlamaForCausalLM", rope=dict(kind="default", theta=5000.0))
    ids = torch.randint(0, spec["V"], (2, 10), generator=torch.Generator().manual_seed(0))
    ref = naive_llama_family(spec, t, ids)
    d = tmp_path / "m"
    write_hf(d, cfg, t, shards=1)
    mutations = []
    for key, value in cfg.items():
        wrong = "x" if not isinstance(value, str) else 3
        mutations += [(key, "wrong type", dict(cfg, **{key: wrong})),
                      (key, "missing", {k: v for k, v in cfg.items() if k != key})]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            mutations += [(key, "negative", dict(cfg, **{key: -abs(value) or -1})),
                          (key, "non-integer" if isinstance(value, int) else "zero",
                           dict(cfg, **{key: value + 0.5 if isinstance(value, int) else 0.0}))]
    mutations.append(("extra_field", "unknown extra field", dict(cfg, extra_field=1)))
    refused = loaded = 0
    for key, how, mutated in mutations:
        (d / "config.json").write_text(json.dumps(mutated))
        try:
            model = hf.load(str(d)).eval()
        except (ValueError, OSError) as e:
            assert "\n" not in str(e) and str(e), (key, how, str(e))
            refused += 1
            continue
        expected = _expected_spec(spec, cfg, key) if how == "missing" else (spec if key in (
            "torch_dtype", "bos_token_id", "eos_token_id") else None)
        assert expected is not None, f"{key} {how}: loaded, but transformers would not load it as this model"
        exp = ref if expected is spec else naive_llama_family(expected, t, ids)
        assert_matches(model, *exp, ids)
        loaded += 1
    assert refused >= 2 * len(cfg) and loaded >= 3        # both outcomes are exercised


def test_scripts_without_the_requirements_answer_help_and_refuse_in_one_line(tmp_path):
    """A Python without torch (a fresh venv, none of the requirements): `--help` still prints each script's and
    each study's docstring and says what to install (exit 0); a run is refused in one line, exit 2, writing
    nothing. The one idiom that does it: every script and study imports common.py before any requirement."""
    venv = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    python = str(venv / "bin" / "python")
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("this interpreter's base has torch: no Python without the requirements to try")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    commands = {script: [str(ROOT / script)] for script in SCRIPTS}
    commands.update({f"studies.{p.stem}": ["-m", f"studies.{p.stem}"] for p in STUDIES})
    for name, command in commands.items():
        path = ROOT / (name.replace(".", "/") + ".py" if name.startswith("studies.") else name)
        doc = ast_docstring(path)
        study_env = dict(env, PYTHONPATH=str(ROOT)) if name.startswith("studies.") else env
        help_ = subprocess.run([python, *command, "--help"], capture_output=True, text=True, cwd=tmp_path,
                               env=study_env)
        assert help_.returncode == 0 and doc.strip().splitlines()[0] in help_.stdout, (name, help_.stderr)
        assert "pip install -r requirements.txt" in help_.stdout and "torch" in help_.stdout
        run = subprocess.run([python, *command, "--out", str(tmp_path / "out")], capture_output=True, text=True,
                             cwd=tmp_path, env=study_env)
        lines = run.stderr.splitlines()
        assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"{name}: error: needs "), lines
        assert sorted(os.listdir(tmp_path)) == ["bare"], name          # nothing written


SCRIPTS = ("init.py", "probe.py", "train.py", "seedprint.py", "sink.py", "data.py")   # the top level's command lines
STUDIES = sorted(p for p in (ROOT / "studies").glob("*.py") if p.stem not in ("__init__", *HELPERS))


def test_the_libraries_have_no_command_line():
    """model.py and theory.py are libraries: copied alone, they run nothing."""
    for lib in ("model.py", "theory.py"):
        assert "__main__" not in (ROOT / lib).read_text(), lib


def ast_docstring(path) -> str:
    import ast
    return ast.get_docstring(ast.parse(Path(path).read_text()), clean=False)
