"""
The paper's closed forms, each beside a Monte Carlo simulation (Section 4, Appendix A).

The paper explains the born bias with two simplified blocks:
  MLP0   x -> phi(W x), W Gaussian, no residual, no norm            (Definition 1)
  Attn0  position t -> (1/t) sum_{s<=t} x_s, identity V and O       (Definition 3)
and four results, each a function here with a `_mc` twin that simulates it:
  Prop 2   inter-sequence cosine after L ReLU MLP0 layers: the arc-cosine map
           rho <- f(rho), from rho_0 = 0, rises 1/pi, 0.494, 0.605, ... -> 1; tanh (odd) stays 0.
  Prop 4   after a shared MLP0 (every token pair at cosine rho = 1/pi), Attn0's average of n
           tokens gives two sequences cosine n rho / (1 + (n-1) rho) -> 1: attention amplifies.
  Prop 5   L Attn0 layers contract tokens *within* a sequence: with A the causal averaging
           matrix, corr(s, t) = C_st / sqrt(C_ss C_tt), C = A^L (A^L)^T. The continuum form
           (n -> inf, Gamma functions) holds only while ln n >> L: it underestimates the
           contraction of real lengths badly; both are here, and where they part.
  Eq. 2    variance at position t after L Attn0 layers: sum_s (A^L)_ts^2, 1/t for L = 1.
Expected cosine = (uncentred) correlation as the width d -> inf; finite width adds O(1/d).

Needs numpy and scipy only: copy it anywhere. The tables that put every closed form beside its Monte Carlo
twin are a study, python -m studies.theory_tables; the probes run the same forms on real model blocks.
"""
import math

import numpy as np
from scipy import integrate
from scipy.special import comb, gammaln
from scipy.stats import norm

ODD_ACTIVATIONS = ("tanh",)
RHO1 = 1 / math.pi                          # cosine of two independent inputs after one ReLU MLP0


# ----------------------------------------------------------------------------- Prop 2: MLP0

def arccos_map(rho):
    """The ReLU arc-cosine correlation map (Prop 2): if pre-activations u, v are jointly Gaussian
    with equal variance and correlation rho, E[relu(u) relu(v)] / E[relu(u)^2] = f(rho)."""
    rho = np.clip(np.asarray(rho, dtype=float), -1.0, 1.0)
    return (np.sqrt(1 - rho ** 2) + (math.pi - np.arccos(rho)) * rho) / math.pi


