"""The sink studies: the testbed's task against closed forms and naive searches, where a sink lives on a
hand-built model, the intervals and paired tests against scipy and a simulation, and each study end to end at a
tiny size, through the command a user types."""
import json
import math

import numpy as np
import pytest
import torch

import data

import sink
from init import build
from studies import sink_calibration, sink_testbed
from studies.sink_testbed import bigram_backcopy, interval, paired, position_table_probes, token_probes


def test_bigram_backcopy_copies_after_every_trigger():
    vocab, triggers = 32, 3
    x, logp = bigram_backcopy(20000, vocab, triggers, seed=1)
    trig = np.flatnonzero(x[1:-1] >= vocab - triggers) + 1
    assert len(trig) > 300                                           # triggers are common enough to learn from
    assert (x[trig + 1] == x[trig - 1]).all() and (logp[trig + 1] == 0).all()   # the backcopy rule: certain
    assert (x[trig - 1] < vocab - triggers).all()                    # a copied token is never a trigger
    # elsewhere the next token is one of a few successors of the current one
    rest = np.flatnonzero(x[:-1] < vocab - triggers)
    pairs = {(a, b) for a, b in zip(x[rest], x[rest + 1]) if b < vocab - triggers}
    assert len(pairs) <= (vocab - triggers) * 4


def empirical_entropy_given_two(x: np.ndarray, vocab: int) -> float:
    """Plug-in entropy (nats) of x[t] given (x[t-2], x[t-1]), by counting."""
    counts = np.bincount((x[:-2] * vocab + x[1:-1]) * vocab + x[2:], minlength=vocab ** 3).reshape(-1, vocab)
    counts = counts[counts.sum(1) > 0].astype(np.float64)
    p = counts / counts.sum(1, keepdims=True)
    return float(-(counts * np.log(np.where(counts > 0, p, 1.0))).sum() / counts.sum())


def test_the_loss_floor_is_the_processes_own_entropy():
    """The generator's mean -log p against independent computations: the closed form of the iid variant
    (tokens uniform over the plain ids, a trigger with probability q = triggers / vocab, then a certain
    copy; triggers are a fraction q / (1 + q) of the stream), and the counted conditional entropy of the
    bigram chain, whose next token depends on the two before it only."""
    V, k = 16, 4
    q = k / V
    x, logp = bigram_backcopy(400_000, V, k, successors=0, seed=3)
    h_plain = -q * math.log(q / k) - (1 - q) * math.log((1 - q) / (V - k))
    assert -logp.mean() == pytest.approx(h_plain / (1 + q), abs=0.01)
    assert (x[np.flatnonzero(x[:-1] >= V - k) + 1] < V - k).all()
    x, logp = bigram_backcopy(400_000, V, k, successors=3, seed=4)
    assert -logp.mean() == pytest.approx(empirical_entropy_given_two(x, V), abs=0.01)


def test_documents_restart_the_chain_and_never_copy_across():
    x, logp = bigram_backcopy(32 * 400, 16, 4, successors=0, seed=5, doc_len=32)
    docs, lp = x.reshape(400, 32), logp.reshape(400, 32)
    assert (docs[:, 0] < 12).all() and np.allclose(lp[:, 0], -math.log(12))    # a fresh plain token opens each
    assert len(set(docs[:, 0].tolist())) > 6


def test_bigram_induction_copies_what_followed_the_previous_trigger():
    vocab, triggers, recall = 32, 3, 16
    x, _ = bigram_backcopy(20000, vocab, triggers, seed=2, recall=recall)
    copies = 0
    for t in range(1, len(x) - 1):                                   # a naive backward search per trigger
        if x[t] < vocab - triggers:
            continue
        prev = next((s for s in range(t - 1, max(t - recall, 0) - 1, -1) if x[s] == x[t]), None)
        if prev is not None and x[prev + 1] < vocab - triggers:
            assert x[t + 1] == x[prev + 1]
            copies += 1
    assert copies > 300


