"""
studies/fresh_inits.py: SeedPrint's false-positive rate where the truth is known by construction -- fresh inits
of one architecture from different seeds, every pair unrelated (paper Section 6.1; seedprint.py's calibration at
every width).

Builds --fpr_inits fresh inits (seeds from --fpr_seed0) of --base's architecture (a Hugging Face directory) or of
the model flags' (LLaMA-style blocks on a preset), fingerprints each once, and tests every pair: the rate of the
verdict, of its two parts alone (p_perm, p_overlap) and, with --align on, of the aligned verdict, each with its 95%
Clopper-Pearson interval; the z of the permutation test over the pairs (null: mean 0, sd 1); and for every false
positive, which part made it, with p_perm recomputed by Monte Carlo (is it the closed form's tail, or the data?).

Makes the README's calibration rows 2-4 (docs/seedprint.md, "Calibration at every width"):

    python -m studies.fresh_inits --model tiny --n_embd 64 --vocab_size 256 --fpr_inits 60 --k 32 --align on
        # 17 min on one core
    python -m studies.fresh_inits --base DIR --fpr_inits 20                 # SmolLM2's width: 86 min on 2 cores
    python -m studies.fresh_inits --base DIR --fpr_inits 60 --sequences 300  # about 50 min

The default (12 inits of tiny at width 64) takes about 50 s on 2 cores.
"""
import dataclasses
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Progress, check_output, flag_type, lock_dir, parse_bool, print_table,
                    resolve_device, run_script, seed_int, seed_range, update_results)
import numpy as np

import align
import hf
import seedprint
from init import config_overrides
from studies.lineage import Lineage, add_lineage_flags, check_lineage_flags, fresh_init, rate_summary


def permutation_p_monte_carlo(C: np.ndarray, draws: int = 20_000, seed: int = 0) -> float:
    """seedprint's permutation test's p by sampling instead of its closed form: (1 + #{pi: T(pi) >= T(id)}) /
    (1 + draws) over uniformly random permutations pi of C's columns, T(pi) = sum_j C[j, pi(j)]: exact for any C
    (no normal approximation). Is a false positive's small p_perm the closed form's tail, or the data?"""
    n, rng, hits = len(C), np.random.default_rng(seed), 0
    observed = np.trace(C) - 1e-12 * max(1.0, abs(np.trace(C)))       # ties count as at least as large
    for lo in range(0, draws, 1000):
        perms = np.argsort(rng.random((min(1000, draws - lo), n)), axis=1)
        hits += int((C[np.arange(n), perms].sum(axis=1) >= observed).sum())
    return (1 + hits) / (1 + draws)


def made_by(r: dict) -> str:
    """Which part of the verdict made a false positive."""
    if r["p"] >= seedprint.ALPHA:
        return "-"
    if max(r["p_perm"], r["p_overlap"]) < seedprint.ALPHA:
        return "p_perm and p_overlap"
    if r["p_perm"] < seedprint.ALPHA:
        return "p_perm"
    if r["p_overlap"] < seedprint.ALPHA:
        return "p_overlap"
    return "their Fisher combination alone"


def main(argv=None):
    p = ArgumentParser(prog="studies.fresh_inits", description="SeedPrint's false-positive rate on fresh inits of "
                       "one architecture: every pair is unrelated by construction.")
    p.add_argument("--fpr_inits", type=flag_type("int>=2"), default=12, help="fresh inits (seeds from --fpr_seed0)")
    p.add_argument("--fpr_seed0", type=seed_int, default=100)
    p.add_argument("--base", default=None, help="a Hugging Face directory whose architecture is initialized "
                   "(default: the model flags, LLaMA-style blocks)")
    p.add_argument("--align", type=parse_bool, default=False, metavar="on|off", help="also the aligned verdict")
    add_lineage_flags(p, out="out/lineage", template=None)
    args = p.parse_args(argv)
    if args.base and (config_overrides(args) or args.model != "tiny"):
        p.error("--base gives the architecture: drop --model and the knob flags")
    if args.base:                    # the models are fresh inits of --base's architecture, else of the flags'
        config = hf.read_config(args.base)
        check_lineage_flags(args, {args.base: config}, "the width of --base")
    else:
        config = check_lineage_flags(args)
    check_output(args.out)
    device = str(resolve_device(args.device))
    seeds = seed_range(args.fpr_seed0, args.fpr_inits, "--fpr_seed0")
    with lock_dir(args.out):
        models = [fresh_init(config, s) for s in seeds]
        lineage = Lineage(args, args.out, device, vocab=config.vocab_size)
        bar = Progress(len(models), "inits fingerprinted", "models", every=0)
        for m in models:
            lineage.fingerprint_sets(m, config.vocab_size, align.SETS if args.align else ["exact"])
            bar.update()
        results = []
        for i in range(len(models)):
            for j in range(i + 1, len(models)):
                r, aligned = lineage.pair(models[i], models[j], args.align)
                row = dict(a=seeds[i], b=seeds[j], S=r.n_identity, mean_tau=r.mean_tau, z_perm=r.z_perm, p=r.p,
                           p_perm=r.p_perm, p_overlap=r.p_overlap, p_aligned=aligned.p if aligned else None,
                           table_fit=aligned.alignment.table_fit if aligned else None,
                           matched_on=aligned.alignment.matched_on if aligned else "")
                results.append(dict(row, made_by=made_by(row)))
        tests = ("p", "p_perm", "p_overlap") + (("p_aligned",) if args.align else ())
        table = [dict(test=t, **rate_summary([r[t] for r in results], [])) for t in tests]
        sizes = [r["S"] for r in results]
        print(f"{len(models)} fresh inits (width {config.n_embd}, vocab {config.vocab_size}, k "
              f"{min(args.k, config.n_embd // 2)}), {len(results)} unrelated pairs, |S| {min(sizes)}-{max(sizes)}")
        print_table(table)
        z = np.array([r["z_perm"] for r in results])
        print(f"z of the permutation test over the {len(z)} pairs: mean {z.mean():+.3f}, sd {z.std():.3f} "
              f"(its null: 0, 1)")
        fits = [r["table_fit"] for r in results if r["table_fit"] is not None]
        if fits:
            print(f"token-table match: mean |r| {min(fits):.3f}-{max(fits):.3f} over the pairs, trusted in "
                  f"{sum(r['matched_on'] == 'token table' for r in results)}")
        elif args.align:
            print("token-table match: not used (the held-out rows are fewer than the width)")
        false = [r for r in results if r["p"] < seedprint.ALPHA]
        for r in false:                               # is a small p_perm the closed form's tail, or the data?
            HA, HB = (lineage.exact_fingerprint(models[seeds.index(s)], config.vocab_size) for s in (r["a"], r["b"]))
            C = seedprint.cross_matrix(HA, HB, args.k, args.rank_by, args.set_mode)[2]
            r["p_perm_monte_carlo"] = permutation_p_monte_carlo(C)
            print(f"  false positive: seeds {r['a']}, {r['b']}: |S| {r['S']}, p {r['p']:.2g} (p_perm "
                  f"{r['p_perm']:.2g}, by Monte Carlo {r['p_perm_monte_carlo']:.2g}; p_overlap {r['p_overlap']:.2g}): "
                  f"made by {r['made_by']}")
        causes = {k: sum(r["made_by"] == k for r in false) for k in dict.fromkeys(r["made_by"] for r in false)}
        res = dict(config=dataclasses.asdict(config), table=table, pairs=results, z_mean=float(z.mean()),
                   z_sd=float(z.std()), made_by=causes)
        update_results(os.path.join(args.out, "results.json"), {"inits": res}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.fresh_inits")
