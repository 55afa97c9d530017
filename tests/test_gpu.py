"""What only a CUDA machine can check; without one every test here skips (CI has no GPU).

Each GPU path is held against a second path that the CPU suite already trusts:
  - bf16 autocast, as probe.py, seedprint.py and train.py run on CUDA, against float32 on the CPU;
  - torch.compile against eager: the forward pass, one training step's gradients, probe.py's pass;
  - train.py under torchrun on NCCL, one process (the DDP path), against one plain process;
  - random inputs identical on CPU and CUDA: tests/test_data.py; seeded inits: tests/test_init.py.
"""
from pathlib import Path

import pytest
import torch

import data
import probe
import seedprint
import train
from conftest import torchrun
from init import build
from model import get_config, read_checkpoint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(n_layer=4, n_embd=256, n_head=4, vocab_size=2048, block_size=128)
PRESETS = {"gpt2-nano": get_config("gpt2-nano", **SMALL),                     # LayerNorm, GELU, biases, tied
           "llama2-nano": get_config("llama2-nano", **SMALL, n_kv_head=4, mlp_hidden=688)}   # RMSNorm, SwiGLU


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b||, in float64 on the CPU."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


def tokens(cfg, n: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (n, cfg.block_size), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def no_tf32():
    """float32 matmuls in float32: train.py and probe.py turn TF32 on for their runs, process-wide.
    (Set and restored by hand: torch.backends.cuda.matmul is not an object monkeypatch can restore.)"""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("preset", list(PRESETS))
def test_bf16_autocast_is_float32_within_bf16_rounding(preset, no_tf32):
    """The GPU's bf16 autocast (flash SDPA) against the CPU's float32, on the same seeded weights. bf16 keeps
    8 bits of mantissa (a rounding of up to 2^-9 relative), so the logits and the fingerprint's final states
    differ by a fraction of a percent (0.6% measured with CPU autocast), well under 3%; and they differ at all,
    so autocast ran. CUDA float32 is the CPU's sums in another order: 1e-4."""
    cfg = PRESETS[preset]
    cpu, gpu = build(cfg, seed=0), build(cfg, seed=0, device="cuda")
    x, y = tokens(cfg), tokens(cfg, seed=1)
    with torch.no_grad():
        ref, ref_loss = cpu(x, y)
        f32, _ = gpu(x.cuda(), y.cuda())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            b16, b16_loss = gpu(x.cuda(), y.cuda())
    assert rel_err(f32, ref) < 1e-4
    assert b16.dtype == torch.bfloat16 and 1e-4 < rel_err(b16.float(), ref) < 3e-2
    assert b16_loss.item() == pytest.approx(ref_loss.item(), rel=1e-3)
    # seedprint.fingerprint turns bf16 autocast on for a CUDA model by itself
    H_cpu = seedprint.fingerprint(cpu, sequences=64, seq_len=cfg.block_size, batch_size=16)
    H_gpu = seedprint.fingerprint(gpu, sequences=64, seq_len=cfg.block_size, batch_size=16)
    assert 1e-4 < rel_err(torch.from_numpy(H_gpu), torch.from_numpy(H_cpu)) < 3e-2


def test_compiled_model_matches_eager_forward_and_gradients(no_tf32):
    """torch.compile (inductor) against eager on one model: the logits, the loss and every parameter's gradient,
    in float32 (fused kernels reorder sums: 1e-4), and the compiled loss under train.py's bf16 autocast."""
    from torch._dynamo.testing import CompileCounterWithBackend
    cfg = PRESETS["llama2-nano"]
    model = build(cfg, seed=0, device="cuda")
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter)
    x, y = tokens(cfg).cuda(), tokens(cfg, seed=1).cuda()
    params = list(model.parameters())
    logits, loss = model(x, y)
    grads = torch.autograd.grad(loss, params)
    c_logits, c_loss = compiled(x, y)
    c_grads = torch.autograd.grad(c_loss, params)
    assert counter.frame_count >= 1                      # the compiled module really ran compiled code
    assert rel_err(c_logits, logits) < 1e-4 and c_loss.item() == pytest.approx(loss.item(), rel=1e-5)
    for (name, _), g, cg in zip(model.named_parameters(), grads, c_grads):
        assert rel_err(cg, g) < 1e-3, name
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        assert compiled(x, y)[1].item() == pytest.approx(loss.item(), rel=1e-3)


