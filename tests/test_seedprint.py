"""seedprint.py: the statistic and its calibration, Hugging Face loading against naive forwards, lineage."""
import json
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

import seedprint
import train
from init import build
from model import GPT, get_config


# ----------------------------------------------------------------------------- the statistic

def test_kendall_tau_b_matches_a_naive_pair_count():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 40).astype(float)   # with ties
    conc = disc = tx = ty = 0
    for i in range(40):
        for j in range(i + 1, 40):
            s = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
            conc += s > 0
            disc += s < 0
            tx += x[i] == x[j] and y[i] != y[j]
            ty += y[i] == y[j] and x[i] != x[j]
    naive = (conc - disc) / math.sqrt((conc + disc + tx) * (conc + disc + ty))
    assert seedprint.kendall_tau_b(x, y) == pytest.approx(naive, rel=1e-12)


def test_identity_dims_are_the_smallest_means():
    H = np.array([[3.0, -1.0, 0.5, -4.0], [3.0, -1.0, 0.5, -4.0]])
    assert list(seedprint.identity_dims(H, 2)) == [1, 3]
    assert list(seedprint.identity_dims(H, 2, "largest")) == [0, 2]
    assert list(seedprint.identity_dims(H, 2, "abs")) == [0, 3]


def test_planted_shared_structure_is_related():
    rng = np.random.default_rng(1)
    HA = rng.standard_normal((500, 64)).astype(np.float32) + np.linspace(-1, 1, 64, dtype=np.float32)
    HB = HA + rng.standard_normal(HA.shape).astype(np.float32)            # shared structure + noise
    r = seedprint.seedprint_test(HA, HB, k=32)
    assert r.related and r.p_t < 1e-6 and r.p_u < 1e-6 and r.p_analytic < 1e-6 and r.mean_tau > 0.2


def test_independent_matrices_are_rejected_at_the_nominal_rate():
    """Two independent Gaussian matrices, 400 times: each test rejects at alpha = 0.01 at a rate
    within binomial tolerance (p_analytic is two-sided, so its one-tail rate is alpha / 2)."""
    N, d, trials = 100, 32, 400
    rng = np.random.default_rng(2)
    null = seedprint.null_taus(N, d, trials=10, seed=99, k=16)
    res = [seedprint.seedprint_test(rng.standard_normal((N, d)), rng.standard_normal((N, d)), k=16, null=null)
           for _ in range(trials)]
    for name, rate in (("p_t", 0.01), ("p_u", 0.01), ("p_analytic", 0.005)):
        hits = sum(getattr(r, name) < 0.01 for r in res)
        lo, hi = stats.binom.ppf([0.0005, 0.9995], trials, rate)
        assert lo <= hits <= hi, (name, hits, lo, hi)
    pu = np.array([r.p_u for r in res])
    assert stats.kstest(pu, "uniform").pvalue > 1e-3       # honest p-values are uniform under the null


def test_analytic_z_uses_the_kendall_null_variance():
    rng = np.random.default_rng(3)
    N = 60
    taus = [seedprint.kendall_tau_b(rng.standard_normal(N), rng.standard_normal(N)) for _ in range(4000)]
    assert np.var(taus) == pytest.approx(2 * (2 * N + 5) / (9 * N * (N - 1)), rel=0.08)


def test_no_shared_identity_dimension_means_unrelated():
    H = np.zeros((50, 8))
    H[:, :4] = -1.0                                          # A's smallest dims: 0-3; B's: 4-7
    r = seedprint.seedprint_test(H + np.random.default_rng(0).standard_normal((50, 8)) * 0.01,
                                 H[:, ::-1] + np.random.default_rng(1).standard_normal((50, 8)) * 0.01, k=4)
    assert r.n_identity == 0 and not r.related and r.p_u == 1.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        seedprint.seedprint_taus(np.zeros((10, 8)), np.zeros((10, 16)))
    with pytest.raises(ValueError, match="set_mode"):
        seedprint.seedprint_taus(np.zeros((10, 8)), np.zeros((10, 8)), set_mode="both")
    with pytest.raises(ValueError, match="width"):
        seedprint.compare(np.zeros((10, 8)), np.zeros((10, 16)))
    with pytest.raises(ValueError, match="inputs"):
        seedprint.fingerprint(build(get_config("tiny", n_layer=1), 0), n=2, inputs="images")


# ----------------------------------------------------------------------------- lineage on tiny models

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage")
    text = root / "t.txt"
    text.write_text("".join(chr(32 + (i * 7919) % 90) for i in range(40000)))
    train.prepare([str(text)], str(root / "data"), tokenizer="bytes")
    flags = ["--data", str(root / "data"), "--n_layer", "2", "--n_embd", "64", "--block_size", "32", "--device", "cpu",
             "--max_steps", "40", "--ckpt_every", "40", "--eval_every", "0", "--log_every", "0", "--lr", "3e-3"]
    for seed in (1, 2):
        train.train(train.parse_args(flags + ["--out_dir", str(root / f"s{seed}"), "--init_seed", str(seed), "--embed_seed", str(seed)]))
    return {s: [train.checkpoint_path(str(root / f"s{s}"), step) for step in (0, 40)] for s in (1, 2)}


