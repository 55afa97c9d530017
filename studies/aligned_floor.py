"""
studies/aligned_floor.py: does the aligned verdict test lineage, not shared data? Its calibration and power
(paper Section 6.1; seedprint.py's --align on).

The aligned verdict matches B's coordinates to A's before testing, on the whitened token tables or else on the
whitened fingerprints of held-out inputs, and its matched test counts only where that match is unmistakable (mean
|r| from align.TABLE_MATCH_R): models trained from other inits on the same data share coordinate roles that any
match finds, and the matched test's p, fit to B, holds no longer. The rule before counted a raw match on held-out
inputs where its matched mean tau reached a floor; this study fits that floor on one range of seeds, as it was fit,
and tests both rules on another, per condition (--conditions: GPT-2 vocabulary at widths 64 and 128 after 200
steps, bytes at width 128 after 1,500), on LLaMA-style `tiny` models (context 64) trained from their own inits on
the same data in the same order:

    unrelated   init vs init; trained vs trained (same data); trained vs the next seed's init
    related     each init vs its trained model; the first test seed's model vs its continuation on --corpus2
                after each of --finetune_steps; every related pair again with B in a signed-permuted basis

It reports, on the test seeds, how often each whitened match was trusted, the exact verdict, the matched test
alone, the rule before (its floor fit on the fit seeds: twice their unrelated pairs' largest raw matched tau,
rounded up to 0.01), the aligned verdict and the same without tables; the power against the continuation's
length; the whitened matches' mean |r|: the tables' on the rows they use and on the test tokens' rows, which
training moves (a stress test, never the verdict's), and the held-out inputs'.

Makes the README's "aligned" calibration row and docs/seedprint.md's "The aligned verdict" (their full run was made
under the rule before, and reported so there; the small run below under the rule now):

    python -m studies.aligned_floor         # about 3.5 h on one core, nearly all training; 7 min once trained

A small run: python -m studies.aligned_floor --conditions gpt2_w64 --fit_seeds 100 101 --test_seeds 103 104
--finetune_steps 50 (14 minutes on 2 cores).
"""
import dataclasses
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, Progress, check_output, flag_type, lock_dir, print_table,
                    resolve_device, run_script, seed_int, update_results)
import numpy as np

import align
import data
import seedprint
from studies.lineage import (Lineage, add_lineage_flags, architecture, check_lineage_flags, checkpoints, corpus,
                            fit_floor, init_checkpoint, permuted, rate_summary, sign_flip, span, trained, training)

# The conditions: where an earlier aligned verdict called same-data pairs related (GPT-2 vocabulary, few steps: most
# tokens never seen) and where it did not (bytes, long training), at two widths. Each overrides these flags.
CONDITIONS = {"gpt2_w64": dict(n_embd=64, tokenizer="gpt2", max_steps=200, batch_size=16),
              "gpt2_w128": dict(n_embd=128, tokenizer="gpt2", max_steps=200, batch_size=16),
              "bytes_w128": dict(n_embd=128, tokenizer="bytes", max_steps=1500, batch_size=32)}
CONTEXT = 64                                        # every condition's models' context (block_size)


def condition_architecture(args, name: str, **overrides):
    """The architecture of a condition's models: the flags' (architecture) at the condition's width, with a context
    of CONTEXT tokens."""
    return architecture(args, n_embd=CONDITIONS[name]["n_embd"], block_size=CONTEXT, **overrides)


