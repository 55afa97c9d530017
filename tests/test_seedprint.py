"""seedprint.py, align.py and evidence.py: the cross matrix against scipy, the permutation test against Monte Carlo
permutations, its calibration where the reference tests fail, lineage on tiny trained models, the coordinate match,
fingerprint files (made here or forged by the other side), each model read once, and bad input."""
import builtins
import collections
import json
import math
import os
import re
import shutil

import numpy as np
import pytest
import torch

import data
from scipy import stats

import align
import evidence
import seedprint
import train
from common import short_names
from init import build
from model import get_config
from studies.edits import add_noise, permute_residual
from studies.lineage import reference_tests


# ----------------------------------------------------------------------------- the statistic

def test_kendall_tau_matrix_matches_scipy_pair_by_pair_with_ties():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((137, 5)), rng.standard_normal((137, 4))
    X[:, 1], Y[:, 2] = np.round(X[:, 1] * 2), np.round(Y[:, 2])          # ties in some columns
    Y[:, 0] = X[:, 0] + 0.3 * rng.standard_normal(137)                   # and a strong correlation
    C = seedprint.kendall_tau_matrix(X, Y, chunk=16)
    ref = np.array([[stats.kendalltau(X[:, j], Y[:, l], variant="b").statistic for l in range(4)] for j in range(5)])
    assert np.allclose(C, ref, atol=1e-12, rtol=0)


def test_permutation_moments_are_exact_and_the_tail_matches_monte_carlo():
    """Hoeffding's mean and variance of T(pi) = sum_j C[j, pi(j)] against 200,000 random permutations;
    the closed-form p against the Monte Carlo tail where the normal approximation applies."""
    rng = np.random.default_rng(1)
    n = 30
    C = rng.standard_normal((n, n)) * 0.1 + rng.standard_normal((n, 1)) * 0.1 + rng.standard_normal((1, n)) * 0.1
    C[np.arange(n), np.arange(n)] += 0.025                                # a mild lineage signal on the diagonal
    perms = np.argsort(rng.random((200_000, n)), axis=1)
    T = C[np.arange(n), perms].sum(axis=1)
    d = C - C.mean(1, keepdims=True) - C.mean(0, keepdims=True) + C.mean()
    mean, var = C.sum() / n, (d ** 2).sum() / (n - 1)
    assert T.mean() == pytest.approx(mean, abs=4 * T.std() / math.sqrt(len(T)))
    assert T.var() == pytest.approx(var, rel=4 * math.sqrt(2 / len(T)) * 1.5)
    z, p = seedprint.permutation_test(C)
    p_mc = (T >= np.trace(C)).mean()
    assert 0.002 < p_mc < 0.1                                              # a tail the test is about
    assert abs(p - p_mc) < 0.2 * p_mc + 3 * math.sqrt(p_mc / len(T)), (p, p_mc)
    assert seedprint.permutation_test(C[:1, :1]) == (0.0, 1.0)


def test_overlap_p_is_the_hypergeometric_tail_of_random_subsets():
    rng = np.random.default_rng(2)
    d, k = 64, 16
    overlaps = np.array([len(np.intersect1d(np.arange(k), rng.choice(d, k, replace=False))) for _ in range(40000)])
    for s in (2, 4, 7):
        assert seedprint.overlap_p(s, d, k) == pytest.approx((overlaps >= s).mean(), abs=0.01)


def test_verdict_is_fishers_combination_even_where_p_underflows():
    import warnings
    rng = np.random.default_rng(5)
    HA, HB = rng.standard_normal((2, 300, 40))
    r = seedprint.seedprint_test(HA, HB, k=10)
    assert r.p == pytest.approx(stats.combine_pvalues([r.p_perm, r.p_overlap], method="fisher").pvalue, rel=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # no log(0) on the way
        wide = rng.standard_normal((300, 200))
        same = seedprint.seedprint_test(wide, wide, k=100)        # z ~ 170: sf underflows
    assert same.related and same.p_perm == 0.0 and same.p == 0.0 and same.mean_tau == pytest.approx(1.0)


def _unrelated_pair(rng, Z, d=48, noise=0.3):
    """Two independent random functions of the same inputs: coordinates exchangeable, aligned by chance."""
    out = []
    for _ in range(2):
        W1, W2 = rng.standard_normal((Z.shape[1], 64)), rng.standard_normal((64, d)) / 8
        out.append(np.maximum(Z @ W1, 0) @ W2 + noise * rng.standard_normal((len(Z), d)))
    return out


def test_the_verdict_holds_its_rate_where_the_reference_tests_do_not():
    """Unrelated models are random functions of the same inputs, so each identity dimension's tau has a
    between-pair spread that no null built from independent matrices sees. The permutation verdict keeps
    alpha; the analytic z and the pooled t-test reject far more often (the issue they were replaced for)."""
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((300, 6))
    pairs = [_unrelated_pair(rng, Z) for _ in range(300)]
    res = [seedprint.seedprint_test(HA, HB, k=24) for HA, HB in pairs]
    reference = [reference_tests(HA, HB, k=24) for HA, HB in pairs]
    p = np.array([r.p for r in res])
    lo, hi = stats.binom.ppf([0.0005, 0.9995], len(res), 0.01)
    assert lo <= (p < 0.01).sum() <= hi
    assert stats.kstest(p, "uniform").pvalue > 1e-3
    assert np.mean([r["p_z"] < 0.01 for r in reference]) > 0.1 and np.mean([r["p_t"] < 0.01 for r in reference]) > 0.05


def test_a_shared_lineage_is_related_and_a_shared_embedding_breaks_exchangeability():
    rng = np.random.default_rng(4)
    Z = rng.standard_normal((300, 6))
    A, _ = _unrelated_pair(rng, Z)
    _, B = _unrelated_pair(rng, Z)
    related = seedprint.seedprint_test(A, A + 1.0 * rng.standard_normal(A.shape), k=24)   # the same "init", drifted
    assert related.related and related.p < 1e-6 and related.mean_tau > 0.2
    # H0's assumption written down: a part shared coordinate by coordinate (here, the same input vector
    # added to both residual streams, as a shared embedding table does) aligns unrelated models
    shared = rng.standard_normal(A.shape) * 2
    assert seedprint.seedprint_test(A + shared, B + shared, k=24).related


def test_identity_dims_and_the_set_modes():
    H = np.array([[3.0, -1.0, 0.5, -4.0], [3.0, -1.0, 0.5, -4.0]])
    assert list(seedprint.identity_dims(H, 2)) == [1, 3]
    assert list(seedprint.identity_dims(H, 2, "largest")) == [0, 2]
    assert list(seedprint.identity_dims(H, 2, "abs")) == [0, 3]
    S, k = seedprint.identity_set(H, H[:, ::-1], 2)
    assert k == 2 and list(S) == []                                       # B's smallest are A's 0 and 2
    assert list(seedprint.identity_set(H, H[:, ::-1], 2, set_mode="base")[0]) == [1, 3]


def test_options_become_a_files_recorded_options_and_back_in_one_place():
    """Options.recorded writes a file's names (the inputs' seed as seed), from_recorded reads them back, and a file
    that records the flag's own name (input_seed) or the token ids' bound alone is no Options."""
    options = evidence.Options(sequences=30, seq_len=12, input_seed=5, k=8, rank_by="abs", set_mode="base")
    file = dict(sequences=30, seq_len=12, seed=5, k=8, rank_by="abs", set_mode="base")
    assert options.recorded() == file and set(file) == set(evidence.OPTIONS) - {"vocab"}
    assert options.recorded(["input_seed", "k"]) == dict(seed=5, k=8)
    assert evidence.Options.from_recorded(dict(file, vocab=300)) == options
    with pytest.raises(TypeError, match="no option is recorded as input_seed"):
        evidence.Options.from_recorded(dict(sequences=30, input_seed=5))
    with pytest.raises(ValueError, match="--k must be an integer >= 2"):
        evidence.Options.from_recorded(dict(file, k=1))
    for vocab in (0, 1, True, 2.5):                 # the token ids' bound, which no field holds, is checked too
        with pytest.raises(ValueError, match="--vocab must be an integer >= 2"):
            evidence.Options.from_recorded(dict(file, vocab=vocab))


def test_bad_input_is_refused_before_any_work(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="widths 8 and 16 have no exact test"):
        seedprint.seedprint_test(np.zeros((10, 8)), np.zeros((10, 16)))
    with pytest.raises(ValueError, match="the same N inputs"):
        seedprint.seedprint_test(np.zeros((10, 8)), np.zeros((12, 8)))
    with pytest.raises(ValueError, match="set_mode"):
        seedprint.seedprint_test(np.zeros((10, 8)), np.zeros((10, 8)), set_mode="both")
    with pytest.raises(ValueError, match="widths 8 and 16 have no exact test"):
        seedprint.compare(np.zeros((10, 8)), np.zeros((10, 16)))
    from model import write_checkpoint
    path = str(tmp_path / "a.pt")
    write_checkpoint(path, build(get_config("tiny", n_layer=1), 0))
    monkeypatch.setattr(seedprint.hf, "load", lambda *a, **kw: pytest.fail("a weight was read"))
    with pytest.raises(ValueError, match="--k must be an integer >= 2"):
        seedprint.compare(path, path, k=0)          # checked on the configs (evidence.plan), before any weight is read
    monkeypatch.undo()
    with pytest.raises(ValueError, match="inputs"):
        seedprint.fingerprint(build(get_config("tiny", n_layer=1), 0), sequences=2, inputs="images")


def test_a_nan_fingerprint_row_is_an_error_naming_the_model_and_the_count():
    model = build(get_config("tiny", n_layer=1), 0).eval()
    with torch.no_grad():
        model.transformer.wte.weight[:, 0] = float("nan")                # every token: whatever ends a sequence
    with pytest.raises(FloatingPointError, match="first in the input embeddings"):     # the model's own check
        seedprint.fingerprint(model, sequences=40, seq_len=8, vocab=16, name="mymodel")
    with torch.no_grad():
        model.transformer.wte.weight[:, 0] = 0.0
        model.transformer.wte.weight[7] = float("nan")                   # one token id poisons its sequences
    states = lambda ids: model.transformer.wte(ids)[:, -1]              # a callable: the rows are checked
    with pytest.raises(ValueError, match=r"mymodel: \d+ of 40 fingerprint rows hold NaN"):
        seedprint.fingerprint(states, sequences=40, seq_len=8, vocab=16, name="mymodel")


def test_a_fingerprint_equals_a_checked_pass_per_batch_and_waits_once(monkeypatch):
    """A GPT's fingerprint, bit for bit, as a loop that draws each batch and checks each pass (the ids on the device
    at once are the same ids), token and Gaussian inputs, an uneven last batch; its host reads as many for 8
    batches as for one; its compile mode as torch.compile receives it (a stand-in that compiles nothing: the
    compiled pass itself is tests/test_probe.py's)."""
    from conftest import host_syncs
    from data import random_batches
    model = build(get_config("tiny", n_layer=2), 3).eval()
    for kind, opts in (("tokens", dict(low=100)), ("gaussian", dict(std=0.5))):
        H = seedprint.fingerprint(model, sequences=30, seq_len=8, batch_size=7, inputs=kind, seed=2, vocab=400, **opts)
        with torch.no_grad():
            rows = [model.trace(x, hidden="last")["hidden"][-1] if kind == "tokens" else
                    model.trace(embeds=x, hidden="last")["hidden"][-1]
                    for x in random_batches(kind, 30, 8, 7, 2, vocab=400, width=64, **opts)]
        assert np.array_equal(H, torch.cat(rows).numpy()), kind
    reads = lambda b: host_syncs(lambda: seedprint.fingerprint(model, sequences=16, seq_len=8, batch_size=b))
    assert reads(16) == reads(2)
    modes = []
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, **kw: modes.append(mode) or fn)
    compiled = seedprint.fingerprint(model, sequences=30, seq_len=8, compile_mode="max-autotune-no-cudagraphs")
    assert modes == ["max-autotune-no-cudagraphs"]
    assert np.array_equal(compiled, seedprint.fingerprint(model, sequences=30, seq_len=8))


