"""sink.py: the metric against naive loops and closed forms, the interventions on hand-built models,
inputs (random, text, ids, BOS), measurements on real-format checkpoints, the testbed's task."""
import json
import math
import os

import numpy as np
import pytest
import torch

import probe
import sink
import theory
from init import build
from model import get_config
from conftest import llama_family, write_hf


def random_causal_attention(shape, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(*shape, T, T, generator=g) * 3
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1)


def test_sink_scores_match_a_naive_loop():
    A = random_causal_attention((2, 3), 9)
    got = sink.sink_scores(A)
    for idx in np.ndindex(2, 3):
        for k in range(9):            # 0-indexed key k is seen by queries k..T-1
            naive = sum(A[idx][t, k].item() for t in range(k, 9)) / (9 - k)
            assert got[idx][k].item() == pytest.approx(naive, rel=1e-6)


@pytest.mark.parametrize("T", [1, 2, 64, 300])
def test_uniform_attention_gives_harmonic_over_T_and_all_to_first_gives_one(T):
    uniform = torch.ones(T, T).tril() / torch.arange(1, T + 1).view(T, 1)
    harmonic = sum(1.0 / t for t in range(1, T + 1))
    assert sink.sink_scores(uniform)[0].item() == pytest.approx(harmonic / T, rel=1e-6)
    to_first = torch.zeros(T, T)
    to_first[:, 0] = 1
    assert sink.sink_scores(to_first)[0].item() == pytest.approx(1.0)
    assert (sink.sink_scores(to_first)[1:] == 0).all()


def test_sink_scores_refuse_bad_attention():
    A = random_causal_attention((1,), 5)
    with pytest.raises(ValueError, match="causal"):
        sink.sink_scores(A.transpose(-1, -2))
    with pytest.raises(ValueError, match="probability"):
        sink.sink_scores(A * 2)
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        sink.sink_scores(torch.ones(3, 4) / 4)


def test_sink_rates_count_strictly_above_eps_overall_and_per_layer():
    alpha = torch.tensor([[[0.31, 0.30], [0.9, 0.1]], [[0.2, 0.5], [0.4, 0.3]]])      # (N=2, L=2, H=2)
    r = sink.sink_rates(alpha, 0.3)
    assert r["rate"] == pytest.approx(100 * 4 / 8)
    assert r["per_layer"] == pytest.approx([100 * 2 / 4, 100 * 2 / 4])
    model = build(get_config("tiny", n_layer=2, n_head=2, n_embd=16, vocab_size=32, attention="uniform"), 0)
    h8 = sum(1.0 / t for t in range(1, 9)) / 8                                    # 0.3396 for every head
    tokens = torch.randint(0, 32, (3, 8))
    assert sink.sink_rate(model, tokens, eps=h8 - 1e-4) == 100.0 and sink.sink_rate(model, tokens, eps=h8 + 1e-4) == 0.0


def test_attention_mass_of_uniform_attention_in_closed_form():
    """Uniform attention gives query t (1-indexed, t >= 2) 1/t on each key: the first token and itself take
    1/t each, its previous token 1/t from t = 3 on (at t = 2 it is the first token), the rest (t - 3)/t."""
    T = 12
    model = build(get_config("tiny", n_layer=1, n_head=2, n_embd=16, vocab_size=32, block_size=T,
                             attention="uniform"), 0)
    row = sink.attention_mass(model, torch.randint(0, 32, (4, T)))[0]
    ts = np.arange(2, T + 1)
    assert (row["first"], row["self"], row["previous"], row["rest"]) == pytest.approx(
        (np.mean(1 / ts), np.mean(1 / ts), np.mean([(t > 2) / t for t in ts]),
         np.mean([max(t - 3, 0) / t for t in ts])))



def test_attention_mass_counts_what_softmax1_gives_to_no_token():
    """With q = k = 0 every logit is 0, so softmax + 1 gives query t 1/(t + 1) on each of its t keys and
    1/(t + 1) to the extra zero logit: the "none" column, which plain softmax leaves at 0."""
    T, n = 12, 16
    model = build(get_config("tiny", n_layer=1, n_head=2, n_embd=n, vocab_size=32, block_size=T,
                             attention="softmax1"), 0)
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.weight[:2 * n].zero_()          # the q and k rows of W_qkv
        model.transformer.h[0].attn.c_attn.bias[:2 * n].zero_()
    row = sink.attention_mass(model, torch.randint(0, 32, (4, T)))[0]
    ts = np.arange(2, T + 1)
    assert (row["first"], row["self"], row["previous"], row["rest"], row["none"]) == pytest.approx(
        (np.mean(1 / (ts + 1)), np.mean(1 / (ts + 1)), np.mean([(t > 2) / (t + 1) for t in ts]),
         np.mean([max(t - 3, 0) / (t + 1) for t in ts]), np.mean(1 / (ts + 1))))

