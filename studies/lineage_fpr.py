"""
studies/lineage_fpr.py: how often does SeedPrint call unrelated models related, and how often does it find a
true lineage? (paper Section 6.1; the calibration behind seedprint.py's verdicts)

Models: --fpr_inits fresh inits (seeds from --fpr_seed0) of LLaMA-style `tiny` models; the first --fpr_trained of
them trained --max_steps on --corpus, all in one data order; the first --fpr_descendants of those continued on
--corpus2. Pairs, each with seedprint.py's exact and aligned verdicts and the reference tests beside them:

    unrelated   init vs init; trained vs trained (same data and order); trained vs another seed's init
    related     each init vs its checkpoints; each base vs its continuation; the init vs that continuation;
                every related pair again with B in a permuted residual basis (signs flipped at random where that
                keeps the function): the same lineage in other coordinates

Reports each test's false-positive rate with its 95% Clopper-Pearson interval and its power, pair kind by pair
kind, and a QQ plot of the unrelated pairs' p-values (fpr_qq.png). Makes the README's first calibration row and
docs/seedprint.md's calibration table and figure:

    python -m studies.lineage_fpr --tokenizer gpt2 --n_embd 128 --block_size 64 --batch_size 32 --fpr_inits 20 \
        --fpr_trained 12 --fpr_descendants 4         # about 2 h on one core, nearly all of it training

The default (12 inits, 4 trained 200 steps, tiny at width 64, bytes) takes 12 minutes on 2 cores.
"""
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Progress, check_output, figure, flag_type, lock_dir, print_table, resolve_device,
                    run_script, save_figure, seed_int, seed_range, update_results)
import numpy as np

import data
import seedprint
from studies.lineage import (Lineage, add_lineage_flags, architecture, check_lineage_flags, checkpoints, corpus,
                            init_checkpoint, permuted, rate_summary, reference_tests, sign_flip, trained, training)

TESTS = ("p", "p_perm", "p_overlap", "p_base", "p_t", "p_u", "p_z", "p_aligned")