def test_fingerprint_speed_times_the_largest_batch_that_fits_and_its_compile_apart(tmp_path, monkeypatch):
    """studies.fingerprint_speed --fit_batch: the batch doubled from --batch_size while a pass fits (here a pass of
    more than 100 sequences runs out of memory), capped at --sequences; a try that runs out is no failure. With
    --compile on, every batch shape of the timed run compiled before its clock (a stand-in compile that records)."""
    from studies import fingerprint_speed
    assert fingerprint_speed.largest_batch(None, 8, 25, 2000, fits=lambda b: b <= 100) == 100
    assert fingerprint_speed.largest_batch(None, 8, 25, 2000, fits=lambda b: b <= 99) == 50
    assert fingerprint_speed.largest_batch(None, 8, 25, 70, fits=lambda b: True) == 70
    real = seedprint.fingerprint

    def fingerprint(model, sequences, seq_len, batch_size=32, **kw):
        calls.append((sequences, batch_size, kw.get("compile_mode")))
        if batch_size > 100:
            raise torch.OutOfMemoryError("CUDA out of memory (a stand-in)")
        return real(model, sequences, seq_len, batch_size=batch_size, **kw)
    calls = []
    monkeypatch.setattr(seedprint, "fingerprint", fingerprint)
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None, **kw: fn)
    fingerprint_speed.main(["--model", "tiny", "--n_layer", "1", "--sequences", "300", "--seq_len", "8", "--batch_size",
                            "30", "--fit_batch", "on", "--compile", "on", "--device", "cpu", "--out", str(tmp_path)])
    row = json.loads((tmp_path / "results.json").read_text())["speed"]
    assert (row["batch_size"], row["batch_asked"], row["compile_mode"]) == (60, 30, "default")
    assert row["fit_seconds"] > 0 and row["compile_seconds"] > 0
    assert calls == [(60, 60, None), (120, 120, None), (60, 60, "default"), (300, 60, "default")]


def test_a_callable_fingerprints_like_the_model_it_wraps():
    """The escape hatch for families model.py cannot load: any ids -> final-norm last-token states."""
    model = build(get_config("tiny", n_layer=2), 0).eval()
    states = lambda ids: model.trace(ids, hidden="last")["hidden"][-1]
    a = seedprint.fingerprint(model, sequences=20, seq_len=8)
    b = seedprint.fingerprint(states, sequences=20, seq_len=8, vocab=model.config.vocab_size)
    assert np.array_equal(a, b)
    every_position = lambda ids: model.trace(ids, hidden="all")["hidden"][-1]          # (B, T, d): a user's slip
    with pytest.raises(ValueError, match=r"to last-token states \(B, d\), got shape \(20, 8, 64\)"):
        seedprint.fingerprint(every_position, sequences=20, seq_len=8, vocab=model.config.vocab_size, batch_size=20)


# ----------------------------------------------------------------------------- lineage on tiny trained models

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage")
    text = root / "t.txt"
    text.write_text("".join(chr(32 + (i * 7919) % 90) for i in range(40000)))
    data.prepare([str(text)], str(root / "data"), tokenizer="bytes")
    for seed in (1, 2):
        train.train(train.TrainConfig(data=str(root / "data"), out_dir=str(root / f"s{seed}"), device="cpu",
                                      knobs=dict(n_layer=2, n_embd=64, block_size=32), init_seed=seed, embed_seed=seed,
                                      max_steps=40, ckpt_every=40, eval_every=0, log_every=0, lr=3e-3))
    return {s: [train.checkpoint_path(str(root / f"s{s}"), step) for step in (0, 40)] for s in (1, 2)}


def test_a_model_and_its_trained_self_are_related(trained):
    r = seedprint.compare(trained[1][0], trained[1][1], sequences=400, seq_len=16, k=32)
    assert r.related and r.p < 1e-4, r


def test_different_seeds_are_not_related(trained):
    for a, b in ((trained[1][0], trained[2][0]), (trained[1][1], trained[2][1])):
        r = seedprint.compare(a, b, sequences=400, seq_len=16, k=32)
        assert not r.related, r


def test_fingerprint_cache_is_keyed_on_the_weights_and_every_option(trained, tmp_path):
    """studies.lineage.cached_fingerprints (the studies' cache; seedprint.py keeps none): one file per model and
    options, read back as it was made, a new one where an option, the dtype or the weight file changes; a cached
    fingerprint is the model's own, and a Recipe is built only where its key is not cached."""
    from studies.lineage import Recipe, cached_fingerprints
    cache = str(tmp_path / "cache")

    def cached(dtype=None, **options):
        return cached_fingerprints(trained[1][0], cache, "cpu", dtype, dict(sequences=8, **options),
                                   {"exact": {}})["exact"]
    H1 = cached(seq_len=4)
    assert len(os.listdir(cache)) == 1
    assert np.array_equal(H1, seedprint.fingerprint(seedprint.hf.load(trained[1][0]).eval(), sequences=8, seq_len=4))
    assert np.array_equal(H1, cached(seq_len=4))
    assert len(os.listdir(cache)) == 1
    cached(seq_len=5)
    cached(dtype="bfloat16", seq_len=4)
    assert len(os.listdir(cache)) == 3
    st = os.stat(trained[1][0])
    os.utime(trained[1][0], ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))   # the weight file changed
    try:
        cached(seq_len=4)
        assert len(os.listdir(cache)) == 4
    finally:
        os.utime(trained[1][0], ns=(st.st_atime_ns, st.st_mtime_ns))
    built, cfg = [], get_config("tiny", n_layer=1)
    recipe = Recipe("test|tiny|1", lambda: built.append(1) or build(cfg, 1), cfg)
    sets = {"exact": {}, "again": dict(seed=1)}
    first = cached_fingerprints(recipe, cache, "cpu", None, dict(sequences=8, seq_len=4), sets)
    again = cached_fingerprints(recipe, cache, "cpu", None, dict(sequences=8, seq_len=4), sets)
    assert built == [1] and all(np.array_equal(first[name], again[name]) for name in sets)   # the second: cached


def test_a_recipe_is_fingerprinted_in_the_dtype_asked_for_as_a_path_is(tmp_path):
    """dtype reaches a model built in code (a studies.lineage.Recipe) as it reaches one loaded from disk: its
    fingerprint is that of the model cast to the dtype, not of the model as built."""
    from studies.lineage import Recipe, cached_fingerprints
    cfg = get_config("tiny", n_layer=2)
    recipe = Recipe("test|tiny|0", lambda: build(cfg, 0), cfg)
    options = dict(sequences=16, seq_len=8)
    H = cached_fingerprints(recipe, str(tmp_path), "cpu", "bfloat16", options, {"exact": {}})["exact"]
    cast = seedprint.fingerprint(build(cfg, 0).to(torch.bfloat16).eval(), **options)
    assert np.array_equal(H, cast)
    assert not np.array_equal(H, seedprint.fingerprint(build(cfg, 0).eval(), **options))


# ----------------------------------------------------------------------------- what people do to weights


def test_alignment_recovers_a_permutation_that_hides_a_lineage():
    rng = np.random.default_rng(0)
    N, d = 1200, 40
    base = rng.standard_normal((2 * N, d)) + np.linspace(-1, 1, d)          # distinct column means
    child = base + 0.3 * rng.standard_normal((2 * N, d))
    perm, sign = rng.permutation(d), np.where(rng.random(d) < 0.5, -1.0, 1.0)
    test, hold = slice(0, N), slice(N, 2 * N)
    hidden = child[:, perm] * sign                                          # a signed permutation
    match, found, fit = align.align_coordinates(base[hold], hidden[hold])
    assert np.array_equal(match, np.argsort(perm)) and np.array_equal(found, sign[np.argsort(perm)])
    naive = [abs(np.corrcoef(base[hold][:, j], hidden[hold][:, match[j]])[0, 1]) for j in range(d)]
    assert fit == pytest.approx(np.mean(naive), rel=1e-9)
    assert np.allclose(hidden[:, match] * found, child)                    # undone exactly
    assert seedprint.seedprint_test(base[test], child[test], k=20).related
    assert not seedprint.seedprint_test(base[test], hidden[test], k=20).related          # the exact test is blind
    r = seedprint.seedprint_test(base[test], hidden[test], k=20, held_out=(base[hold], hidden[hold]))
    assert r.related and r.alignment.moved == int(((perm != np.arange(d)) | (sign < 0)).sum())
    assert "aligned" in r.explain() and r.alignment.tau_aligned == pytest.approx(
        seedprint.seedprint_test(base[test], child[test], k=20).mean_tau)
    other = rng.standard_normal((2 * N, d))
    assert not seedprint.seedprint_test(base[test], other[test], k=20, held_out=(base[hold], other[hold])).related
    # unsigned (LayerNorm models, where a sign flip is not function-preserving): a plain permutation is undone,
    # and no coordinate is ever negated, even where the best signed match would negate it
    match, found, _ = align.align_coordinates(base[hold], child[hold][:, perm], signed=False)
    assert np.array_equal(match, np.argsort(perm)) and (found == 1).all()
    assert (align.align_coordinates(base[hold], hidden[hold], signed=False)[1] == 1).all()
    r = seedprint.seedprint_test(base[test], hidden[test], k=20, held_out=(base[hold], hidden[hold]), signed=False)
    assert not r.alignment.signed and "with signs" not in r.explain()