def test_compiled_probe_pass_sees_what_the_eager_pass_sees(monkeypatch):
    """probe.py --compile on (Table 1's GPU throughput) against the eager pass, both in bf16 autocast: fused
    kernels round differently, so an argmax on a near-tie may move, but at most 5% of the sequences' argmaxes
    do (bf16 against float32 moves 0.8% of them, measured on the CPU), and the pairwise cosines agree to 0.01.
    250 sequences in batches of 64 end with a batch of 58: both shapes compile before the clock, none after.
    The graphs are counted by their ops: model.trace breaks its graph on purpose once, where the RoPE tables are
    looked up eagerly before the blocks (probe's passes return their finiteness flags instead of checking them inside
    the graph: model.trace_passes), and the op or so before the break makes a small graph of its own, which is no
    forward pass."""
    from torch._inductor.compile_fx import compile_fx
    graphs, compile_ = [], torch.compile

    def counting_compile(fn, **options):        # torch.compile as probe.py calls it, with a backend that counts
        def backend(gm, example_inputs):
            graphs.append(sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes))
            return compile_fx(gm, example_inputs)
        return compile_(fn, backend=backend, **options)
    monkeypatch.setattr(torch, "compile", counting_compile)
    model = build(PRESETS["gpt2-nano"], seed=42, device="cuda").eval()
    eager = probe.probe(model, sequences=250, seq_len=128, batch_size=64)
    compiled = probe.probe(model, sequences=250, seq_len=128, batch_size=64, compile=True)
    assert len([n for n in graphs if n > 10]) == 2, graphs        # the two shapes, compiled in the warm-up
    moved = abs(eager["counts"] - compiled["counts"]).sum() / 2
    assert moved <= 0.05 * 250
    for e, c in zip(eager["cosine"], compiled["cosine"]):
        assert c["mean"] == pytest.approx(e["mean"], abs=1e-2)


def test_one_process_nccl_ddp_trains_the_plain_runs_weights(tmp_path):
    """train.py under torchrun with one process joins an NCCL group of one and wraps the model in DDP; its
    weights after 3 steps equal one plain process's (both float32 with TF32 on, as train.py runs; only the
    order of CUDA atomics may differ)."""
    (tmp_path / "text.txt").write_text("Twas brillig, and the slithy toves did gyre and gimble.\n" * 80)
    text = str(tmp_path / "bytes")
    data.prepare([str(tmp_path / "text.txt")], text, tokenizer="bytes", val_fraction=0.2)
    flags = ["--data", text, "--n_layer", "2", "--n_embd", "64", "--n_head", "2", "--block_size", "32",
             "--device", "cuda", "--dtype", "float32", "--max_steps", "3", "--batch_size", "8", "--eval_every", "3",
             "--lr", "1e-3", "--warmup", "1",
             "--eval_sequences", "8", "--log_every", "1"]
    proc = torchrun("train.py", flags, tmp_path / "ddp", "--out_dir", cwd=ROOT, nproc=1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "DDP over nccl" in proc.stdout, proc.stdout[-2000:]
    before = torch.backends.cuda.matmul.allow_tf32
    train.train(train.parse_args([*flags, "--out_dir", str(tmp_path / "one")]))
    assert torch.backends.cuda.matmul.allow_tf32 == before          # TF32 for the run only
    a, b = (read_checkpoint(train.list_checkpoints(str(tmp_path / d))[-1][1])["model"] for d in ("ddp", "one"))
    init = read_checkpoint(train.checkpoint_path(str(tmp_path / "one"), 0))["model"]
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6), k
        assert k.endswith("bias") or (a[k] - init[k]).abs().max() > 1e-4, k     # they trained: not vacuous
