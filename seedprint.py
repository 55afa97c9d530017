"""
seedprint.py: the lineage test -- do two models share an initialization? (paper Section 6.1)

A model's birth bias (Sections 2-5) is set by its init seed and survives training, so checkpoints of one lineage
keep ranking random inputs alike on a few "identity" dimensions of their final hidden state, while independently
initialized models do not. The test, in the order of this file:

  1. fingerprint     H (N x d): the final-norm state of the last token on N random token sequences, the same tokens
                     for both models (two tokenizers: the tokens both hold, each model fed its own ids).
  2. identity set S: the k dimensions of smallest mean output, intersected across the two models.
  3. tau matrix      C[j, l]: Kendall tau-b, across the inputs, between dimension j of A and l of B, after the
                     reference's softmax(H[:, S] / 10) per input. The paper's statistic: the mean of diag C.
  4. permutation test and overlap: if B's init is independent of A's, B's coordinates are exchangeable with respect
                     to A's: relabelling them leaves the joint law of (A, B) unchanged, so mean(diag C) is one draw
                     from its values over the permutations of B's coordinates within S. Hoeffding's combinatorial CLT
                     gives their mean and variance in closed form -> z -> p_perm. Under the same H0 the overlap |S| is
                     hypergeometric, independent of p_perm; Fisher's method combines the two.
  5. verdict         related where the combined p < alpha = 0.01.
  6. many models     every pair Holm-adjusted and grouped into lineages; one suspect against a registry of bases.

What it assumes: that unrelated models share nothing coordinate by coordinate. A shared token embedding (init.py's
embed_seed), Gaussian embeddings fed past the table or a fixed position table line coordinates up by construction.
A permutation of B's basis hides a lineage (a false negative, never a false positive): the aligned verdict (--align
on; align.py) matches B's coordinates to A's first; models of two widths get that matched test alone. The reference
implementation's tests (an analytic z, a t-test or Mann-Whitney U against independent Gaussian matrices) are no
verdicts: unrelated models are two random functions of the same inputs, whose taus spread far wider than those nulls
allow (studies/lineage_fpr.py measures how often each errs).

    python seedprint.py A B            # two train.py checkpoints or Hugging Face directories
    python seedprint.py A B C D        # every pair, Holm-adjusted, grouped into lineages
    python seedprint.py A B --align on # the aligned verdict: sees through a permuted residual basis
    python seedprint.py A --save reg/a.npz      # A's fingerprint file (evidence.py), made where A lives
    python seedprint.py SUSPECT --against reg   # the suspect against every fingerprint file in reg/

Each model is read once: its config and every check first (evidence.plan), then its weights in one pass. Imports
align.py, evidence.py (fingerprint files, options, checks, records), hf.py (models on disk), model.py, data.py
(inputs), common.py.
"""
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Progress, add_device_flags, add_settings_flags, check_dtype_runs,
                    check_output, flag_type, lock_dir, parse_bool, refuse_unused, resolve_device,
                    run_script, settings_given, update_results)
from model import GPT, GPTConfig
import numpy as np
import torch
from scipy import stats
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

import align
import evidence
import hf
from align import Alignment, input_sets, signs_keep_function, two_widths, whitened_table
from data import random_batches
from evidence import Fingerprint, Options

ALPHA = 0.01


# ----------------------------------------------------------------------------- 1. fingerprint