def arccos_map_mc(rho: float, width: int = 1024, n_pairs: int = 2000, seed: int = 0):
    """Monte Carlo of arccos_map: pairs of width-dim Gaussian vectors with correlation rho per
    coordinate, through ReLU; mean and standard error of the cosine (finite width adds O(1/width))."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n_pairs, width))
    v = rho * u + math.sqrt(1 - rho ** 2) * rng.standard_normal((n_pairs, width))
    c = _cosines(np.maximum(u, 0), np.maximum(v, 0))
    return float(c.mean()), float(c.std(ddof=1) / math.sqrt(n_pairs))


def mlp0_cosine(layers: int, activation: str = "relu") -> float:
    """Expected inter-sequence cosine of two independent Gaussian inputs after `layers` MLP0 blocks.
    ReLU: f applied `layers` times to rho_0 = 0. An odd activation (tanh): u -> -u leaves the
    output distribution unchanged, so E[phi(u) phi(v)] = E[phi(u)] E[phi(v)] = 0 at every depth."""
    if activation in ODD_ACTIVATIONS:
        return 0.0
    if activation != "relu":
        raise ValueError(f"mlp0_cosine knows relu and odd activations {ODD_ACTIVATIONS}, not {activation!r}")
    rho = 0.0
    for _ in range(layers):
        rho = float(arccos_map(rho))
    return rho


def _phi(activation):
    return {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}[activation]


def mlp0_cosine_mc(layers: int, activation: str = "relu", width: int = 512, n_pairs: int = 256,
                   n_nets: int = 16, seed: int = 0):
    """Monte Carlo of mlp0_cosine for layers 1..`layers`: n_nets independent networks (W_l entries
    N(0, 1/width) -- the 1/width keeps tanh in its nonlinear range; ReLU is scale-free), each fed
    n_pairs pairs of independent N(0, I) inputs. The same weights serve relu and tanh for a given
    seed (the paper's footnote 4). Returns (mean, standard error) arrays of length `layers`; the
    error is taken across networks, since pairs through one network share its draw."""
    rng = np.random.default_rng(seed)
    phi = _phi(activation)
    x = rng.standard_normal((n_nets, n_pairs, width))
    y = rng.standard_normal((n_nets, n_pairs, width))
    per_net = np.empty((layers, n_nets))
    for layer in range(layers):
        W = rng.standard_normal((n_nets, width, width)) / math.sqrt(width)
        x, y = phi(x @ W), phi(y @ W)
        cos = _cosines(x, y)
        per_net[layer] = cos.mean(axis=1)
    return per_net.mean(axis=1), per_net.std(axis=1, ddof=1) / math.sqrt(n_nets)


# ----------------------------------------------------------------------------- Prop 4: MLP0 -> Attn0

def attn0_last_cosine(n, rho: float = RHO1):
    """Inter-sequence cosine of the last position after MLP0 -> Attn0 (Prop 4). Every token pair,
    within or across sequences, has correlation rho; the mean of n such unit-variance tokens has
    variance (1 + (n-1) rho) / n and cross-covariance rho with the other sequence's mean."""
    n = np.asarray(n, dtype=float)
    return n * rho / (1 + (n - 1) * rho)


def attn0_n_for(target: float, rho: float = RHO1) -> float:
    """The sequence length at which attn0_last_cosine reaches `target`: n = target (1 - rho) / (rho (1 - target))."""
    return target * (1 - rho) / (rho * (1 - target))


def attn0_last_cosine_mc(n: int, width: int = 256, n_pairs: int = 64, n_nets: int = 8, seed: int = 0):
    """Monte Carlo of attn0_last_cosine: (mean, standard error) of the MLP0 -> Attn0 cosine."""
    return table3_mc(n, width, n_pairs, n_nets, seed, settings=("MLP0 -> Attn0",))["MLP0 -> Attn0"]


TABLE3_SETTINGS = ("MLP0", "MLP0 -> MLP0", "MLP0 -> Attn0", "Attn0 -> MLP0")


def table3_mc(n: int = 128, width: int = 512, n_pairs: int = 128, n_nets: int = 8, seed: int = 0,
              settings=TABLE3_SETTINGS) -> dict:
    """Table 3 by simulation: two sequences of n iid Gaussian tokens through a shared first ReLU MLP0,
    then MLP0 (second layer) or Attn0 (last position = mean of the n tokens); and the order
    reversed, Attn0 -> MLP0. Returns {setting: (mean, standard error)} of the inter-sequence cosine
    of the last position."""
    rng = np.random.default_rng(seed)
    relu = _phi("relu")
    acc = {k: [] for k in settings}
    for _ in range(n_nets):
        W1 = rng.standard_normal((width, width)) / math.sqrt(width)
        W2 = rng.standard_normal((width, width)) / math.sqrt(width)
        a = rng.standard_normal((n_pairs, n, width))
        b = rng.standard_normal((n_pairs, n, width))
        ha, hb = relu(a @ W1), relu(b @ W1)               # the shared first MLP0, every token
        outputs = {
            "MLP0": lambda: (ha[:, -1], hb[:, -1]),
            "MLP0 -> MLP0": lambda: (relu(ha[:, -1] @ W2), relu(hb[:, -1] @ W2)),
            "MLP0 -> Attn0": lambda: (ha.mean(axis=1), hb.mean(axis=1)),
            "Attn0 -> MLP0": lambda: (relu(a.mean(axis=1) @ W1), relu(b.mean(axis=1) @ W1)),
        }
        for k in settings:
            acc[k].append(_cosines(*outputs[k]()).mean())
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(n_nets))) for k, v in acc.items()}


