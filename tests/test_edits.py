"""The reparametrizations of attention and the norms (studies/edits.py: map_qk, map_vo, permute_heads, fold_norms) on a
small trained LLaMA-style model with grouped-query attention and partial RoPE: each against its definition (what it
must keep, computed apart from the model: q.k and OV products, a head's rows, a gain times a column), the logits
kept and the weights changed, and SeedPrint's exact and aligned verdicts against the unedited model as that model's
own against itself. Folding the final norm keeps the logits but divides the fingerprint by the final gain: the
verdicts hold with gains spread over [1/20, 20], two negative. The logits kept on four other architectures too, with
random norm gains and biases, and each edit refusing the models it would change."""
import copy
import math

import pytest
import torch

import seedprint
import train
from hf import load
from init import build
from model import LLAMA_KNOBS, RMSNorm, get_config
from studies.edits import fold_norms, map_qk, map_vo, permute_heads

H, HKV, HD = 4, 2, 16                   # 4 query heads on 2 kv heads of 16 dims, RoPE on the first 8 of them
KNOBS = dict(LLAMA_KNOBS, n_layer=2, n_embd=64, n_head=H, n_kv_head=HKV, rope_dims=8, block_size=32)


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    run = str(tmp_path_factory.mktemp("edits"))
    train.train(train.TrainConfig(data=data_dir, out_dir=run, device="cpu", knobs=KNOBS, max_steps=40, ckpt_every=40,
                                  eval_every=0, log_every=0, lr=3e-3, batch_size=8))
    return load(train.checkpoint_path(run, 40)).eval()


EDITS = {"map_qk": lambda m: map_qk(m, seed=1), "map_vo": lambda m: map_vo(m, seed=1),
         "permute_heads": lambda m: permute_heads(m, seed=1),
         "fold_norms, final=False": lambda m: fold_norms(m, final=False), "fold_norms": fold_norms}


def heads(w: torch.Tensor, first: int, n: int) -> list:
    """Rows first.. of a (rows, d) matrix as n blocks of HD rows: one per head."""
    return list(w[first * HD:(first + n) * HD].split(HD))


def qkv(m, layer: int = 0) -> tuple:
    """(q heads, k heads, v heads, W_O's column blocks) of a layer, float64."""
    a = m.transformer.h[layer].attn
    w = a.c_attn.weight.detach().double()
    return heads(w, 0, H), heads(w, H, HKV), heads(w, H + HKV, HKV), heads(a.c_proj.weight.detach().double().T, 0, H)


def run(m, x):
    """(the residual stream's states before the final norm, the final-norm state, the logits), float64."""
    with torch.no_grad():
        hidden = m.trace(x, hidden="all")["hidden"]
        return [h.double() for h in hidden[:-1]], hidden[-1].double(), m(x, x)[0].double()