def test_calibration_trains_on_prepared_data_in_micro_batches_and_scores_the_given_ids(tmp_path, monkeypatch):
    """studies.sink_calibration as a GPU run uses it: training data already tokenized (a train.py directory), the
    evaluation text as token ids, micro-batches. Each variant's sink rates must be the metric of its own
    checkpoint on the --ids windows, and its perplexity the checkpoint's loss on them, recomputed here."""
    import hf
    (tmp_path / "train.txt").write_text("the cat sat on the mat; the dog sat on the log.\n" * 600)
    prepared = str(tmp_path / "data")
    data.prepare([str(tmp_path / "train.txt")], prepared, tokenizer="bytes")
    ids = np.frombuffer(("a mat, a log, a cat. " * 100).encode(), dtype=np.uint8).astype(np.int64)
    np.save(tmp_path / "eval.npy", ids)
    out = tmp_path / "out"
    argv = ["--train_text", prepared, "--ids", str(tmp_path / "eval.npy"), "--variants",
            "baseline", "attenuate", "--max_steps", "4", "--batch_size", "4", "--micro_batch", "2", "--n_layer", "1",
            "--n_embd", "32", "--n_head", "2", "--block_size", "32", "--lengths", "8", "16", "--sequences", "10",
            "--device", "cpu", "--out", str(out)]
    sink_calibration.main(argv)
    res = json.loads((out / "results.json").read_text())["calibration"]
    assert sorted(res) == ["attenuate", "baseline"]
    for name, r in res.items():
        ckpt = torch.load(r["checkpoint"], weights_only=False, map_location="cpu")
        assert ckpt["args"]["data"] == prepared and ckpt["args"]["micro_batch"] == 2
        model = hf.load(r["checkpoint"]).eval()
        for T in (8, 16):
            assert r["rates"][str(T)] == sink.sink_rate(model, data.windows(ids, T, 10, 1234))
        x = data.windows(ids, 16, 10, 1)
        with torch.no_grad():
            loss = np.mean([model(x[i:i + 16, :-1], x[i:i + 16, 1:])[1].item() for i in range(0, len(x), 16)])
        assert r["ppl"] == pytest.approx(math.exp(loss), rel=1e-6)
    # the trained runs are reused; a loss that is not finite on the evaluation text is refused, not a perplexity
    import model as model_module
    monkeypatch.setattr(model_module.F, "cross_entropy", lambda *a, **k: torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match="baseline: non-finite loss on the evaluation text"):
        sink_calibration.main(argv)


def marked_model(position: int, T: int = 16):
    """A 1-layer, 1-head learned-position model whose every query attends to the one key whose position-table
    row carries a marker (row `position`, 1-indexed); tokens carry nothing (zero embeddings). Its sink is, by
    construction, the marked row's position."""
    from model import get_config
    model = build(get_config("tiny", n_layer=1, n_head=1, n_embd=8, vocab_size=16, block_size=T, position="learned",
                             norm="none", bias=False, sublayers="attn"), 0).eval()
    with torch.no_grad():
        model.transformer.wte.weight.zero_()
        wpe = model.transformer.wpe.weight
        wpe.zero_()
        wpe[:, 1] = 1.0                                        # a constant feature every query reads
        wpe[position - 1, 0] = 1.0                             # the marker
        w = model.transformer.h[0].attn.c_attn.weight
        w.zero_()
        w[0, 1] = 10.0                                         # q = 10 (constant) ...
        w[8, 0] = 10.0                                         # ... k = 10 * marker: score 100 on the marked key
    return model