def test_a_bf16_model_is_measured_in_float32():
    """bf16 probabilities would fail the metric's own row-sum check at T = 256; the metric takes them in fp32."""
    cfg = get_config("tiny", n_layer=2, n_embd=32, n_head=2, vocab_size=64, block_size=256)
    model = build(cfg, 1).eval()
    tokens = torch.randint(0, 64, (2, 256))
    fp32 = sink.key_scores(model, tokens)
    bf16 = sink.key_scores(model.to(torch.bfloat16), tokens)
    assert bf16.dtype == torch.float32 and torch.allclose(bf16, fp32, atol=0.02)


# ----------------------------------------------------------------------------- where the first token differs

@pytest.mark.parametrize("calibration", ["none", "amplify", "attenuate"])
def test_calibration_flattens_position_variance(calibration):
    """Uniform attention on iid token embeddings: var at position t is var(1) / t (theory.attn0_variance);
    amplification (x sqrt t) and attenuation (x sqrt(t / T)) make it flat."""
    T = 32
    cfg = get_config("tiny", n_layer=1, n_head=4, n_embd=64, vocab_size=4096, block_size=T, attention="uniform",
                     norm="none", position="none", calibration=calibration)
    model = build(cfg, 3)
    x = torch.randint(0, 4096, (512, T), generator=torch.Generator().manual_seed(0))
    var = probe.position_variance(model, x, batch_size=128)[0]
    rel = 4 * math.sqrt(2 / (512 * 64))          # ~4 standard errors of a variance from 512 x 64 values
    t = np.arange(1, T + 1)
    factor = {"none": np.ones(T), "amplify": t, "attenuate": t / T}[calibration]     # scale of the variance
    expected = theory.attn0_variance(t, 1, sigma2=var[0] / factor[0]) * factor
    assert np.allclose(var, expected, rtol=rel * 1.5)


def planted_sink_model(beta=60.0):
    """Two layers in which a layer-2 key is large when its layer-1 attention output did not average.
    Residual dims: 0 constant 1, 1 the detector, 2-5 the token's four random signs (the 16 tokens are
    the 16 sign patterns), 6-9 their running means. Layer 1 attends uniformly (W_Q = W_K = 0) and
    writes the running mean of the signs into 6-9; its ReLU MLP writes sum_j |mean_j| into dim 1
    (relu(m) + relu(-m) = |m|); layer 2's query is beta x dim 0 and its key reads dim 1. Position 1
    has |mean_j| = 1 for every j, later positions shrink like 1/sqrt(t): the first token is a sink
    because it aggregates nothing -- the paper's structural reason, built by hand."""
    cfg = get_config("tiny", n_layer=2, n_head=1, n_embd=10, vocab_size=16, block_size=64, position="none",
                     norm="none", bias=False, activation="relu", mlp_hidden=8, tie_embeddings=False)
    model = build(cfg, 0)
    d = 10
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        patterns = torch.tensor([[1.0 if (v >> j) & 1 else -1.0 for j in range(4)] for v in range(16)])
        model.transformer.wte.weight[:, 0] = 1.0
        model.transformer.wte.weight[:, 2:6] = patterns
        a1, m1, a2 = model.transformer.h[0].attn, model.transformer.h[0].mlp, model.transformer.h[1].attn
        for j in range(4):
            a1.c_attn.weight[2 * d + 6 + j, 2 + j] = 1.0      # v[6+j] = sign j
            a1.c_proj.weight[6 + j, 6 + j] = 1.0              # residual dim 6+j += running mean
            m1.c_fc.weight[2 * j, 6 + j], m1.c_fc.weight[2 * j + 1, 6 + j] = 1.0, -1.0
            m1.c_proj.weight[1, 2 * j] = m1.c_proj.weight[1, 2 * j + 1] = 1.0
        a2.c_attn.weight[0, 0] = beta                          # q[0] = beta
        a2.c_attn.weight[d + 0, 1] = 1.0                       # k[0] = sum_j |mean_j|
    return model


