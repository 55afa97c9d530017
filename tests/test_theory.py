"""theory.py: each closed form against Monte Carlo (tolerance = 4 standard errors + the known
finite-width bias), exact finite-n forms against naive loops, and limits / special values."""
import math

import numpy as np
import pytest
from scipy import integrate

import theory as th


def test_arccos_map_special_values_and_sequence():
    assert th.arccos_map(0.0) == pytest.approx(1 / math.pi, abs=1e-15)
    assert th.arccos_map(1.0) == pytest.approx(1.0, abs=1e-15)
    # Prop 2's sequence f(0), f(f(0)), ... as the paper's Appendix A.1 tabulates it
    assert [round(th.mlp0_cosine(l), 5) for l in range(6)] == [0.0, 0.31831, 0.49373, 0.60483, 0.68095, 0.73595]
    rho = np.linspace(-0.99, 0.99, 199)
    assert np.all(th.arccos_map(rho) > rho)                # monotone increase toward the fixed point 1
    assert th.mlp0_cosine(200) > 0.999 and th.mlp0_cosine(7, "tanh") == 0.0
    with pytest.raises(ValueError, match="relu"):
        th.mlp0_cosine(2, "gelu")


@pytest.mark.parametrize("rho", [-0.7, 0.0, 1 / math.pi, 0.8])
def test_arccos_map_against_gaussian_integral(rho):
    """E[relu(u) relu(v)] / E[relu(u)^2] for unit Gaussians of correlation rho, by 2-D quadrature."""
    s = math.sqrt(1 - rho ** 2)
    pdf = lambda w, u: math.exp(-(u * u + w * w) / 2) / (2 * math.pi)
    num = integrate.dblquad(lambda w, u: u * max(rho * u + s * w, 0.0) * pdf(w, u), 0, 9,
                            lambda u: -rho * u / s, lambda u: 9, epsabs=1e-11)[0]
    assert num / 0.5 == pytest.approx(float(th.arccos_map(rho)), abs=1e-7)


def test_mlp0_relu_matches_monte_carlo():
    d = 256
    mc, se = th.mlp0_cosine_mc(4, "relu", width=d, n_pairs=256, n_nets=16, seed=1)
    # layer 1: the finite-width correction is known, 1/pi + 5 / (4 pi d)
    assert abs(mc[0] - (1 / math.pi + 5 / (4 * math.pi * d))) < 4 * se[0] + 1e-4
    for l in range(2, 5):
        # deeper layers: each layer adds an O(1/d) bias of the same size as layer 1's, < 1/d
        assert abs(mc[l - 1] - th.mlp0_cosine(l)) < 4 * se[l - 1] + l / d, (l, mc[l - 1], th.mlp0_cosine(l))


def test_mlp0_tanh_stays_at_zero_on_the_same_weights():
    mc, se = th.mlp0_cosine_mc(4, "tanh", width=256, n_pairs=256, n_nets=16, seed=1)
    assert np.all(np.abs(mc) < 4 * se + 1e-4), (mc, se)
    relu, _ = th.mlp0_cosine_mc(4, "relu", width=256, n_pairs=256, n_nets=16, seed=1)
    assert relu[0] > 0.3                                   # same seed, same weights: only phi differs


def test_table3_against_monte_carlo():
    n, d = 48, 192
    mc = th.table3_mc(n=n, width=d, n_pairs=48, n_nets=8, seed=2)
    expected = {"MLP0": 1 / math.pi, "MLP0 -> MLP0": th.mlp0_cosine(2),
                "MLP0 -> Attn0": float(th.attn0_last_cosine(n)), "Attn0 -> MLP0": 1 / math.pi}
    for k, (m, se) in mc.items():
        assert abs(m - expected[k]) < 4 * se + 2 / d, (k, m, se, expected[k])


def test_attn0_last_cosine_values():
    assert float(th.attn0_last_cosine(1)) == pytest.approx(1 / math.pi)
    assert float(th.attn0_last_cosine(128)) == pytest.approx(128 / (128 + math.pi - 1), rel=1e-12)
    assert th.attn0_n_for(0.98) == pytest.approx(49 * (math.pi - 1), rel=1e-12)
    assert float(th.attn0_last_cosine(th.attn0_n_for(0.98))) == pytest.approx(0.98, rel=1e-12)


