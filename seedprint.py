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
hides a true lineage (a false negative, never a false positive); the aligned verdict (--align on) matches B's
coordinates to A's first (by the token tables where they agree unmistakably, else on held-out inputs) and sees
through it. Models of two widths (a child pruned in width, or grown) have no exact test: the narrower one's
coordinates are matched into the wider one's the same way, and that matched test is the verdict.

In a dispute the models rarely sit on one machine: a fingerprint file holds everything a verdict reads of one
model, so owners publish files, not weights, and one suspect is searched against a folder of them (each base's
verdict Holm-adjusted across the folder: derives from one, from none, or inconclusive).

The reference implementation's own tests (an analytic z of mean tau, a t-test and a Mann-Whitney U against taus
of independent Gaussian matrices) are not verdicts here: unrelated models are two random functions of the *same*
inputs, so their taus spread far wider than those nulls allow. studies/lineage_fpr.py measures how often they err.

    python seedprint.py A B            # two train.py checkpoints or Hugging Face directories
    python seedprint.py A B C D        # every pair, Holm-adjusted, grouped into lineages
    python seedprint.py A B --align on # the aligned verdict: sees through a permuted residual basis
    python seedprint.py A --save reg/a.npz           # A's fingerprint file, made where A lives
    python seedprint.py SUSPECT --against reg        # the suspect against every fingerprint file in reg/

The studies that calibrate the verdict and reproduce the paper's Tables 4-5 train their models in studies/
(studies/__init__.py lists them). Imports model.py, hf.py (models by path), data.py (the random inputs) and
common.py.
"""
import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Progress, add_device_flags, add_settings_flags, atomic_write,
                    check_dtype_runs, check_output, check_settings, figure, flag_type, lock_dir, parse_bool,
                    print_table, provenance, range_rule, refuse_unused, resolve_device, run_script, save_figure,
                    setting, settings_given, update_results)
from model import GPT, GPTConfig, read_checkpoint
import hf
from data import random_batches
import numpy as np
import torch
from scipy import optimize, stats
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ALPHA = 0.01
# The aligned verdict's floor on a match fit on held-out inputs: fit by studies/aligned_floor.py, whose numbers
# are in docs/seedprint.md ("The aligned verdict").
ALIGNED_TAU_FLOOR = 0.06
# The same floor for models of two widths: a narrower model's coordinates matched into a wider one's choose among
# more candidates, over a smaller identity set, so unrelated pairs reach larger matched taus. Fit by studies/pruned.py
# on one set of seeds (twice their largest, rounded up) and tested on another (docs/seedprint.md, "In a dispute",
# its paragraph "Children pruned in width or depth").
PARTIAL_TAU_FLOOR = 0.21
# The mean |r| from which a (whitened) token-table match is trusted: chosen and tested in studies/aligned_floor.py
# (docs/seedprint.md, "The aligned verdict": descendants' and unrelated models' values).
TABLE_MATCH_R = 0.5
# The held-out inputs an alignment is fit on: the test's seed plus this, never the test's own inputs.
HELD_OUT_SEED = 1_000_003

# ----------------------------------------------------------------------------- 2-4. the statistic
# numpy and scipy only: seedprint_test runs on fingerprints saved anywhere, by anything.

def identity_dims(H: np.ndarray, k: int, rank_by: str = "smallest") -> np.ndarray:
    """The k dimensions of H's mean output ranked by `rank_by`: smallest (the reference), largest, abs."""
    m = H.mean(axis=0)
    key = {"smallest": m, "largest": -m, "abs": -np.abs(m)}[rank_by]
    return np.sort(np.argsort(key, kind="stable")[:k])


def check_k(k: int, widths, which: str = "the narrowest width") -> None:
    """A --k given on a command line must fit every model's width: the identity set is the k most extreme
    coordinates, at most half of them. (Left at its default, k is capped at half the width: identity_set.)"""
    if k > min(widths) // 2:
        raise ValueError(f"--k {k} is more than {which} {min(widths)} allows: the identity set is the k most extreme "
                         f"of its coordinates, at most half of them ({min(widths) // 2})")


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


def overlap_p(overlap: int, d: int, k: int, log: bool = False) -> float:
    """P(|S| >= overlap) when B's k identity dimensions are a uniformly random k-subset of d, as H0's
    exchangeability makes them: hypergeometric. log=True: its logarithm, exact where p underflows."""
    return float((stats.hypergeom.logsf if log else stats.hypergeom.sf)(overlap - 1, d, k, k))


def two_widths(widths) -> bool:
    """Whether a pair's widths (A's, B's; None: an exact verdict's) differ: then no exact test exists, and the matched
    test alone is the verdict."""
    return widths is not None and widths[0] != widths[1]


def tau_floor(widths) -> float:
    """The matched mean tau a match on held-out inputs must reach to count: ALIGNED_TAU_FLOOR for one width,
    PARTIAL_TAU_FLOOR for two."""
    return PARTIAL_TAU_FLOOR if two_widths(widths) else ALIGNED_TAU_FLOOR


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
    # None where a field does not apply (results.json holds no NaN)
    p_raw: Optional[float] = None     # p before the Holm adjustment across pairs (compare_many)
    aligned: bool = False   # the aligned verdict: the exact test, or the test after matching B's coordinates to A's
    signed: bool = False    # the alignment could negate coordinates (RMSNorm models), not only move them
    moved: int = 0          # how many of B's coordinates the alignment moved or negated (0: B was in A's basis)
    p_exact: Optional[float] = None   # aligned mode: the exact test's combined p (the fields above describe it)
    p_aligned: Optional[float] = None  # ... the combined p of the same test after the alignment
    tau_aligned: Optional[float] = None  # ... and its matched mean tau, which must reach ALIGNED_TAU_FLOOR
    n_identity_aligned: int = 0
    matched_on: str = ""    # ... what the match was fit on: "token table" (trusted: table_gate) or "held-out inputs"
    table_fit: Optional[float] = None  # ... the token-table match's mean |r| (None: no tables to match)
    widths: Optional[tuple] = None     # (A's, B's); two widths: the matched test alone is the verdict (p_exact None)
    shared: str = ""        # what the two models' own records say they share by construction (shared_by_construction)

    def explain(self) -> str:
        """The verdict in one line: which test, on which set, how many dimensions, and what the models' records
        say they share by construction."""
        what = "RELATED (shared initialization)" if self.related else "unrelated"
        if self.matched_only():
            return self.explain_matched(what) + (f". By construction, {self.shared}" if self.shared else "")
        exact = (f"dimension-permutation test of mean tau {self.mean_tau:+.4f} over |S| = {self.n_identity} identity "
                 f"dimensions (k = {self.k}), N = {self.n_inputs}: p_perm {self.p_perm:.3g}, p_overlap "
                 f"{self.p_overlap:.3g}, combined p {self.p_exact if self.aligned else self.p:.3g}")
        if not self.aligned:
            line = f"{what}: {exact} vs alpha {ALPHA}"
        else:
            floor = "it does" if self.tau_aligned >= self.floor() else "it is below"
            line = (f"{what}: aligned verdict, p {self.p:.3g} vs alpha {ALPHA} (twice the smaller of two tests): "
                    f"the exact {exact}; after matching B's coordinates to A's{' with signs' if self.signed else ''} "
                    f"{self.how_matched()}, {self.moved} moved: matched mean tau {self.tau_aligned:+.4f} over |S| = "
                    f"{self.n_identity_aligned}, p {self.p_aligned:.3g}")
            if self.matched_on != "token table":
                line += (f", which counts only where the tau reaches the floor {self.floor()} ({floor}; models "
                         f"trained from other inits on the same data stay below it)")
        return line + (f". By construction, {self.shared}" if self.shared else "")

    def floor(self) -> float:
        """The floor this verdict's match on held-out inputs had to reach (tau_floor)."""
        return tau_floor(self.widths)

    def matched_only(self) -> bool:
        """Whether this is the verdict of two widths: the matched test alone (p_exact None)."""
        return two_widths(self.widths)

    def how_matched(self) -> str:
        """What the coordinates were matched on, and how well, in words."""
        r = "|r|" if self.signed else "r"
        if self.matched_on == "token table":
            return f"by their whitened token tables (matched columns' mean {r} {self.table_fit:.3f}, trusted)"
        return "on held-out inputs" + ("" if self.table_fit is None else
                                       f" (the token tables' match, mean {r} {self.table_fit:.3f}, untrusted)")

    def explain_matched(self, what: str) -> str:
        """The verdict of two models of unequal widths: the matched test alone."""
        wa, wb = self.widths
        line = (f"{what}: matched verdict (widths {wa} and {wb}: no exact test), p {self.p:.3g} vs alpha {ALPHA}: the "
                f"narrower model's {min(wa, wb)} coordinates matched into the wider one's "
                f"{self.how_matched()}; matched mean tau {self.tau_aligned:+.4f} over |S| = {self.n_identity}, p "
                f"{self.p_aligned:.3g}")
        if self.matched_on != "token table":
            reached = "it does" if self.tau_aligned >= self.floor() else "it is below"
            line += f", which counts only where the tau reaches the floor {self.floor()} ({reached})"
        return line