def fingerprint(model, sequences: int = 2000, seq_len: int = 64, inputs: str = "tokens", vocab: int = None,
                mean: float = 0.0, std: float = 0.02, seed: int = 0, batch_size: int = 32, name: str = "model",
                progress: bool = False, low: int = 0, compile_mode: str = None, ids: np.ndarray = None) -> np.ndarray:
    """H (sequences x d, float32): the final-norm state of the last token on random sequences, the same for a seed
    on every device and dtype. model: a GPT, or any callable ids (B, T) -> (B, d) final-norm last-token states (a
    model of your own transformers install: docs/real_checkpoints.md). inputs="tokens": ids uniform in [low, vocab)
    (default: the model's vocabulary; with `ids`, positions, fed as ids[position]: align.shared_tokens); "gaussian":
    N(mean, std) embeddings fed past the table (a GPT's; see above why tokens). A fingerprint that cannot rank inputs
    is refused (evidence.check_states). A GPT's passes never wait (GPT.trace_passes; compile_mode: torch.compile)."""
    is_gpt = isinstance(model, GPT)
    if inputs not in ("tokens", "gaussian") or (inputs == "gaussian" and not is_gpt):
        raise ValueError(f"inputs must be 'tokens', or 'gaussian' for a GPT; got {inputs!r} for {type(model).__name__}")
    if vocab is None and not is_gpt:
        raise ValueError("a callable model needs vocab=: token ids are drawn below it")
    param = next(model.parameters()) if is_gpt else None
    bar, out = Progress(sequences, f"fingerprint {name}", "sequences") if progress else None, []
    draw = lambda size: (x if ids is None else torch.as_tensor(ids)[x] for x in random_batches(
        inputs, sequences, seq_len, size, seed, vocab=vocab or model.config.vocab_size,
        width=model.config.n_embd if is_gpt else None, mean=mean, std=std, low=low))
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=is_gpt and param.is_cuda):
        if not is_gpt:
            states = (torch.as_tensor(model(x)) for x in draw(batch_size))
        elif inputs == "tokens":    # drawn at once either way: the same ids, on the device in one copy, not a batch's
            batches = [dict(idx=x) for x in next(draw(sequences)).to(param.device).split(batch_size)]
        else:
            batches = (dict(embeds=x.to(param.device, param.dtype)) for x in draw(batch_size))
        if is_gpt:
            trace = model.compiled_trace(compile_mode) if compile_mode else None
            states = (o["hidden"][-1] for o in model.trace_passes(batches, trace, hidden="last"))
        for h, n in zip(states, [min(batch_size, sequences - i) for i in range(0, sequences, batch_size)]):
            if h.dim() != 2 or h.shape[0] != n:
                raise ValueError(f"{name}: the model must map ids {(n, seq_len)} to last-token states (B, d), got "
                                 f"shape {tuple(h.shape)}")
            out.append(h.float())              # kept where it was made: one copy to the host, at the end
            if bar:
                bar.update(n)
    H = torch.cat(out).cpu().numpy()
    evidence.check_states(H, name)
    return H


# ----------------------------------------------------------------------------- 2. identity set
# numpy and scipy from here to the verdict: the test runs on fingerprints saved anywhere, by anything.

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


# ----------------------------------------------------------------------------- 3. the tau matrix

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


def cross_matrix(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                 temperature: float = 10.0):
    """Steps 2-3: (S, k used, C), C[j, l] the Kendall tau-b between identity dimension j of A and l of B."""
    S, k = identity_set(HA, HB, k, rank_by, set_mode)
    C = kendall_tau_matrix(softmax_rows(HA[:, S], temperature), softmax_rows(HB[:, S], temperature)) if len(S) \
        else np.zeros((0, 0))                        # no shared identity dimension: no evidence of a lineage
    return S, k, C


# ----------------------------------------------------------------------------- 4. permutation test and overlap

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


def exact_verdict(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                  temperature: float = 10.0, alpha: float = ALPHA) -> "Verdict":
    """Steps 2-5 in the two models' own coordinates: the permutation test of mean(diag C), combined (Fisher) with
    the overlap of the identity sets."""
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
    return Verdict(related=bool(p < alpha), p=p, p_perm=p_perm, p_overlap=p_over, mean_tau=mean_tau, z_perm=z,
                   n_identity=len(S), k=k, n_inputs=N)


# ----------------------------------------------------------------------------- 5. the verdict

