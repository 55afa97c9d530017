"""
studies/reparametrized.py: do SeedPrint's verdicts stay where attention and the norms are reparametrized without
changing the function? (paper Section 6.1's test, against the edits that hide a lineage from tests on weights)

From each base -- tiny LLaMA-style models trained from --seeds (grouped-query attention and partial RoPE by
default, so that every constraint on the maps is exercised), or a released model (--base) -- studies/edits.py's
edits that keep the function and the residual stream:

    map_qk           per head, an invertible, non-orthogonal map between W_q and W_k (commuting with RoPE), as
                     MergeLock does to defeat weight-based tests
    map_vo           per head, one between W_v and W_O
    permute_heads    the heads reordered (within their kv groups)
    fold_norms       the blocks' norm gains folded into the linears that read them (final=False)
    ... and final    the final norm's gain folded into the (untied) head too: the logits stay, the fingerprint
                     (the final-norm state) is divided by that gain coordinate by coordinate

Each is checked to keep the logits (max |diff| / max |logit| over every position of 4 random sequences, the run
refused above 1e-4) and tested against its base with the exact and the aligned verdicts, beside the base against
itself. Makes docs/seedprint.md's "Reparametrized attention and norms":

    python -m studies.reparametrized                                  # 5 tiny byte-level bases: 2 min 19 s on 2 cores
    python -m studies.reparametrized --base DIR --sequences 300       # SmolLM2-135M: 7 min on 2 cores
"""
import dataclasses
import json
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, Progress, check_output, figure, lock_dir, print_table, refuse_unused,
                    resolve_device, run_script, save_figure, seed_int, update_results)
from model import GPTConfig
import torch

import data
import hf
from studies.edits import fold_norms, logit_change, map_qk, map_vo, permute_heads
from studies.lineage import (TRAINING_FLAGS, Lineage, Recipe, add_lineage_flags, check_base, check_k,
                             check_lineage_flags, checkpoints, corpus, released, span, trained, training,
                             weights_identity)

EDITS = {   # name: (the edit, its key in the fingerprint cache)
    "W_q, W_k mapped per head (map_qk)": (lambda m: map_qk(m, seed=1), "map_qk1"),
    "W_v, W_O mapped per head (map_vo)": (lambda m: map_vo(m, seed=1), "map_vo1"),
    "heads reordered (permute_heads)": (lambda m: permute_heads(m, seed=1), "permute_heads1"),
    "block norms folded (fold_norms, final=False)": (lambda m: fold_norms(m, final=False), "fold_blocks"),
    "final norm folded too (fold_norms)": (lambda m: fold_norms(m, final=True), "fold_final"),
}
TINY_KNOBS = dict(n_kv_head=2, rope_dims=8, block_size=64)    # the tiny bases' defaults: GQA, half the head rotated


def row(lineage: Lineage, base, edited, base_label: str, edit: str, change) -> dict:
    """One pair's verdicts, exact and aligned, as a table row."""
    return dict(base=base_label, edit=edit, logit_change=change, **lineage.verdicts(base, edited))


def pairs(lineage: Lineage, bases: dict, vocab: int) -> list:
    """Every base against itself and against each edit of it. bases: {label: (the base as Lineage takes it, its
    cache key, a loader of the model)}."""
    rows = []
    bar = Progress(len(bases) * (len(EDITS) + 1), "pairs tested", "pairs")
    for label, (base, key, load) in bases.items():
        rows.append(row(lineage, base, base, label, "none: the base against itself", 0.0))
        bar.update()
        model = load()
        for edit, (make, slug) in EDITS.items():
            change = logit_change(model, make(model), vocab)
            if change > 1e-4:
                raise FloatingPointError(f"{edit} changed {label}'s logits by {change:.2e}: not function-preserving")
            recipe = Recipe(f"{key}|{slug}", lambda make=make: make(load()))
            rows.append(row(lineage, base, recipe, label, edit, change))
            bar.update()
    return rows


