"""sink.py: the sink metric against a naive loop and closed forms, the interventions, bad input."""
import math
import os

import numpy as np
import pytest
import torch

import sink
import theory
from init import build
from model import get_config


def random_causal_attention(shape, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(*shape, T, T, generator=g) * 3
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1)


def test_sink_scores_match_a_naive_loop():
    A = random_causal_attention((2, 3), 9)
    got = sink.sink_scores(A)
    for idx in np.ndindex(2, 3):
        for k in range(9):            # 0-indexed key k is seen by queries k..T-1
            naive = sum(A[idx][t, k].item() for t in range(k, 9)) / (9 - k)
            assert got[idx][k].item() == pytest.approx(naive, rel=1e-6)


@pytest.mark.parametrize("T", [1, 2, 64, 300])
def test_uniform_attention_gives_harmonic_over_T_and_all_to_first_gives_one(T):
    uniform = torch.ones(T, T).tril() / torch.arange(1, T + 1).view(T, 1)
    harmonic = sum(1.0 / t for t in range(1, T + 1))
    assert sink.sink_scores(uniform)[0].item() == pytest.approx(harmonic / T, rel=1e-6)
    to_first = torch.zeros(T, T)
    to_first[:, 0] = 1
    assert sink.sink_scores(to_first)[0].item() == pytest.approx(1.0)
    assert (sink.sink_scores(to_first)[1:] == 0).all()
    if T == 64:
        assert harmonic / T == pytest.approx(0.074, abs=5e-4)     # Gu et al.'s uniform baseline


def test_sink_scores_refuse_bad_attention():
    A = random_causal_attention((1,), 5)
    with pytest.raises(ValueError, match="causal"):
        sink.sink_scores(A.transpose(-1, -2))
    with pytest.raises(ValueError, match="probability"):
        sink.sink_scores(A * 2)
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        sink.sink_scores(torch.ones(3, 4) / 4)


def test_sink_rate_counts_strictly_above_eps():
    model = build(get_config("tiny", n_layer=2, n_head=2, n_embd=16, vocab_size=32, attention="uniform"), 0)
    tokens = torch.randint(0, 32, (3, 8))
    h8 = sum(1.0 / t for t in range(1, 9)) / 8                        # 0.3396: every head of uniform attention
    assert sink.sink_rate(model, tokens, eps=h8 - 1e-4) == 100.0
    assert sink.sink_rate(model, tokens, eps=h8 + 1e-4) == 0.0


# ----------------------------------------------------------------------------- interventions

def test_mask_edit_makes_token_k_compute_like_a_first_token():
    """With the edit, token k aggregates nothing in any layer; under RoPE (relative positions) its
    residual stream is then exactly the first token's of the sequence that starts at k."""
    cfg = get_config("tiny", n_layer=3, tie_embeddings=False)
    model = build(cfg, 5)
    x = torch.randint(0, cfg.vocab_size, (4, 24), generator=torch.Generator().manual_seed(1))
    k = 10
    edited = model.trace(x, hidden="all", attn_mask=sink.self_only_mask(24, k))["hidden"]
    shifted = model.trace(x[:, k - 1:], hidden="all")["hidden"]
    plain = model.trace(x, hidden="all")["hidden"]
    for e, s, p in zip(edited[1:], shifted[1:], plain[1:]):
        assert torch.allclose(e[:, k - 1], s[:, 0], atol=1e-5)
        assert not torch.allclose(p[:, k - 1], s[:, 0], atol=1e-3)     # without the edit it does not
        assert torch.allclose(e[:, :k - 1], p[:, :k - 1], atol=1e-6)   # earlier tokens are untouched


def planted_sink_model(beta=60.0):
    """Two layers in which a layer-2 key is large when its layer-1 attention output did not average.
    Residual dims: 0 constant 1, 1 the detector, 2-5 the token's four random signs (the 16 tokens are
    the 16 sign patterns), 6-9 their running means. Layer 1 attends uniformly (W_Q = W_K = 0) and
    writes the running mean of the signs into 6-9; its ReLU MLP writes sum_j |mean_j| into dim 1
    (relu(m) + relu(-m) = |m|); layer 2's query is beta x dim 0 and its key reads dim 1. Position 1
    has |mean_j| = 1 for every j, later positions shrink like 1/sqrt(t): the first token is a sink
    because it aggregates nothing -- the paper's structural reason, built by hand."""
    cfg = get_config("tiny", n_layer=2, n_head=1, n_embd=10, vocab_size=16, block_size=64, position="none",
                     norm="none", bias=False, activation="relu", mlp_hidden=8, tie_embeddings=False)
    model = build(cfg, 0)
    d = 10
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        patterns = torch.tensor([[1.0 if (v >> j) & 1 else -1.0 for j in range(4)] for v in range(16)])
        model.transformer.wte.weight[:, 0] = 1.0
        model.transformer.wte.weight[:, 2:6] = patterns
        a1, m1, a2 = model.transformer.h[0].attn, model.transformer.h[0].mlp, model.transformer.h[1].attn
        for j in range(4):
            a1.c_attn.weight[2 * d + 6 + j, 2 + j] = 1.0      # v[6+j] = sign j
            a1.c_proj.weight[6 + j, 6 + j] = 1.0              # residual dim 6+j += running mean
            m1.c_fc.weight[2 * j, 6 + j], m1.c_fc.weight[2 * j + 1, 6 + j] = 1.0, -1.0
            m1.c_proj.weight[1, 2 * j] = m1.c_proj.weight[1, 2 * j + 1] = 1.0
        a2.c_attn.weight[0, 0] = beta                          # q[0] = beta
        a2.c_attn.weight[d + 0, 1] = 1.0                       # k[0] = sum_j |mean_j|
    return model