def condition_pairs(args, name: str, device: str) -> list:
    """One condition's rows: every pair of its fit and test seeds, with each verdict's numbers."""
    c = CONDITIONS[name]
    out = os.path.join(args.out, "aligned", name)
    text, text2 = (corpus(out, x, c["tokenizer"], args.data_from) for x in (args.corpus, args.corpus2))
    label2 = data.corpus_label(args.corpus2)           # a corpus as one path component
    meta = data.load_data(text)["meta"]
    config = condition_architecture(args, name, vocab_size=meta["vocab_size"])
    template = training(args, device)
    template = dataclasses.replace(template, knobs={**template.knobs, "n_embd": c["n_embd"], "block_size": CONTEXT},
                                   max_steps=c["max_steps"], batch_size=c["batch_size"])
    lineage = Lineage(args, out, device, vocab=meta["vocab_size"])
    half = meta["vocab_size"] // 2
    rows = []
    for split, seeds in (("fit", args.fit_seeds), ("test", args.test_seeds)):
        inits = {s: init_checkpoint(out, config, s, meta["tokenizer"]) for s in seeds}
        final = {s: checkpoints(trained(template, out, f"seed{s}", s, text))[-1][1] for s in seeds}
        pairs = [(inits[a], inits[b], "init vs init", None) for i, a in enumerate(seeds) for b in seeds[i + 1:]]
        pairs += [(final[a], final[b], "trained vs trained, same data", None) for i, a in enumerate(seeds)
                  for b in seeds[i + 1:]]
        pairs += [(final[a], inits[b], "trained vs another init", None) for a, b in zip(seeds, seeds[1:] + seeds[:1])]
        pairs += [(inits[s], final[s], "init vs its trained model", 0) for s in seeds]
        if split == "test":
            base = seeds[0]
            child = trained(template, out, f"seed{base}_on_{label2}", base, text2,
                            steps=max(args.finetune_steps), init_from=final[base],
                            ckpt_every=math.gcd(*args.finetune_steps))
            kept = dict(checkpoints(child))
            pairs += [(final[base], kept[n], "base vs its continuation", n) for n in args.finetune_steps]
        flip = sign_flip(inits[seeds[0]])
        pairs += [(a, permuted(b, flip), kind + ", B permuted", steps) for a, b, kind, steps in list(pairs)
                  if steps is not None]
        bar = Progress(len(pairs), f"{name} {split} pairs", "pairs")
        for a, b, kind, steps in pairs:
            exact, aligned = lineage.pair(a, b)
            # a stress test of the table match, never the verdict's: the same match on the test tokens' rows,
            # which training moves (at bytes every one of them is in the training text)
            test_rows = [lineage.whitened_rows(m, 0, half) for m in (a, b)]
            trained_fit = align.whitened_match(*test_rows, signed=aligned.alignment.signed, whitened=True)[2]
            # the verdict had it had no tables: the match on held-out inputs, whitened (the rule) and raw (the rule
            # before, which counted a raw match where its matched tau reached a floor)
            A, B = (lineage.fingerprint_sets(m, meta["vocab_size"], ["test", "held_out"]) for m in (a, b))
            signed = aligned.alignment.signed
            raw = align.align_coordinates(A["held_out"], B["held_out"], signed=signed)
            white = align.whitened_match(A["held_out"], B["held_out"], signed=signed)
            if white[0] is None:            # fewer held-out inputs than the width: none to whiten, no match trusted
                white = (*raw[:2], None, False)
            inputs, raw_inputs = (seedprint.exact_verdict(A["test"], B["test"][:, m[0]] * m[1], args.k, args.rank_by,
                                                          args.set_mode) for m in (white, raw))
            rows.append(dict(condition=name, split=split, kind=kind, related=steps is not None,
                             finetune_steps=steps, p_exact=exact.p, tau_exact=exact.mean_tau,
                             aligned_related=aligned.related, trusted=aligned.alignment.trusted,
                             p_aligned_test=aligned.alignment.p_aligned, tau_aligned=aligned.alignment.tau_aligned,
                             moved=aligned.alignment.moved, matched_on=aligned.alignment.matched_on,
                             table_fit=aligned.alignment.table_fit, table_fit_test_rows=trained_fit,
                             input_fit=white[2], input_trusted=bool(white[3]), p_inputs=inputs.p,
                             tau_inputs=inputs.mean_tau, p_raw_inputs=raw_inputs.p, tau_raw_inputs=raw_inputs.mean_tau))
            bar.update()
    return rows