def test_super_neurons_rank_by_weight_norm_and_measure_first_token_firing():
    model = planted_sink_model()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[3] *= 5        # unit 3: the largest input weights
    x = torch.randint(0, 16, (8, 32), generator=torch.Generator().manual_seed(0))
    rows = sink.super_neurons(model, x, top=2)
    assert rows[0]["units"][0] == 3
    # the independent computation: layer 1's MLP hidden activations, by hand from the residual stream
    h = model.trace(x, hidden="all")["hidden"][1]                          # after block 1's attention + MLP...
    a1 = model.transformer.h[0].attn(model.transformer.h[0].ln_1(model.transformer.wte(x)))
    pre = torch.relu(model.transformer.h[0].mlp.c_fc(model.transformer.wte(x) + a1)).abs()
    ratio = pre[:, 0, 3].mean() / pre[:, 1:, 3].mean()
    assert rows[0]["first_over_rest"][0] == pytest.approx(ratio.item(), rel=1e-5) and ratio > 1.5
    assert h.shape == (8, 32, 10)


def test_dimension_disparity_and_massive_activations_against_direct_reads():
    h = torch.tensor([[1.0, -1.0, 1.0, -9.0]])
    assert sink.dimension_disparity(h).item() == pytest.approx(9 / 3)
    model = planted_sink_model()
    x = torch.randint(0, 16, (2, 8))
    rows = sink.massive_activations(model, x)
    states = model.trace(x, hidden="all")["hidden"]
    for row, s in zip(rows, states):
        a = s.abs()
        assert row["top"] == pytest.approx(a.max().item()) and row["median"] == pytest.approx(a.median().item())
        assert a[:, row["top_position"] - 1].max() == a.max()


# ----------------------------------------------------------------------------- interventions

def test_mask_edit_makes_token_k_compute_like_a_first_token():
    """With the edit, token k aggregates nothing in any layer; under RoPE (relative positions) its
    residual stream is then exactly the first token's of the sequence that starts at k."""
    cfg = get_config("tiny", n_layer=3, tie_embeddings=False)
    model = build(cfg, 5)
    x = torch.randint(0, cfg.vocab_size, (4, 24), generator=torch.Generator().manual_seed(1))
    k = 10
    edited = model.trace(x, hidden="all", attn_mask=sink.self_only_mask(24, k))["hidden"]
    shifted = model.trace(x[:, k - 1:], hidden="all")["hidden"]
    plain = model.trace(x, hidden="all")["hidden"]
    for e, s, p in zip(edited[1:], shifted[1:], plain[1:]):
        assert torch.allclose(e[:, k - 1], s[:, 0], atol=1e-5)
        assert not torch.allclose(p[:, k - 1], s[:, 0], atol=1e-3)     # without the edit it does not
        assert torch.allclose(e[:, :k - 1], p[:, :k - 1], atol=1e-6)   # earlier tokens are untouched


def test_mask_edit_turns_token_k_into_a_sink():
    model = planted_sink_model()
    T, k = 64, 40
    x = torch.randint(0, 16, (64, T), generator=torch.Generator().manual_seed(0))
    before = sink.key_scores(model, x)[:, 1, 0]                     # layer 2, (N, T)
    after = sink.key_scores(model, x, attn_mask=sink.self_only_mask(T, k))[:, 1, 0]
    assert (before[:, 0] > 0.3).float().mean() > 0.9                 # the planted first-token sink
    assert (before[:, k - 1] > 0.3).float().mean() < 0.05
    assert (after[:, k - 1] > 0.3).float().mean() > 0.9              # token k becomes one too


@pytest.mark.parametrize("mu", ["batch", "sequence", "zero"])
def test_amplification_hook_edits_only_token_k_around_its_mean(mu):
    model = planted_sink_model()
    x = torch.randint(0, 16, (4, 16))
    seen = {}
    w_o = model.transformer.h[0].attn.c_proj
    w_o.register_forward_pre_hook(lambda m, i: seen.setdefault("o", i[0].clone()))
    handle = w_o.register_forward_pre_hook(sink.amplify_hook(5, 3.0, mu))
    w_o.register_forward_hook(lambda m, i, out: seen.setdefault("edited", i[0].clone()))
    model.trace(x)
    handle.remove()
    o, e = seen["o"], seen["edited"]
    m = {"batch": o[:, 4].mean(0), "sequence": o.mean(1), "zero": torch.zeros_like(o[:, 4])}[mu]
    assert torch.allclose(e[:, 4], m + 3.0 * (o[:, 4] - m))
    assert torch.equal(torch.cat([e[:, :4], e[:, 5:]], 1), torch.cat([o[:, :4], o[:, 5:]], 1))
    with pytest.raises(ValueError, match="mu"):
        sink.amplify_hook(5, 3.0, "median")


# ----------------------------------------------------------------------------- inputs

