"""model.py against independent computations: causality, SDPA vs explicit softmax vs a naive
loop, RoPE vs complex-number rotation, calibration vs the 1/sqrt(t) law, hand-counted parameters."""
import itertools
import math
import os
import shutil

import pytest
import torch

from init import build, init_weights
from model import CHOICES, GPT, GPTConfig, PRESETS, SOFTPICK_EPS, apply_rope, get_config, qkv_sizes, rope_tables
from data import check_token_ids

torch.set_num_threads(2)


def tiny(**kw) -> GPTConfig:
    base = dict(n_layer=2, n_head=2, n_embd=16, vocab_size=32, block_size=12, mlp_hidden=24)
    base.update(kw)
    return GPTConfig(**base)


def test_causality_every_combination_of_knobs():
    """Changing token j never changes anything at positions < j, and does change position j.
    Information can cross positions only through attention, so every combination of the knobs that
    shape it (and of the sublayers and residual around it) is built; the knobs that act on each
    position alone (norm, activation, biases, tying, calibration, head-wise RMSNorm) cycle through all
    their values across those models, as do the sink controls (softmax1, softpick, a learned sink logit,
    the output gate) across the softmax ones. Both attention paths are checked: SDPA, and the explicit one
    that probes use."""
    T, j = 7, 4
    idx = torch.randint(0, 32, (2, T), generator=torch.Generator().manual_seed(0))
    idx2 = idx.clone()
    idx2[:, j] = (idx2[:, j] + 1) % 32
    both = torch.cat([idx, idx2])
    crossing = dict(position=CHOICES["position"], attention=("softmax", "uniform"), qk_norm=("none", "head"),
                    n_kv_head=(None, 1), sliding_window=(None, 3), sublayers=CHOICES["sublayers"],
                    residual=(True, False))
    local = dict(norm=CHOICES["norm"], activation=CHOICES["activation"], bias=(True, False), qkv_bias=(False, True),
                 tie_embeddings=(True, False), calibration=CHOICES["calibration"], head_norm=(False, True))
    controls = ({}, dict(attention="softmax1"), dict(attention="softpick"), dict(attn_sink=True), dict(attn_gate=True))
    # the families' knobs, cycled across the models where they make sense (a refused combination is skipped)
    families = ({}, dict(qk_norm="all"), dict(attn_softcap=2.0, logit_softcap=3.0), dict(attn_scale=0.5),
                dict(parallel_residual=True), dict(norm_position="post"), dict(norm_position="sandwich"),
                dict(embed_scale=4.0), dict(rope_dims=4), dict(sliding_layers="sf", rope_local_theta=50.0),
                dict(n_experts=3, experts_per_token=2, shared_expert=8, moe_layers="md"))
    failures, tried = [], set()
    for i, values in enumerate(itertools.product(*crossing.values())):
        knobs = dict(zip(crossing, values), **{k: v[i % len(v)] for k, v in local.items()})
        if knobs["attention"] == "softmax":
            knobs.update(controls[(i // 2) % len(controls)])
        extra = families[(i // 3) % len(families)]
        try:
            tiny(**{**knobs, **extra})
            knobs.update(extra)
            tried.add(tuple(extra.items()))
        except ValueError:
            pass
        model = init_weights(GPT(tiny(**knobs)), seed=1).eval()
        with torch.no_grad():
            for p in model.parameters():      # scale up: every path carries signal well above float noise
                if p.dim() == 2:
                    p.mul_(20)
            for explicit in (False, True):
                hidden = model.trace(both, hidden="all", attn_probs=explicit)["hidden"]
                if any(not torch.equal(h[:2, :j], h[2:, :j]) for h in hidden):
                    failures.append(("past changed", explicit, knobs))
                if torch.equal(hidden[-1][:2, j], hidden[-1][2:, j]):
                    failures.append(("position j unchanged", explicit, knobs))
    assert not failures, failures[:3]
    assert len(tried) == len(families)                    # every family knob was built into some models


@pytest.mark.parametrize("kw", [dict(), dict(n_kv_head=1, position="rope"),
                                dict(position="learned", qkv_bias=True, bias=False),
                                dict(calibration="attenuate", head_norm=True, norm="rmsnorm", activation="swiglu"),
                                dict(attn_scale=0.3, qk_norm="all", norm="rmsnorm_1p", activation="geglu_tanh"),
                                dict(parallel_residual=True, norm_position="sandwich", embed_scale=3.0),
                                dict(sliding_window=5, sliding_layers="sf", rope_local_theta=100.0, rope_dims=4),
                                dict(norm_position="post", qk_norm="head", logit_softcap=2.0)])
def test_explicit_softmax_path_equals_sdpa(kw):
    model = build(tiny(**kw), seed=3)
    idx = torch.randint(0, 32, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain, _ = model(idx, idx)                                  # SDPA path, all positions
        out = model.trace(idx, hidden="all", attn_probs=True)       # explicit softmax path
        out["logits"] = model.unembed(out["hidden"][-1])
    torch.testing.assert_close(out["logits"], plain, rtol=1e-5, atol=1e-5)
    probs = out["attn_probs"][0]
    assert probs.shape == (3, 2, 12, 12)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 2, 12))
    assert torch.all(probs.triu(1) == 0)


def test_uniform_attention_is_a_naive_running_mean_of_values():
    cfg = tiny(attention="uniform", norm="none", n_layer=1, sublayers="attn", bias=True, n_kv_head=1)
    model = build(cfg, seed=5)
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.bias.normal_()   # nonzero value bias: the mean must include it
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model.trace(embeds=x, head_out=True, hidden="all")
        attn = model.transformer.h[0].attn
        H, hd = cfg.n_head, cfg.head_dim
        W, bvec = attn.c_attn.weight, attn.c_attn.bias
        Wv, bv = W.split(qkv_sizes(cfg))[2], bvec.split(qkv_sizes(cfg))[2]       # the single kv head's value rows
        expected = torch.zeros(2, H, 9, hd)
        for b in range(2):
            for t in range(9):
                mean_v = sum(x[b, s] @ Wv.T + bv for s in range(t + 1)) / (t + 1)
                for h in range(H):                                     # every head shares the kv head
                    expected[b, h, t] = mean_v
        torch.testing.assert_close(out["head_out"][0], expected, rtol=1e-5, atol=1e-6)
        y = expected.transpose(1, 2).reshape(2, 9, H * hd) @ attn.c_proj.weight.T + attn.c_proj.bias
        torch.testing.assert_close(out["hidden"][1], x + y, rtol=1e-5, atol=1e-6)


def test_rope_matches_complex_rotation_and_is_relative():
    hd, T, theta = 8, 20, 10000.0
    cos, sin = rope_tables(T, GPTConfig(n_embd=hd, n_head=1, rope_theta=theta))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, T, hd, generator=g), torch.randn(1, 1, T, hd, generator=g)
    # independent reference: pair (i, i + hd/2) as a complex number, rotate by t * theta^(-2i/hd)
    z = torch.complex(q[..., : hd // 2].double(), q[..., hd // 2:].double())
    ang = torch.arange(T).double()[:, None] * theta ** (-torch.arange(0, hd, 2).double() / hd)
    zr = z * torch.polar(torch.ones_like(ang), ang)
    torch.testing.assert_close(apply_rope(q, cos, sin).double(), torch.cat([zr.real, zr.imag], -1),
                               rtol=1e-5, atol=1e-5)
    # shift test: the same q, k vectors placed at (m, n) and at (m + s, n + s) give the same score
    qv, kv = q[0, 0, 0], k[0, 0, 0]
    rq = apply_rope(qv.expand(T, hd)[None, None], cos, sin)[0, 0]
    rk = apply_rope(kv.expand(T, hd)[None, None], cos, sin)[0, 0]
    scores = rq @ rk.T                                                 # scores[m, n]
    for m, n, s in [(5, 2, 7), (3, 3, 10), (0, 9, 4), (12, 1, 6)]:
        assert abs(scores[m, n] - scores[m + s, n + s]) < 1e-4
    assert abs(scores[5, 2] - scores[5, 3]) > 1e-3                     # ... and it does depend on m - n


def compiled_without_trig(run):
    """run() (which compiles and calls) on a fresh compiler cache; its result, once the code it generated (every
    graph) is checked to hold generated kernels and not one sin or cos."""
    import re
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    try:
        out, code = run_and_get_code(run)
    finally:
        torch._dynamo.reset()
    code = "\n".join(code)
    assert "cpp_fused" in code or "triton" in code                  # the pass really ran generated code
    assert not re.search(r"(?<![A-Za-z])(sin|cos)(?![A-Za-z])", code)
    return out


def test_compiled_pass_makes_rope_tables_outside_its_graph_and_equals_eager():
    """Under torch.compile the RoPE tables are made eagerly (GPT._ropes, which GPT.forward, train.py's step, and
    GPT.trace, the probe's and the fingerprint's pass, both call): no sin or cos is left in the generated code, where
    the compiler would fuse them into every layer's rotation and recompute them per element of q and k. A gemma3-like
    model (the sliding-window layers' own tables too): the compiled logits equal eager's. (One tiny compile: on a CPU
    inductor builds its kernels with a C++ compiler, seconds each; tests/test_gpu.py compiles a training step and the
    probe's pass on a GPU.)"""
    model = build(tiny(n_layer=2, rope_local_theta=100.0, sliding_window=4, sliding_layers="sf"), seed=0).eval()
    x = torch.randint(0, 32, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager_logits = model(x)[0]
        compiled_logits = compiled_without_trig(lambda: torch.compile(model)(x)[0])
    torch.testing.assert_close(compiled_logits, eager_logits, rtol=1e-5, atol=1e-5)


def test_nonfinite_check_reads_what_the_pass_returns():
    """A NaN at the first position: in an MLP-only stack it never reaches the last position, so a pass that returns
    the last position alone is a result, and one that returns every position is refused. With attention, block 1's
    running average carries it to the last position: refused there, naming block 1."""
    embeds = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    embeds[:, 0, 3] = float("nan")
    mlp_only = build(tiny(sublayers="mlp"), seed=0).eval()
    with torch.no_grad():
        out = mlp_only.trace(embeds=embeds, hidden="last", logits=True)
        assert all(torch.isfinite(h).all() for h in out["hidden"]) and torch.isfinite(out["logits"]).all()
        with pytest.raises(FloatingPointError, match="first in the input embeddings"):
            mlp_only.trace(embeds=embeds, hidden="all")
        with pytest.raises(FloatingPointError, match=r"first in block 1 of 2 \(read at the last position"):
            build(tiny(), seed=0).eval().trace(embeds=embeds, hidden="last")


def test_passes_refuse_once_after_the_last_as_a_check_per_pass_would():
    """trace_passes: the same outputs as trace, no refusal while the passes run, and after the last the message of a
    checked trace of the first pass that holds a NaN (its first state), not of a later pass's earlier state. An
    MLP-only stack: a NaN at the first position never reaches the last, so that pass is a result."""
    from model import raise_if_nonfinite
    model = build(tiny(sublayers="mlp"), seed=0).eval()
    clean = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    first_only, last = clean.clone(), clean.clone()
    first_only[:, 0, 3] = float("nan")
    last[1, -1, 2] = float("nan")
    with torch.no_grad():
        outs = list(model.trace_passes([dict(embeds=clean), dict(embeds=first_only)], hidden="last", logits=True))
        for out, x in zip(outs, (clean, first_only)):
            torch.testing.assert_close(out["logits"], model.trace(embeds=x, hidden="last", logits=True)["logits"])
        with pytest.raises(FloatingPointError) as checked:
            model.trace(embeds=last, hidden="last")
        seen = []
        with pytest.raises(FloatingPointError) as after:
            for out in model.trace_passes([dict(embeds=x) for x in (clean, last, clean)], hidden="last"):
                seen.append(out)
    assert len(seen) == 3 and str(after.value) == str(checked.value)
    flags = torch.tensor([[True] * 4, [True, True, False, False], [True, False, False, False]])
    with pytest.raises(FloatingPointError, match="first in block 2 of 2"):      # pass 1's first, not pass 2's
        raise_if_nonfinite(flags, n_layer=2)


def test_rope_tables_made_in_inference_mode_serve_a_training_step():
    """GPT keeps RoPE's tables once made: tables first made under torch.inference_mode (a probe's) are ordinary
    tensors, which a training step can save for its backward; a second pass at that length makes none."""
    import model as model_module
    model = build(tiny(), seed=1)
    x = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model.trace(x, hidden="last")
    made, real = [], model_module.rope_tables
    model_module.rope_tables = lambda *a, **k: made.append(a[0]) or real(*a, **k)
    try:
        model(x, x)[1].backward()
    finally:
        model_module.rope_tables = real
    assert made == [] and model.transformer.h[0].attn.c_attn.weight.grad is not None


def test_calibration_scales_each_position_exactly_with_softmax_attention():
    """Calibration multiplies the head outputs at 1-indexed position t by sqrt(t) (amplify) or
    sqrt(t / T) (attenuate) after softmax aggregation: the same weights give exactly that ratio in layer 1."""
    T = 16
    idx = torch.randint(0, 32, (3, T), generator=torch.Generator().manual_seed(2))
    heads = {c: build(tiny(block_size=T, calibration=c), seed=4).trace(idx, head_out=True)["head_out"][0]
             for c in ("none", "amplify", "attenuate")}
    t = torch.arange(1, T + 1).float().view(T, 1)
    torch.testing.assert_close(heads["amplify"], heads["none"] * t.sqrt(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(heads["attenuate"], heads["none"] * (t / T).sqrt(), rtol=1e-5, atol=1e-6)


def test_head_norm_gives_each_head_unit_rms_times_a_shared_gain():
    model = build(tiny(head_norm=True, norm="rmsnorm", norm_eps=1e-12), seed=5)     # eps negligible: RMS exactly 1
    gain = model.transformer.h[0].attn.head_norm.weight
    assert gain.shape == (model.config.head_dim,)                      # one gain of size head_dim, for all heads
    idx = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(3))
    y = model.trace(idx, head_out=True)["head_out"][0]                 # (B, H, T, hd)
    rms = y.pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        gain.copy_(torch.linspace(0.5, 2.0, len(gain)))
    y2 = model.trace(idx, head_out=True)["head_out"][0]
    torch.testing.assert_close(y2, y * torch.linspace(0.5, 2.0, len(gain)), rtol=1e-5, atol=1e-6)


def test_learned_positions_and_gqa_shapes():
    model = build(tiny(position="learned", n_kv_head=1), seed=0)
    assert model.transformer.wpe.weight.shape == (12, 16)
    assert model.transformer.h[0].attn.c_attn.weight.shape == ((2 + 2 * 1) * 8, 16)


def test_parameter_counts_by_hand():
    d, L, V = 768, 12, 50257
    # gpt2-nano: tied embedding, no position table (RoPE), biases everywhere, LayerNorm with bias
    per_layer = (2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (2 * d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert GPT(PRESETS["gpt2-nano"]).num_params() == V * d + L * per_layer + 2 * d == 123_653_376
    # llama2-nano: untied, no biases, RMSNorm gains only, SwiGLU with three 768 x 2048 matrices
    V = 32000
    per_layer = 2 * d + 4 * d * d + 3 * d * 2048
    with torch.device("meta"):
        assert GPT(PRESETS["llama2-nano"]).num_params() == 2 * V * d + L * per_layer + d == 134_105_856


def test_forward_return_forms():
    model = build(tiny(), seed=0)
    idx = torch.randint(0, 32, (2, 5))
    last, none = model(idx)
    assert last.shape == (2, 1, 32) and none is None           # nanoGPT's shape: logits[:, -1, :] works
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 5, 32) and loss.ndim == 0
    # the loss is the mean cross-entropy over all positions, computed independently here
    ref = -torch.log_softmax(logits, -1).gather(-1, idx[..., None]).mean()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(last[:, -1, :], logits[:, -1])
    out = model.trace(idx, hidden="last", logits=True)
    assert len(out["hidden"]) == 2 + 2 and out["hidden"][0].shape == (2, 16)
    torch.testing.assert_close(model.unembed(out["hidden"][-1]), out["logits"])
    out = model.trace(idx, hidden="all")
    assert "logits" not in out and out["hidden"][-1].shape == (2, 5, 16)


def test_bad_inputs_name_the_problem():
    model = build(tiny(), seed=0)
    with pytest.raises(ValueError, match="unknown preset"):
        get_config("gpt5-nano")
    with pytest.raises(ValueError, match="unknown config knob"):
        get_config("tiny", n_layers=3)
    with pytest.raises(ValueError, match="unknown norm"):
        tiny(norm="batchnorm")
    with pytest.raises(ValueError, match="divisible"):
        tiny(n_embd=15)
    with pytest.raises(ValueError, match="n_embd=16"):
        model.trace(embeds=torch.randn(1, 4, 17))
    with pytest.raises(ValueError, match="exceeds the context"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match=r"must lie in \[0, 32\)"):
        check_token_ids(torch.tensor([[1, 2, 32]]), 32)
    with pytest.raises(ValueError, match="must lie in"):
        check_token_ids(torch.tensor([[-1, 2]]), 32)
    with pytest.raises(ValueError, match="exactly one"):
        model.trace()
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.zeros(2, 3))


@pytest.mark.parametrize("attention", ["softmax", "uniform"])
def test_attn_mask_equal_to_causal_changes_nothing_and_bad_masks_are_refused(attention):
    model = build(get_config("tiny", n_layer=2, attention=attention, tie_embeddings=False), 0)
    x = torch.randint(0, 512, (2, 12))
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    a = model.trace(x, hidden="all")["hidden"]
    b = model.trace(x, hidden="all", attn_mask=causal)["hidden"]
    assert all(torch.allclose(u, v, atol=1e-5) for u, v in zip(a, b))
    with pytest.raises(ValueError, match="causal"):
        model.trace(x, attn_mask=torch.ones(12, 12, dtype=torch.bool))
    with pytest.raises(ValueError, match="no key"):
        model.trace(x, attn_mask=causal & ~torch.eye(12, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        model.trace(x, attn_mask=causal.float())


# ----------------------------------------------------------------------------- the sink controls

def naive_attention_weights(s: list, kind: str, sink: float = 0.0) -> list:
    """One query's weights over its visible keys, float64, from the formula of each mechanism."""
    e = [math.exp(v) for v in s]
    if kind == "softmax":
        return [v / sum(e) for v in e]
    if kind in ("softmax1", "sink"):
        extra = math.exp(0.0 if kind == "softmax1" else sink)
        return [v / (extra + sum(e)) for v in e]
    return [max(v - 1, 0.0) / (sum(abs(w - 1) for w in e) + SOFTPICK_EPS) for v in e]    # softpick


@pytest.mark.parametrize("knobs,kind", [(dict(attention="softmax1"), "softmax1"), (dict(attn_sink=True), "sink"),
                                        (dict(attention="softpick"), "softpick"), (dict(attn_gate=True), "softmax")])
def test_sink_controls_match_their_formulas_query_by_query(knobs, kind):
    cfg = get_config("tiny", n_layer=1, n_head=2, n_embd=16, vocab_size=40, block_size=9, position="none",
                     sublayers="attn", norm="none", bias=True, **knobs)
    model = build(cfg, 3)
    g = torch.Generator().manual_seed(1)      # its own generator: the test does not depend on what ran before
    with torch.no_grad():
        for p in model.parameters():          # weights large enough that softpick zeroes some keys
            p.mul_(8) if p.dim() == 2 else p.normal_(0, 0.5, generator=g)
    x = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(0))
    model.requires_grad_(False)
    out = model.trace(x, hidden="all", attn_probs=True)
    probs, got = out["attn_probs"][0].double(), out["hidden"][1] - out["hidden"][0]
    a = model.transformer.h[0].attn
    e = model.transformer.wte.weight[x].double()
    q, k, v = (e @ a.c_attn.weight.double().T + a.c_attn.bias.double()).split(16, -1)
    H, hd = 2, 8
    zeroed = 0
    for b in range(2):
        for t in range(9):
            y = []
            for h in range(H):
                sl = slice(h * hd, (h + 1) * hd)
                s = [float(q[b, t, sl] @ k[b, j, sl]) / math.sqrt(hd) for j in range(t + 1)]
                w = naive_attention_weights(s, kind, float(a.sink[h]) if cfg.attn_sink else 0.0)
                zeroed += sum(wj == 0 for wj in w)
                assert probs[b, h, t, :t + 1].tolist() == pytest.approx(w, abs=1e-5)
                assert probs[b, h, t, t + 1:].abs().sum() == 0
                yh = sum(wj * v[b, j, sl] for j, wj in enumerate(w))
                if cfg.attn_gate:
                    gate = e[b, t] @ a.c_gate.weight.double().T + a.c_gate.bias.double()
                    yh = yh * torch.sigmoid(gate[sl])
                y.append(yh)
            want = torch.cat(y) @ a.c_proj.weight.double().T + a.c_proj.bias.double()
            assert got[b, t].double().tolist() == pytest.approx(want.tolist(), abs=1e-4)
    if kind == "softpick":
        assert zeroed > 0                     # the rectification was exercised
    if not cfg.rows_sum_to_one:
        assert probs.sum(-1).max() <= 1 + 1e-6 and probs.sum(-1).min() < 0.99


def test_attn_sink_needs_plain_softmax():
    with pytest.raises(ValueError, match="attn_sink"):
        get_config("tiny", attn_sink=True, attention="softpick")


def test_a_weight_that_overflows_the_asked_dtype_is_refused(tmp_path):
    """hf.load checks a checkpoint's weights finite as stored and again as cast: 1e5 is finite in float32
    and inf in float16 (largest 65504)."""
    from hf import load as load_model
    from model import write_checkpoint
    model = build(get_config("tiny", n_layer=1), 0)
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[0, 0] = 1e5
    write_checkpoint(str(tmp_path / "c.pt"), model)
    assert load_model(tmp_path / "c.pt", dtype=torch.bfloat16).transformer.h[0].mlp.c_fc.weight[0, 0] > 9e4
    with pytest.raises(ValueError, match="c_fc.weight holds 1 NaN/inf value"):
        load_model(tmp_path / "c.pt", dtype=torch.float16)


FLOP_CASES = {"gpt2 (biases, tied)": ("gpt2-nano", {}), "llama (untied, GQA)": ("llama2-nano", dict(n_kv_head=2)),
              "head_size 8, GQA": ("llama2-nano", dict(head_size=8, n_kv_head=2)),
              "gated": ("tiny", dict(attn_gate=True)), "learned positions": ("tiny", dict(position="learned")),
              "attention only": ("tiny", dict(sublayers="attn")),
              "MLP only": ("tiny", dict(sublayers="mlp")), "uniform": ("tiny", dict(attention="uniform")),
              "sliding window 8": ("llama2-nano", dict(sliding_window=8)),
              "self-only position 20, window 8": ("llama2-nano", dict(sliding_window=8, self_only=20)),
              "window 8 on layer 2 only": ("llama2-nano", dict(sliding_window=8, sliding_layers="fs")),
              "soft-capped (explicit path)": ("tiny", dict(attn_softcap=5.0, logit_softcap=5.0)),
              "Pythia-like": ("tiny", dict(parallel_residual=True, rope_dims=8, norm_bias=True, bias=False,
                                           mlp_bias=True)),
              "OLMo-2-like": ("llama2-nano", dict(norm_position="post", qk_norm="all")),
              "Gemma-like": ("llama2-nano", dict(norm="rmsnorm_1p", norm_position="sandwich", qk_norm="head",
                                                 activation="geglu_tanh", head_size=24, embed_scale=8.0)),
              "mixture of experts, k 2 of 4, shared, one dense layer": ("tiny", dict(
                  activation="swiglu", n_experts=4, experts_per_token=2, expert_hidden=48, shared_expert=32,
                  moe_layers="dm"))}


@pytest.mark.parametrize("case", list(FLOP_CASES))
def test_forward_flops_count_what_torch_counts(case):
    """model.forward_flops (behind probe.py's and seedprint.py's TFLOP/s and MFU) against two independent counts of
    one pass: torch's flop counter for the matmuls (every weight matrix per token, the LM head on the asked
    positions; SDPA on a CPU is not counted by torch), and the causal mask for the attention (4 H hd per allowed
    query-key pair and layer; none for uniform attention, a running sum). The explicit attention path's products
    (full T x T) show H hd is what the formula charges."""
    from torch.utils.flop_counter import FlopCounterMode
    from model import allowed_keys, forward_flops
    preset, knobs = FLOP_CASES[case]
    cfg = get_config(preset, **{**dict(n_layer=2, n_embd=64, n_head=4, vocab_size=300, block_size=32), **knobs})
    model = build(cfg, 0)
    B, T = 3, 32
    x = torch.randint(0, 300, (B, T), generator=torch.Generator().manual_seed(0))

    def counted(**kw):
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model.trace(x, **kw)
        return fc.get_total_flops()
    attends = cfg.sublayers != "mlp" and cfg.attention != "uniform"
    Hhd = cfg.n_head * cfg.head_dim
    allowed = sum(int(allowed_keys(T, cfg.sliding_window if cfg.slides(layer) else None, cfg.self_only).sum())
                  for layer in range(cfg.n_layer))
    attention = 4 * Hhd * allowed if attends else 0
    # SDPA on a CPU is not counted by torch; the explicit path (soft-caps) is, over the full T x T
    explicit = 4 * Hhd * T * T * cfg.n_layer if attends and cfg.attn_softcap is not None else 0
    assert counted(logits=True) == B * (forward_flops(model, T) - attention + explicit)
    assert counted(hidden="last") == B * (forward_flops(model, T, logits_positions=0) - attention + explicit)
    if attends and cfg.sliding_window is None and not explicit:
        assert counted(attn_probs=True) - counted() == B * 4 * 2 * Hhd * T * T


COPIED_ALONE = """
import os, sys, torch
import model                                        # the only project file in this directory
assert not any(m in sys.modules for m in ("common", "hf", "init", "train", "probe", "seedprint", "sink", "theory"))
assert "torch._dynamo" not in sys.modules           # importing the model does not pay for the compiler
net = model.GPT(model.get_config("tiny", n_layer=2)).eval()
ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    last, _ = net(ids)
    logits, loss = net(ids, ids)
assert last.shape == (2, 1, 512) and torch.isfinite(loss)
model.write_checkpoint("c.pt", net, step=7, note="copied alone")
back = model.load_checkpoint("c.pt").eval()
assert model.read_checkpoint("c.pt")["note"] == "copied alone"
with torch.no_grad():
    assert torch.equal(back(ids, ids)[0], logits)
if os.path.exists("hf.py"):                         # copied with the loader: a Hugging Face directory loads
    import hf
    loaded = hf.load(sys.argv[1]).eval()
    with torch.no_grad():
        out = loaded.trace(torch.tensor([[int(a) for a in sys.argv[2:]]]), hidden="last", logits=True)
    print(" ".join(repr(float(v)) for v in out["logits"][0]))
"""


@pytest.mark.parametrize("files", [("model.py",), ("model.py", "hf.py")])
def test_model_py_copied_alone_builds_runs_saves_and_with_hf_py_loads_hugging_face(tmp_path, files):
    """model.py is the transformer and its checkpoint format, copyable alone: in an empty directory, with nothing
    else of the project importable, it builds a preset, runs forward, writes a checkpoint and reads it back to the
    same logits. Copied with hf.py, it also loads a tiny Hugging Face directory to the logits of the naive float64
    forward (conftest). Neither imports another file of the project."""
    import subprocess
    import sys
    from pathlib import Path
    from conftest import llama_family, naive_llama_family, write_hf
    alone = tmp_path / "alone"
    alone.mkdir()
    for f in files:
        shutil.copy(Path(__file__).resolve().parents[1] / f, alone)
    spec, cfg, t = llama_family("LlamaForCausalLM")
    write_hf(tmp_path / "hf", cfg, t)
    ids = torch.randint(0, spec["V"], (1, 9), generator=torch.Generator().manual_seed(1))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", COPIED_ALONE, str(tmp_path / "hf"), *map(str, ids[0].tolist())],
                         cwd=alone, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if "hf.py" in files:
        naive_logits = naive_llama_family(spec, t, ids)[0][0, -1]
        got = torch.tensor([float(v) for v in out.stdout.split()], dtype=torch.float64)
        torch.testing.assert_close(got, naive_logits, rtol=1e-5, atol=1e-5 * naive_logits.abs().max().item())
    written = sorted(f for f in os.listdir(alone) if f != "__pycache__")
    assert written == sorted(["c.pt", *files])          # nothing else was needed, or written


@pytest.mark.parametrize("attention", ["softmax", "uniform", "softpick"])
def test_self_only_position_attends_only_to_itself_on_every_path(attention):
    """self_only=k (sink.py's positive control, trained from birth): the query at 1-indexed position k sees only
    itself in every layer, as the mask edit does on a model without the knob: the same states on the explicit
    path (attention probabilities kept), the training path (SDPA or the running mean) and the edited-mask path."""
    k, T = 5, 12
    cfg = tiny(attention=attention, position="rope")
    x = torch.randint(0, 32, (3, T), generator=torch.Generator().manual_seed(0))
    edited = build(cfg, seed=0).eval()
    knob = build(GPTConfig(**{**cfg.__dict__, "self_only": k}), seed=0).eval()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    mask[k - 1, :k - 1] = False                                   # written here, not taken from model.py
    with torch.no_grad():
        want = edited.trace(x, hidden="all", attn_mask=mask)["hidden"]
        got = knob.trace(x, hidden="all", attn_probs=True)
        for a, b in zip(want, got["hidden"]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        for probs in got["attn_probs"]:
            torch.testing.assert_close(probs[:, :, k - 1].sum(-1), probs[:, :, k - 1, k - 1])
        torch.testing.assert_close(knob(x, x)[0][:, -1], edited.unembed(want[-1][:, -1]), atol=1e-5, rtol=1e-5)
    short = torch.randint(0, 32, (2, k - 1))                      # a sequence that never reaches position k
    with torch.no_grad():
        torch.testing.assert_close(knob(short)[0], edited(short)[0])


def test_a_gemma_norm_at_birth_is_the_plain_norm():
    """init.py gives an RMSNorm of the form x (1 + w) the weight 0 where it gives a plain one 1: at birth the two
    models (same seed, all else equal) are the same function, though their stored weights differ."""
    x = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(0))
    knobs = dict(qk_norm="head", head_norm=True, norm_position="sandwich", activation="swiglu", bias=False)
    plain, gemma = (build(tiny(norm=norm, **knobs), seed=2) for norm in ("rmsnorm", "rmsnorm_1p"))
    assert all(torch.all(p == 0) for n, p in gemma.named_parameters() if p.dim() == 1)
    with torch.no_grad():
        torch.testing.assert_close(gemma(x, x)[0], plain(x, x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("bad,match", [
    (dict(norm="none", norm_position="post"), "norm_position='post' places norms"),
    (dict(norm="rmsnorm", norm_bias=True), "norm_bias is LayerNorm's bias"),
    (dict(parallel_residual=True, residual=False), "parallel_residual adds both sublayers"),
    (dict(attention="uniform", attn_softcap=3.0), "attention='uniform' computes no scores"),
    (dict(rope_dims=3), "rope_dims must be even"),
    (dict(rope_dims=16), "rope_dims must be even and at most head_dim=8"),
    (dict(position="learned", rope_dims=4), "rope_dims is a RoPE knob"),
    (dict(rope_type="longrope"), "longrope' and rope_factors go together"),
    (dict(rope_type="longrope", rope_factors=[1.0, 2.0]), "one factor per RoPE frequency \\(4\\)"),
    (dict(rope_attention_factor=1.2), "rope_attention_factor is LongRoPE's"),
    (dict(rope_local_theta=100.0), "set sliding_window"),
    (dict(sliding_layers="sf"), "sliding_layers says which layers use sliding_window"),
    (dict(sliding_window=3, sliding_layers="sx"), "an 's' \\(sliding"),
    (dict(sliding_window=3, sliding_layers="sfs"), "each of the 2 layers"),
    (dict(attn_scale=-1.0), "attn_scale must be a finite number > 0 or unset"),
    (dict(rope_factors=[1.0, "2"]), "rope_factors must be a list of finite numbers > 0"),
    (dict(qk_norm=True), "unknown qk_norm=True"),
    (dict(n_experts=4, experts_per_token=5), "experts_per_token=5 exceeds n_experts=4"),
    (dict(n_experts=4), "n_experts=4 needs experts_per_token"),
    (dict(experts_per_token=2), "experts_per_token is a mixture-of-experts knob; set n_experts"),
    (dict(router_norm="none"), "router_norm is a mixture-of-experts knob"),
    (dict(shared_expert=8), "shared_expert is a mixture-of-experts knob"),
    (dict(n_experts=4, experts_per_token=2, sublayers="attn"), "sublayers='attn' has no MLP"),
    (dict(n_experts=4, experts_per_token=2, moe_layers="dd"), "at least one 'm'"),
    (dict(n_experts=4, experts_per_token=2, moe_layers="m"), "each of the 2 layers"),
    (dict(n_experts=0, experts_per_token=1), "n_experts must be an integer >= 1"),
    (dict(n_experts=2, experts_per_token=1, router_norm="sum"), "unknown router_norm='sum'"),
])
def test_the_family_knobs_are_refused_where_they_make_no_sense(bad, match):
    with pytest.raises(ValueError, match=match):
        tiny(**bad)


def test_longrope_divides_each_frequency_and_scales_cos_and_sin_and_stops_at_its_context():
    """LongRoPE against its definition: inv_freq_i = theta^(-2i/d) / factor_i, cos and sin times the attention
    factor (partial: d = rope_dims), and a sequence past rope_original_context refused in one error."""
    cfg = tiny(rope_type="longrope", rope_factors=[1.0, 2.0], rope_dims=4, rope_attention_factor=1.25,
               rope_original_context=10, block_size=12)
    cos, sin = rope_tables(5, cfg)
    inv = [10000.0 ** (-i / 4) / f for i, f in zip((0, 2), (1.0, 2.0))]
    want = torch.tensor([[math.cos(t * w) * 1.25 for w in inv] for t in range(5)])
    torch.testing.assert_close(cos, want.float())
    model = build(cfg, 0)
    with pytest.raises(ValueError, match="exceeds rope_original_context=10"):
        model(torch.zeros(1, 11, dtype=torch.long))


# ----------------------------------------------------------------------------- the mixture of experts

MOE = dict(n_embd=16, mlp_hidden=24, n_experts=5, experts_per_token=2, expert_hidden=12, shared_expert=10)


@pytest.mark.parametrize("activation,router_norm,shared", [("swiglu", "topk", None), ("swiglu", "none", 10),
                                                           ("gelu", "topk", 10)])
def test_each_token_goes_through_its_top_k_experts_as_a_naive_loop_routes_it(activation, router_norm, shared):
    """The mixture of experts against its definition, one token at a time in float64: softmax of the router's
    logits, the k most probable experts found by sorting, their outputs weighted by those probabilities (renormalized
    over the k, or not), plus the shared expert times sigmoid of its gate. Every token is routed (no capacity)."""
    cfg = tiny(**dict(MOE, activation=activation, router_norm=router_norm, shared_expert=shared))
    mlp = build(cfg, 3).transformer.h[0].mlp.double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in mlp.parameters():               # weights and biases well apart from 0: the routes differ by token
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    x = torch.randn(3, 7, 16, generator=g, dtype=torch.float64)
    act = (lambda v: v / (1 + torch.exp(-v))) if activation == "swiglu" else \
        (lambda v: 0.5 * v * (1 + torch.erf(v / math.sqrt(2))))
    linear = lambda layer, v: layer.weight @ v + layer.bias         # tiny(): biases everywhere but the router

    def naive_mlp(m, v):
        up = linear(m.c_fc, v)
        return linear(m.c_proj, act(linear(m.c_gate, v)) * up if activation == "swiglu" else act(up))

    want, used = torch.zeros_like(x), set()
    for b, t in itertools.product(range(3), range(7)):
        v = x[b, t]
        probs = torch.softmax(mlp.router.weight @ v, -1)
        chosen = sorted(range(5), key=lambda e: -probs[e].item())[:2]
        used.update(chosen)
        weights = probs[chosen] / (probs[chosen].sum() if router_norm == "topk" else 1)
        want[b, t] = sum(w * naive_mlp(mlp.experts[e], v) for w, e in zip(weights, chosen))
        if shared:
            want[b, t] += torch.sigmoid(mlp.shared_expert_gate.weight @ v) * naive_mlp(mlp.shared_expert, v)
    assert len(used) == 5                         # every expert is some token's choice
    torch.testing.assert_close(mlp(x), want, rtol=1e-5, atol=1e-5)     # the routing weights are float32 (as the
                                                                        # families make them), the rest float64


def test_one_expert_taken_by_every_token_is_the_dense_mlp():
    """n_experts = experts_per_token = 1: softmax over one logit is 1, so the model is the dense one whose MLP is that
    expert, bit for bit (logits, every hidden state, head outputs), with either router_norm."""
    dense = build(tiny(activation="swiglu"), 0)
    idx = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(1))
    want = dense.trace(idx, hidden="all", head_out=True, logits=True)
    for router_norm in ("topk", "none"):
        moe = GPT(tiny(activation="swiglu", n_experts=1, experts_per_token=1, router_norm=router_norm))
        state = {k.replace(".mlp.", ".mlp.experts.0."): v for k, v in dense.state_dict().items()}
        missing = moe.load_state_dict(state, strict=False).missing_keys
        assert missing == [f"transformer.h.{i}.mlp.router.weight" for i in range(2)]
        with torch.no_grad():
            for block in moe.transformer.h:
                block.mlp.router.weight.normal_()
        got = moe.trace(idx, hidden="all", head_out=True, logits=True)
        assert all(torch.equal(a, b) for a, b in zip(got["hidden"] + got["head_out"] + [got["logits"]],
                                                      want["hidden"] + want["head_out"] + [want["logits"]]))


def test_each_expert_and_the_router_are_drawn_as_the_dense_mlps_matrices(tmp_path):
    """init.py draws each expert as the dense MLP's matrices (down projections at the residual std), each its own
    draw, and the router and the shared expert's gate at 0.02; the checkpoint holds the config beside them."""
    from model import load_checkpoint, write_checkpoint
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=128, vocab_size=64, block_size=16, activation="swiglu",
                    mlp_hidden=256, n_experts=4, experts_per_token=2, shared_expert=128, bias=False)
    model = build(cfg, 7)
    resid = 0.02 / math.sqrt(2 * cfg.n_layer)
    for name, p in model.named_parameters():
        if p.dim() == 2 and ".mlp." in name:
            target = resid if name.endswith("c_proj.weight") else 0.02
            assert abs(p.std().item() / target - 1) < 5 / math.sqrt(2 * p.numel()), name
    experts = model.transformer.h[0].mlp.experts
    assert not torch.equal(experts[0].c_fc.weight, experts[1].c_fc.weight)
    write_checkpoint(str(tmp_path / "moe.pt"), model)
    again = load_checkpoint(tmp_path / "moe.pt")
    assert again.config == cfg and all(torch.equal(a, b) for a, b in zip(again.parameters(), model.parameters()))
