"""Helpers shared by the test modules: one-line CLI refusals, two-process torchrun jobs, and tiny Hugging Face
checkpoints written here (HF tensor names and layouts, sharded with an index, config.json in the 4.x or 5.x
spelling) with the naive float64 forward passes they are checked against."""
import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from common import run_script, teardown_abort


TEXT = "It was the best of times, it was the worst of times; naïve café, 東京 ✓.\n" * 60


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """TEXT prepared as bytes (20% held out for validation): the trainer's and data.py's tests read it."""
    import data
    root = tmp_path_factory.mktemp("data")
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    data.prepare([str(root / "text.txt")], str(root / "bytes"), tokenizer="bytes", val_fraction=0.2)
    return str(root / "bytes")


# common.Progress's line on stderr: the work a run did before its refusal (a model fingerprinted before the next one,
# whose one read of its weights finds a NaN), not part of the refusal
PROGRESS = re.compile(r"^  .+: [\d,]+/[\d,]+ .*\(.+/s, ETA \d+:\d\d\)$")


def cli_error(main, name: str, argv: list, code: int = 2) -> str:
    """Run a script's main in-process under run_script; it must refuse with exit `code` and exactly one
    line on stderr besides its progress lines, which is returned."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            run_script(main, name, argv)
        except SystemExit as e:
            got = e.code
        else:
            raise AssertionError(f"{name} {argv} did not refuse")
    lines = [line for line in err.getvalue().splitlines() if not PROGRESS.match(line)]
    assert got == code, f"exit code {got}, stderr: {err.getvalue()}"
    assert len(lines) == 1, f"expected one stderr line, got {lines}"
    assert lines[0].startswith(f"{name}: "), lines[0]
    return lines[0]


def host_syncs(fn) -> int:
    """How often fn() reads a value of a tensor back to the host (.item(), bool(), int(): aten._local_scalar_dense,
    what waits for a GPU)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    reads = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                reads.append(func)
            return func(*args, **(kwargs or {}))
    with Count():
        fn()
    return len(reads)


def forge_fingerprint(good, out, edit_arrays=None, edit_meta=None) -> str:
    """The fingerprint file `good` with its arrays and its meta edited in place (edit_arrays, edit_meta: each given
    the dict to edit, or None) and its sha256 computed again, written to `out` (returned as a str): whole, so only
    the checks after the digest's can refuse it, but not what a model gave."""
    import numpy as np
    import evidence
    with np.load(good) as z:
        arrays = {k: z[k].copy() for k in z.files if k != "meta"}
        meta = json.loads(str(z["meta"]))
    del meta["sha256"]
    for edit, what in ((edit_arrays, arrays), (edit_meta, meta)):
        if edit is not None:
            edit(what)
    meta["sha256"] = evidence.digest(meta, arrays)
    np.savez(out, meta=np.array(json.dumps(meta)), **arrays)
    return str(out)


# gloo, on a loaded 2-core machine, now and then aborts a rank as it tears down after the job's work is done
# (common.GLOO_TEARDOWN_ABORT and common.teardown_abort), its results already written. Counted under load with
# probe.py's two-process test: 2 of 12 runs before common.leave_process_group's barrier, 1 of 76 after it; 0 of 30
# for a bare init / all_gather / barrier / destroy script.