def test_position_table_probes_find_a_sink_that_lives_in_the_table():
    """The marked model's sink sits on the marked row: swapping rows moves it, the mean row and a shuffle take it
    from position 1; alpha by hand: before the marked key a query averages uniformly, from it on it takes all."""
    T, tokens = 16, torch.randint(0, 16, (8, 16), generator=torch.Generator().manual_seed(0))
    model = marked_model(1, T)
    before = model.transformer.wpe.weight.clone()
    probes = position_table_probes(model, tokens, ks=(5, 9))
    assert torch.equal(model.transformer.wpe.weight, before)                    # the table is restored
    assert probes["as trained"] == {"p1": 100.0, "p5": 0.0, "p9": 0.0}
    # marker on row 5: queries 1-4 see no marker (uniform over 1..t), queries >= 5 take key 5 only
    alpha_1 = sum(1 / t for t in range(1, 5)) / T
    assert alpha_1 < sink.EPS and probes["p1 <-> p5"] == {"p1": 0.0, "p5": 100.0, "p9": 0.0}
    assert probes["p1 <-> p9"]["p9"] == 100.0 and probes["p1 <-> p9"]["p1"] == 0.0
    assert probes["every row the mean"]["p1"] == 100.0 * (sum(1 / t for t in range(1, T + 1)) / T > sink.EPS)
    shuffled = torch.randperm(T, generator=torch.Generator().manual_seed(0))
    marked_at = int((shuffled == 0).nonzero()) + 1                              # where row 1 went
    assert probes["rows shuffled"]["p1"] == (100.0 if marked_at == 1 else 0.0)
    # tokens carry nothing: the same token everywhere, or token 1 copied to position 5, changes no sink
    where = token_probes(model, tokens, 16)
    assert where["same token everywhere: p1"] == 100.0
    assert where["p5 as drawn"] == where["p5 = token 1"] == 0.0
    assert where["alpha_5 as drawn"] == pytest.approx(where["alpha_5 = token 1"], abs=1e-6)


def test_interval_and_paired_against_scipy_and_a_simulation():
    """interval is the one-sample t interval, paired the paired one, with scipy's t test as the independent
    reference; the sign test is the exact binomial sum written here; and a true difference of the reported
    detectable size is detected about 80% of the time by a two-sided t test at 0.05 (simulated)."""
    from scipy import stats
    rng = np.random.default_rng(0)
    base, other = rng.normal(30, 10, 12), rng.normal(36, 10, 12)
    d = other - base
    res = paired(list(base), list(other))
    lo, hi = stats.ttest_rel(other, base).confidence_interval(0.95)
    assert (res["low"], res["high"], res["mean"]) == pytest.approx((lo, hi, d.mean()))
    up = int((d > 0).sum())
    naive = min(1.0, 2 * min(sum(math.comb(12, j) for j in range(0, up + 1)),
                             sum(math.comb(12, j) for j in range(up, 13))) / 2 ** 12)
    assert res["sign_p"] == pytest.approx(naive) and res["up"] + res["down"] == 12
    mean, low, high = interval(base)
    assert (low, high) == pytest.approx(stats.ttest_1samp(base, 0).confidence_interval(0.95))
    hits = sum(stats.ttest_1samp(rng.normal(res["detectable"], d.std(ddof=1), 12), 0).pvalue < 0.05
               for _ in range(4000))
    assert 0.75 < hits / 4000 < 0.85


def test_the_testbed_reports_intervals_probes_and_pairs_over_seeds(tmp_path):
    """A tiny testbed run (2 seeds, 2 variants): each summary is the mean and t interval of its per-seed values,
    every baseline reports where its sink lives, and the paired table is built seed by seed."""
    out = tmp_path / "out"
    sink_testbed.main(["--variants", "baseline", "attenuate", "--seeds", "0", "1", "--max_steps", "8",
               "--batch_size", "8", "--testbed_tokens", "80000", "--sequences", "64", "--device", "cpu",
               "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["testbed"]
    for name, v in res["variants"].items():
        rates = [r["rate"] for r in v["runs"]]
        assert [r["seed"] for r in v["runs"]] == [0, 1]
        assert (v["rate"]["mean"], v["rate"]["low"], v["rate"]["high"]) == pytest.approx(interval(rates))
    base = res["variants"]["baseline"]["runs"]
    assert all("p1 <-> p5: p5" in r["where"] and "p5 = token 1" in r["where"] for r in base)
    att = res["variants"]["attenuate"]["runs"]
    assert res["paired"]["attenuate"]["rate"]["mean"] == pytest.approx(np.mean([a["rate"] - b["rate"]
                                                                               for a, b in zip(att, base)]))
    assert "where" not in att[0]
