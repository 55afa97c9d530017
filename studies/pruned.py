"""
studies/pruned.py: does SeedPrint recognize a child made smaller -- pruned in width or in depth, then trained on --
and does matching a narrower model into a wider one keep unrelated models apart? (paper Section 6.1's test,
carried to the derivatives Minitron, Sheared-LLaMA and Llama-3.2 are made as)

Children of each parent (activation-importance width pruning, as Minitron; depth pruning of the blocks that change
their input least, as ShortGPT), each trained on after the cut (--child_steps on --corpus2):

    width 25%   the 75% most important residual coordinates kept      -> the matched verdict (two widths)
    width 50%   half of them kept                                     -> the matched verdict
    depth 25%   a quarter of the layers removed (the width kept)      -> the exact and the aligned verdicts

and the unrelated pairs of unequal widths: every parent against every other parent's width-pruned children, and
against models trained from scratch at the pruned widths on the parents' data (same-data pairs). Makes
docs/seedprint.md's "Children pruned in width or depth": power per kind and the false-positive rate, each with
its 95% Clopper-Pearson interval.

    python -m studies.pruned                                     # tiny byte-level models: 7 min on 2 cores
    python -m studies.pruned --base DIR --sequences 300 --child_steps 20   # SmolLM2-135M: 9 min

With --base, the parent is that model (its tokenizer tokenizes the corpora), its children are trained
--child_steps on --corpus2, and the unrelated controls are fresh inits of each child's architecture: two of two
widths, too few to fit a floor on, so none is fit (results.json says why).
"""
import dataclasses
import hashlib
import json
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, Progress, atomic_write, check_output, flag_type, lock_dir, print_table,
                    provenance, refuse_unused, resolve_device, run_script, seed_int, update_results)
from model import GPTConfig, write_checkpoint
import numpy as np
import torch

import align
import data
import hf
from studies.edits import layers_dropped, prune_depth, prune_width, residual_importance, width_kept
from studies.lineage import (TRAINING, TRAINING_FLAGS, Lineage, add_lineage_flags, architecture, base_corpus,
                             check_base, check_k, check_lineage_flags, checkpoints, corpus, fit_floor, fresh_init,
                             rate, released, trained, training, weights_identity)

KINDS = {"width 25%": ("width", 0.25), "width 50%": ("width", 0.5), "depth 25%": ("depth", 0.25)}


def cut_files(load, identity, tokens: torch.Tensor, folder: str, prefix: str, seed, tokenizer: str) -> dict:
    """{kind: (name, path)}: each kind's (KINDS) cut child of one parent as a checkpoint that train.py continues
    (--init_from), made once, recording its lineage's seed where one is known (a parent trained here). A cut depends
    on the parent's weights (identity: anything JSON that names them) and the calibration windows `tokens`, so the
    name holds the windows' length and a digest of both: a rerun with other windows makes its own cuts, never reuses
    stale ones. The parent (load()) is loaded, and its residual importance computed (once, for both widths), only
    where a cut is not on disk yet."""
    digest = hashlib.sha256(json.dumps(identity).encode())
    digest.update(tokens.numpy().tobytes())
    names = {kind: f"{prefix}{slug(kind)}_T{tokens.shape[1]}_{digest.hexdigest()[:10]}" for kind in KINDS}
    paths = {kind: os.path.join(folder, f"{name}.pt") for kind, name in names.items()}
    missing = [kind for kind in KINDS if not os.path.isfile(paths[kind])]
    if missing:
        parent = load()
        importance = residual_importance(parent, tokens) if any(KINDS[k][0] == "width" for k in missing) else None
        seeds = {} if seed is None else dict(seeds=dict(init_seed=seed, embed_seed=seed))
        for kind in missing:
            how, fraction = KINDS[kind]
            child = (prune_width(parent, fraction, importance) if how == "width"
                     else prune_depth(parent, fraction, tokens))
            atomic_write(paths[kind], lambda tmp: write_checkpoint(tmp, child, **seeds, tokenizer=tokenizer,
                                                                   provenance=provenance()))
    return {kind: (names[kind], paths[kind]) for kind in KINDS}