@dataclass
class Verdict:
    related: bool           # the verdict: p < alpha
    p: float                # Fisher's p_perm with p_overlap (coset mode), else p_perm; aligned: two tests' union
    p_perm: float           # the dimension-permutation test of mean(diag C)
    p_overlap: float        # the hypergeometric p of the identity set's size (1 in base mode)
    mean_tau: float         # mean(diag C): the paper's statistic
    z_perm: float
    n_identity: int         # |S|
    k: int
    n_inputs: int
    p_raw: Optional[float] = None           # p before the Holm adjustment across pairs
    alignment: Optional[Alignment] = None   # how B's coordinates were matched to A's (align.py); None: exact
    shared: str = ""        # what the two models' own records say they share (shared_by_construction)

    def explain(self) -> str:
        """The verdict in one line: which test, on which set, how many dimensions, what the records say."""
        what, a = "RELATED (shared initialization)" if self.related else "unrelated", self.alignment
        exact = (f"dimension-permutation test of mean tau {self.mean_tau:+.4f} over |S| = {self.n_identity} identity "
                 f"dimensions (k = {self.k}), N = {self.n_inputs}: p_perm {self.p_perm:.3g}, p_overlap "
                 f"{self.p_overlap:.3g}, combined p {self.p if a is None or a.p_exact is None else a.p_exact:.3g}")
        line = f"{what}: {exact} vs alpha {ALPHA}" if a is None else f"{what}: {a.describe(self.p, ALPHA, exact)}"
        return line + (f". By construction, {self.shared}" if self.shared else "")

    def record(self) -> dict:
        """The verdict's fields for results.json, flat: the paper's, then the alignment's (their defaults where the
        verdict is exact), then `shared`."""
        paper = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                 if f.name not in ("alignment", "shared")}
        return {**paper, **align.recorded(self.alignment), "shared": self.shared}


def seedprint_test(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                   temperature: float = 10.0, alpha: float = ALPHA, held_out=None, tables=None, signed: bool = True,
                   whitened: bool = False) -> Verdict:
    """The verdict on two models' fingerprints on the same N inputs: the exact verdict; with held_out (their
    fingerprints on other inputs), the aligned one: B's coordinates matched to A's (align.match_coordinates: from
    `tables`, the token tables' held-out rows, where trusted, else from held_out; signed=False for LayerNorm models),
    the same test on the matched pairs (counted as align.counted says) and the exact test at alpha/2 each. Two widths
    have no exact test: the matched test alone is the verdict, at alpha."""
    evidence.check_statistic(k, rank_by, set_mode, temperature, alpha)
    if len(HA) != len(HB):
        raise ValueError(f"fingerprints on {len(HA)} and {len(HB)} inputs: the models must see the same N inputs")
    test, widths = dict(k=k, rank_by=rank_by, set_mode=set_mode, temperature=temperature, alpha=alpha), \
        (HA.shape[1], HB.shape[1])
    if held_out is None:
        if two_widths(widths):
            raise ValueError(f"models of widths {widths[0]} and {widths[1]} have no exact test: coordinate j of one "
                             f"is not coordinate j of the other; compare them with the aligned verdict")
        return exact_verdict(HA, HB, **test)
    found = align.match_coordinates(widths, held_out, tables, signed, whitened)
    XA, XB, moved = align.matched(HA, HB, found.match, found.sign)
    m = exact_verdict(XA, XB, **test)
    exact = None if two_widths(widths) else exact_verdict(HA, HB, **test)
    p = align.counted(m.p, m.mean_tau, found.trusted, widths)
    p = p if exact is None else min(1.0, 2 * min(exact.p, p))
    detail = Alignment(signed, moved, None if exact is None else exact.p, m.p, m.mean_tau, m.n_identity, found.on,
                       found.table_fit, found.input_fit, found.trusted, widths)
    return dataclasses.replace(m if exact is None else exact, related=bool(p < alpha), p=p, alignment=detail)


# ----------------------------------------------------------------------------- 6. many models, each read once

def fingerprints_of(m, sets: dict, vocab: int = None, device="cpu", dtype: str = None, digests: bool = False, ids=None,
                    held: tuple = None):
    """({name: m's fingerprint on that input set}, its token table's rows [vocab // 2, vocab) as loaded (None without
    vocab or a table; ids: fingerprint's, of those positions), its record for evidence.shared_by_construction).
    held: (model, record) of m loaded already (evidence.loaded), where it is fingerprinted on several token sets."""
    if isinstance(m, (Fingerprint, np.ndarray)):         # a file's sets were made under the options plan agreed on
        H = {"exact": m} if isinstance(m, np.ndarray) else {name: m.sets[name] for name in sets}
        return H, getattr(m, "rows", None), evidence.record_of(m)
    model, record = held or evidence.loaded(m, device, dtype, digests)
    H = {name: fingerprint(model, name=record["path"], progress=isinstance(m, hf.Stored), ids=ids, **opts)
         for name, opts in sets.items()}
    rows = evidence.table_rows(model, vocab, ids)
    return H, rows, record


