"""
seedprint.py: the lineage test -- do two models share an initialization? (paper Section 6.1)

A model's birth bias (Sections 2-5) is set by its init seed and survives training, so checkpoints of
one lineage keep ranking random inputs alike on a few "identity" dimensions of their final hidden
state, while independently initialized models do not.

  1. fingerprint  H (N x d): the final-norm state of the last token on N random token sequences, the
                  same ids for both models (below the smaller vocabulary).
  2. identity set S: the k dimensions of smallest mean output, intersected across the two models.
  3. cross matrix C[j, l]: Kendall tau-b, across the N inputs, between dimension j of A and dimension l
                  of B, after the reference's softmax(H[:, S] / 10) per input. The paper's statistic is
                  the mean of diag(C).
  4. verdict:     the dimension-permutation test. If B's init is independent of A's, B's residual
                  coordinates are exchangeable with respect to A: relabelling them leaves the joint law
                  of (A, B) unchanged. mean(diag C) is then one draw from its values over the permutations
                  of B's coordinates within S; Hoeffding's combinatorial central limit theorem gives that
                  distribution's mean and variance in closed form -> z -> p_perm. Under the same H0 the
                  overlap |S| is hypergeometric and independent of p_perm; Fisher's method combines the two.
                  Related when the combined p < alpha = 0.01.

Where the H0 breaks: anything that unrelated models share *coordinate by coordinate* -- a shared token
embedding table (init.py's embed_seed), Gaussian input embeddings fed past the table, a fixed position
table -- makes coordinates align by construction. A deliberate permutation of B's basis, signs flipped or not,
hides a true lineage (a false negative, never a false positive); the aligned mode (--align on) matches B's
coordinates to A's first (by the token tables where they agree unmistakably, else on held-out inputs) and sees
through it; its calibration is measured (README).

The reference implementation's tests stay as reference outputs, not the verdict: the analytic z of mean
tau (p_z = 2 sf(z), as the reference computes it: a one-sided test at alpha/2, not a two-sided p), and a
one-sided t-test and Mann-Whitney U against taus of the same pipeline on independent Gaussian matrices.
Unrelated models are two random functions of the *same* inputs, so their per-dimension taus spread far
wider than any such null allows: on real models those tests reject unrelated pairs far more often than
alpha (README).

    python seedprint.py A B                  # two train.py checkpoints or Hugging Face directories
    python seedprint.py --exp table4a        # also table4b, table4c, table5, fig11, fpr, baselines, all
    python seedprint.py --exp speed --model llama2-7b --seq_len 1024 --device cuda   # seconds per 7B fingerprint
"""
import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Progress, add_config_flags, add_device_flags, atomic_write,
                    check_dtype_runs, check_file_weights_finite, check_output, config_overrides, figure, load_model,
                    lock_dir, parse_bool, peak_flops, print_table, random_batches, read_model_config, resolve_device,
                    run_script, save_checkpoint, save_figure, seed_int, update_results)
from model import (GPT, GPTConfig, LLAMA_KNOBS, forward_flops, get_config, qkv_sizes, read_checkpoint, read_hf_dir,
                   safetensors)
import numpy as np
import torch
import torch.nn.functional as F
from scipy import optimize, stats

import train
from init import build

ALPHA = 0.01
# The matched test counts only when its matched mean tau reaches this floor: twice the largest matched tau of the
# unrelated pairs of --exp aligned's fit seeds (+0.030, models trained from other inits on the same data), rounded
# up. On its test seeds same-data pairs reached at most +0.042, continuations at least +0.199 (docs/seedprint.md).
ALIGNED_TAU_FLOOR = 0.06
# A match fit on the token tables (whitened, see table_match) is trusted from this mean |r| of its matched columns
# (table_gate): a descendant's columns are its base's, moved (|r| 0.99 in --exp aligned's models, 0.75 for rows
# trained 1,500 steps), an independent table's best match is chance (0.02 at 25,000 rows, 0.24 at 128), and so is a
# copy of the same table in a rotated basis (QuaRot; or what same-data training learns, in another basis).
TABLE_MATCH_R = 0.5
EXPERIMENTS = ("table4a", "table4b", "table4c", "table5", "fig11", "fpr", "baselines")
# not in --exp all: they need --base, run many inits or models, or time
OTHER_EXPERIMENTS = ("derivatives", "inits", "speed", "aligned")


# ----------------------------------------------------------------------------- 2-4. the statistic
# numpy and scipy only: seedprint_test runs on fingerprints saved anywhere, by anything.

def identity_dims(H: np.ndarray, k: int, rank_by: str = "smallest") -> np.ndarray:
    """The k dimensions of H's mean output ranked by `rank_by`: smallest (the reference), largest, abs."""
    m = H.mean(axis=0)
    key = {"smallest": m, "largest": -m, "abs": -np.abs(m)}[rank_by]
    return np.sort(np.argsort(key, kind="stable")[:k])


def identity_set(HA: np.ndarray, HB: np.ndarray, k: int, rank_by: str = "smallest", set_mode: str = "coset"):
    """(S, k used): A's identity dimensions, intersected with B's ("coset") or A's alone ("base").
    k is capped at half the width, so that "the k smallest" still selects."""
    k = min(k, HA.shape[1] // 2)
    S = identity_dims(HA, k, rank_by)
    if set_mode == "coset":
        S = np.intersect1d(S, identity_dims(HB, k, rank_by))
    return S, k


def softmax_rows(X: np.ndarray, temperature: float = 10.0) -> np.ndarray:
    Z = X.astype(np.float64) / temperature
    Z = np.exp(Z - Z.max(axis=1, keepdims=True))
    return Z / Z.sum(axis=1, keepdims=True)


def kendall_tau_matrix(X: np.ndarray, Y: np.ndarray, chunk: int = 16) -> np.ndarray:
    """C[j, l] = Kendall tau-b between X[:, j] and Y[:, l] across the N rows, for every j and l at once.
    tau-b = sum over pairs i < k of sign(x_i - x_k) sign(y_i - y_k) / sqrt(untied pairs of x * of y),
    so the numerator of every (j, l) is one matrix product of pair-sign features. They are built a chunk
    of rows at a time (comparisons into int8: fast; ties give 0), and the products are exact: +-1 and 0
    summed in float32 stay below 2^24 within a chunk."""
    X, Y = np.asarray(X), np.asarray(Y)
    N = len(X)
    num = np.zeros((X.shape[1], Y.shape[1]))
    pair_signs = lambda Z, lo, hi: (np.greater(Z[lo:hi, None], Z[None, hi:]).view(np.int8)
                                    - np.less(Z[lo:hi, None], Z[None, hi:]).view(np.int8)
                                    ).reshape(-1, Z.shape[1]).astype(np.float32)
    for lo in range(0, N - 1, chunk):
        hi = min(lo + chunk, N)
        i, k = np.triu_indices(hi - lo, 1)              # pairs inside the chunk ...
        num += np.sign(X[lo + i] - X[lo + k]).T @ np.sign(Y[lo + i] - Y[lo + k])
        if hi < N:                                      # ... and of the chunk with every later row
            num += pair_signs(X, lo, hi).T @ pair_signs(Y, lo, hi)
    den = np.sqrt(np.outer(untied_pairs(X), untied_pairs(Y)))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)     # a constant column ranks nothing: 0


def untied_pairs(Z: np.ndarray) -> np.ndarray:
    """Per column, the number of pairs i < k with Z[i] != Z[k] (tau-b's n0 - n1)."""
    N = len(Z)
    counts = [np.unique(Z[:, j], return_counts=True)[1] for j in range(Z.shape[1])]
    return np.array([N * (N - 1) / 2 - (c * (c - 1) / 2).sum() for c in counts])


def permutation_test(C: np.ndarray):
    """(z, one-sided p) of sum(diag C) against its distribution over permutations pi of C's columns,
    T(pi) = sum_j C[j, pi(j)]. Hoeffding's combinatorial CLT: E T = sum(C) / n, and
    Var T = sum_{j,l} (C[j,l] - row mean_j - column mean_l + grand mean)^2 / (n - 1); z is normal as n grows."""
    n = len(C)
    if n < 2:
        return 0.0, 1.0
    d = C - C.mean(axis=1, keepdims=True) - C.mean(axis=0, keepdims=True) + C.mean()
    sd = math.sqrt((d ** 2).sum() / (n - 1))
    z = (np.trace(C) - C.sum() / n) / sd if sd > 0 else 0.0
    return float(z), float(stats.norm.sf(z))


def permutation_p_monte_carlo(C: np.ndarray, draws: int = 20_000, seed: int = 0) -> float:
    """The permutation test's p by sampling instead of the closed form: (1 + #{pi: T(pi) >= T(id)}) / (1 + draws)
    over uniformly random permutations pi of C's columns, exact for any C (no normal approximation). For the
    calibration study: is a false positive's small p_perm the closed form's tail, or the data?"""
    n, rng, hits = len(C), np.random.default_rng(seed), 0
    observed = np.trace(C) - 1e-12 * max(1.0, abs(np.trace(C)))       # ties count as at least as large
    for lo in range(0, draws, 1000):
        perms = np.argsort(rng.random((min(1000, draws - lo), n)), axis=1)
        hits += int((C[np.arange(n), perms].sum(axis=1) >= observed).sum())
    return (1 + hits) / (1 + draws)


def overlap_p(overlap: int, d: int, k: int, log: bool = False) -> float:
    """P(|S| >= overlap) when B's k identity dimensions are a uniformly random k-subset of d, as H0's
    exchangeability makes them: hypergeometric. log=True: its logarithm, exact where p underflows."""
    return float((stats.hypergeom.logsf if log else stats.hypergeom.sf)(overlap - 1, d, k, k))


@dataclass
class SeedPrintResult:
    related: bool           # the verdict: p < alpha
    p: float                # Fisher's combination of p_perm and p_overlap (coset mode), else p_perm; aligned: the union
    p_perm: float           # dimension-permutation test of mean(diag C)
    p_overlap: float        # hypergeometric p of the identity set's size (1 in base mode)
    mean_tau: float         # mean(diag C): the paper's statistic
    z_perm: float
    n_identity: int         # |S|
    k: int
    n_inputs: int
    p_raw: float = float("nan")  # p before the Holm adjustment across pairs (compare_many)
    aligned: bool = False   # the aligned verdict: the exact test, or the test after matching B's coordinates to A's
    signed: bool = False    # the alignment could negate coordinates (RMSNorm models), not only move them
    moved: int = 0          # how many of B's coordinates the alignment moved or negated (0: B was in A's basis)
    p_exact: float = float("nan")     # aligned mode: the exact test's combined p (the fields above describe it)
    p_aligned: float = float("nan")   # ... the combined p of the same test after the alignment
    tau_aligned: float = float("nan")  # ... and its matched mean tau, which must reach ALIGNED_TAU_FLOOR
    n_identity_aligned: int = 0
    matched_on: str = ""    # ... what the match was fit on: "token table" (trusted: table_gate) or "held-out inputs"
    table_fit: float = float("nan")   # ... the token-table match's mean |r| (nan: no tables)
    shared: str = ""        # what the two models' own records say they share by construction (shared_by_construction)
    p_z: float = float("nan")   # reference outputs, not the verdict: analytic 2 sf(z) (one-sided at alpha/2),
    p_t: float = float("nan")   # one-sided t-test and Mann-Whitney U against independent-Gaussian taus
    p_u: float = float("nan")

    def explain(self) -> str:
        """The verdict in one line: which test, on which set, how many dimensions, and what the models' records
        say they share by construction."""
        what = "RELATED (shared initialization)" if self.related else "unrelated"
        exact = (f"dimension-permutation test of mean tau {self.mean_tau:+.4f} over |S| = {self.n_identity} identity "
                 f"dimensions (k = {self.k}), N = {self.n_inputs}: p_perm {self.p_perm:.3g}, p_overlap "
                 f"{self.p_overlap:.3g}, combined p {self.p_exact if self.aligned else self.p:.3g}")
        if not self.aligned:
            line = f"{what}: {exact} vs alpha {ALPHA}"
        else:
            floor = "reaches" if self.tau_aligned >= ALIGNED_TAU_FLOOR else "is below"
            r = "|r|" if self.signed else "r"
            if self.matched_on == "token table":
                how = f"by their whitened token tables (matched columns' mean {r} {self.table_fit:.3f}, trusted)"
            else:
                how = "on held-out inputs" + ("" if math.isnan(self.table_fit) else
                                              f" (the token tables' match, mean {r} {self.table_fit:.3f}, untrusted)")
            line = (f"{what}: aligned verdict, p {self.p:.3g} vs alpha {ALPHA} (twice the smaller of two tests): "
                    f"the exact {exact}; after matching B's coordinates to A's{' with signs' if self.signed else ''} "
                    f"{how}, {self.moved} moved: matched mean tau {self.tau_aligned:+.4f} over |S| = "
                    f"{self.n_identity_aligned}, p {self.p_aligned:.3g}")
            if self.matched_on != "token table":
                line += (f", which counts only if the tau {floor} the floor {ALIGNED_TAU_FLOOR} (models trained "
                         f"from other inits on the same data stay below it)")
        return line + (f". By construction, {self.shared}" if self.shared else "")