def child_widths(config: GPTConfig) -> dict:
    """{kind: its child's width} for a parent of `config` (KINDS; a depth cut keeps the width)."""
    return {kind: width_kept(config.n_embd, fraction) if how == "width" else config.n_embd
            for kind, (how, fraction) in KINDS.items()}


def check_cuts(p, config: GPTConfig, width_flag: str, depth_flag: str) -> None:
    """Before any work: every cut of KINDS on a parent of `config` keeps some and drops some (else p.error, naming
    width_flag or depth_flag, the flag the parent's size comes from)."""
    for kind, (how, fraction) in KINDS.items():
        if how == "width":
            kept = width_kept(config.n_embd, fraction)
            if not 0 < kept < config.n_embd:
                p.error(f"{width_flag}: the {kind} cut would keep {kept} of {config.n_embd} residual coordinates; "
                        f"give a width of which it keeps some and drops some")
        else:
            dropped = layers_dropped(config.n_layer, fraction)
            if not 0 < dropped < config.n_layer:
                p.error(f"{depth_flag}: the {kind} cut would drop {dropped} of {config.n_layer} layers; give a depth "
                        f"of which it drops some and keeps some")


def slug(kind: str) -> str:
    """A kind of KINDS as one path component: "width 25%" -> "width25"."""
    return kind.replace(" ", "").replace("%", "")


