"""The lineage studies: the weight edits against their definitions, the baselines against direct computations,
the rates against closed forms, and each study end to end at a tiny size, through the command a user types,
checking the direction of its claim (a descendant is related, another seed is not)."""
import json
import math
import os

import numpy as np
import pytest
import torch
from scipy import stats

import align
import data
import evidence
import seedprint
from init import build
from model import LLAMA_KNOBS, get_config
from studies import aligned_floor, fingerprint_speed, fresh_inits, lineage_fpr, seedprint_tables
from studies.edits import (add_noise, extend_vocab, low_rank_update, merge, permute_mlp, permute_residual, prune,
                           quantize, rotate_residual)
from studies.seedprint_tables import biased_dims, dimension_correlations, ics, intrinsic, pcs, reef
from studies.fresh_inits import permutation_p_monte_carlo
from studies.lineage import clopper_pearson, null_taus, weights_identity


def test_clopper_pearson_against_its_closed_forms():
    lo, hi = clopper_pearson(0, 200)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 200), rel=1e-9)
    lo, hi = clopper_pearson(200, 200)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 200), rel=1e-9)
    lo, hi = clopper_pearson(5, 400)            # the rates at which 5 of 400 is a 2.5% tail event
    assert stats.binom.sf(4, 400, lo) == pytest.approx(0.025, abs=1e-9)
    assert stats.binom.cdf(5, 400, hi) == pytest.approx(0.025, abs=1e-9)


def shown_rate(x: int, n: int) -> list:
    """x of n and its 95% Clopper-Pearson interval as the tables show them (lineage.rate), where x is 0 or n: from
    the interval's closed forms."""
    assert x in (0, n)
    lo, hi = (0.0, 1 - 0.025 ** (1 / n)) if x == 0 else (0.025 ** (1 / n), 1.0)
    return [f"{100 * x / n:.2f}%", f"[{100 * lo:.2f}, {100 * hi:.2f}]%"]


def test_fig11_statistic_is_the_per_dimension_correlation_across_inputs():
    rng = np.random.default_rng(6)
    H0, H = rng.standard_normal((50, 8)), rng.standard_normal((50, 8))
    H0[:, 3] += 5                                                         # the most biased dimension
    dims = biased_dims(H0, 3)
    assert dims[0] == 3
    got = dimension_correlations(H0, H, dims)
    assert np.allclose(got, [np.corrcoef(H0[:, j], H[:, j])[0, 1] for j in dims])