def test_mask_edit_turns_token_k_into_a_sink():
    model = planted_sink_model()
    T, k = 64, 40
    x = torch.randint(0, 16, (64, T), generator=torch.Generator().manual_seed(0))
    before = sink.key_scores(model, x)[:, 1, 0]                     # layer 2, (N, T)
    after = sink.key_scores(model, x, attn_mask=sink.self_only_mask(T, k))[:, 1, 0]
    assert (before[:, 0] > 0.3).float().mean() > 0.9                 # the planted first-token sink
    assert (before[:, k - 1] > 0.3).float().mean() < 0.05
    assert (after[:, k - 1] > 0.3).float().mean() > 0.9              # token k becomes one too


def test_variance_amplification_hook_edits_only_token_k():
    model = planted_sink_model()
    x = torch.randint(0, 16, (4, 16))
    seen = {}
    w_o = model.transformer.h[0].attn.c_proj
    w_o.register_forward_pre_hook(lambda m, i: seen.setdefault("o", i[0].clone()))
    handle = w_o.register_forward_pre_hook(sink.amplify_hook(5, 3.0))
    w_o.register_forward_hook(lambda m, i, out: seen.setdefault("edited", i[0].clone()))
    model(x)
    handle.remove()
    o, e = seen["o"], seen["edited"]
    mu = o.mean(dim=1)
    assert torch.allclose(e[:, 4], mu + 3.0 * (o[:, 4] - mu))
    assert torch.equal(torch.cat([e[:, :4], e[:, 5:]], 1), torch.cat([o[:, :4], o[:, 5:]], 1))


@pytest.mark.parametrize("calibration", ["none", "amplify", "attenuate"])
def test_calibration_flattens_position_variance(calibration):
    """Uniform attention on iid token embeddings: var at position t is var(1) / t (theory.attn0_variance);
    amplification (x sqrt t) and attenuation (x sqrt(t / T)) make it flat."""
    T = 32
    cfg = get_config("tiny", n_layer=1, n_head=4, n_embd=64, vocab_size=4096, block_size=T, attention="uniform",
                     norm="none", position="none", calibration=calibration)
    model = build(cfg, 3)
    x = torch.randint(0, 4096, (512, T), generator=torch.Generator().manual_seed(0))
    var = sink.position_variance(model, x, batch_size=128)[0]
    rel = 4 * math.sqrt(2 / (512 * 64))          # ~4 standard errors of a variance from 512 x 64 values
    t = np.arange(1, T + 1)
    factor = {"none": np.ones(T), "amplify": t, "attenuate": t / T}[calibration]     # scale of the variance
    expected = theory.attn0_variance(t, 1, sigma2=var[0] / factor[0]) * factor
    assert np.allclose(var, expected, rtol=rel * 1.5)
    if calibration == "none":
        assert var[0] / var[-1] > T / 2
    else:
        assert var.max() / var.min() < 1.3


def test_dimension_disparity_and_massive_activations():
    h = torch.tensor([[1.0, -1.0, 1.0, -9.0]])
    assert sink.dimension_disparity(h).item() == pytest.approx(9 / 3)
    model = planted_sink_model()
    rows = sink.massive_activations(model, torch.randint(0, 16, (2, 8)))
    assert len(rows) == 3 and all(r["top"] >= r["median"] for r in rows)


def test_text_windows_and_missing_file(tmp_path):
    (tmp_path / "t.txt").write_text("abcdefghij" * 10)
    w = sink.text_windows(str(tmp_path / "t.txt"), "bytes", 10, 5, seed=0)
    assert w.shape == (5, 10) and all(bytes(r.tolist()) == b"abcdefghij" for r in w)
    with pytest.raises(FileNotFoundError, match="--text"):
        sink.text_windows(str(tmp_path / "nope.txt"), "bytes", 10, 5)
    with pytest.raises(ValueError, match="fewer than one window"):
        sink.text_windows(str(tmp_path / "t.txt"), "bytes", 1000, 5)


def test_measure_cli_on_a_checkpoint_and_refusals(tmp_path):
    import json
    import train
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 400)
    train.prepare([str(tmp_path / "t.txt")], str(tmp_path / "d"), tokenizer="bytes")
    train.train(train.parse_args(["--data", str(tmp_path / "d"), "--out_dir", str(tmp_path / "run"), "--n_layer", "2",
                                  "--block_size", "64", "--max_steps", "1", "--eval_every", "0", "--device", "cpu"]))
    ckpt = train.checkpoint_path(str(tmp_path / "run"), 1)
    sink.main([ckpt, "--data", str(tmp_path / "t.txt"), "--lengths", "16", "32", "128", "--sequences", "4",
               "--out", str(tmp_path / "out")])
    res = json.load(open(tmp_path / "out" / "results.json"))["measure"]
    assert set(res["sink_rate"]) == {"16", "32"} and len(res["massive_activations"]) == 3   # 128 > context
    with pytest.raises(SystemExit, match="no checkpoint file"):
        sink.main([str(tmp_path / "missing.pt"), "--out", str(tmp_path / "o2")])
    os.makedirs(tmp_path / "llama")
    json.dump(dict(architectures=["LlamaForCausalLM"]), open(tmp_path / "llama" / "config.json", "w"))
    with pytest.raises(SystemExit):
        sink.main([str(tmp_path / "llama"), "--out", str(tmp_path / "o3")])
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()