@dataclass(frozen=True)
class Options:
    """What fixes a verdict: the random inputs every model sees and the statistic on their fingerprints. Each field
    is a flag of seedprint.py and of every lineage study, its range checked here."""
    sequences: int = setting(2000, "random input sequences N", "int>=10")
    seq_len: int = setting(64, "tokens per input (the paper: 1024)", "int>=1")
    input_seed: int = setting(0, "seed of the random inputs", "seed")
    k: int = setting(400, "identity dimensions per model (by default capped at half the width; given, at most half "
                     "the narrower width)", "int>=2")
    rank_by: str = setting("smallest", "the identity dimensions: the k of smallest, largest or largest |mean output|",
                           choices=("smallest", "largest", "abs"))
    set_mode: str = setting("coset", "coset: A's identity set intersected with B's; base: A's alone",
                            choices=("coset", "base"))

    def __post_init__(self):
        check_settings(self)

    # recorded and from_recorded: the one place a flag's name becomes a fingerprint file's (--input_seed: seed) and back
    RECORDED_AS = {"input_seed": "seed"}

    def recorded(self, fields=None) -> dict:
        """These options (every field, or those named in `fields`) under the names a fingerprint file records them
        by: file_options' keys, less the token ids' bound (a model's own)."""
        fields = [f.name for f in dataclasses.fields(self)] if fields is None else fields
        return {self.RECORDED_AS.get(name, name): getattr(self, name) for name in fields}

    @classmethod
    def from_recorded(cls, options: dict) -> "Options":
        """recorded's inverse: the Options of a fingerprint file's recorded options, their ranges checked (the token
        ids' bound, not an Options field, left out); a key that recorded never writes raises TypeError."""
        field_of = {cls.RECORDED_AS.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(field_of) - {"vocab"})
        if unknown:
            raise TypeError(f"no option is recorded as {', '.join(unknown)}")
        return cls(**{field_of[k]: v for k, v in options.items() if k != "vocab"})


