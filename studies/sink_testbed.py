"""
studies/sink_testbed.py: does a first-position sink form on a CPU, where does it live, and what does each
intervention do to it? (paper Section 6.2: Fig 12 / Table 7's question at a size a laptop trains)

The testbed: Guo et al.'s Bigram-Backcopy task (2410.13835) on iid tokens (or a bigram chain, or its induction
variant; with or without BOS documents), a model of 2 layers x 1 head, width 64, learned absolute positions,
context 16 (LLaMA-style blocks; flags change any of it). For every seed (--seeds, default 0-9), each of
--variants is trained from the same init (shared parameters are drawn alike) on the same data order for the same
steps, and measured with sink.py's metric on held-out sequences:

    the sink rate (overall, per layer, at each of --lengths), alpha_1, the first position's variance against the
    others' (Eq. 2's outlier), the largest massive activation, where each layer's attention goes, the loss
    against the task's floor; with --self_only k, the same at position k

Every number is a mean over seeds with its 95% t interval. For the baseline: where its sink lives (edits of the
position table: rows swapped, every row the mean, rows shuffled; the same token everywhere; token 1 copied to
position 5); for every other variant: its paired difference from the baseline, seed by seed (t interval, sign
test, the smallest difference the design detects at 80% power).

Makes the README's and docs/sinks.md's testbed numbers:

    python -m studies.sink_testbed                               # 10 min on one core: the sink and where it lives
    python -m studies.sink_testbed --position rope               # also --position none, each with --self_only 5
    python -m studies.sink_testbed --variants baseline attenuate amplify head_norm     # about 45 min on one core
    python -m studies.sink_testbed --micro_batch 32              # the rounding check (the same gradient, split)
"""
import dataclasses
import hashlib
import json
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (DEVICE_HELP, ArgumentParser, Distinct, check_output, figure, flag_type, lock_dir, parse_bool,
                    print_table, read_json, resolve_device, run_script, save_figure, seed_int, update_results,
                    write_json)
from model import GPT, LLAMA_KNOBS
import numpy as np
import torch
from scipy import stats

import data
import hf
import train
from data import windows
from init import add_config_flags, config_overrides
from sink import position_variance
from sink import EPS, add_measure_flags, attention_mass, key_scores, massive_activations, sink_rate, sink_rates
from studies.sink_variants import VARIANTS, add_variant_flags, training, variant_configs

# The testbed's recipe (docs/sinks.md: the search that found it): no BOS, Bigram-Backcopy on iid tokens, learned
# positions, 2 layers of 1 head, context 16, weight decay 0.5 -- its baseline forms a first-position sink.
TESTBED_KNOBS = dict(position="learned", n_layer=2, n_head=1, block_size=16)
# How each variant is trained: train.py's recipe, its flags' defaults here (--max_steps, --batch_size, ...).
TRAINING = train.TrainConfig(max_steps=3000, batch_size=64, lr=1e-3, weight_decay=0.5, eval_sequences=64)
VAL_FRACTION = 0.02         # of the testbed's stream, held out: the sink is measured on these windows


# ----------------------------------------------------------------------------- the emergence testbed