def test_the_table_gate_bounds_independent_tables_and_passes_a_moved_copy():
    """Independent Gaussian tables (Monte Carlo, shapes where the gate is 0.5 and where few rows raise it): the
    best match's mean |r|, and even its largest single |r|, stay below table_gate, whitened or not. A signed-permuted,
    noisy copy of a table clears it and is matched back exactly; a rotated copy (QuaRot) does not clear
    TABLE_MATCH_R."""
    rng = np.random.default_rng(0)
    for rows, d in ((2000, 32), (64, 32), (48, 24), (32, 32)):
        gate = align.table_gate(rows, d)
        for _ in range(50):
            A, B = rng.standard_normal((rows, d)), rng.standard_normal((rows, d))
            match, sign, fit = align.align_coordinates(A, B)
            top = np.abs(np.corrcoef(A.T, B.T)[:d, d:]).max()
            assert fit < gate and top < gate and not align.whitened_match(A, B)[3]      # raw and whitened
    assert align.table_gate(48, 24) > 0.7 and align.table_gate(2000, 32) == align.TABLE_MATCH_R
    A = rng.standard_normal((500, 48))
    perm, sign = rng.permutation(48), np.where(rng.random(48) < 0.5, -1.0, 1.0)
    B = (A + 0.5 * rng.standard_normal(A.shape))[:, perm] * sign
    match, found, fit = align.align_coordinates(A, B)
    assert fit > align.table_gate(500, 48) and np.array_equal(match, np.argsort(perm))
    Q, _ = np.linalg.qr(rng.standard_normal((48, 48)))
    assert align.align_coordinates(A, A @ Q)[2] < align.TABLE_MATCH_R


def test_the_whitened_match_whitens_so_shared_learned_directions_do_not_pass_for_a_lineage():
    """Two independent tables that share a few strong token-level directions (as tables trained on the same data
    do: token frequency and the like), each in its own basis: raw, their columns all correlate through those
    directions and the best match clears the gate; whitened, it falls to chance and is untrusted. The whitening
    commutes with a signed permutation (checked against an SVD), so a descendant is still matched exactly, and
    tables with fewer rows than the width, or constant ones, are not used."""
    rng = np.random.default_rng(2)
    rows, d, k = 1000, 32, 2
    shared = rng.standard_normal((rows, k)) * 6                        # strong directions shared by both tables
    A = shared @ rng.standard_normal((k, d)) + rng.standard_normal((rows, d))
    B = shared @ rng.standard_normal((k, d)) + rng.standard_normal((rows, d))
    assert align.align_coordinates(A, B)[2] > align.table_gate(rows, d)          # raw: a false lineage
    match, sign, fit, trusted = align.whitened_match(A, B)
    assert not trusted and fit < 0.2
    X = A - A.mean(0)
    U, _, Vt = np.linalg.svd(X, full_matrices=False)
    W = align.whiten(A)
    assert np.allclose(W / np.linalg.norm(W, axis=0), (U @ Vt) / np.linalg.norm(U @ Vt, axis=0), atol=1e-8)
    perm, flip = rng.permutation(d), np.where(rng.random(d) < 0.5, -1.0, 1.0)
    assert np.allclose(align.whiten(A[:, perm] * flip), W[:, perm] * flip, atol=1e-8)
    child = (A + 0.3 * rng.standard_normal(A.shape))[:, perm] * flip
    match, sign, fit, trusted = align.whitened_match(A, child)
    assert trusted and np.array_equal(match, np.argsort(perm)) and np.array_equal(sign, flip[np.argsort(perm)])
    few = align.whitened_match(A[:31], child[:31])                                     # 31 rows < width 32
    constant = align.whitened_match(np.ones_like(A), child)                            # nothing to whiten
    assert few[2] is None and not few[3] and constant[2] is None and not constant[3]


def test_a_trusted_whitened_match_finds_a_weak_lineage_that_held_out_inputs_lose():
    """A permuted descendant whose fingerprints keep only a weak share of its base's (as a byte-level model far
    from its init does): the held-out inputs cannot recover the basis (their match is untrusted and does not count);
    the token tables (its columns are its base's, moved) recover it exactly, and the matched test counts as it is.
    An independent model's table match is untrusted, so its verdict falls back to held-out inputs, untrusted too."""
    rng = np.random.default_rng(1)
    N, d, rows = 2000, 64, 300
    base = rng.standard_normal((2 * N, d)) + np.linspace(-1, 1, d)
    child = 0.05 * base + rng.standard_normal((2 * N, d)) + np.linspace(-1, 1, d)
    perm, sign = rng.permutation(d), np.where(rng.random(d) < 0.5, -1.0, 1.0)
    hidden = child[:, perm] * sign
    test, hold = slice(0, N), slice(N, 2 * N)
    TA = rng.standard_normal((rows, d))
    TB = (TA + 0.1 * rng.standard_normal((rows, d)))[:, perm] * sign
    plain = seedprint.seedprint_test(base[test], child[test], k=32)
    assert plain.related and plain.mean_tau < 0.06                      # a weak lineage the exact test sees
    inputs = seedprint.seedprint_test(base[test], hidden[test], k=32, held_out=(base[hold], hidden[hold]))
    assert not inputs.related and inputs.alignment.matched_on == "held-out inputs" and not inputs.alignment.trusted
    assert inputs.alignment.table_fit is None and inputs.alignment.input_fit < align.TABLE_MATCH_R
    r = seedprint.seedprint_test(base[test], hidden[test], k=32, held_out=(base[hold], hidden[hold]), tables=(TA, TB))
    a = r.alignment
    assert r.related and a.matched_on == "token table" and a.table_fit > 0.9
    assert a.tau_aligned == pytest.approx(plain.mean_tau) and r.p == pytest.approx(min(1, 2 * min(a.p_exact, plain.p)))
    assert "by their whitened token tables" in r.explain() and "does not count" not in r.explain()
    moved = child[:, perm]                                       # LayerNorm models: a permutation, no sign flips
    plain_perm = seedprint.seedprint_test(base[test], moved[test], k=32, held_out=(base[hold], moved[hold]),
                                          signed=False, tables=(TA, TA[:, perm]))
    assert plain_perm.related and plain_perm.alignment.matched_on == "token table" and "mean r " in plain_perm.explain()
    other = rng.standard_normal((2 * N, d))
    u = seedprint.seedprint_test(base[test], other[test], k=32, held_out=(base[hold], other[hold]),
                                 tables=(TA, rng.standard_normal((rows, d))))
    assert u.alignment.matched_on == "held-out inputs" and u.alignment.table_fit < align.TABLE_MATCH_R and not u.related
    assert "untrusted" in u.explain() and "does not count" in u.explain()
    with pytest.raises(ValueError, match="token tables"):
        seedprint.seedprint_test(base[test], hidden[test], k=32, held_out=(base[hold], hidden[hold]),
                                 tables=(TA, TB[:-1]))


def test_the_rows_a_whitened_match_reads_are_the_models_held_out_token_rows_from_every_kind_of_model(tmp_path):
    """fingerprints_of gives the token table's rows [vocab // 2, vocab) (the alignment's tokens, none of the test's)
    of a GPT, of a train.py checkpoint and of a Hugging Face directory (LLaMA and GPT-2 names), each read once with
    the model (evidence.read_model, hf.load) and compared with the table read by torch.load or the safetensors
    library; None for a callable or without a vocabulary; a directory without a table is refused as it is read. A
    study's Recipe gives the same rows (studies.lineage.token_rows)."""
    from safetensors.torch import load_file
    from model import write_checkpoint
    from conftest import llama_family, write_hf
    from test_hf import gpt2_checkpoint

    def rows(m, vocab):                 # no input set asked for: the rows alone, the model loaded once
        H, rows, record = seedprint.fingerprints_of(evidence.read_model(m), {}, vocab)
        assert H == {}
        return rows

    def stored(path, name):             # the table as the safetensors library reads it, every shard
        return {k: v for f in sorted(os.listdir(path)) if f.endswith(".safetensors")
                for k, v in load_file(os.path.join(path, f)).items()}[name].numpy()
    cfg = get_config("tiny", n_layer=1, vocab_size=90)
    m = build(cfg, 3, 3)
    want = m.transformer.wte.weight[40:80].detach().numpy()
    assert np.array_equal(rows(m, 80), want)
    from studies.lineage import Recipe, token_rows                   # a study's model built in code
    assert np.array_equal(token_rows(Recipe("r", lambda: m), 40, 80), want)
    sets = align.input_sets(80, 0)
    assert sets["test"]["low"] == 0 and sets["test"]["vocab"] == 40
    assert sets["held_out"]["low"] == 40 and sets["held_out"]["vocab"] == 80
    write_checkpoint(str(tmp_path / "m.pt"), m)
    table = torch.load(str(tmp_path / "m.pt"), map_location="cpu", weights_only=True)["model"]["transformer.wte.weight"]
    assert np.array_equal(rows(str(tmp_path / "m.pt"), 80), table[40:80].numpy()) and np.array_equal(table[40:80], want)
    _, config, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path / "llama", config, t)
    llama = rows(str(tmp_path / "llama"), 100)
    assert np.array_equal(llama, stored(str(tmp_path / "llama"), "model.embed_tokens.weight")[50:100])
    config, t = gpt2_checkpoint()
    for name, tensors in (("prefixed", t), ("bare", {k.removeprefix("transformer."): v for k, v in t.items()})):
        write_hf(tmp_path / name, config, tensors)         # GPT-2 files name their tensors either way
        table = stored(str(tmp_path / name), "transformer.wte.weight" if name == "prefixed" else "wte.weight")
        assert np.array_equal(rows(str(tmp_path / name), 50), table[25:50])
    assert rows(lambda ids: ids, 80) is None and rows(m, None) is None
    write_hf(tmp_path / "no_table", config, {k: v for k, v in t.items() if not k.endswith("wte.weight")})
    with pytest.raises(ValueError, match=r"wte.weight \(transformer.wte.weight\) of a GPT2LMHeadModel are missing"):
        evidence.read_model(str(tmp_path / "no_table"))


