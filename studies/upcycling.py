"""
studies/upcycling.py: does SeedPrint trace a mixture of experts upcycled from a dense model back to it, and keep
it apart from models of other inits? (paper Section 6.1's test, on the derivative behind the MoE lineage disputes)

Upcycling (studies/edits.py's upcycle: every expert a copy of the dense MLP, a new router) keeps the dense model's
attention, norms, embeddings and head, and at first its function; the fingerprint, the final norm's state, is read
in both architectures alike. Per seed S of --seeds, on --corpus unless said:

    parent      a dense tiny model trained from init seed S (--max_steps)
    child       the parent upcycled (--n_experts, --experts_per_token, --router_norm, --noise), trained on
                (--child_steps): the MoE of the dispute
    fine-tune   the child trained on --corpus2 (--finetune_steps): a MoE derived from a MoE
    scratch     a MoE of the child's architecture trained from init seed U of --scratch, as long as parent and
                child together

and SeedPrint's exact and aligned verdicts of each child against its parent (related), its fine-tune (related),
every other seed's parent (a dense model of another init on the same data: unrelated) and every scratch MoE
(unrelated). Makes docs/seedprint.md's "Upcycled into a mixture of experts" and the README's row: per kind of pair
how many each verdict calls related, with the 95% Clopper-Pearson interval of the rate:

    python -m studies.upcycling                  # 3 seeds, 4 experts (2 per token): 5 min 35 s on 2 cores
    python -m studies.upcycling --seeds 0 1 2 3 4 5 --scratch 100 101 102 103 --n_experts 8 --noise 0.01   # more

Every model and fingerprint is kept under --out: a second run reuses them.

At --noise 0 with --router_norm topk the upcycled model computes its parent's logits: checked (within 1e-4 of their
scale) before it trains, the run refused otherwise.
"""
import dataclasses
import hashlib
import json
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, Progress, atomic_write, check_output, figure, flag_type, lock_dir,
                    print_table, provenance, refuse_unused, resolve_device, run_script, save_figure, seed_int,
                    update_results)
from model import write_checkpoint
import numpy as np

import data
import hf
from studies.edits import logit_change, upcycle
from studies.lineage import (Lineage, add_lineage_flags, check_lineage_flags, checkpoints, corpus, rate, span,
                             trained, training, weights_identity)

EXPERTS = dict(n_experts=4, experts_per_token=2)        # the study's MoE by default (the knob flags change it)
UPCYCLE_KNOBS = ("n_experts", "experts_per_token", "router_norm")    # what upcycle sets; the rest is the parent's
KINDS = {   # kind of pair: the truth
    "child vs its parent": True,
    "child vs its fine-tune": True,
    "child vs another seed's parent (dense, same data)": False,
    "child vs a MoE from scratch": False,
}


def upcycled_file(parent: str, folder: str, seed: int, args, tokenizer: str) -> str:
    """The parent (a checkpoint) upcycled as the flags say, saved once as a checkpoint that train.py continues
    (--init_from), named by the upcycling's settings and a digest of the parent's weights (a new parent, a new file).
    At noise 0 with the k weights renormalized it must compute the parent's logits: refused otherwise."""
    how = dict(n_experts=args.n_experts, experts_per_token=args.experts_per_token, noise=args.noise, seed=seed,
               router_norm=args.router_norm or "topk")
    digest = hashlib.sha256(json.dumps([weights_identity(parent), how]).encode()).hexdigest()[:10]
    path = os.path.join(folder, f"seed{seed}_{digest}.pt")
    if not os.path.isfile(path):
        dense = hf.load(parent).eval()
        moe = upcycle(dense, **how)
        if args.noise == 0 and how["router_norm"] == "topk":
            change = logit_change(dense, moe, dense.config.vocab_size)
            if change > 1e-4:
                raise FloatingPointError(f"the upcycled seed {seed} changed its parent's logits by {change:.2e}")
        atomic_write(path, lambda tmp: write_checkpoint(tmp, moe, seeds=dict(init_seed=seed, embed_seed=seed),
                                                        tokenizer=tokenizer, upcycled=how, provenance=provenance()))
    return path


def row(lineage: Lineage, a, b, kind: str, label: str) -> dict:
    """One pair's exact and aligned verdicts, as a table row."""
    return dict(kind=kind, pair=label, related=KINDS[kind], **lineage.verdicts(a, b))


def summary(rows: list) -> list:
    """Per kind of pair: how many each verdict calls related, the rate with its 95% Clopper-Pearson interval, the
    largest or smallest p (whichever side the truth makes the worst case) and the range of the exact mean tau."""
    out = []
    for kind, related in KINDS.items():
        rs = [r for r in rows if r["kind"] == kind]
        if not rs:
            continue
        worst = max if related else min
        entry = dict(kind=kind, truth="related" if related else "unrelated", pairs=len(rs))
        for verdict, p in (("exact", "p"), ("aligned", "p_aligned")):
            x = sum(r[verdict] for r in rs)
            shown = rate(x, len(rs))
            entry.update({verdict: f"{x}/{len(rs)}", f"{verdict}_rate": shown["rate"], f"{verdict}_CI95": shown["CI95"],
                          f"{verdict}_worst_p": worst(r[p] for r in rs)})
        entry["mean_tau"] = span(r["mean_tau"] for r in rs)
        out.append(entry)
    return out


