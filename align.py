"""
align.py: one model's coordinates matched to another's -- the aligned verdict, and models of two widths (paper
Section 6.1, beyond its exact test).

SeedPrint's exact verdict compares coordinate j of model A with coordinate j of model B. A descendant whose residual
basis was permuted, signs flipped or not, computes the same function and hides its lineage from that test (a false
negative, never a false positive); a child pruned in width (or grown) has no coordinate j to compare at all. Both
are seen by matching B's coordinates to A's first, then running the same test on the matched pairs:

  1. the match: a signed permutation of B's coordinates (a partial one between two widths: each coordinate of the
     narrower model given its own of the wider one), by the assignment algorithm on the correlations of the two
     models' coordinates observed together (align_coordinates), each model's observations whitened first
     (whitened_match). Observed where? Never on the test's own inputs: on the token tables' rows of held-out tokens,
     else on the fingerprints of held-out inputs. Why whiten: models trained on the same data share a few strong
     directions (token frequency and the like) that every coordinate loads on, each in its own basis; raw, they
     make every coordinate of one correlate with many of the other's, and a signed match then lines them up by
     the signs of their loadings. Whitened, only a map that moves whole coordinates -- a descendant's signed
     permutation -- correlates them one to one. A match counts only where it is unmistakable: its mean |r| reaches
     table_gate (TABLE_MATCH_R), far above what models from other inits reach on the same data (README: measured).
     A match below it is no evidence of a shared basis, and the matched test's p, fit to B, holds no longer.
     Between two widths the match on inputs stays raw, as studies/pruned.py fit and tested it: a narrower model's
     coordinates whitened are not the wider one's whitening restricted to them, so the gate's reasoning does not
     carry over; its matched test counts where its mean tau reaches PARTIAL_TAU_FLOOR.
  2. the verdict (seedprint.py's seedprint_test): one width, the exact test and the matched one at alpha/2 each, so
     it never misses what the exact test sees; two widths, the matched test alone, at alpha. Alignment records it.

The inputs: the aligned verdict tests on token ids from the lower half of the shared vocabulary and fits its match on
other sequences from the upper half (input_sets), so that chance resemblance on the tested tokens is not carried over.
Where two models' tokenizers differ, the ids are positions in the list of the tokens both hold (shared_tokens), each
model fed its own ids for them, and the token-table rows matched are those of the same tokens.

numpy and scipy only; imports no project file.
"""
import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from scipy import optimize

# The matched mean tau a raw match of two widths (a narrower model's coordinates matched into a wider one's on
# held-out inputs) must reach to count: its candidates are many and its identity set small, so unrelated pairs reach
# large matched taus. Fit by studies/pruned.py on one set of seeds (twice their largest, rounded up) and tested on
# another (docs/seedprint.md, "In a dispute", its paragraph "Children pruned in width or depth").
PARTIAL_TAU_FLOOR = 0.21
# The mean |r| from which a whitened match (token tables or held-out inputs) is trusted: chosen and tested in
# studies/aligned_floor.py (docs/seedprint.md, "The aligned verdict": descendants' and unrelated models' values).
TABLE_MATCH_R = 0.5
# The held-out inputs a match is fit on: the test's seed plus this, never the test's own inputs.
HELD_OUT_SEED = 1_000_003
SETS = ("exact", "test", "held_out")          # every input set a verdict reads, by name (input_sets)