def test_the_alignment_is_signed_only_where_a_sign_flip_keeps_the_function():
    """compare_many aligns with signs for RMSNorm and norm-free models, without them as soon as a LayerNorm model
    is in the pair (a fingerprint array, whose architecture is unknown, counts as signed)."""
    assert align.signs_keep_function(get_config("tiny", norm="rmsnorm"), get_config("tiny", norm="none"), None)
    assert not align.signs_keep_function(get_config("tiny", norm="rmsnorm"), get_config("tiny", norm="layernorm"))
    opts = dict(k=16, sequences=60, seq_len=8, batch_size=30, vocab=200)
    for norm in ("rmsnorm", "layernorm"):
        cfg = get_config("tiny", n_layer=1, vocab_size=200, norm=norm)
        a, b = build(cfg, 0).eval(), build(cfg, 1).eval()
        r = seedprint.compare(a, b, align=True, **opts)
        assert r.alignment is not None and r.alignment.signed == (norm == "rmsnorm")


def test_holm_and_lineages_against_naive_definitions():
    rng = np.random.default_rng(1)
    for _ in range(50):
        ps = list(rng.random(7) ** 3)
        order = np.argsort(ps)
        naive = [0.0] * 7
        for rank, i in enumerate(order):
            naive[i] = min(1.0, max((7 - r) * ps[order[r]] for r in range(rank + 1)))
        assert seedprint.holm(ps) == pytest.approx(naive)
    assert seedprint.lineages(6, [(0, 2), (2, 5), (3, 4)]) == [[0, 2, 5], [1], [3, 4]]


def test_short_names_tell_every_model_apart():
    paths = ["out/a/seed0/ckpt_0000200.pt", "out/a/seed1/ckpt_0000200.pt", "out/a/seed0/ckpt_0000000.pt", "hf/SmolLM2/"]
    names = short_names(paths)
    assert names == ["seed0/ckpt_0000200.pt", "seed1/ckpt_0000200.pt", "ckpt_0000000.pt", "SmolLM2"]
    assert all(p.rstrip("/").endswith(n) for p, n in zip(paths, names)) and len(set(names)) == len(names)
    assert short_names(["/x/m", "x/m"]) == ["/x/m", "x/m"]

def test_many_models_at_once_fingerprint_each_once_and_group_by_lineage(monkeypatch):
    """compare_many fingerprints each model once however many pairs it is in, groups the models by lineage and
    Holm-adjusts every pair (a cache across runs is the studies': studies.lineage.cached_fingerprints)."""
    cfg = get_config("tiny", n_layer=2, vocab_size=300, block_size=32, norm="rmsnorm", activation="swiglu",
                     bias=False, tie_embeddings=False)
    models = [add_noise(build(cfg, seed, seed), noise, seed=7)
              for seed, noise in ((1, 0.0), (1, 0.02), (2, 0.0), (3, 0.0), (2, 0.02))]
    seen, fingerprint = [], seedprint.fingerprint
    monkeypatch.setattr(seedprint, "fingerprint", lambda model, **kw: seen.append(model) or fingerprint(model, **kw))
    res = seedprint.compare_many(models, k=32, sequences=300, seq_len=16)
    assert res["groups"] == [[0, 1], [2, 4], [3]]
    assert [id(m) for m in seen] == [id(m) for m in models]      # each model fingerprinted once, for 10 pairs
    raw = {pr: r.p_raw for pr, r in res["results"].items()}
    assert [res["results"][pr].p for pr in raw] == pytest.approx(seedprint.holm(list(raw.values())))


def test_the_aligned_verdict_sees_a_lineage_through_a_permuted_basis_and_fits_on_other_tokens(tmp_path):
    """compare(align=True): test inputs from the lower half of the vocabulary, the alignment fit on other
    sequences from the upper half (checked by recording what the model sees)."""
    cfg = get_config("tiny", n_layer=2, vocab_size=400, block_size=32, norm="rmsnorm", activation="swiglu",
                     bias=False, tie_embeddings=False)
    base = build(cfg, 1, 1).eval()
    child = permute_residual(add_noise(base, 0.02, seed=3), seed=5, flip=1.0)   # all negated
    opts = dict(k=32, sequences=300, seq_len=16)
    assert not seedprint.compare(base, child, **opts).related
    r = seedprint.compare(base, child, align=True, **opts)
    assert r.related and r.alignment.moved > 50 and r.alignment.matched_on == "token table"
    u = seedprint.compare(base, build(cfg, 2, 2).eval(), align=True, **opts)
    assert not u.related and u.alignment.matched_on == "held-out inputs"
    assert u.alignment.table_fit < align.TABLE_MATCH_R
    seen = []
    record = lambda ids: seen.append(ids) or base.trace(ids, hidden="last")["hidden"][-1]
    seedprint.compare(record, record, align=True, vocab=400, **opts)
    n = math.ceil(300 / 32)                          # batches per input set: A's test, A's alignment, B's ...
    test, hold = torch.cat(seen[:n] + seen[2 * n:3 * n]), torch.cat(seen[n:2 * n] + seen[3 * n:])
    assert test.max() < 200 <= hold.min() and hold.max() < 400


def test_the_aligned_verdict_counts_an_input_match_only_where_trusted_and_keeps_the_exact_test():
    """Two models trained from other inits on the same data: each coordinate loads on a few shared directions of
    the inputs (token frequency and the like), each model in its own basis. A raw signed match lines their
    coordinates up by the signs of their loadings: every matched pair correlates, the matched test's p is tiny and
    its mean tau above the floor the rule before used (0.06, recomputed here apart from the verdict). Whitened, the
    match is chance (untrusted): the matched test does not count and the verdict is the exact test's. A permuted
    descendant's whitened match is unmistakable (trusted) and counts; a pair the exact test already sees stays
    related, with p twice the smaller of the two."""
    rng = np.random.default_rng(4)
    N, d, shared = 3000, 40, 3
    factors = rng.standard_normal((2 * N, shared))                 # what the inputs share, in both models
    a = rng.standard_normal((2 * N, d)) + factors @ rng.standard_normal((shared, d)) + np.linspace(-1, 1, d)
    b = rng.standard_normal((2 * N, d)) + factors @ rng.standard_normal((shared, d)) + np.linspace(-1, 1, d)[
        rng.permutation(d)]                                        # its own smallest-mean dimensions
    test, hold = slice(0, N), slice(N, 2 * N)
    raw_match, raw_sign, raw_fit = align.align_coordinates(a[hold], b[hold])
    raw = seedprint.exact_verdict(a[test], b[test][:, raw_match] * raw_sign, k=20)
    assert raw.p < seedprint.ALPHA / 2 and raw.mean_tau > 0.06     # the rule before would have called it related
    same_data = seedprint.seedprint_test(a[test], b[test], k=20, held_out=(a[hold], b[hold]))
    al = same_data.alignment
    assert not al.trusted and al.input_fit < align.TABLE_MATCH_R and al.matched_on == "held-out inputs"
    whitened = align.align_coordinates(align.whiten(a[hold]), align.whiten(b[hold]))[2]      # whitened apart
    assert al.input_fit == pytest.approx(whitened) and whitened < raw_fit / 2    # the shared directions taken out
    assert not same_data.related and same_data.p == pytest.approx(min(1.0, 2 * al.p_exact))
    assert "does not count" in same_data.explain() and "whitened, mean |r|" in same_data.explain()
    perm, sign = rng.permutation(d), np.where(rng.random(d) < 0.5, -1.0, 1.0)
    child = ((a + 0.5 * rng.standard_normal((2 * N, d)))[:, perm]) * sign
    strong = seedprint.seedprint_test(a[test], child[test], k=20, held_out=(a[hold], child[hold]))
    assert strong.alignment.trusted and strong.related and strong.alignment.input_fit >= align.TABLE_MATCH_R
    assert strong.p == pytest.approx(min(1.0, 2 * min(strong.alignment.p_exact, strong.alignment.p_aligned)))
    plain = a + 0.3 * rng.standard_normal((2 * N, d))
    both = seedprint.seedprint_test(a[test], plain[test], k=20, held_out=(a[hold], plain[hold]))
    exact = seedprint.seedprint_test(a[test], plain[test], k=20)
    assert both.related and both.alignment.p_exact == exact.p
    assert both.p == pytest.approx(2 * min(exact.p, both.alignment.p_aligned))


def test_the_verdict_line_says_what_the_checkpoints_share_by_construction(tmp_path):
    """train.py checkpoints record their lineage's seeds and init_from: a shared embedding seed under other init
    seeds is named (the test's H0 is false for those parts), as is one model trained from the other."""
    from model import write_checkpoint
    cfg = get_config("tiny", n_layer=1, vocab_size=64)
    paths = {}
    for name, (s, e) in dict(a=(1, 0), b=(2, 0), c=(3, 3), d=(1, 0)).items():
        paths[name] = str(tmp_path / f"{name}.pt")
        write_checkpoint(paths[name], build(cfg, s, e), seeds=dict(init_seed=s, embed_seed=e))
    child = str(tmp_path / "child.pt")
    write_checkpoint(child, build(cfg, 1, 0), seeds=dict(init_seed=1, embed_seed=0), init_from=paths["a"])
    record = lambda m: evidence.record_of(evidence.read_model(m))       # what its own file records, no weight read
    said = lambda a, b: evidence.shared_by_construction(record(a), record(b), related=True)
    assert "share the embedding seed 0 (init seeds 1 and 2)" in said(paths["a"], paths["b"])
    assert said(paths["a"], paths["c"]) == "" and said(paths["a"], build(cfg, 1, 0)) == ""
    assert "one initialization" in said(paths["a"], paths["d"])
    assert "B was trained from the other" in said(paths["a"], child)
    r = seedprint.compare(paths["a"], paths["b"], k=16, sequences=60, seq_len=8)
    assert "By construction, they share the embedding seed 0" in r.explain()


