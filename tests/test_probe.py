"""probe.py: the log-space Bonferroni p-value against scipy, counts, determinism and seed dependence."""
import math

import numpy as np
import pytest
import torch
from scipy.stats import binom

from init import build
from conftest import host_syncs
from model import GPTConfig, get_config
import theory
from data import random_inputs
from probe import (PairwiseCosine, log10_binom_tail, log10_bonferroni_p, probe, token_preference,
                   uniform_baseline)


@pytest.mark.parametrize("k,n,V", [(1, 100, 50), (5, 1000, 50257), (12, 10000, 32000), (40, 2000, 1000), (3, 3, 7)])
def test_binomial_tail_matches_scipy_where_it_does_not_underflow(k, n, V):
    exact = binom.sf(k - 1, n, 1 / V)                 # P(X >= k)
    assert exact > 1e-300
    assert math.isclose(log10_binom_tail(k, n, 1 / V), math.log10(exact), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(log10_bonferroni_p(k, n, V), min(0.0, math.log10(V * exact)), rel_tol=1e-9, abs_tol=1e-12)


def test_binomial_tail_stays_finite_where_scipy_underflows():
    n, V, k = 10000, 50257, 5000
    assert binom.sf(k - 1, n, 1 / V) == 0.0           # the paper's "p = 0.00"
    lp = log10_binom_tail(k, n, 1 / V)
    # the tail is dominated by its first term: log10 C(n, k) p^k (1-p)^(n-k), by lgamma
    first = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
             + k * math.log(1 / V) + (n - k) * math.log1p(-1 / V)) / math.log(10)
    assert math.isfinite(lp) and first <= lp < first + 0.01
    assert log10_bonferroni_p(0, n, V) == 0.0 and log10_binom_tail(n + 1, n, 0.5) == -math.inf


def test_token_preference_row_and_uniform_baseline():
    counts = np.zeros(100, dtype=np.int64)
    counts[[3, 7, 9]] = [50, 30, 20]
    row = token_preference(counts)
    assert (row["top1_id"], row["top1_count"], row["n"], row["distinct_predicted"]) == (3, 50, 100, 3)
    assert row["top1_freq"] == 0.5 and row["ratio_to_uniform"] == 50.0
    # the paper's baseline: the top count of as many uniform draws (n = 100 over 100 tokens, seed 0), counted here
    top = int(np.bincount(np.random.default_rng(0).integers(0, 100, 100)).max())
    assert row["top_uniform"] == top and row["ratio_to_top_uniform"] == 50 / top
    base = uniform_baseline(100_000, 100, seed=0)
    assert base.sum() == 100_000 and np.all(np.diff(base) <= 0)
    assert abs(base.mean() - 1000) < 1e-9 and base[0] < 1000 + 6 * math.sqrt(1000)


def test_counts_are_deterministic_and_seed_dependent():
    # untied: a narrow, shallow tied model just echoes its last input token whatever the seed
    # (the residual stream is still mostly that token's embedding), so there is nothing to tell apart
    cfg = get_config("tiny", vocab_size=256, n_layer=4, tie_embeddings=False)
    torch.manual_seed(0)
    counts = lambda model: probe(model, sequences=64, seq_len=16, batch_size=16)["counts"]
    a = counts(build(cfg, seed=42).eval())
    torch.manual_seed(1)
    b = counts(build(cfg, seed=42).eval())
    c = counts(build(cfg, seed=43).eval())
    assert a.sum() == 64 and np.array_equal(a, b)
    assert not np.array_equal(a, c)
    # an independent per-sequence loop gives the same counts as the batched path
    model = build(cfg, seed=42).eval()
    g = torch.Generator().manual_seed(1234)
    ref = np.zeros(256, dtype=np.int64)
    with torch.no_grad():
        for _ in range(4):
            idx = torch.randint(0, 256, (16, 16), generator=g)
            for row in idx:
                ref[int(model(row[None])[0][0].argmax())] += 1
    assert np.array_equal(a, ref)


# ----------------------------------------------------------------------------- contraction statistics



def _naive_pairwise(x):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = len(u)
    c = np.array([u[i] @ u[j] for i in range(n) for j in range(n) if i < j])
    return c.mean(), c.std()