def fingerprint_models(models: list, checked: dict, temperature: float, alpha: float, align: bool, device="cpu",
                       dtype: str = None, recurring=(), held: tuple = None) -> dict:
    """What verdict() reads of any pair: each model's fingerprints on the input sets `checked` (plan's) needs, its
    table's rows where coordinates are matched (whitened here for the `recurring` models, else for each pair alone:
    a registry's bases are never all held whitened), its record (its weights hashed if files are compared). held:
    the first model loaded already (fingerprints_of)."""
    opts, matched = checked["inputs"], checked["matched"]
    # mixed widths without --align: a pair of one width keeps the exact verdict
    every = input_sets(opts["vocab"], opts["seed"]) if matched else dict(exact={})   # unmatched: vocab may be None
    names = ([] if align else ["exact"]) + (["test", "held_out"] if matched else [])
    digests = evidence.hashes_weights(models)
    run = dict(configs=checked["configs"], H=[], tables=[], records=[], recurring=set(recurring), align=align,
               matched=matched, test=dict(checked["test"], temperature=temperature, alpha=alpha),
               options=dict(opts, **checked["test"]))
    for i, m in enumerate(models):
        H, rows, record = fingerprints_of(m, {name: dict(opts, **every[name]) for name in names},
                                          opts["vocab"] if matched else None, device, dtype, digests,
                                          None if checked["tokens"] is None else checked["tokens"][i],
                                          held if i == 0 else None)
        run["H"].append(H)
        run["tables"].append(whitened_table(rows) if i in run["recurring"] else rows)
        run["records"].append(record)
    return run


def verdict(run: dict, i: int, j: int) -> Verdict:
    """The verdict of models i (the base) and j of a fingerprint_models() run, before any adjustment."""
    H, table = run["H"], lambda i: run["tables"][i] if i in run["recurring"] else whitened_table(run["tables"][i])
    if not run["matched"] or not run["align"] and not two_widths((H[i]["exact"].shape[1], H[j]["exact"].shape[1])):
        return seedprint_test(H[i]["exact"], H[j]["exact"], **run["test"])     # the exact verdict
    return seedprint_test(H[i]["test"], H[j]["test"], **run["test"], held_out=(H[i]["held_out"], H[j]["held_out"]),
                          tables=(table(i), table(j)), whitened=True,
                          signed=signs_keep_function(run["configs"][i], run["configs"][j]))


def holm_verdicts(pairs: dict) -> dict:
    """{key: verdict} of {key: (run, i, j)}, models i (the base) and j of a fingerprint_models() run: p and the
    verdict Holm-adjusted across all of them (p_raw: before)."""
    results = {key: verdict(*pair) for key, pair in pairs.items()}
    for (key, (run, i, j)), p in zip(pairs.items(), holm([r.p for r in results.values()])):
        r = results[key]
        r.p_raw, r.p, r.related = r.p, p, bool(p < run["test"]["alpha"])
        r.shared = evidence.shared_by_construction(run["records"][i], run["records"][j], r.related)
    return results


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


def compare(model_a, model_b, **options) -> Verdict:
    """Do model_a (the base) and model_b share an initialization? compare_many's verdict of the two."""
    return compare_many([model_a, model_b], **options)["results"][(0, 1)]


def compare_many(models: list, temperature: float = 10.0, alpha: float = ALPHA, device="cpu", dtype: str = None,
                 align: bool = False, **asked):
    """Every pair of models, each read and fingerprinted once: GPTs, paths (train.py checkpoints, Hugging Face
    directories, fingerprint files), Fingerprints, callables ids -> states or fingerprint arrays. asked: the options
    (evidence.OPTIONS: k, sequences, ...; left out, the files', else Options' defaults), all checked before any work
    (evidence.plan). align=True: the aligned verdict; two widths: the matched one. -> {"results": {(i, j): Verdict},
    i < j, Holm-adjusted; "groups": the lineages; "options"}."""
    models = [evidence.read_model(m) for m in models]
    checked = evidence.plan(models, asked, temperature, alpha, align)
    # with three models or more, every table is matched in several pairs: each whitened once, kept for the run
    run = fingerprint_models(models, checked, temperature, alpha, align, device, dtype,
                             recurring=range(len(models)) if len(models) > 2 else ())
    pairs = [(i, j) for i in range(len(models)) for j in range(i + 1, len(models))]
    results = holm_verdicts({pair: (run, *pair) for pair in pairs})
    return dict(results=results, groups=lineages(len(models), [pr for pr in pairs if results[pr].related]),
                options=run["options"])