def plot(path: str, rows: list) -> None:
    """Each pair's exact mean tau and matched tau by kind of pair: a dot each, filled where the verdict says
    related."""
    plt, fig, axes = figure(1, 2, figsize=(10, 3.8))
    for ax, (verdict, tau, title) in zip(axes, (("exact", "mean_tau", "exact verdict: mean tau"),
                                                ("aligned", "tau_aligned", "aligned verdict: matched tau"))):
        for i, kind in enumerate(KINDS):
            rs = [r for r in rows if r["kind"] == kind]
            x = i + np.linspace(-0.15, 0.15, len(rs)) if len(rs) > 1 else [i] * len(rs)
            ax.scatter(x, [r[tau] for r in rs], edgecolors=f"C{i}",
                       facecolors=[f"C{i}" if r[verdict] else "none" for r in rs])
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(range(len(KINDS)), [k.replace("child vs ", "").replace(" (", "\n(") for k in KINDS],
                      fontsize=7)
        ax.set_title(title + " (filled: called related)", fontsize=9)
    save_figure(fig, path)


def main(argv=None):
    p = ArgumentParser(prog="studies.upcycling", description="SeedPrint on mixtures of experts upcycled from a dense "
                       "model: against their parent and their own fine-tune (related), dense models of other inits "
                       "and MoEs from scratch (unrelated), both verdicts. The knob flags --n_experts (default 4), --experts_per_token (2) "
                       "and --router_norm make the children's mixture of experts; the rest of the architecture is the "
                       "parents'.")
    p.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=[0, 1, 2],
                   help="the parents' init seeds (one child and one fine-tune each)")
    p.add_argument("--scratch", type=seed_int, nargs="+", action=Distinct, default=[100, 101, 102],
                   help="init seeds of the MoEs trained from scratch (unrelated controls)")
    p.add_argument("--noise", type=flag_type("float>=0"), default=0.0,
                   help="Gaussian noise on each expert's copy, relative to each matrix's std (0: exact copies)")
    p.add_argument("--child_steps", type=flag_type("int>=1"), default=100,
                   help="steps the upcycled model trains on --corpus")
    p.add_argument("--finetune_steps", type=flag_type("int>=1"), default=50,
                   help="steps the child's fine-tune trains on --corpus2")
    add_lineage_flags(p, out="out/upcycling")
    p.set_defaults(**EXPERTS)
    args = p.parse_args(argv)
    # upcycle copies the dense MLP into each expert and sets only the router: other MoE knobs cannot be honoured
    refuse_unused(args, ("expert_hidden", "shared_expert", "moe_layers"), "upcycling makes every layer's experts "
                  "copies of its dense MLP: {flags} would give them another shape", p)
    config = check_lineage_flags(args)            # the child's architecture (a bad k of n: one line, GPTConfig's)
    if len(args.seeds) < 2:
        p.error("--seeds: a child's unrelated dense pairs are the other seeds' parents, so two or more are needed")
    if set(args.seeds) & set(args.scratch):
        p.error("--scratch seeds must differ from --seeds: a scratch MoE from a parent's seed shares its init")
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        t0 = time.time()
        text, text2 = (corpus(args.out, c, args.tokenizer, args.data_from) for c in (args.corpus, args.corpus2))
        meta = data.load_data(text)["meta"]
        moe = training(args, device)                                      # the MoE's flags, as the child has them
        dense = dataclasses.replace(moe, knobs={k: v for k, v in moe.knobs.items() if k not in UPCYCLE_KNOBS})
        parents, children, finetunes = {}, {}, {}
        for s in args.seeds:
            parents[s] = checkpoints(trained(dense, args.out, f"seed{s}", s, text))[-1][1]
            start = upcycled_file(parents[s], os.path.join(args.out, "upcycled"), s, args, meta["tokenizer"])
            name = os.path.splitext(os.path.basename(start))[0]             # a new upcycling, a new run
            children[s] = checkpoints(trained(moe, args.out, f"child_{name}", s, text, steps=args.child_steps,
                                              init_from=start))[-1][1]
            finetunes[s] = checkpoints(trained(moe, args.out, f"finetune_{name}", s, text2,
                                               steps=args.finetune_steps, init_from=children[s]))[-1][1]
        knobs = "_".join(f"{k}{moe.knobs[k]}" for k in UPCYCLE_KNOBS if k in moe.knobs)
        scratch = {u: checkpoints(trained(moe, args.out, f"scratch{u}_{knobs}", u, text,
                                          steps=moe.max_steps + args.child_steps))[-1][1] for u in args.scratch}
        pairs = [(parents[s], children[s], "child vs its parent", f"seed {s}") for s in args.seeds]
        pairs += [(children[s], finetunes[s], "child vs its fine-tune", f"seed {s}") for s in args.seeds]
        pairs += [(parents[t], children[s], "child vs another seed's parent (dense, same data)", f"seed {s} vs {t}")
                  for s in args.seeds for t in args.seeds if t != s]
        pairs += [(scratch[u], children[s], "child vs a MoE from scratch", f"seed {s} vs scratch {u}")
                  for s in args.seeds for u in args.scratch]
        lineage = Lineage(args, args.out, device, vocab=meta["vocab_size"])
        bar = Progress(len(pairs), "pairs tested", "pairs")
        rows = []
        for a, b, kind, label in pairs:
            rows.append(row(lineage, a, b, kind, label))
            bar.update()
        table = summary(rows)
        print_table(rows, floats="{:.3g}")
        print_table(table, floats="{:.3g}")
        plot(os.path.join(args.out, "upcycling.png"), rows)
        update_results(os.path.join(args.out, "results.json"),
                       {"upcycling": dict(architecture=dataclasses.asdict(config), table=table, pairs=rows,
                                          seconds=time.time() - t0)}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.upcycling")
