"""
studies/fingerprint_speed.py: how long does one SeedPrint fingerprint take? (seedprint.py's cost at scale)

Builds a fresh --model (a preset as named, plus knob flags, seeded by --seed) on --device with weights in --dtype
(default bfloat16 on CUDA, where the fingerprint runs under bf16 autocast in any case), then sends N = --sequences
random sequences of --seq_len through seedprint.fingerprint in batches of --batch_size. The fingerprint is timed
end to end, as a user waits for it (inputs drawn, states copied back, the first batch's warm-up); the build is timed
apart. Reports tokens/s, TFLOP/s (model.forward_flops, no LM head), the share of the GPU's bf16 peak (MFU) and the
peak GPU memory.

docs/seedprint.md's speed line for a 7B model (59.7 s end to end and 45.8% MFU on one H100, with --batch_size 50):

    python -m studies.fingerprint_speed --model llama2-7b --seq_len 1024 --batch_size 50 --device cuda

The default (tiny, 2000 sequences of 64) takes about 8 s on 2 cores.
"""
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, add_device_flags, check_dtype_runs, check_output, flag_type, lock_dir,
                    peak_flops, print_table, resolve_device, run_script, seed_int, update_results)
import torch

import evidence
import seedprint
from init import add_config_flags, build, config_from_flags
from model import forward_flops


def main(argv=None):
    p = ArgumentParser(prog="studies.fingerprint_speed", description="Time one SeedPrint fingerprint of a fresh "
                       "model: tokens/s, TFLOP/s, MFU and peak memory.")
    add_config_flags(p, default_model="tiny")
    p.add_argument("--seed", type=seed_int, default=42, help="init seed of the model")
    p.add_argument("--sequences", type=flag_type("int>=10"), default=2000, help="random input sequences N")
    p.add_argument("--seq_len", type=flag_type("int>=1"), default=64, help="tokens per input")
    p.add_argument("--input_seed", type=seed_int, default=0)
    p.add_argument("--batch_size", type=flag_type("int>=1"), default=32, help="sequences per forward pass")
    add_device_flags(p, "dtype of the weights (default: bfloat16 on CUDA, float32 elsewhere)")
    p.add_argument("--out", default="out/fingerprint_speed")
    args = p.parse_args(argv)
    config = config_from_flags(args)
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
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.time()
        H = seedprint.fingerprint(model, args.sequences, args.seq_len, seed=args.input_seed,
                                  batch_size=args.batch_size, name=args.model, progress=True)
        sync()
        seconds = time.time() - t0
        flops = forward_flops(model, args.seq_len, logits_positions=0) * args.sequences
        peak = peak_flops(device)
        row = dict(model=args.model, params=model.num_params(), dtype=dtype_name,
                   autocast="bfloat16" if device.type == "cuda" else None, sequences=args.sequences,
                   seq_len=args.seq_len, batch_size=args.batch_size, width=H.shape[1], build_seconds=built,
                   seconds=seconds, tokens_per_s=args.sequences * args.seq_len / seconds, pflop=flops / 1e15,
                   tflops=flops / seconds / 1e12, mfu=flops / seconds / peak if peak else None,
                   peak_memory_gib=torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda"
                   else None)
        print_table([row], floats="{:.4g}")
        update_results(os.path.join(args.out, "results.json"), {"speed": row}, str(device), dtype_name)


if __name__ == "__main__":
    run_script(main, "studies.fingerprint_speed")