def test_baselines_against_direct_computations():
    """Each baseline written out again here, in float64 numpy, from its definition."""
    cfg = get_config("tiny", n_layer=3, norm="rmsnorm", activation="swiglu", bias=False, tie_embeddings=False)
    a, b = build(cfg, 0).eval(), build(cfg, 1).eval()
    with torch.no_grad():                       # make the models differ in more than their draw
        for p in b.parameters():
            p.mul_(1.5) if p.dim() == 2 else p.add_(0.1)
    W = lambda m, name: dict(m.named_parameters())[name].detach().double().numpy()
    d = cfg.n_embd
    # PCS: cosine of the flattened block parameters
    flat = lambda m: np.concatenate([p.detach().double().numpy().ravel() for n, p in m.named_parameters()
                                     if n.startswith("transformer.h.")])
    fa, fb = flat(a), flat(b)
    assert pcs(a, b) == pytest.approx(fa @ fb / np.linalg.norm(fa) / np.linalg.norm(fb), rel=1e-5)
    # ICS: the invariant terms of the last two layers on the token embeddings, z-scored, cosine
    def terms(m):
        X = W(m, "transformer.wte.weight")
        z = lambda M: (M - M.mean()) / M.std(ddof=1)
        out = []
        for i in (1, 2):
            qkv, o = W(m, f"transformer.h.{i}.attn.c_attn.weight"), W(m, f"transformer.h.{i}.attn.c_proj.weight")
            Wq, Wk, Wv = qkv[:d], qkv[d:2 * d], qkv[2 * d:]              # n_kv_head = n_head: three equal blocks
            up = W(m, f"transformer.h.{i}.mlp.c_fc.weight") * W(m, f"transformer.h.{i}.mlp.c_gate.weight")
            down = W(m, f"transformer.h.{i}.mlp.c_proj.weight")
            out += [z(X @ Wq.T @ Wk @ X.T), z(X @ Wv.T @ o.T @ X.T), z(X @ up.T @ down.T @ X.T)]
        return np.concatenate([x.ravel() for x in out])
    ta, tb = terms(a), terms(b)
    assert ics(a, b) == pytest.approx(ta @ tb / np.linalg.norm(ta) / np.linalg.norm(tb), rel=1e-4)
    # Intrinsic: per-layer std of q, k, v, o, z-scored across layers, Pearson per type, mean
    def profile(m):
        rows = []
        for i in range(3):
            qkv = W(m, f"transformer.h.{i}.attn.c_attn.weight")
            rows.append([qkv[:d].std(ddof=1), qkv[d:2 * d].std(ddof=1), qkv[2 * d:].std(ddof=1),
                         W(m, f"transformer.h.{i}.attn.c_proj.weight").std(ddof=1)])
        rows = np.array(rows)
        return (rows - rows.mean(0)) / rows.std(0, ddof=1)
    pa, pb = profile(a), profile(b)
    expected = np.mean([np.corrcoef(pa[:, j], pb[:, j])[0, 1] for j in range(4)])
    assert intrinsic(a, b) == pytest.approx(expected, abs=1e-5)
    # REEF: linear CKA through the centering matrix, tr(K H L H) / sqrt(tr(K H K H) tr(L H L H))
    x = torch.randint(0, cfg.vocab_size, (200, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        X, Y = (m.trace(x, hidden="last")["hidden"][-1].double().numpy() for m in (a, b))
    C = np.eye(200) - 1 / 200
    K, L = X @ X.T, Y @ Y.T
    cka = np.trace(K @ C @ L @ C) / np.sqrt(np.trace(K @ C @ K @ C) * np.trace(L @ C @ L @ C))
    assert reef(a, b) == pytest.approx(cka, rel=1e-5)


def _logits(m, x):
    with torch.no_grad():
        return m(x)[0].double()


@pytest.mark.parametrize("knobs", [dict(tie_embeddings=True), dict(tie_embeddings=False, attn_gate=True, mlp_bias=True),
                                   dict(bias=True, position="learned"),          # writers' biases flip, positions too
                                   dict(norm="none", bias=True, tie_embeddings=False)])
def test_reparametrizations_keep_the_logits_and_move_the_coordinates(knobs):
    cfg = get_config("tiny", n_layer=2, vocab_size=100, **{**dict(norm="rmsnorm", activation="swiglu", bias=False),
                                                           **knobs})
    m = build(cfg, 0).eval()
    with torch.no_grad():                      # gains away from 1, so that folding them is exercised
        for n, p in m.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0, 0.3)
    x = torch.randint(0, 100, (3, 12), generator=torch.Generator().manual_seed(0))
    ref = _logits(m, x)
    states = lambda mm: mm.trace(x, hidden="last")["hidden"][-1].double()
    signed = lambda mm, seed: permute_residual(mm, seed, flip=0.5)
    negated = lambda mm, seed: permute_residual(mm, seed, flip=1.0)
    rotatable = cfg.norm == "rmsnorm" and not cfg.bias and cfg.position != "learned"
    for f in (permute_residual, signed, negated, permute_mlp) + (
            (rotate_residual,) if rotatable else ()):
        d = f(m, seed=3)
        assert (_logits(d, x) - ref).abs().max() <= 1e-5 * ref.abs().max(), f
        if f is not permute_mlp:     # the residual coordinates did move
            assert not torch.allclose(states(d), states(m), atol=1e-3), f
    old = states(m)
    for flip, negatives in ((0.0, [0]), (0.5, range(16, 49)), (1.0, [64])):
        new = states(permute_residual(m, seed=3, flip=flip))
        match = {(l, s) for j in range(64) for l in range(64) for s in (1, -1)
                 if torch.allclose(s * new[:, l], old[:, j], atol=1e-5)}
        assert sorted(l for l, _ in match) == list(range(64))      # a signed permutation of the states, exactly
        assert sum(s < 0 for _, s in match) in negatives
    with pytest.raises(ValueError, match="RMSNorm"):
        rotate_residual(build(get_config("tiny", n_layer=1), 0))
    with pytest.raises(ValueError, match="LayerNorm"):
        permute_residual(build(get_config("tiny", n_layer=1), 0), flip=0.5)
    with pytest.raises(ValueError, match="flip"):
        permute_residual(m, flip=1.5)


def test_quantize_prune_merge_low_rank_noise_and_vocab_against_their_definitions():
    cfg = get_config("tiny", n_layer=1, vocab_size=64, norm="rmsnorm", activation="swiglu", bias=False,
                     tie_embeddings=False)
    a, b = build(cfg, 0).eval(), build(cfg, 1).eval()
    W = lambda m: m.transformer.h[0].mlp.c_fc.weight.detach().double()
    w = W(a)
    q8 = W(quantize(a, 8))
    scale = w.abs().amax(1, keepdim=True) / 127               # one scale per row
    assert torch.allclose(q8, (w / scale).round() * scale, atol=1e-7)
    q4 = W(quantize(a, 4, 32))
    g = w.view(w.shape[0], -1, 32)
    s4 = g.abs().amax(-1, keepdim=True) / 7
    assert torch.allclose(q4, ((g / s4).round() * s4).view_as(w), atol=1e-7) and len(torch.unique(q4[0, :32])) <= 15
    pr = W(prune(a, 0.3))
    zero = pr == 0
    assert zero.sum() == int(0.3 * w.numel()) and w.abs()[zero].max() <= w.abs()[~zero].min()
    assert torch.equal(prune(a, 0.3).transformer.wte.weight, a.transformer.wte.weight)  # blocks only
    assert torch.allclose(W(merge(a, b, 0.25)), 0.75 * w + 0.25 * W(b), atol=1e-7)
    delta = W(low_rank_update(a, 3, 0.1)) - w
    assert torch.linalg.matrix_rank(delta, rtol=1e-4) == 3 and delta.norm() / w.norm() == pytest.approx(0.1, rel=1e-4)
    noise = W(add_noise(a, 0.05)) - w
    assert noise.std() / w.std() == pytest.approx(0.05, rel=0.05)
    v = extend_vocab(a, 10)
    assert v.config.vocab_size == 74 and torch.equal(v.transformer.wte.weight[:64], a.transformer.wte.weight)
    x = torch.randint(0, 64, (2, 9))
    assert torch.allclose(_logits(v, x)[..., :64], _logits(a, x), atol=1e-6)


# The tiny models every lineage study below trains: their architecture and training flags, shared so that the
# tables study can reuse the calibration study's models, as a user's second command does.
TINY = ["--tokenizer", "bytes", "--n_embd", "32", "--n_layer", "1", "--block_size", "16", "--seq_len", "16",
        "--max_steps", "4", "--ckpt_every", "2", "--batch_size", "4", "--sequences", "40", "--k", "8",
        "--device", "cpu"]                      # exact ties: float32, not a GPU's bf16


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Two small text files of their own (a corpus given as a path is prepared under --out, nowhere else)."""
    root = tmp_path_factory.mktemp("corpora")
    for name, step in (("a.txt", 7919), ("b.txt", 104729)):
        (root / name).write_text("".join(chr(32 + (i * step) % 90) for i in range(20000)))
    return root


@pytest.fixture(scope="module")
def fpr_study(corpora, tmp_path_factory):
    """studies.lineage_fpr run once: (its --out, its design)."""
    out = tmp_path_factory.mktemp("lineage") / "out"
    design = dict(inits=3, trained=2, steps=4, every=2)
    lineage_fpr.main([*TINY, "--corpus", str(corpora / "a.txt"), "--corpus2", str(corpora / "b.txt"),
                      "--fpr_inits", "3", "--fpr_trained", "2", "--fpr_descendants", "1", "--out", str(out)])
    return out, design


def test_the_calibration_study_end_to_end(fpr_study, corpora):
    """studies.lineage_fpr on tiny models: every kind of pair is there as many times as the design says, the table
    counts what the pairs say, a permuted descendant gets the aligned verdict of its unpermuted self (the
    alignment undoes the permutation), and corpora given as paths are prepared under --out, nowhere else."""
    out, design = fpr_study
    inits, trained, steps, every = design["inits"], design["trained"], design["steps"], design["every"]
    assert sorted(os.listdir(corpora)) == ["a.txt", "b.txt"]
    res = json.loads((out / "results.json").read_text())["fpr"]
    kinds = [r["kind"] for r in res["pairs"]]
    expected = {"init vs init": inits * (inits - 1) // 2, "trained vs trained": trained * (trained - 1) // 2,
                "trained vs another init": trained * (inits - 1), "init vs its checkpoint": trained * (steps // every),
                "base vs continual descendant": 1, "init vs continual descendant": 1}
    expected.update({f"{k}, B permuted": v for k, v in list(expected.items())[3:]})
    assert {k: kinds.count(k) for k in expected} == expected and len(kinds) == sum(expected.values())
    for r in res["pairs"]:
        assert r["related"] == (r["kind"] not in list(expected)[:3])
    related = [r for r in res["pairs"] if r["related"] and not r["permuted"]]
    permuted = [r for r in res["pairs"] if r["permuted"]]
    for r, q in zip(related, permuted):                 # the permuted copies follow the related pairs in order
        assert q["kind"] == r["kind"] + ", B permuted" and q["moved"] > 0
        assert q["tau_aligned"] == pytest.approx(r["tau_aligned"], abs=1e-9)
        assert q["p_matched"] == pytest.approx(r["p_matched"], rel=1e-6)
    unrelated = [r for r in res["pairs"] if not r["related"]]
    for row in res["table"]:
        tested = [r for r in unrelated if r[row["test"]] is not None]       # the reference tests need |S| >= 2
        x = sum(r[row["test"]] < seedprint.ALPHA for r in tested)
        assert row["FPR"] == (f"{100 * x / len(tested):.2f}%" if tested else "no pair")
    assert (out / "fpr_qq.png").is_file()


def test_the_calibration_on_fresh_inits_end_to_end(tmp_path, monkeypatch):
    """studies.fresh_inits: every pair of the inits once, the table counts what the pairs say, the z summary is the
    pairs' z, and each false positive (alpha raised so that there are some) gets a Monte Carlo p_perm near its
    closed-form one."""
    monkeypatch.setattr(seedprint, "ALPHA", 0.3)
    out = tmp_path / "out"
    fresh_inits.main(["--n_embd", "32", "--n_layer", "1", "--vocab_size", "128", "--block_size", "16",
                    "--seq_len", "16", "--fpr_inits", "5", "--sequences", "60", "--k", "12", "--device", "cpu",
                    "--align", "on", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["inits"]
    assert sorted((r["a"], r["b"]) for r in res["pairs"]) == [(a, b) for a in range(100, 105)
                                                              for b in range(a + 1, 105)]
    for row in res["table"]:
        x = sum(r[row["test"]] < 0.3 for r in res["pairs"])
        assert row["FPR"] == f"{100 * x / len(res['pairs']):.2f}%"
    z = np.array([r["z_perm"] for r in res["pairs"]])
    assert res["z_mean"] == pytest.approx(z.mean()) and res["z_sd"] == pytest.approx(z.std())
    false = [r for r in res["pairs"] if r["p"] < 0.3]
    assert false and all(abs(r["p_perm_monte_carlo"] - r["p_perm"]) < 0.1 for r in false)
    assert sum(res["made_by"].values()) == len(false)
    cfg = get_config("tiny", **{**LLAMA_KNOBS, "n_embd": 32, "n_layer": 1, "vocab_size": 128, "block_size": 16})
    svd_white = lambda X: np.linalg.svd(X - X.mean(0), full_matrices=False)[0] @ np.linalg.svd(
        X - X.mean(0), full_matrices=False)[2]                         # ZCA up to scale: U V^T
    tables = {s: svd_white(build(cfg, s, s).transformer.wte.weight[64:].detach().double().numpy())
              for s in range(100, 105)}
    for r in res["pairs"]:             # each pair's table match: the whitened rows' correlations, column by column
        match = align.whitened_match(tables[r["a"]], tables[r["b"]])[0]
        naive = [abs(np.corrcoef(tables[r["a"]][:, j], tables[r["b"]][:, match[j]])[0, 1]) for j in range(32)]
        assert r["table_fit"] == pytest.approx(np.mean(naive), rel=1e-5)
        assert r["table_fit"] < align.TABLE_MATCH_R


def test_speed_times_one_fingerprint_of_a_fresh_preset(tmp_path):
    """studies.fingerprint_speed: the row's flops are model.forward_flops without the LM head for N sequences (that
    count is tested against torch's flop counter), its rates are those flops and tokens over the timed seconds, the
    model is the named preset with the flags' knobs (width, parameters), and the dtype is recorded."""
    from model import forward_flops, get_config
    fingerprint_speed.main(["--model", "tiny", "--n_layer", "2", "--sequences", "24", "--seq_len", "32",
                            "--batch_size", "8", "--seed", "5", "--device", "cpu", "--out", str(tmp_path)])
    row = json.loads((tmp_path / "results.json").read_text())["speed"]
    model = build(get_config("tiny", n_layer=2), 5)
    assert row["params"] == model.num_params() and row["width"] == 64 and row["mfu"] is None
    assert row["dtype"] == "float32" and row["autocast"] is None
    assert row["pflop"] * 1e15 == pytest.approx(24 * forward_flops(model, 32, logits_positions=0))
    assert row["tflops"] == pytest.approx(row["pflop"] * 1e3 / row["seconds"])
    assert row["tokens_per_s"] == pytest.approx(24 * 32 / row["seconds"])


def test_aligned_summary_counts_each_rule_on_the_test_seeds_and_fits_the_rule_before_on_the_fit_seeds():
    """The rule before's floor is twice the largest raw matched tau of the fit seeds' unrelated pairs, rounded up to
    0.01 (the test seeds' values never enter it); each verdict's counts are those of its rule, recounted here: the
    aligned verdict's as the code called it, the same without tables from the whitened inputs' match where trusted,
    the rule before from the tables' match where trusted, else the raw one above its floor."""
    inputs = dict(condition="c", matched_on="held-out inputs", table_fit=0.02, table_fit_test_rows=0.03)
    table = dict(condition="c", matched_on="token table", table_fit=0.99, table_fit_test_rows=0.8)
    row = lambda split, kind, related, p_exact, p_al, tau_raw, p_raw, aligned, white, p_in, **kw: dict(
        split=split, kind=kind, related=related, p_exact=p_exact, p_aligned_test=p_al, tau_aligned=tau_raw,
        tau_raw_inputs=tau_raw, p_raw_inputs=p_raw, aligned_related=aligned, input_trusted=white, p_inputs=p_in,
        input_fit=0.9 if white else 0.2, **kw)
    rows = [row("fit", "k1", False, 0.5, 1e-9, 0.031, 1e-9, False, False, 0.3, **inputs),
            row("fit", "k1", False, 0.5, 0.2, -0.01, 0.2, False, False, 0.3, **inputs),
            row("test", "k1", False, 0.004, 0.9, 0.5, 0.9, True, False, 0.9, **inputs),      # the exact test's
            row("test", "k1", False, 0.5, 1e-12, 0.06, 1e-12, False, False, 1e-12, **inputs),   # below the floor
            row("test", "k1", False, 0.5, 1e-12, 0.07, 1e-12, False, False, 1e-12, **inputs),   # at it: before
            row("test", "k2", True, 0.5, 1e-30, 0.3, 1e-30, True, True, 1e-30, tau_exact=0.0, finetune_steps=10,
                **inputs),
            row("test", "k3", True, 0.5, 1e-15, 0.04, 0.3, True, False, 0.3, **table)]
    res = aligned_floor.aligned_summary(rows)
    assert res["floor_before"] == 0.07                                      # ceil(2 x 0.031, 0.01)
    counts = {r["verdict"].split(":")[0].split(" (")[0]: (r["k1"], r["k2"], r["k3"]) for r in res["table"]}
    assert counts["token-table match trusted"] == ("0/3", "0/1", "1/1")
    assert counts["held-out inputs' match trusted"] == ("0/3", "1/1", "0/1")
    assert counts["exact"] == ("1/3", "0/1", "0/1") and counts["matched test alone, any match"] == ("2/3", "1/1", "1/1")
    assert counts["the rule before"] == ("2/3", "1/1", "1/1")     # the exact one at 2 x 0.004, and tau 0.07 >= 0.07
    assert counts["**aligned verdict**"] == ("1/3", "1/1", "1/1")
    assert counts["the same without tables"] == ("1/3", "1/1", "0/1")   # the table-matched pair is lost without them
    assert res["fits"] == [dict(condition="c", pairs="unrelated (5)", table_rows="0.020 to 0.020",
                                table_test_rows="0.030 to 0.030", held_out_inputs="0.200 to 0.200"),
                           dict(condition="c", pairs="related (2)", table_rows="0.020 to 0.990",
                                table_test_rows="0.030 to 0.800", held_out_inputs="0.200 to 0.900")]


def test_the_paper_tables_reuse_the_calibration_models_and_call_each_pair_as_the_paper_does(fpr_study, corpora):
    """studies.seedprint_tables on the calibration study's --out, with its flags and two of its seeds: the models
    already trained are reused (not one more step of them), and each table comes out as the paper's does: inits
    of two seeds unrelated, an init and its own trained model related, two trained seeds unrelated, a base and its
    continuation related and the distractor unrelated; Fig 11's own-checkpoint correlation above the other seed's;
    the baselines computed on Tables 4b, 4c and 5's pairs."""
    out, _ = fpr_study
    run = out / "runs" / "seed100"
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    seedprint_tables.main([*TINY, "--corpus", str(corpora / "a.txt"), "--corpus2", str(corpora / "b.txt"),
                           "--seeds", "100", "101", "--top", "4", "--out", str(out)])
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before
    res = json.loads((out / "results.json").read_text())
    assert "fpr" in res                                         # the calibration study's entry is kept beside
    verdicts = {t: [r["verdict"] for r in res[t]] for t in ("table4a", "table4b", "table4c", "table5")}
    assert verdicts == {"table4a": ["unrelated"], "table4b": ["RELATED", "RELATED"], "table4c": ["unrelated"],
                        "table5": ["RELATED", "unrelated"]}
    last = res["fig11"]["rows"][-1]
    assert res["fig11"]["rows"][0]["own_mean"] == pytest.approx(1.0) and last["own_mean"] > last["other_mean"] + 0.3
    base = res["baselines"]
    assert [r["truth"] for r in base] == ["related", "unrelated", "related", "unrelated"]
    assert base[0]["PCS"] > base[1]["PCS"] and all(r["SeedPrint"] == {"related": "RELATED"}.get(r["truth"],
                                                                                                "unrelated")
                                                   for r in base)
    assert (out / "fig11_persistence.png").is_file()


def test_the_aligned_floor_study_finds_every_lineage_on_the_test_seeds_through_a_trusted_match(corpora, tmp_path,
                                                                                                 monkeypatch):
    """studies.aligned_floor at a tiny condition: the rule before's floor is fit on the fit seeds' unrelated pairs
    only (twice their largest raw matched tau, rounded up); every related pair of the test seeds -- each init and its
    trained model, the continuation at each length, and all of them again in a signed-permuted basis -- is called
    related by the aligned verdict through a trusted match, while the exact verdict misses the permuted ones it
    cannot see through; no unrelated pair's match is trusted."""
    monkeypatch.setattr(aligned_floor, "CONDITIONS", {"tiny": dict(n_embd=32, tokenizer="bytes", max_steps=4,
                                                                   batch_size=4)})
    out = tmp_path / "out"
    aligned_floor.main(["--conditions", "tiny", "--n_layer", "1", "--seq_len", "16", "--sequences", "40", "--k", "8",
                        "--ckpt_every", "2", "--fit_seeds", "100", "101", "--test_seeds", "102", "103",
                        "--finetune_steps", "2", "4", "--corpus", str(corpora / "a.txt"), "--corpus2",
                        str(corpora / "b.txt"), "--device", "cpu", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["aligned"]
    fit = [r["tau_raw_inputs"] for r in res["pairs"] if r["split"] == "fit" and not r["related"]]
    assert res["floor_before"] == max(0.01, np.ceil(200 * max(fit)) / 100)
    test = [r for r in res["pairs"] if r["split"] == "test"]
    related = [r for r in test if r["related"]]
    assert len(related) == 2 * (2 + 2)                 # 2 inits and 2 continuation lengths, each also permuted
    for r in related:
        assert r["trusted"] and r["aligned_related"], r["kind"]
        assert 2 * min(r["p_exact"], r["p_aligned_test"]) < seedprint.ALPHA, r["kind"]
    assert not any(r["trusted"] for r in test if not r["related"])
    permuted = [r for r in related if r["kind"].endswith("B permuted")]
    assert min(r["p_exact"] for r in permuted) > seedprint.ALPHA and all(r["moved"] > 0 for r in permuted)
    assert [c["related"] for c in res["by_length"]] == ["2/2", "2/2"]


def test_the_lineage_studies_check_seq_len_and_k_against_the_models_they_run(tmp_path, monkeypatch):
    """--seq_len and a given --k are checked against the models a study runs, not the tiny preset's (context 256,
    width 64): each condition's models of aligned_floor (context 64), refused in one line (exit 2) before any work;
    the fresh inits of fresh_inits --base (a context of 1024, its config read once), which take a --seq_len the
    preset would refuse; and fresh_inits' own flags, named as such."""
    import hf
    from conftest import cli_error, llama_family, write_hf

    class Began(Exception):
        pass

    def work(*args, **kwargs):
        raise Began
    monkeypatch.setattr(aligned_floor, "condition_pairs", work)
    out = tmp_path / "out"
    line = cli_error(aligned_floor.main, "studies.aligned_floor", ["--seq_len", "128", "--out", str(out)])
    assert "--seq_len 128 exceeds the context of the models of --conditions gpt2_w64 (64 tokens)" in line, line
    spec, cfg, t = llama_family("LlamaForCausalLM")
    cfg["max_position_embeddings"] = 1024
    base = tmp_path / "base"
    write_hf(base, cfg, t)
    reads = []
    real_read = hf.read_config
    monkeypatch.setattr(hf, "read_config", lambda path: reads.append(path) or real_read(path))
    monkeypatch.setattr(fresh_inits, "fresh_init", work)
    with pytest.raises(Began):                        # accepted: the study begins making its inits
        fresh_inits.main(["--base", str(base), "--seq_len", "512", "--k", "16", "--out", str(out)])
    assert reads == [str(base)]
    cases = {("--base", str(base), "--seq_len", "1025"): f"--seq_len 1025 exceeds the context of {base} (1024 tokens)",
             ("--base", str(base), "--k", "17"): f"--k 17 is more than the width of --base {spec['d']} allows",
             ("--n_embd", "32", "--k", "17"): "--k 17 is more than the width (--n_embd) 32 allows"}
    for argv, message in cases.items():
        line = cli_error(fresh_inits.main, "studies.fresh_inits", [*argv, "--out", str(out)])
        assert message in line, line
    assert not out.exists()


def test_a_released_base_is_fingerprinted_from_a_load_of_its_own(tmp_path):
    """studies.lineage.released: the base the derivatives and pruned studies test. Fingerprinting moves and casts a
    Recipe's model in place, so each build is a fresh float32 load: fingerprinting in bf16 leaves the copy the study
    keeps (to make its derivatives, to compare logits) as it was, and its fingerprint is the bf16 model's."""
    from model import write_checkpoint
    from studies.lineage import cached_fingerprints, released, weights_identity
    path = str(tmp_path / "base.pt")
    model = build(get_config("tiny", n_layer=2), 0, 0)
    write_checkpoint(path, model)
    base = released(path)
    kept = base.build()
    before = {n: p.clone() for n, p in kept.named_parameters()}
    options = dict(sequences=16, seq_len=8)
    H = cached_fingerprints(base, str(tmp_path / "cache"), "cpu", "bfloat16", options, dict(exact={}))["exact"]
    assert all(p.dtype == torch.float32 and torch.equal(p, before[n]) for n, p in kept.named_parameters())
    assert np.array_equal(H, seedprint.fingerprint(model.to(torch.bfloat16).eval(), **options))
    assert base.key == "base:" + json.dumps(weights_identity(path))      # the key of earlier caches


def test_the_derivatives_study_on_a_hugging_face_model(tmp_path):
    """studies.derivatives on a tiny LLaMA directory with its own tokenizer.json: every reparametrization keeps the
    logits (the study checks it and would stop), every derivative and every signed-permuted basis is related
    under the aligned verdict, every control (fresh inits, from-scratch trainings) is unrelated under both
    verdicts, and the exact verdict cannot see through a negated, permuted basis. (A rotated basis is no signed
    permutation: on an untrained random model nothing finds it, so no claim is made for it here.)"""
    from conftest import llama_family, write_hf, write_tokenizer_json
    spec, cfg, t = llama_family("LlamaForCausalLM")
    base = tmp_path / "base"
    write_hf(base, cfg, t)
    words = ["<unk>", "<s>"] + [f"w{i}" for i in range(spec["V"] - 2)]
    write_tokenizer_json(base, words)
    for name, step in (("a.txt", 7), ("b.txt", 13)):
        (tmp_path / name).write_text(" ".join(f"w{(i * step) % 90}" for i in range(4000)))
    out = tmp_path / "out"
    from studies import derivatives
    derivatives.main(["--base", str(base), "--deriv_steps", "2", "--corpus", str(tmp_path / "a.txt"), "--corpus2",
                      str(tmp_path / "b.txt"), "--sequences", "60", "--seq_len", "16", "--k", "8", "--device", "cpu",
                      "--out", str(out)])
    rows = json.loads((out / "results.json").read_text())["derivatives"]
    assert len(rows) == 21
    for r in rows:
        if r["truth"] == "related" and "rotated" not in r["pair"]:
            assert r["aligned"] is True, r["pair"]
        elif r["truth"] == "unrelated":
            assert r["exact"] is r["aligned"] is False, r["pair"]
        if r["logit_change"] is not None:
            assert r["logit_change"] <= 1e-4
    negated = next(r for r in rows if r["pair"] == "base vs negated, permuted residual basis")
    assert negated["exact"] is False and negated["moved"] > 0


def test_monte_carlo_permutation_p_against_every_permutation():
    """The sampled p against the exact permutation distribution, enumerated over all 7! permutations, on a C
    with ties (rounded) and a diagonal signal; and it never reports less than 1 / (draws + 1)."""
    import itertools
    rng = np.random.default_rng(3)
    n = 7
    C = np.round(rng.standard_normal((n, n)) * 0.1 + 0.04 * np.eye(n), 2)
    T = np.array([C[np.arange(n), list(p)].sum() for p in itertools.permutations(range(n))])
    exact = (T >= np.trace(C) - 1e-12).mean()
    assert 0.01 < exact < 0.3
    draws = 40_000
    p = permutation_p_monte_carlo(C, draws=draws, seed=1)
    assert abs(p - exact) < 4 * math.sqrt(exact * (1 - exact) / draws), (p, exact)
    assert permutation_p_monte_carlo(np.eye(12) * 10, draws=500) == 1 / 501     # 12!: no draw ties it


def test_the_reference_null_and_analytic_variance():
    N = 60
    rng = np.random.default_rng(5)
    taus = [stats.kendalltau(rng.standard_normal(N), rng.standard_normal(N)).statistic for _ in range(4000)]
    assert np.var(taus) == pytest.approx(2 * (2 * N + 5) / (9 * N * (N - 1)), rel=0.08)
    a = null_taus(100, 32, k=16)
    assert null_taus(100, 32, k=16) is a                        # cached ...
    assert not np.array_equal(null_taus(100, 32, k=8), a)      # ... on every argument


# ----------------------------------------------------------------------------- children made smaller

def test_a_width_pruned_child_computes_the_kept_coordinates_of_its_parent():
    """prune_width against its definition: a norm-free parent whose readers ignore the dropped coordinates (their
    columns zeroed) computes, on the kept ones, exactly what the child computes; the most important are kept."""
    from studies.edits import prune_width, residual_importance
    cfg = get_config("tiny", n_layer=2, norm="none", vocab_size=50, block_size=16, **{"n_embd": 32, "n_head": 4})
    parent = build(cfg, 0, 0).eval()
    importance = torch.rand(32, generator=torch.Generator().manual_seed(1))
    keep = torch.sort(importance.argsort(descending=True)[:24]).values
    drop = torch.tensor([j for j in range(32) if j not in keep])
    with torch.no_grad():
        for name, p in parent.named_parameters():
            if name.endswith(("attn.c_attn.weight", "mlp.c_fc.weight", "wte.weight")):
                p[:, drop] = 0                            # nothing reads or carries the dropped coordinates
    child = prune_width(parent, 0.25, importance)
    assert child.config.n_embd == 24 and child.config.mlp_width == parent.config.mlp_width
    x = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(2))
    h_parent = parent.trace(x, hidden="last")["hidden"][-1]
    assert torch.allclose(child.trace(x, hidden="last")["hidden"][-1], h_parent[:, keep], atol=1e-6)
    h = parent.trace(x, hidden="all")["hidden"][:-1]
    assert torch.allclose(residual_importance(parent, x), sum(s.pow(2).mean((0, 1)) for s in h), rtol=1e-6)


def test_a_depth_pruned_child_runs_its_parents_blocks_but_the_dropped_ones():
    """prune_depth against a loop over the parent's own blocks that skips the blocks changing their input least."""
    import torch.nn.functional as F
    from studies.edits import prune_depth
    parent = build(get_config("tiny", **LLAMA_KNOBS, vocab_size=50, block_size=16), 0, 0).eval()
    x = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(3))
    h = parent.trace(x, hidden="all")["hidden"]
    kept = sorted(sorted(range(4), key=lambda i: F.cosine_similarity(h[i], h[i + 1], dim=-1).mean().item())[:3])
    child = prune_depth(parent, 0.25, x)
    assert child.config.n_layer == 3
    with torch.no_grad():
        s = parent.transformer.wte(x)
        rope = parent._ropes(s)["full"]
        for i in kept:
            s = parent.transformer.h[i](s, rope)
        expected = parent.transformer.ln_f(s)[:, -1]
    assert torch.allclose(child.trace(x, hidden="last")["hidden"][-1], expected, atol=1e-5)


def test_a_pair_of_two_widths_is_never_fingerprinted_on_the_exact_inputs(tmp_path, monkeypatch):
    """Lineage.pair reads the widths from the configs first: a pair of two widths (no exact test) is fingerprinted
    on the aligned test's and the alignment's inputs alone, a pair of one width on the exact inputs as well; a model
    whose config is unknown shows its width in the exact set, which is made for it."""
    import argparse
    from studies.lineage import Lineage, Recipe, fresh_init
    made = []

    def fingerprint(model, **options):
        made.append("exact" if "low" not in options else "aligned")       # aligned_sets give each a low bound
        return real(model, **options)
    real = seedprint.fingerprint
    monkeypatch.setattr(seedprint, "fingerprint", fingerprint)
    args = argparse.Namespace(sequences=40, seq_len=16, input_seed=0, k=8, rank_by="smallest", set_mode="coset",
                              dtype=None)
    config = lambda width: get_config("tiny", **LLAMA_KNOBS, n_embd=width, n_layer=1, vocab_size=64, block_size=16)
    wide, narrow, other = fresh_init(config(64), 0), fresh_init(config(32), 1), fresh_init(config(64), 2)
    unknown = Recipe("no config", lambda: build(config(64), 3, 3))
    for name, a, b, expected, exact_test in (("two", wide, narrow, ["aligned"] * 4, False),
                                             ("one", wide, other, ["exact", "aligned", "aligned"] * 2, True),
                                             ("unknown", unknown, narrow, ["exact", "aligned", "aligned"] * 2, False)):
        made.clear()
        exact, matched = Lineage(args, str(tmp_path / name), "cpu").pair(a, b)
        assert made == expected, name
        assert (exact is not None) == exact_test and matched is not None, name


def test_a_model_is_fingerprinted_on_each_input_set_by_its_name(tmp_path):
    """Lineage.fingerprint_sets gives each set asked for, by name and in any order, the fingerprint on that set's
    inputs as the aligned verdict defines them: the exact inputs over the whole vocabulary, the test inputs from its
    lower half, the held-out inputs from its upper half on another seed; the cache gives them back the same."""
    import argparse
    from studies.lineage import Lineage, fresh_init
    args = argparse.Namespace(sequences=20, seq_len=8, input_seed=3, k=8, rank_by="smallest", set_mode="coset",
                              dtype=None)
    config = get_config("tiny", **LLAMA_KNOBS, n_embd=32, n_layer=1, vocab_size=64, block_size=16)
    model = build(config, 5, 5).eval()
    on = lambda **inputs: seedprint.fingerprint(model, sequences=20, seq_len=8, **inputs)
    expected = {"exact": on(vocab=64, seed=3), "test": on(vocab=32, low=0, seed=3),
                "held_out": on(vocab=64, low=32, seed=3 + align.HELD_OUT_SEED)}
    lineage = Lineage(args, str(tmp_path), "cpu")
    for names in (["held_out", "exact"], ["test"], ["exact", "test", "held_out"]):
        H = lineage.fingerprint_sets(fresh_init(config, 5), 64, names)
        assert list(H) == names and all(np.array_equal(H[name], expected[name]) for name in names), names
    assert np.array_equal(lineage.exact_fingerprint(fresh_init(config, 5), 64), expected["exact"])


def test_each_models_token_table_is_whitened_once_for_all_its_pairs(tmp_path, monkeypatch):
    """Lineage.pair whitens each model's token-table rows once, however many pairs it is matched in (each pair's
    held-out fingerprints are whitened for its own match on inputs), and every aligned verdict is the one
    seedprint_test gives on the raw rows (which it whitens itself), to the bit."""
    import argparse
    from studies.lineage import Lineage, fresh_init, token_rows
    whitened = []
    real_whiten = align.whiten
    monkeypatch.setattr(align, "whiten", lambda X: whitened.append(X.shape) or real_whiten(X))
    args = argparse.Namespace(sequences=40, seq_len=8, input_seed=0, k=8, rank_by="smallest", set_mode="coset",
                              dtype=None)
    config = get_config("tiny", **LLAMA_KNOBS, n_embd=32, n_layer=1, vocab_size=128, block_size=16)
    models = [fresh_init(config, s) for s in range(4)]
    lineage = Lineage(args, str(tmp_path), "cpu")
    pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1:]]
    verdicts = [lineage.pair(a, b)[1] for a, b in pairs]
    assert whitened.count((64, 32)) == len(models)      # the held-out rows [64, 128) of each table, once
    # fresh inits: no table match is trusted, so each pair's match is on its held-out fingerprints, whitened there
    assert whitened.count((40, 32)) == 2 * len(pairs) and len(whitened) == len(models) + 2 * len(pairs)
    for (a, b), got in zip(pairs, verdicts):
        A, B = (lineage.fingerprint_sets(m, 128, ["test", "held_out"]) for m in (a, b))
        raw = [token_rows(m, 64, 128) for m in (a, b)]
        expected = seedprint.seedprint_test(A["test"], B["test"], k=8, held_out=(A["held_out"], B["held_out"]),
                                            tables=raw)
        assert got == expected and got.alignment.table_fit is not None


