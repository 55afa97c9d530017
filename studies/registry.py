"""
studies/registry.py: one suspect against a registry of known bases -- does the search name the right base, name
none when the suspect is related to none, and say "inconclusive" when a lineage is registered twice? And do
fingerprint files stand in for their models, made on another machine, in another dtype?

A registry: the fingerprint files of --bases models (tiny byte-level LLaMA-style, each trained from its own seed
on --corpus, all in one data order), made as their owners would (python seedprint.py MODEL --save FILE). Suspects:

    unrelated   models trained from other seeds on the same data, and fresh inits   -> "none"
    related     each base continued on --corpus2, and the same in a signed-permuted basis  -> "derives from" it
    twice       a base's second continuation, against a registry that holds the base and its first one
                                                                                    -> "inconclusive", one lineage

Makes docs/seedprint.md's "One suspect against many bases": how often each answer is given, with 95%
Clopper-Pearson intervals (the false-positive rate: "derives from" said of an unrelated suspect), and how far the
verdicts move when the registry's files are made in bfloat16 instead of float32 (a GPU's files against a CPU's).

    python -m studies.registry                # 10 bases, 60 suspects: 13 min on 2 cores (5 once its models exist)
"""
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Distinct, Progress, check_dtype_runs, check_output, flag_type, lock_dir,
                    parse_bool, print_table, resolve_device, run_script, seed_int, update_results)
import numpy as np

import data
import evidence
import seedprint
from studies.lineage import (add_lineage_flags, architecture, check_lineage_flags, checkpoints, corpus,
                             fingerprint_file, fresh_init, permuted, rate, sign_flip, test_options, trained, training)


def register(models: dict, folder: str, options: dict, device: str, dtype: str = None, cache: str = None,
             tokens: list = None) -> list:
    """The fingerprint file of each model (name -> path or Recipe) in `folder`, made once (fingerprint_file, its
    fingerprints from the study's cache `cache`; tokens: the tokens it records): a file there already is reused only
    where it was made of the same weights with the same options and tokens, on the same device in the same dtype
    (another run's file is made anew)."""
    os.makedirs(folder, exist_ok=True)
    files = []
    for name, m in models.items():
        path = os.path.join(folder, f"{name}.npz")
        fp = fingerprint_file(m, cache, device, dtype, options, tokens=tokens)
        old = evidence.read(path) if os.path.isfile(path) else None
        if old is None or old.weights != fp.weights or any(old.options[k] != v for k, v in fp.options.items()) \
                or old.tokens != fp.tokens \
                or old.provenance.get("dtype") != dtype or old.provenance.get("device") != str(device):
            if old is not None:                 # a GPU fingerprints under bf16 autocast: another file
                os.remove(path)
            evidence.write(path, fp)
        files.append(path)
    return files


def rates(trials: list) -> list:
    """Per kind of suspect, then pooled over the unrelated kinds and over the related ones (the rates the README and
    docs/seedprint.md quote): how often each answer was given, with the 95% Clopper-Pearson interval of "derives
    from" (for unrelated suspects, the false-positive rate)."""
    groups = [(kind, [t for t in trials if t["kind"] == kind]) for kind in dict.fromkeys(t["kind"] for t in trials)]
    groups += [(f"{truth}, all", [t for t in trials if t["related"] == (truth == "related")])
               for truth in ("unrelated", "related")]
    rows = []
    for kind, ts in groups:
        if not ts:
            continue
        n = len(ts)
        count = {a: sum(t["answer"] == a for t in ts) for a in ("derives from", "none", "inconclusive")}
        right = sum(t["right"] for t in ts)
        derives = rate(count["derives from"], n)
        rows.append(dict(kind=kind, suspects=n, derives_from=count["derives from"], none=count["none"],
                         inconclusive=count["inconclusive"], right=f"{right}/{n}",
                         derives_from_rate=derives["rate"], CI95=derives["CI95"]))
    return rows