def test_pairwise_cosine_bound_holds_under_the_null():
    """Independent isotropic vectors (the null): P(p_bound <= a) <= a at every level a, counted over 400 draws."""
    rng = np.random.default_rng(1)
    p = []
    for _ in range(400):
        acc = PairwiseCosine()
        acc.update(torch.from_numpy(rng.standard_normal((20, 3))))
        p.append(acc.result()["p_bound"])
    p = np.array(p)
    for a in (0.2, 0.5, 0.8):
        assert (p <= a).mean() <= a + 3 * math.sqrt(a * (1 - a) / len(p))


def test_streaming_pairwise_cosine_equals_naive_gram():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((150, 24)) + 0.3          # a shared component: mean cosine clearly > 0
    acc = PairwiseCosine()
    for chunk in np.array_split(x, 7):                 # uneven batches
        acc.update(torch.from_numpy(chunk).float())
    r = acc.result()
    mean, std = _naive_pairwise(x.astype(np.float32).astype(np.float64))
    assert r["n"] == 150
    assert r["mean"] == pytest.approx(mean, abs=1e-6) and r["std"] == pytest.approx(std, abs=1e-6)
    assert r["p_bound"] == pytest.approx(1 / (1 + mean ** 2 * 150 * 149 / 2), rel=1e-6)   # Cantelli, v = 2/(N(N-1))
    direction = (x / np.linalg.norm(x, axis=1, keepdims=True)).mean(0)
    np.testing.assert_allclose(acc.direction().numpy(), direction, atol=1e-6)


def test_pairwise_cosine_z_is_standard_normal_under_the_null():
    """Independent zero-mean vectors (anisotropic, to exercise the plug-in variance): z ~ N(0, 1)."""
    rng = np.random.default_rng(1)
    scales = np.linspace(0.2, 3.0, 16)
    z = []
    for _ in range(300):
        acc = PairwiseCosine()
        acc.update(torch.from_numpy(rng.standard_normal((40, 16)) * scales))
        z.append(acc.result()["z"])
    z = np.array(z)
    # 300 draws: the mean has standard error 0.058, the std about 0.041; 4 of each
    assert abs(z.mean()) < 4 * 0.058 and abs(z.std() - 1) < 4 * 0.041, (z.mean(), z.std())


def test_probe_single_pass_matches_separate_computations():
    cfg = get_config("tiny", vocab_size=128, n_layer=3, tie_embeddings=False, block_size=16)
    model = build(cfg, seed=7).eval()
    r = probe(model, "tokens", sequences=40, seq_len=16, batch_size=16, data_seed=5)
    # independent: all 40 sequences in one batch, states from hidden="all", cosines by a naive loop
    g = torch.Generator().manual_seed(5)
    idx = torch.cat([torch.randint(0, 128, (b, 16), generator=g) for b in (16, 16, 8)])
    with torch.no_grad():
        hidden = model.trace(idx, hidden="all")["hidden"]
    assert len(r["cosine"]) == len(hidden) == cfg.n_layer + 2
    for stat, h in zip(r["cosine"], hidden):
        mean, std = _naive_pairwise(h[:, -1].double().numpy())
        assert stat["mean"] == pytest.approx(mean, abs=1e-5) and stat["std"] == pytest.approx(std, abs=1e-5)
    final = hidden[-1][:, -1]
    assert np.array_equal(r["dim_counts"], np.bincount(final.argmax(-1).numpy(), minlength=cfg.n_embd))
    direction = torch.nn.functional.normalize(final, dim=-1).mean(0)
    with torch.no_grad():
        assert r["direction_top1"] == int((direction @ model.lm_head.weight.T).argmax())


def test_gaussian_inputs_follow_the_embedding_scale():
    model = build(get_config("tiny"), seed=0)
    x = torch.cat([b["embeds"] for b in random_inputs(model, "gaussian", 64, 32, 32, seed=0)])
    assert x.shape == (64, 32, 64)
    # the embedding init is N(0, 0.02^2): 131k samples, std has relative error 0.002
    assert abs(x.mean().item()) < 4 * 0.02 / math.sqrt(x.numel()) + 1e-4 and abs(x.std().item() / 0.02 - 1) < 0.01
    with pytest.raises(ValueError, match="tokens"):
        next(random_inputs(model, "words", 1, 1, 1, 0))


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_mlp0_stack_built_from_model_blocks_matches_theory(activation):
    """MLP blocks with residual, norm and biases off: W2 phi(W1 x). The extra linear W2 preserves cosines
    at large width, so L blocks follow Prop 2 (ReLU) or stay at 0 (tanh). Several networks, so that
    the network-to-network spread enters the standard error."""
    d, L, seeds = 128, 3, range(8)
    cfg = GPTConfig(n_layer=L, n_head=4, n_embd=d, vocab_size=16, block_size=4, sublayers="mlp",
                    residual=False, norm="none", activation=activation, bias=False, position="none")
    per_seed = np.array([[c["mean"] for c in probe(build(cfg, seed=s), "gaussian", sequences=128,
                                                   seq_len=2)["cosine"][1:L + 1]]
                         for s in seeds])
    mean, se = per_seed.mean(0), per_seed.std(0, ddof=1) / math.sqrt(len(seeds))
    for layer in range(1, L + 1):
        expected = theory.mlp0_cosine(layer, activation)
        # finite width: O(1/d) per layer through each of the two matrices
        assert abs(mean[layer - 1] - expected) < 4 * se[layer - 1] + 2 * layer / d, (layer, mean, se, expected)


