"""
studies/derivatives.py: does SeedPrint recognize what people do to a real model's weights? (paper Section 6.1,
on a released checkpoint instead of toy models)

From --base (a Hugging Face directory with its tokenizer.json), builds:

    derivatives         int8 and int4 round trips, magnitude pruning (30%, 50%), a 50/50 merge with a short
                        fine-tune on --corpus, a low-rank update, Gaussian noise (0.01, 0.05, 0.2 x std(W)),
                        --deriv_steps of continued training on --corpus2, a vocabulary extension
    reparametrizations  the residual basis permuted, signed-permuted and negated-permuted, the MLP units permuted,
                        the residual stream rotated (QuaRot): each checked to keep the logits (within 1e-4)
    controls            fresh inits of the base's architecture (seeds 1-3) and two short from-scratch trainings

and tests each against the base with seedprint.py's exact and aligned verdicts: derivatives and
reparametrizations are related, controls unrelated. The exact verdict cannot see through a moved basis; the
aligned one should. Makes the README's "What people do to weights" and docs/seedprint.md's table:

    python -m studies.derivatives --base DIR --sequences 300     # SmolLM2-135M: about 70 min on 2 cores

Its trainings use the base's own tokenizer; a small base (a few layers) takes a few minutes.
"""
import dataclasses
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Progress, atomic_write, check_output, flag_type, lock_dir, print_table, provenance,
                    resolve_device, run_script, update_results)
from model import write_checkpoint
import torch

import data
import hf
import train
from evidence import Options
from studies.edits import (add_noise, extend_vocab, logit_change, low_rank_update, merge, permute_mlp,
                           permute_residual, prune, quantize, rotate_residual)
from studies.lineage import (Lineage, Recipe, add_test_flags, base_corpus, check_base, check_k, checkpoints,
                             fresh_init, released, test_options)