def torchrun(script: str, flags: list, out: str, out_flag: str = "--out", cwd=None,
             nproc: int = 2) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node nproc script flags out_flag out`, one thread per process. A run that
    failed by that teardown abort, and only by it, is run once more from an empty `out`; any other failure,
    or the abort twice, is returned as it is for the test to fail on."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), script,
           *flags, out_flag, str(out)]
    for attempt in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
        if not teardown_abort(proc.returncode, proc.stdout + proc.stderr):
            return proc
        shutil.rmtree(out, ignore_errors=True)
    return proc


# ----------------------------------------------------------------------------- writing a checkpoint

def write_hf(path, config: dict, tensors: dict, shards: int = 2):
    from safetensors.torch import save_file      # an independent writer of the format
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(config, fh)
    names = sorted(tensors)
    parts = [names[i::shards] for i in range(shards)]
    files = {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": keys for i, keys in enumerate(parts)}
    for file, keys in files.items():
        save_file({k: tensors[k].contiguous() for k in keys}, os.path.join(path, file))
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
        json.dump({"weight_map": {k: f for f, keys in files.items() for k in keys}}, fh)


def write_tokenizer_json(path, words):
    """A word-level tokenizer.json (the tokenizers library's own writer): words[i] is token i, words[0] unknown."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(path, "tokenizer.json"))


def rope_fields(spec: dict, spelling: str) -> dict:
    """RoPE as config.json spells it: 4.x rope_theta + rope_scaling (older key "type"), 5.x rope_parameters."""
    rope = dict(spec["rope"])
    kind, theta = rope.pop("kind"), rope.pop("theta")
    if spelling == "4.x":
        return dict(rope_theta=theta, rope_scaling=None if kind == "default" else dict(rope, type=kind))
    return dict(rope_parameters=dict(rope, rope_type=kind, rope_theta=theta))


def llama_family(arch, spelling="5.x", rope=None, window=None, head_dim=None, tie=False, attention_bias=False,
                 mlp_bias=False, dtype=torch.float32, seed=0):
    """(spec, config.json dict, HF tensors) of a small random model of one family."""
    spec = dict(arch=arch, d=32, L=2, H=4, Hkv=2, hd=head_dim or 8, ff=48, V=100, eps=1e-6, window=window, tie=tie,
                rope=rope or dict(kind="default", theta=5000.0), qkv_bias=attention_bias or arch == "Qwen2ForCausalLM",
                o_bias=attention_bias, mlp_bias=mlp_bias, qk_norm=arch == "Qwen3ForCausalLM")
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.2).to(dtype)
    d, H, Hkv, hd, ff, V = spec["d"], spec["H"], spec["Hkv"], spec["hd"], spec["ff"], spec["V"]
    t = {"model.embed_tokens.weight": r(V, d), "model.norm.weight": 1 + r(d)}
    if not tie:
        t["lm_head.weight"] = r(V, d)
    for i in range(spec["L"]):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": r(H * hd, d), p + "self_attn.k_proj.weight": r(Hkv * hd, d),
                  p + "self_attn.v_proj.weight": r(Hkv * hd, d), p + "self_attn.o_proj.weight": r(d, H * hd),
                  p + "mlp.gate_proj.weight": r(ff, d), p + "mlp.up_proj.weight": r(ff, d),
                  p + "mlp.down_proj.weight": r(d, ff), p + "input_layernorm.weight": 1 + r(d),
                  p + "post_attention_layernorm.weight": 1 + r(d)})
        if spec["qkv_bias"]:
            t.update({p + f"self_attn.{x}_proj.bias": r(n)
                      for x, n in (("q", H * hd), ("k", Hkv * hd), ("v", Hkv * hd))})
        if spec["o_bias"]:
            t[p + "self_attn.o_proj.bias"] = r(d)
        if mlp_bias:
            t.update({p + f"mlp.{x}_proj.bias": r(n) for x, n in (("gate", ff), ("up", ff), ("down", d))})
        if spec["qk_norm"]:
            t.update({p + "self_attn.q_norm.weight": 1 + r(hd), p + "self_attn.k_norm.weight": 1 + r(hd)})
    cfg = dict(architectures=[arch], hidden_size=d, num_hidden_layers=spec["L"], num_attention_heads=H,
               num_key_value_heads=Hkv, intermediate_size=ff, vocab_size=V, rms_norm_eps=spec["eps"],
               max_position_embeddings=64, tie_word_embeddings=tie, hidden_act="silu", torch_dtype="float32",
               bos_token_id=1, eos_token_id=2, **rope_fields(spec, spelling))
    if head_dim:
        cfg["head_dim"] = head_dim
    if arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        cfg["attention_bias"] = attention_bias
    if arch == "LlamaForCausalLM":
        cfg["mlp_bias"] = mlp_bias
    if arch == "MistralForCausalLM":
        cfg["sliding_window"] = window
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        cfg.update(use_sliding_window=False, sliding_window=4096, max_window_layers=28)
    return spec, cfg, t


# ----------------------------------------------------------------------------- naive forward passes

def naive_inv_freq(rope: dict, hd: int) -> list:
    """RoPE inverse frequencies in float64, one by one; llama3 as Meta's reference loop writes it."""
    out = []
    for i in range(0, hd, 2):
        f = rope["theta"] ** (-i / hd)
        if rope["kind"] == "linear":
            f /= rope["factor"]
        elif rope["kind"] == "llama3":
            old = rope["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            if wavelen < old / rope["high_freq_factor"]:
                pass
            elif wavelen > old / rope["low_freq_factor"]:
                f /= rope["factor"]
            else:
                s = (old / wavelen - rope["low_freq_factor"]) / (rope["high_freq_factor"] - rope["low_freq_factor"])
                f = (1 - s) * f / rope["factor"] + s * f
        out.append(f)
    return out


def naive_llama_family(spec: dict, t: dict, ids: torch.Tensor):
    """(logits, final-norm hidden) of LLaMA / Mistral / Qwen2 / Qwen3, float64, head by head."""
    H, Hkv, hd, eps, T = spec["H"], spec["Hkv"], spec["hd"], spec["eps"], ids.shape[1]
    w = {k: v.double() for k, v in t.items()}
    rms = lambda x, g: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g
    inv = torch.tensor(naive_inv_freq(spec["rope"], hd), dtype=torch.float64)
    ang = torch.arange(T).double()[:, None] * inv[None]

    def rotate(x):                   # pairs (i, i + hd/2) rotate by angle t * inv_freq_i
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], -1)

    windows = spec.get("windows") or [spec["window"]] * spec["L"]          # a window per layer, or one for all
    x = w["model.embed_tokens.weight"][ids]
    for i in range(spec["L"]):
        window = windows[i] or T
        visible = torch.tensor([[s <= q and q - s < window for s in range(T)] for q in range(T)])
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        proj = lambda n: h @ w[p + f"self_attn.{n}_proj.weight"].T + w.get(p + f"self_attn.{n}_proj.bias", 0)
        q, k, v = proj("q"), proj("k"), proj("v")
        heads = []
        for j in range(H):
            kv = j // (H // Hkv)
            qj, kj = q[..., j * hd:(j + 1) * hd], k[..., kv * hd:(kv + 1) * hd]
            if spec["qk_norm"]:
                qj, kj = rms(qj, w[p + "self_attn.q_norm.weight"]), rms(kj, w[p + "self_attn.k_norm.weight"])
            s = (rotate(qj) @ rotate(kj).transpose(-1, -2) / math.sqrt(hd)).masked_fill(~visible, -math.inf)
            heads.append(s.softmax(-1) @ v[..., kv * hd:(kv + 1) * hd])
        x = x + torch.cat(heads, -1) @ w[p + "self_attn.o_proj.weight"].T + w.get(p + "self_attn.o_proj.bias", 0)
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        lin = lambda n, z: z @ w[p + f"mlp.{n}_proj.weight"].T + w.get(p + f"mlp.{n}_proj.bias", 0)
        gate = lin("gate", h)
        x = x + lin("down", gate * torch.sigmoid(gate) * lin("up", h))
    hidden = rms(x, w["model.norm.weight"])
    return hidden @ w["lm_head.weight" if "lm_head.weight" in w else "model.embed_tokens.weight"].T, hidden


def assert_matches(model, naive_logits, naive_hidden, ids):
    with torch.no_grad():
        logits, _ = model(ids, ids)
        hidden = model.trace(ids, hidden="all")["hidden"][-1]
    for got, ref in ((logits, naive_logits), (hidden, naive_hidden)):
        rel = ((got.double() - ref).abs().max() / ref.abs().max()).item()
        assert rel <= 1e-5, rel


