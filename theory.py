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

    python theory.py            # every table, and figures under out/theory/ (< 1 min on 2 CPU cores)
    python theory.py --quick    # smaller Monte Carlo
"""
import math
import os
import time

if __name__ == "__main__":     # the command line follows common.py, which checks the requirements first (and
    import common              # noqa: F401 -- answers --help without them); the maths needs numpy, scipy only
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
        cos = (x * y).sum(-1) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1))
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
    return (u * v).sum(-1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))


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


# ----------------------------------------------------------------------------- Attn0 at GPT-2 init

def attn0_quality_at_init(preset: str = "gpt2-nano", seq_len: int = 256, batch: int = 2, seed: int = 42) -> dict:
    """How close real causal softmax attention is to Attn0 at GPT-2 init, per layer, on random tokens:
    the mean KL(attention row || uniform over the visible prefix), and the mean cosine between each
    head's softmax output sum_s p_ts v_s and its Attn0 output (1/t) sum_{s<=t} v_s."""
    import torch                                   # this check alone needs torch: the closed forms above do not
    from init import build
    from model import get_config, qkv_sizes
    model = build(get_config(preset), seed=seed).eval()
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (batch, seq_len), generator=g)
    H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
    t = torch.arange(1, seq_len + 1, dtype=torch.float32).view(seq_len, 1)
    kl, cos = [], []
    with torch.no_grad():
        out = model.trace(idx, hidden="all", attn_probs=True)
        for layer, (x, p) in enumerate(zip(out["hidden"], out["attn_probs"])):
            block = model.transformer.h[layer]
            v = block.attn.c_attn(block.ln_1(x)).split(qkv_sizes(cfg), dim=-1)[2]
            v = v.view(batch, seq_len, Hkv, hd).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
            plogp = torch.where(p > 0, p * p.clamp_min(1e-30).log(), torch.zeros(()))
            kl.append(float((plogp.sum(-1) + t.log().view(seq_len)).mean()))     # KL to uniform(1/t)
            soft, uniform = p @ v, v.cumsum(dim=2) / t
            cos.append(float(torch.nn.functional.cosine_similarity(soft, uniform, dim=-1).mean()))
    return dict(preset=preset, seq_len=seq_len, kl=kl, cosine=cos)


# ----------------------------------------------------------------------------- the script

def main(argv=None):
    from common import ArgumentParser, check_output, lock_dir, print_table, seed_int, update_results
    parser = ArgumentParser(prog="theory.py", description="Every closed form of the paper beside Monte Carlo; "
                            "figures under --out.")
    parser.add_argument("--quick", action="store_true", help="smaller Monte Carlo, no GPT-2 init check")
    parser.add_argument("--width", type=int, default=None, help="Monte Carlo width (default 512, quick 256)")
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--out", default="out/theory")
    args = parser.parse_args(argv)
    if args.width is not None and not 2 <= args.width <= 4096:
        parser.error(f"--width must lie in [2, 4096] (the Monte Carlo's memory grows as its square), got {args.width}")
    check_output(args.out)
    t_start = time.time()
    with lock_dir(args.out):
        res = run_all(args, print_table)
        update_results(os.path.join(args.out, "results.json"), dict(theory=res))
    print(f"\nwrote {args.out}/results.json and figures, {time.time() - t_start:.1f} s")