def short_run(args, out: str, name: str, text: str, device: str, init_from: str = None, seed: int = 0,
              lr: float = 1e-4) -> str:
    """The last checkpoint of a short training run of the base's architecture, on the base's tokenizer:
    continued from the base (init_from) or from scratch (a fresh init of seed `seed`)."""
    cfg = hf.read_config(args.base)
    out_dir = os.path.join(out, "runs", name)
    train.ensure(train.TrainConfig(
        data=text, out_dir=out_dir, init_from=init_from, model=None if init_from else "tiny",
        knobs={} if init_from else dataclasses.asdict(cfg), init_seed=seed, embed_seed=seed, batch_size=8,
        seq_len=min(128, cfg.block_size), max_steps=args.deriv_steps, lr=lr, warmup=min(10, args.deriv_steps // 5),
        ckpt_every=args.deriv_steps, eval_every=0, log_every=10, device=device))
    return checkpoints(out_dir)[-1][1]


def main(argv=None):
    p = ArgumentParser(prog="studies.derivatives", description="SeedPrint on a real checkpoint's derivatives, "
                       "reparametrizations and unrelated controls.")
    p.add_argument("--base", required=True, help="a Hugging Face directory (config.json, *.safetensors, "
                   "tokenizer.json)")
    p.add_argument("--deriv_steps", type=flag_type("int>=1"), default=40, help="steps of each short training run")
    p.add_argument("--corpus", default="shakespeare", help="the fine-tune's and the from-scratch runs' corpus "
                   "(a named corpus of data.py, or a text file)")
    p.add_argument("--corpus2", default="brown", help="the continued training's corpus")
    p.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (data.py --from)")
    add_test_flags(p)
    p.add_argument("--out", default="out/lineage", help="results.json, and every model and fingerprint made")
    args = p.parse_args(argv)
    test_options(args)
    config = check_base(args.base, args.seq_len)
    if args.k != Options().k:                     # left at its default, k is capped at half the width
        check_k(args.k, [config.n_embd], "the width of --base")   # the width of every model tested
    hf.check_weights_finite(args.base)            # last: it reads every weight
    check_output(args.out)
    device = str(resolve_device(args.device))
    out = os.path.join(args.out, "derivatives")
    with lock_dir(args.out):
        released_base = released(args.base)     # fingerprinted from a load of its own: base stays here, on the CPU
        base = released_base.build()
        base_ckpt = os.path.join(out, "base.pt")        # a checkpoint file that train.py can --init_from
        if not os.path.isfile(base_ckpt):
            atomic_write(base_ckpt, lambda tmp: write_checkpoint(tmp, base, tokenizer=args.base,
                                                                 provenance=provenance()))
        cfg, V = base.config, base.config.vocab_size
        key = released_base.key
        texts = {c: base_corpus(out, c, args.base, args.data_from) for c in (args.corpus, args.corpus2)}
        label = {c: data.corpus_label(c) for c in (args.corpus, args.corpus2)}
        fine_tune = short_run(args, out, f"finetune_{label[args.corpus]}", texts[args.corpus], device,
                              init_from=base_ckpt)
        continued = short_run(args, out, f"continued_{label[args.corpus2]}", texts[args.corpus2], device,
                              init_from=base_ckpt)
        R = lambda name, make: Recipe(f"{key}|{name}", make)
        cases = [  # (name, truth, model, is the function supposed to be unchanged)
            ("int8 round trip (per row)", True, R("int8", lambda: quantize(base, 8)), False),
            ("int4 round trip (groups of 32)", True, R("int4g32", lambda: quantize(base, 4, 32)), False),
            ("magnitude pruning 30%", True, R("prune30", lambda: prune(base, 0.3)), False),
            ("magnitude pruning 50%", True, R("prune50", lambda: prune(base, 0.5)), False),
            ("merge 50/50 with a fine-tune", True, R("merge", lambda: merge(base, hf.load(fine_tune), 0.5)), False),
            ("low-rank update (rank 16, 10% of |W|)", True, R("lowrank", lambda: low_rank_update(base, 16, 0.1)),
             False),
            *[(f"Gaussian noise {r:g} x std(W)", True, R(f"noise{r}", lambda r=r: add_noise(base, r)), False)
              for r in (0.01, 0.05, 0.2)],
            (f"continued training on {args.corpus2} ({args.deriv_steps} steps)", True, continued, False),
            ("vocabulary extension (+1024 tokens)", True, R("vocab1024", lambda: extend_vocab(base, 1024)), False),
            ("permuted residual basis", True, R("perm", lambda: permute_residual(base, 1)), True),
            ("signed permutation of the residual basis", True,
             R("perm_signs", lambda: permute_residual(base, 1, 0.5)), True),
            ("negated, permuted residual basis", True, R("perm_negated", lambda: permute_residual(base, 1, 1.0)),
             True),
            ("permuted MLP units", True, R("mlpperm", lambda: permute_mlp(base, 1)), True),
            ("rotated residual stream (QuaRot)", True, R("rotate", lambda: rotate_residual(base, 1)), True),
            *[(f"fresh init, seed {s}", False, fresh_init(cfg, s), False) for s in (1, 2, 3)],
            *[(f"from scratch, seed {s} ({args.deriv_steps} steps)", False,
               short_run(args, out, f"scratch_seed{s}", texts[args.corpus], device, seed=s, lr=1e-3), False)
              for s in (1, 2)],
        ]
        lineage = Lineage(args, args.out, device, vocab=V)    # every model sees ids below the base's vocabulary
        rows = []
        bar = Progress(len(cases), "derivatives", "models", every=0)
        for name, truth, m, preserving in cases:
            t0 = time.time()
            change = None
            if preserving:                                  # the reparametrizations must keep the function
                change = logit_change(base, m.build(), V)
                if change > 1e-4:
                    raise FloatingPointError(f"{name} changed the logits by {change:.2e}: not function-preserving")
            rows.append(dict(pair=f"base vs {name}", truth="related" if truth else "unrelated",
                             **lineage.verdicts(released_base, m), logit_change=change, seconds=time.time() - t0))
            bar.update()
        print_table(rows, floats="{:.3g}")
        update_results(os.path.join(args.out, "results.json"), {"derivatives": rows}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.derivatives")