def test_random_tokens_windows_bos_and_id_files(tmp_path):
    r = sink.random_tokens(50, 4, 10, seed=0, bos=7)
    assert r.shape == (4, 10) and (r[:, 0] == 7).all() and torch.equal(r[:, 1:], sink.random_tokens(50, 4, 9, seed=0))
    stream = np.arange(100)
    w = sink.windows(stream, 10, 5, seed=0)
    assert w.shape == (5, 10) and all((row.numpy() % 10 == np.arange(10)).all() for row in w)   # aligned slots
    assert (sink.windows(stream, 10, 5, seed=0, bos=99)[:, 0] == 99).all()
    with pytest.raises(ValueError, match="0 windows of 1000"):
        sink.windows(stream, 1000, 5)
    with pytest.raises(ValueError, match="3 windows of 30, fewer than the 5"):   # 100 // 30 = 3
        sink.windows(stream, 30, 5)
    np.save(tmp_path / "ids.npy", np.arange(12).reshape(3, 4))
    np.arange(7, dtype=np.uint16).tofile(tmp_path / "ids.bin")
    assert sink.read_ids(str(tmp_path / "ids.npy")).tolist() == list(range(12))
    assert sink.read_ids(str(tmp_path / "ids.bin")).tolist() == list(range(7))
    with pytest.raises(FileNotFoundError, match="token-id file"):
        sink.read_ids(str(tmp_path / "nope.npy"))


def _tokenizer_json(path, words):
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(path, "tokenizer.json"))


def test_measure_a_llama_directory_on_its_own_tokenizer_with_bos(tmp_path):
    """A Hugging Face LLaMA directory, its tokenizer.json, text and BOS: the command line end to end, the
    windows checked against the tokenizer's own ids."""
    spec, cfg, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path / "llama", cfg, t)
    words = ["<unk>", "<s>"] + [f"w{i}" for i in range(60)]
    _tokenizer_json(tmp_path / "llama", words)
    (tmp_path / "t.txt").write_text(" ".join(f"w{(i * 7) % 60}" for i in range(3000)))
    sink.main([str(tmp_path / "llama"), "--text", str(tmp_path / "t.txt"), "--bos", "on", "--sequences", "6",
               "--lengths", "16", "32", "--out", str(tmp_path / "out")])
    res = json.load(open(tmp_path / "out" / "results.json"))["measure"]
    assert set(res["rates"]) == {"16", "32"} and len(res["rates"]["16"]["per_layer"]) == spec["L"]
    assert len(res["massive_activations"]) == spec["L"] + 1 and len(res["super_neurons"]) == spec["L"]

    class Args:
        text, ids, tokenizer, bos, sequences, data_seed = str(tmp_path / "t.txt"), None, None, True, 6, 1234
        data_from = None
    from model import GPT
    tokens = sink.model_inputs(Args, GPT.from_pretrained(str(tmp_path / "llama")), str(tmp_path / "llama"), 16)
    assert (tokens[:, 0] == cfg["bos_token_id"]).all()
    assert all(words[int(i)].startswith("w") for i in tokens[:, 1:].flatten())


# ----------------------------------------------------------------------------- the testbed's task

def test_bigram_backcopy_copies_after_every_trigger():
    vocab, triggers = 32, 3
    x, logp = sink.bigram_backcopy(20000, vocab, triggers, seed=1)
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
    x, logp = sink.bigram_backcopy(400_000, V, k, successors=0, seed=3)
    h_plain = -q * math.log(q / k) - (1 - q) * math.log((1 - q) / (V - k))
    assert -logp.mean() == pytest.approx(h_plain / (1 + q), abs=0.01)
    assert (x[np.flatnonzero(x[:-1] >= V - k) + 1] < V - k).all()
    x, logp = sink.bigram_backcopy(400_000, V, k, successors=3, seed=4)
    assert -logp.mean() == pytest.approx(empirical_entropy_given_two(x, V), abs=0.01)


def test_documents_restart_the_chain_and_never_copy_across():
    x, logp = sink.bigram_backcopy(32 * 400, 16, 4, successors=0, seed=5, doc_len=32)
    docs, lp = x.reshape(400, 32), logp.reshape(400, 32)
    assert (docs[:, 0] < 12).all() and np.allclose(lp[:, 0], -math.log(12))    # a fresh plain token opens each
    assert len(set(docs[:, 0].tolist())) > 6