def run_all(args, print_table) -> dict:
    """Every table of the script, printed and returned; figures under args.out."""
    width = args.width or (256 if args.quick else 512)
    nets = 8 if args.quick else 16
    res = {"width": width}

    L = 12
    print(f"Prop 2 / Fig 5: inter-sequence cosine after L MLP0 layers "
          f"(Monte Carlo: width {width}, {nets} nets x 256 pairs)")
    relu_mc, relu_se = mlp0_cosine_mc(L, "relu", width, 256, nets, args.seed)
    tanh_mc, tanh_se = mlp0_cosine_mc(L, "tanh", width, 256, nets, args.seed)
    theory = [mlp0_cosine(l) for l in range(1, L + 1)]
    print_table([dict(L=l + 1, relu_theory=f"{theory[l]:.5f}", relu_mc=f"{relu_mc[l]:.5f} +- {relu_se[l]:.5f}",
                      tanh_theory="0", tanh_mc=f"{tanh_mc[l]:.5f} +- {tanh_se[l]:.5f}") for l in range(L)])
    res["prop2"] = dict(theory=theory, relu_mc=relu_mc.tolist(), relu_se=relu_se.tolist(),
                        tanh_mc=tanh_mc.tolist(), tanh_se=tanh_se.tolist(),
                        layer1_finite_width=RHO1 + 5 / (4 * math.pi * width))

    n = 128
    print(f"\nTable 3 / Prop 4: inter-sequence cosine of the last position, n = {n}")
    t3 = table3_mc(n, width=min(width, 256), n_pairs=64 if args.quick else 128, n_nets=nets // 2, seed=args.seed)
    t3_theory = {"MLP0": RHO1, "MLP0 -> MLP0": float(arccos_map(RHO1)),
                 "MLP0 -> Attn0": float(attn0_last_cosine(n)), "Attn0 -> MLP0": RHO1}
    print_table([dict(setting=k, theory=f"{t3_theory[k]:.4f}", monte_carlo=f"{t3[k][0]:.4f} +- {t3[k][1]:.4f}",
                      paper=paper) for k, paper in zip(t3, ("0.31", "0.49", "0.98", "-"))])
    n98 = attn0_n_for(0.98)
    print(f"MLP0 -> Attn0 reaches 0.98 at n = 49 (pi - 1) = {n98:.1f}; at n = 128 it is {attn0_last_cosine(128):.4f}.")
    print("Order matters: averaging independent Gaussian tokens leaves two sequences independent, so an MLP0\n"
          "after Attn0 starts again from rho = 0 (-> 1/pi); only once the MLP has given every token a shared\n"
          "component does the average keep that component and shrink the token-specific rest by 1/n.")
    res["table3"] = dict(n=n, theory=t3_theory, mc=t3, n_for_098=n98)

    print("\nFig 6: GELU's asymmetry is engaged only by a wide input (one MLP0 layer, pre-activation std s)")
    fig6 = []
    for s in (0.01, 0.02, 0.1, 0.55, 1.0, 3.0):
        m, m2 = gelu_moments(s)
        mc, se = gelu_mlp0_cosine_mc(s, width=1024, n_pairs=500 if args.quick else 2000, seed=args.seed)
        fig6.append(dict(std=s, mean=m, sd=math.sqrt(m2 - m * m), cos=gelu_mlp0_cosine(s), cos_mc=mc, cos_se=se))
    print_table([dict(s=r["std"], mean=f"{r['mean']:.2e}", sd=f"{r['sd']:.2e}",
                      mean_over_sd=f"{r['mean'] / r['sd']:.4f}", cos_theory=f"{r['cos']:.5f}",
                      cos_mc=f"{r['cos_mc']:.5f} +- {r['cos_se']:.5f}") for r in fig6])
    print("In gpt2-nano, LayerNorm gives the MLP input unit variance, so the GELU pre-activation has std\n"
          f"0.02 sqrt(768) = {0.02 * math.sqrt(768):.2f}; without it the input keeps the embedding's 0.02 and the\n"
          f"pre-activation std is 0.02 x 0.02 x sqrt(768) = {0.02 * 0.02 * math.sqrt(768):.3f}: "
          f"GELU is then nearly odd.")
    res["fig6"] = fig6

    print("\nProp 5 / Fig 8: intra-sequence cosine (pairs i != j) after L Attn0 layers")
    fig8 = {}
    for n_tok in (64, 1024):
        mc, se = attn0_intra_cosine_mc(n_tok, L, width=128, n_seq=8 if args.quick else 16, seed=args.seed)
        exact = [attn0_intra_cosine(n_tok, l) for l in range(1, L + 1)]
        limit = [attn0_intra_cosine_limit(l) for l in range(1, L + 1)]
        fig8[n_tok] = dict(exact=exact, continuum=limit, mc=mc.tolist(), se=se.tolist())
        print_table([dict(n=n_tok, L=l + 1, exact=f"{exact[l]:.5f}", continuum=f"{limit[l]:.5f}",
                          monte_carlo=f"{mc[l]:.5f} +- {se[l]:.5f}") for l in range(L)])
    res["fig8"] = fig8

    print("\nWhere the continuum limit fails: 1 - S over all n^2 pairs, exact vs continuum (ln n >> L needed)")
    ns, Ls = (64, 256, 1024, 4096), (1, 2, 4, 8, 12)
    limit_table = []
    for n_tok in ns:
        for l in Ls:
            ex = all_pairs_mean(attn0_intra_cosine(n_tok, l), n_tok)
            co = all_pairs_mean(attn0_intra_cosine_limit(l), n_tok)
            limit_table.append(dict(n=n_tok, layers=l, exact=ex, continuum=co, gap_ratio=(1 - co) / (1 - ex)))
    print_table([dict(n=n_tok, ln_n=f"{math.log(n_tok):.2f}", **{f"L={r['layers']}": f"{1 - r['exact']:.2e} / "
                                                                  f"{1 - r['continuum']:.2e}"
                                                                  for r in limit_table if r["n"] == n_tok})
                 for n_tok in ns])
    res["continuum_limit"] = limit_table

    print("\nEq. 2 / Fig 9: variance at position t after L Attn0 layers (unit-variance inputs)")
    n_var = 256
    est, se = attn0_variance_mc(n_var, 4, width=64, n_seq=64 if args.quick else 256, seed=args.seed)
    print_table([dict(t=t, **{f"L={l} exact / MC": f"{attn0_variance(t, l):.5f} / {est[l - 1, t - 1]:.5f}"
                              for l in (1, 2, 4)}) for t in (1, 2, 8, 64, 256)])
    print(f"t = 1024: L=2 {attn0_variance(1024, 2):.4e}, L=4 {attn0_variance(1024, 4):.4e}, "
          f"L=8 {attn0_variance(1024, 8):.4e} "
          f"(naive 1/t^L: {1024.0 ** -2:.1e}, {1024.0 ** -4:.1e}, {1024.0 ** -8:.1e})")
    res["fig9"] = dict(n=n_var, exact={l: attn0_variance(np.arange(1, n_var + 1), l).tolist() for l in (1, 2, 4)},
                       mc={l: est[l - 1].tolist() for l in (1, 2, 4)})

    if not args.quick:
        q = attn0_quality_at_init()
        res["attn0_at_init"] = q
        print(f"\nAttn0 at GPT-2 init ({q['preset']}, n = {q['seq_len']}, random tokens): per layer")
        print("KL(row || uniform): " + " ".join(f"{k:.3f}" for k in q["kl"]))
        print("cos(softmax, Attn0): " + " ".join(f"{c:.3f}" for c in q["cosine"]))

    _figures(args.out, res, L)
    return res


def _figures(out, res, L):
    from common import figure, save_figure          # the plotting helpers every script shares
    layers = np.arange(1, L + 1)
    save = lambda fig, name: save_figure(fig, os.path.join(out, name))

    p2 = res["prop2"]
    plt, fig, ax = figure(figsize=(5.5, 4))
    ax.plot(layers, p2["theory"], "b-", label="ReLU, arc-cosine map (Prop 2)")
    ax.errorbar(layers, p2["relu_mc"], yerr=p2["relu_se"], fmt="bo", ms=4, label=f"ReLU MLP0, MC (d={res['width']})")
    ax.plot(layers, np.zeros(L), "r--", label="tanh, theory (0)")
    ax.errorbar(layers, p2["tanh_mc"], yerr=p2["tanh_se"], fmt="rs", ms=4, label="tanh MLP0, MC (same weights)")
    ax.set_xlabel("MLP0 layers")
    ax.set_ylabel("inter-sequence cosine")
    ax.set_title("Fig 5: asymmetric activations contract")
    ax.legend(fontsize=8)
    save(fig, "fig5_mlp0_relu_tanh.png")

    plt, fig, ax = figure(figsize=(5.5, 4))
    for n_tok, style in zip(res["fig8"], ("C0", "C1")):
        f8 = res["fig8"][n_tok]
        ax.plot(layers, f8["exact"], "-", color=style, label=f"n={n_tok} exact (A^L)")
        ax.plot(layers, f8["continuum"], ":", color=style,
                label=f"n={n_tok} continuum (Gamma)" if n_tok == 64 else None)
        ax.errorbar(layers, f8["mc"], yerr=f8["se"], fmt="o", color=style, ms=4, label=f"n={n_tok} Monte Carlo")
    ax.set_xlabel("Attn0 layers")
    ax.set_ylabel("intra-sequence cosine (i != j)")
    ax.set_title("Fig 8: attention contracts a sequence")
    ax.legend(fontsize=8)
    save(fig, "fig8_attn0_intra.png")

    f9 = res["fig9"]
    t = np.arange(1, f9["n"] + 1)
    plt, fig, ax = figure(figsize=(5.5, 4))
    for l, c in zip((1, 2, 4), ("C0", "C1", "C2")):
        ax.loglog(t, np.sqrt(f9["exact"][l]), "-", color=c, label=f"L={l} exact std")
        ax.loglog(t, np.sqrt(f9["mc"][l]), ".", color=c, ms=3, label=f"L={l} Monte Carlo")
    ax.loglog(t, 1 / np.sqrt(t), "k--", lw=0.8, label="1/sqrt(t)")
    ax.set_xlabel("position t")
    ax.set_ylabel("std of Attn0 output")
    ax.set_title("Fig 9: the first position is a variance outlier")
    ax.legend(fontsize=8)
    save(fig, "fig9_position_variance.png")


if __name__ == "__main__":
    from common import run_script                   # exit codes and one-line errors, as in every script
    run_script(main, "theory.py")