def test_the_pruned_study_cuts_a_parent_once_per_calibration_and_names_the_cut_by_it(tmp_path, monkeypatch):
    """studies.pruned.cut_files: the three cuts of a parent are the edits themselves on these windows; the parent is
    loaded, and its importance computed, once for all three; a rerun makes nothing; other windows (shorter: another
    --seq_len) make other files, never the stale ones."""
    import hf
    from model import write_checkpoint
    from studies import pruned
    from studies.edits import prune_depth, prune_width, residual_importance
    path = str(tmp_path / "parent.pt")
    write_checkpoint(path, build(get_config("tiny", **LLAMA_KNOBS, vocab_size=50, block_size=16), 0, 0))
    calls = {"load": 0, "importance": 0}

    def load():
        calls["load"] += 1
        return hf.load(path)

    def importance(model, tokens):
        calls["importance"] += 1
        return residual_importance(model, tokens)
    monkeypatch.setattr(pruned, "residual_importance", importance)
    tokens = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(0))
    make = lambda t: pruned.cut_files(load, weights_identity(path), t, str(tmp_path / "cuts"), "p_", 0,
                                      "bytes")
    first = make(tokens)
    assert calls == {"load": 1, "importance": 1}
    assert make(tokens) == first and calls == {"load": 1, "importance": 1}        # on disk: nothing made again
    shorter = make(tokens[:, :8])
    assert calls == {"load": 2, "importance": 2}
    assert all("_T16_" in first[k][0] and "_T8_" in shorter[k][0] and shorter[k] != first[k] for k in pruned.KINDS)
    parent = hf.load(path)
    expected = {"width 25%": prune_width(parent, 0.25, residual_importance(parent, tokens)),
                "width 50%": prune_width(parent, 0.5, residual_importance(parent, tokens)),
                "depth 25%": prune_depth(parent, 0.25, tokens)}
    for kind, (name, cut) in first.items():
        child = hf.load(cut)
        assert child.config == expected[kind].config and hf.read_config(cut) == expected[kind].config
        assert all(torch.equal(p, q) for p, q in zip(child.state_dict().values(),
                                                      expected[kind].state_dict().values())), kind