def test_each_edit_keeps_the_function_and_changes_the_weights_as_defined(trained):
    m = copy.deepcopy(trained).double()      # float64: what is kept is kept to rounding
    x = torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(0))
    states, final, logits = run(m, x)
    q, k, v, o = qkv(m)
    group = lambda h: h // (H // HKV)
    for name, edit in EDITS.items():
        e = edit(m)
        e_states, e_final, e_logits = run(e, x)
        # the norms compute in float32 even in a float64 model: the logits agree to float32's rounding
        assert (e_logits - logits).abs().max() <= 1e-6 * logits.abs().max(), name
        assert max((a - b).abs().max() for a, b in zip(e_states, states)) <= 1e-10, name
        eq, ek, ev, eo = qkv(e)
        if name == "map_qk":                 # every q.k form kept, but q and k changed, not by a rotation
            for h in range(H):
                assert torch.allclose(eq[h].T @ ek[group(h)], q[h].T @ k[group(h)], atol=1e-12)
                assert abs(eq[h].norm() / q[h].norm() - 1) > 0.01, h       # an orthogonal map keeps the norm
            assert all(torch.equal(a, b) for a, b in zip(ev, v))
        if name == "map_vo":                 # every head's OV circuit W_O,h W_v,g kept, W_v changed
            for h in range(H):
                assert torch.allclose(eo[h].T @ ev[group(h)], o[h].T @ v[group(h)], atol=1e-12)
                assert abs(ev[group(h)].norm() / v[group(h)].norm() - 1) > 0.01, h
            assert all(torch.equal(a, b) for a, b in zip(eq + ek, q + k))
        if name == "permute_heads":          # every head is an old one, and each query head kept its kv head
            was = lambda new, old: next(i for i, b in enumerate(old) if torch.equal(new, b))
            old_q, old_kv = [was(b, q) for b in eq], [was(b, k) for b in ek]
            assert sorted(old_q) == list(range(H)) and old_q != list(range(H))
            assert [was(b, v) for b in ev] == old_kv
            assert all(group(old_q[h]) == old_kv[group(h)] and torch.equal(eo[h], o[old_q[h]]) for h in range(H))
        if name.startswith("fold_norms"):    # each gain is 1, and the columns of its readers carry it
            for a, b in zip(m.transformer.h, e.transformer.h):
                assert torch.all(b.ln_1.weight == 1) and torch.all(b.ln_2.weight == 1)
                for ra, rb, g in ((a.attn.c_attn, b.attn.c_attn, a.ln_1.weight), (a.mlp.c_fc, b.mlp.c_fc, a.ln_2.weight),
                                  (a.mlp.c_gate, b.mlp.c_gate, a.ln_2.weight)):
                    assert torch.allclose(rb.weight, ra.weight * g, atol=1e-15)
        if name == "fold_norms, final=False":
            assert torch.equal(e.transformer.ln_f.weight, m.transformer.ln_f.weight)
            assert (e_final - final).abs().max() <= 1e-6
        if name == "fold_norms":             # the fingerprint's state loses the final gain, coordinate by coordinate
            g = m.transformer.ln_f.weight.detach()
            assert torch.allclose(e.lm_head.weight, m.lm_head.weight * g, atol=1e-15)
            assert torch.allclose(e_final * g, final, atol=1e-6) and not torch.allclose(e_final, final, atol=1e-3)


