"""
studies/sink_calibration.py: does positional variance calibration stop a sink from forming on natural text?
(paper Section 6.2.1: Fig 12 / Table 7, at the scale the flags set)

Each of --variants (baseline, attenuate, amplify, head_norm, and the other sink controls) is trained from one
init (--seed) on one data order of --train_text; then each model's sink rate (sink.py's metric) is measured on
--sequences windows of the evaluation text (--text, default WikiText-2's test split, in the trained models'
tokenizer) at each of --lengths, beside its perplexity there. Draws the sink rate against T (fig12_sink_rate.png).

The README's pilot (seed 0 only: a bounded pilot; 25 min on one core; 10.2M tokens of bytes, no BOS):

    python -m studies.sink_calibration --variants baseline --position rope --n_layer 4 --n_head 4 --n_embd 128 \
        --block_size 128 --lr 2e-3 --weight_decay 0.5 --max_steps 5000 --batch_size 16 --lengths 32 64 128

and the same with --position none (20 min). A run at Gu et al.'s scale (about 60M parameters, 1B tokens) is in
docs/sinks.md and needs a GPU. The default (tiny, 600 steps, baseline only) takes 4 minutes on 2 cores.
"""
import dataclasses
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (DEVICE_HELP, ArgumentParser, check_output, figure, lock_dir, resolve_device, run_script,
                    save_figure, seed_int, update_results)
from model import LLAMA_KNOBS
import numpy as np
import torch

import data
import hf
import train
from data import read_ids, tokenize_text, windows
from init import add_config_flags, config_overrides
from sink import add_measure_flags, sink_rate
from studies.sink_variants import VARIANTS, add_variant_flags, training, variant_configs

# How each variant is trained: train.py's recipe, its flags' defaults here (--max_steps, --batch_size, ...).
TRAINING = train.TrainConfig(max_steps=600, batch_size=32, lr=3e-3, log_every=50)


def prepared_meta(train_text: str):
    """meta.json of --train_text when it is a directory that data.py wrote, else None (a corpus name or a text
    file)."""
    return data.load_data(train_text)["meta"] if os.path.isdir(train_text) else None


def evaluation_ids(args, tokenizer: str) -> np.ndarray:
    """The evaluation text (--text, default wikitext2) in the trained models' tokenizer, or --ids already
    tokenized (checked to lie inside the models' vocabulary)."""
    if args.ids:           # the vocabulary of prepared data is in its meta.json: no tokenizer to load
        meta = prepared_meta(args.train_text)
        vocab = meta["vocab_size"] if meta else data.get_tokenizer(tokenizer)[2]
        ids = read_ids(args.ids)
        if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(f"--ids {args.ids} holds ids in [{ids.min()}, {ids.max()}], outside the "
                             f"{tokenizer} vocabulary of {vocab} the models are trained on")
        return ids
    return tokenize_text(args.text or "wikitext2", tokenizer, args.data_from)


def main(argv=None):
    p = ArgumentParser(prog="studies.sink_calibration", description="Fig 12 / Table 7 at the scale the flags set: "
                       "the sink controls trained from one init on natural text, their sink rate and perplexity.")
    add_config_flags(p, default_model="tiny")
    add_variant_flags(p, TRAINING)
    g = p.add_argument_group("data")
    g.add_argument("--seed", type=seed_int, default=0, help="the init seed of every variant")
    g.add_argument("--train_text", default="shakespeare", help="training corpus (data.py's name, a text file, or a "
                   "directory that data.py wrote)")
    g.add_argument("--tokenizer", default=None, help="bytes (default), gpt2, or a tokenizer.json dir; a prepared "
                   "--train_text brings its own")
    g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (data.py --from)")
    g = p.add_argument_group("the measurement (sink.py's metric)")
    g.add_argument("--text", default=None, help="evaluation text file or corpus name (default wikitext2)")
    g.add_argument("--ids", default=None, help="evaluation token ids (.npy or a data.py .bin) instead of --text")
    add_measure_flags(g)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--out", default="out/sink_calibration")
    args = p.parse_args(argv)
    if args.text and args.ids:
        p.error("give --text or --ids, not both")
    template = training(args, TRAINING, init_seed=args.seed)       # every training setting checked here
    knobs = {**LLAMA_KNOBS, **config_overrides(args)}
    configs = variant_configs(args.model, knobs, args.variants)
    block = min(c.block_size for c in configs.values())
    if max(args.lengths) > block:
        raise ValueError(f"--lengths {max(args.lengths)} exceeds the trained models' block_size {block}")
    meta = prepared_meta(args.train_text)
    if meta and args.tokenizer not in (None, meta["tokenizer"]):
        raise ValueError(f"--train_text {args.train_text} holds {meta['tokenizer']} tokens; drop --tokenizer "
                         f"{args.tokenizer} (the evaluation text is tokenized like the training data)")
    tokenizer = meta["tokenizer"] if meta else args.tokenizer or "bytes"
    stream = evaluation_ids(args, tokenizer)          # read once, checked before any training
    windows(stream, max(args.lengths), args.sequences, 0, name=args.text or args.ids or "wikitext2")
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        label = f"{data.corpus_label(args.train_text)}_{tokenizer}"
        text = args.train_text if meta else data.prepared([args.train_text], os.path.join(args.out, label),
                                                          tokenizer, args.data_from)
        res = {}
        for name in args.variants:
            out_dir = os.path.join(args.out, name)
            train.ensure(dataclasses.replace(
                template, data=text, out_dir=out_dir, model=args.model, knobs={**knobs, **VARIANTS[name]},
                ckpt_every=template.max_steps, eval_every=template.max_steps, device=device))
            path = train.list_checkpoints(out_dir)[-1][1]
            model = hf.load(path, device=device).eval()
            rates = {T: sink_rate(model, windows(stream, T, args.sequences, args.data_seed), args.eps)
                     for T in args.lengths}
            T = max(rates)
            x = windows(stream, T, args.sequences, 1).to(device)
            with torch.no_grad():
                losses = [model(x[i:i + 16, :-1], x[i:i + 16, 1:])[1].item() for i in range(0, len(x), 16)]
            loss = float(np.mean(losses))
            if not math.isfinite(loss):
                raise FloatingPointError(f"{name}: non-finite loss on the evaluation text ({path}); no perplexity "
                                         f"from it")
            res[name] = dict(rates=rates, ppl=math.exp(loss), checkpoint=path)
            print(f"{name:>10}: sink rate % " + "  ".join(f"T={t}: {r:5.1f}" for t, r in rates.items())
                  + f" | ppl {math.exp(loss):.2f} (T={T})")
        plt, fig, ax = figure()
        for name, r in res.items():
            ax.plot(list(r["rates"]), list(r["rates"].values()), "o-", label=f"{name} (ppl {r['ppl']:.1f})")
        ax.set(xscale="log", xlabel="sequence length T", ylabel=f"sink rate (%), eps={args.eps}")
        ax.legend(fontsize=8)
        save_figure(fig, os.path.join(args.out, "fig12_sink_rate.png"))
        update_results(os.path.join(args.out, "results.json"), {"calibration": res}, device, None)


if __name__ == "__main__":
    run_script(main, "studies.sink_calibration")