def _naive_intra(n, L):
    A = np.zeros((n, n))
    for t in range(n):
        for s in range(t + 1):
            A[t, s] = 1 / (t + 1)
    P = np.linalg.matrix_power(A, L)
    C = P @ P.T
    total = 0.0
    for s in range(n):
        for t in range(n):
            if s != t:
                total += C[s, t] / math.sqrt(C[s, s] * C[t, t])
    return total / (n * (n - 1)), P


@pytest.mark.parametrize("n,L", [(2, 1), (7, 1), (10, 2), (9, 5)])
def test_attn0_intra_exact_against_naive_loop(n, L):
    naive, _ = _naive_intra(n, L)
    assert th.attn0_intra_cosine(n, L) == pytest.approx(naive, rel=1e-12)
    if L == 1:    # one layer: corr(s, t) = sqrt(s / t)
        closed = sum(math.sqrt(min(s, t) / max(s, t)) for s in range(1, n + 1) for t in range(1, n + 1) if s != t)
        assert th.attn0_intra_cosine(n, 1) == pytest.approx(closed / (n * (n - 1)), rel=1e-12)


def test_attn0_intra_exact_against_monte_carlo():
    d = 256
    for n in (16, 128):
        mc, se = th.attn0_intra_cosine_mc(n, 4, width=d, n_seq=32, seed=3)
        for l in range(1, 5):
            # E[cosine] of d-dim Gaussian vectors at correlation rho is rho (1 - (1 - rho^2) / (2d) + ...)
            assert abs(mc[l - 1] - th.attn0_intra_cosine(n, l)) < 4 * se[l - 1] + 0.2 / d, (n, l)


def test_attn0_intra_continuum_limit():
    assert [th.attn0_intra_cosine_limit(L) for L in (1, 2, 3, 4)] == pytest.approx(
        [2 / 3, 8 / 9, 76 / 81, 388 / 405], rel=1e-12)
    for L in (1, 2, 3, 6):    # M_L is the mean of the continuum correlation over r ~ Uniform(0, 1)
        quad = integrate.quad(lambda r: float(th.attn0_intra_corr_limit(r, L)), 0, 1, limit=200)[0]
        assert th.attn0_intra_cosine_limit(L) == pytest.approx(quad, rel=1e-8)
    # the continuum correlation is the large-n limit of the exact one: compare at n = 2048, L = 1, 2
    n = 2048
    for L in (1, 2):
        P = th.attn0_matrix_power(n, L)
        for s, t in [(400, 1600), (1000, 2000), (100, 2000)]:
            corr = P[s - 1] @ P[t - 1] / (np.linalg.norm(P[s - 1]) * np.linalg.norm(P[t - 1]))
            assert corr == pytest.approx(float(th.attn0_intra_corr_limit(s / t, L)), abs=2e-3)
    # ... and it fails where ln n is not >> L (n = 1024, L = 8, all n^2 pairs: the paper's example)
    assert th.all_pairs_mean(th.attn0_intra_cosine(1024, 8), 1024) == pytest.approx(0.99533, abs=1e-5)
    assert th.all_pairs_mean(th.attn0_intra_cosine_limit(8), 1024) == pytest.approx(0.98195, abs=1e-5)


def test_attn0_variance_closed_forms_and_naive():
    t = np.arange(1, 300)
    assert th.attn0_variance(t, 1) == pytest.approx(1 / t, rel=1e-12)
    harmonic = np.cumsum(1 / t)
    assert th.attn0_variance(t, 2) == pytest.approx((2 * t - harmonic) / t ** 2, rel=1e-12)
    for L in (1, 3, 8):
        assert th.attn0_variance(1, L) == 1.0
    _, P = _naive_intra(12, 4)
    assert th.attn0_variance(np.arange(1, 13), 4) == pytest.approx((P ** 2).sum(axis=1), rel=1e-12)
    assert th.attn0_variance(1024, 2) == pytest.approx(1.946e-3, rel=1e-3)
    with pytest.raises(ValueError, match="1-indexed"):
        th.attn0_variance(0, 1)


def test_attn0_variance_against_monte_carlo():
    est, se = th.attn0_variance_mc(64, 3, width=32, n_seq=256, seed=4)
    for L in (1, 2, 3):
        exact = th.attn0_variance(np.arange(1, 65), L)
        z = np.abs(est[L - 1] - exact) / se[L - 1]
        # 64 positions per layer: 4.5 sigma keeps the family-wise false alarm rate < 1e-3
        assert z.max() < 4.5, (L, z.max())