def test_the_pruned_study_finds_every_child_and_calls_no_stranger_related(corpora, tmp_path):
    """studies.pruned on tiny models: each parent's three children (two narrower, one shallower) trained after the
    cut are called related, every unrelated pair of unequal widths unrelated, and the table counts the pairs."""
    from studies import pruned
    out = tmp_path / "out"
    pruned.main(["--tokenizer", "bytes", "--n_embd", "64", "--n_layer", "4", "--block_size", "16", "--seq_len",
                 "16", "--max_steps", "40", "--child_steps", "10", "--ckpt_every", "40", "--batch_size", "8",
                 "--sequences", "200", "--k", "16", "--parents", "0", "1", "--scratch", "100", "--device", "cpu",
                 "--corpus", str(corpora / "a.txt"), "--corpus2", str(corpora / "b.txt"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["pruned"]
    for r in res["pairs"]:
        assert r["called"] == r["related"], r
        assert (r["p_exact"] is None) == (r["widths"][0] != r["widths"][1])
    counts = {r["kind"]: r["called_related"] for r in res["table"]}
    assert counts["parent vs its width 50% child"] == "2/2" and counts["parent vs scratch at width 25%"] == "0/2"
    assert sorted({tuple(r["widths"]) for r in res["pairs"]}) == [(64, 32), (64, 48), (64, 64)]
    # the pooled rows the docs quote, recounted from the pairs: 2 parents, 1 scratch seed
    two = lambda r: r["widths"][0] != r["widths"][1]
    members = {"related, all kinds": [r for r in res["pairs"] if r["related"]],                     # 2 x 3 kinds
               "unrelated, two widths": [r for r in res["pairs"] if not r["related"] and two(r)],  # 2 x (2 + 2)
               "unrelated, one width": [r for r in res["pairs"] if not r["related"] and not two(r)]}   # 2 x 1
    assert {name: len(rs) for name, rs in members.items()} == {"related, all kinds": 6, "unrelated, two widths": 8,
                                                                "unrelated, one width": 2}
    table = {r["kind"]: r for r in res["table"]}
    for name, rs in members.items():
        x = sum(r["called"] for r in rs)
        assert [table[name][key] for key in ("called_related", "rate", "CI95")] == [f"{x}/{len(rs)}",
                                                                                   *shown_rate(x, len(rs))], name


def test_the_pruned_study_on_a_hugging_face_base_fits_no_floor(tmp_path):
    """studies.pruned --base on a tiny LLaMA directory (4 layers, width 32): its three children are called related,
    the fresh inits of their architectures unrelated, and no floor is fit on the two fresh inits of two widths (its
    reason is recorded instead)."""
    from conftest import llama_family, write_hf, write_tokenizer_json
    from studies import pruned
    spec, cfg, t = llama_family("LlamaForCausalLM")
    _, _, more = llama_family("LlamaForCausalLM", seed=1)
    t.update({k.replace(f"layers.{i}.", f"layers.{i + 2}."): v for k, v in more.items()
              for i in range(2) if k.startswith(f"model.layers.{i}.")})
    cfg["num_hidden_layers"] = 4
    base = tmp_path / "base"
    write_hf(base, cfg, t)
    write_tokenizer_json(base, ["<unk>", "<s>"] + [f"w{i}" for i in range(spec["V"] - 2)])
    for name, step in (("a.txt", 7), ("b.txt", 13)):
        (tmp_path / name).write_text(" ".join(f"w{(i * step) % 90}" for i in range(4000)))
    out = tmp_path / "out"
    pruned.main(["--base", str(base), "--child_steps", "2", "--sequences", "60", "--seq_len", "16", "--k", "8",
                 "--device", "cpu", "--corpus", str(tmp_path / "a.txt"), "--corpus2", str(tmp_path / "b.txt"),
                 "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["pruned_base"]
    assert sorted(tuple(r["widths"]) for r in res["pairs"]) == sorted([(32, 24), (32, 16), (32, 32)] * 2)
    assert all(r["called"] == r["related"] for r in res["pairs"]), res["pairs"]
    assert res["fitted_floor"] is None and "not fit with --base" in res["fitted_floor_why"]


def test_the_pruned_study_with_a_base_refuses_each_flag_it_would_ignore(tmp_path):
    """With --base the tiny parents' flags do nothing: each is refused by name (one line, exit 2), before the base is
    looked at, and nothing is written."""
    from conftest import cli_error
    from studies import pruned
    ignored = {"--parents": ["5", "6"], "--scratch": ["200"], "--data_seed": ["3"], "--max_steps": ["7"],
               "--ckpt_every": ["7"], "--batch_size": ["4"], "--lr": ["0.01"], "--tokenizer": ["gpt2"],
               "--model": ["gpt2-nano"], "--n_embd": ["32"], "--calibration": ["attenuate"]}
    out = tmp_path / "out"
    base = ["--base", str(tmp_path / "no_model_here"), "--out", str(out)]
    for flag, values in ignored.items():
        line = cli_error(pruned.main, "studies.pruned", [*base, flag, *values])
        assert f": {flag} would do nothing; drop it" in line, line
    line = cli_error(pruned.main, "studies.pruned", [*base, *(x for f, v in ignored.items() for x in (f, *v))])
    assert f"{', '.join(ignored)} would do nothing; drop them" in line, line
    assert not out.exists()


def test_the_pruned_study_refuses_an_impossible_cut_or_k_before_any_work(tmp_path, monkeypatch):
    """A cut that keeps everything or nothing (a quarter of 2 layers rounds to none, a quarter of width 2 too), a
    --k above half the narrowest child's width, too few parents, or a scratch seed that is a parent's: each refused
    in one line (exit 2) naming its flag, before any model is trained or anything written; a base too shallow to cut
    as well, after its own checks only."""
    import hf
    from conftest import cli_error, llama_family, write_hf, write_tokenizer_json
    from studies import pruned

    def work(*args, **kwargs):
        raise AssertionError("the study began its work")
    monkeypatch.setattr(pruned, "tiny", work)
    monkeypatch.setattr(pruned, "base_study", work)
    out = tmp_path / "out"
    width = 64 // 2                         # the tiny preset's width, halved by the 50% cut (the narrowest child)
    cases = {("--n_layer", "2"): "--n_layer 2: the depth 25% cut would drop 0 of 2 layers",
             ("--n_layer", "1"): "--n_layer 1: the depth 25% cut would drop 0 of 1 layers",
             ("--n_embd", "2", "--n_head", "1"): "--n_embd 2: the width 25% cut would keep 2 of 2 residual",
             ("--k", str(width // 2 + 1)): f"--k {width // 2 + 1} is more than the narrowest child's width {width}",
             # above half the parent's width too: still the child's bound, once, not the parent's
             ("--k", "40"): f"--k 40 is more than the narrowest child's width {width} allows: at most half of it, "
                            f"{width // 2}",
             ("--parents", "0"): "--parents: the unrelated pairs are between parents",
             ("--scratch", "0", "--parents", "0", "1"): "--scratch seeds must differ from --parents"}
    for argv, message in cases.items():
        line = cli_error(pruned.main, "studies.pruned", [*argv, "--out", str(out)])
        assert message in line, line
    spec, cfg, t = llama_family("LlamaForCausalLM")
    assert spec["L"] == 2                   # a quarter of its layers rounds to none
    base = tmp_path / "base"
    write_hf(base, cfg, t)
    write_tokenizer_json(base, ["<unk>"] + [f"w{i}" for i in range(spec["V"] - 1)])
    streamed = []                           # a base's weights are read only once its flags are all accepted
    monkeypatch.setattr(hf, "stream", lambda stored, digests=None: streamed.append(stored.path) or iter(()))
    line = cli_error(pruned.main, "studies.pruned", ["--base", str(base), "--seq_len", "16", "--out", str(out)])
    assert f"--base {base} (2 layers): the depth 25% cut would drop 0 of 2 layers" in line, line
    cfg["num_hidden_layers"] = 4            # cuts that fit: its narrowest child keeps half its width
    t.update({k.replace("layers.0.", f"layers.{i}."): v.clone() for k, v in t.items() if "layers.0." in k
              for i in (2, 3)})
    deep = tmp_path / "deep"
    write_hf(deep, cfg, t)
    write_tokenizer_json(deep, ["<unk>"] + [f"w{i}" for i in range(spec["V"] - 1)])
    narrowest = spec["d"] // 2
    line = cli_error(pruned.main, "studies.pruned", ["--base", str(deep), "--seq_len", "16", "--k",
                                                     str(narrowest // 2 + 1), "--out", str(out)])
    assert f"--k {narrowest // 2 + 1} is more than the narrowest child's width {narrowest}" in line, line
    assert streamed == [] and not out.exists()


def test_a_base_with_a_nan_weight_is_refused_before_any_work(tmp_path, monkeypatch):
    """studies.derivatives and studies.pruned read every weight of --base once its flags are accepted: a NaN in one
    of them is refused in one line (exit 2) naming it, before any work, and nothing is written; a --k the base's
    width does not allow is refused before that."""
    from conftest import cli_error, llama_family, write_hf, write_tokenizer_json
    from studies import derivatives, pruned

    def work(*args, **kwargs):
        raise AssertionError("the study began its work")
    monkeypatch.setattr(derivatives, "released", work)
    monkeypatch.setattr(pruned, "base_study", work)
    spec, cfg, t = llama_family("LlamaForCausalLM")
    cfg["num_hidden_layers"] = 4            # cuts that fit, so that the pruned study reaches its weights
    t.update({k.replace("layers.0.", f"layers.{i}."): v.clone() for k, v in t.items() if "layers.0." in k
              for i in (2, 3)})
    t["model.layers.3.mlp.down_proj.weight"][0, 0] = float("nan")
    base = tmp_path / "base"
    write_hf(base, cfg, t)
    write_tokenizer_json(base, ["<unk>"] + [f"w{i}" for i in range(spec["V"] - 1)])
    out = tmp_path / "out"
    for main, name in ((derivatives.main, "studies.derivatives"), (pruned.main, "studies.pruned")):
        line = cli_error(main, name, ["--base", str(base), "--seq_len", "16", "--out", str(out)])
        assert "weight model.layers.3.mlp.down_proj.weight holds 1 NaN/inf value(s)" in line, line
    # a --k above half the base's width: refused before its weights are read too (the NaN is not reached)
    line = cli_error(derivatives.main, "studies.derivatives", ["--base", str(base), "--seq_len", "16", "--k",
                                                               str(spec["d"] // 2 + 1), "--out", str(out)])
    assert f"--k {spec['d'] // 2 + 1} is more than the width of --base {spec['d']} allows" in line, line
    assert not out.exists()


def test_a_registry_file_is_made_from_the_cache_and_remade_on_another_device(tmp_path, monkeypatch):
    """studies.registry.register: a model fingerprinted already (in the fingerprint cache) is not run again to make
    its file; a file is reused on the device it was made on and made anew on another (a GPU fingerprints under bf16
    autocast). The device is only recorded here: the model runs on the CPU either way."""
    from model import write_checkpoint
    from studies import registry
    path = str(tmp_path / "m.pt")
    write_checkpoint(path, build(get_config("tiny", n_layer=1, vocab_size=64, block_size=16), 0, 0))
    import evidence
    runs, made = [], []
    real_fingerprint, real_file, real_write = seedprint.fingerprint, registry.fingerprint_file, evidence.write

    def fingerprint(model, **options):
        runs.append(options)
        return real_fingerprint(model, **options)

    def fingerprint_file(m, cache, device, dtype, options, tokens=None):
        fp = real_file(m, cache, "cpu", dtype, options, tokens=tokens)
        fp.provenance["device"] = device
        return fp
    monkeypatch.setattr(seedprint, "fingerprint", fingerprint)
    monkeypatch.setattr(registry, "fingerprint_file", fingerprint_file)
    monkeypatch.setattr(evidence, "write", lambda path, fp: made.append(fp.provenance["device"]) or real_write(path, fp))
    options, cache = dict(sequences=20, seq_len=8, k=8), str(tmp_path / "cache")
    registry.register({"m": path}, str(tmp_path / "one"), options, "cpu", cache=cache)
    assert len(runs) == 3                             # the exact, the aligned test's and the alignment's inputs
    registry.register({"m": path}, str(tmp_path / "two"), options, "cpu", cache=cache)
    assert len(runs) == 3 and made == ["cpu", "cpu"]  # another registry's file, from the cache
    for device in ("cpu", "cuda:0", "cuda:0", "cpu"):
        registry.register({"m": path}, str(tmp_path / "two"), options, device, cache=cache)
    assert made == ["cpu", "cpu", "cuda:0", "cpu"]    # reused on its device, made anew on another


def test_the_registry_study_names_each_base_once_and_none_for_strangers(corpora, tmp_path, monkeypatch):
    """studies.registry on tiny models: each continued base (permuted or not) is traced to its own base, every
    stranger to none, the lineage registered twice is inconclusive and one lineage; bf16 files are compared. Each
    search and each model's fingerprint on each input set is made once."""
    import evidence
    from studies import registry
    searches, runs = [], []
    real_search, real_fingerprint = seedprint.search, seedprint.fingerprint
    monkeypatch.setattr(seedprint, "search", lambda *a, **kw: searches.append(a) or real_search(*a, **kw))
    monkeypatch.setattr(seedprint, "fingerprint", lambda *a, **kw: runs.append(kw) or real_fingerprint(*a, **kw))
    out = tmp_path / "out"
    registry.main(["--tokenizer", "bytes", "--n_embd", "64", "--n_layer", "2", "--block_size", "16", "--seq_len",
                   "16", "--max_steps", "30", "--child_steps", "10", "--ckpt_every", "30", "--batch_size", "8",
                   "--sequences", "150", "--k", "16", "--bases", "0", "1", "2", "--suspects", "10", "11",
                   "--device", "cpu", "--dtype", "float32", "--corpus", str(corpora / "a.txt"), "--corpus2",
                   str(corpora / "b.txt"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["registry"]
    assert all(t["right"] for t in res["trials"]), res["trials"]
    assert {r["kind"]: r["suspects"] for r in res["table"]} == {
        "unrelated: trained on the bases' data": 2, "unrelated: a fresh init": 2, "related: a base continued": 3,
        "related: continued, basis permuted": 3, "unrelated, all": 2 + 2, "related, all": 3 + 3}
    table = {r["kind"]: r for r in res["table"]}
    for truth in ("unrelated", "related"):           # the pooled rows, recounted from the trials
        ts = [t for t in res["trials"] if t["kind"].startswith(f"{truth}:")]
        x = sum(t["answer"] == "derives from" for t in ts)
        assert [table[f"{truth}, all"][key] for key in ("derives_from", "right", "derives_from_rate", "CI95")] == [
            x, f"{sum(t['right'] for t in ts)}/{len(ts)}", *shown_rate(x, len(ts))], truth
    assert res["twice"] == dict(answer="inconclusive", related=[0, 1], one_lineage=True)
    assert res["bf16_against_float32"]["pairs"] == 3 * len(res["trials"][::4])
    suspects, drifted = len(res["trials"]), len(res["trials"][::4])
    assert len(searches) == suspects + 1 + drifted     # each suspect, the twice-registered one, the bf16 files
    # each base on the three input sets for its file, in float32 and in bf16; each suspect on the aligned verdict's
    # two (--align on), the twice-registered one too; the first continuation once more on the exact inputs, for its
    # file in the twice registry (the rest of that registry's files come from the cache)
    assert len(runs) == 3 * 3 * 2 + suspects * 2 + 2 + 1
    assert sorted(os.listdir(out / "registry")) == ["base0.npz", "base1.npz", "base2.npz"]
    # --dtype reaches every model: the registry's files were made in it, and every suspect fingerprinted in it
    made = [evidence.read(str(f)).provenance["dtype"] for f in (out / "registry").iterdir()]
    assert made == ["float32"] * 3
    cache = [json.loads(str(np.load(out / "fingerprints" / f)["key"])) for f in os.listdir(out / "fingerprints")]
    assert cache and {key["dtype"] for key in cache} == {"float32"}


def test_the_scaled_registry_study_searches_each_vocabulary_apart_and_counts_what_it_holds(corpora, tmp_path,
                                                                                            monkeypatch):
    """studies.registry_scale on tiny models of two widths and two vocabularies: each suspect is searched against its
    own vocabulary's registry alone (every file made on its tokens), the continued bases are traced to their bases,
    the strangers to none; the bytes a search holds equal those of the files' arrays from their shapes (three input
    sets of --sequences rows, the held-out half of the token table), per width."""
    from studies import registry_scale
    searched = []
    real_search = seedprint.search
    monkeypatch.setattr(seedprint, "search", lambda s, files, **kw: searched.append(
        sorted({os.path.basename(os.path.dirname(f)) for f in files})) or real_search(s, files, **kw))
    out = tmp_path / "out"
    registry_scale.main(["--n_layer", "1", "--block_size", "16", "--seq_len", "8", "--max_steps", "4",
                         "--ckpt_every", "4", "--batch_size", "4", "--sequences", "40", "--k", "8", "--device", "cpu",
                         "--bases", "3", "--suspects", "1", "--fresh", "1", "--related", "2", "--child_steps", "4",
                         "--widths", "32", "48", "--tokenizers", "bytes", "bpe", "--bpe_vocab", "300",
                         "--corpus", str(corpora / "a.txt"), "--corpus2", str(corpora / "b.txt"), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["registry_scale"]
    assert all(t["right"] for t in res["trials"]), res["trials"]
    assert (out / "registry_scale.png").is_file()
    assert len(os.listdir(out / "tokenizers")) == 1                 # the BPE of --corpus alone, the bytes first
    assert [t["registry"] for t in res["trials"]] == ["bytes"] * 4 + ["bpe"] * 4
    # each suspect once timed, once traced per registry: every search against one vocabulary's files only
    assert searched == [["registry_bytes"]] * 5 + [["registry_bpe"]] * 5
    for tok, vocab in (("bytes", 256), ("bpe", 300)):
        reg = res["registries"][tok]
        assert (reg["bases"], reg["vocab"]) == (3, vocab)
        widths = [32, 48, 32]                         # taken in turn
        assert reg["held_bytes"] == sum(4 * (3 * 40 * w + (vocab - vocab // 2) * w) for w in widths)
        assert sorted(os.listdir(out / f"registry_{tok}")) == sorted(
            f"w{w}_seed{registry_scale.BASE_SEED0 + i + (3 if tok == 'bpe' else 0)}.npz" for i, w in enumerate(widths))
    # one registry of both vocabularies (the same models, reused): each suspect searched as a model against all six
    # files, the byte-level ones compared with the byte files alone (the BPE's merged tokens are not theirs)
    searched.clear()
    trained_before = sorted(os.listdir(out / "runs"))
    registry_scale.main(["--n_layer", "1", "--block_size", "16", "--seq_len", "8", "--max_steps", "4",
                         "--ckpt_every", "4", "--batch_size", "4", "--sequences", "40", "--k", "8", "--device", "cpu",
                         "--bases", "3", "--suspects", "1", "--fresh", "1", "--related", "2", "--child_steps", "4",
                         "--widths", "32", "48", "--tokenizers", "bytes", "bpe", "--bpe_vocab", "300", "--one_registry",
                         "--corpus", str(corpora / "a.txt"), "--corpus2", str(corpora / "b.txt"), "--out", str(out)])
    assert sorted(os.listdir(out / "runs")) == trained_before                  # not one model more
    results = json.loads((out / "results.json").read_text())
    one = results["registry_scale_one"]
    assert results["registry_scale"] == res and (out / "registry_scale_one.png").is_file()    # each mode kept
    assert all(t["right"] for t in one["trials"]), one["trials"]
    assert searched == [["registry"]] * 10
    assert [t["compared"] for t in one["trials"]] == [3] * 4 + [6] * 4
    assert [t["named"] for t in one["trials"] if t["related"]] == [0, 1, 3, 4]   # the bpe bases after the bytes ones
    files = sorted(os.listdir(out / "registry"))
    assert len(files) == 6 and all(evidence.read(str(out / "registry" / f)).tokens[:256] == data.token_bytes("bytes")
                                   for f in files if f.startswith("bytes"))


def test_a_range_is_printed_min_to_max():
    from studies.lineage import span
    assert span([0.25, -0.125, 0.0]) == "-0.125 to +0.250"
    assert span((x for x in [3, 1, 2]), "{}") == "1 to 3" and span([]) == "-"
    for bad in (float("nan"), float("inf")):        # as text it would pass write_json's refusal
        with pytest.raises(FloatingPointError, match=f"holds {bad}: not finite"):
            span([0.5, bad, 0.1])