def search(suspect, bases: list, temperature: float = 10.0, alpha: float = ALPHA, device="cpu", dtype: str = None,
           align: bool = False, **asked) -> dict:
    """One suspect against many bases (models or fingerprint files): does it derive from one? Each base's verdict is
    Holm-adjusted across them, so "derives from" is said of a suspect related to none with chance below alpha however
    many bases there are. "answer": "derives from" (one base related), "none" or "inconclusive" (several, tested
    against one another: "one_lineage", None where they were made on other tokens). Files of several token sets are
    compared a set at a time (evidence.comparable_sets), the suspect read once; a set it cannot be fed is named in
    "not_compared", with why. -> {"results": [per base; None: not compared], "answer", "base" (index or None),
    "related", "one_lineage", "among_related", "not_compared" ({index: why}), "options" (the first set's)}"""
    models = [evidence.read_model(m) for m in [suspect, *bases]]
    planned, not_compared = evidence.comparable_sets(models, asked, temperature, alpha, align)
    # the suspect is read once: held loaded where it is fed several token sets, else read in its turn and let go
    # before the bases are (one model in memory at a time)
    held = evidence.loaded(models[0], device, dtype, evidence.hashes_weights(models)) \
        if len(planned) > 1 and not isinstance(models[0], (Fingerprint, np.ndarray)) else None
    runs = {}                           # base b -> (its token set's run, b's index in it); the suspect is 0 in each
    for group, checked in planned:      # the suspect's table is whitened once per set; a base's for its own pair
        run = fingerprint_models([models[0], *(models[b + 1] for b in group)], checked, temperature, alpha, align,
                                 device, dtype, recurring={0}, held=held)
        runs.update({b: (run, n + 1) for n, b in enumerate(group)})
    results = holm_verdicts({b: (run, i, 0) for b, (run, i) in runs.items()})     # the base first: B is the suspect
    related = sorted(b for b, r in results.items() if r.related)
    # related bases are tested against one another where they were made on the same tokens (one run)
    pairs = [(a, b) for n, a in enumerate(related) for b in related[n + 1:]]
    among = holm_verdicts({(a, b): (runs[a][0], runs[a][1], runs[b][1]) for a, b in pairs
                           if runs[a][0] is runs[b][0]})
    joined = [(related.index(a), related.index(b)) for (a, b), r in among.items() if r.related]
    answer = "derives from" if len(related) == 1 else "none" if not related else "inconclusive"
    apart = len(among) < len(pairs)             # some related bases made on other tokens: never tested together
    one_lineage = None if apart else len(related) > 1 and len(lineages(len(related), joined)) == 1
    return dict(results=[results.get(b) for b in range(len(bases))], answer=answer,
                base=related[0] if len(related) == 1 else None, related=related, one_lineage=one_lineage,
                among_related=among, not_compared=not_compared, options=next(iter(runs.values()))[0]["options"])


def make_fingerprint(m, device="cpu", dtype: str = None, **options) -> Fingerprint:
    """A model's fingerprint file in memory (evidence.write saves it): a path or a GPT, fingerprinted on every input
    set under the checks of a comparison (evidence.plan), its weights hashed on their one read. options:
    evidence.OPTIONS (vocab: the model's own vocabulary by default), tokenizer; it records the tokens its ids name
    (file_tokens)."""
    m = evidence.read_model(m)
    if not isinstance(m, (GPT, hf.Stored)) or set(options) - {*evidence.OPTIONS, "tokenizer"}:
        raise ValueError(f"a fingerprint file is made of a model (a path or a GPT), with the options "
                         f"{', '.join(evidence.OPTIONS)}")
    checked = evidence.plan([m], options)
    opts, tokens = checked["inputs"], evidence.file_tokens(m, checked["inputs"]["vocab"], options.get("tokenizer"))
    sets = {name: dict(opts, **s) for name, s in input_sets(opts["vocab"], opts["seed"]).items()}
    H, rows, record = fingerprints_of(m, sets, opts["vocab"], device, dtype, digests=True)
    return Fingerprint(H, rows, dict(opts, **checked["test"]), dataclasses.asdict(m.config), record["weights"],
                       evidence.made(device, dtype), path=evidence.name_of(m),
                       tokens=tokens)


