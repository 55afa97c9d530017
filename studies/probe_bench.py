"""
studies/probe_bench.py: what does a probe pass cost beyond its matrix products? (probe.py's speed)

Builds a fresh --model (seed --seed), runs probe.py's one pass (Table 1's measurement, every statistic on:
argmax counts, pairwise cosines at every layer, the contraction direction, dimension counts) over --sequences
random sequences of --seq_len, once to warm up and once timed, then times the bare matrix products of the same
forward with the model's own weights on random activations. The ratio is the overhead of everything else.

Makes docs/reproduce.md's speed line (a probe pass costs 1.06x its bare matmuls on one core):

    python -m studies.probe_bench           # gpt2-nano, 512 sequences of 64: about 2 minutes on 2 cores
"""
import math
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, add_compile_flags, add_device_flags, check_compile_mode, check_dtype_runs,
                    check_output, flag_type, lock_dir, resolve_device, run_script, seed_int, update_results)
from model import GPT
import torch

from init import add_config_flags, build, config_from_flags
from probe import probe


@torch.no_grad()
def bare_matmul_seconds(model: GPT, batch: int, seq_len: int, batches: int) -> float:
    """Wall time of the forward's matrix products alone, with the model's own weights on random
    activations of the right shapes: per layer q/k/v, QK^T, PV, W_O, MLP up (and gate) and down;
    the LM head on the last position. The floor a probe pass is measured against."""
    p = next(model.parameters())
    cfg, dev, dt = model.config, p.device, p.dtype
    H, hd, T = cfg.n_head, cfg.head_dim, seq_len
    x = torch.randn(batch * T, cfg.n_embd, device=dev, dtype=dt)
    h = torch.randn(batch * T, cfg.mlp_width, device=dev, dtype=dt)
    q = torch.randn(batch, H, T, hd, device=dev, dtype=dt)
    probs = torch.randn(batch, H, T, T, device=dev, dtype=dt)

    def one_batch():
        for block in model.transformer.h:
            if hasattr(block, "attn"):
                x @ block.attn.c_attn.weight.T
                q @ q.transpose(-1, -2)
                probs @ q
                x @ block.attn.c_proj.weight.T
            if hasattr(block, "mlp"):
                x @ block.mlp.c_fc.weight.T
                if hasattr(block.mlp, "c_gate"):
                    x @ block.mlp.c_gate.weight.T
                h @ block.mlp.c_proj.weight.T
        model.unembed(x[:batch])

    one_batch()                                   # warm-up
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t0 = time.time()
    for _ in range(batches):
        one_batch()
    sync()
    return time.time() - t0


def main(argv=None):
    p = ArgumentParser(prog="studies.probe_bench", description="A probe pass against the bare matrix products of "
                       "the same forward.")
    add_config_flags(p)
    p.add_argument("--seed", type=seed_int, default=42, help="block init seed")
    p.add_argument("--embed_seed", type=seed_int, default=0)
    p.add_argument("--sequences", type=flag_type("int>=2"), default=512)
    p.add_argument("--seq_len", type=flag_type("int>=1"), default=64)
    p.add_argument("--batch_size", type=flag_type("int>=1"), default=32)
    p.add_argument("--data_seed", type=seed_int, default=1234, help="seed of the random inputs")
    add_compile_flags(p, "the pass (compiled before its clock starts)")
    add_device_flags(p, "dtype of the weights", dtype_default="float32")
    p.add_argument("--out", default="out/probe_bench")
    args = p.parse_args(argv)
    config = config_from_flags(args)
    if args.seq_len > config.block_size:
        p.error(f"--seq_len {args.seq_len} exceeds the model's block_size {config.block_size}")
    check_compile_mode(args.compile, args.compile_mode)
    check_output(args.out)
    device = resolve_device(args.device)
    check_dtype_runs(device, DTYPES[args.dtype])
    with lock_dir(args.out):
        model = build(config, args.seed, args.embed_seed, device=device, dtype=DTYPES[args.dtype]).eval()
        batches = math.ceil(args.sequences / args.batch_size)
        n = batches * args.batch_size                       # whole batches, as the bare matmuls run them
        options = dict(seq_len=args.seq_len, batch_size=args.batch_size, data_seed=args.data_seed, log=True,
                       compile=args.compile, compile_mode=args.compile_mode)
        probe(model, sequences=args.batch_size, **options)                    # warm-up pass
        r = probe(model, sequences=n, **options)
        bare = bare_matmul_seconds(model, args.batch_size, args.seq_len, batches)
        print(f"bench: {n} x {args.seq_len} tokens: probe {r['seconds']:.2f} s, bare matmuls {bare:.2f} s, ratio "
              f"{r['seconds'] / bare:.2f} ({r['tokens_per_s']:,.0f} tok/s, {r['tflops']:.2f} TFLOP/s)")
        res = dict(seconds=r["seconds"], bare_matmul_seconds=bare, ratio=r["seconds"] / bare,
                   tokens_per_s=r["tokens_per_s"], tflops=r["tflops"], mfu=r["mfu"], sequences=n,
                   seq_len=args.seq_len, compile_seconds=r["compile_seconds"])
        update_results(os.path.join(args.out, "results.json"), {"bench": res}, str(device), args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.probe_bench")