def input_sets(vocab: int, seed: int) -> dict:
    """Every input set a verdict reads, by name, as options on top of the test's own: the exact verdict's (the
    options themselves), the aligned verdict's test set (token ids from the lower half of the vocabulary) and its
    held-out set (other sequences from the upper half). Unrelated models resemble each other by chance on the tokens
    they see (most on a small vocabulary, whose tokens repeat); fit on other tokens, the match carries that chance
    over far less (README: measured)."""
    return dict(exact={}, test=dict(vocab=vocab // 2, low=0, seed=seed),
                held_out=dict(vocab=vocab, low=vocab // 2, seed=seed + HELD_OUT_SEED))


def shared_tokens(vocabularies: list) -> list:
    """[each vocabulary's ids of the tokens all of them hold]: the tokens compared by their bytes (vocabularies[i][id],
    None where no token has that id), in the order of the first vocabulary's ids, each at its first id in every
    vocabulary. The random inputs are drawn as positions in this list and each model is fed its own ids for them
    (seedprint.fingerprint's ids), so that two models of two tokenizers read the same text. Ordered by the first's
    ids, a vocabulary extended by appended tokens, or the same one cut short, gives both models the identity: their
    inputs are then those of a draw by id, to the last digit."""
    first = []
    for vocabulary in vocabularies:
        ids = {}
        for i, token in enumerate(vocabulary):
            if token is not None:
                ids.setdefault(token, i)
        first.append(ids)
    tokens = [t for i, t in enumerate(vocabularies[0]) if t is not None and first[0][t] == i
              and all(t in ids for ids in first[1:])]
    return [np.array([ids[t] for t in tokens], dtype=np.int64) for ids in first]


# ----------------------------------------------------------------------------- 1. the match

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
    flip): the permutation maximizing the summed correlation, every sign +1.
    Models of two widths: the partial match, each coordinate of the narrower model given its own coordinate of the
    wider one; where B is the narrower, A's coordinates that none of B's plays have match -1 and sign 0."""
    za = (XA - XA.mean(0)) / np.maximum(XA.std(0), 1e-12)
    zb = (XB - XB.mean(0)) / np.maximum(XB.std(0), 1e-12)
    corr = za.T @ zb / len(XA)
    rows, cols = optimize.linear_sum_assignment(np.abs(corr) if signed else corr, maximize=True)
    r = corr[rows, cols]
    match, sign = np.full(XA.shape[1], -1), np.zeros(XA.shape[1])
    match[rows], sign[rows] = cols, np.where(r < 0, -1.0, 1.0) if signed else 1.0
    return match, sign, float(np.abs(r).mean() if signed else r.mean())


def table_gate(rows: int, d: int, d2: int = None) -> float:
    """The mean |r| a whitened match must reach to be trusted: TABLE_MATCH_R, or, where the observations are few,
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
    """whiten(T) in float64, as whitened_match matches it; None where there is no table (or observations), their
    rows are fewer than their width (too few to whiten), or they are constant."""
    if T is None or len(T) < T.shape[1] or not T.std() > 0:
        return None
    return whiten(T.astype(np.float64))


def whitened_match(XA: np.ndarray, XB: np.ndarray, signed: bool = True, whitened: bool = False):
    """align_coordinates on two models' observations (token-table rows, or fingerprints on held-out inputs), each
    whitened first, and whether the match is trusted: (match, sign, fit, trusted); fit None and untrusted where the
    rows are fewer than the width (too few to whiten) or constant. Why whiten: the docstring's step 1. A rotation
    of the same coordinates spreads each over all: no match is trusted. whitened=True: XA and XB are
    whitened_table's already (a table compared with many is whitened once)."""
    WA, WB = (XA, XB) if whitened else (whitened_table(X) for X in (XA, XB))
    if WA is None or WB is None:
        return None, None, None, False
    match, sign, fit = align_coordinates(WA, WB, signed)
    return match, sign, fit, fit >= table_gate(len(WA), WA.shape[1], WB.shape[1])


def signs_keep_function(*configs) -> bool:
    """Whether a signed match is allowed: a coordinate's sign flip keeps the function of RMSNorm (and norm-free)
    models, not of LayerNorm ones (their mean does not commute with it). configs: GPTConfigs, None where unknown."""
    return all(c is None or c.norm != "layernorm" for c in configs)


@dataclass
class Match:
    """How B's coordinates were matched to A's (match_coordinates)."""
    match: np.ndarray       # B's coordinate match[j], times sign[j], plays A's coordinate j (-1: none of B's)
    sign: np.ndarray
    on: str                 # "token table" or "held-out inputs"
    table_fit: Optional[float]   # the whitened token tables' match's mean |r| (None: no tables to match)
    input_fit: Optional[float]   # the held-out inputs' match's mean |r| (whitened at one width, raw at two; None:
                                 # the tables' match was trusted, or too few inputs to whiten at one width)
    trusted: bool           # the match reached table_gate (always False for a raw match of two widths)


def match_coordinates(widths: tuple, held_out: tuple, tables=None, signed: bool = True,
                      whitened: bool = False) -> Match:
    """B's coordinates matched to A's: from the whitened token tables where that match is trusted, else from the
    held-out fingerprints (whitened at one width: trusted or not by the same gate; raw at two widths). widths: the
    test fingerprints' (A's, B's); held_out: the two models' fingerprints on held-out inputs; tables: their token
    tables' held-out rows (either None: no table to match; whitened: already whitened_table's)."""
    if [x.shape[1] for x in held_out] != list(widths) or len(held_out[0]) != len(held_out[1]):
        raise ValueError("the held-out fingerprints must have the test fingerprints' widths, and as many inputs")
    table_fit = None
    if tables is not None and tables[0] is not None and tables[1] is not None:
        if len(tables[0]) != len(tables[1]) or [t.shape[1] for t in tables] != list(widths):
            raise ValueError(f"the token tables' held-out rows ({tables[0].shape} and {tables[1].shape}) must be as "
                             f"many and as wide as the fingerprints ({widths[0]} and {widths[1]})")
        match, sign, table_fit, trusted = whitened_match(*tables, signed=signed, whitened=whitened)
        if trusted:
            return Match(match, sign, "token table", table_fit, None, True)
    if not two_widths(widths):
        match, sign, fit, trusted = whitened_match(*held_out, signed=signed)
        if match is not None:
            return Match(match, sign, "held-out inputs", table_fit, fit, trusted)
    # two widths: the raw match, which counts only through PARTIAL_TAU_FLOOR; one width with fewer held-out inputs
    # than its width (too few to whiten): the raw match, recorded, never counted
    match, sign, fit = align_coordinates(*held_out, signed=signed)
    return Match(match, sign, "held-out inputs", table_fit, fit if two_widths(widths) else None, False)


def matched(HA: np.ndarray, HB: np.ndarray, match: np.ndarray, sign: np.ndarray):
    """(A's fingerprint, B's matched to it, how many of B's coordinates moved or were negated): the pairs the matched
    test compares, A's coordinates that none of B's plays (B the narrower) left out."""
    kept = match >= 0                                   # all of A's coordinates, unless B is the narrower
    moved = int(((match[kept] != np.flatnonzero(kept)) | (sign[kept] < 0)).sum())
    return HA[:, kept], HB[:, match[kept]] * sign[kept], moved


# ----------------------------------------------------------------------------- 2. what the verdict records of it

def two_widths(widths) -> bool:
    """Whether a pair's widths (A's, B's; None: an exact verdict's) differ: then no exact test exists, and the matched
    test alone is the verdict."""
    return widths is not None and widths[0] != widths[1]


def counted(p: float, mean_tau: float, trusted: bool, widths) -> float:
    """The matched test's p as the verdict counts it: as it is from a trusted match (tables or held-out inputs);
    from a raw match of two widths where its mean tau reaches PARTIAL_TAU_FLOOR; else not at all (1)."""
    return p if trusted or two_widths(widths) and mean_tau >= PARTIAL_TAU_FLOOR else 1.0


@dataclass
class Alignment:
    """The aligned and matched detail of a verdict: how B's coordinates were matched to A's and what the matched test
    found. (seedprint.Verdict's alignment; None for the exact verdict.)"""
    signed: bool            # the match could negate coordinates (RMSNorm models), not only move them
    moved: int              # how many of B's coordinates it moved or negated (0: B was in A's basis)
    p_exact: Optional[float]  # the exact test's combined p (None: two widths, no exact test)
    p_aligned: float        # the combined p of the same test after the match
    tau_aligned: float      # ... and its matched mean tau (between two widths it must reach PARTIAL_TAU_FLOOR)
    n_identity_aligned: int
    matched_on: str         # "token table" or "held-out inputs"
    table_fit: Optional[float]  # the whitened token-table match's mean |r| (None: no tables to match)
    input_fit: Optional[float]  # the held-out inputs' match's mean |r| (Match.input_fit)
    trusted: bool           # the match reached table_gate: its test counts as it is
    widths: tuple           # (A's, B's); two widths: the matched test alone is the verdict

    def how_matched(self) -> str:
        """What the coordinates were matched on, and how well, in words."""
        r = "|r|" if self.signed else "r"
        table = "" if self.table_fit is None else f"the whitened token tables' match mean {r} {self.table_fit:.3f}"
        if self.matched_on == "token table":
            return f"by their whitened token tables (matched columns' mean {r} {self.table_fit:.3f}, trusted)"
        how = "whitened" if not two_widths(self.widths) and self.input_fit is not None else "raw"
        inputs = "" if self.input_fit is None else f"mean {r} {self.input_fit:.3f}, " + \
            ("trusted" if self.trusted else "untrusted")
        return f"on held-out inputs ({how}{', ' + inputs if inputs else ''}" + \
            (f"; {table}, untrusted" if table else "") + ")"

    def describe(self, p: float, alpha: float, exact: str) -> str:
        """The aligned (or matched) verdict in words, its p beside alpha; `exact`: the exact test's, in words."""
        if two_widths(self.widths):
            return (f"matched verdict (widths {self.widths[0]} and {self.widths[1]}: no exact test), p {p:.3g} vs "
                    f"alpha {alpha}: the narrower model's coordinates matched into the wider one's {self.found()}")
        return (f"aligned verdict, p {p:.3g} vs alpha {alpha} (twice the smaller of two tests): the exact {exact}; "
                f"after matching B's coordinates to A's{' with signs' if self.signed else ''} {self.found()}")

    def found(self) -> str:
        """How the match was made, what the matched test found, and whether it counts, as a clause."""
        line = (f"{self.how_matched()}, {self.moved} moved: matched mean tau {self.tau_aligned:+.4f} over |S| = "
                f"{self.n_identity_aligned}, p {self.p_aligned:.3g}")
        if two_widths(self.widths) and not self.trusted:
            line += (f", which counts only where the tau reaches the floor {PARTIAL_TAU_FLOOR} ("
                     f"{'it does' if self.tau_aligned >= PARTIAL_TAU_FLOOR else 'it is below'})")
        elif not self.trusted:
            line += ", which does not count (an untrusted match is no evidence of a shared basis)"
        return line


# What a verdict records of an alignment where there is none (the exact verdict): Alignment's fields at rest.
NOT_ALIGNED = dict(aligned=False, signed=False, moved=0, p_exact=None, p_aligned=None, tau_aligned=None,
                   n_identity_aligned=0, matched_on="", table_fit=None, input_fit=None, trusted=False,
                   widths=None)


def recorded(alignment: Optional[Alignment]) -> dict:
    """An alignment's fields for results.json, flat, with "aligned"; NOT_ALIGNED where the verdict is exact."""
    return NOT_ALIGNED if alignment is None else dict(aligned=True, **dataclasses.asdict(alignment))