def check_options(k: int = 400, rank_by: str = "smallest", set_mode: str = "coset", temperature: float = 10.0,
                  alpha: float = ALPHA) -> None:
    """Every statistic option, checked before any model is run (Options' ranges, and the two that are no flag)."""
    Options(k=k, rank_by=rank_by, set_mode=set_mode)
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
    never on the test's: under H0 the match is then mostly fitted noise, independent of the test inputs.
    Models of two widths (a child pruned in width, or grown): the partial match, each coordinate of the narrower
    model given its own coordinate of the wider one; where B is the narrower, A's coordinates that none of B's plays
    have match -1 and sign 0."""
    za = (XA - XA.mean(0)) / np.maximum(XA.std(0), 1e-12)
    zb = (XB - XB.mean(0)) / np.maximum(XB.std(0), 1e-12)
    corr = za.T @ zb / len(XA)
    rows, cols = optimize.linear_sum_assignment(np.abs(corr) if signed else corr, maximize=True)
    r = corr[rows, cols]
    match, sign = np.full(XA.shape[1], -1), np.zeros(XA.shape[1])
    match[rows], sign[rows] = cols, np.where(r < 0, -1.0, 1.0) if signed else 1.0
    return match, sign, float(np.abs(r).mean() if signed else r.mean())


def table_gate(rows: int, d: int, d2: int = None) -> float:
    """The mean |r| a token-table match must reach to be trusted: TABLE_MATCH_R, or, where the table has few rows,
    the largest |r| that any two independent columns reach except with probability about 1e-3 (r sqrt(rows) taken
    as standard normal, P(|z| > t) <= 2 exp(-t^2 / 2), over all d x d2 pairs, d2 the other model's width, d by
    default; spot-checked by Monte Carlo in the tests), whichever is larger. Above 1 (fewer than about 35 rows at
    width 32) no match is trusted."""
    return max(TABLE_MATCH_R, math.sqrt(2 * math.log(2000 * d * (d2 or d)) / max(rows, 1)))


def whiten(X: np.ndarray) -> np.ndarray:
    """X (rows x d) with its columns centred and decorrelated (ZCA: X C^-1/2, C the columns' covariance). ZCA
    commutes with every orthogonal map of the columns, signed permutations included: whiten(X Q) = whiten(X) Q."""
    X = X - X.mean(0)
    w, V = np.linalg.eigh(X.T @ X / len(X))
    return X @ (V / np.sqrt(np.maximum(w, 1e-12 * w.max()))) @ V.T


def whitened_table(T: np.ndarray):
    """whiten(T) in float64, as table_match matches it; None where there is no table, or its rows are fewer than its
    width (too few to whiten), or it is constant."""
    if T is None or len(T) < T.shape[1] or not T.std() > 0:
        return None
    return whiten(T.astype(np.float64))


def table_match(TA: np.ndarray, TB: np.ndarray, signed: bool = True, whitened: bool = False):
    """align_coordinates on the two token tables' held-out rows, each whitened first, and whether the match is
    trusted: (match, sign, fit, trusted); fit None and untrusted where the rows are fewer than the width (too few to
    whiten) or a table is constant. Why whiten: a trained table carries a few strong directions (token
    frequency and the like) that every column loads on, so two models trained on the same data would have
    columns that correlate through them whatever their bases. Whitened, only a map that moves whole columns -- a
    descendant's signed permutation -- correlates columns one to one; a rotation of the same table spreads each
    over all. whitened=True: TA and TB are whitened_table's already (a table compared with many is whitened once)."""
    WA, WB = (TA, TB) if whitened else (whitened_table(T) for T in (TA, TB))
    if WA is None or WB is None:
        return None, None, None, False
    match, sign, fit = align_coordinates(WA, WB, signed)
    return match, sign, fit, fit >= table_gate(len(WA), WA.shape[1], WB.shape[1])


def signs_keep_function(*configs) -> bool:
    """Whether a sign flip of residual coordinates is function-preserving for every model given (None: a model
    whose architecture is unknown, e.g. a fingerprint array, taken as RMSNorm): not with LayerNorm."""
    return all(c is None or c.norm != "layernorm" for c in configs)


def seedprint_test(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                   temperature: float = 10.0, alpha: float = ALPHA, align=None, signed: bool = True,
                   tables=None, whitened: bool = False) -> SeedPrintResult:
    """Steps 2-4 on the fingerprints of two models on the same N inputs. align=(HA_hold, HB_hold): the two models'
    fingerprints on other, held-out inputs, and the aligned verdict: the exact test, and the same test after B's
    coordinates are matched to A's (a signed permutation, or for LayerNorm models, signed=False, a plain one).
    The match comes from one of two places:
      - tables=(TA, TB): the two token tables' rows of held-out tokens (held_out_rows), whitened (table_match; with
        whitened=True, whitened_table's already). A
        descendant's columns are its base's, moved, so this match recovers the basis; it is trusted where its mean
        |r| reaches table_gate, far above what independent tables reach by chance, so its p counts without a
        floor. A trusted match is used alone: one that is partly wrong costs power, never calibration;
      - otherwise (no tables, or an untrusted match: a rotated basis, models trained from other inits) the held-out
        fingerprints. That match is fit to B, so its p holds no longer: models trained from other inits on the same
        data share coordinate roles that it finds, and at N = 2000 a matched tau of +0.01 is already
        "significant". What tells a lineage apart is the size of the agreement: a descendant keeps a large share of
        its base's ranking, same-data models a small one. So this test counts only where its matched mean tau
        reaches ALIGNED_TAU_FLOOR.
    The verdict is their union at alpha / 2 each: p = min(1, 2 min(p_exact, p_aligned)), so it never misses what
    the exact test sees.
    Models of two widths (a child pruned in width, or grown wider): no exact test exists, coordinate j of one is not
    coordinate j of the other. The narrower model's coordinates are matched into the wider one's (a partial signed
    matching from the same two sources, the tables trusted as before; matched on inputs, the test counts from
    PARTIAL_TAU_FLOOR), and the matched test alone is the verdict, at alpha."""
    check_options(k, rank_by, set_mode, temperature, alpha)
    if len(HA) != len(HB):
        raise ValueError(f"fingerprints on {len(HA)} and {len(HB)} inputs: the models must see the same N inputs")
    widths = (HA.shape[1], HB.shape[1])
    if align is None:
        if two_widths(widths):
            raise ValueError(f"models of widths {HA.shape[1]} and {HB.shape[1]} have no exact test: coordinate j of "
                             f"one is not coordinate j of the other; compare them with the aligned verdict")
        return permutation_verdict(HA, HB, k, rank_by, set_mode, temperature, alpha)
    if [x.shape[1] for x in align] != [HA.shape[1], HB.shape[1]] or len(align[0]) != len(align[1]):
        raise ValueError("the held-out fingerprints must have the test fingerprints' widths, and as many inputs")
    on, table_fit = "held-out inputs", None
    if tables is not None and tables[0] is not None and tables[1] is not None:
        if len(tables[0]) != len(tables[1]) or [t.shape[1] for t in tables] != [HA.shape[1], HB.shape[1]]:
            raise ValueError(f"the token tables' held-out rows ({tables[0].shape} and {tables[1].shape}) must be as "
                             f"many and as wide as the fingerprints ({HA.shape[1]} and {HB.shape[1]})")
        match, sign, table_fit, trusted = table_match(*tables, signed=signed, whitened=whitened)
        on = "token table" if trusted else on
    if on == "held-out inputs":
        match, sign, _ = align_coordinates(*align, signed=signed)
    kept = match >= 0                                   # all of A's coordinates, unless B is the narrower
    matched = permutation_verdict(HA[:, kept], HB[:, match[kept]] * sign[kept], k, rank_by, set_mode, temperature,
                                  alpha)
    counted = matched.p if on == "token table" or matched.mean_tau >= tau_floor(widths) else 1.0
    moved = int(((match[kept] != np.flatnonzero(kept)) | (sign[kept] < 0)).sum())
    aligned = dict(aligned=True, signed=signed, moved=moved, p_aligned=matched.p, tau_aligned=matched.mean_tau,
                   n_identity_aligned=matched.n_identity, matched_on=on, table_fit=table_fit,
                   widths=widths)
    if two_widths(widths):         # the matched test is the verdict: its numbers in the exact test's fields too
        return dataclasses.replace(matched, related=bool(counted < alpha), p=counted, **aligned)
    exact = permutation_verdict(HA, HB, k, rank_by, set_mode, temperature, alpha)
    p = min(1.0, 2 * min(exact.p, counted))
    return dataclasses.replace(exact, related=bool(p < alpha), p=p, p_exact=exact.p, **aligned)


def permutation_verdict(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest",
                        set_mode: str = "coset", temperature: float = 10.0, alpha: float = ALPHA) -> SeedPrintResult:
    """The exact verdict on two fingerprints in their own coordinates: the permutation test of mean(diag C),
    combined (Fisher) with the overlap of the identity sets."""
    N, d = HA.shape
    S, k, C = cross_matrix(HA, HB, k, rank_by, set_mode, temperature)
    z, p_perm = permutation_test(C)
    p_over, p = 1.0, p_perm
    if set_mode == "coset":
        # Fisher's method, -2 sum(log p) ~ chi2(4), from log p: a related pair's p underflows to 0 when linear
        log_perm = math.log(p_perm) if p_perm > 0 else float(stats.norm.logsf(z))
        log_over = overlap_p(len(S), d, k, log=True)
        p_over, p = math.exp(log_over), float(stats.chi2.sf(-2 * (log_perm + log_over), 4))
    mean_tau = float(np.diag(C).mean()) if len(S) else 0.0
    return SeedPrintResult(related=bool(p < alpha), p=p, p_perm=p_perm, p_overlap=p_over, mean_tau=mean_tau,
                           z_perm=z, n_identity=len(S), k=k, n_inputs=N)


def cross_matrix(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                 temperature: float = 10.0):
    """Steps 2-3: (S, k used, C), C[j, l] the Kendall tau-b between identity dimension j of A and l of B."""
    S, k = identity_set(HA, HB, k, rank_by, set_mode)
    C = kendall_tau_matrix(softmax_rows(HA[:, S], temperature), softmax_rows(HB[:, S], temperature)) if len(S) \
        else np.zeros((0, 0))                        # no shared identity dimension: no evidence of a lineage
    return S, k, C


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


def aligned_sets(vocab: int, seed: int) -> list:
    """The two input sets of the aligned verdict: the test's, with token ids from the lower half of the shared
    vocabulary, and the alignment's, other sequences from the upper half. Unrelated models resemble each other
    by chance on the tokens they see (most on a small vocabulary, whose tokens repeat); fit on other tokens, the
    match carries that chance over far less (README: measured)."""
    return [dict(vocab=vocab // 2, low=0, seed=seed), dict(vocab=vocab, low=vocab // 2, seed=seed + HELD_OUT_SEED)]


def input_sets(vocab: int, seed: int) -> dict:
    """Every input set a verdict reads, by its name in SETS, as fingerprint_all's sets: the exact verdict's (the
    options themselves) and the aligned verdict's test and held-out sets (aligned_sets)."""
    test, held_out = aligned_sets(vocab, seed)
    return dict(exact={}, test=test, held_out=held_out)


def held_out_rows(m, vocab: int):
    """The token table's rows of the alignment's tokens, [vocab // 2, vocab) (aligned_sets), float32 (rows x d),
    for the aligned verdict's table match; None for a model whose weights are not at hand (a callable, a
    fingerprint array)."""
    return m.rows if isinstance(m, Fingerprint) else token_rows(m, vocab // 2, vocab)


def token_rows(m, lo: int, hi: int):
    """Rows [lo, hi) of a model's token table, float32 (rows x d); None for a model whose weights are not at hand.
    A model on disk: the table alone is read (hf.token_rows)."""
    if isinstance(m, str):
        return hf.token_rows(m, lo, hi)
    if isinstance(m, (GPT, Recipe)):
        table = (m if isinstance(m, GPT) else m.build()).transformer.wte.weight
        return table[lo:hi].detach().float().cpu().numpy()
    return None


@dataclass
class Recipe:
    """A model built in code (a derivative, a fresh init): fingerprinted under a cache key that names how it
    is made, and built only when that key is not cached. build returns a model of its own, never one its caller
    keeps using: fingerprint_all moves and casts it in place (to the device and dtype asked for), so a shared one
    would come back on the GPU, or rounded to bf16."""
    key: str
    build: Callable[[], GPT]
    config: Optional[GPTConfig] = None     # its architecture, where known without building it (None: unknown)


def fingerprint_all(models: list, cache_dir: str = None, device="cpu", dtype: str = None, options: dict = None,
                    sets=None) -> list:
    """out[i][j]: the fingerprint of model i on input set j: the options updated by sets[j] (default: one set, the
    options themselves). sets may be a dict by SETS' names (input_sets'): then out[i] is a dict by those names too,
    and a Fingerprint gives its arrays of those names. A model is a GPT, a path, a Recipe, a callable, a Fingerprint
    (named sets only), or a fingerprint array (one set only).
    Each model is loaded once. Paths and recipes are read from the cache under cache_dir, keyed on the identity
    of their weights and every option (device and dtype included), and saved to it only once every fingerprint
    is computed: a run that fails on one model (a damaged file, NaN activations) writes nothing."""
    options, names = dict(options or {}), list(sets) if isinstance(sets, dict) else None
    sets = [dict(options, **s) for s in ((sets.values() if names is not None else sets) or [{}])]
    out, new = [], []
    for m in models:
        if isinstance(m, Fingerprint):          # its sets were made under the options compare_many agreed on
            if names is None:
                raise ValueError("a fingerprint file's arrays are read by name: give sets by SETS' names")
            out.append([m.sets[SETS.index(name)] for name in names])
            continue
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
                                  autocast="bf16" if str(device).startswith("cuda") else None, version=4),
                             sort_keys=True)
            file = os.path.join(cache_dir, hashlib.sha256(key.encode()).hexdigest()[:20] + ".npz") \
                if cache_dir and identity is not None else None
            if file and os.path.isfile(file):
                row.append(np.load(file)["H"])
                continue
            if model is None:
                torch_dtype = getattr(torch, dtype) if dtype else None
                model = m.build().to(device, torch_dtype) if isinstance(m, Recipe) else hf.load(m, device, torch_dtype)
                model.eval()
            name = model_name(m)
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
    return out if names is None else [dict(zip(names, row)) for row in out]


# ----------------------------------------------------------------------------- fingerprint files
# A model's fingerprint travels without its weights: one .npz file holds everything a verdict reads of it (its
# fingerprints on the exact, the aligned test and the held-out inputs, and its token table's held-out rows), the
# options that fixed them, the identity of the weights and how it was made. A verdict from two files is the
# verdict from the two models: the same arrays reach the same test.

FILE_FORMAT, FILE_VERSION = "seedprint-fingerprint", 1
SETS = ("exact", "test", "held_out")          # input_sets' names, in a file's order


@dataclass
class Fingerprint:
    """One model's fingerprint file, in memory."""
    sets: list          # the fingerprints on SETS' inputs, each N x d float32
    rows: np.ndarray    # the token table's held-out rows [vocab // 2, vocab), float32 (held_out_rows)
    options: dict       # what fixed the inputs and the statistic: file_options()
    config: dict        # the model's GPTConfig fields (its width, vocabulary, norm)
    weights: dict       # the weights it came from: each file's name, size and sha256 (weights_record)
    provenance: dict    # device, dtype, versions, date, command
    path: str = ""


def file_options(sequences: int = None, seq_len: int = None, seed: int = None, vocab: int = None, k: int = None,
                 rank_by: str = None, set_mode: str = None) -> dict:
    """Every option a fingerprint file records, None where not given: the inputs (N, T, their seed, the token ids'
    bound) and the statistic (k, rank_by, set_mode)."""
    return dict(sequences=sequences, seq_len=seq_len, seed=seed, vocab=vocab, k=k, rank_by=rank_by,
                set_mode=set_mode)


STATISTIC = ("k", "rank_by", "set_mode")       # file_options' keys that fix the statistic; the others, the inputs


def default_options() -> dict:
    """file_options' defaults, Options' own (vocab: the smaller vocabulary of the models compared)."""
    return file_options(**Options().recorded())


def agreed_options(models: list, asked: dict) -> dict:
    """The options of a comparison: the fingerprint files' among `models` (which must all agree), the ones asked
    for (None: not asked; where files are given, they must agree with them), else the defaults. A disagreement is
    refused in one line naming every option that differs."""
    files = [m for m in models if isinstance(m, Fingerprint)]
    for f in files[1:]:
        differ = [f"{k} {files[0].options[k]} vs {f.options[k]}" for k in default_options()
                  if f.options[k] != files[0].options[k]]
        if differ:
            raise ValueError(f"{files[0].path} and {f.path} were made with other options ({'; '.join(differ)}): "
                             f"make every fingerprint with the same options")
    opts = {**default_options(), **(files[0].options if files else {})}
    given = {k: v for k, v in asked.items() if v is not None}
    other = sorted(set(given) - set(opts))
    if files and other:          # a file's fingerprints are of token inputs as file_options fix them, nothing else
        raise ValueError(f"{files[0].path} holds fingerprints on random tokens as its options fix them: "
                         f"{', '.join(other)} cannot apply to it")
    if files:
        differ = [f"{k} {v} vs the file's {opts[k]}" for k, v in given.items() if k in opts and v != opts[k]]
        if differ:
            raise ValueError(f"{files[0].path} was made with other options than asked for ({'; '.join(differ)}): "
                             f"drop those options, or make the file with them")
    return {**opts, **given}


def make_fingerprint(m, cache_dir: str = None, device="cpu", dtype: str = None, **options) -> Fingerprint:
    """A model's fingerprint file in memory (write_fingerprint saves it): a path, a GPT or a Recipe, fingerprinted
    on the exact, the aligned test and the held-out inputs that `options` (file_options) fix, with the checks of a
    comparison (plan); vocab (the token ids' bound) defaults to the model's own vocabulary."""
    config = config_of(m)
    if config is None:
        raise ValueError("a fingerprint file is made of a model (a path, a GPT or a Recipe): its token table and "
                         "architecture are part of it")
    checked = plan([m], file_options(**options))
    opts, test = checked["inputs"], checked["test"]
    H = fingerprint_all([m], cache_dir, device, dtype, opts, input_sets(opts["vocab"], opts["seed"]))[0]
    return Fingerprint([H[name] for name in SETS], held_out_rows(m, opts["vocab"]), dict(opts, **test),
                       dataclasses.asdict(config), weights_record(m), provenance(device, dtype),
                       path=str(model_name(m)))


def write_fingerprint(path: str, fp: Fingerprint) -> None:
    """fp as one .npz file, written whole: the arrays, and their meta (format, version, options, config, weights,
    provenance) with a sha256 over all of it, so that a damaged or edited file is refused when read. The table's
    rows are stored in the narrowest float type that holds them exactly (bf16 weights stay two bytes a number)."""
    rows, rows_dtype = compact(fp.rows)
    arrays = dict(zip(SETS, fp.sets), rows=rows)
    meta = dict(format=FILE_FORMAT, version=FILE_VERSION, options=fp.options, config=fp.config, weights=fp.weights,
                provenance=fp.provenance, rows_dtype=rows_dtype)
    meta["sha256"] = file_digest(meta, arrays)

    def save(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    atomic_write(path, save)


def read_fingerprint(path: str) -> Fingerprint:
    """A fingerprint file, checked: a file that is no fingerprint, one from a newer format, one whose content does
    not match its sha256 (damaged, truncated or edited), and one whose arrays do not fit its options and config or
    hold NaN or inf (the sha256 proves wholeness, not that the file came from a model) are refused in one line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no fingerprint file at {path!r}" + (" (a directory)" if os.path.isdir(path) else ""))
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
        meta = json.loads(str(arrays.pop("meta"))) if "meta" in arrays else None
    except Exception as e:         # zip, npy and json each raise their own kinds for a damaged or foreign file
        raise ValueError(f"{path} is not a readable fingerprint file: damaged, truncated or another format "
                         f"({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FILE_FORMAT:
        raise ValueError(f"{path} is not a SeedPrint fingerprint file (make one with python seedprint.py MODEL "
                         f"--save FILE)")
    if not isinstance(meta.get("version"), int) or meta["version"] > FILE_VERSION:
        raise ValueError(f"{path} is a fingerprint file of format version {meta.get('version')}, newer than this "
                         f"seedprint.py reads ({FILE_VERSION}): update the project")
    if set(arrays) != {*SETS, "rows"} or meta.get("sha256") != file_digest(
            {k: v for k, v in meta.items() if k != "sha256"}, arrays):
        raise ValueError(f"{path} does not match its own sha256: the file is damaged or was edited; make it again")
    # whole and ours, but the sha256 proves no more (anyone can compute it): what a verdict reads is checked too
    remake = "make it again with python seedprint.py MODEL --save FILE"
    for record in ("config", "weights", "provenance"):
        if not isinstance(meta.get(record), dict):
            raise ValueError(f"{path} records no {'model config' if record == 'config' else record}: {remake}")
    unknown = sorted(set(meta["config"]) - {f.name for f in dataclasses.fields(GPTConfig)})
    if unknown:                    # GPTConfig(**config) would fail far from here, as an internal error
        raise ValueError(f"{path} records a model config with fields this seedprint.py does not know "
                         f"({', '.join(unknown)}): a later version of the project made it; update the project")
    options, keys = meta.get("options"), set(default_options())
    if not isinstance(options, dict) or set(options) != keys:
        got = set(options) if isinstance(options, dict) else set()
        missing, unknown = ", ".join(sorted(keys - got)) or "none", ", ".join(sorted(got - keys)) or "none"
        raise ValueError(f"{path} records other options than a fingerprint file holds (missing: {missing}; "
                         f"unknown: {unknown}): {remake}")
    try:
        Options.from_recorded(options)
        check_vocab_bound(options["vocab"])
        config = GPTConfig(**meta["config"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path} records an option or a config it cannot have been made with ({e}): {remake}") \
            from None
    if not isinstance(meta.get("rows_dtype"), str) or meta["rows_dtype"] not in ROWS_DTYPES:    # a list: unhashable
        raise ValueError(f"{path} records its table's rows as {meta.get('rows_dtype')!r}, not one of "
                         f"{', '.join(ROWS_DTYPES)}: {remake}")
    vocab, d = options["vocab"], config.n_embd
    shapes = {**{name: (options["sequences"], d) for name in SETS}, "rows": (vocab - vocab // 2, d)}
    dtypes = {**{name: np.float32 for name in SETS}, "rows": ROWS_DTYPES[meta["rows_dtype"]]}
    for name, shape in shapes.items():
        a = arrays[name]
        if a.shape != shape or a.dtype != dtypes[name]:
            raise ValueError(f"{path} holds its {name} array as {a.dtype} {a.shape}, where its options and config "
                             f"make it {np.dtype(dtypes[name])} {shape}: {remake}")
    sets = [arrays[name] for name in SETS]
    rows = expand(arrays["rows"], meta["rows_dtype"])
    for name, a in zip((*SETS, "rows"), (*sets, rows)):
        if not np.isfinite(a).all():                    # NaN ties every pair: scored, it would read "unrelated"
            raise ValueError(f"{path} holds NaN or inf in its {name} array: {remake}")
    return Fingerprint(sets, rows, options, meta["config"], meta["weights"], meta["provenance"], path=path)


def is_fingerprint_file(m) -> bool:
    """Whether a model given by path is a fingerprint file (an .npz), not a checkpoint or directory."""
    return isinstance(m, str) and m.endswith(".npz")


def file_digest(meta: dict, arrays: dict) -> str:
    """sha256 of a fingerprint file's meta (without its digest) and of each array's name, dtype, shape and bytes."""
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# compact's names of the rows' types, and the type each is stored as (bfloat16: its bits)
ROWS_DTYPES = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32}


def compact(rows: np.ndarray):
    """(array, dtype name): float32 rows in the narrowest float type that holds every value exactly -- bfloat16
    (stored as its uint16 bits), float16, else float32. expand() undoes it bit for bit."""
    t = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
    if torch.equal(t.bfloat16().float(), t):
        return t.bfloat16().view(torch.int16).numpy().view(np.uint16), "bfloat16"
    if np.array_equal(rows.astype(np.float16).astype(np.float32), rows):
        return rows.astype(np.float16), "float16"
    return rows.astype(np.float32), "float32"


def expand(rows: np.ndarray, dtype: str) -> np.ndarray:
    """compact's array back to float32."""
    if dtype == "bfloat16":
        return torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16).float().numpy()
    return rows.astype(np.float32)


def weights_record(m) -> dict:
    """What weights a fingerprint comes from: a model on disk, each of its files' name, size and sha256 (read
    once, streamed); a model built in code, its recipe's key."""
    if isinstance(m, Recipe):
        return dict(recipe=m.key)
    if not isinstance(m, str):
        return dict(in_memory=type(m).__name__)
    files = {}
    for f in weights_identity(m):
        h = hashlib.sha256()
        with open(f[0], "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
        files[os.path.relpath(f[0], m if os.path.isdir(m) else os.path.dirname(m))] = dict(bytes=f[1],
                                                                                             sha256=h.hexdigest())
    return dict(path=os.path.abspath(m), files=files)


def compare(model_a, model_b, k: int = None, rank_by: str = None, set_mode: str = None,
            temperature: float = 10.0, alpha: float = ALPHA, cache_dir: str = None, device="cpu", dtype: str = None,
            align: bool = False, **fingerprint_options) -> SeedPrintResult:
    """Do model_a (the base) and model_b share an initialization? Each may be a GPT, a path (train.py checkpoint,
    Hugging Face directory, or fingerprint file), a Fingerprint, a Recipe, a callable ids -> states, or a
    fingerprint array. Token inputs use ids below the smaller of the two vocabularies. Options are checked before
    any work; left out (None), they are a fingerprint file's, else Options' defaults.
    align=True: the aligned verdict, B's coordinates also matched to A's by their token tables where that match
    is trusted, else on held-out inputs (see seedprint_test). Models of two widths: the matched verdict."""
    return compare_many([model_a, model_b], k, rank_by, set_mode, temperature, alpha, cache_dir, device, dtype,
                        align, **fingerprint_options)["results"][(0, 1)]


def compare_many(models: list, k: int = None, rank_by: str = None, set_mode: str = None,
                 temperature: float = 10.0, alpha: float = ALPHA, cache_dir: str = None, device="cpu",
                 dtype: str = None, align: bool = False, **fingerprint_options) -> dict:
    """Every pair of models, each fingerprinted once. Returns {"results": {(i, j): SeedPrintResult} for i < j,
    with p and the verdict Holm-adjusted across the pairs (the unadjusted p kept as p_raw), "groups": the
    lineages, i.e. the models joined by a chain of related pairs}. A pair of two widths gets the matched verdict."""
    # with three models or more, every table is matched in several pairs: each whitened once, kept for the run
    run = fingerprinted(models, dict(fingerprint_options, k=k, rank_by=rank_by, set_mode=set_mode), temperature,
                        alpha, cache_dir, device, dtype, align, recurring=range(len(models)) if len(models) > 2 else ())
    pairs = [(i, j) for i in range(len(models)) for j in range(i + 1, len(models))]
    results = holm_verdicts(run, pairs, alpha)
    return dict(results=results, groups=lineages(len(models), [pr for pr in pairs if results[pr].related]),
                options=run["options"])


def plan(models: list, asked: dict, temperature: float = 10.0, alpha: float = ALPHA, align: bool = False) -> dict:
    """Every check of a comparison that reads no weight (the options, the models' configs, the fingerprint files'
    records), so that a command line runs it before any work: {"inputs": the fingerprint options, "test": the
    statistic's (STATISTIC), "configs": each model's (None: unknown), "matched": whether B's coordinates are matched
    to A's (align, or models of two widths)}. models: read already (Fingerprints, not their paths). asked:
    file_options' keys and any of fingerprint()'s options, None where not given."""
    opts = agreed_options(models, asked)
    test = {key: opts.pop(key) for key in STATISTIC}
    check_options(**test, temperature=temperature, alpha=alpha)
    if opts.get("vocab") is not None:
        check_vocab_bound(opts["vocab"])
    every = [config_of(m) for m in models]               # configs only: no weights (None: unknown)
    configs = [c for c in every if c is not None]
    check_seq_len(opts["seq_len"], every, models)
    if opts.get("inputs", "tokens") == "tokens" and opts.get("vocab") is None and configs:
        opts["vocab"] = min(c.vocab_size for c in configs)
    check_vocab(opts.get("vocab"), every, models, [m.path for m in models if isinstance(m, Fingerprint)])
    widths = sorted({c.n_embd for c in configs})
    matched = align or len(widths) > 1                   # a pair of two widths has no exact test: it is matched
    if matched and opts.get("vocab") is None:
        raise ValueError("the aligned verdict draws token ids from two halves of the vocabulary: give vocab= for "
                         "models whose vocabulary is not known (callables, fingerprint arrays)")
    return dict(inputs=opts, test=test, configs=every, matched=matched)


def fingerprinted(models: list, asked: dict, temperature: float = 10.0, alpha: float = ALPHA, cache_dir: str = None,
                  device="cpu", dtype: str = None, align: bool = False, recurring=()) -> dict:
    """Every check of a comparison (plan), then each model's fingerprints (and its token table's held-out rows where
    the coordinates are matched), ready for verdicts of any of its pairs (verdict). recurring: the indices of the
    models whose tables are matched in more than one pair (a search's suspect; every model of compare_many's three or
    more): their tables are whitened once, here, and kept for the run; every other table is whitened for its pair
    alone (table_of), so that a registry's bases are not all held whitened at once."""
    models = [read_fingerprint(m) if is_fingerprint_file(m) else m for m in models]
    checked = plan(models, asked, temperature, alpha, align)
    opts, test, matched = checked["inputs"], checked["test"], checked["matched"]
    # the aligned (and the matched) verdict tests on the lower half's inputs and fits its match on the upper half's
    # (aligned_sets); where widths are mixed without --align, a pair of one width keeps the exact verdict
    names = ([] if align else ["exact"]) + (["test", "held_out"] if matched else [])
    every = input_sets(opts["vocab"], opts["seed"]) if matched else dict(exact={})     # unmatched: vocab may be None
    H = fingerprint_all(models, cache_dir, device, dtype, opts, {name: every[name] for name in names})
    # tables[i]: whitened where model i recurs, else its raw float32 rows (a fingerprint file's own: no copy)
    recurring = set(recurring)
    tables = [None if not matched else whitened_table(held_out_rows(m, opts["vocab"])) if i in recurring
              else held_out_rows(m, opts["vocab"]) for i, m in enumerate(models)]
    return dict(models=models, configs=checked["configs"], H=H, tables=tables, recurring=recurring, align=align,
                matched=matched, test=test, temperature=temperature, alpha=alpha, options=dict(opts, **test))


def table_of(run: dict, i: int):
    """Model i's whitened token table for one verdict (whitened_table): kept from fingerprinted where the model
    recurs across pairs, else whitened now and let go with its verdict."""
    return run["tables"][i] if i in run["recurring"] else whitened_table(run["tables"][i])


def verdict(run: dict, i: int, j: int) -> SeedPrintResult:
    """The verdict of models i (the base) and j of a fingerprinted() comparison, before any adjustment."""
    H, kw = run["H"], dict(run["test"], temperature=run["temperature"], alpha=run["alpha"])
    if not run["matched"] or not run["align"] and not two_widths((H[i]["exact"].shape[1], H[j]["exact"].shape[1])):
        return seedprint_test(H[i]["exact"], H[j]["exact"], **kw)           # the exact verdict (refuses two widths)
    return seedprint_test(H[i]["test"], H[j]["test"], **kw, align=(H[i]["held_out"], H[j]["held_out"]),
                          tables=(table_of(run, i), table_of(run, j)), whitened=True,
                          signed=signs_keep_function(run["configs"][i], run["configs"][j]))


def holm_verdicts(run: dict, pairs: list, alpha: float) -> dict:
    """{pair: verdict} of the pairs, p and the verdict Holm-adjusted across them (p_raw: before)."""
    results = {pair: verdict(run, *pair) for pair in pairs}
    for (i, j), p in zip(pairs, holm([results[pr].p for pr in pairs])):
        r = results[(i, j)]
        r.p_raw, r.p, r.related = r.p, p, bool(p < alpha)
        r.shared = shared_by_construction(run["models"][i], run["models"][j])
    return results


def search(suspect, bases: list, alpha: float = ALPHA, cache_dir: str = None, device="cpu", dtype: str = None,
           align: bool = False, temperature: float = 10.0, **asked) -> dict:
    """One suspect against many known bases (each a model or a fingerprint file): which one, if any, does it derive
    from? Each base's verdict, Holm-adjusted across the bases, so that the chance of "derives from" said of a
    suspect related to none stays below alpha however many bases there are. The answer:
      "derives from"  exactly one base is related;
      "none"          no base is;
      "inconclusive"  several are. Bases of one lineage (a base and its own fine-tune, both registered) are each
                      related to a suspect of that lineage, and this test cannot tell which of them it came from:
                      the related bases are tested against one another, and the answer says whether they are one
                      lineage (then the suspect derives from that lineage) or not.
    Returns {"results": [verdict per base], "answer", "base" (its index, or None), "related" (indices),
    "among_related": {(i, j): verdict} of the related bases}."""
    # the suspect's table is matched against every base: whitened once; a base's, for its own pairs (a related base
    # again among the related, which are few)
    run = fingerprinted([suspect, *bases], asked, temperature, alpha, cache_dir, device, dtype, align, recurring={0})
    results = holm_verdicts(run, [(b, 0) for b in range(1, len(bases) + 1)], alpha)   # the base first: B is the suspect
    related = [b - 1 for (b, _), r in results.items() if r.related]
    among = holm_verdicts(run, [(i + 1, j + 1) for n, i in enumerate(related) for j in related[n + 1:]], alpha)
    one_lineage = len(related) > 1 and len(lineages(len(related), [(related.index(i - 1), related.index(j - 1))
                                                                for (i, j), r in among.items() if r.related])) == 1
    answer = "derives from" if len(related) == 1 else "none" if not related else "inconclusive"
    return dict(results=list(results.values()), answer=answer, base=related[0] if len(related) == 1 else None,
                related=related, one_lineage=one_lineage,
                among_related={(i - 1, j - 1): r for (i, j), r in among.items()}, options=run["options"])


def model_name(m) -> str:
    """How a message names a model: its path, a fingerprint file's path, a recipe's key, else "a model"."""
    return m if isinstance(m, str) else getattr(m, "path", None) or getattr(m, "key", None) or "a model"


def check_vocab_bound(vocab) -> None:
    """A token ids' bound, as given or recorded: an integer >= 2 (0 would read as not given, the model's own)."""
    if not range_rule("int>=2")[0](vocab):
        raise ValueError(f"--vocab must be an integer >= 2, got {vocab!r}")


def check_vocab(vocab, configs: list, names: list = None, files: list = ()) -> None:
    """Every model (its config; None: unknown) must have a token for every id below `vocab` (the inputs' bound).
    files: the fingerprint files that fixed the bound, if any: then no flag can lower it, the files must be made
    again."""
    for i, c in enumerate(configs):
        if vocab is not None and c is not None and vocab > c.vocab_size:
            name = model_name(names[i]) if names else "a model"
            common = min(x.vocab_size for x in configs if x is not None)        # every model has these tokens
            if files:
                raise ValueError(f"{', '.join(files)} draw{'s' if len(files) == 1 else ''} token ids below {vocab}, "
                                 f"beyond the vocabulary of {name} ({c.vocab_size}): make every fingerprint file again "
                                 f"with --vocab {common} (python seedprint.py MODEL --vocab {common} --save FILE)")
            raise ValueError(f"the inputs' token ids reach {vocab}, beyond the vocabulary of {name} ({c.vocab_size}): "
                             f"give --vocab {common} (every fingerprint of a comparison made with it)")


def check_seq_len(seq_len: int, configs: list, names: list = None) -> None:
    """Every model (its config; None: unknown, e.g. a callable) must fit inputs of seq_len tokens."""
    for i, c in enumerate(configs):
        if c is not None and seq_len > c.block_size:
            name = model_name(names[i]) if names else "a model"
            raise ValueError(f"--seq_len {seq_len} exceeds the context of {name} ({c.block_size} tokens); "
                             f"lower --seq_len")


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
    edges = np.array(related, dtype=int).reshape(-1, 2)
    graph = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    return sorted([int(i) for i in np.flatnonzero(label == c)] for c in np.unique(label))


def config_of(m):
    """The config of a GPT, a model path (also refuses an unsupported family, before any work) or a Recipe that
    names it; None for a callable, a fingerprint array or a Recipe that does not."""
    if isinstance(m, (GPT, Recipe)):
        return m.config
    if isinstance(m, Fingerprint):
        return GPTConfig(**m.config)
    if isinstance(m, str):
        return hf.read_config(m)
    return None


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


def report_matrix(models: list, out: str, res: dict, seconds: float) -> dict:
    """Print the verdict, Holm-adjusted p and mean tau of every pair as matrices, the lineages, and a heatmap
    (out/matrix.png)."""
    n, names = len(models), short_names(models)
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
    save_figure(fig, os.path.join(out, "matrix.png"))
    return dict(models=models, seconds=seconds, groups=groups,
                pairs=[dict(a=models[i], b=models[j], **dataclasses.asdict(r))
                       for (i, j), r in res["results"].items()])


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = ArgumentParser(prog="seedprint.py", description="SeedPrint: do two or more models share an "
                       "initialization? Each pair gets the exact verdict (or, with --align on, the aligned one; two "
                       "widths: the matched one); with more than two models, every pair is Holm-adjusted and the "
                       "models grouped by lineage. --save writes one model's fingerprint file; --against tests one "
                       "suspect against a folder of them.")
    p.add_argument("models", nargs="+", help="train.py checkpoints, Hugging Face directories or fingerprint files "
                   "(.npz): two or more (base first); one with --save or --against")
    p.add_argument("--save", metavar="FILE.npz", default=None, help="write the one model's fingerprint file: what "
                   "every verdict reads of it, the options, the identity of its weights")
    p.add_argument("--against", metavar="DIR", default=None, help="the one model (the suspect) against every "
                   "fingerprint file (*.npz) in DIR: each base's verdict, Holm-adjusted across them, and which base "
                   "the suspect derives from, if any")
    g = p.add_argument_group("the test (where fingerprint files are given, their options: flags must agree)")
    add_settings_flags(g, Options())
    p.set_defaults(**{f.name: None for f in dataclasses.fields(Options)})     # None: not given (a file's, or Options')
    g.add_argument("--vocab", type=flag_type("int>=2"), default=None, help="the token ids' bound (default: the "
                   "smaller vocabulary of the models; a fingerprint file records its own)")
    g.add_argument("--align", type=parse_bool, default=False, metavar="on|off",
                   help="the aligned verdict: also match B's coordinates to A's (a signed permutation), by the "
                   "token tables' rows of held-out tokens where that match is trusted, else on held-out inputs, "
                   "where it counts only from a matched mean tau of ALIGNED_TAU_FLOOR; the exact test or the "
                   "matched one at alpha/2 each. Sees through a permuted residual basis, signs flipped or not")
    add_device_flags(p, "load the models in this dtype (default: each checkpoint's own; float32 on CPU is exact)")
    p.add_argument("--out", default="out/seedprint", help="results.json, matrix.png and the fingerprint cache")
    args = p.parse_args(argv)
    given = {k: v for k, v in settings_given(args, Options).items() if v is not None}
    # every range checked before any model is read; None: not given (a file's option, else Options' default)
    asked = file_options(vocab=args.vocab, **Options(**given).recorded(given))
    one = args.save or args.against
    if args.save and args.against:
        p.error("--save writes one model's fingerprint file, --against tests one suspect: give one of them")
    if bool(one) != (len(args.models) == 1):
        p.error("give one model with --save or --against, else two or more models (base first)")
    if args.save and (not args.save.endswith(".npz") or is_fingerprint_file(args.models[0])):
        p.error("--save FILE.npz writes the fingerprint file of a model (a checkpoint or a Hugging Face directory)")
    if args.save:
        check_output(os.path.dirname(os.path.abspath(args.save)), "--save's folder")
        if os.path.isdir(args.save):
            p.error(f"--save {args.save} is a directory; give a file name ending in .npz")
        refuse_unused(args, ("align", "out"), "{flags} would do nothing with --save (a file records no verdict)", p)
    # each fingerprint file is read (and its sha256 checked) once, here, and passed on read: a 7B model's is 230 MB
    models = [read_fingerprint(m) if is_fingerprint_file(m) else m for m in args.models]
    bases = registry(args.against) if args.against else []
    check_output(args.out)
    device = resolve_device(args.device)
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    checked = plan(models + bases, asked, align=args.align)    # every refusal before any work: no weight read yet
    if "k" in given:                                          # left out, k is capped at half the width
        check_k(given["k"], [c.n_embd for c in checked["configs"]], "the narrower width")
    for m in models:                                           # then the weights, each streamed once
        if isinstance(m, str):
            hf.check_weights_finite(m)
    t0 = time.time()
    if args.save:
        fp = make_fingerprint(args.models[0], device=str(device), dtype=args.dtype, **asked)
        write_fingerprint(args.save, fp)
        print(f"wrote {args.save}: {os.path.getsize(args.save) / 2 ** 20:.1f} MiB, {len(fp.sets[0])} inputs of "
              f"{fp.options['seq_len']} tokens below {fp.options['vocab']}, width {fp.sets[0].shape[1]}, "
              f"{len(fp.rows)} table rows [{time.time() - t0:.1f} s]")
        return
    with lock_dir(args.out):
        cache = os.path.join(args.out, "fingerprints")
        if args.against:
            res = search(models[0], bases, cache_dir=cache, device=str(device), dtype=args.dtype,
                         align=args.align, **asked)
            results = {"search": report_search(args.models[0], [b.path for b in bases], res, time.time() - t0)}
        else:
            res = compare_many(models, cache_dir=cache, device=str(device), dtype=args.dtype, align=args.align,
                               **asked)
            seconds = time.time() - t0
            if len(args.models) == 2:
                r = res["results"][(0, 1)]
                print(f"{r.explain()} [{seconds:.1f} s]")
                results = {"compare": dict(a=args.models[0], b=args.models[1], **dataclasses.asdict(r),
                                           seconds=seconds, options=res["options"])}
            else:
                results = {"matrix": report_matrix(args.models, args.out, res, seconds)}
        update_results(os.path.join(args.out, "results.json"), results, str(device), args.dtype)


def registry(folder: str) -> list:
    """The fingerprint files (*.npz) of a folder, by name, read (Fingerprints); an empty folder, or an .npz that is
    no fingerprint, is refused."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"--against {folder}: {'a file' if os.path.exists(folder) else 'no such'} folder; "
                                f"give a folder of fingerprint files (python seedprint.py MODEL --save DIR/NAME.npz)")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".npz"))
    if not files:
        raise FileNotFoundError(f"--against {folder} holds no fingerprint file (*.npz); make them with python "
                                f"seedprint.py MODEL --save {folder}/NAME.npz")
    return [read_fingerprint(f) for f in files]


def report_search(suspect: str, bases: list, res: dict, seconds: float) -> dict:
    """Print each base's verdict and the answer; return them for results.json."""
    names = short_names(bases)
    rows = []
    for name, r in zip(names, res["results"]):
        how = "exact" if not r.aligned else f"matched (widths {r.widths})" if r.matched_only() else "aligned"
        rows.append(dict(base=name, verdict="RELATED" if r.related else "unrelated", p_holm=r.p, p=r.p_raw,
                         mean_tau=r.tau_aligned if r.aligned else r.mean_tau, test=how))
    print_table(rows, floats="{:.3g}")
    related = [names[i] for i in res["related"]]
    if res["answer"] == "derives from":
        answer = f"{suspect} derives from {related[0]} (Holm-adjusted p {rows[res['base']]['p_holm']:.3g})"
    elif res["answer"] == "none":
        answer = (f"{suspect} derives from none of these {len(bases)} bases (smallest Holm-adjusted p "
                  f"{min(r['p_holm'] for r in rows):.3g}, alpha {ALPHA})")
    else:
        lineage = ("they are one lineage by their own test: the suspect derives from that lineage, and this test "
                   "cannot tell from which of them" if res["one_lineage"] else "they are not all one lineage by "
                   "their own test, so no single base can be named")
        answer = f"inconclusive: {suspect} is related to {', '.join(related)}; {lineage}"
    print(f"{answer} [{seconds:.1f} s]")
    return dict(suspect=suspect, answer=res["answer"], statement=answer, base=bases[res["base"]] if res["base"]
                is not None else None, related=[bases[i] for i in res["related"]], one_lineage=res["one_lineage"],
                bases=[dict(base=b, **dataclasses.asdict(r)) for b, r in zip(bases, res["results"])],
                options=res["options"], seconds=seconds)


if __name__ == "__main__":
    run_script(main, "seedprint.py")
