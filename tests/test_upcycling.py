"""studies.edits.upcycle, a dense model made a mixture of experts, against its definition: every expert the dense
MLP, the router init.py's draw, the rest copied; the function kept where the k routing weights sum to 1, and scaled
by their sum where they do not (checked against a dense model scaled by hand and against the router's probabilities
computed here); bad input refused in one line."""
import json
import re

import pytest
import torch
import torch.nn.functional as F

from init import build
from model import LLAMA_KNOBS, get_config
from studies.edits import upcycle
from test_studies_lineage import corpora        # the two small text files the lineage studies train on

CONFIGS = [dict(n_layer=2, **LLAMA_KNOBS),                                  # SwiGLU, RMSNorm, no biases
           dict(n_layer=2, bias=True, mlp_bias=True)]                       # GPT-2's GELU MLP, with biases


def dense(knobs, seed=3):
    """A fresh dense model in float64, its biases made nonzero (init sets them to 0, which would hide a bias
    copied wrong)."""
    model = build(get_config("tiny", **knobs), seed).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    return model


def logits(model, x):
    with torch.no_grad():
        return model(x, x)[0]             # with targets, the logits of every position


def relative_change(a, b):
    """max |a - b| over max |b|."""
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("knobs", CONFIGS)
def test_upcycling_keeps_the_function_and_copies_every_weight(knobs):
    """At noise 0 with the k weights renormalized, the logits are the dense model's at every position whatever the
    router (two seeds of it); every expert holds the dense MLP's weights, everything else is the dense model's, the
    router is what init.py draws for that name and seed, and the dense model is left as it was."""
    model = dense(knobs)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    x = torch.randint(0, model.config.vocab_size, (3, 24), generator=torch.Generator().manual_seed(0))
    for seed in (0, 1):
        moe = upcycle(model, 4, 2, seed=seed)
        assert (moe.config.n_experts, moe.config.experts_per_token, moe.config.router_norm) == (4, 2, "topk")
        # the k weights are renormalized in float32 (as the families route): their sum is 1 within float32's 6e-8
        assert relative_change(logits(moe, x), logits(model, x)) < 1e-6
        drawn = build(moe.config, seed).state_dict()                 # a fresh MoE of that seed: its routers
        for name, p in moe.state_dict().items():
            if ".router." in name:
                assert torch.equal(p, drawn[name].double()), name
            else:
                assert torch.equal(p, before[re.sub(r"\.experts\.\d+\.", ".", name)]), name
        assert sum(".experts.3." in n for n in moe.state_dict()) == sum(".mlp." in n for n in before)
    assert all(torch.equal(p, before[n]) for n, p in model.state_dict().items())
    routers = [upcycle(model, 4, 2, seed=s).transformer.h[0].mlp.router.weight for s in (0, 0, 1)]
    assert torch.equal(routers[0], routers[1]) and not torch.equal(routers[0], routers[2])