def test_a_query_key_map_that_does_not_commute_with_rope_changes_the_function(trained):
    """The RoPE constraint is real: W_q -> A W_q, W_k -> A^-T W_k with a general invertible A keeps every q.k form
    of the weights, as map_qk does, yet changes the scores, since A does not commute with the rotations."""
    m = copy.deepcopy(trained).double()
    x = torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(0))
    _, _, logits = run(m, x)
    A = torch.randn(HD, HD, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 3 * torch.eye(HD)
    w = m.transformer.h[0].attn.c_attn.weight
    with torch.no_grad():
        for h in range(H // HKV):            # kv head 0 and its query heads
            w[h * HD:(h + 1) * HD] = A @ w[h * HD:(h + 1) * HD]
        w[H * HD:(H + 1) * HD] = torch.linalg.inv(A).T @ w[H * HD:(H + 1) * HD]
    assert (run(m, x)[2] - logits).abs().max() > 1e-3 * logits.abs().max()


def test_both_verdicts_call_each_edit_related_as_the_model_itself(trained):
    """The exact and the aligned verdict of the model against each edit of it, beside its verdict against itself:
    related, the same identity set and mean tau within rounding (the residual stream is kept, so is the
    fingerprint), the final norm's fold included at this model's gains. Each model fingerprinted once: every pair
    of one compare_many, each pair's p before the Holm adjustment across pairs."""
    for aligned in (False, True):
        run = seedprint.compare_many([trained, trained, *(edit(trained) for edit in EDITS.values())], align=aligned,
                                     sequences=200, seq_len=16, k=16)["results"]
        own = run[0, 1]
        assert own.related and own.mean_tau == pytest.approx(1.0)
        for j, name in enumerate(EDITS, start=2):
            r = run[0, j]
            assert r.related and r.p_raw <= 10 * own.p_raw, (name, aligned, r)
            assert r.n_identity == own.n_identity and r.mean_tau >= own.mean_tau - 0.01, (name, aligned, r)


@pytest.mark.parametrize("aligned", [False, True], ids=["exact", "aligned"])
def test_folding_a_final_norm_of_widely_spread_gains_keeps_the_verdict(trained, aligned):
    """Folding the final norm divides each fingerprint coordinate by its gain. After 40 steps the gains are nearly
    equal, which makes that a mild change; here they are first spread log-uniformly over [1/20, 20], two of them
    negative (SmolLM2-135M's final norm holds gains from -2.1 to 3.3): the fingerprint's coordinates change scale
    by up to 400 times against one another and two change sign, the logits stay, and the model's verdict against
    its fold is still related."""
    m = copy.deepcopy(trained)
    g = torch.Generator().manual_seed(0)
    spread = torch.exp((2 * torch.rand(m.config.n_embd, generator=g) - 1) * math.log(20))
    spread[torch.randperm(m.config.n_embd, generator=g)[:2]] *= -1
    with torch.no_grad():
        m.transformer.ln_f.weight.mul_(spread)
    folded = fold_norms(m)
    x = torch.randint(0, 256, (3, 24), generator=g)
    states, final, logits = run(m, x)
    _, e_final, e_logits = run(folded, x)
    assert (e_logits - logits).abs().max() <= 1e-5 * logits.abs().max()
    assert torch.allclose(e_final * m.transformer.ln_f.weight.detach().double(), final, rtol=1e-4, atol=1e-5)
    r = seedprint.compare(m, folded, align=aligned, sequences=200, seq_len=16, k=16)
    assert r.related, r

ARCHITECTURES = {      # name: (knobs, the edits that must keep its function; the others refuse it)
    "GPT-2 (LayerNorm with biases, learned positions)": (dict(position="learned"), list(EDITS)),
    "Gemma 2 (1 + w RMSNorm, sandwich norms, soft caps, GQA)": (
        dict(LLAMA_KNOBS, norm="rmsnorm_1p", norm_position="sandwich", activation="geglu", n_kv_head=2,
             attn_softcap=50.0, logit_softcap=30.0, embed_scale=8.0), list(EDITS)),
    "Qwen2 (q/k/v biases, a sink logit per head, partial RoPE)": (
        dict(LLAMA_KNOBS, qkv_bias=True, attn_sink=True, n_kv_head=2, rope_dims=8), list(EDITS)),
    "GPT-NeoX (parallel residual, LayerNorm biases, partial RoPE)": (
        dict(parallel_residual=True, rope_dims=4), list(EDITS)),
    "OLMo-2 (post-norm, q/k norm over all heads, an output gate)": (
        dict(LLAMA_KNOBS, norm_position="post", qk_norm="all", attn_gate=True), ["permute_heads", "fold_norms"]),
}


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_each_edit_keeps_the_function_of_other_architectures(name):
    """The edits on a model whose every norm gain, norm bias and linear bias is drawn at random (a fresh init's
    gains are 1, which would make a fold do nothing): the logits at every position as they were, for each edit the
    architecture admits; each other edit refuses it."""
    knobs, kept = ARCHITECTURES[name]
    m = build(get_config("tiny", n_layer=2, n_embd=64, n_head=4, vocab_size=64, block_size=32, **knobs), 0).double()
    g = torch.Generator().manual_seed(1)
    uniform = lambda p, lo: p.copy_(lo + torch.rand(p.shape, generator=g, dtype=p.dtype))
    with torch.no_grad():
        norms = [mod for mod in m.modules() if isinstance(mod, (torch.nn.LayerNorm, RMSNorm))]
        for mod in norms:            # a gain in [0.5, 1.5]: stored as it is, or as gain - 1 (rmsnorm_1p)
            uniform(mod.weight, -0.5 if m.config.norm == "rmsnorm_1p" else 0.5)
        gains = {id(mod.weight) for mod in norms}
        for p in m.parameters():     # every bias (linears', LayerNorms') and sink logit
            if p.dim() == 1 and id(p) not in gains:
                p.copy_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    x = torch.randint(0, 64, (3, 24), generator=g)
    with torch.no_grad():
        logits = m(x, x)[0]
    for edit, make in EDITS.items():
        if edit not in kept:
            with pytest.raises(ValueError):
                make(m)
            continue
        with torch.no_grad():
            e_logits = make(m)(x, x)[0]
        assert (e_logits - logits).abs().max() <= 1e-5 * logits.abs().max(), (name, edit)


def test_each_edit_refuses_a_model_whose_function_it_would_change():
    tiny = lambda **knobs: build(get_config("tiny", n_layer=1, vocab_size=64, **{**LLAMA_KNOBS, **knobs}), 0)
    with pytest.raises(ValueError, match="map_qk keeps the function only without q/k norms: qk_norm='head'"):
        map_qk(tiny(qk_norm="head"))
    for knob in ("head_norm", "attn_gate"):
        with pytest.raises(ValueError, match=f"map_vo .* {'head_norm and attn_gate'}"):
            map_vo(tiny(**{knob: True}))
    with pytest.raises(ValueError, match="no norm of this model is read by a linear"):
        fold_norms(tiny(norm="none", norm_position="pre"))
    with pytest.raises(ValueError, match="no norm of this model is read by a linear"):
        fold_norms(tiny(norm_position="post"), final=False)
    ln = tiny(norm="layernorm", bias=True)
    with torch.no_grad():
        ln.transformer.h[0].ln_1.weight[3] = 0
    with pytest.raises(ValueError, match="ln_1 has a gain of 0 beside its bias"):
        fold_norms(ln)


def test_the_reparametrized_study_end_to_end_at_a_tiny_size(tmp_path):
    """Two tiny bases, every edit: the logits kept (below the study's refusal), both verdicts related; the base
    against itself as seedprint.compare finds it from the checkpoint (a second path); the summary recounted."""
    import json
    from studies import reparametrized
    from studies.lineage import checkpoints
    text = tmp_path / "a.txt"
    text.write_text("".join(chr(32 + (i * 7919) % 90) for i in range(20000)))
    out = tmp_path / "out"
    reparametrized.main(["--seeds", "0", "1", "--n_embd", "32", "--n_layer", "2", "--rope_dims", "4", "--block_size",
                         "16", "--seq_len", "16", "--max_steps", "20", "--ckpt_every", "20", "--batch_size", "8",
                         "--sequences", "200", "--k", "8", "--device", "cpu", "--corpus", str(text), "--corpus2",
                         str(text), "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["reparametrized"]
    assert (out / "reparametrized.png").is_file() and len(res["pairs"]) == 2 * 6
    assert all(r["exact"] and r["aligned"] and r["logit_change"] < 1e-4 for r in res["pairs"]), res["pairs"]
    for s in (0, 1):
        path = checkpoints(str(out / "runs" / f"seed{s}"))[-1][1]
        alone = seedprint.compare(path, path, sequences=200, seq_len=16, k=8)
        itself = next(r for r in res["pairs"] if r["base"] == f"seed {s}" and r["edit"].startswith("none"))
        assert itself["p"] == pytest.approx(alone.p, rel=1e-9) and itself["mean_tau"] == pytest.approx(alone.mean_tau)
    for t in res["table"]:
        rs = [r for r in res["pairs"] if r["edit"] == t["edit"]]
        assert t["exact"] == f"{sum(r['exact'] for r in rs)}/{len(rs)}" and t["p_max"] == max(r["p"] for r in rs)