def test_pairwise_cosine_of_tiny_vectors():
    """Scale does not change a cosine: vectors of norm ~1e-14 (as deep residual-free MLP0 stacks
    produce) give the same statistics as the same vectors at norm ~1."""
    x = torch.randn(30, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    a, b = PairwiseCosine(), PairwiseCosine()
    a.update(x)
    b.update(x * 1e-14)
    assert b.result()["mean"] == pytest.approx(a.result()["mean"], rel=1e-9)


def test_the_experiments_run_through_the_command_line_and_point_the_papers_way(tmp_path):
    """table1, contraction and dims at a tiny size, through the command a user types: Table 1's rows are the counts
    of a probe() pass over each seed's fresh init (a second path), contraction rises with depth, and the dimension
    counts cover every sequence. The studies built on the pass: tests/test_studies_probe.py."""
    import json
    from probe import main
    main(["--model", "tiny", "--n_embd", "384", "--n_head", "6", "--n_layer", "3", "--exp", "all", "--sequences",
          "64", "--seq_len", "16", "--device", "cpu", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "results.json").read_text())
    cos = [c["mean"] for c in r["contraction"]["cosine"]]
    assert abs(cos[0]) < 0.01 and cos[1] < cos[2] < cos[3]                   # input, block 1, 2, 3
    assert sum(r["dims"]["dim_counts"]) == 64
    cfg = get_config("tiny", n_embd=384, n_head=6, n_layer=3)
    for row, seed in zip(r["token_preference"], (42, 43), strict=True):
        counts = probe(build(cfg, seed).eval(), sequences=64, seq_len=16)["counts"]
        assert (row["seed"], row["top1_id"], row["top1_count"]) == (seed, int(counts.argmax()), int(counts.max()))


def test_a_mixture_of_experts_probes_through_the_command_line_and_as_its_dense_twin_where_its_experts_are_one(tmp_path):
    """probe.py on a MoE (--n_experts 4 --experts_per_token 2): Table 1's rows are the counts of a probe() pass over
    each seed's fresh MoE (a second path). A MoE whose experts are all one dense model's MLP (studies.edits.upcycle,
    its k weights renormalized) computes that model's function, so its pass gives the dense model's counts and
    dimension counts, and its cosines within float32's rounding. A fresh MoE of the same seed, routing each token
    through 2 of 4 different MLPs, gives other counts and contracts less (docs/reproduce.md's MoE row)."""
    import dataclasses
    import json
    from probe import main
    from studies.edits import upcycle
    size = dict(n_embd=384, n_head=6, n_layer=3)
    main(["--model", "tiny", *[f"--{k}={v}" for k, v in size.items()], "--n_experts", "4", "--experts_per_token",
          "2", "--sequences", "64", "--seq_len", "16", "--device", "cpu", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "results.json").read_text())["token_preference"]
    cfg = get_config("tiny", **size)
    moe_cfg = dataclasses.replace(cfg, n_experts=4, experts_per_token=2)
    fresh = {}
    for row, seed in zip(rows, (42, 43), strict=True):
        fresh[seed] = probe(build(moe_cfg, seed).eval(), sequences=64, seq_len=16)
        counts = fresh[seed]["counts"]
        assert (row["seed"], row["top1_id"], row["top1_count"]) == (seed, int(counts.argmax()), int(counts.max()))
    dense = build(cfg, 42).eval()
    a, b = probe(dense, sequences=64, seq_len=16), probe(upcycle(dense, 4, 2, seed=1), sequences=64, seq_len=16)
    assert np.array_equal(a["counts"], b["counts"]) and np.array_equal(a["dim_counts"], b["dim_counts"])
    for x, y in zip(a["cosine"], b["cosine"], strict=True):
        assert y["mean"] == pytest.approx(x["mean"], rel=1e-4, abs=1e-6)
    assert not np.array_equal(a["counts"], fresh[42]["counts"])
    assert fresh[42]["cosine"][-1]["mean"] < a["cosine"][-1]["mean"] - 0.01


def test_a_torchrun_job_of_several_processes_is_refused_before_any_work(tmp_path, monkeypatch):
    """probe.py runs one process: under torchrun each rank would run it all into one --out. The sweep that splits its
    seeds over the ranks is the study's, which the refusal names."""
    from conftest import cli_error
    from probe import main
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    line = cli_error(main, "probe.py", ["--model", "tiny", "--device", "cpu", "--out", str(tmp_path / "out")])
    assert "python -m studies.seed_preference" in line and not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- the pass without host syncs

def per_batch_probe(model, kind, sequences, seq_len, batch_size, seed):
    """probe()'s counts, cosines and contraction direction by a straightforward loop: each batch drawn by
    data.random_inputs as it comes, a checked trace per batch, one PairwiseCosine per state (the pass as it was)."""
    cfg = model.config
    counts, dims = np.zeros(cfg.vocab_size, np.int64), np.zeros(cfg.n_embd, np.int64)
    stats = [PairwiseCosine() for _ in range(cfg.n_layer + 2)]
    with torch.no_grad():
        for inputs in random_inputs(model, kind, sequences, seq_len, batch_size, seed):
            out = model.trace(**inputs, hidden="last", logits=True)
            for i in out["logits"].float().argmax(-1).tolist():
                counts[i] += 1
            for i in out["hidden"][-1].float().argmax(-1).tolist():
                dims[i] += 1
            for acc, h in zip(stats, out["hidden"]):
                acc.update(h.float())
        top = int(model.unembed(stats[-1].direction().float()[None]).argmax())
    return counts, dims, [s.result() for s in stats], top


@pytest.mark.parametrize("knobs,kind,sequences,seq_len,batch_size", [
    (dict(n_layer=3, tie_embeddings=False, vocab_size=300), "tokens", 70, 12, 16),     # an uneven last batch
    (dict(position="learned"), "tokens", 37, 20, 37),                                  # one batch
    (dict(norm="rmsnorm", activation="swiglu", n_layer=2), "gaussian", 41, 8, 10)])
def test_the_pass_equals_a_per_batch_loop_to_the_last_digit(knobs, kind, sequences, seq_len, batch_size):
    """The same counts, dimension counts and contraction direction, and every cosine statistic to the last bit, as a
    loop that draws, checks and counts batch by batch: the ids drawn at once before the clock are the same ids, and
    the states stacked into one PairwiseCosine give each state's own sums."""
    model = build(get_config("tiny", **knobs), seed=11).eval()
    r = probe(model, kind, sequences, seq_len, batch_size, data_seed=3)
    counts, dims, cosine, top = per_batch_probe(model, kind, sequences, seq_len, batch_size, 3)
    assert np.array_equal(r["counts"], counts) and np.array_equal(r["dim_counts"], dims)
    assert r["cosine"] == cosine and r["direction_top1"] == top and r["compile_seconds"] is None


def test_the_pass_waits_for_the_device_as_often_for_one_batch_as_for_eight():
    """No host sync per batch: the reads back to the host (the embedding's scalar mean and std before the pass, the
    finiteness check once after it, the results) are as many for 8 batches as for one."""
    model = build(get_config("tiny", n_layer=2), seed=1).eval()
    one = host_syncs(lambda: probe(model, sequences=16, seq_len=8, batch_size=16))
    eight = host_syncs(lambda: probe(model, sequences=16, seq_len=8, batch_size=2))
    assert one == eight


def test_the_inputs_are_on_the_device_before_the_first_pass_and_rope_tables_made_once(monkeypatch):
    """Token ids drawn at once and handed over before the first pass (the per-batch loop drew one batch before each),
    the RoPE tables made once for the 5 passes of a length (a pass made them anew each time)."""
    import model as model_module
    import probe as probe_module
    events, draw, tables = [], probe_module.random_inputs, model_module.rope_tables

    def drawn(*a, **k):
        for batch in draw(*a, **k):
            events.append("drawn")
            yield batch
    monkeypatch.setattr(probe_module, "random_inputs", drawn)
    monkeypatch.setattr(model_module, "rope_tables", lambda *a, **k: events.append("tables") or tables(*a, **k))
    model = build(get_config("tiny", n_layer=2), seed=1).eval()
    trace = model.trace
    monkeypatch.setattr(model, "trace", lambda *a, **k: events.append("pass") or trace(*a, **k))
    probe(model, sequences=20, seq_len=8, batch_size=4)
    assert events == ["drawn", "pass", "tables"] + ["pass"] * 4        # the first pass makes the tables


def test_the_statistics_take_as_many_kernels_for_any_depth():
    """PassStatistics.update on every residual state at once: the ops it runs a batch are as many for 2 blocks as
    for 8 (one PairwiseCosine per state would run a handful more per block)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from probe import PassStatistics

    def ops(n_layer):
        cfg = get_config("tiny", n_layer=n_layer)
        model = build(cfg, seed=0).eval()
        with torch.no_grad():
            out = model.trace(torch.randint(0, 64, (6, 8)), hidden="last", logits=True)
        stats, seen = PassStatistics(cfg, "cpu"), []

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(func)
                return func(*args, **(kwargs or {}))
        with Count():
            stats.update(out)
            stats.update(out)
        return len(seen) // 2
    assert ops(2) == ops(8) <= 20


def test_a_nan_is_refused_after_the_pass_as_the_per_pass_check_refused_it():
    """A weight made inf (as a bf16 overflow would): the pass runs on, then refuses with the message a checked
    trace of its first batch gives, naming the block."""
    model = build(get_config("tiny", n_layer=3), seed=2).eval()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[0, 0] = float("inf")
        with pytest.raises(FloatingPointError) as per_pass:
            model.trace(next(random_inputs(model, "tokens", 12, 8, 4, 0))["idx"], hidden="last", logits=True)
    with pytest.raises(FloatingPointError) as after:
        probe(model, sequences=12, seq_len=8, batch_size=4, data_seed=0)
    assert str(after.value) == str(per_pass.value) and "block 2 of 3" in str(after.value)


def test_the_compile_mode_reaches_torch_compile_and_the_compiled_pass_counts_alike(monkeypatch):
    """--compile_mode as torch.compile receives it, the compile timed apart (compile_seconds), and the compiled pass
    of a one-block model counting as the eager one (the one compile of this file: a CPU builds C++ kernels, seconds
    each; max-autotune would time C++ GEMM templates on top, so the real compile here runs in the default mode)."""
    modes, real = [], torch.compile

    def compile_(fn, mode=None, **kw):
        modes.append(mode)
        return real(fn, **kw)
    monkeypatch.setattr(torch, "compile", compile_)
    model = build(get_config("tiny", n_layer=1), seed=4).eval()
    eager = probe(model, sequences=24, seq_len=8, batch_size=8)
    compiled = probe(model, sequences=24, seq_len=8, batch_size=8, compile=True,
                     compile_mode="max-autotune-no-cudagraphs")
    assert modes and set(modes) == {"max-autotune-no-cudagraphs"}
    assert compiled["compile_seconds"] > 0 and np.array_equal(compiled["counts"], eager["counts"])
    for c, e in zip(compiled["cosine"], eager["cosine"]):
        assert c["mean"] == pytest.approx(e["mean"], abs=1e-5)


def test_a_compiled_pass_compiles_each_batch_shape_once_before_its_clock(monkeypatch):
    """probe(compile=True) with a backend that counts the graphs it is given and runs them as they are (no kernels
    built): the full batches' shape and the last batch's, each compiled once, all in the warm-up (a compile made
    anew for the timed loop would compile both again there); the counts those of the eager pass."""
    graphs, real = [], torch.compile

    def compile_(fn, mode=None, **kw):
        def backend(gm, example_inputs):
            graphs.append(sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes))
            return gm.forward
        return real(fn, backend=backend, **kw)
    monkeypatch.setattr(torch, "compile", compile_)
    model = build(get_config("tiny", n_layer=2), seed=4).eval()
    eager = probe(model, sequences=50, seq_len=8, batch_size=16)
    compiled = probe(model, sequences=50, seq_len=8, batch_size=16, compile=True)
    assert len([n for n in graphs if n > 10]) == 2, graphs            # the blocks' graph, for 16 and for 2 sequences
    assert np.array_equal(compiled["counts"], eager["counts"])