@pytest.mark.parametrize("knobs", CONFIGS)
def test_without_renormalization_the_mlp_is_scaled_by_the_routers_top_k_mass(knobs):
    """router_norm "none": each layer's output is the dense MLP's times the sum of the k largest router
    probabilities (computed here from the router's matrix), never 1 for k < n, so the logits differ from the dense
    model's; with a router of zeros every probability is 1/n, and the model is the dense one with each MLP's down
    projection (weight and bias) scaled by k/n."""
    model = dense(knobs)
    moe = upcycle(model, 4, 2, seed=5, router_norm="none")
    h = torch.randn(2, 7, model.config.n_embd, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    layer, mlp = moe.transformer.h[1].mlp, model.transformer.h[1].mlp
    mass = F.softmax(h @ layer.router.weight.T, dim=-1).topk(2, dim=-1).values.sum(-1, keepdim=True)
    with torch.no_grad():
        assert torch.allclose(layer(h), mlp(h) * mass, rtol=1e-6, atol=1e-12)    # the router's softmax in float32
    x = torch.randint(0, model.config.vocab_size, (3, 24), generator=torch.Generator().manual_seed(0))
    assert relative_change(logits(moe, x), logits(model, x)) > 1e-3
    scaled = dense(knobs)
    with torch.no_grad():
        for block in moe.transformer.h:
            block.mlp.router.weight.zero_()
        for block in scaled.transformer.h:
            for p in (block.mlp.c_proj.weight, block.mlp.c_proj.bias):
                if p is not None:
                    p.mul_(2 / 4)
    assert torch.allclose(logits(moe, x), logits(scaled, x), rtol=0, atol=1e-12)


def test_noise_gives_each_expert_its_own_draw_of_the_asked_size():
    """noise 0.1: each expert's matrices are the dense ones plus noise of std 0.1 x that matrix's std (measured on
    the difference, within 10%), a draw of its own (no two experts alike), biases and the rest as they were."""
    model = dense(CONFIGS[1])
    moe = upcycle(model, 3, 1, noise=0.1, seed=2)
    w = model.transformer.h[0].mlp.c_fc.weight.detach()
    diffs = [e.c_fc.weight.detach() - w for e in moe.transformer.h[0].mlp.experts]
    for d in diffs:
        assert float(d.std() / w.std()) == pytest.approx(0.1, rel=0.1)
    assert not torch.allclose(diffs[0], diffs[1]) and not torch.allclose(diffs[1], diffs[2])
    assert all(torch.equal(e.c_fc.bias, model.transformer.h[0].mlp.c_fc.bias) for e in moe.transformer.h[0].mlp.experts)
    assert torch.equal(moe.transformer.h[0].attn.c_attn.weight, model.transformer.h[0].attn.c_attn.weight)


@pytest.mark.parametrize("make,call,message", [
    (lambda: build(get_config("tiny", n_experts=2, experts_per_token=1), 0), dict(n_experts=4, experts_per_token=2),
     "already a mixture of 2 experts"),
    (lambda: build(get_config("tiny"), 0), dict(n_experts=4, experts_per_token=5), "experts_per_token=5 exceeds"),
    (lambda: build(get_config("tiny"), 0), dict(n_experts=0, experts_per_token=1), "n_experts must be an integer"),
    (lambda: build(get_config("tiny"), 0), dict(n_experts=4, experts_per_token=2, noise=-0.1), "noise is a std"),
    (lambda: build(get_config("tiny"), 0), dict(n_experts=4, experts_per_token=2, router_norm="sum"),
     "unknown router_norm"),
    (lambda: build(get_config("tiny", sublayers="attn"), 0), dict(n_experts=4, experts_per_token=2), "has no MLP"),
])
def test_bad_input_is_refused_in_one_line(make, call, message):
    with pytest.raises(ValueError, match=message) as e:
        upcycle(make(), **call)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- the study, at a tiny size

def test_the_upcycling_study_traces_each_child_to_its_parent_and_no_further(corpora, tmp_path):
    """studies.upcycling on tiny byte-level models, through the command a user types: each child is a MoE
    continued from its dense parent upcycled (its run starts from a file that computes the parent's logits), both
    verdicts call it related to its parent and to its fine-tune and unrelated to the other seed's parent and to the
    MoE from scratch, and the table counts the pairs as the rows say."""
    import hf
    from model import read_checkpoint
    from studies import upcycling
    from studies.edits import logit_change
    out = tmp_path / "out"
    upcycling.main(["--tokenizer", "bytes", "--n_embd", "32", "--n_layer", "2", "--block_size", "16", "--seq_len",
                    "16", "--max_steps", "30", "--child_steps", "10", "--finetune_steps", "5", "--ckpt_every", "30",
                    "--batch_size", "8", "--sequences", "200", "--k", "8", "--seeds", "0", "1", "--scratch", "100",
                    "--device", "cpu", "--corpus", str(corpora / "a.txt"), "--corpus2", str(corpora / "b.txt"),
                    "--out", str(out)])
    res = json.loads((out / "results.json").read_text())["upcycling"]
    assert [r["kind"] for r in res["pairs"]].count("child vs a MoE from scratch") == 2
    for r in res["pairs"]:
        assert r["exact"] == r["related"] and r["aligned"] == r["related"], r
    for r in res["table"]:
        rs = [p for p in res["pairs"] if p["kind"] == r["kind"]]
        assert r["exact"] == f"{sum(p['exact'] for p in rs)}/{len(rs)}" and r["pairs"] == len(rs)
    for s in (0, 1):
        parent = hf.load(str(out / "runs" / f"seed{s}" / "ckpt_0000030.pt"))
        child_run = next((out / "runs").glob(f"child_seed{s}_*"))
        start = read_checkpoint(str(child_run / "ckpt_0000000.pt"))
        assert parent.config.n_experts is None and start["config"]["n_experts"] == 4
        assert logit_change(parent, hf.load(str(child_run / "ckpt_0000000.pt")), 256) < 1e-5


@pytest.mark.parametrize("flags,message", [
    (["--shared_expert", "16"], "--shared_expert would give them another shape"),
    (["--experts_per_token", "5"], "experts_per_token=5 exceeds n_experts=4"),
    (["--seeds", "0"], "two or more are needed"),
    (["--scratch", "0", "5"], "must differ from --seeds"),
])
def test_the_upcycling_study_refuses_bad_flags_in_one_line(flags, message, tmp_path):
    from conftest import cli_error
    from studies import upcycling
    line = cli_error(upcycling.main, "studies.upcycling", [*flags, "--out", str(tmp_path / "out")])
    assert message in line and not (tmp_path / "out").exists()