# ----------------------------------------------------------------------------- fingerprint files and the registry

LLAMA = dict(n_layer=2, vocab_size=400, block_size=32, norm="rmsnorm", activation="swiglu", bias=False,
             tie_embeddings=False)
FILE_OPTS = dict(sequences=200, seq_len=16, k=16)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """Checkpoints of a small lineage and strangers: a base, its noisy child, its permuted child, two unrelated."""
    from model import write_checkpoint
    root = tmp_path_factory.mktemp("family")
    cfg = get_config("tiny", **LLAMA)
    base = build(cfg, 1, 1)
    models = {"base": base, "child": add_noise(base, 0.02, seed=3), "hidden": permute_residual(base, seed=5, flip=0.5),
              "stranger": build(cfg, 2, 2), "other": build(cfg, 3, 3)}
    paths = {}
    for name, m in models.items():
        paths[name] = str(root / f"{name}.pt")
        write_checkpoint(paths[name], m)
    return root, paths


@pytest.fixture(scope="module")
def files(family, tmp_path_factory):
    """The fingerprint file of each model of the family (FILE_OPTS), made once: tests that edit one copy it."""
    root, paths = family
    folder = tmp_path_factory.mktemp("files")
    made = {}
    for name in paths:
        made[name] = str(folder / f"{name}.npz")
        evidence.write(made[name], seedprint.make_fingerprint(paths[name], **FILE_OPTS))
    return made


def checkpoint_table(path: str) -> np.ndarray:
    """A train.py checkpoint's token table as torch.load reads it (not through model.py or hf.py)."""
    return torch.load(path, map_location="cpu", weights_only=True)["model"]["transformer.wte.weight"].numpy()


def test_a_verdict_from_files_is_the_verdict_from_the_models(family, files):
    """File against file and file against model give the models' own verdict, exact and aligned, to the last digit;
    the file holds every array a verdict reads, and the options and weights it came from."""
    root, paths = family
    fp = evidence.read(files["base"])
    assert {name: h.shape for name, h in fp.sets.items()} == {name: (200, 64) for name in align.SETS}
    assert fp.rows.shape == (200, 64)
    assert fp.options == dict(sequences=200, seq_len=16, seed=0, vocab=400, k=16, rank_by="smallest",
                              set_mode="coset")
    import hashlib
    assert fp.weights["files"]["base.pt"]["sha256"] == hashlib.sha256(open(paths["base"], "rb").read()).hexdigest()
    assert np.array_equal(fp.rows, checkpoint_table(paths["base"])[200:400])          # stored exactly
    verdict = lambda r: {k: v for k, v in r.record().items() if k != "shared"}     # every number of it
    for b, aligned in (("child", False), ("hidden", True), ("stranger", True)):
        models = seedprint.compare(paths["base"], paths[b], align=aligned, **FILE_OPTS)
        both = seedprint.compare(files["base"], files[b], align=aligned)
        mixed = seedprint.compare(files["base"], paths[b], align=aligned)
        for r in (both, mixed):
            assert verdict(r) == verdict(models), b
    assert models.related is False and seedprint.compare(files["base"], files["hidden"], align=True).related