def bigram_backcopy(n: int, vocab: int = 64, triggers: int = 4, successors: int = 4, seed: int = 0,
                    recall: int = 0, doc_len: int = 0):
    """(tokens, log-probabilities): a stream of n tokens from Guo et al.'s Bigram-Backcopy task (2410.13835),
    and the log-probability the generating process gave each token. Each token has a few likely successors
    (a sparse random bigram chain), except that after a trigger token (the top `triggers` ids) the next token
    copies the one before the trigger. A head that backcopies is needed only on triggers and must do nothing
    everywhere else -- an active-dormant head, which is where sinks form. Their mean -log p is the task's loss
    floor: no model can do better on average.

    successors=0: no bigram chain at all -- non-trigger tokens are iid uniform, so the copy is the only thing
    to predict, and anything else a head adds is noise. doc_len > 0: a fresh chain every doc_len tokens
    (documents: no rule crosses their boundary; the caller puts a BOS before each).
    recall > 0 is an induction variant: after a trigger, the next token is the one that followed the
    same trigger's previous occurrence, if that lies within the last `recall` tokens and is no trigger
    (else the chain goes on). Its active-dormant head needs a previous-token head below it, so it sits in
    layer 2 or later; plain backcopy can be done by one layer-1 head, which sees token embeddings only."""
    rng = np.random.default_rng(seed)
    plain, p_trig = vocab - triggers, triggers / vocab
    trig = np.arange(plain, vocab)
    if successors:
        succ = np.stack([rng.choice(plain, successors, replace=False) for _ in range(vocab)])
        succ[rng.random(succ.shape) < p_trig] = vocab - 1         # a slot that emits one of the triggers
        prob = rng.dirichlet(np.ones(successors), size=vocab)
        cum = np.cumsum(prob, axis=1)
    x, logp = np.empty(n, dtype=np.int64), np.zeros(n)
    draws, picks, fresh = rng.random(n), rng.integers(0, triggers, n), rng.integers(0, plain, n)
    last = {}                                                       # trigger -> its latest position
    start = 0
    for t in range(n):
        if doc_len and t % doc_len == 0:
            start, last = t, {}
        if t - start < 1:                                          # a chain starts on a plain token
            x[t], logp[t] = fresh[t], -math.log(plain)
            continue
        prev = x[t - 1]
        if prev >= plain and not recall and t - start >= 2:
            x[t] = x[t - 2]                                        # backcopy: certain
        elif prev >= plain and recall and t - 1 - last.get(prev, -n) <= recall and x[last[prev] + 1] < plain:
            x[t] = x[last[prev] + 1]                               # induction: certain
        elif successors:
            k = min(np.searchsorted(cum[prev], draws[t]), successors - 1)
            x[t] = succ[prev, k]
            if x[t] == vocab - 1:
                x[t] = trig[picks[t]]
                logp[t] = math.log(prob[prev][succ[prev] == vocab - 1].sum() / triggers)
            else:
                logp[t] = math.log(prob[prev, k])
        elif draws[t] < p_trig:
            x[t], logp[t] = trig[picks[t]], math.log(p_trig / triggers)
        else:
            x[t], logp[t] = fresh[t], math.log((1 - p_trig) / plain)
        if prev >= plain:
            last[prev] = t - 1
    return x, logp