def _cosines(u, v):
    """Cosines of paired vectors along the last axis. A zero vector has no direction: a ReLU layer zeroes all of a
    vector's coordinates with probability 2^-width, so too narrow a Monte Carlo is refused here, never a NaN."""
    nu, nv = np.linalg.norm(u, axis=-1), np.linalg.norm(v, axis=-1)
    if not (nu > 0).all() or not (nv > 0).all():
        raise FloatingPointError(f"a Monte Carlo vector of width {u.shape[-1]} is all zeros, so its cosine is 0/0; "
                                 f"use a wider Monte Carlo")
    return (u * v).sum(-1) / (nu * nv)


# ----------------------------------------------------------------------------- Prop 5: intra-sequence

def attn0_matrix_power(n: int, layers: int) -> np.ndarray:
    """A^L for the n x n causal averaging matrix A (A_ts = 1/t for s <= t), by L running means of
    the identity: O(L n^2) instead of matrix products."""
    t = np.arange(1, n + 1, dtype=float)[:, None]
    M = np.eye(n)
    for _ in range(layers):
        M = np.cumsum(M, axis=0) / t
    return M


def mean_pairwise_cosine(unit_sum, n: int):
    """Mean cosine over the n (n - 1) ordered pairs i != j of n unit vectors, from their sum alone:
    sum_{i != j} u_i . u_j = |sum_i u_i|^2 - n. No n x n Gram matrix; vectorized over leading axes of
    unit_sum (numpy or torch)."""
    return ((unit_sum * unit_sum).sum(-1) - n) / (n * (n - 1))


def attn0_intra_cosine(n: int, layers: int) -> float:
    """Exact (finite n, infinite width) mean pairwise cosine over pairs i != j among the n tokens of
    one sequence after `layers` Attn0 blocks on iid isotropic Gaussian tokens. Output t is row t of
    A^L times the inputs, so corr(s, t) is the cosine of rows s and t of A^L."""
    M = attn0_matrix_power(n, layers)
    return float(mean_pairwise_cosine((M / np.linalg.norm(M, axis=1, keepdims=True)).sum(axis=0), n))


def attn0_intra_corr_limit(r, layers: int):
    """Continuum (n -> inf) correlation of positions s < t at ratio r = s / t after L Attn0 layers:
    sqrt(r) sum_j C(L-1, j) (2L-2-j)! / (2L-2)! ln(1/r)^j."""
    r = np.asarray(r, dtype=float)
    a = np.log(1 / r)
    L = layers
    terms = [comb(L - 1, j) * math.exp(gammaln(2 * L - 1 - j) - gammaln(2 * L - 1)) * a ** j for j in range(L)]
    return np.sqrt(r) * np.sum(terms, axis=0)


def attn0_intra_cosine_limit(layers: int) -> float:
    """Continuum mean off-diagonal cosine M_L = E_r[rho_L(r)], r = s/t ~ Uniform(0, 1) for a pair
    drawn uniformly: sum_j Gamma(L) Gamma(2L-1-j) / (Gamma(L-j) Gamma(2L-1)) (2/3)^(j+1).
    (Each term is the integral of sqrt(r) ln(1/r)^j, = j! (2/3)^(j+1).) M_1 = 2/3, M_2 = 8/9."""
    L = layers
    return float(sum(math.exp(gammaln(L) + gammaln(2 * L - 1 - j) - gammaln(L - j) - gammaln(2 * L - 1))
                     * (2 / 3) ** (j + 1) for j in range(L)))


def all_pairs_mean(off_diagonal_mean: float, n: int) -> float:
    """Mean over all n^2 pairs, the diagonal (cosine 1) included: S = 1/n + (1 - 1/n) M."""
    return 1 / n + (1 - 1 / n) * off_diagonal_mean