def check_options(k: int = 400, rank_by: str = "smallest", set_mode: str = "coset", temperature: float = 10.0,
                  alpha: float = ALPHA) -> None:
    """Every statistic option, checked before any model is run."""
    if int(k) < 2:
        raise ValueError(f"k (identity dimensions per model) must be at least 2, got {k}")
    if rank_by not in ("smallest", "largest", "abs"):
        raise ValueError(f"rank_by must be smallest, largest or abs, got {rank_by!r}")
    if set_mode not in ("coset", "base"):
        raise ValueError(f"set_mode must be 'coset' or 'base', got {set_mode!r}")
    if not temperature > 0 or not 0 < alpha < 1:
        raise ValueError(f"need temperature > 0 and 0 < alpha < 1, got {temperature}, {alpha}")


def align_coordinates(XA: np.ndarray, XB: np.ndarray, signed: bool = True):
    """(match, sign, fit): B's coordinate match[j], times sign[j] (+-1), plays A's coordinate j; fit is the mean
    correlation of the matched pairs (signed: of their |r|; unsigned: of their r). XA, XB (n x d): the two models'
    coordinates observed n times, as held-out fingerprints (inputs x coordinates) or token-table rows (tokens x
    coordinates).
    signed=True: the signed permutation maximizing the summed |Pearson correlation| of matched pairs, by the
    assignment algorithm, each sign that of its pair's correlation. Signed, because for an RMSNorm (or norm-free)
    model every signed permutation of the residual basis is function-preserving (an orthogonal map that keeps
    the coordinates: RMS(x) ignores signs, and the gains move with their coordinates), and x -> -x alone hides a
    lineage from the exact verdict. signed=False (LayerNorm models, whose mean does not commute with a sign
    flip): the permutation maximizing the summed correlation, every sign +1. Fit on held-out inputs or tokens,
    never on the test's: under H0 the match is then mostly fitted noise, independent of the test inputs (README:
    its measured FPR)."""
    za = (XA - XA.mean(0)) / np.maximum(XA.std(0), 1e-12)
    zb = (XB - XB.mean(0)) / np.maximum(XB.std(0), 1e-12)
    corr = za.T @ zb / len(XA)
    rows, match = optimize.linear_sum_assignment(np.abs(corr) if signed else corr, maximize=True)
    match = match[np.argsort(rows)]
    r = corr[np.arange(len(match)), match]
    if not signed:
        return match, np.ones(len(match)), float(r.mean())
    return match, np.where(r < 0, -1.0, 1.0), float(np.abs(r).mean())


def table_gate(rows: int, d: int) -> float:
    """The mean |r| a token-table match must reach to be trusted: TABLE_MATCH_R, or, where the table has few rows,
    the largest |r| that any two independent columns reach except with probability about 1e-3 (r sqrt(rows) taken
    as standard normal, P(|z| > t) <= 2 exp(-t^2 / 2), over all d^2 pairs; spot-checked by Monte Carlo in the
    tests), whichever is larger. Above 1 (fewer than about 35 rows at width 32) no match is trusted."""
    return max(TABLE_MATCH_R, math.sqrt(2 * math.log(2000 * d * d) / max(rows, 1)))


def whiten(X: np.ndarray) -> np.ndarray:
    """X (rows x d) with its columns centred and decorrelated (ZCA: X C^-1/2, C the columns' covariance). ZCA
    commutes with every orthogonal map of the columns, signed permutations included: whiten(X Q) = whiten(X) Q."""
    X = X - X.mean(0)
    w, V = np.linalg.eigh(X.T @ X / len(X))
    return X @ (V / np.sqrt(np.maximum(w, 1e-12 * w.max()))) @ V.T


def table_match(TA: np.ndarray, TB: np.ndarray, signed: bool = True):
    """align_coordinates on the two token tables' held-out rows, each whitened first, and whether the match is
    trusted: (match, sign, fit, trusted); fit nan and untrusted where the rows are fewer than the width (too few to
    whiten) or a table is constant. Why whiten: a trained table carries a few strong directions (token
    frequency and the like) that every column loads on, so two models trained on the same data would have
    columns that correlate through them whatever their bases (measured: bytes, rows trained 1,500 steps, mean |r|
    0.31 raw, 0.24 whitened, its chance level). Whitened, only a map that moves whole columns -- a descendant's
    signed permutation -- correlates columns one to one; a rotation of the same table spreads each over all."""
    rows, d = TA.shape
    WA, WB = (whiten(T.astype(np.float64)) if rows >= d and T.std() > 0 else None for T in (TA, TB))
    if WA is None or WB is None:
        return None, None, float("nan"), False
    match, sign, fit = align_coordinates(WA, WB, signed)
    return match, sign, fit, fit >= table_gate(rows, d)


def signs_keep_function(*configs) -> bool:
    """Whether a sign flip of residual coordinates is function-preserving for every model given (None: a model
    whose architecture is unknown, e.g. a fingerprint array, taken as RMSNorm): not with LayerNorm."""
    return all(c is None or c.norm != "layernorm" for c in configs)


def seedprint_test(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                   temperature: float = 10.0, alpha: float = ALPHA, reference: bool = True,
                   align=None, signed: bool = True, tables=None) -> SeedPrintResult:
    """Steps 2-4 on the fingerprints of two models on the same N inputs. align=(HA_hold, HB_hold): the two models'
    fingerprints on other, held-out inputs, and the aligned verdict: the exact test, and the same test after B's
    coordinates are matched to A's (a signed permutation, or for LayerNorm models, signed=False, a plain one).
    The match comes from one of two places:
      - tables=(TA, TB): the two token tables' rows of held-out tokens (held_out_rows), whitened (table_match). A
        descendant's columns are its base's, moved, so this match recovers the basis; it is trusted where its mean
        |r| reaches table_gate, far above what independent tables reach by chance (measured in --exp aligned on
        models trained from other inits on the same data: at most 0.24 on the rows held out, 0.24 on the rows
        trained), so its p counts without a floor. A trusted match is used alone: one that is partly wrong costs
        power, never calibration;
      - otherwise (no tables, or an untrusted match: a rotated basis, models trained from other inits) the held-out
        fingerprints. That match is fit to B, so its p holds no longer: models trained from other inits on the same
        data share coordinate roles that it finds, and at N = 2000 a matched tau of +0.01 is already
        "significant". What tells a lineage apart is the size of the agreement: a descendant keeps a large share of
        its base's ranking, same-data models a small one. So this test counts only where its matched mean tau
        reaches ALIGNED_TAU_FLOOR (fit and tested in --exp aligned).
    The verdict is their union at alpha / 2 each: p = min(1, 2 min(p_exact, p_aligned)), so it never misses what
    the exact test sees."""
    check_options(k, rank_by, set_mode, temperature, alpha)
    if HA.shape != HB.shape:
        raise ValueError(f"fingerprints differ in shape {HA.shape} vs {HB.shape}: the models must have the same "
                         f"width and see the same N inputs")
    exact = permutation_verdict(HA, HB, k, rank_by, set_mode, temperature, alpha, reference)
    if align is None:
        return exact
    if align[0].shape[1] != HA.shape[1] or align[1].shape != align[0].shape:
        raise ValueError("the held-out fingerprints must have the test fingerprints' width, and the same shape")
    on, table_fit = "held-out inputs", float("nan")
    if tables is not None and tables[0] is not None and tables[1] is not None:
        if tables[0].shape != tables[1].shape or tables[0].shape[1] != HA.shape[1]:
            raise ValueError(f"the token tables' held-out rows differ in shape ({tables[0].shape} vs "
                             f"{tables[1].shape}) or from the fingerprints' width {HA.shape[1]}")
        match, sign, table_fit, trusted = table_match(*tables, signed=signed)
        on = "token table" if trusted else on
    if on == "held-out inputs":
        match, sign, _ = align_coordinates(*align, signed=signed)
    matched = permutation_verdict(HA, HB[:, match] * sign, k, rank_by, set_mode, temperature, alpha, False)
    counted = matched.p if on == "token table" or matched.mean_tau >= ALIGNED_TAU_FLOOR else 1.0
    p = min(1.0, 2 * min(exact.p, counted))
    return dataclasses.replace(exact, related=bool(p < alpha), p=p, aligned=True, signed=signed,
                               moved=int(((match != np.arange(len(match))) | (sign < 0)).sum()), p_exact=exact.p,
                               p_aligned=matched.p, tau_aligned=matched.mean_tau,
                               n_identity_aligned=matched.n_identity, matched_on=on, table_fit=table_fit)


def permutation_verdict(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest",
                        set_mode: str = "coset", temperature: float = 10.0, alpha: float = ALPHA,
                        reference: bool = True) -> SeedPrintResult:
    """The exact verdict on two fingerprints in their own coordinates: the permutation test of mean(diag C),
    combined (Fisher) with the overlap of the identity sets; the reference tests beside it."""
    N, d = HA.shape
    S, k, C = cross_matrix(HA, HB, k, rank_by, set_mode, temperature)
    z, p_perm = permutation_test(C)
    p_over, p = 1.0, p_perm
    if set_mode == "coset":
        # Fisher's method, -2 sum(log p) ~ chi2(4), from log p: a related pair's p underflows to 0 when linear
        log_perm = math.log(p_perm) if p_perm > 0 else float(stats.norm.logsf(z))
        log_over = overlap_p(len(S), d, k, log=True)
        p_over, p = math.exp(log_over), float(stats.chi2.sf(-2 * (log_perm + log_over), 4))
    taus = np.diag(C)
    r = SeedPrintResult(related=bool(p < alpha), p=p, p_perm=p_perm, p_overlap=p_over,
                        mean_tau=float(taus.mean()) if len(S) else 0.0, z_perm=z, n_identity=len(S), k=k, n_inputs=N)
    if reference and len(S) >= 2:
        sd = math.sqrt(2 * (2 * N + 5) / (9 * N * (N - 1)))      # std of tau-b under independence
        null = null_taus(N, d, k=k, rank_by=rank_by, set_mode=set_mode, temperature=temperature)
        r.p_z = float(min(1.0, 2 * stats.norm.sf(taus.mean() / (sd / math.sqrt(len(S))))))
        with warnings.catch_warnings():           # identical fingerprints (a model against itself) are legitimate
            warnings.simplefilter("ignore", RuntimeWarning)
            r.p_t = float(stats.ttest_ind(taus, null, alternative="greater").pvalue)
        r.p_u = float(stats.mannwhitneyu(taus, null, alternative="greater").pvalue)
    return r


def cross_matrix(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                 temperature: float = 10.0):
    """Steps 2-3: (S, k used, C), C[j, l] the Kendall tau-b between identity dimension j of A and l of B."""
    S, k = identity_set(HA, HB, k, rank_by, set_mode)
    C = kendall_tau_matrix(softmax_rows(HA[:, S], temperature), softmax_rows(HB[:, S], temperature)) if len(S) \
        else np.zeros((0, 0))                        # no shared identity dimension: no evidence of a lineage
    return S, k, C


