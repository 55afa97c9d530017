"""init.py: GPT-2 std per weight group, the seed split, determinism across order, process, dtype, device, threads."""
import hashlib
import math
import subprocess
import sys

import pytest
import torch

from init import EMBEDDING_PARAMS, build, init_weights
from model import GPT, GPTConfig

CFG = GPTConfig(n_layer=3, n_head=4, n_embd=128, vocab_size=1000, block_size=64, norm="layernorm",
                activation="swiglu", mlp_hidden=384, position="learned", tie_embeddings=False,
                head_norm=True, qkv_bias=True)


def test_each_weight_group_has_its_gpt2_std():
    model = build(CFG, seed=7)
    resid = 0.02 / math.sqrt(2 * CFG.n_layer)
    seen = set()
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            assert torch.all(p == 0), name
            continue
        if p.dim() == 1:
            assert torch.all(p == 1), name            # norm gains and the head_norm gain
            continue
        target = resid if name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")) else 0.02
        # the sample std of n iid normals has relative standard error 1 / sqrt(2 n); allow 5 of them
        tol = 5 / math.sqrt(2 * p.numel())
        assert abs(p.std().item() / target - 1) < tol, (name, p.std().item(), target)
        assert abs(p.mean().item()) < 5 * target / math.sqrt(p.numel()), name
        seen.add(name.split(".")[-2] if "transformer.h" in name else name)
    assert {"c_attn", "c_proj", "c_fc", "c_gate", "lm_head.weight", "transformer.wte.weight",
            "transformer.wpe.weight"} <= seen


def test_same_seeds_identical_and_global_rng_irrelevant():
    torch.manual_seed(0)
    a = build(CFG, seed=1, embed_seed=2).state_dict()
    torch.manual_seed(12345)
    torch.randn(1000)
    b = build(CFG, seed=1, embed_seed=2).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_order_of_construction_does_not_matter():
    other = GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=50, block_size=8)
    first = build(CFG, seed=3).state_dict()
    build(other, seed=3)                                   # build something else in between
    m = GPT(CFG)                                           # default-initialized, then re-initialized
    init_weights(m, seed=3)
    second = m.state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_seed_split_blocks_vs_embeddings():
    a = build(CFG, seed=42, embed_seed=0).state_dict()
    b = build(CFG, seed=43, embed_seed=0).state_dict()
    c = build(CFG, seed=42, embed_seed=1).state_dict()
    for k in a:
        drawn = a[k].dim() == 2
        if k in EMBEDDING_PARAMS:
            assert torch.equal(a[k], b[k]), k             # same embed_seed: same token identities
            assert not torch.equal(a[k], c[k]), k
        elif drawn:
            assert not torch.equal(a[k], b[k]), k         # different seed: different blocks
            assert torch.equal(a[k], c[k]), k


def test_shared_names_share_weights_across_ablations():
    """The attention-only and MLP-only models reuse the full model's attention / MLP weights."""
    full = build(CFG, seed=5).state_dict()
    for sub in ("attn", "mlp"):
        part = build(GPTConfig(**{**CFG.__dict__, "sublayers": sub}), seed=5).state_dict()
        assert any(sub + "." in k for k in part)
        for k, v in part.items():
            assert torch.equal(v, full[k]), k


def test_bfloat16_is_float32_rounded():
    f32 = build(CFG, seed=9).state_dict()
    bf16 = build(CFG, seed=9, dtype=torch.bfloat16).state_dict()
    for k in f32:
        assert bf16[k].dtype == torch.bfloat16
        assert torch.equal(bf16[k], f32[k].to(torch.bfloat16)), k


@pytest.mark.parametrize("threads", [1, 4])
def test_the_draws_in_a_thread_pool_are_a_serial_loops_bit_for_bit(threads):
    """init_weights draws its matrices in a pool of threads (a 7B model's draws are billions of numbers),
    each from its own generator: the weights must be those of a plain loop over the parameters, each seeded
    with the first 63 bits of sha256("SEED/NAME") and scaled to GPT-2's std, written out here."""
    model = init_weights(GPT(CFG), seed=5, embed_seed=6, threads=threads)
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        seed = 6 if name in EMBEDDING_PARAMS else 5
        g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8],
                                                         "little") >> 1)
        std = 0.02 / math.sqrt(2 * CFG.n_layer) if name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")) \
            else 0.02
        assert torch.equal(p, torch.randn(p.shape, generator=g) * std), name
    bf16 = init_weights(GPT(CFG).to(torch.bfloat16), seed=5, embed_seed=6, threads=threads)
    for (name, p), q in zip(model.named_parameters(), bf16.parameters()):
        assert torch.equal(q, p.to(torch.bfloat16)), name


def test_identical_in_a_fresh_process():
    code = ("import torch,sys; sys.path.insert(0,'.'); from init import build; from model import GPTConfig;"
            f"m = build(GPTConfig(**{CFG.__dict__!r}), seed=11); "
            "print(repr([float(p.detach().double().sum()) for p in m.parameters()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    here = [float(p.detach().double().sum()) for p in build(CFG, seed=11).parameters()]
    assert eval(out) == here


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_identical_on_gpu():
    cpu = build(CFG, seed=4).state_dict()
    gpu = build(CFG, seed=4, device="cuda").state_dict()
    assert all(torch.equal(cpu[k], gpu[k].cpu()) for k in cpu)