def testbed_data(args, T: int) -> tuple:
    """(prepared data directory, loss floor) of the testbed's task, made once in a directory named by every
    setting the stream depends on, so a changed flag never reuses a stale stream. With --bos on, each training
    sequence is a document: BOS (id --testbed_vocab) and a fresh chain of block_size tokens. The floor is the
    generating process's own mean -log p (a model that saw every earlier token of the stream; a window's
    first positions see less, so without BOS the reachable floor is slightly higher)."""
    name = (f"data_v{args.testbed_vocab}_s{args.successors}_r{args.recall}_bos{int(args.bos)}_T{T}_"
            f"seed{args.data_seed}_{args.testbed_tokens}")
    directory = os.path.join(args.out, name)
    if not os.path.isfile(os.path.join(directory, "meta.json")):
        n = args.testbed_tokens // (T + 1) * T if args.bos else args.testbed_tokens
        x, logp = bigram_backcopy(n, args.testbed_vocab, successors=args.successors, seed=args.data_seed,
                                  recall=args.recall, doc_len=T if args.bos else 0)
        if args.bos:
            x = np.concatenate([np.full((n // T, 1), args.testbed_vocab), x.reshape(-1, T)], axis=1).reshape(-1)
        write_json(os.path.join(directory, "floor.json"), dict(loss_floor=-float(np.mean(logp))))
        data.save_tokens(x, directory, "bigram-backcopy", args.testbed_vocab + args.bos, ["bigram_backcopy"],
                         VAL_FRACTION, doc_len=T + 1 if args.bos else 0)       # meta.json last: complete
    return directory, read_json(os.path.join(directory, "floor.json"), "floor.json")["loss_floor"]




def sink_profile(model: GPT, tokens: torch.Tensor, eps: float = EPS) -> dict:
    """One model's numbers on the comparison protocol: the sink rate (overall and per layer), the attention
    to the first token (alpha_1, mean over sequences, layers and heads, and per layer), the first position's
    variance (what W_O sees, over the median of the other positions, mean over layers: Eq. 2's outlier), and the
    massive activation: the largest |h| over the median |h| at the residual state where that ratio peaks; where
    each layer's attention goes (attention_mass). A model built with self_only = k: the same at position k."""
    alpha = key_scores(model, tokens)                                       # (N, L, H, T)
    var = position_variance(model, tokens)                                  # (L, T)
    outlier = lambda k: float(np.mean(var[:, k - 1] / np.median(np.delete(var, k - 1, axis=1), axis=1)))
    peak = max(massive_activations(model, tokens[:16]), key=lambda r: r["ratio"])
    out = dict(**sink_rates(alpha[..., 0], eps), alpha_1=alpha[..., 0].mean().item(),
               alpha_1_per_layer=alpha[..., 0].mean((0, 2)).tolist(), variance_ratio_1=outlier(1),
               massive_ratio=peak["ratio"], massive_state=peak["state"], massive_position=peak["top_position"],
               mass=attention_mass(model, tokens))
    k = model.config.self_only
    if k is not None and k <= tokens.shape[1]:
        out.update(rate_k=sink_rates(alpha[..., k - 1], eps)["rate"], alpha_k=alpha[..., k - 1].mean().item(),
                   variance_ratio_k=outlier(k))
    return out


@torch.no_grad()
def position_table_probes(model: GPT, tokens: torch.Tensor, eps: float = EPS, ks=(2, 5, 9)) -> dict:
    """Does a learned-position model's first-position sink live in its position table (Gu et al. 2410.10781)?
    The sink rate at position 1 and at each k after editing the table: rows p1 and pk swapped (does the sink
    follow the row?), every row replaced by the table's mean, the rows shuffled. The table is restored after."""
    wpe = model.transformer.wpe.weight
    table = wpe.detach().clone()
    T = tokens.shape[1]
    ks = [k for k in ks if k <= T]
    shuffled = torch.randperm(len(table), generator=torch.Generator().manual_seed(0))

    def rates(rows):
        wpe.copy_(rows)
        alpha = key_scores(model, tokens)
        return {f"p{k}": sink_rates(alpha[..., k - 1], eps)["rate"] for k in (1, *ks)}
    try:
        out = {"as trained": rates(table)}
        for k in ks:
            swapped = table.clone()
            swapped[[0, k - 1]] = table[[k - 1, 0]]
            out[f"p1 <-> p{k}"] = rates(swapped)
        out["every row the mean"] = rates(table.mean(0, keepdim=True).expand_as(table))
        out["rows shuffled"] = rates(table[shuffled])
    finally:
        wpe.copy_(table)
    return out


@torch.no_grad()
def token_probes(model: GPT, tokens: torch.Tensor, vocab: int, eps: float = EPS, k: int = 5) -> dict:
    """Does a sinking head attend to a position or to a token? (i) Sequences where every token is the same
    (each id of the vocabulary once): the sink rate at position 1. (ii) Token 1 copied to position k: the sink rate
    and alpha at k, beside the same with the original token at k. A sink that follows the token moves to k's copy;
    a positional one does not (Guo et al. 2410.13835 saw heads put 0.94-0.99 of their attention on one token)."""
    T = tokens.shape[1]
    same = torch.arange(vocab).view(-1, 1).expand(vocab, T).contiguous()
    copied = tokens.clone()
    copied[:, k - 1] = tokens[:, 0]
    moved = copied[:, k - 1] != tokens[:, k - 1]                  # sequences where the copy changed position k
    before, after = key_scores(model, tokens[moved]), key_scores(model, copied[moved])
    return {"same token everywhere: p1": sink_rate(model, same, eps),
            f"p{k} as drawn": sink_rates(before[..., k - 1], eps)["rate"],
            f"p{k} = token 1": sink_rates(after[..., k - 1], eps)["rate"],
            f"alpha_{k} as drawn": before[..., k - 1].mean().item(),
            f"alpha_{k} = token 1": after[..., k - 1].mean().item()}


def interval(values, level: float = 0.95) -> tuple:
    """(mean, low, high): the mean over seeds with its Student-t interval (two values at least)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        raise ValueError(f"an interval over seeds needs two or more values, got {len(x)}")
    half = stats.t.ppf((1 + level) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def paired(base: list, other: list, level: float = 0.95, power: float = 0.8) -> dict:
    """Seed by seed, other - base (both arms from the same init on the same data order): the mean difference
    with its t interval, the two-sided sign test, and the smallest true mean difference the design detects at
    `power` with a two-sided t test at 1 - level (from the differences' spread: (t_a + t_b) sd / sqrt(n))."""
    d = np.asarray(other, dtype=float) - np.asarray(base, dtype=float)
    mean, low, high = interval(d, level)
    up, down = int((d > 0).sum()), int((d < 0).sum())
    sign_p = stats.binomtest(up, up + down, 0.5).pvalue if up + down else 1.0
    n = len(d)
    mde = (stats.t.ppf((1 + level) / 2, n - 1) + stats.t.ppf(power, n - 1)) * d.std(ddof=1) / math.sqrt(n)
    return dict(mean=mean, low=low, high=high, up=up, down=down, sign_p=float(sign_p), detectable=float(mde))



def run_testbed(args, template: train.TrainConfig, knobs: dict, lengths: list) -> dict:
    """Does a first-position sink form, what is it, and what does each mechanism do to it? Bigram-Backcopy (on iid
    tokens by default, or with a bigram chain, or its induction variant; with or without BOS documents;
    LLaMA-style blocks, TESTBED_KNOBS unless flags say otherwise), each variant trained from the same init (shared
    parameters are drawn alike) on the same data order for the same steps, for every seed: the protocol of
    sink_profile on held-out sequences, the sink rate at each of --lengths, and the validation loss against the
    task's floor. Each number is a mean over seeds with its 95% interval. For every baseline: where its sink lives
    (position_table_probes with learned positions, token_probes always); for every other variant: the paired
    difference from the baseline, seed by seed."""
    T = knobs["block_size"]
    directory, floor = testbed_data(args, T)
    val = np.asarray(data.load_data(directory)["val"], dtype=np.int64)
    if args.bos:                                       # BOS and the first T - 1 tokens of each document
        tokens = torch.from_numpy(val.reshape(-1, T + 1)[:args.sequences, :T].copy())
    else:
        tokens = windows(val, T, args.sequences, 0)
    steps = template.max_steps
    res = dict(knobs=knobs, bos=args.bos, successors=args.successors, recall=args.recall, steps=steps,
               lr=template.lr, weight_decay=template.weight_decay, loss_floor=floor, threads=torch.get_num_threads(),
               variants={})
    for name in args.variants:
        runs = []
        for seed in args.seeds:
            cfg = dataclasses.replace(template, data=directory, model=args.model, knobs={**knobs, **VARIANTS[name]},
                                      init_seed=seed, embed_seed=seed)
            # a run's directory is named by everything that defines it, so runs of any two settings never mix
            defining = {k: getattr(cfg.resolved(), k) for k in (*train.RUN_DEFINING, "model", "knobs")}
            key = hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()[:10]
            out_dir = os.path.join(args.out, f"{name}_seed{seed}_{key}")
            log = train.ensure(dataclasses.replace(cfg, out_dir=out_dir))
            model = hf.load(train.list_checkpoints(out_dir)[-1][1], device=template.device).eval()
            run = dict(seed=seed, **sink_profile(model, tokens, args.eps), val_loss=log["val"][-1]["val_loss"],
                       rate_by_length={L: sink_rate(model, tokens[:, :L], args.eps) for L in lengths})
            if name == "baseline":
                run["where"] = token_probes(model, tokens, args.testbed_vocab + args.bos, args.eps)
                if model.config.position == "learned":
                    run["where"].update({f"{edit}: {at}": rate for edit, rates in position_table_probes(
                        model, tokens, args.eps).items() for at, rate in rates.items()})
            runs.append(run)
        stats = ("rate", "alpha_1", "variance_ratio_1", "massive_ratio", "val_loss") + (
            ("rate_k", "alpha_k", "variance_ratio_k") if "rate_k" in runs[0] else ())
        res["variants"][name] = dict(runs=runs, **{key: dict(zip(("mean", "low", "high"),
                                                                 interval([r[key] for r in runs]))) for key in stats})
    ci = lambda v, f="{:.1f}": f"{f.format(v['mean'])} [{f.format(v['low'])}, {f.format(v['high'])}]"
    rows = [dict(variant=name, seeds=len(v["runs"]), sink_rate=ci(v["rate"]), alpha_1=ci(v["alpha_1"], "{:.3f}"),
                 var_1_over_rest=ci(v["variance_ratio_1"], "{:.2f}"),
                 **({f"rate_p{knobs['self_only']}": ci(v["rate_k"]), f"var_p{knobs['self_only']}_over_rest":
                     ci(v["variance_ratio_k"], "{:.2f}")} if "rate_k" in v else {}),
                 loss_over_floor=f"{v['val_loss']['mean'] - floor:+.4f}")
            for name, v in res["variants"].items()]
    print(f"mean over {len(args.seeds)} seeds [95% t interval]; threads {torch.get_num_threads()}")
    print_table(rows)
    print(f"loss floor of the task (the generating process's mean -log p): {floor:.4f}; uniform attention would "
          f"give alpha_1 = {sum(1 / t for t in range(1, T + 1)) / T:.3f}")
    res["table"] = rows
    if "baseline" in res["variants"]:
        base = res["variants"]["baseline"]["runs"]
        where = {probe: dict(zip(("mean", "low", "high"), interval([r["where"][probe] for r in base])))
                 for probe in base[0]["where"]}
        print("where the baseline's sink lives: sink rate (%) at each position after each edit (alpha: its mean "
              "attention), mean over seeds")
        f = lambda p: "{:.3f}" if p.startswith("alpha") else "{:.1f}"
        print_table([dict(probe=p, mean=f(p).format(v["mean"]), interval=f"[{f(p).format(v['low'])}, "
                          f"{f(p).format(v['high'])}]") for p, v in where.items()])
        res["where"] = where
        res["paired"] = {name: {key: paired([r[key] for r in base], [r[key] for r in v["runs"]])
                                for key in ("rate", "alpha_1")}
                         for name, v in res["variants"].items() if name != "baseline"}
        if res["paired"]:
            print("paired against the baseline (same init, same data order), seed by seed:")
            print_table([dict(variant=name, stat=key, diff=f"{d['mean']:+.3g} [{d['low']:+.3g}, {d['high']:+.3g}]",
                              up_down=f"{d['up']}/{d['down']}", sign_p=f"{d['sign_p']:.3g}",
                              detectable=f"{d['detectable']:.3g}")
                         for name, p in res["paired"].items() for key, d in p.items()])
    _plot_testbed(args, res)
    return res


def _plot_testbed(args, res):
    """Sink rate per mechanism, seeds as points, each mean with its 95% interval."""
    plt, fig, ax = figure(figsize=(1.1 * len(res["variants"]) + 2, 3.6))
    names = list(res["variants"])
    for i, name in enumerate(names):
        v = res["variants"][name]
        ax.scatter([i] * len(v["runs"]), [r["rate"] for r in v["runs"]], alpha=0.7, zorder=3)
        ax.errorbar([i], [v["rate"]["mean"]], [[v["rate"]["mean"] - v["rate"]["low"]],
                                               [v["rate"]["high"] - v["rate"]["mean"]]], fmt="k_", capsize=8, zorder=2)
    ax.set(xticks=range(len(names)), ylabel=f"sink rate (%), eps = {args.eps}", ylim=(-3, 103),
           title=f"testbed: {'BOS documents' if args.bos else 'no BOS'}, "
                 f"{len(res['variants'][names[0]]['runs'])} seeds, 95% intervals")
    ax.set_xticklabels(names, rotation=30, ha="right")
    save_figure(fig, os.path.join(args.out, "testbed.png"))


def main(argv=None):
    p = ArgumentParser(prog="studies.sink_testbed", description="Grow a first-position sink on a CPU (Bigram-Backcopy, "
                       "learned positions, no BOS), find where it lives, and pair each intervention against it seed "
                       "by seed.")
    add_config_flags(p, default_model="tiny")
    add_variant_flags(p, TRAINING)
    g = p.add_argument_group("the testbed")
    g.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=list(range(10)),
                   help="init seeds, each paired across the variants (default 0 ... 9; two or more for an interval)")
    g.add_argument("--testbed_tokens", type=flag_type("int>=1"), default=2_000_000)
    g.add_argument("--testbed_vocab", type=flag_type("int>=8"), default=64, help="the task's tokens (4 of them "
                   "triggers)")
    g.add_argument("--successors", type=flag_type("int>=0"), default=0, help="likely successors of each token (Guo "
                   "et al.: a few); 0: iid tokens, only the copy is predictable")
    g.add_argument("--recall", type=flag_type("int>=0"), default=0, help="0: Bigram-Backcopy; > 0: its induction "
                   "variant (see bigram_backcopy)")
    g.add_argument("--bos", type=parse_bool, default=False, metavar="on|off",
                   help="train on documents that open with a BOS token")
    g = p.add_argument_group("the measurement (sink.py's metric)")
    add_measure_flags(g, lengths=None)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--out", default="out/sink_testbed")
    args = p.parse_args(argv)
    knobs = {**LLAMA_KNOBS, **TESTBED_KNOBS, **config_overrides(args)}
    if "vocab_size" in config_overrides(args):
        p.error("the testbed's vocabulary is --testbed_vocab (plus BOS), not --vocab_size")
    knobs["vocab_size"] = args.testbed_vocab + args.bos
    T = knobs["block_size"]
    lengths = args.lengths or [T]
    if max(lengths) > T:
        p.error(f"--lengths {max(lengths)} exceeds the testbed's context {T}")
    if len(args.seeds) < 2:
        p.error("--seeds: every number is a mean over seeds with its interval, which needs two or more seeds")
    if args.sequences < 2:
        p.error("--sequences: the first position's variance is across sequences, which needs two or more")
    if args.successors > args.testbed_vocab - 4:
        p.error(f"--successors {args.successors} exceeds the --testbed_vocab {args.testbed_vocab} less its 4 triggers")
    steps = args.max_steps
    template = training(args, TRAINING, warmup=min(100, steps // 10), ckpt_every=steps, eval_every=steps,
                        log_every=max(steps // 4, 1), device=str(resolve_device(args.device)))
    variant_configs(args.model, knobs, args.variants)   # every variant's model can be built, before any trains
    val_windows = int(args.testbed_tokens * VAL_FRACTION) // (T + 1)
    if val_windows < max(64, args.sequences):
        p.error(f"--testbed_tokens {args.testbed_tokens} leave {val_windows} held-out sequences; "
                f"{max(64, args.sequences)} are needed")
    check_output(args.out)
    with lock_dir(args.out):
        res = run_testbed(args, template, knobs, lengths)
        update_results(os.path.join(args.out, "results.json"), {"testbed": res}, template.device, None)


if __name__ == "__main__":
    run_script(main, "studies.sink_testbed")