@functools.lru_cache(maxsize=16)
def null_taus(N: int, d: int, trials: int = 10, seed: int = 0, k: int = 400, rank_by: str = "smallest",
              set_mode: str = "coset", temperature: float = 10.0) -> np.ndarray:
    """The reference's null: the same pipeline on `trials` pairs of independent randn(N, d) matrices, pooled.
    Cached on every argument it depends on."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        A, B = rng.standard_normal((N, d)), rng.standard_normal((N, d))
        S, _ = identity_set(A, B, k, rank_by, set_mode)
        if len(S) == 0:
            continue
        A, B = softmax_rows(A[:, S], temperature), softmax_rows(B[:, S], temperature)
        out += [stats.kendalltau(A[:, j], B[:, j]).statistic for j in range(len(S))]
    return np.array(out)


# ----------------------------------------------------------------------------- 1. fingerprints (torch)

def fingerprint(model, sequences: int = 2000, seq_len: int = 64, inputs: str = "tokens", vocab: int = None,
                mean: float = 0.0, std: float = 0.02, seed: int = 0, batch_size: int = 32, name: str = "model",
                progress: bool = False, low: int = 0) -> np.ndarray:
    """H (sequences x d, float32): the final-norm state of the last token on random sequences.
    model: a GPT, or any callable ids (B, T) int64 -> (B, d) final-norm last-token states, e.g. a model
    loaded by your own transformers install (tokens only; see docs/real_checkpoints.md).
    inputs="tokens": ids uniform in [low, vocab) (default: the model's vocabulary). inputs="gaussian": embeddings
    N(mean, std) fed past the token table (GPT only; see the H0 above for why tokens are the default).
    The same seed gives the same inputs on every device and dtype. A NaN or inf row is an error."""
    is_gpt = isinstance(model, GPT)
    if inputs not in ("tokens", "gaussian") or (inputs == "gaussian" and not is_gpt):
        raise ValueError(f"inputs must be 'tokens', or 'gaussian' for a GPT; got {inputs!r} for {type(model).__name__}")
    if vocab is None and not is_gpt:
        raise ValueError("a callable model needs vocab=: token ids are drawn below it")
    vocab = vocab or model.config.vocab_size
    param = next(model.parameters()) if is_gpt else None
    device = param.device if is_gpt else torch.device("cpu")
    bar = Progress(sequences, f"fingerprint {name}", "sequences") if progress else None
    out = []
    batches = random_batches(inputs, sequences, seq_len, batch_size, seed, vocab=vocab,
                             width=model.config.n_embd if is_gpt else None, mean=mean, std=std, low=low)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
        for x in batches:
            if inputs == "tokens":
                h = model.trace(x.to(device), hidden="last")["hidden"][-1] if is_gpt else model(x)
            else:
                h = model.trace(embeds=x.to(device, param.dtype), hidden="last")["hidden"][-1]
            h = torch.as_tensor(h)
            if h.dim() != 2 or h.shape[0] != len(x):
                raise ValueError(f"{name}: the model must map ids {tuple(x.shape)} to last-token states (B, d), "
                                 f"got shape {tuple(h.shape)}")
            out.append(h.float().cpu())
            if bar:
                bar.update(len(x))
    H = torch.cat(out).numpy()
    bad = int((~np.isfinite(H)).any(axis=1).sum())
    if bad:
        raise ValueError(f"{name}: {bad} of {len(H)} fingerprint rows hold NaN or inf (an fp16/bf16 overflow?); "
                         f"load the model in float32 (--dtype float32)")
    constant = int((H.std(axis=0) <= 1e-6 * (np.abs(H).max() + 1e-30)).sum())
    if constant > H.shape[1] // 2:
        raise ValueError(f"{name}: {constant} of {H.shape[1]} fingerprint dimensions are constant across the "
                         f"{len(H)} inputs: the model's final states carry no information to rank (a degenerate "
                         f"or overflowing model, or too few distinct inputs)")
    return H


def weights_identity(path: str) -> list:
    """What the weights at `path` are, as far as the file system tells: path, size and mtime of a
    checkpoint file, or of config.json and every weight file of a Hugging Face directory."""
    if os.path.isfile(path):
        files = [path]
    else:
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if f in ("config.json", "model.safetensors.index.json") or f.endswith(".safetensors"))
    return [[os.path.abspath(f), os.path.getsize(f), os.stat(f).st_mtime_ns] for f in files]


def fingerprint_cached(path: str, cache_dir: str = None, device="cpu", dtype: str = None, **options) -> np.ndarray:
    """fingerprint() of the model at `path`, saved under cache_dir, keyed on the identity of its weights
    and on every option (device and dtype included): comparing M models costs M forward passes."""
    return fingerprint_all([path], cache_dir, device, dtype, options)[0][0]


def aligned_sets(vocab: int, seed: int) -> list:
    """The two input sets of the aligned verdict: the test's, with token ids from the lower half of the shared
    vocabulary, and the alignment's, other sequences from the upper half. Unrelated models resemble each other
    by chance on the tokens they see (most on a small vocabulary, whose tokens repeat); fit on other tokens, the
    match carries that chance over far less (README: measured)."""
    return [dict(vocab=vocab // 2, low=0, seed=seed), dict(vocab=vocab, low=vocab // 2, seed=seed + HELD_OUT_SEED)]


def held_out_rows(m, vocab: int):
    """The token table's rows of the alignment's tokens, [vocab // 2, vocab) (aligned_sets), float32 (rows x d),
    for the aligned verdict's table match; None for a model whose weights are not at hand (a callable, a
    fingerprint array)."""
    return token_rows(m, vocab // 2, vocab)


def token_rows(m, lo: int, hi: int):
    """Rows [lo, hi) of a model's token table (see held_out_rows). The table alone is read: a checkpoint
    memory-mapped, the rows of one tensor of a Hugging Face directory."""
    if isinstance(m, (GPT, Recipe)):
        table = (m if isinstance(m, GPT) else m.build()).transformer.wte.weight
    elif isinstance(m, str) and os.path.isfile(m):
        table = read_checkpoint(m, mmap=True)["model"]["transformer.wte.weight"]
    elif isinstance(m, str):
        _, arch, headers = read_hf_dir(m)
        gpt2 = arch == "GPT2LMHeadModel"
        prefix, name = ("transformer.", "wte.weight") if gpt2 else ("model.", "embed_tokens.weight")
        found = [(file, t) for file, header in headers.items() for t in header if t.removeprefix(prefix) == name]
        if not found:
            raise ValueError(f"{m}: no token table ({prefix}{name}) in its safetensors files")
        with safetensors()[1](found[0][0], framework="pt") as f:
            return f.get_slice(found[0][1])[lo:hi].float().numpy()
    else:
        return None
    return table[lo:hi].detach().float().cpu().numpy()


@dataclass
class Recipe:
    """A model built in code (a derivative, a fresh init): fingerprinted under a cache key that names how it
    is made, and built only when that key is not cached."""
    key: str
    build: Callable[[], GPT]
    config: Optional[GPTConfig] = None     # its architecture, where known without building it (None: unknown)


def fingerprint_all(models: list, cache_dir: str = None, device="cpu", dtype: str = None, options: dict = None,
                    sets: list = None) -> list:
    """out[i][j]: the fingerprint of model i on input set j: the options updated by sets[j] (default: one set, the
    options themselves). A model is a GPT, a path, a Recipe, a callable, or a fingerprint array (one set only). Each
    model is loaded once;
    paths and recipes are read from and saved to the cache, but only once every fingerprint is computed: a
    run that fails on one model (a damaged file, NaN activations) writes nothing."""
    options = dict(options or {})
    sets = [dict(options, **s) for s in (sets or [{}])]
    out, new = [], []
    for m in models:
        if isinstance(m, np.ndarray):
            if len(sets) > 1:
                raise ValueError("a fingerprint array holds one set of inputs; give the model for held-out inputs")
            out.append([m])
            continue
        if callable(m) and not isinstance(m, (GPT, Recipe)):
            m = m.eval() if hasattr(m, "eval") else m
            out.append([fingerprint(m, **opts) for opts in sets])
            continue
        if not isinstance(m, (str, GPT, Recipe)):
            raise TypeError(f"expected a GPT, a path, a Recipe, a callable or a fingerprint array, "
                            f"got {type(m).__name__}")
        identity = weights_identity(m) if isinstance(m, str) else m.key if isinstance(m, Recipe) else None
        row, model = [], m if isinstance(m, GPT) else None
        for opts in sets:
            key = json.dumps(dict(weights=identity, device=str(device), dtype=str(dtype), options=opts,
                                  autocast="bf16" if str(device).startswith("cuda") else None, version=3),
                             sort_keys=True)
            file = os.path.join(cache_dir, hashlib.sha256(key.encode()).hexdigest()[:20] + ".npz") \
                if cache_dir and identity is not None else None
            if file and os.path.isfile(file):
                row.append(np.load(file)["H"])
                continue
            if model is None:
                model = m.build().to(device) if isinstance(m, Recipe) else load_model(
                    m, device, getattr(torch, dtype) if dtype else None)
                model.eval()
            name = m if isinstance(m, str) else m.key if isinstance(m, Recipe) else "model"
            row.append(fingerprint(model, name=name, progress=isinstance(m, str), **opts))
            if file:
                new.append((file, row[-1], key))
        out.append(row)
        del model
    for file, H, key in new:
        def save(tmp, H=H, key=key):
            with open(tmp, "wb") as fh:
                np.savez(fh, H=H, key=key)
        atomic_write(file, save)
    return out


# The held-out inputs an alignment is fit on: the test's seed plus this, never the test's own inputs.
HELD_OUT_SEED = 1_000_003


def compare(model_a, model_b, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
            temperature: float = 10.0, alpha: float = ALPHA, cache_dir: str = None, device="cpu", dtype: str = None,
            align: bool = False, **fingerprint_options) -> SeedPrintResult:
    """Do model_a (the base) and model_b share an initialization? Each may be a GPT, a path (train.py
    checkpoint or Hugging Face directory), a Recipe, a callable ids -> states, or a fingerprint array. Token
    inputs use ids below the smaller of the two vocabularies. Options are checked before any work.
    align=True: the aligned verdict, B's coordinates also matched to A's by their token tables where that match
    is trusted, else on held-out inputs (see seedprint_test)."""
    return compare_many([model_a, model_b], k, rank_by, set_mode, temperature, alpha, cache_dir, device, dtype,
                        align, **fingerprint_options)["results"][(0, 1)]


def compare_many(models: list, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                 temperature: float = 10.0, alpha: float = ALPHA, cache_dir: str = None, device="cpu",
                 dtype: str = None, align: bool = False, **fingerprint_options) -> dict:
    """Every pair of models, each fingerprinted once. Returns {"results": {(i, j): SeedPrintResult} for i < j,
    with p and the verdict Holm-adjusted across the pairs (the unadjusted p kept as p_raw), "groups": the
    lineages, i.e. the models joined by a chain of related pairs}."""
    check_options(k, rank_by, set_mode, temperature, alpha)
    opts = dict(fingerprint_options)
    every = [_config(m) for m in models]                                   # configs only: no weights (None: unknown)
    configs = [c for c in every if c is not None]
    seq_len = opts.get("seq_len", 64)
    for c in configs:
        if seq_len > c.block_size:
            raise ValueError(f"seq_len {seq_len} exceeds a model's context of {c.block_size} tokens; lower --seq_len")
    if len({c.n_embd for c in configs}) > 1:
        raise ValueError(f"the models differ in width ({sorted({c.n_embd for c in configs})}): SeedPrint compares "
                         f"models of one architecture")
    if opts.get("inputs", "tokens") == "tokens" and "vocab" not in opts and configs:
        opts["vocab"] = min(c.vocab_size for c in configs)
    if align and "vocab" not in opts:
        raise ValueError("the aligned verdict draws token ids from two halves of the vocabulary: give vocab= for "
                         "models whose vocabulary is not known (callables, fingerprint arrays)")
    H = fingerprint_all(models, cache_dir, device, dtype, opts,
                        aligned_sets(opts["vocab"], opts.get("seed", 0)) if align else None)
    widths = {h[0].shape[1] for h in H}
    if len(widths) > 1:
        raise ValueError(f"the models differ in width ({sorted(widths)}): SeedPrint compares models of one "
                         f"architecture")
    pairs = [(i, j) for i in range(len(models)) for j in range(i + 1, len(models))]
    tables = [held_out_rows(m, opts["vocab"]) if align else None for m in models]
    results = {(i, j): seedprint_test(H[i][0], H[j][0], k, rank_by, set_mode, temperature, alpha,
                                      align=(H[i][1], H[j][1]) if align else None,
                                      signed=signs_keep_function(every[i], every[j]), tables=(tables[i], tables[j]))
               for i, j in pairs}
    for (i, j), p in zip(pairs, holm([results[pr].p for pr in pairs])):
        r = results[(i, j)]
        r.p_raw, r.p, r.related = r.p, p, bool(p < alpha)
        r.shared = shared_by_construction(models[i], models[j])
    return dict(results=results, groups=lineages(len(models), [pr for pr in pairs if results[pr].related]))


def shared_by_construction(a, b) -> str:
    """What two models' own records say they share by construction, as a clause for the verdict line ("" when
    they share nothing recorded, or either records nothing: a Hugging Face directory, a model in memory). train.py
    checkpoints record the seeds of their lineage's init and the checkpoint they were trained from. A shared
    embedding seed under different init seeds is a shared initialization of the embedding, the untied head and
    the position table: the H0 of no shared initialization is false for them by construction."""
    def record(m):
        if not (isinstance(m, str) and os.path.isfile(m)):
            return None
        ckpt = read_checkpoint(m, mmap=True)
        return dict(seeds=ckpt.get("seeds") or {}, init_from=ckpt.get("init_from"), path=os.path.realpath(m))
    ra, rb = record(a), record(b)
    if ra is None or rb is None:
        return ""
    said = []
    for x, y, name in ((ra, rb, "A"), (rb, ra, "B")):
        if x["init_from"] and os.path.realpath(x["init_from"]) == y["path"]:
            said.append(f"{name} was trained from the other (its init_from)")
    sa, sb = ra["seeds"], rb["seeds"]
    if {"init_seed", "embed_seed"} <= set(sa) & set(sb):
        same_init, same_embed = sa["init_seed"] == sb["init_seed"], sa["embed_seed"] == sb["embed_seed"]
        if same_init and same_embed:
            said.append(f"both record init seed {sa['init_seed']} and embedding seed {sa['embed_seed']}: one "
                        f"initialization")
        elif same_embed:
            said.append(f"they share the embedding seed {sa['embed_seed']} (init seeds {sa['init_seed']} and "
                        f"{sb['init_seed']}): their token embedding and untied head are one draw, a shared "
                        f"initialization of those parts, so the test's H0 is false for them")
        elif same_init:
            said.append(f"they share the init seed {sa['init_seed']} (embedding seeds {sa['embed_seed']} and "
                        f"{sb['embed_seed']}): the same transformer blocks at birth")
    return "; ".join(said)


def holm(ps: list) -> list:
    """Holm's step-down adjustment: the i-th smallest p times (m - i + 1), made monotone, capped at 1."""
    order, m = np.argsort(ps), len(ps)
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def lineages(n: int, related: list) -> list:
    """Groups of model indices joined by chains of related pairs (connected components), singletons included."""
    parent = list(range(n))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for i, j in related:
        parent[root(i)] = root(j)
    groups = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def _config(m):
    """The config of a GPT, a model path (also refuses an unsupported family, before any work) or a Recipe that
    names it; None for a callable, a fingerprint array or a Recipe that does not."""
    if isinstance(m, (GPT, Recipe)):
        return m.config
    if isinstance(m, str):
        return read_model_config(m)
    return None