# ----------------------------------------------------------------------------- 7. the command line

def main(argv=None):
    p = ArgumentParser(prog="seedprint.py", description="SeedPrint: do two or more models share an initialization? "
                       "(paper Section 6.1; the module's docstring says how)")
    p.add_argument("models", nargs="+", help="train.py checkpoints, Hugging Face directories or fingerprint files "
                   "(.npz): two or more (base first); one with --save or --against")
    p.add_argument("--save", metavar="FILE.npz", help="write the one model's fingerprint file (evidence.py)")
    p.add_argument("--against", metavar="DIR", help="test the one model (the suspect) against every fingerprint "
                   "file in DIR (of one tokenizer or several): each base's verdict, Holm-adjusted, and which base it "
                   "derives from")
    g = p.add_argument_group("the test (where fingerprint files are given, their options: flags must agree)")
    add_settings_flags(g, Options())
    p.set_defaults(**{f.name: None for f in dataclasses.fields(Options)})     # None: not given (a file's, or Options')
    g.add_argument("--vocab", type=flag_type("int>=2"), help="the token ids' bound (default: the smaller vocabulary "
                   "of the models; a fingerprint file records its own)")
    g.add_argument("--tokenizer", metavar="NAME", help="of models that record none (bytes, gpt2, a tokenizer.json); "
                   "two tokenizers are fed the tokens both hold, each its own ids (--vocab: the first N)")
    g.add_argument("--align", type=parse_bool, default=False, metavar="on|off", help="the aligned verdict: also match "
                   "B's coordinates to A's (align.py); the exact test and the matched one at alpha/2 each")
    add_device_flags(p, "load the models in this dtype (default: each checkpoint's own; float32 on CPU is exact)")
    p.add_argument("--out", default="out/seedprint", help="results.json and matrix.png")
    args = p.parse_args(argv)
    # every range was checked as its flag was parsed; None: not given (a file's option, else Options' default)
    asked = dict({Options.RECORDED_AS.get(k, k): v for k, v in settings_given(args, Options).items()},
                 vocab=args.vocab, tokenizer=args.tokenizer)
    if bool(args.save) + bool(args.against) + (len(args.models) > 1) != 1:
        p.error("give two or more models (base first), or one model with --save FILE or --against DIR")
    if args.save:
        if not args.save.endswith(".npz") or args.models[0].endswith(".npz"):
            p.error("--save FILE.npz writes the fingerprint file of a model (a checkpoint or a Hugging Face directory)")
        check_output(os.path.dirname(os.path.abspath(args.save)), "--save's folder")
        evidence.check_new(args.save)
        refuse_unused(args, ("align", "out"), "{flags} would do nothing with --save (a file records no verdict)", p)
    else:
        check_output(args.out)
    models = [evidence.read_model(m) for m in args.models]              # configs and fingerprint files, each read once
    bases = evidence.registry(args.against) if args.against else []
    device = resolve_device(args.device)
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    how, t0 = dict(device=str(device), dtype=args.dtype), time.time()
    if args.save:
        fp = make_fingerprint(models[0], **how, **asked)
        evidence.write(args.save, fp)
        print(f"wrote {args.save}: {os.path.getsize(args.save) / 2 ** 20:.1f} MiB, {fp.options} "
              f"[{time.time() - t0:.1f} s]")
        return
    with lock_dir(args.out):
        if args.against:
            res = search(models[0], bases, align=args.align, **how, **asked)
            results = {"search": evidence.report_search(args.models[0], [b.path for b in bases], res,
                                                        time.time() - t0, ALPHA)}
        else:
            res = compare_many(models, align=args.align, **how, **asked)
            results = evidence.report(args.models, args.out, res, time.time() - t0)
        update_results(os.path.join(args.out, "results.json"), results, str(device), args.dtype)


if __name__ == "__main__":
    run_script(main, "seedprint.py")