def test_a_model_and_its_trained_self_are_related(trained):
    r = seedprint.compare(trained[1][0], trained[1][1], n=400, seq_len=16, k=16)
    assert r.related, r


def test_different_seeds_are_not_related(trained):
    for a, b in ((trained[1][0], trained[2][0]), (trained[1][1], trained[2][1])):
        r = seedprint.compare(a, b, n=400, seq_len=16, k=16)
        assert not r.related and r.p_u > 0.01, r


def test_fingerprint_is_cached_by_path_and_options(trained, tmp_path):
    H1 = seedprint.fingerprint_cached(trained[1][0], str(tmp_path), n=8, seq_len=4)
    assert len(os.listdir(tmp_path)) == 1
    H2 = seedprint.fingerprint_cached(trained[1][0], str(tmp_path), n=8, seq_len=4)
    assert np.array_equal(H1, H2)
    seedprint.fingerprint_cached(trained[1][0], str(tmp_path), n=8, seq_len=5)
    assert len(os.listdir(tmp_path)) == 2


def test_baselines_are_one_for_a_model_with_itself_and_bounded():
    a, b = build(get_config("tiny", n_layer=2), 0), build(get_config("tiny", n_layer=2), 1)
    for name, f in seedprint.BASELINES.items():
        assert f(a, a) == pytest.approx(1.0, abs=1e-4), name
        assert -1.0 <= f(a, b) <= 1.0 + 1e-6, name
    # independent draws: only the norm gains (all 1 at init) are shared, so cos = n_gain / (|a| |b|)
    flat = lambda m: torch.cat([p.flatten() for n, p in m.named_parameters() if n.startswith("transformer.h.")])
    gains = sum(p.numel() for n, p in a.named_parameters() if n.startswith("transformer.h.") and n.endswith("ln_1.weight")
                or n.startswith("transformer.h.") and n.endswith("ln_2.weight"))
    expected = gains / (flat(a).norm() * flat(b).norm()).item()
    assert seedprint.pcs(a, b) == pytest.approx(expected, abs=0.01)


# ----------------------------------------------------------------------------- Hugging Face checkpoints

def _write_hf(path, config, tensors):
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    names = sorted(tensors)
    half = len(names) // 2         # two shards and an index, like a real sharded checkpoint
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, os.path.join(path, file))
    json.dump({"weight_map": {k: f for f, keys in shards.items() for k in keys}},
              open(os.path.join(path, "model.safetensors.index.json"), "w"))


def _llama_like(qwen: bool, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    d, L, H, Hkv, hd, ff, V = 32, 2, 4, 2, 8, 48, 100
    r = lambda *s: (torch.randn(*s, generator=g) * 0.2).to(dtype)
    t = {"model.embed_tokens.weight": r(V, d), "model.norm.weight": 1 + r(d), "lm_head.weight": r(V, d)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": r(H * hd, d), p + "self_attn.k_proj.weight": r(Hkv * hd, d),
                  p + "self_attn.v_proj.weight": r(Hkv * hd, d), p + "self_attn.o_proj.weight": r(d, H * hd),
                  p + "mlp.gate_proj.weight": r(ff, d), p + "mlp.up_proj.weight": r(ff, d),
                  p + "mlp.down_proj.weight": r(d, ff), p + "input_layernorm.weight": 1 + r(d),
                  p + "post_attention_layernorm.weight": 1 + r(d)})
        if qwen:
            t.update({p + f"self_attn.{x}_proj.bias": r(n) for x, n in (("q", H * hd), ("k", Hkv * hd), ("v", Hkv * hd))})
    cfg = dict(architectures=["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"], hidden_size=d, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=Hkv, intermediate_size=ff, vocab_size=V,
               rms_norm_eps=1e-6, rope_theta=5000.0, max_position_embeddings=64, tie_word_embeddings=False,
               hidden_act="silu")
    return cfg, t