def aligned_summary(rows: list) -> dict:
    """Every rate on the test seeds: how often each whitened match (token tables, held-out inputs) was trusted, the
    exact verdict, the matched test alone (whatever its match), the rule before (a raw match on held-out inputs that
    counted where its matched tau reached a floor, fit here on the fit seeds' unrelated pairs), the aligned verdict
    (a match counts where trusted) and the same without tables; the power against the continuation's length; the
    whitened matches' mean |r| per condition (tables: on the rows they use and on the trained rows of the test
    tokens; inputs: on the held-out inputs)."""
    alpha = seedprint.ALPHA
    fit_unrelated = [r["tau_raw_inputs"] for r in rows if r["split"] == "fit" and not r["related"]]
    floor = fit_floor(fit_unrelated)
    before = lambda r: 2 * min(r["p_exact"], r["p_aligned_test"] if r["matched_on"] == "token table" else
                               r["p_raw_inputs"] if floor is not None and r["tau_raw_inputs"] >= floor else 1) < alpha
    verdicts = {"token-table match trusted (not a verdict)": lambda r: r["matched_on"] == "token table",
                "held-out inputs' match trusted (not a verdict)": lambda r: r["input_trusted"],
                "exact": lambda r: r["p_exact"] < alpha,
                "matched test alone, any match": lambda r: r["p_aligned_test"] < alpha,
                f"the rule before: inputs matched raw, floor {floor}": before,
                "**aligned verdict**": lambda r: r["aligned_related"],
                "the same without tables (whitened inputs)": lambda r: 2 * min(
                    r["p_exact"], r["p_inputs"] if r["input_trusted"] else 1) < alpha}
    test = [r for r in rows if r["split"] == "test"]
    kinds = list(dict.fromkeys(r["kind"] for r in test))
    table = []
    for name, says in verdicts.items():
        row = dict(verdict=name)
        for kind in kinds:
            hits = [says(r) for r in test if r["kind"] == kind]
            row[kind] = f"{sum(hits)}/{len(hits)}"
        row.update(rate_summary([0.0 if says(r) else 1.0 for r in test if not r["related"]], []))
        table.append(row)
    largest = f"{max(fit_unrelated):+.4f}" if fit_unrelated else "(none)"
    print(f"the rule before: its floor fit on {len(fit_unrelated)} unrelated pairs of the fit seeds matched raw on "
          f"held-out inputs, twice their largest matched tau {largest} -> {floor}")
    print_table(table)
    by_length = {}
    for r in test:
        if r["kind"].startswith("base vs its continuation"):
            by_length.setdefault(r["finetune_steps"], []).append(r)
    curve = [dict(finetune_steps=n, pairs=len(rs), tau_exact=float(np.mean([r["tau_exact"] for r in rs])),
                  tau_aligned=float(np.mean([r["tau_aligned"] for r in rs])),
                  related=f"{sum(r['aligned_related'] for r in rs)}/{len(rs)}")
             for n, rs in sorted(by_length.items())]
    print("power against the length of the continuation (each condition's base, plain and permuted):")
    print_table(curve, floats="{:.3f}")
    same_data = [r["tau_raw_inputs"] for r in test if r["kind"] == "trained vs trained, same data"]
    fits = []
    fit_range = lambda rs, key: span([r[key] for r in rs if r[key] is not None], "{:.3f}")
    for cond in dict.fromkeys(r["condition"] for r in rows):
        for related in (False, True):
            rs = [r for r in rows if r["condition"] == cond and r["related"] == related]
            if rs:
                fits.append(dict(condition=cond, pairs=("related" if related else "unrelated") + f" ({len(rs)})",
                                 table_rows=fit_range(rs, "table_fit"),
                                 table_test_rows=fit_range(rs, "table_fit_test_rows"),
                                 held_out_inputs=fit_range(rs, "input_fit")))
    print(f"the whitened matches' mean |r| (every seed), trusted from TABLE_MATCH_R {align.TABLE_MATCH_R}: the token "
          f"tables on the rows they use and on the test tokens' rows, which training moves (a stress test, not the "
          f"verdict's), and the held-out inputs:")
    print_table(fits)
    return dict(floor_before=floor, table=table, by_length=curve, pairs=rows,
                same_data_raw_tau_max=max(same_data) if same_data else None, fits=fits)


def main(argv=None):
    p = ArgumentParser(prog="studies.aligned_floor", description="The aligned verdict's calibration and power: its "
                       "whitened matches' gate, beside the rule before it (a floor fit on one range of seeds), tested "
                       "on another.")
    p.add_argument("--conditions", nargs="+", choices=list(CONDITIONS), default=list(CONDITIONS),
                   help="vocabulary, width and training of the models (each sets the tokenizer, the width, the "
                   "context (64), the steps and the batch)")
    p.add_argument("--fit_seeds", type=seed_int, nargs="+", action=Distinct, default=[100, 101, 102],
                   help="the rule before's floor is fit on these")
    p.add_argument("--test_seeds", type=seed_int, nargs="+", action=Distinct, default=list(range(103, 112)),
                   help="and tested on these")
    p.add_argument("--finetune_steps", type=flag_type("int>=1"), nargs="+", action=Distinct, default=[50, 200, 400],
                   help="lengths of the continuation whose power is measured")
    add_lineage_flags(p, out="out/lineage")
    args = p.parse_args(argv)
    set_by_conditions = [f for f in ("n_embd", "block_size") if getattr(args, f) is not None]
    set_by_conditions += [f for f in ("tokenizer", "max_steps", "batch_size") if getattr(args, f) != p.get_default(f)]
    if set_by_conditions:
        p.error(f"--conditions set the width, context, tokenizer, steps and batch: drop --{set_by_conditions[0]}")
    if len(args.fit_seeds) < 2 or len(args.test_seeds) < 2 or set(args.fit_seeds) & set(args.test_seeds):
        p.error("the rule before's floor is fit on one range of seeds and tested on another: give two or more distinct "
                "--fit_seeds and --test_seeds, none in both")
    # --seq_len and a given --k against the models the study runs: each condition's (its width, its context)
    check_lineage_flags(args, {f"the models of --conditions {name}": condition_architecture(args, name)
                               for name in args.conditions}, "the narrowest width of --conditions")
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        rows = [row for name in args.conditions for row in condition_pairs(args, name, device)]
        update_results(os.path.join(args.out, "results.json"), {"aligned": aligned_summary(rows)}, device,
                       args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.aligned_floor")
