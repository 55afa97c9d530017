"""seedprint.py: the statistic and its calibration, lineage on tiny trained models."""
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