def main(argv=None):
    p = ArgumentParser(prog="studies.registry", description="One suspect against a registry of fingerprint files: "
                       "its answers on unrelated, related and twice-registered suspects, and files made in bf16.")
    p.add_argument("--bases", type=seed_int, nargs="+", action=Distinct, default=list(range(200, 210)),
                   help="the registered bases' init seeds")
    p.add_argument("--suspects", type=seed_int, nargs="+", action=Distinct, default=list(range(300, 320)),
                   help="the unrelated suspects' seeds: each trained on the bases' data, and each a fresh init")
    p.add_argument("--child_steps", type=flag_type("int>=1"), default=100,
                   help="steps of each base's continuations on --corpus2 (the related suspects)")
    p.add_argument("--align", type=parse_bool, default=True, metavar="on|off",
                   help="the aligned verdict (on: sees through a permuted basis) or the exact one")
    add_lineage_flags(p, out="out/registry")
    args = p.parse_args(argv)
    check_lineage_flags(args)
    if set(args.bases) & set(args.suspects) or len(args.bases) < 2:
        p.error("give two or more --bases and --suspects seeds none of which is a base's (a suspect from a base's "
                "seed would be its twin)")
    if args.dtype == "bfloat16":
        p.error("--dtype bfloat16: the study sets bf16 files against files made in --dtype, so bf16 against bf16 "
                "would compare nothing; give float32 (default) or float16")
    check_output(args.out)
    device = str(resolve_device(args.device))
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    test = test_options(args)
    options = test.recorded()
    with lock_dir(args.out):
        t0 = time.time()
        text, text2 = (corpus(args.out, c, args.tokenizer, args.data_from) for c in (args.corpus, args.corpus2))
        meta = data.load_data(text)["meta"]
        template = training(args, device)
        config = architecture(args, vocab_size=meta["vocab_size"])
        bases = {s: checkpoints(trained(template, args.out, f"seed{s}", s, text))[-1][1] for s in args.bases}
        child = lambda s, n: checkpoints(trained(template, args.out, f"seed{s}_child{n}", s, text2,
                                                 steps=args.child_steps, init_from=bases[s], data_seed=1234 + n))[-1][1]
        folder = os.path.join(args.out, "registry")
        cache = os.path.join(args.out, "fingerprints")
        files = register({f"base{s}": path for s, path in bases.items()}, folder, options, device, args.dtype, cache)
        flip = sign_flip(bases[args.bases[0]])
        suspects = [(f"trained from seed {u}", "unrelated: trained on the bases' data", None,
                     checkpoints(trained(template, args.out, f"suspect{u}", u, text))[-1][1]) for u in args.suspects]
        suspects += [(f"fresh init {u}", "unrelated: a fresh init", None, fresh_init(config, u)) for u in args.suspects]
        suspects += [(f"base {s} continued", "related: a base continued", i, child(s, 1))
                     for i, s in enumerate(args.bases)]
        suspects += [(f"base {s} continued, permuted", "related: continued, basis permuted", i,
                      permuted(child(s, 1), flip)) for i, s in enumerate(args.bases)]
        bar = Progress(len(suspects), "suspects searched", "suspects")
        needed = ["test", "held_out"] if args.align else ["exact"]         # the input sets a suspect's verdicts read
        trials, found = [], {}
        for label, kind, base, m in suspects:
            m = fingerprint_file(m, cache, device, args.dtype, options, needed)    # each suspect fingerprinted once
            res = seedprint.search(m, files, device=device, dtype=args.dtype, align=args.align)
            found[label] = (m, res)             # against the bf16 files below, each suspect is searched once more
            right = res["answer"] == "none" if base is None else res["answer"] == "derives from" and res["base"] == base
            trials.append(dict(suspect=label, kind=kind, related=base is not None, answer=res["answer"],
                               named=res["base"], right=bool(right), smallest_p=min(r.p for r in res["results"] if r)))
            bar.update()
        # a lineage registered twice: the base and its first continuation; the suspect its second
        s = args.bases[0]
        twice_folder = os.path.join(args.out, "registry_twice")
        twice_files = register({f"base{s}": bases[s], f"base{s}_child1": child(s, 1),
                                **{f"base{b}": bases[b] for b in args.bases[1:3]}}, twice_folder, options, device,
                               args.dtype, cache)
        twice = seedprint.search(fingerprint_file(child(s, 2), cache, device, args.dtype, options, needed), twice_files,
                                 device=device, dtype=args.dtype, align=args.align)
        # the same registry made in bfloat16 (as a GPU makes its files) against the one above (float32: the study's
        # models are saved in it, unless --dtype says otherwise), suspect by suspect
        bf16 = register({f"base{s}": path for s, path in bases.items()}, os.path.join(args.out, "registry_bf16"),
                        options, device, "bfloat16")    # no cache: it holds --dtype's fingerprints alone
        drift = []
        for label, kind, base, m in suspects[::4]:
            fp, a = found[label]
            b = seedprint.search(fp, bf16, device=device, dtype=args.dtype, align=args.align)
            tau = lambda r: r.mean_tau if r.alignment is None else r.alignment.tau_aligned
            for ra, rb in zip(a["results"], b["results"]):
                drift.append(dict(p=abs(np.log10(max(ra.p_raw, 1e-300)) - np.log10(max(rb.p_raw, 1e-300))),
                                  tau=abs(tau(ra) - tau(rb)), flipped=ra.related != rb.related))
        table = rates(trials)
        print_table(table)
        print(f"a lineage registered twice: {twice['answer']}, related to {len(twice['related'])} bases, one lineage: "
              f"{twice['one_lineage']}")
        moved = dict(pairs=len(drift), verdicts_flipped=sum(d["flipped"] for d in drift),
                     max_abs_log10_p=max(d["p"] for d in drift), max_abs_tau=max(d["tau"] for d in drift),
                     median_abs_tau=float(np.median([d["tau"] for d in drift])))
        made_in = args.dtype or "float32"
        print(f"bf16 files against {made_in} ones: {moved}")
        sizes = {made_in: os.path.getsize(files[0]), "bfloat16": os.path.getsize(bf16[0])}
        update_results(os.path.join(args.out, "results.json"), {"registry": dict(
            table=table, trials=trials, twice=dict(answer=twice["answer"], related=twice["related"],
                                                   one_lineage=twice["one_lineage"]),
            **{f"bf16_against_{made_in}": moved}, file_bytes=sizes, align=args.align, seconds=time.time() - t0)},
            device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.registry")