def qq_plot(results: list, path: str) -> None:
    """Each test's p-values on the unrelated pairs against uniform quantiles, whole and near alpha."""
    plt, fig, axes = figure(1, 2, figsize=(10, 4))
    for ax, zoom in zip(axes, (1.0, 0.05)):
        for t in TESTS:
            p = np.sort([r[t] for r in results if not r["related"] and r[t] is not None])
            expected = (np.arange(1, len(p) + 1) - 0.5) / len(p)
            ax.plot(expected, p, ".-", ms=3, label=f"{t}" + (" (verdict)" if t == "p" else ""))
        ax.plot([0, zoom], [0, zoom], "k:", lw=1, label="uniform")
        ax.axhline(seedprint.ALPHA, c="gray", lw=0.5)
        ax.set(xlim=(0, zoom), ylim=(0, zoom), xlabel="uniform quantile", ylabel="p-value, unrelated pairs",
               title=f"QQ plot of {len(p)} unrelated pairs" + (" (zoom)" if zoom < 1 else ""))
        ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None):
    p = ArgumentParser(prog="studies.lineage_fpr", description="SeedPrint's false-positive rate on unrelated pairs "
                       "and its power on related ones, over models trained here from known seeds.")
    p.add_argument("--fpr_inits", type=flag_type("int>=2"), default=12, help="fresh inits (seeds from --fpr_seed0)")
    p.add_argument("--fpr_trained", type=flag_type("int>=0"), default=4, help="how many of them are trained")
    p.add_argument("--fpr_descendants", type=flag_type("int>=0"), default=None,
                   help="how many trained models get a continuation on --corpus2 (default: all)")
    p.add_argument("--fpr_seed0", type=seed_int, default=100)
    add_lineage_flags(p, out="out/lineage")
    args = p.parse_args(argv)
    check_lineage_flags(args)
    if args.fpr_trained > args.fpr_inits:
        p.error(f"--fpr_trained {args.fpr_trained} is more than the --fpr_inits {args.fpr_inits} there are to train")
    check_output(args.out)
    device = str(resolve_device(args.device))
    seeds = seed_range(args.fpr_seed0, args.fpr_inits, "--fpr_seed0")
    trained_seeds = seeds[:args.fpr_trained]
    with lock_dir(args.out):
        # the models
        text, text2 = (corpus(args.out, c, args.tokenizer, args.data_from) for c in (args.corpus, args.corpus2))
        label2 = data.corpus_label(args.corpus2)       # a corpus as one path component
        meta = data.load_data(text)["meta"]
        config, template = architecture(args, vocab_size=meta["vocab_size"]), training(args, device)
        inits = {s: init_checkpoint(args.out, config, s, meta["tokenizer"]) for s in seeds}
        runs = {s: trained(template, args.out, f"seed{s}", s, text) for s in trained_seeds}
        final = {s: checkpoints(runs[s])[-1][1] for s in trained_seeds}

        # the pairs: (A, B, kind, related)
        pairs = [(inits[a], inits[b], "init vs init", False) for i, a in enumerate(seeds) for b in seeds[i + 1:]]
        pairs += [(final[a], final[b], "trained vs trained", False) for i, a in enumerate(trained_seeds)
                  for b in trained_seeds[i + 1:]]
        pairs += [(final[a], inits[b], "trained vs another init", False) for a in trained_seeds for b in seeds
                  if b != a]
        for s in trained_seeds:
            pairs += [(checkpoints(runs[s])[0][1], c, "init vs its checkpoint", True)
                      for _, c in checkpoints(runs[s])[1:]]
        for s in trained_seeds[:args.fpr_descendants]:
            child = checkpoints(trained(template, args.out, f"seed{s}_on_{label2}", s, text2,
                                        steps=args.max_steps // 2 or 1, init_from=final[s]))[-1][1]
            pairs += [(final[s], child, "base vs continual descendant", True),
                      (inits[s], child, "init vs continual descendant", True)]
        flip = sign_flip(inits[seeds[0]])
        pairs += [(a, permuted(b, flip), kind + ", B permuted", True) for a, b, kind, truth in list(pairs) if truth]

        # every test on every pair
        lineage = Lineage(args, args.out, device, vocab=meta["vocab_size"])
        other_mode = "base" if args.set_mode == "coset" else "coset"
        bar = Progress(len(pairs), "pairs tested", "pairs")
        results = []
        for a, b, kind, truth in pairs:
            r, aligned = lineage.pair(a, b)
            HA, HB = (lineage.exact_fingerprint(m, meta["vocab_size"]) for m in (a, b))
            other = seedprint.seedprint_test(HA, HB, k=args.k, rank_by=args.rank_by, set_mode=other_mode)
            reference = reference_tests(HA, HB, k=args.k, rank_by=args.rank_by, set_mode=args.set_mode)
            results.append(dict(kind=kind, related=truth, permuted=kind.endswith("permuted"), S=r.n_identity,
                                mean_tau=r.mean_tau, p=r.p, p_perm=r.p_perm, p_overlap=r.p_overlap,
                                p_base=other.p if args.set_mode == "coset" else r.p, **reference,
                                p_aligned=aligned.p, p_matched=aligned.alignment.p_aligned, tau_aligned=aligned.alignment.tau_aligned,
                                moved=aligned.alignment.moved, matched_on=aligned.alignment.matched_on, table_fit=aligned.alignment.table_fit))
            bar.update()

        # rates, kind by kind
        table = []
        for t in TESTS:
            row = dict(test=t)
            for kind in dict.fromkeys(r["kind"] for r in results):
                ps = np.array([r[t] for r in results if r["kind"] == kind and r[t] is not None])
                row[kind] = f"{(ps < seedprint.ALPHA).sum()}/{len(ps)}"
            tested = [r for r in results if r[t] is not None]           # the reference tests need |S| >= 2
            row.update(rate_summary([r[t] for r in tested if not r["related"]],
                                    [r[t] for r in tested if r["related"] and not r["permuted"]],
                                    [r[t] for r in tested if r["permuted"]]))
            table.append(row)
        print_table(table)
        qq_plot(results, os.path.join(args.out, "fpr_qq.png"))
        update_results(os.path.join(args.out, "results.json"),
                       {"fpr": dict(alpha=seedprint.ALPHA, table=table, pairs=results)}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.lineage_fpr")
