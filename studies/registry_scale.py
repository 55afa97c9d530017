"""
studies/registry_scale.py: SeedPrint's search (seedprint.py SUSPECT --against DIR, paper Section 6.1) at the scale
disputes meet -- a registry of a hundred bases or more, as a public provenance kit ships about 150: how long a
suspect's search takes and a base's file, what memory the search holds, and how often it says "derives from" of a
suspect related to no base (the false-positive rate, with its 95% Clopper-Pearson interval).

The bases: --bases models per vocabulary, each from its own init seed (each its own lineage), their widths taken in
turn from --widths, trained --max_steps on --corpus (tiny models, few steps: the cost is the fingerprints, not
the models), in --tokenizers' vocabularies (bytes, and bpe: studies.vocab_derivatives' BPE of --corpus, the 256 bytes
first). One registry per vocabulary, a suspect searched as a fingerprint file against its own vocabulary's; or, with
--one_registry, one registry of them all, each file recording its tokens, and a suspect searched as a model (read
once, fed each file's tokens where it holds them: a BPE suspect every file's, a byte-level one none of the BPE's
merged tokens, so those files are not compared). The suspects, per vocabulary:

    unrelated   --suspects models trained from other seeds on the bases' data, --fresh fresh inits -> "none"
    related     the first --related bases, each continued --child_steps on --corpus2      -> "derives from" it

    python -m studies.registry_scale                  # 2 x 6 bases, 2 x 8 suspects: 16 of 16 right, 3.5 min on 2 cores
    python -m studies.registry_scale --bases 50 --suspects 75 --fresh 75 --related 3 --max_steps 20 \\
        --sequences 500 --widths 64 96        # 100 bases, 300 unrelated suspects: 0 said to derive, 28 min
    ... the same with --one_registry          # one folder of 100 files, the models reused: 0 of 300, 11 min

results.json: "registry_scale" (a registry per vocabulary) and "registry_scale_one" (--one_registry), each with its PNG.
(docs/seedprint.md, "In a dispute": every number and the rule they were measured under.)
"""
import dataclasses
import os
import resource
import time
import tracemalloc

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Progress, check_output, figure, flag_type, lock_dir, print_table,
                    resolve_device, run_script, save_figure, update_results)
import numpy as np

import data
import evidence
import seedprint
from studies.lineage import (TRAINING, add_lineage_flags, architecture, check_lineage_flags, checkpoints,
                             fingerprint_file, fresh_init, test_options, trained, training)
from studies.registry import rates, register
from studies.vocab_derivatives import bytes_first_bpe, tokenizer_label

BASE_SEED0, SUSPECT_SEED0 = 10_000, 20_000      # every model its own init seed: bases and suspects never share one


def held_bytes(files: list) -> int:
    """The bytes of the arrays a search holds of its registry's files (every input set and the held-out rows)."""
    fps = [evidence.read(f) for f in files]
    return sum(sum(H.nbytes for H in fp.sets.values()) + (fp.rows.nbytes if fp.rows is not None else 0) for fp in fps)