def calibration_tokens(directory: str, T: int, n: int = 32) -> torch.Tensor:
    """Up to n windows of T tokens of a prepared corpus's validation split: the inputs a cut is decided on."""
    val = np.asarray(data.load_data(directory)["val"], dtype=np.int64)
    return data.windows(val, T, min(n, len(val) // T), seed=0)


def row(lineage: Lineage, a, b, kind: str, related: bool, label: str) -> dict:
    """One pair's verdicts: the exact one where the widths agree, the aligned (or, two widths, matched) one."""
    exact, aligned = lineage.pair(a, b)
    return dict(pair=label, kind=kind, related=related, widths=list(aligned.alignment.widths),
                p_exact=exact.p if exact else None, p=aligned.p, tau=aligned.alignment.tau_aligned,
                matched_on=aligned.alignment.matched_on, table_fit=aligned.alignment.table_fit,
                called=bool(aligned.related), called_exact=bool(exact.related) if exact else None)


def fitted_floor(rows: list):
    """The partial match's floor these pairs call for (fit_floor, how align.PARTIAL_TAU_FLOOR was fit): from the
    unrelated pairs of unequal widths matched on held-out inputs."""
    return fit_floor([r["tau"] for r in rows if not r["related"] and align.two_widths(r["widths"])
                      and r["matched_on"] == "held-out inputs"])


# The pairs pooled across kinds, as the README and docs/seedprint.md quote the rates: the power, and the
# false-positive rate of the matched verdict (two widths) apart from the exact and aligned ones (one width).
POOLED = {"related, all kinds": lambda r: r["related"],
          "unrelated, two widths": lambda r: not r["related"] and align.two_widths(r["widths"]),
          "unrelated, one width": lambda r: not r["related"] and not align.two_widths(r["widths"])}


def summary(rows: list) -> list:
    """Per kind of pair, then pooled (POOLED, where there are such pairs): how many the verdict calls related, with
    the 95% Clopper-Pearson interval of the rate."""
    out = []
    groups = [(kind, [r for r in rows if r["kind"] == kind]) for kind in dict.fromkeys(r["kind"] for r in rows)]
    groups += [(name, [r for r in rows if keep(r)]) for name, keep in POOLED.items()]
    for kind, rs in groups:
        if not rs:
            continue
        x, n = sum(r["called"] for r in rs), len(rs)
        exact = [r["called_exact"] for r in rs if r["called_exact"] is not None]
        out.append(dict(kind=kind, truth="related" if rs[0]["related"] else "unrelated", called_related=f"{x}/{n}",
                        **rate(x, n), exact_alone=f"{sum(exact)}/{len(exact)}" if exact else "-"))
    return out


def tiny(args, config: GPTConfig, device: str) -> list:
    """The byte-level study: parents (of the architecture `config`, the flags'), their children, models from scratch
    at the pruned widths; every pair."""
    text, text2 = (corpus(args.out, c, args.tokenizer, args.data_from) for c in (args.corpus, args.corpus2))
    meta = data.load_data(text)["meta"]
    template = training(args, device)
    parents = {s: checkpoints(trained(template, args.out, f"seed{s}", s, text))[-1][1] for s in args.parents}
    tokens = calibration_tokens(text, args.seq_len)
    children = {}
    for s, path in parents.items():
        cuts = cut_files(lambda path=path: hf.load(path), weights_identity(path), tokens,
                         os.path.join(args.out, "cuts"), f"seed{s}_", s, meta["tokenizer"])
        for kind, (name, start) in cuts.items():         # a child's run is named by its cut: a new cut, a new run
            children[s, kind] = checkpoints(trained(template, args.out, name, s, text2, steps=args.child_steps,
                                                    init_from=start))[-1][1]
    widths = child_widths(config)
    scratch = {}
    for kind in ("width 25%", "width 50%"):
        knobs = {**template.knobs, "n_embd": widths[kind], "head_size": config.head_dim,
                 "mlp_hidden": config.mlp_width}
        for u in args.scratch:
            run = trained(dataclasses.replace(template, knobs=knobs), args.out, f"scratch{u}_w{widths[kind]}", u, text)
            scratch[u, kind] = checkpoints(run)[-1][1]
    lineage = Lineage(args, args.out, device, vocab=meta["vocab_size"])
    pairs = [(parents[s], children[s, kind], f"parent vs its {kind} child", True, f"seed {s}") for s in parents
             for kind in KINDS]
    pairs += [(parents[s], children[t, kind], f"parent vs another's {kind} child", False, f"seed {s} vs {t}")
              for s in parents for t in parents if t != s for kind in KINDS]
    pairs += [(parents[s], scratch[u, kind], f"parent vs scratch at {kind}", False, f"seed {s} vs scratch {u}")
              for s in parents for u in args.scratch for kind in ("width 25%", "width 50%")]
    bar = Progress(len(pairs), "pairs tested", "pairs")
    rows = []
    for a, b, kind, related, label in pairs:
        rows.append(row(lineage, a, b, kind, related, label))
        bar.update()
    return rows


def base_study(args, device: str) -> list:
    """A released parent (--base): its three children, each trained --child_steps after the cut, and a fresh init of
    each child's architecture as the unrelated control."""
    base = released(args.base)
    cfg = base.config
    out = os.path.join(args.out, f"pruned_base_{hashlib.sha256(base.key.encode()).hexdigest()[:10]}")   # per base
    texts = {c: base_corpus(out, c, args.base, args.data_from) for c in (args.corpus, args.corpus2)}
    tokens = calibration_tokens(texts[args.corpus], args.seq_len)
    template = dataclasses.replace(TRAINING, batch_size=8, seq_len=min(64, cfg.block_size), lr=1e-4,
                                   ckpt_every=args.child_steps, log_every=10, device=device)
    rows, lineage = [], Lineage(args, args.out, device, vocab=cfg.vocab_size)
    for kind, (name, start) in cut_files(base.build, base.key, tokens, os.path.join(out, "cuts"), "", None,
                                         args.base).items():
        child = checkpoints(trained(template, out, name, 0, texts[args.corpus2], steps=args.child_steps,
                                    init_from=start))[-1][1]
        rows.append(row(lineage, base, child, f"parent vs its {kind} child", True, slug(kind)))
        control = fresh_init(hf.read_config(start), 1)
        rows.append(row(lineage, base, control, f"parent vs a fresh init at {kind}", False, slug(kind)))
    return rows


def main(argv=None):
    p = ArgumentParser(prog="studies.pruned", description="SeedPrint on children pruned in width (the matched "
                       "verdict) or depth, trained after the cut, and on unrelated pairs of unequal widths.")
    p.add_argument("--parents", type=seed_int, nargs="+", action=Distinct, default=list(range(8)),
                   help="parents' init seeds (every one gets three children)")
    p.add_argument("--scratch", type=seed_int, nargs="+", action=Distinct, default=list(range(100, 106)),
                   help="seeds of the models trained from scratch at each pruned width (unrelated controls)")
    p.add_argument("--child_steps", type=flag_type("int>=1"), default=150,
                   help="steps each child is trained after the cut (on --corpus2)")
    p.add_argument("--base", default=None, help="a Hugging Face directory (config.json, *.safetensors, "
                   "tokenizer.json): the parent, instead of the tiny byte-level ones")
    add_lineage_flags(p, out="out/pruned")
    args = p.parse_args(argv)
    if args.base:
        # the tiny parents' flags (their seeds, training, tokenizer, architecture) would do nothing: refused, never
        # recorded; and the tiny architecture is not the one --seq_len must fit, so check_lineage_flags does not apply
        tiny_only = ("parents", "scratch", *TRAINING_FLAGS, "tokenizer", "model",
                     *(f.name for f in dataclasses.fields(GPTConfig)))
        refuse_unused(args, tiny_only, "with --base the parent (its architecture, its tokenizer) is given and its "
                      "children train with a fine-tune's recipe (batch 8, lr 1e-4, --child_steps): {flags} would do "
                      "nothing", p)
        config = check_base(args.base, args.seq_len)
        check_cuts(p, config, f"--base {args.base} (width {config.n_embd})",
                   f"--base {args.base} ({config.n_layer} layers)")
        if args.k != p.get_default("k"):         # left at its default, k is capped at half the width
            check_k(args.k, child_widths(config).values(), "the narrowest child's width")
        hf.check_weights_finite(args.base)        # last: it reads every weight
    else:
        config = architecture(args)
        check_cuts(p, config, f"--n_embd {config.n_embd}", f"--n_layer {config.n_layer}")
        # a given --k must fit the narrowest model tested, a child, not the parent the flags describe
        check_lineage_flags(args, which="the narrowest child's width", widths=list(child_widths(config).values()))
        if len(args.parents) < 2:
            p.error("--parents: the unrelated pairs are between parents, so two or more are needed")
        if set(args.parents) & set(args.scratch):
            p.error("--scratch seeds must differ from --parents: a scratch model from a parent's seed is its twin")
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        t0 = time.time()
        rows = base_study(args, device) if args.base else tiny(args, config, device)
        table = summary(rows)
        print_table(table)
        if args.base:
            # two fresh inits are the base's unrelated pairs of two widths: too few to fit a floor on, and not the
            # trained models the floor is for
            floor = dict(fitted_floor=None, fitted_floor_why="not fit with --base: its unrelated pairs of two widths "
                         "are two fresh inits, too few to calibrate on (the floor is fit on the tiny study's)")
        else:
            floor = dict(fitted_floor=fitted_floor(rows))
            print(f"the floor these pairs call for: {floor['fitted_floor']} (align.PARTIAL_TAU_FLOOR "
                  f"{align.PARTIAL_TAU_FLOOR})")
        update_results(os.path.join(args.out, "results.json"),
                       {"pruned_base" if args.base else "pruned": dict(table=table, pairs=rows, **floor,
                                                                       seconds=time.time() - t0)},
                       device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.pruned")