def test_bigram_induction_copies_what_followed_the_previous_trigger():
    vocab, triggers, recall = 32, 3, 16
    x, _ = sink.bigram_backcopy(20000, vocab, triggers, seed=2, recall=recall)
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
    """--exp calibration as a GPU run uses it: training data already tokenized (a train.py directory), the
    evaluation text as token ids, micro-batches. Each variant's sink rates must be the metric of its own
    checkpoint on the --ids windows, and its perplexity the checkpoint's loss on them, recomputed here."""
    import train
    from common import load_model
    (tmp_path / "train.txt").write_text("the cat sat on the mat; the dog sat on the log.\n" * 600)
    data = str(tmp_path / "data")
    train.prepare([str(tmp_path / "train.txt")], data, tokenizer="bytes")
    ids = np.frombuffer(("a mat, a log, a cat. " * 100).encode(), dtype=np.uint8).astype(np.int64)
    np.save(tmp_path / "eval.npy", ids)
    out = tmp_path / "out"
    argv = ["--exp", "calibration", "--train_text", data, "--ids", str(tmp_path / "eval.npy"), "--variants",
            "baseline", "attenuate", "--steps", "4", "--batch_size", "4", "--micro_batch", "2", "--n_layer", "1",
            "--n_embd", "32", "--n_head", "2", "--block_size", "32", "--lengths", "8", "16", "--sequences", "10",
            "--device", "cpu", "--out", str(out)]
    sink.main(argv)
    res = json.loads((out / "results.json").read_text())["calibration"]
    assert sorted(res) == ["attenuate", "baseline"]
    for name, r in res.items():
        ckpt = torch.load(r["checkpoint"], weights_only=False, map_location="cpu")
        assert ckpt["args"]["data"] == data and ckpt["args"]["micro_batch"] == 2
        model = load_model(r["checkpoint"]).eval()
        for T in (8, 16):
            assert r["rates"][str(T)] == sink.sink_rate(model, sink.windows(ids, T, 10, 1234))
        x = sink.windows(ids, 16, 10, 1)
        with torch.no_grad():
            loss = np.mean([model(x[i:i + 16, :-1], x[i:i + 16, 1:])[1].item() for i in range(0, len(x), 16)])
        assert r["ppl"] == pytest.approx(math.exp(loss), rel=1e-6)
    # the trained runs are reused; a loss that is not finite on the evaluation text is refused, not a perplexity
    import model as model_module
    monkeypatch.setattr(model_module.F, "cross_entropy", lambda *a, **k: torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match="baseline: non-finite loss on the evaluation text"):
        sink.main(argv)


# ----------------------------------------------------------------------------- where a sink lives; seeds; pairs

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
    probes = sink.position_table_probes(model, tokens, ks=(5, 9))
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
    where = sink.token_probes(model, tokens, 16)
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
    res = sink.paired(list(base), list(other))
    lo, hi = stats.ttest_rel(other, base).confidence_interval(0.95)
    assert (res["low"], res["high"], res["mean"]) == pytest.approx((lo, hi, d.mean()))
    up = int((d > 0).sum())
    naive = min(1.0, 2 * min(sum(math.comb(12, j) for j in range(0, up + 1)),
                             sum(math.comb(12, j) for j in range(up, 13))) / 2 ** 12)
    assert res["sign_p"] == pytest.approx(naive) and res["up"] + res["down"] == 12
    mean, low, high = sink.interval(base)
    assert (low, high) == pytest.approx(stats.ttest_1samp(base, 0).confidence_interval(0.95))
    hits = sum(stats.ttest_1samp(rng.normal(res["detectable"], d.std(ddof=1), 12), 0).pvalue < 0.05
               for _ in range(4000))
    assert 0.75 < hits / 4000 < 0.85


def test_the_testbed_reports_intervals_probes_and_pairs_over_seeds(tmp_path):
    """A tiny testbed run (2 seeds, 2 variants): each summary is the mean and t interval of its per-seed values,
    every baseline reports where its sink lives, and the paired table is built seed by seed."""
    out = tmp_path / "out"
    sink.main(["--exp", "testbed", "--variants", "baseline", "attenuate", "--seeds", "0", "1", "--steps", "8",
               "--batch_size", "8", "--testbed_tokens", "80000", "--sequences", "64", "--device", "cpu",
               "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["testbed"]
    for name, v in res["variants"].items():
        rates = [r["rate"] for r in v["runs"]]
        assert [r["seed"] for r in v["runs"]] == [0, 1]
        assert (v["rate"]["mean"], v["rate"]["low"], v["rate"]["high"]) == pytest.approx(sink.interval(rates))
    base = res["variants"]["baseline"]["runs"]
    assert all("p1 <-> p5: p5" in r["where"] and "p5 = token 1" in r["where"] for r in base)
    att = res["variants"]["attenuate"]["runs"]
    assert res["paired"]["attenuate"]["rate"]["mean"] == pytest.approx(np.mean([a["rate"] - b["rate"]
                                                                               for a, b in zip(att, base)]))
    assert "where" not in att[0]