def test_gelu_moments_and_cosine():
    for s in (0.02, 0.5, 2.0):
        quad_mean = integrate.quad(lambda u: th.gelu(s * u) * th.norm.pdf(u), -12, 12, epsabs=1e-300)[0]
        m, m2 = th.gelu_moments(s)
        assert m == pytest.approx(quad_mean, rel=1e-7)
        mc, se = th.gelu_mlp0_cosine_mc(s, width=1024, n_pairs=1000, seed=5)
        assert abs(mc - th.gelu_mlp0_cosine(s)) < 4 * se + 2 / 1024, (s, mc, se)
    # nearly odd near 0 (cosine ~ 4 s^2 / (2 pi)), ReLU-like for wide inputs (-> 1/pi)
    assert th.gelu_mlp0_cosine(0.02) == pytest.approx(4 * 0.02 ** 2 / (2 * math.pi), rel=0.02)
    assert th.gelu_mlp0_cosine(1e3) == pytest.approx(1 / math.pi, rel=1e-3)


@pytest.mark.parametrize("rho", [0.0, 0.5, -0.5])
def test_arccos_map_against_monte_carlo(rho):
    d = 1024
    mc, se = th.arccos_map_mc(rho, width=d, n_pairs=2000, seed=6)
    # the finite-width bias of a cosine of two independent-ish d-vectors is O(1/d); 5/(4 pi d) at rho = 0
    assert abs(mc - float(th.arccos_map(rho))) < 4 * se + 1 / d, (rho, mc, se)


def test_attn0_last_cosine_against_monte_carlo():
    for n, d in ((8, 256), (100, 256)):
        mc, se = th.attn0_last_cosine_mc(n, width=d, n_pairs=48, n_nets=6, seed=7)
        assert abs(mc - float(th.attn0_last_cosine(n))) < 4 * se + 2 / d, (n, mc, se)


def test_the_maths_needs_no_torch():
    """theory.py's closed forms and Monte Carlo run on numpy and scipy alone."""
    import subprocess
    import sys
    code = ("import sys\n"
            "class NoTorch:\n"                        # any import of torch fails, as on a machine without it
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch': raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "import theory\n"
            "print(round(theory.mlp0_cosine(1), 5), round(float(theory.attn0_last_cosine(128)), 4))\n"
            "print(round(float(theory.mlp0_cosine_mc(2, 'relu', 64, 32, 2, 0)[0][0]), 1))")
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.31831", "0.9835", "0.3"]


def test_the_tables_study_puts_each_form_beside_its_simulation(tmp_path):
    """python -m studies.theory_tables --quick, as a user runs it: each Monte Carlo column lies where its closed
    form says (ReLU MLP0 within its standard errors and finite-width bias, tanh at 0; Table 3; Attn0's exact
    intra-sequence cosine), and the exact A^L form parts from the continuum limit where ln n is not >> L."""
    import json
    from studies import theory_tables
    theory_tables.main(["--quick", "--width", "64", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "results.json").read_text())["theory"]
    p2 = r["prop2"]
    for layer in range(12):
        assert abs(p2["relu_mc"][layer] - p2["theory"][layer]) < 4 * p2["relu_se"][layer] + 2 * (layer + 1) / 64
        assert abs(p2["tanh_mc"][layer]) < 4 * p2["tanh_se"][layer] + 0.02
    t3 = r["table3"]
    for setting, (mc, se) in t3["mc"].items():
        assert abs(mc - t3["theory"][setting]) < 4 * se + 2 / 64, setting
    f8 = r["fig8"]["64"]
    assert all(abs(m - e) < 4 * s + 0.02 for m, e, s in zip(f8["mc"], f8["exact"], f8["se"]))
    gap = {(row["n"], row["layers"]): row["gap_ratio"] for row in r["continuum_limit"]}
    assert gap[(1024, 12)] > gap[(1024, 1)] and gap[(1024, 12)] > 3
    assert {f.name for f in tmp_path.glob("*.png")} >= {"fig5_mlp0_relu_tanh.png", "fig8_attn0_intra.png"}
