"""
studies/load_cost.py: what does loading a model cost? (hf.py's and model.py's promise: a checkpoint loads
tensor by tensor, in its own dtype, so the process's peak memory grows by about the size of its weight files)

Loads MODEL (a train.py checkpoint or a Hugging Face directory) once, in its own dtype or --dtype, and reports
its parameter count, the load time, and the growth of the process's peak resident memory (getrusage, Unix)
against the size of its weight files.

Makes docs/real_checkpoints.md's memory paragraph (a LLaMA-7B-shaped bf16 checkpoint, 12.55 GiB in 3 shards, grows
the peak by 1.010x; SmolLM2-135M by 1.32x in bf16, 1.17x in float32):

    python -m studies.load_cost DIR                   # seconds for SmolLM2-135M on 2 cores
    python -m studies.load_cost DIR --dtype float32

Run one model per process: the peak of an earlier load would hide a later one.
"""
import dataclasses
import os
import resource
import sys
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, check_dtype_runs, check_output, lock_dir, resolve_device, run_script,
                    update_results)

import hf


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes (getrusage counts kilobytes on Linux, bytes on macOS)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def weight_files(stored: hf.Stored) -> list:
    """The files the loader reads a model's weights from (hf.read's): a checkpoint file, or the directory's shards
    (where an index names the shards, a stray *.safetensors file beside them is not counted; without one, every
    *.safetensors file is a shard)."""
    return [stored.path] if stored.checkpoint is not None else list(stored.shards)


def main(argv=None):
    p = ArgumentParser(prog="studies.load_cost", description="Load one model and report what loading it cost: "
                       "time, and peak memory against its weight files.")
    p.add_argument("model", help="a train.py checkpoint or a Hugging Face directory")
    p.add_argument("--dtype", choices=tuple(DTYPES), help="load in this dtype (default: the checkpoint's own)")
    p.add_argument("--out", default="out/load_cost")
    args = p.parse_args(argv)
    stored = hf.read(args.model)                # refuses a non-model; no weight read yet
    check_output(args.out)
    device = resolve_device("cpu")
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    size = sum(os.path.getsize(f) for f in weight_files(stored))
    with lock_dir(args.out):
        before, t0 = peak_rss(), time.time()
        model = hf.load(stored, dtype=DTYPES[args.dtype] if args.dtype else None)
        seconds, grown = time.time() - t0, peak_rss() - before
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        res = dict(model=args.model, params=model.num_params(), dtype=dtype, seconds=seconds, file_bytes=size,
                   peak_rss_growth_bytes=grown, ratio=grown / size if size else None,
                   config=dataclasses.asdict(model.config))
        print(f"{args.model}: {res['params']:,} parameters in {dtype}, loaded in {seconds:.1f} s; peak memory grew "
              f"by {grown / 2**30:.2f} GiB for {size / 2**30:.2f} GiB of weight files ({res['ratio']:.3f}x)")
        update_results(os.path.join(args.out, "results.json"), {"load": res}, "cpu", dtype)
    return res


if __name__ == "__main__":
    run_script(main, "studies.load_cost")