def test_a_file_that_is_not_whole_or_not_ours_or_made_otherwise_is_refused_in_one_line(family, files, tmp_path):
    root, paths = family
    good = files["base"]
    raw = open(good, "rb").read()
    cases = {"cut.npz": raw[:len(raw) // 2], "empty.npz": b""}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match="is not a readable fingerprint file"):
            evidence.read(str(tmp_path / name))
    np.savez(tmp_path / "foreign.npz", H=np.zeros(3))
    with pytest.raises(ValueError, match="is not a readable fingerprint file|is not a SeedPrint fingerprint"):
        evidence.read(str(tmp_path / "foreign.npz"))
    with np.load(good) as z:                      # an edited array, its meta (and digest) left as they were
        arrays = {k: z[k] for k in z.files}
    arrays["exact"] = arrays["exact"].copy()
    arrays["exact"][0, 0] += 1.0
    np.savez(tmp_path / "edited.npz", **arrays)
    with pytest.raises(ValueError, match="does not match its own sha256"):
        evidence.read(str(tmp_path / "edited.npz"))
    meta = json.loads(str(arrays["meta"]))
    meta["version"] = evidence.FILE_VERSION + 1
    arrays = dict(arrays, meta=np.array(json.dumps(meta)))
    np.savez(tmp_path / "newer.npz", **arrays)
    with pytest.raises(ValueError, match=f"format version {evidence.FILE_VERSION + 1}; this code reads versions 1 to "
                                         f"{evidence.FILE_VERSION}: update the project"):
        evidence.read(str(tmp_path / "newer.npz"))
    from conftest import cli_error, forge_fingerprint
    forge_fingerprint(good, tmp_path / "later.npz",          # whole, but from a later project: config fields unknown
                      edit_meta=lambda m: m["config"].update(later_knob=1, other_knob="x"))
    with pytest.raises(ValueError, match=r"fields this code does not know \(later_knob, other_knob\)"):
        evidence.read(str(tmp_path / "later.npz"))
    line = cli_error(seedprint.main, "seedprint.py", [str(tmp_path / "later.npz"), paths["child"], "--out",
                                                      str(tmp_path / "out")])
    assert "(later_knob, other_knob)" in line and not (tmp_path / "out").exists()

    same = forge_fingerprint(good, tmp_path / "same.npz")
    assert evidence.read(same).options["sequences"] == 200                   # forged alone: read
    forgeries = {   # NaN ties every pair, so a file of NaN scored "unrelated"; the rest failed far from here or not
        "nan.npz": (lambda a: a["test"].fill(np.nan), None, "holds NaN or inf in its test array"),
        "inf.npz": (lambda a: a["exact"].__setitem__((3, 5), np.inf), None, "holds NaN or inf in its exact array"),
        "no_option.npz": (None, lambda m: m["options"].pop("set_mode"), "(missing: set_mode; unknown: none)"),
        "extra_option.npz": (None, lambda m: m["options"].update(temperature=3), "(missing: none; unknown: "
                                                                                  "temperature)"),
        "bad_option.npz": (None, lambda m: m["options"].update(k="16"), "--k must be an integer >= 2, got '16'"),
        "int8.npz": (None, lambda m: m.update(rows_dtype="int8"), "records its table's rows as 'int8'"),
        "list_dtype.npz": (None, lambda m: m.update(rows_dtype=["float32"]), "records its table's rows as "
                                                                             "['float32']"),
        "dict_dtype.npz": (None, lambda m: m.update(rows_dtype={}), "records its table's rows as {}"),
        "no_provenance.npz": (None, lambda m: m.pop("provenance"), "records no provenance"),    # a KeyError later
        "no_weights.npz": (None, lambda m: m.update(weights=None), "records no weights"),
        "narrow.npz": (lambda a: a.update(exact=a["exact"][:, :32]), None, "holds its exact array as float32 "
                       "(200, 32), where its options and config make it float32 (200, 64)"),
        "few_rows.npz": (lambda a: a.update(rows=a["rows"][:150]), None, "(150, 64), where its options and config "
                                                                         "make it"),
    }
    for name, (edit_arrays, edit_meta, why) in forgeries.items():
        file = forge_fingerprint(good, tmp_path / name, edit_arrays, edit_meta)
        with pytest.raises(ValueError) as refused:
            evidence.read(file)
        assert why in str(refused.value) and file in str(refused.value), name
        assert "make it again with python seedprint.py MODEL --save FILE" in str(refused.value), name
    line = cli_error(seedprint.main, "seedprint.py", [str(tmp_path / "list_dtype.npz"), paths["child"], "--out",
                                                      str(tmp_path / "out")])
    assert "records its table's rows as ['float32']" in line and not (tmp_path / "out").exists()
    other = str(tmp_path / "other.npz")
    evidence.write(other, seedprint.make_fingerprint(paths["stranger"], sequences=300, seq_len=8, k=16))
    with pytest.raises(ValueError, match=r"made with other options \(sequences 200 vs 300; seq_len 16 vs 8\)"):
        seedprint.compare(good, other)
    with pytest.raises(ValueError, match=r"other options than asked for \(sequences 100 vs the file's 200\)"):
        seedprint.compare(good, paths["child"], sequences=100)


def test_input_sets_are_named_and_a_file_gives_its_arrays_by_those_names(family, files, monkeypatch):
    """Which array is which goes by name, never by a set's options or its place in a list. An array holds the exact
    verdict's set alone: asked for the aligned one, it is refused before any weight is read, in either place."""
    assert align.input_sets(400, 7) == dict(exact={}, test=dict(vocab=200, low=0, seed=7),
                                            held_out=dict(vocab=400, low=200, seed=7 + align.HELD_OUT_SEED))
    fp = evidence.read(files["base"])
    with np.load(files["base"]) as z:                                           # the file's own arrays, by name
        stored = {name: z[name] for name in ("exact", "test", "held_out")}
    H, rows, _ = seedprint.fingerprints_of(fp, {name: {} for name in ("held_out", "exact", "test")})
    assert list(H) == ["held_out", "exact", "test"] and rows is fp.rows
    assert all(np.array_equal(H[name], stored[name]) for name in stored)
    monkeypatch.setattr(seedprint.hf, "load", lambda *a, **kw: pytest.fail("a weight was read"))
    for models in ([stored["exact"], family[1]["child"]], [family[1]["child"], stored["exact"]]):
        with pytest.raises(ValueError, match="a fingerprint array holds the exact verdict's inputs alone"):
            seedprint.compare(*models, align=True, vocab=400, **FILE_OPTS)


def test_a_file_is_made_under_the_checks_of_a_comparison(family):
    """make_fingerprint and a comparison share one set of checks (evidence.plan): what one refuses, so does the
    other."""
    root, paths = family
    for options, why in ((dict(seq_len=999), "--seq_len 999 exceeds the context"),
                         (dict(vocab=401), r"token ids below 401 reach beyond the vocabulary of .*base.pt \(400\)"),
                         (dict(k=1), "--k must be an integer >= 2, got 1")):
        for make in (lambda: seedprint.make_fingerprint(paths["base"], **dict(FILE_OPTS, **options)),
                     lambda: seedprint.compare(paths["base"], paths["child"], **dict(FILE_OPTS, **options))):
            with pytest.raises(ValueError, match=why):
                make()


def test_a_vocab_below_2_is_refused_not_read_as_the_models_own(family, monkeypatch):
    """A --vocab of 0 was read as not given, the model's own vocabulary: make_fingerprint and a comparison refuse it
    before any weight is read, as the flag does."""
    root, paths = family
    monkeypatch.setattr(seedprint.hf, "load", lambda *a, **kw: pytest.fail("a weight was read: vocab=0 not refused"))
    for make in (lambda: seedprint.make_fingerprint(paths["base"], **dict(FILE_OPTS, vocab=0)),
                 lambda: seedprint.compare(paths["base"], paths["child"], **dict(FILE_OPTS, vocab=0))):
        with pytest.raises(ValueError, match="--vocab must be an integer >= 2, got 0"):
            make()


def test_a_search_of_models_holds_one_model_at_a_time(family, monkeypatch):
    """A search of models on disk, all fed one token set: the suspect is read in its turn and let go before the bases
    are read (a 7B suspect held beside each 7B base would double the memory the search needs)."""
    import weakref
    root, paths = family
    alive, real = [], seedprint.hf.load

    def load(*a, **kw):
        assert all(ref() is None for ref in alive), "a model read earlier is still held"
        model = real(*a, **kw)
        alive.append(weakref.ref(model))
        return model
    monkeypatch.setattr(seedprint.hf, "load", load)
    found = seedprint.search(paths["child"], [paths["base"], paths["other"]], **FILE_OPTS)
    assert len(alive) == 3 and found["answer"] == "derives from" and found["base"] == 0


def test_one_suspect_against_many_bases(family, files):
    """The registry: a suspect derived from one base is named; a stranger derives from none; a suspect whose
    lineage is registered twice (the base and its own child) is inconclusive, the two bases one lineage."""
    root, paths = family
    bases = [files["base"], files["stranger"], files["other"]]
    found = seedprint.search(paths["child"], bases)
    assert found["answer"] == "derives from" and found["base"] == 0 and found["related"] == [0]
    ps = [r.p_raw for r in found["results"]]
    assert [r.p for r in found["results"]] == pytest.approx(seedprint.holm(ps))   # Holm across the bases
    assert seedprint.search(paths["other"], bases[:2])["answer"] == "none"
    res = seedprint.search(paths["base"], [files["base"], files["child"], files["stranger"]])
    assert res["answer"] == "inconclusive" and res["related"] == [0, 1] and res["one_lineage"]
    with pytest.raises(ValueError, match="no base to search"):
        seedprint.search(paths["child"], [])


def matched_like(r, alone) -> bool:
    """Whether a verdict among many pairs (before Holm) matched B's coordinates as its pair's verdict alone does."""
    how = lambda a: (a.table_fit, a.matched_on, a.tau_aligned)
    return r.p_raw == alone.p and how(r.alignment) == how(alone.alignment)


def test_a_search_whitens_each_token_table_once_and_gives_the_verdicts_of_its_pairs(family, files, monkeypatch):
    """The suspect's table is matched against every base: whitened once, not once per base, and each verdict is the
    one its pair gets alone. Where a pair's tables' match is untrusted, its held-out fingerprints are whitened for
    that pair's match on inputs."""
    root, paths = family
    bases = [files[name] for name in ("base", "stranger", "other")]
    calls, on_inputs, whiten, whitened_match = [], [False], align.whiten, align.whitened_match

    def inputs_match(*args, whitened=False, **kwargs):
        on_inputs[0] = not whitened                 # seedprint matches tables whitened already, inputs not
        try:
            return whitened_match(*args, whitened=whitened, **kwargs)
        finally:
            on_inputs[0] = False
    monkeypatch.setattr(align, "whiten", lambda X: calls.append(on_inputs[0]) or whiten(X))
    monkeypatch.setattr(align, "whitened_match", inputs_match)
    found = seedprint.search(paths["hidden"], bases, align=True)
    untrusted = sum(r.alignment.matched_on == "held-out inputs" for r in found["results"])
    assert calls.count(False) == 1 + len(bases)                     # the tables: the suspect's and each base's
    assert calls.count(True) == 2 * untrusted and untrusted == 2    # the inputs: both of each untrusted pair's
    monkeypatch.undo()
    assert found["answer"] == "derives from" and found["base"] == 0
    for base, r in zip(bases, found["results"]):
        assert matched_like(r, seedprint.compare(base, paths["hidden"], align=True))


def test_only_a_whitened_matched_in_several_pairs_is_held_whitened(family, files, monkeypatch):
    """A search holds the suspect's whitened table for the run, but a base's only while its own verdict is made: at
    every table match, the whitened tables alive are that pair's two. compare_many of three models whitens each
    table once, and every verdict is the one its pair gets alone."""
    import gc
    import weakref
    root, paths = family
    bases = [files[name] for name in ("base", "stranger", "other")]
    whitened_refs, alive, suspect_calls, inputs = [], [], [], [False]
    vocab = LLAMA["vocab_size"]
    suspect_rows = checkpoint_table(paths["hidden"])[vocab // 2:vocab]
    whiten, whitened_match = align.whiten, align.whitened_match

    def counting_whiten(X):
        if inputs[0]:
            return whiten(X)
        suspect_calls.append(np.array_equal(X, suspect_rows))
        W = whiten(X)
        whitened_refs.append(weakref.ref(W))
        return W

    def counting_match(*args, whitened=False, **kwargs):
        if whitened:                                # a table match (a match on inputs whitens its own two)
            gc.collect()
            alive.append(sum(w() is not None for w in whitened_refs))
            return whitened_match(*args, whitened=True, **kwargs)
        inputs[0] = True
        try:
            return whitened_match(*args, **kwargs)
        finally:
            inputs[0] = False
    monkeypatch.setattr(align, "whiten", counting_whiten)
    monkeypatch.setattr(align, "whitened_match", counting_match)
    found = seedprint.search(paths["hidden"], bases, align=True)
    assert sum(suspect_calls) == 1 and len(suspect_calls) == 1 + len(bases)
    assert alive == [2] * len(bases)                  # the suspect's and this base's, never a base's after its verdict
    whitened_refs.clear(), alive.clear(), suspect_calls.clear()
    trio = [paths["hidden"], *bases[:2]]
    many = seedprint.compare_many(trio, align=True)
    assert len(suspect_calls) == 3 and alive == [3] * 3                 # each whitened once, all kept for the run
    monkeypatch.undo()
    assert found["answer"] == "derives from" and found["base"] == 0
    for (i, j), r in many["results"].items():
        assert matched_like(r, seedprint.compare(trio[i], trio[j], align=True))


# ----------------------------------------------------------------------------- two widths

def test_the_partial_match_recovers_a_subset_of_coordinates_whichever_model_is_wider():
    rng = np.random.default_rng(4)
    XA = rng.standard_normal((500, 40))
    keep = np.sort(rng.choice(40, 24, replace=False))
    flip = np.where(rng.random(24) < 0.5, -1.0, 1.0)
    perm = rng.permutation(24)
    XB = (XA[:, keep] * flip)[:, perm] + 0.2 * rng.standard_normal((500, 24))    # the narrow child, moved
    match, sign, fit = align.align_coordinates(XB, XA)                       # B (24) into A (40)
    assert np.array_equal(match, keep[perm]) and np.array_equal(sign, flip[perm]) and fit > 0.9
    back, back_sign, _ = align.align_coordinates(XA, XB)                      # A (40): B plays 24 of them
    kept = back >= 0
    assert np.array_equal(np.flatnonzero(kept), keep) and (back_sign[~kept] == 0).all()
    assert all(match[back[a]] == a for a in keep)                                 # the same pairs, either side


def test_a_child_pruned_in_width_is_related_by_the_matched_verdict_and_a_stranger_is_not(family):
    from studies.edits import prune_width, residual_importance
    root, paths = family
    base, stranger = (seedprint.hf.load(paths[n]).eval() for n in ("base", "stranger"))
    tokens = torch.randint(0, 400, (16, 16), generator=torch.Generator().manual_seed(0))
    child = prune_width(base, 0.25, residual_importance(base, tokens))
    assert child.config.n_embd == 48
    for a, b in ((base, child), (child, base)):                    # which is the wider one does not matter
        r = seedprint.compare(a, b, **FILE_OPTS)
        a = r.alignment
        assert r.related and a.p_exact is None and sorted(a.widths) == [48, 64], r.explain()
        assert "no exact test" in r.explain()
        assert align.two_widths(a.widths) and align.PARTIAL_TAU_FLOOR == 0.21
    assert not seedprint.compare(stranger, child, **FILE_OPTS).related


def test_mixed_widths_keep_the_exact_verdict_for_the_pairs_of_one_width(family):
    """Among models of two widths, a pair of one width gets the verdict asked for (exact unless --align on), a pair
    of two widths the matched one."""
    from studies.edits import prune_width, residual_importance
    root, paths = family
    base = seedprint.hf.load(paths["base"]).eval()
    tokens = torch.randint(0, 400, (16, 16), generator=torch.Generator().manual_seed(0))
    narrow = prune_width(base, 0.5, residual_importance(base, tokens))
    res = seedprint.compare_many([paths["base"], paths["child"], narrow], **FILE_OPTS)["results"]
    assert res[(0, 1)].alignment is None and res[(0, 1)].related                # one width: the exact verdict
    assert res[(0, 1)].p_raw == seedprint.compare(paths["base"], paths["child"], **FILE_OPTS).p
    assert res[(0, 2)].alignment.p_exact is None and res[(0, 2)].related and res[(1, 2)].alignment.p_exact is None
    assert [res[pr].alignment is not None and align.two_widths(res[pr].alignment.widths)
            for pr in ((0, 1), (0, 2), (1, 2))] == [False, True, True]


def test_the_command_line_saves_files_searches_a_folder_and_holds_the_files_to_their_options(family, tmp_path,
                                                                                              monkeypatch):
    from conftest import cli_error
    root, paths = family
    reg = tmp_path / "reg"
    for name in ("base", "stranger"):
        seedprint.main([paths[name], "--save", str(reg / f"{name}.npz"), "--sequences", "200", "--seq_len", "16",
                        "--k", "16"])
    reads, read = [], evidence.read
    monkeypatch.setattr(evidence, "read", lambda path: reads.append(path) or read(path))
    seedprint.main([paths["child"], "--against", str(reg), "--out", str(tmp_path / "out")])
    assert sorted(reads) == [str(reg / "base.npz"), str(reg / "stranger.npz")]      # each file read (hashed) once
    reads.clear()
    seedprint.main([str(reg / "base.npz"), str(reg / "stranger.npz"), "--out", str(tmp_path / "out_files")])
    assert reads == [str(reg / "base.npz"), str(reg / "stranger.npz")]
    monkeypatch.undo()
    found = json.loads((tmp_path / "out" / "results.json").read_text())["search"]
    assert found["answer"] == "derives from" and found["base"] == str(reg / "base.npz")
    assert found["options"]["sequences"] == 200                              # the files' options
    line = cli_error(seedprint.main, "seedprint.py", [paths["child"], "--against", str(reg), "--sequences", "2000",
                                                      "--out", str(tmp_path / "out2")])
    assert "other options than asked for (sequences 2000 vs the file's 200)" in line    # the default, given
    assert not (tmp_path / "out2").exists()


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
    """A checkpoint of the family's shape but a smaller vocabulary (300, the family's 400), from a seed of its own."""
    from model import write_checkpoint
    path = str(tmp_path_factory.mktemp("small_vocab") / "small_vocab.pt")
    write_checkpoint(path, build(get_config("tiny", **dict(LLAMA, vocab_size=300)), 4, 4))
    return path


def weights_read(monkeypatch) -> list:
    """Every way hf.py reads a weight, each replaced by a record of its call: the list of (function, model) filled."""
    read = []
    for name in ("load", "load_checkpoint_file", "stream", "token_rows", "check_weights_finite"):
        monkeypatch.setattr(seedprint.hf, name, lambda m, *a, name=name, **kw: read.append((name, m)))
    return read


def test_the_command_line_refuses_its_flags_and_files_before_reading_any_weight(family, files, small_vocab, tmp_path,
                                                                                 monkeypatch):
    """A typo is reported at once, not after every weight of every model was streamed (a full read of a large
    model): each refusal comes before the first weight is read."""
    from conftest import cli_error
    root, paths = family
    small = small_vocab
    reg = tmp_path / "reg"
    reg.mkdir()
    made = str(reg / "base.npz")                                            # vocab 400
    shutil.copy(files["base"], made)
    read = weights_read(monkeypatch)
    cases = [([paths["base"], paths["child"], "--seq_len", "999"], "--seq_len 999 exceeds the context"),
             ([paths["base"], "--save", str(tmp_path / "x.npz"), "--seq_len", "999"], "--seq_len 999 exceeds"),
             ([made, paths["child"], "--sequences", "30"], "other options than asked for (sequences 30 vs"),
             ([made, small], "beyond the vocabulary of"),
             ([paths["child"], "--against", str(reg), "--seq_len", "999"], "(seq_len 999 vs the file's 16)")]
    for argv, why in cases:
        line = cli_error(seedprint.main, "seedprint.py", argv + ([] if "--save" in argv else ["--out",
                                                                                             str(tmp_path / "out")]))
        assert why in line and read == [], (argv, line, read)
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.npz").exists()


def test_the_command_line_reads_each_config_once_and_checks_k_after_the_plan(family, tmp_path, monkeypatch):
    """main's checks read each model's config once (plan's, whose widths check --k too); --k is checked after the
    plan's refusals and before the first weight is read."""
    from conftest import cli_error
    root, paths = family

    class WeightRead(Exception):
        pass

    def weight_read(*a, **kw):
        raise WeightRead
    configs, hf_read = [], seedprint.hf.read
    monkeypatch.setattr(seedprint.hf, "read", lambda m: configs.append(m) or hf_read(m))
    monkeypatch.setattr(seedprint.hf, "load", weight_read)                          # main's first weight read
    with pytest.raises(WeightRead):
        seedprint.main([paths["base"], paths["child"], "--k", "16", "--seq_len", "16", "--out", str(tmp_path / "out")])
    assert sorted(configs) == sorted([paths["base"], paths["child"]])
    read = weights_read(monkeypatch)                                                # every way a weight is read
    out = ["--out", str(tmp_path / "out")]
    line = cli_error(seedprint.main, "seedprint.py", [paths["base"], paths["child"], "--k", "40", "--seq_len", "16",
                                                      *out])
    assert "--k 40 is more than the narrowest width 64 allows" in line and read == []   # tiny's width: 64
    line = cli_error(seedprint.main, "seedprint.py", [paths["base"], paths["child"], "--k", "40", "--seq_len", "999",
                                                      *out])
    assert "--seq_len 999 exceeds the context" in line and read == []                  # the plan's refusal first


def test_a_file_whose_token_ids_pass_a_models_vocabulary_is_refused_with_advice_that_works(family, small_vocab,
                                                                                          tmp_path):
    """A file's token ids are fixed when it is made: no flag can lower them, so the advice is to make the files again
    at a vocabulary every model has, and that advice, followed, gives a verdict."""
    from conftest import cli_error
    root, paths = family
    big = str(tmp_path / "base.npz")
    flags = ["--sequences", "200", "--seq_len", "16", "--k", "16"]
    seedprint.main([paths["base"], "--save", big, *flags])                         # vocab 400, the base's own
    line = cli_error(seedprint.main, "seedprint.py", [big, small_vocab, "--out", str(tmp_path / "out")])
    assert "base.npz draw token ids below 400, beyond the vocabulary of" in line, line
    assert "make every file again with --vocab 300" in line, line
    line = cli_error(seedprint.main, "seedprint.py", [paths["base"], paths["child"], small_vocab, "--vocab", "450",
                                                      "--seq_len", "16", "--out", str(tmp_path / "out")])
    assert "beyond the vocabulary of" in line and "give --vocab 300" in line, line   # no file: the flag, below all
    small = str(tmp_path / "base300.npz")
    seedprint.main([paths["base"], "--save", small, "--vocab", "300", *flags])    # the advice, followed
    seedprint.main([small, small_vocab, "--out", str(tmp_path / "out")])
    done = json.loads((tmp_path / "out" / "results.json").read_text())["compare"]
    assert done["options"]["vocab"] == 300 and done["related"] is False


# ----------------------------------------------------------------------------- each model read once

SMALL = ["--sequences", "20", "--seq_len", "4", "--k", "8"]


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """Two tiny 2-layer LLaMA directories of two seeds (conftest.llama_family), each in two shards with an index."""
    from conftest import llama_family, write_hf
    root = tmp_path_factory.mktemp("hf_pair")
    for seed, name in enumerate("AB"):
        _, config, tensors = llama_family("LlamaForCausalLM", seed=seed)
        write_hf(root / name, config, tensors)
    return str(root / "A"), str(root / "B")


def opened_in(folders, run, monkeypatch) -> dict:
    """{folder: {file: how often it was opened}} while run() runs, counted by wrapping builtins.open (hf.py reads
    config.json, the index and each shard with it)."""
    opened, real_open = [], builtins.open
    monkeypatch.setattr(builtins, "open", lambda file, *a, **kw: opened.append(file) or real_open(file, *a, **kw))
    try:
        run()
    finally:
        monkeypatch.setattr(builtins, "open", real_open)
    paths = [os.path.abspath(os.fspath(f)) for f in opened if not isinstance(f, int)]
    return {folder: dict(collections.Counter(os.path.basename(p) for p in paths if os.path.dirname(p) == folder))
            for folder in folders}


def probe_model(a, b, out) -> list:
    import probe
    probe.main(["--model", a, "--sequences", "8", "--seq_len", "8", "--out", out])
    return [a]


def sink_model(a, b, out) -> list:
    import sink
    sink.main([a, "--sequences", "4", "--lengths", "8", "--out", out])
    return [a]


@pytest.mark.parametrize("run", [           # each runs a script on the models and returns those it was given
    pytest.param(lambda a, b, out: seedprint.main([a, b, *SMALL, "--out", out]) or [a, b], id="seedprint A B"),
    pytest.param(lambda a, b, out: seedprint.main([a, b, *SMALL, "--align", "on", "--out", out]) or [a, b],
                 id="seedprint A B --align on"),
    pytest.param(lambda a, b, out: seedprint.main([a, *SMALL, "--save", os.path.join(out, "a.npz")]) or [a],
                 id="seedprint A --save"),
    pytest.param(probe_model, id="probe --model A"),
    pytest.param(sink_model, id="sink A")])
def test_a_script_reads_each_model_once_config_and_every_shard(hf_pair, tmp_path, monkeypatch, run):
    """A script's checks and its work read a Hugging Face directory once: config.json, the shard index and each
    weight file opened once (hf.read, then hf.load on the same open shards), whatever it makes of the model."""
    out = str(tmp_path / "out")
    os.makedirs(out)
    models = []
    counts = opened_in(hf_pair, lambda: models.extend(run(*hf_pair, out)), monkeypatch)
    assert models and os.listdir(out)                                                   # it did its work
    assert counts == {m: {f: 1 for f in os.listdir(m)} if m in models else {} for m in hf_pair}


# ----------------------------------------------------------------------------- files made by the other side

def constant_columns(name: str, columns: int):
    """forge_fingerprint's edit: the first `columns` dimensions of set `name` made constant across the inputs."""
    return lambda a: a[name].__setitem__((slice(None), slice(0, columns)), a[name][0, :columns])


def test_a_file_whose_fingerprints_cannot_rank_is_refused_as_a_model_with_such_states_is(files, tmp_path):
    """A fingerprint set constant across the inputs ranks nothing: a file holding one (its sha256 computed again, so
    that only this check can refuse it) is refused, naming the file and the set, for the reason fingerprint() refuses
    a model whose states are such, word for word; a set with half its dimensions constant is read."""
    from conftest import forge_fingerprint
    d, n = 64, FILE_OPTS["sequences"]
    reason = re.compile(rf"\d+ of {d} fingerprint dimensions are constant across the {n} inputs: nothing to rank.*")
    flat = forge_fingerprint(files["base"], tmp_path / "flat.npz", constant_columns("held_out", d))
    with pytest.raises(ValueError) as refused:
        evidence.read(flat)
    assert str(refused.value).startswith(f"{flat} (held_out inputs): ") and reason.search(str(refused.value))
    with pytest.raises(ValueError) as model:
        seedprint.fingerprint(lambda ids: torch.ones(len(ids), d), sequences=n, seq_len=4, vocab=400, name="mymodel")
    assert str(model.value).startswith(f"mymodel: {d} of {d}")
    assert reason.search(str(model.value)).group().split(" of ", 1)[1] == \
        reason.search(str(refused.value)).group().split(" of ", 1)[1]            # the same reason
    half = forge_fingerprint(files["base"], tmp_path / "half.npz", constant_columns("held_out", d // 2))
    assert (np.ptp(evidence.read(half).sets["held_out"], axis=0) == 0).sum() == d // 2


def test_a_set_with_more_than_half_its_dimensions_exactly_constant_is_refused_and_counted_exactly(files, tmp_path):
    """The rule is "more than half constant": d // 2 + 1 exactly constant dimensions (counted by max - min) are
    refused, and the refusal counts them exactly, as it counts a set that is constant in every dimension."""
    from conftest import forge_fingerprint
    d = 64
    more = forge_fingerprint(files["base"], tmp_path / "more.npz", constant_columns("held_out", d // 2 + 1))
    with pytest.raises(ValueError, match=f"{d // 2 + 1} of {d} fingerprint dimensions are constant"):
        evidence.read(more)
    flat = forge_fingerprint(files["base"], tmp_path / "flat.npz", constant_columns("exact", d))
    with pytest.raises(ValueError, match=f"{d} of {d} fingerprint dimensions are constant"):
        evidence.read(flat)


def test_a_file_of_a_format_version_this_code_never_wrote_is_refused(files, tmp_path):
    """The version must be an integer from 1 to FILE_VERSION: 0, none, and values that equal 1 only loosely (true,
    1.0, "1") are refused in one line naming the file and what to do; the same file as version 1 is read."""
    from conftest import forge_fingerprint
    for n, (version, shown) in enumerate(((0, "0"), (True, "True"), (1.0, "1.0"), ("1", "'1'"), (None, "None"))):
        file = forge_fingerprint(files["base"], tmp_path / f"v{n}.npz", edit_meta=lambda m: m.update(version=version))
        with pytest.raises(ValueError) as refused:
            evidence.read(file)
        assert str(refused.value) == (f"{file} is a fingerprint file of format version {shown}; this code reads "
                                      f"versions 1 to {evidence.FILE_VERSION}: make it again with python "
                                      f"seedprint.py MODEL --save FILE"), version
    one = forge_fingerprint(files["base"], tmp_path / "v1.npz", edit_meta=lambda m: m.update(version=1))
    assert evidence.read(one).options == evidence.read(files["base"]).options


def test_a_registry_file_named_with_a_terminal_escape_code_is_refused_in_one_line_the_code_shown(family, files,
                                                                                                tmp_path, monkeypatch):
    """A damaged file in a registry whose name carries a terminal escape code: seedprint.py --against refuses it in
    one line on stderr, naming it with the code escaped (common.one_line), never sent raw; no weight read."""
    from conftest import cli_error
    root, paths = family
    reg = tmp_path / "reg"
    reg.mkdir()
    shutil.copy(files["base"], reg / "base.npz")
    (reg / "\x1b[31mred.npz").write_bytes(open(files["stranger"], "rb").read()[:1000])      # cut: damaged
    read = weights_read(monkeypatch)
    line = cli_error(seedprint.main, "seedprint.py", [paths["child"], "--against", str(reg), "--out",
                                                      str(tmp_path / "out")])
    assert "\x1b" not in line and f"{reg}/\\x1b[31mred.npz is not a readable fingerprint file" in line, line
    assert read == [] and not (tmp_path / "out").exists()


def test_a_file_whose_members_would_decompress_past_what_its_record_allows_is_refused_before_decompression(
        files, tmp_path, monkeypatch):
    """A forged .npz whose members are deflate-compressed, its exact array announcing 512 MiB in the zip's directory
    (its record, the good file's as it was, allows 200 x 64 float32, 50 kB): refused on the directory, the member
    never opened, the reading's memory (tracemalloc: Python's and numpy's allocations) a few MiB at most. (Read
    whole, it would be refused by its sha256 too, after the 512 MiB: too late.)"""
    import tracemalloc
    import zipfile
    rows, zeros = 2 ** 21, bytes(2 ** 24)                       # x 64 float32: 512 MiB of zeros, in 16 MiB writes
    bomb = str(tmp_path / "bomb.npz")
    with zipfile.ZipFile(files["base"]) as good, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name in good.namelist():
            if name != "exact.npy":
                z.writestr(name, good.read(name))
        with z.open("exact.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, dict(descr="<f4", fortran_order=False, shape=(rows, 64)))
            for _ in range(rows * 64 * 4 // len(zeros)):
                member.write(zeros)
    with zipfile.ZipFile(bomb) as z:
        assert z.getinfo("exact.npy").file_size > 2 ** 29 > 100 * os.path.getsize(bomb)
    opened, zip_open = [], zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **kw: opened.append(name) or
                        zip_open(self, name, *a, **kw))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="holds other members, or larger ones, than its record announces"):
            evidence.read(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert opened == ["meta.npy"] and peak < 2 ** 23, (opened, peak)


def test_save_onto_an_existing_file_is_refused_before_any_weight_is_read_and_leaves_it_as_it_was(family, files,
                                                                                                 tmp_path,
                                                                                                 monkeypatch):
    """--save onto a file that exists (another model's fingerprint file here) is refused in one line, before any
    weight is read, and the file keeps every byte; evidence.write refuses it too."""
    from conftest import cli_error
    root, paths = family
    theirs = tmp_path / "base.npz"
    shutil.copy(files["stranger"], theirs)
    before = theirs.read_bytes()
    read = weights_read(monkeypatch)
    line = cli_error(seedprint.main, "seedprint.py", [paths["base"], "--save", str(theirs), *SMALL])
    assert f"{theirs} exists: a fingerprint file is never replaced" in line and read == [], line
    assert theirs.read_bytes() == before and os.listdir(tmp_path) == ["base.npz"]
    monkeypatch.undo()
    with pytest.raises(FileExistsError, match="a fingerprint file is never replaced"):
        evidence.write(str(theirs), evidence.read(files["base"]))
    assert theirs.read_bytes() == before and os.listdir(tmp_path) == ["base.npz"]


def test_a_file_records_no_path_of_its_makers_machine(hf_pair, tmp_path, monkeypatch):
    """Made by the command line (sys.argv as a shell gives it) in a folder of the maker's, a file's record names the
    model by its base name and its weight files by their names in it, each with the size and sha256 that hashlib
    computes, and holds neither the model's path, nor its folder, nor the working directory anywhere."""
    import hashlib
    import sys
    model = hf_pair[0]
    work = tmp_path / "maker"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [model, "--save", str(work / "a.npz"), *SMALL]
    monkeypatch.setattr(sys, "argv", ["seedprint.py", *argv])
    seedprint.main(argv)
    with np.load(work / "a.npz") as z:
        meta = str(z["meta"])                                   # the whole record, as stored
    for path in (model, os.path.dirname(model), os.getcwd(), str(tmp_path)):
        assert path not in meta, path
    digest = lambda f: hashlib.sha256(open(os.path.join(model, f), "rb").read()).hexdigest()
    shards = [f for f in os.listdir(model) if f.endswith(".safetensors")]
    assert json.loads(meta)["weights"] == dict(name="A", files={f: dict(bytes=os.path.getsize(os.path.join(model, f)),
                                                                        sha256=digest(f)) for f in shards})


def test_a_file_of_the_weights_it_is_compared_with_says_so_and_one_forged_on_them_is_a_contradiction(
        family, files, tmp_path, capsys):
    """A file made of model A, compared with A itself: related, and the verdict line says both record the same
    weights. A forged file that keeps A's weights record but holds another model's fingerprints: unrelated, and the
    verdict line says the records contradict the verdict. Other weights: nothing said."""
    from conftest import forge_fingerprint
    root, paths = family
    same = seedprint.compare(files["base"], paths["base"])
    assert same.related and "By construction, both record the same weights (each file's sha256)" in same.explain()
    assert "yet" not in same.explain()
    record = lambda name: evidence.record_of(evidence.read(files[name]))
    assert evidence.shared_by_construction(record("base"), record("child"), related=True) == ""   # other weights
    with np.load(files["stranger"]) as z:
        theirs = {k: z[k].copy() for k in z.files if k != "meta"}
    forged = forge_fingerprint(files["base"], tmp_path / "forged.npz", lambda a: a.update(theirs))
    assert evidence.read(forged).weights == evidence.read(files["base"]).weights
    capsys.readouterr()
    seedprint.main([forged, paths["base"], "--out", str(tmp_path / "out")])
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("unrelated: ") and ("both record the same weights (each file's sha256), yet they test "
                                               "unrelated: a fingerprint file's arrays did not come from the weights "
                                               "it records") in line, line


def test_every_docs_title_the_code_points_to_is_in_the_docs():
    """The pointers of seedprint.py, align.py and evidence.py (docs/seedprint.md, "a title") name headings or
    paragraph titles that exist."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    docs = " ".join(open(os.path.join(root, "docs", "seedprint.md")).read().split())
    code = " ".join(re.sub(r"\n\s*#\s*", " ", open(m.__file__).read())         # comments joined across lines
                    for m in (seedprint, align, evidence))
    titles = [t for pointer in re.findall(r"\(docs/seedprint\.md, ([^)]*)\)", " ".join(code.split()))
              for t in re.findall(r'"([^"]+)"', pointer)]
    assert [t for t in titles if t not in docs] == [] and "The aligned verdict" in titles     # found, and found there