def _naive_llama(cfg, t, ids):
    """LLaMA / Qwen2 forward written from the architecture's definition, head by head."""
    d, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, T, eps = d // H, ids.shape[1], cfg["rms_norm_eps"]
    w = {k: v.double() for k, v in t.items()}
    rms = lambda x, g: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g
    inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, hd, 2).double() / hd)
    ang = torch.arange(T).double()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    rot = lambda x: x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        proj = lambda n: h @ w[p + f"self_attn.{n}_proj.weight"].T + w.get(p + f"self_attn.{n}_proj.bias", 0)
        q, k, v = proj("q"), proj("k"), proj("v")
        heads = []
        for j in range(H):
            kv = j // (H // Hkv)
            qj, kj = rot(q[..., j * hd:(j + 1) * hd]), rot(k[..., kv * hd:(kv + 1) * hd])
            s = qj @ kj.transpose(-1, -2) / math.sqrt(hd)
            s = s.masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf)
            heads.append(s.softmax(-1) @ v[..., kv * hd:(kv + 1) * hd])
        x = x + torch.cat(heads, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (gate * torch.sigmoid(gate) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


@pytest.mark.parametrize("qwen", [False, True])
def test_llama_and_qwen2_checkpoints_match_a_naive_forward(tmp_path, qwen):
    cfg, t = _llama_like(qwen)
    _write_hf(str(tmp_path), cfg, t)
    model = GPT.from_pretrained(str(tmp_path))
    assert model.config.kv_heads == 2 and model.config.qkv_bias == qwen and model.config.rope_theta == 5000.0
    ids = torch.randint(0, 100, (2, 11), generator=torch.Generator().manual_seed(1))
    logits, _ = model(ids, ids)
    assert torch.allclose(logits.double(), _naive_llama(cfg, t, ids), atol=1e-4)


def test_gpt2_checkpoint_with_conv1d_layout_matches_a_naive_forward(tmp_path):
    g = torch.Generator().manual_seed(0)
    d, L, V, P = 16, 2, 50, 32
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    t = {"transformer.wte.weight": r(V, d), "transformer.wpe.weight": r(P, d),
         "transformer.ln_f.weight": 1 + r(d), "transformer.ln_f.bias": r(d)}
    for i in range(L):
        p = f"transformer.h.{i}."
        t.update({p + "ln_1.weight": 1 + r(d), p + "ln_1.bias": r(d), p + "ln_2.weight": 1 + r(d), p + "ln_2.bias": r(d),
                  p + "attn.c_attn.weight": r(d, 3 * d), p + "attn.c_attn.bias": r(3 * d),    # Conv1D: (in, out)
                  p + "attn.c_proj.weight": r(d, d), p + "attn.c_proj.bias": r(d),
                  p + "mlp.c_fc.weight": r(d, 4 * d), p + "mlp.c_fc.bias": r(4 * d),
                  p + "mlp.c_proj.weight": r(4 * d, d), p + "mlp.c_proj.bias": r(d),
                  p + "attn.bias": torch.ones(1, 1, P, P).tril()})                          # a buffer, ignored
    cfg = dict(architectures=["GPT2LMHeadModel"], n_embd=d, n_layer=L, n_head=2, n_positions=P, vocab_size=V,
               layer_norm_epsilon=1e-5, activation_function="gelu_new")
    _write_hf(str(tmp_path), cfg, t)
    model = GPT.from_pretrained(str(tmp_path))
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(1))
    w = {k: v.double() for k, v in t.items()}
    ln = lambda x, p: F.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], 1e-5)
    gelu_new = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:9]
    for i in range(L):
        p = f"transformer.h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(d, -1)
        heads = []
        for j in range(2):
            sl = slice(j * 8, (j + 1) * 8)
            s = (q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(8)).masked_fill(torch.ones(9, 9).triu(1).bool(), -math.inf)
            heads.append(s.softmax(-1) @ v[..., sl])
        x = x + torch.cat(heads, -1) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        x = x + gelu_new(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    naive = ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T        # tied head
    logits, _ = model(ids, ids)
    assert torch.allclose(logits.double(), naive, atol=1e-4)


def test_bf16_checkpoint_stays_bf16_and_bad_directories_are_refused(tmp_path):
    cfg, t = _llama_like(False, dtype=torch.bfloat16)
    _write_hf(str(tmp_path / "bf16"), cfg, t)
    model = GPT.from_pretrained(str(tmp_path / "bf16"))
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert torch.equal(model.transformer.wte.weight, t["model.embed_tokens.weight"])
    with pytest.raises(FileNotFoundError, match="config.json"):
        GPT.from_pretrained(str(tmp_path))
    _write_hf(str(tmp_path / "mistral"), dict(cfg, architectures=["MistralForCausalLM"]), t)
    with pytest.raises(ValueError, match="unsupported architecture"):
        GPT.from_pretrained(str(tmp_path / "mistral"))
    _write_hf(str(tmp_path / "scaled"), dict(cfg, rope_scaling={"type": "llama3"}), t)
    with pytest.raises(ValueError, match="rope_scaling"):
        GPT.from_pretrained(str(tmp_path / "scaled"))
    t.pop("model.layers.1.mlp.up_proj.weight")
    _write_hf(str(tmp_path / "broken"), cfg, t)
    with pytest.raises(ValueError, match="missing"):
        GPT.from_pretrained(str(tmp_path / "broken"))