def plot(trials: list, path: str) -> None:
    """Each suspect's smallest Holm-adjusted p over its registry, by kind of suspect: the unrelated ones above
    alpha (the answer "none"), the continued bases far below it."""
    plt, fig, ax = figure(1, 1, figsize=(6, 3.8))
    kinds = list(dict.fromkeys(t["kind"] for t in trials))
    for y, kind in enumerate(kinds):
        ps = np.array([t["smallest_p"] for t in trials if t["kind"] == kind])
        jitter = np.random.default_rng(y).uniform(-0.25, 0.25, len(ps))
        ax.scatter(-np.log10(np.maximum(ps, 1e-300)), y + jitter, s=8, alpha=0.6)
    ax.axvline(-np.log10(seedprint.ALPHA), color="red", lw=1, label=f"alpha = {seedprint.ALPHA}")
    ax.set_yticks(range(len(kinds)), kinds, fontsize=7)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("-log10 of the smallest Holm-adjusted p over the registry")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None):
    p = ArgumentParser(prog="studies.registry_scale", description="SeedPrint's search against registries of a "
                       "hundred bases or more: times, memory and the false 'derives from' rate.")
    p.add_argument("--bases", type=flag_type("int>=2"), default=6, help="bases per vocabulary (its registry)")
    p.add_argument("--suspects", type=flag_type("int>=0"), default=3,
                   help="unrelated suspects per vocabulary trained from other seeds on the bases' data")
    p.add_argument("--fresh", type=flag_type("int>=0"), default=3,
                   help="unrelated suspects per vocabulary: fresh inits")
    p.add_argument("--related", type=flag_type("int>=0"), default=2,
                   help="bases per vocabulary continued on --corpus2 (related suspects)")
    p.add_argument("--child_steps", type=flag_type("int>=1"), default=50, help="steps of each continuation")
    p.add_argument("--widths", type=flag_type("int>=2"), nargs="+", default=None,
                   help="the bases' and suspects' widths, taken in turn (default: --n_embd's)")
    p.add_argument("--tokenizers", nargs="+", choices=("bytes", "bpe"), default=["bytes", "bpe"],
                   help="the vocabularies, one registry each")
    p.add_argument("--bpe_vocab", type=flag_type("int>=257"), default=512, help="tokens of the BPE (bytes first)")
    p.add_argument("--one_registry", action="store_true", help="one registry of every vocabulary's bases, each file "
                   "recording its tokens, and every suspect searched against all of them as a model (fed each "
                   "file's tokens where it holds them)")
    add_lineage_flags(p, out="out/registry_scale",
                      template=dataclasses.replace(TRAINING, max_steps=50, ckpt_every=50), tokenizer=False)
    args = p.parse_args(argv)
    widths = list(dict.fromkeys(args.widths or [architecture(args).n_embd]))
    # every width a valid architecture (heads, context), a given --k within the narrowest, before any work
    check_lineage_flags(args, {f"--widths {w}": architecture(args, n_embd=w) for w in widths},
                        "the narrowest of --widths" if args.widths else "the width (--n_embd)")
    if args.related > args.bases:
        p.error(f"--related {args.related}: at most --bases {args.bases} bases can be continued")
    if args.suspects + args.fresh == 0:
        p.error("give --suspects or --fresh: the false-positive rate needs unrelated suspects")
    check_output(args.out)
    device = str(resolve_device(args.device))
    options = test_options(args).recorded()
    needed = ["test", "held_out"]                   # the aligned verdict's sets (several widths: the matched one)
    with lock_dir(args.out):
        t0 = time.time()
        toks = dict(bytes="bytes")
        if "bpe" in args.tokenizers:                # the BPE of --corpus, the bytes first
            toks["bpe"] = bytes_first_bpe(args.out, args.corpus, args.bpe_vocab, args.data_from)
        template = training(args, device)
        cache = os.path.join(args.out, "fingerprints")
        final = lambda run: checkpoints(run)[-1][1]
        trials, costs, registries = [], dict(train=[], file=[], suspect=[], search=[]), {}
        seed = dict(base=BASE_SEED0, suspect=SUSPECT_SEED0)
        of_width = lambda w: dataclasses.replace(template, knobs=dict(template.knobs, n_embd=w))
        texts, bases, files = {}, {}, {}
        for tok in dict.fromkeys(args.tokenizers):      # the registries: each base trained, then its file made
            folder = lambda c: os.path.join(args.out, "data", f"{data.corpus_label(c)}_{tokenizer_label(toks[tok])}")
            texts[tok] = [data.prepared([c], folder(c), toks[tok], args.data_from) for c in (args.corpus, args.corpus2)]
            vocab = data.load_data(texts[tok][0])["meta"]["vocab_size"]
            # one registry: each file records its tokens, so that a suspect of the other vocabulary can be fed them
            tokens = data.token_bytes(toks[tok]) if args.one_registry else None
            bases[tok], files[tok] = [], []
            bar = Progress(args.bases, f"{tok} bases trained and registered", "bases")
            for i in range(args.bases):
                s, w = seed["base"], widths[i % len(widths)]
                seed["base"] += 1
                t = time.time()
                bases[tok].append(final(trained(of_width(w), args.out, f"{tok}_w{w}_seed{s}", s, texts[tok][0])))
                costs["train"].append(time.time() - t)
                t = time.time()
                files[tok] += register({f"{tok}_w{w}_seed{s}" if args.one_registry else f"w{w}_seed{s}":
                                        bases[tok][-1]}, os.path.join(args.out, "registry" if args.one_registry else
                                                                      f"registry_{tok}"),
                                       options, device, args.dtype, cache, tokens)
                costs["file"].append(time.time() - t)
                bar.update()
            registries[tok] = dict(bases=len(files[tok]), widths=widths, vocab=vocab,
                                   held_bytes=held_bytes(files[tok]),
                                   file_bytes=sum(os.path.getsize(f) for f in files[tok]))
        every = [f for tok in files for f in files[tok]]
        for tok in dict.fromkeys(args.tokenizers):      # the suspects, each searched against its registry
            text, text2 = texts[tok]
            vocab = registries[tok]["vocab"]
            searched = every if args.one_registry else files[tok]
            offset = every.index(files[tok][0]) if args.one_registry else 0      # its bases' place in `searched`
            # (label, kind, the base it derives from or None, the model): searched as models where the registry
            # holds files of the other vocabulary (a model can be fed their tokens; its own file cannot), else
            # as files, their fingerprints cached
            suspects = []
            for i in range(args.suspects + args.fresh):
                s, w = seed["suspect"], widths[i % len(widths)]
                seed["suspect"] += 1
                if i < args.suspects:
                    m = final(trained(of_width(w), args.out, f"{tok}_w{w}_suspect{s}", s, text))
                    suspects.append((f"{tok} trained from seed {s}", "unrelated: trained on the bases' data", None, m))
                else:
                    m = fresh_init(architecture(args, vocab_size=vocab, n_embd=w), s)
                    suspects.append((f"{tok} fresh init {s}", "unrelated: a fresh init", None, m))
            for b in range(args.related):
                m = final(trained(template, args.out, f"{os.path.basename(os.path.dirname(bases[tok][b]))}_child", 0,
                                  text2, steps=args.child_steps, init_from=bases[tok][b], data_seed=1234))
                suspects.append((f"{tok} base {b} continued", "related: a base continued", offset + b, m))
            bar = Progress(len(suspects), f"{tok} suspects searched against {len(searched)} bases", "suspects")
            for label_, kind, base, m in suspects:
                t = time.time()
                if args.one_registry:       # a fresh init in memory, with its tokenizer; a checkpoint records its own
                    fp, given = (m.build(), toks[tok]) if not isinstance(m, str) else (m, None)
                else:
                    fp, given = fingerprint_file(m, cache, device, args.dtype, options, needed), None
                costs["suspect"].append(time.time() - t)
                search = lambda: seedprint.search(fp, searched, device=device, dtype=args.dtype, align=True,
                                                  tokenizer=given)
                traced = not tracemalloc.is_tracing() and "search_peak_bytes" not in registries[tok]
                if traced:                      # one search traced: numpy's peak while it runs (slower, untimed)
                    tracemalloc.start()
                    search()
                    registries[tok]["search_peak_bytes"] = tracemalloc.get_traced_memory()[1]
                    tracemalloc.stop()
                t = time.time()
                res = search()
                costs["search"].append(time.time() - t)
                right = res["answer"] == "none" if base is None else \
                    res["answer"] == "derives from" and res["base"] == base
                trials.append(dict(suspect=label_, kind=kind, registry=tok, related=base is not None,
                                   answer=res["answer"], named=res["base"], right=bool(right),
                                   compared=sum(r is not None for r in res["results"]),
                                   smallest_p=min(r.p for r in res["results"] if r), search_s=costs["search"][-1]))
                bar.update()
        table = rates(trials)
        print_table(table)
        median = {k: float(np.median(v)) for k, v in costs.items() if v}
        timing = dict(per_base_train_s=median.get("train"), per_base_file_s=median.get("file"),
                      per_suspect_fingerprint_s=median.get("suspect"), per_suspect_search_s=median.get("search"),
                      per_suspect_search_max_s=max(costs["search"]),
                      peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        print_table([dict(registry=k, **v) for k, v in registries.items()])
        print(f"medians: {timing}")
        key = "registry_scale_one" if args.one_registry else "registry_scale"     # both kept, the models shared
        plot(trials, os.path.join(args.out, f"{key}.png"))
        update_results(os.path.join(args.out, "results.json"), {key: dict(
            table=table, trials=trials, registries=registries, timing=timing, max_steps=args.max_steps,
            seconds=time.time() - t0)}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.registry_scale")
