"""
studies/seed_preference.py: the token a fresh init prefers, over many seeds -- named by the contraction
direction (Finding 2.2), and moved by the block seed alone (Section 3), on probe.py's pass.

    direction        Finding 2.2: for each of --models block seeds (from the first of --seeds), the token read
                     through the LM head along the contraction direction (the mean normalized final state) against
                     the most predicted token; the overlap is the share of seeds where they are the same (paper:
                     100 models, 2,000 sequences of 1,024)
    seed_dependence  Table 1's claim that the preferred token is the seed's: the top-1 token of each of --seeds
                     (one shared embedding), the distinct top-1 tokens among them, and the first seed built twice,
                     which must give identical counts

Makes docs/reproduce.md's Finding 2.2 and seed-dependence numbers (gpt2-nano, embedding seed 0, 512 sequences of
64; direction over seeds 42-49):

    python -m studies.seed_preference                        # both sections: 5 min 49 s on 2 cores
    python -m studies.seed_preference --exp seed_dependence  # 99 s on 2 cores
    torchrun --nproc_per_node 8 -m studies.seed_preference --exp direction --models 100 --sequences 2000 --seq_len 1024

Under torchrun each process probes every world-th seed of direction on its own GPU and rank 0 gathers the rows;
seed_dependence runs on rank 0. results.json under --out.
"""
import dataclasses

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, flag_type, join_process_group, leave_process_group, prepare_device,
                    print_table, results_of, run_script, seed_int, seed_range, torchrun_rank)
import numpy as np
import torch.distributed as dist

from probe import SEEDS, fresh_model, run_probe, token_preference
from studies.fresh_probes import add_study_flags, study_config

EXPERIMENTS = ("direction", "seed_dependence")
MODELS = 8                          # direction's default number of seeds


# ----------------------------------------------------------------------------- Finding 2.2: the contraction direction

def direction_rows(args, config, seeds: list) -> list:
    rows = []
    for seed in seeds:
        r = run_probe(args, fresh_model(args, config, seed))
        pref = token_preference(r["counts"])
        rows.append(dict(seed=seed, top1_id=pref["top1_id"], top1_freq=pref["top1_freq"],
                         direction_top1=r["direction_top1"]))
    return rows


def report_direction(args, rows: list) -> dict:
    hits = sum(r["top1_id"] == r["direction_top1"] for r in rows)
    overlap = hits / len(rows)
    print(f"Finding 2.2: token along the contraction direction vs most-predicted token, {len(rows)} models "
          f"({args.model}, {args.sequences} sequences of {args.seq_len} each)")
    print_table([dict(seed=r["seed"], most_predicted=r["top1_id"], freq=f"{100 * r['top1_freq']:.2f}%",
                      direction_top1=r["direction_top1"], same="=" if r["top1_id"] == r["direction_top1"] else "x")
                 for r in rows])
    print(f"overlap {hits}/{len(rows)} = {100 * overlap:.0f}%")
    return dict(rows=rows, overlap=overlap)


# ----------------------------------------------------------------------------- seed dependence

def seed_dependence(args, config) -> dict:
    rows = []
    for seed in list(args.seeds) + [args.seeds[0]]:     # the first seed twice: must repeat exactly
        counts = run_probe(args, fresh_model(args, config, seed))["counts"]
        rows.append(dict(seed=seed, counts=counts, **token_preference(counts)))
    same = bool(np.array_equal(rows[0]["counts"], rows[-1]["counts"]))
    distinct = len({r["top1_id"] for r in rows[:-1]})
    print(f"Seed dependence: {args.model}, embedding seed {args.embed_seed}, {args.sequences} sequences of "
          f"{args.seq_len}")
    print_table([dict(seed=r["seed"], top1_id=r["top1_id"], freq=f"{100 * r['top1_freq']:.2f}%",
                      log10_p=f"{r['log10_p']:.1f}") for r in rows])
    print(f"  {distinct} distinct top-1 ids over {len(rows) - 1} seeds; seed {args.seeds[0]} twice gives identical "
          f"counts: {same}")
    return dict(rows=[{k: v for k, v in r.items() if k != "counts"} for r in rows], identical_repeat=same,
                distinct_top1=distinct)


# ----------------------------------------------------------------------------- the study

def main(argv=None):
    p = ArgumentParser(prog="studies.seed_preference", description="The token a fresh init prefers, over many "
                       "seeds: named by the contraction direction (Finding 2.2), moved by the seed (Section 3).")
    p.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=SEEDS,
                   help=f"block init seeds of seed_dependence; direction's run from the first (default "
                   f"{' '.join(map(str, SEEDS))})")
    p.add_argument("--models", type=flag_type("int>=1"), default=None,
                   help=f"number of seeds for direction, from the first of --seeds (default {MODELS}; paper: 100)")
    add_study_flags(p, EXPERIMENTS, "out/seed_preference")
    args = p.parse_args(argv)
    config, exps = study_config(args, EXPERIMENTS)
    if "direction" in exps:
        args.models = MODELS if args.models is None else args.models
        seeds = seed_range(args.seeds[0], args.models, "the first of --seeds")
    elif args.models is not None:
        raise ValueError("--models counts the seeds of --exp direction, which is not asked for: drop --models, or "
                         "add --exp direction")
    device = prepare_device(args)
    rank, world, _ = torchrun_rank()
    join_process_group(device)
    with results_of(args, dict(config=dataclasses.asdict(config)), write=rank == 0) as results:   # rank 0 writes
        if "direction" in exps:
            rows = direction_rows(args, config, seeds[rank::world])      # each rank: every world-th seed
            if world > 1:
                parts = [None] * world
                dist.all_gather_object(parts, rows)
                rows = [row for part in parts for row in part]
            if rank == 0:
                results["direction"] = report_direction(args, sorted(rows, key=lambda r: r["seed"]))
        if "seed_dependence" in exps and rank == 0:
            results["seed_dependence"] = seed_dependence(args, config)
    leave_process_group()


if __name__ == "__main__":
    run_script(main, "studies.seed_preference")
