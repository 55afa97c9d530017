"""
studies/fingerprint_speed.py: how long does one SeedPrint fingerprint take? (seedprint.py's cost at scale)

Builds a fresh --model (a preset as named, plus knob flags, seeded by --seed) on --device with weights in --dtype
(default bfloat16 on CUDA, where the fingerprint runs under bf16 autocast in any case), then sends N = --sequences
random sequences of --seq_len through seedprint.fingerprint in batches of --batch_size. The fingerprint is timed
end to end, as a user waits for it (inputs drawn, states copied back); the build is timed apart, and so are, where
asked, the compile (--compile on: each batch shape compiled before the clock) and the search for the largest batch
that fits the device's memory (--fit_batch on). Reports the flops (model.forward_flops, no LM head), tokens/s,
TFLOP/s, the share of the GPU's bf16 peak (MFU) and the peak GPU memory.

docs/seedprint.md's speed line for a 7B model (59.7 s end to end and 45.8% MFU on one H100, with --batch_size 50,
uncompiled, a host sync a batch):

    python -m studies.fingerprint_speed --model llama2-7b --seq_len 1024 --batch_size 50 --device cuda
    python -m studies.fingerprint_speed --model llama2-7b --seq_len 1024 --batch_size 50 --device cuda --compile on

The default (tiny, 2000 sequences of 64) takes about 8 s on 2 cores.
"""
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, add_compile_flags, add_device_flags, check_compile_mode, check_dtype_runs,
                    check_output, flag_type, lock_dir, parse_bool, peak_flops, print_table, resolve_device,
                    run_script, seed_int, update_results)
import torch

import evidence
import seedprint
from init import add_config_flags, build, config_from_flags
from model import GPT, forward_flops


def largest_batch(model: GPT, seq_len: int, start: int, most: int, fits=None) -> int:
    """The largest batch of seq_len tokens, start times a power of two (or `most`, the sequences there are), whose
    pass fits the device's memory: doubled until a pass runs out of it or `most` is reached. Tried eagerly, once a
    size (a compiled pass needs no more memory than eager's: it fuses, and keeps fewer intermediates). fits(b):
    whether a batch of b fits (default: a pass of b random sequences, on the device under its autocast)."""
    fits = fits or (lambda b: fingerprint_fits(model, b, seq_len))
    batch = start
    while batch < most and fits(min(2 * batch, most)):
        batch = min(2 * batch, most)
    return batch


def fingerprint_fits(model: GPT, batch: int, seq_len: int) -> bool:
    """Whether a fingerprint pass of `batch` sequences of seq_len tokens runs in the device's memory."""
    try:
        seedprint.fingerprint(model, batch, seq_len, batch_size=batch)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        if next(model.parameters()).is_cuda:
            torch.cuda.empty_cache()          # what the failed try held, back to the device for the next


def main(argv=None):
    p = ArgumentParser(prog="studies.fingerprint_speed", description="Time one SeedPrint fingerprint of a fresh "
                       "model: tokens/s, TFLOP/s, MFU and peak memory.")
    add_config_flags(p, default_model="tiny")
    p.add_argument("--seed", type=seed_int, default=42, help="init seed of the model")
    p.add_argument("--sequences", type=flag_type("int>=10"), default=2000, help="random input sequences N")
    p.add_argument("--seq_len", type=flag_type("int>=1"), default=64, help="tokens per input")
    p.add_argument("--input_seed", type=seed_int, default=0)
    p.add_argument("--batch_size", type=flag_type("int>=1"), default=32, help="sequences per forward pass")
    p.add_argument("--fit_batch", type=parse_bool, default=False, metavar="on|off", help="before the clock, double "
                   "--batch_size while a pass fits the device's memory (at most --sequences), and time that batch")
    add_compile_flags(p, "the fingerprint's pass (each batch shape compiled before the clock)")
    add_device_flags(p, "dtype of the weights (default: bfloat16 on CUDA, float32 elsewhere)")
    p.add_argument("--out", default="out/fingerprint_speed")
    args = p.parse_args(argv)
    config = config_from_flags(args)
    check_compile_mode(args.compile, args.compile_mode)
    evidence.check_models([config], [args.model], seq_len=args.seq_len)
    check_output(args.out)
    device = resolve_device(args.device)
    dtype_name = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    check_dtype_runs(device, DTYPES[dtype_name])
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    with lock_dir(args.out):
        t0 = time.time()
        model = build(config, args.seed, device=device, dtype=DTYPES[dtype_name]).eval()
        sync()
        built = time.time() - t0
        t0 = time.time()
        batch = largest_batch(model, args.seq_len, args.batch_size, args.sequences) if args.fit_batch \
            else args.batch_size
        fit_seconds = time.time() - t0 if args.fit_batch else None
        mode = args.compile_mode if args.compile else None
        compile_seconds = None
        if mode:          # each batch shape the timed run will see, compiled before the clock (seedprint keeps them)
            shapes = {min(batch, args.sequences), args.sequences % batch} - {0}
            t0 = time.time()
            seedprint.fingerprint(model, sum(shapes), args.seq_len, batch_size=max(shapes), compile_mode=mode)
            sync()
            compile_seconds = time.time() - t0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.time()
        H = seedprint.fingerprint(model, args.sequences, args.seq_len, seed=args.input_seed, batch_size=batch,
                                  name=args.model, progress=True, compile_mode=mode)
        sync()
        seconds = time.time() - t0
        per_token = forward_flops(model, args.seq_len, logits_positions=0) / args.seq_len
        flops = per_token * args.seq_len * args.sequences
        peak = peak_flops(device)
        row = dict(model=args.model, params=model.num_params(), dtype=dtype_name,
                   autocast="bfloat16" if device.type == "cuda" else None, sequences=args.sequences,
                   seq_len=args.seq_len, batch_size=batch, batch_asked=args.batch_size, fit_seconds=fit_seconds,
                   compile_mode=mode, compile_seconds=compile_seconds, width=H.shape[1], build_seconds=built,
                   seconds=seconds, tokens_per_s=args.sequences * args.seq_len / seconds, flops_per_token=per_token,
                   pflop=flops / 1e15, tflops=flops / seconds / 1e12, mfu=flops / seconds / peak if peak else None,
                   peak_memory_gib=torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda"
                   else None)
        print_table([row], floats="{:.4g}")
        update_results(os.path.join(args.out, "results.json"), {"speed": row}, str(device), dtype_name)


if __name__ == "__main__":
    run_script(main, "studies.fingerprint_speed")