def summary(rows: list) -> list:
    """Per edit, over the bases: the largest logit change, how many pairs each verdict calls related, the largest p,
    and the range of mean tau and |S|."""
    out = []
    for edit in dict.fromkeys(r["edit"] for r in rows):
        rs = [r for r in rows if r["edit"] == edit]
        of = lambda key: [r[key] for r in rs]
        out.append(dict(edit=edit, bases=len(rs), logit_change=max(of("logit_change")),
                        exact=f"{sum(of('exact'))}/{len(rs)}", p_max=max(of("p")),
                        mean_tau=span(of("mean_tau")), S=span(of("S"), "{}"),
                        aligned=f"{sum(of('aligned'))}/{len(rs)}",
                        p_aligned_max=max(of("p_aligned")), tau_aligned=span(of("tau_aligned"))))
    return out


def plot(rows: list, path: str) -> None:
    """Per edit, each base's exact mean tau and its matched tau (the aligned verdict's): the function kept, both
    stay where the base against itself is."""
    plt, fig, ax = figure(1, 1, figsize=(7, 3.8))
    edits = list(dict.fromkeys(r["edit"] for r in rows))
    for key, marker, shift in (("mean_tau", "o", -0.12), ("tau_aligned", "^", 0.12)):
        ax.scatter([r[key] for r in rows], [edits.index(r["edit"]) + shift for r in rows], marker=marker, s=16,
                   label={"mean_tau": "exact: mean tau", "tau_aligned": "aligned: matched tau"}[key])
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_yticks(range(len(edits)), edits, fontsize=7)
    ax.set_xlabel("mean tau against the base")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None):
    p = ArgumentParser(prog="studies.reparametrized", description="SeedPrint against reparametrizations of attention "
                       "and the norms that keep a model's function: per-head maps, head reordering, folded norms.")
    p.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=list(range(5)),
                   help="the tiny bases' init seeds")
    p.add_argument("--base", default=None, help="a Hugging Face directory (config.json, *.safetensors, "
                   "tokenizer.json): the base, instead of the tiny byte-level ones")
    add_lineage_flags(p, out="out/reparametrized")
    p.set_defaults(**TINY_KNOBS)
    args = p.parse_args(argv)
    if args.base:
        # the tiny bases' flags (seeds, training, tokenizer, architecture) would do nothing: refused, never recorded
        tiny_only = ("seeds", *TRAINING_FLAGS, "tokenizer", "model", "corpus", "corpus2", "data_from",
                     *(f.name for f in dataclasses.fields(GPTConfig)))
        refuse_unused(args, tiny_only, "with --base the model is given, and nothing is trained: {flags} would do "
                      "nothing", p)
        config = check_base(args.base, args.seq_len)
        if args.k != p.get_default("k"):          # left at its default, k is capped at half the width
            check_k(args.k, [config.n_embd], "the width of --base")
        hf.check_weights_finite(args.base)        # last: it reads every weight
    else:
        check_lineage_flags(args)
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        t0 = time.time()
        if args.base:
            base = released(args.base)
            bases = {os.path.basename(os.path.normpath(args.base)): (base, base.key, base.build)}
            vocab = base.config.vocab_size
        else:
            text = corpus(args.out, args.corpus, args.tokenizer, args.data_from)
            vocab = data.load_data(text)["meta"]["vocab_size"]
            template = training(args, device)
            paths = {s: checkpoints(trained(template, args.out, f"seed{s}", s, text))[-1][1] for s in args.seeds}
            bases = {f"seed {s}": (path, json.dumps(weights_identity(path)), lambda path=path: hf.load(path).eval())
                     for s, path in paths.items()}
        rows = pairs(Lineage(args, args.out, device, vocab=vocab), bases, vocab)
        table = summary(rows)
        print_table(rows, floats="{:.3g}")
        print_table(table, floats="{:.3g}")
        plot(rows, os.path.join(args.out, "reparametrized_base.png" if args.base else "reparametrized.png"))
        update_results(os.path.join(args.out, "results.json"),
                       {"reparametrized_base" if args.base else "reparametrized":
                        dict(table=table, pairs=rows, seconds=time.time() - t0)}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.reparametrized")