def attn0_intra_cosine_mc(n: int, layers: int, width: int = 256, n_seq: int = 32, seed: int = 0):
    """Monte Carlo of attn0_intra_cosine for layers 1..`layers`: n_seq sequences of n iid N(0, I_width)
    tokens through running means. Returns (mean, standard error across sequences) per layer."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1, dtype=float)[:, None]
    x = rng.standard_normal((n_seq, n, width))
    out = np.empty((layers, n_seq))
    for layer in range(layers):
        x = np.cumsum(x, axis=1) / t
        out[layer] = mean_pairwise_cosine((x / np.linalg.norm(x, axis=-1, keepdims=True)).sum(axis=1), n)
    return out.mean(axis=1), out.std(axis=1, ddof=1) / math.sqrt(n_seq)


# ----------------------------------------------------------------------------- Eq. 2: positional variance

def attn0_variance(t, layers: int, sigma2: float = 1.0):
    """Exact variance at 1-indexed position(s) t after `layers` Attn0 blocks, for zero-mean,
    uncorrelated inputs of variance sigma2: sigma2 * sum_s (A^L)_ts^2. The row e_t^T A^L is found by
    L reverse cumulative sums ((v A)_s = sum_{u>=s} v_u / u), O(t L) per position.
    L = 1: sigma2 / t; L = 2: sigma2 (2t - H_t) / t^2; position 1 keeps sigma2 at any depth."""
    ts = np.atleast_1d(np.asarray(t, dtype=int))
    if np.any(ts < 1):
        raise ValueError("positions t are 1-indexed: t >= 1")
    out = np.empty(len(ts))
    for i, ti in enumerate(ts):
        v = np.zeros(ti)
        v[-1] = 1.0
        u = np.arange(1, ti + 1, dtype=float)
        for _ in range(layers):
            v = np.cumsum((v / u)[::-1])[::-1]
        out[i] = sigma2 * np.sum(v ** 2)
    return out if np.ndim(t) else float(out[0])


def attn0_variance_mc(n: int, layers: int, width: int = 64, n_seq: int = 256, seed: int = 0):
    """Monte Carlo of attn0_variance: variance at each position 1..n after each layer 1..L, estimated
    over n_seq sequences x width coordinates of iid unit-variance inputs. Returns (L, n) arrays of
    estimates and standard errors (sequences are independent; coordinates too)."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1, dtype=float)[:, None]
    x = rng.standard_normal((n_seq, n, width))
    est, se = np.empty((layers, n)), np.empty((layers, n))
    for layer in range(layers):
        x = np.cumsum(x, axis=1) / t
        sq = (x ** 2).mean(axis=-1)                       # (n_seq, n): zero mean is known
        est[layer] = sq.mean(axis=0)
        se[layer] = sq.std(axis=0, ddof=1) / math.sqrt(n_seq)
    return est, se


# ----------------------------------------------------------------------------- Fig 6: LayerNorm and GELU

def gelu(z):
    return z * norm.cdf(z)


def gelu_moments(std: float):
    """Mean and second moment of GELU(z), z ~ N(0, std^2). The mean is closed form by Stein's lemma,
    E[z Phi(z)] = std^2 E[phi(z)] = std^2 / sqrt(2 pi (1 + std^2)); the second moment by quadrature."""
    mean = std ** 2 / math.sqrt(2 * math.pi * (1 + std ** 2))
    second = integrate.quad(lambda u: gelu(std * u) ** 2 * norm.pdf(u), -12, 12, epsabs=1e-300, epsrel=1e-10)[0]
    return mean, second


def gelu_mlp0_cosine(std: float) -> float:
    """Cosine of two independent inputs after one GELU MLP0 whose pre-activations have std `std`:
    E[g(u)] E[g(v)] / E[g(u)^2] = mean^2 / second moment. ReLU gives 1/pi at any std; GELU is
    nearly odd near 0 (GELU(z) = z/2 + z^2/sqrt(2 pi) + ...) so a small std engages no asymmetry."""
    mean, second = gelu_moments(std)
    return mean ** 2 / second


def gelu_mlp0_cosine_mc(std: float, width: int = 2048, n_pairs: int = 2000, seed: int = 0):
    rng = np.random.default_rng(seed)
    u, v = (gelu(std * rng.standard_normal((n_pairs, width))) for _ in range(2))
    c = _cosines(u, v)
    return float(c.mean()), float(c.std(ddof=1) / math.sqrt(n_pairs))
