"""sink.py: the metric against naive loops and closed forms, the interventions on hand-built models,
inputs (random, text, ids, BOS), measurements on real-format checkpoints."""
import json
import math

import numpy as np
import pytest
import torch

import sink
import theory
from init import build
from model import get_config
import hf
from conftest import llama_family, write_hf, write_tokenizer_json


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
    var = sink.position_variance(model, x, batch_size=128)[0]
    rel = 4 * math.sqrt(2 / (512 * 64))          # ~4 standard errors of a variance from 512 x 64 values
    t = np.arange(1, T + 1)
    factor = {"none": np.ones(T), "amplify": t, "attenuate": t / T}[calibration]     # scale of the variance
    expected = theory.attn0_variance(t, 1, sigma2=var[0] / factor[0]) * factor
    assert np.allclose(var, expected, rtol=rel * 1.5)


def test_position_variance_refuses_one_sequence():
    """A variance across one sequence is undefined: refused, never reported as zero."""
    model = build(get_config("tiny", n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=8), 0)
    with pytest.raises(ValueError, match="two or more sequences"):
        sink.position_variance(model, torch.randint(0, 64, (1, 8)))


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


def test_measure_a_llama_directory_on_its_own_tokenizer_with_bos(tmp_path):
    """A Hugging Face LLaMA directory, its tokenizer.json, text and BOS: the command line end to end, the
    windows checked against the tokenizer's own ids."""
    spec, cfg, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path / "llama", cfg, t)
    words = ["<unk>", "<s>"] + [f"w{i}" for i in range(60)]
    write_tokenizer_json(tmp_path / "llama", words)
    (tmp_path / "t.txt").write_text(" ".join(f"w{(i * 7) % 60}" for i in range(3000)))
    sink.main([str(tmp_path / "llama"), "--text", str(tmp_path / "t.txt"), "--bos", "on", "--sequences", "6",
               "--lengths", "16", "32", "--out", str(tmp_path / "out")])
    res = json.load(open(tmp_path / "out" / "results.json"))["measure"]
    assert set(res["rates"]) == {"16", "32"} and len(res["rates"]["16"]["per_layer"]) == spec["L"]
    assert len(res["massive_activations"]) == spec["L"] + 1 and len(res["super_neurons"]) == spec["L"]

    class Args:
        text, ids, tokenizer, bos, sequences, data_seed = str(tmp_path / "t.txt"), None, None, True, 6, 1234
        data_from, model_path = None, str(tmp_path / "llama")
    stored = hf.read(Args.model_path)
    tokens = sink.input_tokens(Args, hf.load(stored), sink.input_stream(Args, stored), 16, sink.bos_token_id(stored))
    assert (tokens[:, 0] == cfg["bos_token_id"]).all()
    assert all(words[int(i)].startswith("w") for i in tokens[:, 1:].flatten())


def test_interventions_and_variance_run_through_the_command_line_and_point_the_papers_way(tmp_path):
    """--exp interventions and --exp variance on a small checkpoint, as a user runs them: the mask edit raises
    alpha_k in every layer (token k then attends only to itself, as the first token does); amplification by 1
    changes nothing (it is the identity); at birth the first position is the variance outlier of every layer
    (Eq. 2: it averages nothing), and the table's ratio is its variance over the others' median."""
    from model import write_checkpoint
    path = str(tmp_path / "m.pt")
    write_checkpoint(path, build(get_config("tiny", n_layer=3, n_embd=128, n_head=4), 0), tokenizer="bytes")
    sink.main([path, "--exp", "interventions", "--lengths", "32", "--sequences", "16", "--k", "8", "16",
               "--layer", "0", "--lambdas", "1", "4", "--out", str(tmp_path / "out")])
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["interventions"]["runs"]
    for k, run in runs.items():
        assert all(e > b for e, b in zip(run["mask_edit"], run["baseline"])), k
        assert run["amplify x1"] == pytest.approx(run["baseline"], rel=1e-5)
        assert run["scale x1"] == pytest.approx(run["baseline"], rel=1e-5)
    sink.main([path, "--exp", "variance", "--lengths", "32", "--sequences", "32", "--out", str(tmp_path / "var")])
    res = json.loads((tmp_path / "var" / "results.json").read_text())["variance"]
    for row, var in zip(res["layers"], res["variance"]):
        assert row["first_is_max"] and row["first_over_rest"] > 2
        assert row["first_over_rest"] == pytest.approx(var[0] / np.median(var[1:]))


def test_a_mixture_of_experts_is_measured_as_its_dense_twin_where_its_experts_are_one(tmp_path):
    """sink.py on a MoE checkpoint, as a user runs it: a MoE whose experts are all one dense model's MLP
    (studies.edits.upcycle, its k weights renormalized) computes that model's function, so its sink rates, alpha_1,
    massive activations and Eq. 2's variances by layer are the dense checkpoint's (within float32's rounding); its
    super neurons are left out (an expert's units see only the tokens routed to it), the dense model's are not."""
    from model import write_checkpoint
    from studies.edits import upcycle
    dense = build(get_config("tiny", n_layer=3, n_embd=128, n_head=4), 0).eval()
    results = {}
    for name, model in (("dense", dense), ("moe", upcycle(dense, 4, 2, seed=1))):
        path = str(tmp_path / f"{name}.pt")
        write_checkpoint(path, model, tokenizer="bytes")
        for exp in ("measure", "variance"):
            out = tmp_path / f"{name}_{exp}"
            sink.main([path, "--lengths", "32", "--sequences", "16", "--out", str(out)]
                      + (["--exp", exp] if exp != "measure" else []))
            results[name, exp] = json.loads((out / "results.json").read_text())
    d, m = results["dense", "measure"]["measure"], results["moe", "measure"]["measure"]
    assert m["rates"]["32"]["per_layer"] == d["rates"]["32"]["per_layer"]
    assert m["rates"]["32"]["mean_alpha_1"] == pytest.approx(d["rates"]["32"]["mean_alpha_1"], rel=1e-5)
    for a, b in zip(d["massive_activations"], m["massive_activations"], strict=True):
        assert b["top"] == pytest.approx(a["top"], rel=1e-4) and b["top_position"] == a["top_position"]
    assert len(d["super_neurons"]) == 3 and m["super_neurons"] == []
    assert np.allclose(results["moe", "variance"]["variance"]["variance"],
                       results["dense", "variance"]["variance"]["variance"], rtol=1e-4)