# ----------------------------------------------------------------------------- what people do to weights
# Each returns a new model (the input is left as it is). The first group changes the function a little, as
# the post-development techniques of LeaFBench do; the second changes only the coordinates: the logits stay.

def _copy(model: GPT, config=None) -> GPT:
    out = GPT(config or model.config).to(next(model.parameters()).dtype)
    if config is None:
        out.load_state_dict(model.state_dict())
    return out.eval()


def _matrices(model: GPT, embeddings: bool = True):
    """(name, parameter) of every weight matrix; embeddings=False: those of the blocks only."""
    return [(n, p) for n, p in model.named_parameters()
            if p.dim() == 2 and (embeddings or n.startswith("transformer.h."))]


@torch.no_grad()
def quantize(model: GPT, bits: int, group: int = 0) -> GPT:
    """A round trip through signed `bits`-bit integers of every weight matrix: symmetric, one absmax scale per
    row (group=0) or per `group` consecutive input columns."""
    out, qmax = _copy(model), 2 ** (bits - 1) - 1
    for _, w in _matrices(out):
        n = group or w.shape[1]
        pad = -w.shape[1] % n                                    # a last, shorter group: zero columns never win absmax
        g = F.pad(w, (0, pad)).view(w.shape[0], -1, n)
        scale = g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / qmax
        w.copy_(((g / scale).round().clamp(-qmax, qmax) * scale).view(w.shape[0], -1)[:, :w.shape[1]])
    return out


@torch.no_grad()
def prune(model: GPT, fraction: float) -> GPT:
    """Magnitude pruning: the smallest `fraction` of each block matrix's entries set to 0."""
    out = _copy(model)
    for _, w in _matrices(out, embeddings=False):
        k = int(fraction * w.numel())
        if k:
            w.view(-1)[w.abs().view(-1).argsort()[:k]] = 0
    return out


@torch.no_grad()
def merge(a: GPT, b: GPT, weight: float = 0.5) -> GPT:
    """Linear merge (1 - weight) a + weight b of two models of one architecture."""
    out, sb = _copy(a), b.state_dict()
    for n, p in out.named_parameters():
        p.lerp_(sb[n].to(p.dtype), weight)
    return out


@torch.no_grad()
def low_rank_update(model: GPT, rank: int, relative: float, seed: int = 0) -> GPT:
    """W + B A on every block matrix (a LoRA-like update), B and A Gaussian of rank `rank`, scaled so that
    |B A| = relative |W| (Frobenius)."""
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    for _, w in _matrices(out, embeddings=False):
        delta = torch.randn(w.shape[0], rank, generator=g) @ torch.randn(rank, w.shape[1], generator=g)
        w.add_((delta * (relative * w.float().norm() / delta.norm())).to(w.dtype))
    return out


@torch.no_grad()
def add_noise(model: GPT, relative: float, seed: int = 0) -> GPT:
    """Gaussian noise on every weight matrix, of std `relative` times that matrix's own std."""
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    for _, w in _matrices(out):
        w.add_((torch.randn(w.shape, generator=g) * relative * w.float().std()).to(w.dtype))
    return out


@torch.no_grad()
def extend_vocab(model: GPT, extra: int, seed: int = 0) -> GPT:
    """`extra` new tokens: new rows of the embedding (and of an untied head), drawn with the table's std."""
    cfg = dataclasses.replace(model.config, vocab_size=model.config.vocab_size + extra)
    out, g, old = _copy(model, cfg), torch.Generator().manual_seed(seed), model.state_dict()
    for n, p in out.state_dict().items():
        if n in ("transformer.wte.weight", "lm_head.weight"):
            p[:len(old[n])] = old[n]
            p[len(old[n]):] = (torch.randn(extra, p.shape[1], generator=g) * old[n].float().std()).to(p.dtype)
        else:
            p.copy_(old[n])
    return out


def _residual_sides(name: str, p: torch.Tensor, d: int):
    """How a parameter touches the residual stream: "in" (its input columns read it), "out" (its output rows
    write it), "bias" (a writer's bias, of width d), "norm" (a norm's gain or bias, of width d), or None."""
    if name.endswith(("wte.weight", "wpe.weight", "lm_head.weight")):
        return "in"                          # rows are tokens or positions, columns residual coordinates
    if name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")):
        return "out"
    if name.endswith(("attn.c_proj.bias", "mlp.c_proj.bias")):
        return "bias"
    if p.dim() == 1 and p.shape[0] == d and (".ln_" in name or "ln_f" in name):
        return "norm"
    if name.endswith(("attn.c_attn.weight", "attn.c_gate.weight", "mlp.c_fc.weight", "mlp.c_gate.weight")):
        return "in"
    return None


@torch.no_grad()
def permute_residual(model: GPT, seed: int = 0, flip: float = 0.0) -> GPT:
    """The same function in a permuted residual basis: new coordinate j is old coordinate perm[j] in every weight
    that reads or writes the stream (norms act per coordinate or on the whole vector, so they commute).
    flip > 0: a signed permutation, each new coordinate negated with probability flip (1: all of them), which an
    RMSNorm or norm-free model also keeps (RMS ignores signs; the gains move with their coordinates, unsigned).
    A LayerNorm's mean does not commute with a sign flip, so flips are refused there."""
    d = model.config.n_embd
    if not 0 <= flip <= 1:
        raise ValueError(f"flip is the probability that a coordinate is negated, in [0, 1]; got {flip}")
    if flip and not signs_keep_function(model.config):
        raise ValueError("a sign flip does not keep the function of a LayerNorm model (LayerNorm subtracts the "
                         "mean across coordinates); use flip=0")
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    perm = torch.randperm(d, generator=g)
    s = torch.where(torch.rand(d, generator=g) < flip, -1.0, 1.0)
    for n, p in out.named_parameters():
        side, sign = _residual_sides(n, p, d), s.to(p.dtype)
        if side == "in":                     # reads the stream: its columns
            p.copy_(p[:, perm] * sign)
        elif side == "out":                  # writes the stream: its rows
            p.copy_(p[perm] * sign[:, None])
        elif side == "bias":                 # a writer's bias moves and flips
            p.copy_(p[perm] * sign)
        elif side == "norm":                 # a norm's gain only moves (flips are refused where it has a bias)
            p.copy_(p[perm])
    return out


@torch.no_grad()
def permute_mlp(model: GPT, seed: int = 0) -> GPT:
    """The same function with each MLP's hidden units permuted (rows of up and gate, columns of down)."""
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    for block in out.transformer.h:
        if not hasattr(block, "mlp"):
            continue
        perm = torch.randperm(model.config.mlp_width, generator=g)
        for lin in (block.mlp.c_fc, getattr(block.mlp, "c_gate", None)):
            if lin is not None:
                lin.weight.copy_(lin.weight[perm])
                if lin.bias is not None:
                    lin.bias.copy_(lin.bias[perm])
        block.mlp.c_proj.weight.copy_(block.mlp.c_proj.weight[:, perm])
    return out


@torch.no_grad()
def rotate_residual(model: GPT, seed: int = 0) -> GPT:
    """The same function in a randomly rotated residual basis, x -> x Q, as QuaRot and SpinQuant prepare a model:
    each RMSNorm's gain is folded into the matrices that read its output (the gains become 1, so the norm
    commutes with Q), readers become W diag(g) Q, writers Q^T W, the embedding E Q, and the head, which now
    carries the final norm's gain, is untied. The final-norm states (the fingerprint) are rotated and lose
    that gain: a lineage test by coordinates cannot see through this."""
    cfg = model.config
    if cfg.norm != "rmsnorm" or cfg.bias or cfg.position == "learned":
        raise ValueError("rotate_residual needs RMSNorm blocks without norm biases or a position table")
    d = cfg.n_embd
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    src = {n: p.double() for n, p in model.state_dict().items()}
    out = _copy(model, dataclasses.replace(cfg, tie_embeddings=False))
    head = src["lm_head.weight"] if "lm_head.weight" in src else src["transformer.wte.weight"]
    new = {n: p.clone() for n, p in src.items()}
    new["transformer.wte.weight"] = src["transformer.wte.weight"] @ Q
    new["lm_head.weight"] = (head * src["transformer.ln_f.weight"]) @ Q
    new["transformer.ln_f.weight"] = torch.ones(d, dtype=torch.float64)
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        for norm, readers, writer in (("ln_1", ("attn.c_attn", "attn.c_gate"), "attn.c_proj"),
                                      ("ln_2", ("mlp.c_fc", "mlp.c_gate"), "mlp.c_proj")):
            if h + norm + ".weight" not in src:
                continue
            gain = src[h + norm + ".weight"]
            for r in readers:
                if h + r + ".weight" in src:
                    new[h + r + ".weight"] = (src[h + r + ".weight"] * gain) @ Q
            new[h + norm + ".weight"] = torch.ones(d, dtype=torch.float64)
            new[h + writer + ".weight"] = Q.T @ src[h + writer + ".weight"]
            if h + writer + ".bias" in src:
                new[h + writer + ".bias"] = src[h + writer + ".bias"] @ Q
    dtype = next(model.parameters()).dtype
    out.load_state_dict({n: p.to(dtype) for n, p in new.items()})
    return out


# ----------------------------------------------------------------------------- baselines (threshold 0.8)

def _flat(model, keep):
    return torch.cat([p.detach().float().flatten() for n, p in model.named_parameters() if keep(n)])


def pcs(a, b) -> float:
    """HuRef's parameter cosine similarity of all block parameters (embeddings and head excluded)."""
    blocks = lambda name: name.startswith("transformer.h.")
    return torch.nn.functional.cosine_similarity(_flat(a, blocks), _flat(b, blocks), dim=0).item()


def _zscore(x):
    return (x - x.mean()) / x.std()


def ics(a, b, n_tokens: int = 4096) -> float:
    """HuRef's invariant terms of the last two layers on the first n_tokens token embeddings X (each
    model its own): X Wq^T Wk X^T, X Wv^T Wo^T X^T, X (Wgate^T * Wup^T) Wdown^T X^T (Wup^T Wdown^T
    without a gate); each z-scored; cosine of the concatenations."""

    def terms(m):
        cfg, out = m.config, []
        X = m.transformer.wte.weight[:n_tokens].detach().float()
        H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
        for block in list(m.transformer.h)[-2:]:
            Wq, Wk, Wv = block.attn.c_attn.weight.detach().float().split(qkv_sizes(cfg))
            Wk, Wv = (w.view(Hkv, hd, -1).repeat_interleave(H // Hkv, 0).reshape(H * hd, -1) for w in (Wk, Wv))
            Wo = block.attn.c_proj.weight.detach().float()
            up = block.mlp.c_fc.weight.detach().float()
            if hasattr(block.mlp, "c_gate"):
                up = up * block.mlp.c_gate.weight.detach().float()
            down = block.mlp.c_proj.weight.detach().float()
            out += [_zscore(X @ Wq.T @ Wk @ X.T), _zscore(X @ Wv.T @ Wo.T @ X.T), _zscore(X @ up.T @ down.T @ X.T)]
        return torch.cat([t.flatten() for t in out])
    return torch.nn.functional.cosine_similarity(terms(a), terms(b), dim=0).item()


def intrinsic(a, b) -> float:
    """Per-layer std of the q, k, v, o weights, z-scored across layers; Pearson per type; mean."""

    def profile(m):
        rows = []
        for block in m.transformer.h:
            q, k, v = block.attn.c_attn.weight.detach().float().split(qkv_sizes(m.config))
            rows.append([q.std(), k.std(), v.std(), block.attn.c_proj.weight.detach().float().std()])
        return _zscore(torch.tensor(rows))
    pa, pb = profile(a), profile(b)
    if pa.shape[0] < 2:
        return float("nan")
    return float(np.mean([np.corrcoef(pa[:, j], pb[:, j])[0, 1] for j in range(4)]))


def reef(a, b, n: int = 200, seq_len: int = 64, layer: int = -1, seed: int = 0) -> float:
    """Linear CKA between the two models' last-token states at one residual-stream state (default:
    the final norm) on the same n random token sequences."""
    vocab = min(a.config.vocab_size, b.config.vocab_size)
    x = next(random_batches("tokens", n, seq_len, n, seed, vocab=vocab))
    with torch.no_grad():
        X, Y = (m.eval().trace(x, hidden="last")["hidden"][layer].double() for m in (a, b))
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return ((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm())).item()


BASELINES = {"PCS": pcs, "ICS": ics, "Intrinsic": intrinsic, "REEF": reef}


# ----------------------------------------------------------------------------- experiments
# Small models trained here from known seeds on known data: the paper's Tables 4a-4c and 5, Fig 11, the
# false-positive study and the baselines. Each trains what it needs with train.py (reused when present).

def _run(args, name, seed, data, steps=None, init_from=None, data_seed=None, ckpt_every=None):
    """The directory of a train.py run, trained (or resumed to completion) on first use."""
    out_dir = os.path.join(args.out, "runs", name)
    cfg = train.TrainConfig(data=data, out_dir=out_dir, model=None if init_from else args.model,
                            knobs={} if init_from else {**LLAMA_KNOBS, **args.knobs}, init_seed=seed,
                            embed_seed=seed, data_seed=args.data_seed if data_seed is None else data_seed,
                            init_from=init_from, batch_size=args.batch_size, max_steps=steps or args.steps,
                            lr=args.lr, warmup=min(30, (steps or args.steps) // 10),
                            ckpt_every=ckpt_every or args.ckpt_every,
                            eval_every=0, log_every=50, device=args.device)
    train.ensure(cfg)
    return out_dir


def _data(args, corpus):
    return train.prepared([corpus], os.path.join(args.out, "data", f"{train.corpus_label(corpus)}_{args.tokenizer}"),
                          args.tokenizer, args.data_from)


def _ckpts(run):
    return train.list_checkpoints(run)


def _fps(args, m, aligned: bool = True, vocab: int = None) -> list:
    """A model's (a path or a Recipe) fingerprints, cached: [the exact verdict's, and with `aligned` the aligned
    verdict's test and alignment sets]. Token ids below args.vocab, else the model's vocabulary."""
    vocab = vocab or _vocab(args, m)
    return fingerprint_all([m], os.path.join(args.out, "fingerprints"), args.device, args.dtype,
                           dict(sequences=args.sequences, seq_len=args.seq_len, vocab=vocab, seed=args.input_seed),
                           [{}] + (aligned_sets(vocab, args.input_seed) if aligned else []))[0]


def _vocab(args, *models) -> int:
    """The token ids' bound: args.vocab, else the smallest vocabulary of the models."""
    return getattr(args, "vocab", None) or min((m.config if isinstance(m, GPT) else read_model_config(m) if isinstance(
        m, str) else m.config or m.build().config).vocab_size for m in models)


def _rows(args, m, lo: int, hi: int):
    """token_rows, kept for the run's next pairs (each model is read or built once; the last 64 are kept)."""
    cache = vars(args).setdefault("_token_rows", {})
    key = json.dumps([weights_identity(m) if isinstance(m, str) else m.key, lo, hi])
    if key not in cache:
        if len(cache) >= 64:
            cache.pop(next(iter(cache)))
        cache[key] = token_rows(m, lo, hi)
    return cache[key]


def _verdicts(args, a, b, aligned: bool = True) -> tuple:
    """(exact verdict, aligned verdict or None) of a pair, from cached fingerprints."""
    vocab = _vocab(args, a, b)
    A, B = _fps(args, a, aligned, vocab), _fps(args, b, aligned, vocab)
    opts = dict(k=args.k, rank_by=args.rank_by, set_mode=args.set_mode)
    exact = seedprint_test(A[0], B[0], **opts)
    if not aligned:
        return exact, None
    signed = signs_keep_function(_config(a), _config(b))
    tables = [_rows(args, m, vocab // 2, vocab) for m in (a, b)]
    return exact, seedprint_test(A[1], B[1], **opts, reference=False, align=(A[2], B[2]), signed=signed,
                                 tables=tables)


def _init_file(args, seed):
    """A fresh init of the experiments' architecture, saved as a checkpoint (fingerprints are cached by file)."""
    path = os.path.join(args.out, "inits", f"seed{seed}.pt")
    if not os.path.isfile(path):
        meta = train.load_data(_data(args, args.corpus))["meta"]
        cfg = get_config(args.model, **{**LLAMA_KNOBS, **args.knobs, "vocab_size": meta["vocab_size"]})
        save_checkpoint(path, build(cfg, seed, seed), seeds=dict(init_seed=seed, embed_seed=seed),
                        tokenizer=meta["tokenizer"])
    return path


def _fp(args, path):
    return fingerprint_cached(path, os.path.join(args.out, "fingerprints"), args.device or "cpu",
                              sequences=args.sequences, seq_len=args.seq_len, seed=args.input_seed)


def _test(args, a, b, label, related=None):
    r = seedprint_test(_fp(args, a), _fp(args, b), k=args.k, rank_by=args.rank_by, set_mode=args.set_mode)
    row = dict(pair=label, truth={None: "-", True: "related", False: "unrelated"}[related],
               verdict="RELATED" if r.related else "unrelated", p=r.p, p_perm=r.p_perm, p_overlap=r.p_overlap,
               mean_tau=r.mean_tau, S=r.n_identity, p_t=r.p_t, p_u=r.p_u, p_z=r.p_z)
    return row


def exp_table4a(args):
    """Table 4a: inits that differ only in their seed -> every pair unrelated."""
    s = args.seeds
    return [_test(args, _init_file(args, a), _init_file(args, b), f"init {a} vs init {b}", False)
            for i, a in enumerate(s) for b in s[i + 1:]]


def exp_table4b(args):
    """Table 4b: each init vs its own trained descendant -> related."""
    data = _data(args, args.corpus)
    return [_test(args, _ckpts(run)[0][1], _ckpts(run)[-1][1], f"init {s} vs trained {s}", True)
            for s in args.seeds for run in [_run(args, f"seed{s}", s, data)]]


def exp_table4c(args):
    """Table 4c: trained on the same data in the same order, different init -> unrelated."""
    data = _data(args, args.corpus)
    final = {s: _ckpts(_run(args, f"seed{s}", s, data))[-1][1] for s in args.seeds}
    return [_test(args, final[a], final[b], f"trained {a} vs trained {b}", False)
            for i, a in enumerate(args.seeds) for b in args.seeds[i + 1:]]


def exp_table5(args):
    """Table 5: base (seed A) continued on a second corpus -> related to the base; a distractor (seed B,
    another data order, continued on the same corpus) -> unrelated."""
    a, b = args.seeds[0], args.seeds[1]
    data, data2 = _data(args, args.corpus), _data(args, args.corpus2)
    base = _ckpts(_run(args, f"seed{a}", a, data))[-1][1]
    other = _ckpts(_run(args, f"seed{b}_order2", b, data, data_seed=args.data_seed + 1))[-1][1]
    child = _ckpts(_run(args, f"seed{a}_on_{args.corpus2}", a, data2, steps=args.steps // 2, init_from=base))[-1][1]
    distractor = _ckpts(_run(args, f"seed{b}_order2_on_{args.corpus2}", b, data2, steps=args.steps // 2,
                             init_from=other))[-1][1]
    return [_test(args, base, child, f"base {a} vs its descendant on {args.corpus2}", True),
            _test(args, base, distractor, f"base {a} vs distractor ({b}) on {args.corpus2}", False)]


def biased_dims(H: np.ndarray, k: int) -> np.ndarray:
    """The k dimensions most biased at birth: largest |mean| of the normalized states (the contraction
    direction of Finding 2.2)."""
    u = H / np.linalg.norm(H, axis=1, keepdims=True)
    return np.argsort(-np.abs(u.mean(axis=0)), kind="stable")[:k]


def dimension_correlations(H0: np.ndarray, H: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Per dimension j, the Pearson correlation across the N inputs between H0[:, j] and H[:, j]."""
    a, b = H0[:, dims] - H0[:, dims].mean(0), H[:, dims] - H[:, dims].mean(0)
    return (a * b).sum(0) / np.sqrt((a * a).sum(0) * (b * b).sum(0))


def exp_fig11(args):
    """Fig 11: for each of the top-k biased dimensions of seed A's init, the correlation across the N
    inputs between the init and each checkpoint of its own training run; mean +- std over the k
    dimensions, beside the same for the checkpoints of seed B's run (the uncorrelated baseline)."""
    a, b = args.seeds[0], args.seeds[1]
    data = _data(args, args.corpus)
    own, other = _ckpts(_run(args, f"seed{a}", a, data)), _ckpts(_run(args, f"seed{b}", b, data))
    H0 = _fp(args, own[0][1])
    dims = biased_dims(H0, min(args.top, H0.shape[1]))
    rows = []
    for (step, p_own), (_, p_other) in zip(own, other):
        c_own, c_other = (dimension_correlations(H0, _fp(args, p_own), dims),
                          dimension_correlations(H0, _fp(args, p_other), dims))
        rows.append(dict(step=step, own_mean=float(c_own.mean()), own_std=float(c_own.std()),
                         other_mean=float(c_other.mean()), other_std=float(c_other.std())))
    plt, fig, ax = figure()
    steps = [r["step"] for r in rows]
    for key, label in (("own", f"init {a} vs its checkpoints"), ("other", f"init {a} vs seed {b}'s checkpoints")):
        ax.errorbar(steps, [r[f"{key}_mean"] for r in rows], [r[f"{key}_std"] for r in rows], marker="o", capsize=3,
                    label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"correlation across inputs, top-{len(dims)} dims")
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "fig11_persistence.png"))
    return dict(k=len(dims), dims=dims.tolist(), rows=rows)


def _base_checkpoint(args) -> tuple:
    """(the base model in float32, a checkpoint file of it that train.py can --init_from)."""
    path = os.path.join(args.out, "derivatives", "base.pt")
    base = load_model(args.base, dtype=torch.float32).eval()
    if not os.path.isfile(path):
        save_checkpoint(path, base, tokenizer=args.base)
    return base, path


def _base_data(args, corpus) -> str:
    """A corpus tokenized by the base model's own tokenizer (its directory's tokenizer.json)."""
    return train.prepared([corpus], os.path.join(args.out, "derivatives", f"data_{train.corpus_label(corpus)}"),
                          args.base, args.data_from)


def _base_run(args, name, data, init_from=None, seed=0, lr=1e-4) -> str:
    """The last checkpoint of a short training run of the base's architecture: continued from the base
    (init_from) or from scratch (a fresh init of seed `seed`)."""
    out_dir = os.path.join(args.out, "derivatives", "runs", name)
    cfg = read_model_config(args.base)
    train.ensure(train.TrainConfig(data=data, out_dir=out_dir, init_from=init_from, model=None if init_from else "tiny",
                                   knobs={} if init_from else dataclasses.asdict(cfg), init_seed=seed, embed_seed=seed,
                                   batch_size=8, seq_len=min(128, cfg.block_size), max_steps=args.deriv_steps, lr=lr,
                                   warmup=min(10, args.deriv_steps // 5), ckpt_every=args.deriv_steps, eval_every=0,
                                   log_every=10, device=args.device))
    return _ckpts(out_dir)[-1][1]


def logit_change(a: GPT, b: GPT, vocab: int, seed: int = 0) -> float:
    """max |logits_b - logits_a| / max |logits_a| on 4 random sequences, over the first `vocab` tokens."""
    x = torch.randint(0, vocab, (4, 32), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        la, lb = a(x)[0][..., :vocab].double(), b(x)[0][..., :vocab].double()
    return float((lb - la).abs().max() / la.abs().max())


def exp_derivatives(args):
    """What people do to weights, on a real checkpoint (--base, a Hugging Face directory): derivatives built
    here -- int8 / int4 round trips, magnitude pruning, a merge with a fine-tune, a low-rank update, Gaussian
    noise, continued training on another corpus, a vocabulary extension --, function-preserving
    reparametrizations (residual permutation, MLP unit permutation, QuaRot-style rotation; each checked to keep
    the logits), and unrelated controls (fresh inits, short from-scratch trainings). Each pair with the base:
    the exact verdict and the aligned one (--align)."""
    base, base_ckpt = _base_checkpoint(args)
    cfg, bkey, V = base.config, "base:" + json.dumps(weights_identity(args.base)), base.config.vocab_size
    fine_tune = _base_run(args, "finetune_shakespeare", _base_data(args, "shakespeare"), init_from=base_ckpt)
    continued = _base_run(args, "continued_brown", _base_data(args, "brown"), init_from=base_ckpt)
    R = lambda name, make: Recipe(f"{bkey}|{name}", make)
    cases = [  # (name, truth, model, is the function supposed to be unchanged)
        ("int8 round trip (per row)", True, R("int8", lambda: quantize(base, 8)), False),
        ("int4 round trip (groups of 32)", True, R("int4g32", lambda: quantize(base, 4, 32)), False),
        ("magnitude pruning 30%", True, R("prune30", lambda: prune(base, 0.3)), False),
        ("magnitude pruning 50%", True, R("prune50", lambda: prune(base, 0.5)), False),
        ("merge 50/50 with a fine-tune", True, R("merge", lambda: merge(base, load_model(fine_tune), 0.5)), False),
        ("low-rank update (rank 16, 10% of |W|)", True, R("lowrank", lambda: low_rank_update(base, 16, 0.1)), False),
        *[(f"Gaussian noise {r:g} x std(W)", True, R(f"noise{r}", lambda r=r: add_noise(base, r)), False)
          for r in (0.01, 0.05, 0.2)],
        (f"continued training on brown ({args.deriv_steps} steps)", True, continued, False),
        ("vocabulary extension (+1024 tokens)", True, R("vocab1024", lambda: extend_vocab(base, 1024)), False),
        ("permuted residual basis", True, R("perm", lambda: permute_residual(base, 1)), True),
        ("signed permutation of the residual basis", True,
         R("perm_signs", lambda: permute_residual(base, 1, 0.5)), True),
        ("negated, permuted residual basis", True, R("perm_negated", lambda: permute_residual(base, 1, 1.0)), True),
        ("permuted MLP units", True, R("mlpperm", lambda: permute_mlp(base, 1)), True),
        ("rotated residual stream (QuaRot)", True, R("rotate", lambda: rotate_residual(base, 1)), True),
        *[(f"fresh init, seed {sd}", False, Recipe(f"init|{json.dumps(dataclasses.asdict(cfg))}|{sd}",
                                                   lambda sd=sd: build(cfg, sd, sd), cfg), False) for sd in (1, 2, 3)],
        *[(f"from scratch, seed {sd} ({args.deriv_steps} steps)", False,
           _base_run(args, f"scratch_seed{sd}", _base_data(args, "shakespeare"), seed=sd, lr=1e-3), False)
          for sd in (1, 2)],
    ]
    args.vocab = V                                   # every model sees ids below the base's vocabulary
    rows = []
    bar = Progress(len(cases), "derivatives", "models", every=0)
    for name, truth, m, preserving in cases:
        t0 = time.time()
        change = None
        if preserving:                               # the reparametrizations must keep the function
            model = m.build()
            change = logit_change(base, model, V)
            if change > 1e-4:
                raise FloatingPointError(f"{name} changed the logits by {change:.2e}: not function-preserving")
        exact, aligned = _verdicts(args, Recipe(bkey, lambda: base, cfg), m)
        rows.append(dict(pair=f"base vs {name}", truth="related" if truth else "unrelated",
                         verdict="RELATED" if exact.related else "unrelated", p=exact.p, mean_tau=exact.mean_tau,
                         S=exact.n_identity, aligned="RELATED" if aligned.related else "unrelated", p_aligned=aligned.p,
                         tau_aligned=aligned.tau_aligned, S_aligned=aligned.n_identity_aligned, moved=aligned.moved,
                         matched_on=aligned.matched_on, table_fit=aligned.table_fit, logit_change=change,
                         seconds=time.time() - t0))
        bar.update()
    return rows


def clopper_pearson(x: int, n: int, level: float = 0.95):
    """The exact binomial confidence interval of a rate x / n."""
    lo = stats.beta.ppf((1 - level) / 2, x, n - x + 1) if x > 0 else 0.0
    hi = stats.beta.ppf(1 - (1 - level) / 2, x + 1, n - x) if x < n else 1.0
    return float(lo), float(hi)


def exp_fpr(args):
    """The false-positive rate of every test on unrelated pairs of three kinds -- init vs init, trained vs
    trained (same data and order), trained vs another seed's init -- and its power on related pairs:
    each init vs its checkpoints, each base vs its continual descendant and the init vs that descendant; and
    every related pair again with B's residual basis permuted, signs flipped at random for RMSNorm models
    (function-preserving: still related). Each pair
    gets the exact verdict and the aligned one (p_aligned)."""
    seeds = list(range(args.fpr_seed0, args.fpr_seed0 + args.fpr_inits))
    trained_seeds = seeds[:args.fpr_trained]
    data, data2 = _data(args, args.corpus), _data(args, args.corpus2)
    args.vocab = train.load_data(data)["meta"]["vocab_size"]
    inits = {s: _init_file(args, s) for s in seeds}
    runs = {s: _run(args, f"seed{s}", s, data) for s in trained_seeds}
    final = {s: _ckpts(runs[s])[-1][1] for s in trained_seeds}
    pairs = [(inits[a], inits[b], "init vs init", False) for i, a in enumerate(seeds) for b in seeds[i + 1:]]
    pairs += [(final[a], final[b], "trained vs trained", False) for i, a in enumerate(trained_seeds)
              for b in trained_seeds[i + 1:]]
    pairs += [(final[a], inits[b], "trained vs another init", False) for a in trained_seeds for b in seeds if b != a]
    for s in trained_seeds:
        pairs += [(_ckpts(runs[s])[0][1], p, "init vs its checkpoint", True) for _, p in _ckpts(runs[s])[1:]]
    for s in trained_seeds[:args.fpr_descendants]:
        child = _ckpts(_run(args, f"seed{s}_on_{args.corpus2}", s, data2, steps=args.steps // 2,
                            init_from=final[s]))[-1][1]
        pairs += [(final[s], child, "base vs continual descendant", True),
                  (inits[s], child, "init vs continual descendant", True)]
    flip = 0.5 if signs_keep_function(read_model_config(inits[seeds[0]])) else 0.0     # signs: not with LayerNorm
    pairs += [(a, Recipe(f"permuted{flip}|{json.dumps(weights_identity(b))}",
                         lambda b=b: permute_residual(load_model(b), 1, flip), read_model_config(b)),
               kind + ", B permuted", True) for a, b, kind, truth in list(pairs) if truth]
    tests = ("p", "p_perm", "p_overlap", "p_base", "p_t", "p_u", "p_z", "p_aligned")
    bar = Progress(len(pairs), "pairs tested", "pairs")
    results = []
    for a, b, kind, truth in pairs:
        r, aligned = _verdicts(args, a, b)
        HA, HB = _fps(args, a)[0], _fps(args, b)[0]
        other = seedprint_test(HA, HB, k=args.k, set_mode="base" if args.set_mode == "coset" else "coset",
                               reference=False)
        results.append(dict(kind=kind, related=truth, permuted=kind.endswith("permuted"), S=r.n_identity,
                            mean_tau=r.mean_tau,
                            **{t: getattr(r, t) for t in tests if t not in ("p_base", "p_aligned")},
                            p_base=other.p if args.set_mode == "coset" else r.p, p_aligned=aligned.p,
                            p_matched=aligned.p_aligned, tau_aligned=aligned.tau_aligned, moved=aligned.moved,
                            matched_on=aligned.matched_on, table_fit=aligned.table_fit))
        bar.update()
    table = []
    for t in tests:
        row = dict(test=t)
        for kind in dict.fromkeys(r["kind"] for r in results):
            ps = np.array([r[t] for r in results if r["kind"] == kind])
            row[kind] = f"{(ps < ALPHA).sum()}/{len(ps)}"
        row.update(rate_summary([r[t] for r in results if not r["related"]],
                                [r[t] for r in results if r["related"] and not r["permuted"]],
                                [r[t] for r in results if r["permuted"]]))
        table.append(row)
    print_table(table)
    _qq_plot(args, results, tests)
    return dict(alpha=ALPHA, table=table, pairs=results)


# The conditions of --exp aligned: LLaMA-style `tiny` models (block 64) trained on tiny-shakespeare, where the
# earlier aligned verdict called same-data pairs related (GPT-2 vocabulary, few steps: most tokens never seen) and
# where it did not (bytes, long training), at two widths.
ALIGNED_CONDITIONS = {"gpt2_w64": dict(n_embd=64, tokenizer="gpt2", steps=200, batch_size=16),
                      "gpt2_w128": dict(n_embd=128, tokenizer="gpt2", steps=200, batch_size=16),
                      "bytes_w128": dict(n_embd=128, tokenizer="bytes", steps=1500, batch_size=32)}


def exp_aligned(args):
    """Calibration of the aligned verdict on lineage, not shared data. Per condition (--conditions), models from the
    fit seeds and the test seeds, trained from their own inits on the same data in the same order; unrelated pairs:
    init vs init, trained vs trained (same data), trained vs the next seed's init; related: each init vs its trained
    model, and one trained model (the first test seed's) vs its continuation on Brown after each of
    --finetune_steps; every related pair again with B's residual basis given a signed permutation. The floor on the
    matched mean tau is fit on the fit seeds' unrelated pairs (twice their largest, rounded up to 0.01); the
    false-positive rate and the power are counted on the test seeds, with the fitted floor and with
    ALIGNED_TAU_FLOOR, the verdict's."""
    rows = []
    for name in args.conditions:
        c = argparse.Namespace(**{**vars(args), **{k: v for k, v in ALIGNED_CONDITIONS[name].items() if k != "n_embd"}})
        c.out = os.path.join(args.out, "aligned", name)
        c.knobs = {**args.knobs, "n_embd": ALIGNED_CONDITIONS[name]["n_embd"], "block_size": 64}
        data, data2 = _data(c, c.corpus), _data(c, c.corpus2)
        c.vocab = train.load_data(data)["meta"]["vocab_size"]
        seeds = {"fit": args.fit_seeds, "test": args.test_seeds}
        for split, ss in seeds.items():
            inits = {s: _init_file(c, s) for s in ss}
            final = {s: _ckpts(_run(c, f"seed{s}", s, data))[-1][1] for s in ss}
            pairs = [(inits[a], inits[b], "init vs init", None) for i, a in enumerate(ss) for b in ss[i + 1:]]
            pairs += [(final[a], final[b], "trained vs trained, same data", None) for i, a in enumerate(ss)
                      for b in ss[i + 1:]]
            pairs += [(final[a], inits[b], "trained vs another init", None) for a, b in zip(ss, ss[1:] + ss[:1])]
            pairs += [(inits[s], final[s], "init vs its trained model", 0) for s in ss]
            if split == "test":
                base = ss[0]
                child = _run(c, f"seed{base}_on_{c.corpus2}", base, data2, steps=max(args.finetune_steps),
                             init_from=final[base], ckpt_every=math.gcd(*args.finetune_steps))
                kept = dict(_ckpts(child))
                pairs += [(final[base], kept[n], "base vs its continuation", n) for n in args.finetune_steps]
            flip = 0.5 if signs_keep_function(read_model_config(inits[ss[0]])) else 0.0
            pairs += [(a, Recipe(f"permuted{flip}|{json.dumps(weights_identity(b))}",
                                 lambda b=b: permute_residual(load_model(b), 1, flip), read_model_config(b)),
                       kind + ", B permuted", steps) for a, b, kind, steps in list(pairs) if steps is not None]
            bar = Progress(len(pairs), f"{name} {split} pairs", "pairs")
            for a, b, kind, steps in pairs:
                exact, aligned = _verdicts(c, a, b)
                # a stress test of the table match, never the verdict's: the same match on the test tokens' rows,
                # which training moves (at bytes every one of them is in the training text)
                trained = table_match(*[_rows(c, m, 0, c.vocab // 2) for m in (a, b)], signed=aligned.signed)[2]
                A, B = _fps(c, a), _fps(c, b)              # the verdict had it no tables: matched on inputs
                match, sign, _ = align_coordinates(A[2], B[2], signed=aligned.signed)
                inputs = permutation_verdict(A[1], B[1][:, match] * sign, c.k, c.rank_by, c.set_mode, reference=False)
                rows.append(dict(condition=name, split=split, kind=kind, related=steps is not None,
                                 finetune_steps=steps, p_exact=exact.p, tau_exact=exact.mean_tau,
                                 p_aligned_test=aligned.p_aligned, tau_aligned=aligned.tau_aligned,
                                 moved=aligned.moved, matched_on=aligned.matched_on, table_fit=aligned.table_fit,
                                 table_fit_test_rows=trained, p_inputs=inputs.p, tau_inputs=inputs.mean_tau))
                bar.update()
    return aligned_summary(rows)


def aligned_summary(rows: list) -> dict:
    """The floor fit on the fit seeds (their unrelated pairs matched on held-out inputs, where the floor applies),
    then every rate on the test seeds: how often the token-table match was trusted, the exact verdict, the matched
    test alone (no floor, no exact test), and the aligned verdict with the fitted floor and with ALIGNED_TAU_FLOOR;
    the table match's mean |r| per condition, on the rows it uses and on the trained rows of the test tokens."""
    fit_unrelated = [r["tau_aligned"] for r in rows if r["split"] == "fit" and not r["related"]
                     and r["matched_on"] != "token table"]
    fitted = max(0.01, math.ceil(200 * max(fit_unrelated)) / 100) if fit_unrelated else float("nan")
    counted = lambda r, floor: r["matched_on"] == "token table" or r["tau_aligned"] >= floor
    union = lambda r, floor: 2 * min(r["p_exact"], r["p_aligned_test"] if counted(r, floor) else 1) < ALPHA
    verdicts = {"token-table match trusted (not a verdict)": lambda r: r["matched_on"] == "token table",
                "exact": lambda r: r["p_exact"] < ALPHA,
                "matched test alone, no floor": lambda r: r["p_aligned_test"] < ALPHA,
                f"aligned, fitted floor {fitted}": lambda r: union(r, fitted),
                f"aligned, floor {ALIGNED_TAU_FLOOR} (the verdict's)": lambda r: union(r, ALIGNED_TAU_FLOOR),
                "the same without tables (matched on held-out inputs)": lambda r: 2 * min(
                    r["p_exact"], r["p_inputs"] if r["tau_inputs"] >= ALIGNED_TAU_FLOOR else 1) < ALPHA}
    test = [r for r in rows if r["split"] == "test"]
    kinds = list(dict.fromkeys(r["kind"] for r in test))
    table = []
    for name, says in verdicts.items():
        row = dict(verdict=name)
        for kind in kinds:
            hits = [says(r) for r in test if r["kind"] == kind]
            row[kind] = f"{sum(hits)}/{len(hits)}"
        row.update(rate_summary([0.0 if says(r) else 1.0 for r in test if not r["related"]], []))
        table.append(row)
    print(f"floor fit on {len(fit_unrelated)} unrelated pairs of the fit seeds matched on held-out inputs: twice their "
          f"largest matched tau {max(fit_unrelated, default=float('nan')):+.4f} -> {fitted}; the verdict's "
          f"ALIGNED_TAU_FLOOR is {ALIGNED_TAU_FLOOR}")
    print_table(table)
    by_length = {}
    for r in test:
        if r["kind"].startswith("base vs its continuation"):
            by_length.setdefault(r["finetune_steps"], []).append(r)
    curve = [dict(finetune_steps=n, pairs=len(rs), tau_exact=float(np.mean([r["tau_exact"] for r in rs])),
                  tau_aligned=float(np.mean([r["tau_aligned"] for r in rs])),
                  related=f"{sum(union(r, ALIGNED_TAU_FLOOR) for r in rs)}/{len(rs)}")
             for n, rs in sorted(by_length.items())]
    print("power against the length of the continuation (each condition's base, plain and permuted):")
    print_table(curve, floats="{:.3f}")
    same_data = [r["tau_aligned"] for r in test if r["kind"] == "trained vs trained, same data"]
    fits = []
    for cond in dict.fromkeys(r["condition"] for r in rows):
        for related in (False, True):
            rs = [r for r in rows if r["condition"] == cond and r["related"] == related]
            f, t = [r["table_fit"] for r in rs], [r["table_fit_test_rows"] for r in rs]
            if rs:
                fits.append(dict(condition=cond, pairs=("related" if related else "unrelated") + f" ({len(rs)})",
                                 held_out_rows=f"{min(f):.3f}-{max(f):.3f}", test_rows=f"{min(t):.3f}-{max(t):.3f}"))
    print(f"the whitened token-table match's mean |r| (every seed), trusted from TABLE_MATCH_R {TABLE_MATCH_R}: on "
          f"the rows it uses, and on the test tokens' rows, which training moves (a stress test, not the verdict's):")
    print_table(fits)
    return dict(fitted_floor=fitted, floor=ALIGNED_TAU_FLOOR, table=table, by_length=curve, pairs=rows,
                same_data_tau_max=max(same_data) if same_data else None, table_fit=fits)


def rate_summary(unrelated: list, related: list, permuted: list = ()) -> dict:
    """FPR with its 95% Clopper-Pearson interval on unrelated pairs' p, TPR on related pairs (and on the ones
    whose B was permuted)."""
    unrelated = np.array(unrelated)
    x, n = int((unrelated < ALPHA).sum()), len(unrelated)
    lo, hi = clopper_pearson(x, n)
    out = dict(FPR=f"{100 * x / n:.2f}%", CI95=f"[{100 * lo:.2f}, {100 * hi:.2f}]%")
    if len(related):
        out["TPR"] = f"{100 * np.mean(np.array(related) < ALPHA):.1f}%"
    if len(permuted):
        out["TPR_permuted"] = f"{100 * np.mean(np.array(permuted) < ALPHA):.1f}%"
    return out


def exp_inits(args):
    """Calibration where the truth is known by construction: --fpr_inits fresh inits (seeds from --fpr_seed0)
    of one architecture -- --base's, or the model flags' --, every pair unrelated. The FPR of the verdict, of
    its two parts alone (p_perm, p_overlap), of the aligned verdict (with --align on), with 95% intervals; for each
    false positive, which part made it: the permutation test, the overlap, or their Fisher combination alone."""
    cfg = read_model_config(args.base) if args.base else get_config(args.model, **{**LLAMA_KNOBS, **args.knobs})
    seeds = list(range(args.fpr_seed0, args.fpr_seed0 + args.fpr_inits))
    args.vocab = cfg.vocab_size
    models = [Recipe(f"init|{json.dumps(dataclasses.asdict(cfg))}|{sd}", lambda sd=sd: build(cfg, sd, sd), cfg)
              for sd in seeds]
    bar = Progress(len(models), "inits fingerprinted", "models", every=0)
    for m in models:
        _fps(args, m, args.align)
        bar.update()
    results = []
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            r, aligned = _verdicts(args, models[i], models[j], args.align)
            results.append(dict(a=seeds[i], b=seeds[j], S=r.n_identity, mean_tau=r.mean_tau, z_perm=r.z_perm, p=r.p,
                                p_perm=r.p_perm,
                                p_overlap=r.p_overlap, p_aligned=aligned.p if aligned else float("nan"),
                                table_fit=aligned.table_fit if aligned else float("nan"),
                                matched_on=aligned.matched_on if aligned else "",
                                made_by="-" if r.p >= ALPHA
                                else "p_perm and p_overlap" if max(r.p_perm, r.p_overlap) < ALPHA
                                else "p_perm" if r.p_perm < ALPHA else "p_overlap" if r.p_overlap < ALPHA
                                else "their Fisher combination alone"))
    table = [dict(test=t, **rate_summary([r[t] for r in results], []))
             for t in ("p", "p_perm", "p_overlap") + (("p_aligned",) if args.align else ())]
    print(f"{len(models)} fresh inits (width {cfg.n_embd}, vocab {cfg.vocab_size}, k {min(args.k, cfg.n_embd // 2)}), "
          f"{len(results)} unrelated pairs, |S| {min(r['S'] for r in results)}-{max(r['S'] for r in results)}")
    print_table(table)
    z = np.array([r["z_perm"] for r in results])
    print(f"z of the permutation test over the {len(z)} pairs: mean {z.mean():+.3f}, sd {z.std():.3f} (its null: 0, 1)")
    fits = [r["table_fit"] for r in results if not math.isnan(r["table_fit"])]
    if fits:
        print(f"token-table match: mean |r| {min(fits):.3f}-{max(fits):.3f} over the pairs, trusted in "
              f"{sum(r['matched_on'] == 'token table' for r in results)}")
    elif args.align:
        print("token-table match: not used (the held-out rows are fewer than the width)")
    false = [r for r in results if r["p"] < ALPHA]
    for r in false:                                   # is a small p_perm the closed form's tail, or the data?
        fps = [_fps(args, models[seeds.index(s)], False)[0] for s in (r["a"], r["b"])]
        r["p_perm_monte_carlo"] = permutation_p_monte_carlo(cross_matrix(*fps, args.k, args.rank_by, args.set_mode)[2])
        print(f"  false positive: seeds {r['a']}, {r['b']}: |S| {r['S']}, p {r['p']:.2g} (p_perm {r['p_perm']:.2g}, "
              f"by Monte Carlo {r['p_perm_monte_carlo']:.2g}; p_overlap {r['p_overlap']:.2g}): made by {r['made_by']}")
    return dict(config=dataclasses.asdict(cfg), table=table, pairs=results, z_mean=float(z.mean()), z_sd=float(z.std()),
                made_by={k: sum(r["made_by"] == k for r in false) for k in dict.fromkeys(r["made_by"] for r in false)})


def _qq_plot(args, results, tests):
    plt, fig, axes = figure(1, 2, figsize=(10, 4))
    for ax, zoom in zip(axes, (1.0, 0.05)):
        for t in tests:
            p = np.sort([r[t] for r in results if not r["related"]])
            expected = (np.arange(1, len(p) + 1) - 0.5) / len(p)
            ax.plot(expected, p, ".-", ms=3, label=f"{t}" + (" (verdict)" if t == "p" else ""))
        ax.plot([0, zoom], [0, zoom], "k:", lw=1, label="uniform")
        ax.axhline(ALPHA, c="gray", lw=0.5)
        ax.set(xlim=(0, zoom), ylim=(0, zoom), xlabel="uniform quantile", ylabel="p-value, unrelated pairs",
               title=f"QQ plot of {len(p)} unrelated pairs" + (" (zoom)" if zoom < 1 else ""))
        ax.legend(fontsize=7)
    save_figure(fig, os.path.join(args.out, "fpr_qq.png"))


def exp_speed(args):
    """Fingerprint speed: a fresh --model (its preset as named, seeded by the first of --seeds) built on --device
    with weights in --dtype (default bfloat16 on CUDA; fingerprint runs under bf16 autocast there in any case),
    then N = --sequences random sequences of --seq_len through fingerprint in batches of --batch_size. The
    fingerprint is timed end to end, as a user waits for it (inputs drawn, states copied back, the first batch's
    warm-up); the build is timed apart. Reports tokens/s, TFLOP/s (model.forward_flops, no LM head), the share
    of the GPU's bf16 peak and its peak memory."""
    device = torch.device(args.device)
    args.dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")   # results.json records it
    dtype = DTYPES[args.dtype]
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    t0 = time.time()
    model = build(get_config(args.model, **args.knobs), args.seeds[0], device=device, dtype=dtype).eval()
    sync()
    built = time.time() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.time()
    H = fingerprint(model, args.sequences, args.seq_len, seed=args.input_seed, batch_size=args.batch_size,
                    name=args.model, progress=True)
    sync()
    seconds = time.time() - t0
    flops = forward_flops(model, args.seq_len, logits_positions=0) * args.sequences
    peak = peak_flops(device)
    row = dict(model=args.model, params=model.num_params(), dtype=args.dtype,
               autocast="bfloat16" if device.type == "cuda" else None,
               sequences=args.sequences, seq_len=args.seq_len, batch_size=args.batch_size, width=H.shape[1],
               build_seconds=built, seconds=seconds, tokens_per_s=args.sequences * args.seq_len / seconds,
               pflop=flops / 1e15, tflops=flops / seconds / 1e12, mfu=flops / seconds / peak if peak else None,
               peak_memory_gib=torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None)
    print_table([row], floats="{:.4g}")
    return row


def exp_baselines(args):
    """PCS, ICS, Intrinsic, REEF beside SeedPrint on the pairs of Tables 4b, 4c and 5 (threshold 0.8)."""
    data = _data(args, args.corpus)
    a, b = args.seeds[0], args.seeds[1]
    run_a, run_b = _run(args, f"seed{a}", a, data), _run(args, f"seed{b}", b, data)
    table5 = exp_table5(args)
    pairs = [(_ckpts(run_a)[0][1], _ckpts(run_a)[-1][1], f"init {a} vs trained {a}", True),
             (_ckpts(run_a)[-1][1], _ckpts(run_b)[-1][1], f"trained {a} vs trained {b}", False)]
    base = _ckpts(run_a)[-1][1]
    child = _ckpts(os.path.join(args.out, "runs", f"seed{a}_on_{args.corpus2}"))[-1][1]
    distractor = _ckpts(os.path.join(args.out, "runs", f"seed{b}_order2_on_{args.corpus2}"))[-1][1]
    pairs += [(base, child, table5[0]["pair"], True), (base, distractor, table5[1]["pair"], False)]
    rows = []
    for pa, pb, label, truth in pairs:
        ma, mb = load_model(pa).eval(), load_model(pb).eval()
        scores = {name: f(ma, mb) for name, f in BASELINES.items()}
        r = _test(args, pa, pb, label, truth)
        rows.append(dict(pair=label, truth=r["truth"], **{n: round(v, 3) for n, v in scores.items()},
                         SeedPrint=r["verdict"]))
    print("(threshold 0.8: a baseline says 'related' above it)")
    return rows


# ----------------------------------------------------------------------------- many models at once

def short_names(paths: list) -> list:
    """Each path's shortest tail of components that no other path ends with: seed0/ckpt_0000200.pt and
    seed1/ckpt_0000200.pt, never ckpt_0000200.pt twice."""
    parts = [os.path.normpath(p).split(os.sep) for p in paths]
    names = []
    for i, p in enumerate(parts):
        k = next((k for k in range(1, len(p) + 1) if all(q[-k:] != p[-k:] for j, q in enumerate(parts) if j != i)),
                 len(p))
        names.append(os.sep.join(p[-k:]) or paths[i])      # os.sep.join keeps a leading root: /x/m, x/m
    return names


def report_matrix(args, res: dict, seconds: float) -> dict:
    """Print the verdict, Holm-adjusted p and mean tau of every pair as matrices, the lineages, and a heatmap."""
    n, names = len(args.models), short_names(args.models)
    cell = lambda i, j, f: "-" if i == j else f(res["results"][(min(i, j), max(i, j))])
    for title, f in (("verdict (Holm-adjusted over all pairs)", lambda r: "RELATED" if r.related else "unrelated"),
                     ("p (Holm-adjusted)", lambda r: f"{r.p:.2g}"), ("mean tau", lambda r: f"{r.mean_tau:+.3f}")):
        print(title)
        print_table([dict(model=names[i], **{f"[{j}]": cell(i, j, f) for j in range(n)}) for i in range(n)])
    groups = [[names[i] for i in g] for g in res["groups"]]
    print("lineages: " + " | ".join(", ".join(g) for g in groups) + f"   [{seconds:.1f} s for {n} models]")
    for (i, j), r in res["results"].items():
        if r.shared:
            print(f"by construction, {names[i]} and {names[j]}: {r.shared}")
    plt, fig, ax = figure(figsize=(1.0 * n + 3, 0.8 * n + 2))
    logp = np.zeros((n, n))
    for (i, j), r in res["results"].items():
        logp[i, j] = logp[j, i] = min(-math.log10(max(r.p, 1e-300)), 300)
    im = ax.imshow(logp, cmap="viridis")
    for (i, j), r in res["results"].items():
        for a, b in ((i, j), (j, i)):
            ax.text(b, a, f"{'R' if r.related else 'u'}\n{r.mean_tau:+.2f}", ha="center", va="center", fontsize=7,
                    color="w" if logp[a, b] < logp.max() / 2 else "k")
    ax.set(xticks=range(n), yticks=range(n), title="SeedPrint: -log10 p (Holm), R = related, mean tau")
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    ax.set_yticklabels(names, fontsize=7)
    fig.colorbar(im, ax=ax)
    save_figure(fig, os.path.join(args.out, "matrix.png"))
    return dict(models=args.models, seconds=seconds, groups=groups,
                pairs=[dict(a=args.models[i], b=args.models[j], **dataclasses.asdict(r))
                       for (i, j), r in res["results"].items()])


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = ArgumentParser(prog="seedprint.py", description="SeedPrint: do two models share an initialization?")
    p.add_argument("models", nargs="*", help="two or more train.py checkpoints or Hugging Face directories (base "
                   "first); with more than two, every pair is tested, Holm-adjusted, and the models grouped by lineage")
    p.add_argument("--exp", choices=EXPERIMENTS + OTHER_EXPERIMENTS + ("all",), default=None,
                   help="all = the paper's tables, fig11, fpr and baselines; derivatives (needs --base) and inits "
                   "run alone")
    p.add_argument("--sequences", type=int, default=2000, help="random input sequences N")
    p.add_argument("--seq_len", type=int, default=64, help="tokens per input (the paper: 1024)")
    p.add_argument("--input_seed", type=seed_int, default=0)
    p.add_argument("--k", type=int, default=400, help="identity dimensions per model (capped at half the width)")
    p.add_argument("--rank_by", choices=("smallest", "largest", "abs"), default="smallest")
    p.add_argument("--set_mode", choices=("coset", "base"), default="coset")
    p.add_argument("--align", type=parse_bool, default=False, metavar="on|off",
                   help="also match B's coordinates to A's (a signed permutation): by the token tables' rows of "
                   "held-out tokens where that match is trusted (table_gate), else on held-out inputs; sees "
                   "through a permuted residual basis, signs flipped or not. The verdict is the exact test or the "
                   "matched one at alpha/2 each; a match on held-out inputs counts only where its mean tau reaches "
                   "ALIGNED_TAU_FLOOR")
    add_device_flags(p, "load the models in this dtype (default: each checkpoint's own; float32 on CPU is exact)")
    p.add_argument("--out", default="out/seedprint")
    g = p.add_argument_group("experiments (small models trained here)")
    add_config_flags(p, default_model="tiny")
    g.add_argument("--corpus", default="shakespeare",
                   help="pretraining corpus: a named corpus of train.py, or a text file")
    g.add_argument("--corpus2", default="brown", help="continual-training corpus (Table 5)")
    g.add_argument("--tokenizer", choices=("bytes", "gpt2"), default="gpt2")
    g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (train.py --from)")
    g.add_argument("--seeds", type=seed_int, nargs="+", default=[42, 123, 1000, 2000])
    g.add_argument("--data_seed", type=seed_int, default=1234)
    g.add_argument("--steps", type=int, default=200)
    g.add_argument("--ckpt_every", type=int, default=50)
    g.add_argument("--batch_size", type=int, default=16, help="training batch; --exp speed: sequences per forward")
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--top", type=int, default=16, help="top-k biased dimensions of --exp fig11")
    g.add_argument("--fpr_inits", type=int, default=12, help="--exp fpr: inits (seeds from --fpr_seed0)")
    g.add_argument("--fpr_trained", type=int, default=4, help="--exp fpr: how many of them are trained")
    g.add_argument("--fpr_descendants", type=int, default=None,
                   help="--exp fpr: how many trained models get a continual descendant (default: all)")
    g.add_argument("--fpr_seed0", type=seed_int, default=100)
    g.add_argument("--base", default=None, help="--exp derivatives: the real checkpoint (a Hugging Face directory) "
                   "the derivatives are made of; --exp inits: its architecture")
    g.add_argument("--deriv_steps", type=int, default=40, help="--exp derivatives: steps of each short training run")
    g.add_argument("--conditions", nargs="+", choices=list(ALIGNED_CONDITIONS), default=list(ALIGNED_CONDITIONS),
                   help="--exp aligned: vocabulary, width and training of its models")
    g.add_argument("--fit_seeds", type=seed_int, nargs="+", default=[100, 101, 102],
                   help="--exp aligned: the seeds its floor is fit on")
    g.add_argument("--test_seeds", type=seed_int, nargs="+", default=list(range(103, 112)),
                   help="--exp aligned: the seeds it is tested on")
    g.add_argument("--finetune_steps", type=int, nargs="+", default=[50, 200, 400],
                   help="--exp aligned: lengths of the continuation whose power is measured")
    args = p.parse_args(argv)
    check_options(args.k, args.rank_by, args.set_mode)          # before any model is loaded or trained
    if args.exp is None and len(args.models) < 2:
        p.error("give two or more models (base first), or --exp NAME")
    if args.exp is not None and args.models:
        p.error("give models to compare, or --exp NAME, not both")
    if args.sequences < 10 or args.seq_len < 1:
        p.error("--sequences must be at least 10 and --seq_len at least 1")
    if args.exp == "derivatives" and not args.base:
        p.error("--exp derivatives needs --base DIR (a Hugging Face checkpoint)")
    check_output(args.out)
    if args.base:
        if not os.path.isdir(args.base):
            raise FileNotFoundError(f"--base {args.base}: a Hugging Face directory is wanted (config.json, "
                                    f"*.safetensors{', tokenizer.json' if args.exp == 'derivatives' else ''})")
        read_model_config(args.base)
        if args.exp == "derivatives":
            train.get_tokenizer(args.base)                   # its corpora are tokenized by the base's own tokenizer
            check_file_weights_finite(args.base)
    for name in ("steps", "ckpt_every", "batch_size", "top", "fpr_inits", "deriv_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.exp is not None:                          # the training settings of the experiments, before any data
        train.TrainConfig(batch_size=args.batch_size, max_steps=args.steps, lr=args.lr, ckpt_every=args.ckpt_every)
    if not 0 <= args.fpr_trained <= args.fpr_inits or len(set(args.seeds)) < 2:
        p.error("need 0 <= --fpr_trained <= --fpr_inits and at least two distinct --seeds")
    if len(set(args.fit_seeds)) < 2 or len(set(args.test_seeds)) < 2 or set(args.fit_seeds) & set(args.test_seeds):
        p.error("--exp aligned fits on one range of seeds and tests on another: give two or more distinct "
                "--fit_seeds and --test_seeds, none in both")
    if min(args.finetune_steps) < 1:
        p.error(f"--finetune_steps must be at least 1, got {min(args.finetune_steps)}")
    args.knobs = config_overrides(args)
    device = resolve_device(args.device)
    args.device = str(device)
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    if args.exp is None:
        for path in args.models:                                 # every refusal before any work
            if args.seq_len > read_model_config(path).block_size:
                raise ValueError(f"--seq_len {args.seq_len} exceeds the context of {path} "
                                 f"({read_model_config(path).block_size} tokens)")
        for path in args.models:
            check_file_weights_finite(path)
    else:
        cfg = read_model_config(args.base) if args.base else get_config(args.model, **{**LLAMA_KNOBS, **args.knobs})
        if args.seq_len > cfg.block_size:
            raise ValueError(f"--seq_len {args.seq_len} exceeds the experiments' block_size {cfg.block_size}")
    with lock_dir(args.out):
        run(args)


def run(args) -> None:
    if args.exp is None:
        t0 = time.time()
        res = compare_many(args.models, k=args.k, rank_by=args.rank_by, set_mode=args.set_mode,
                           cache_dir=os.path.join(args.out, "fingerprints"), device=args.device, dtype=args.dtype,
                           align=args.align, sequences=args.sequences, seq_len=args.seq_len, seed=args.input_seed)
        seconds = time.time() - t0
        if len(args.models) == 2:
            r = res["results"][(0, 1)]
            print(f"{r.explain()}\n(reference tests: p_t {r.p_t:.3g}, p_u {r.p_u:.3g}, p_z {r.p_z:.3g}) "
                  f"[{seconds:.1f} s]")
            results = {"compare": dict(a=args.models[0], b=args.models[1], **dataclasses.asdict(r), seconds=seconds)}
        else:
            results = {"matrix": report_matrix(args, res, seconds)}
    else:
        funcs = dict(table4a=exp_table4a, table4b=exp_table4b, table4c=exp_table4c, table5=exp_table5,
                     fig11=exp_fig11, fpr=exp_fpr, baselines=exp_baselines, derivatives=exp_derivatives,
                     inits=exp_inits, speed=exp_speed, aligned=exp_aligned)
        results = {}
        for name in (EXPERIMENTS if args.exp == "all" else [args.exp]):
            print(f"=== {name}: {funcs[name].__doc__.split(':')[0].strip()}")
            results[name] = funcs[name](args)
            if isinstance(results[name], list):
                print_table(results[name], floats="{:.3g}")
    update_results(os.path.join(args.out, "results.json"), results, args.device, args.dtype)


if __name__ == "__main__":
    run_script(main, "seedprint.py")
