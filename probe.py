"""
probe.py: what a transformer is born with -- its token preference on random inputs, and the contraction
behind it (paper Sections 3 and 4).

Feed a freshly initialized transformer N sequences of uniformly random token ids (or Gaussian vectors
with the embedding's mean and std, Section 4.1) and look at the last position:
- token preference (Sec 3, Table 1, Fig 1): the argmax next token piles onto a few seed-dependent
  tokens, above the top count of as many uniform draws (the paper's baseline, Fig 1's red line) and orders of
  magnitude above one token's expected count. The top-1 count's significance is the binomial upper
  tail under the uniform null, Bonferroni-corrected over the vocabulary (Appendix B.2), in log space.
- inter-sequence contraction (Fig 2): the last-token states of *different* sequences share a direction;
  their mean pairwise cosine rises with depth.
- the contraction direction (Finding 2.2): the mean of the normalized final states, read through the
  LM head, names the most-predicted token.
- hidden-dimension preference (Fig 10): a few final-norm dimensions are the largest for most inputs.
All of it comes from one pass per model, accumulated batch by batch in memory independent of N.

    python probe.py                      # Table 1 protocol, gpt2-nano, seeds 42 43, ~65 s on 2 CPU cores
    python probe.py --model DIR --exp contraction dims   # a given model: Fig 2 and Fig 10
    python probe.py --sequences 10000 --seq_len 64 256 1024 --batch_size 250 --device cuda   # the paper's size

Where the contraction comes from, and the sweeps over many fresh inits, are studies built on this file's pass:
studies/contraction_origin.py (the sublayer ablation, MLP0, LayerNorm, Table 3: Figs 3-7), attention_averaging.py
(Figs 8, 9) and seed_preference.py (Finding 2.2 over many seeds, split over torchrun's ranks; seed dependence).

Imports model.py, init.py (fresh inits), data.py (the random inputs), theory.py (the closed forms beside each
probe), hf.py (a model given by path) and common.py.
"""
import dataclasses
import math
import os
import time
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, add_compile_flags, add_device_flags, check_compile_mode, check_output,
                    figure, flag_type, peak_flops, prepare_device, print_table, refuse_unused, results_of, run_script,
                    save_figure, seed_int, torchrun_rank)
from model import GPT, PRESETS, GPTConfig, forward_flops
import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import binom

import hf
import theory
from data import random_inputs
from init import add_config_flags, build, config_from_flags, config_overrides


# ----------------------------------------------------------------------------- one pass over a model

TIMED_PASS = "probe.timed_pass"     # the timed loop's name in a torch.profiler trace (studies.gpu_check's profile)


@torch.no_grad()
def probe(model: GPT, kind: str = "tokens", sequences: int = 512, seq_len: int = 64, batch_size: int = 32,
          data_seed: int = 1234, log: bool = False, compile: bool = False, compile_mode: str = "default") -> dict:
    """One pass of random sequences through `model`, returning from that pass alone:
      counts         argmax next-token counts (vocab,)
      cosine         per residual-stream state (input, each block, final norm): mean / std / log10 p of
                     the pairwise cosine of last-token states across sequences
      direction_top1 the token with the largest logit along the contraction direction
      dim_counts     how often each final-norm dimension is the largest (Fig 10)
    and the throughput. bf16 autocast on CUDA; the LM head runs on the last position only. compile: the pass
    through torch.compile in compile_mode (common.COMPILE_MODES), compiled on each batch shape before the clock
    starts (compile_seconds). Nothing in the timed loop waits for the device: token ids are there before it
    (pass_inputs), and model.trace_passes checks finiteness once, after the last batch."""
    device, cfg = next(model.parameters()).device, model.config
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    trace, compile_seconds = None, None
    if compile:
        # Compile time is not throughput: a batch of each shape the pass will see (full batches and the
        # smaller last one) runs once before the clock, discarded. A fresh compile cache per call, so no shape is
        # compiled in the timed loop and dynamo's recompile limit is never reached.
        t0 = time.time()
        torch._dynamo.reset()
        trace = model.compiled_trace(compile_mode)
        for n in {min(batch_size, sequences), sequences % batch_size} - {0}:
            with autocast:
                for _ in model.trace_passes(pass_inputs(model, kind, n, seq_len, n, data_seed), trace, hidden="last",
                                            logits=True):
                    pass
        sync()
        compile_seconds = time.time() - t0
    batches = pass_inputs(model, kind, sequences, seq_len, batch_size, data_seed)
    stats = PassStatistics(cfg, device)
    sync()
    t0 = time.time()
    # named for a profiler, which can then read this loop apart from the compiling before it (negligible without one)
    with torch.profiler.record_function(TIMED_PASS):
        with autocast:
            for out in model.trace_passes(batches, trace, hidden="last", logits=True):
                stats.update(out)
        sync()
    seconds = time.time() - t0
    with autocast:
        direction = stats.cosine.direction()[-1].to(model.transformer.wte.weight.dtype)
        direction_top1 = int(model.unembed(direction[None]).argmax())
    flops = forward_flops(model, seq_len) * sequences
    peak = peak_flops(device)
    result = dict(counts=stats.counts.cpu().numpy(), cosine=stats.cosine.result(), direction_top1=direction_top1,
                  dim_counts=stats.dim_counts.cpu().numpy(), seconds=seconds,
                  tokens_per_s=sequences * seq_len / seconds, tflops=flops / seconds / 1e12,
                  mfu=(flops / seconds / peak) if peak else None, compile_seconds=compile_seconds)
    if log:
        mfu = f", {100 * result['mfu']:.1f}% of bf16 peak" if result["mfu"] else ""
        compiled = f"; compiled ({compile_mode}) in {compile_seconds:.1f} s before" if compile else ""
        print(f"  [{sequences} x {seq_len} {kind}: {seconds:.1f} s, {result['tokens_per_s']:,.0f} tok/s, "
              f"{result['tflops']:.2f} TFLOP/s{mfu}{compiled}]")
    return result


def pass_inputs(model: GPT, kind: str, sequences: int, seq_len: int, batch_size: int, seed: int):
    """data.random_inputs' batches for model.trace, token ids all on the device at once (one copy before the first
    pass, not a copy per batch that waits for the device; the same ids, drawn at once either way); Gaussian
    embeddings batch by batch, as N x T x d of them may not fit."""
    if kind != "tokens":
        return random_inputs(model, kind, sequences, seq_len, batch_size, seed)
    ids = next(random_inputs(model, kind, sequences, seq_len, sequences, seed))["idx"]
    return [dict(idx=x) for x in ids.split(batch_size)]


class PassStatistics:
    """What probe() keeps of its passes, on the device, in a few kernels a batch whatever the depth: the argmax
    counts of the last position's logits and of its final-norm state (Fig 10), and the pairwise cosines of every
    residual state at once (PairwiseCosine on the states stacked)."""

    def __init__(self, config: GPTConfig, device):
        self.counts = torch.zeros(config.vocab_size, dtype=torch.int64, device=device)
        self.dim_counts = torch.zeros(config.n_embd, dtype=torch.int64, device=device)
        self.cosine = PairwiseCosine()

    def update(self, out: dict) -> None:
        tally(self.counts, out["logits"])
        tally(self.dim_counts, out["hidden"][-1])
        self.cosine.update(torch.stack(out["hidden"]))      # (n_layer + 2, B, d)


def tally(counts: torch.Tensor, x: torch.Tensor) -> None:
    """counts[i] += how many rows of x have their largest entry at i. With index_add_, not bincount: on CUDA
    bincount reads the largest id back to size its output, a host sync per batch. argmax in x's own dtype: a bf16
    value's float32 copy is the same number, so the copy would change nothing."""
    top = x.argmax(dim=-1)
    counts.index_add_(0, top, torch.ones_like(top))


def token_preference(counts: np.ndarray) -> dict:
    """Table 1's row from argmax counts: top-1 id, its frequency, its ratio to one token's expected count n / V
    (ratio_to_uniform) and to the top count of n uniform draws (ratio_to_top_uniform: the paper's baseline, Fig 1's
    red line; one seeded draw, uniform_baseline's seed 0, so the ratio moves with that draw's top count), log10 p."""
    n, vocab = int(counts.sum()), len(counts)
    top1 = int(counts.argmax())
    c = int(counts[top1])
    top_uniform = int(uniform_baseline(n, vocab)[0])
    return dict(top1_id=top1, top1_count=c, top1_freq=c / n, ratio_to_uniform=c / (n / vocab),
                top_uniform=top_uniform, ratio_to_top_uniform=c / top_uniform,
                log10_p=log10_bonferroni_p(c, n, vocab), n=n, distinct_predicted=int((counts > 0).sum()))


def log10_binom_tail(k: int, n: int, p: float) -> float:
    """log10 P(X >= k), X ~ Binomial(n, p), summed in log space: never underflows to -inf."""
    if k <= 0:
        return 0.0
    if k > n:
        return -math.inf
    return float(logsumexp(binom.logpmf(np.arange(k, n + 1), n, p)) / math.log(10))


def log10_bonferroni_p(top1_count: int, n: int, vocab_size: int) -> float:
    """Appendix B.2: p = min(1, V * P(X >= c_top1)) under the uniform null p = 1/V, as log10."""
    return min(0.0, math.log10(vocab_size) + log10_binom_tail(top1_count, n, 1.0 / vocab_size))


def uniform_baseline(n: int, vocab_size: int, seed: int = 0) -> np.ndarray:
    """Sorted counts (descending) of n uniform draws from the vocabulary: the red dashed line of Fig 1."""
    rng = np.random.default_rng(seed)
    return np.sort(np.bincount(rng.integers(0, vocab_size, n), minlength=vocab_size))[::-1]


def unit(x: torch.Tensor) -> torch.Tensor:
    """x / |x| in float64 along the last dim. Not F.normalize: its eps of 1e-12 leaves tiny vectors
    un-normalized, and residual-free MLP0 stacks do shrink activations below 1e-12 by layer 12."""
    x = x.double()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)


class PairwiseCosine:
    """Mean and std of the cosine over all pairs i != j of N vectors, streamed in batches. With u_i the
    unit vectors, the mean needs only sum_i u_i (theory.mean_pairwise_cosine), and the mean square
    sum_{i != j} (u_i.u_j)^2 = |U^T U|_F^2 - N a d x d matrix, never the N x N Gram: memory O(d^2).
    Batches (B, d) make one result; batches (S, B, d) make S at once (probe's residual states), one kernel each
    step for all S: result() is then a list."""

    def __init__(self):
        self.n, self.sum, self.gram = 0, None, None

    def update(self, x: torch.Tensor):
        u = unit(x)
        self.sum = u.sum(-2) if self.sum is None else self.sum + u.sum(-2)
        self.gram = u.mT @ u if self.gram is None else self.gram + u.mT @ u
        self.n += u.shape[-2]

    def result(self):
        if self.sum.dim() > 1:
            return [self._result(s, g) for s, g in zip(self.sum, self.gram)]
        return self._result(self.sum, self.gram)

    def _result(self, total: torch.Tensor, gram: torch.Tensor) -> dict:
        n = self.n
        pairs = n * (n - 1)
        mean = float(theory.mean_pairwise_cosine(total, n))
        mean_sq = (float((gram ** 2).sum()) - n) / pairs
        # against 0: if the vectors are independent with E[u] = 0, the terms u_i.u_j (i != j) are
        # uncorrelated with variance E[(u_i.u_j)^2] <= 1, so the mean over the N(N-1) ordered pairs (each
        # unordered pair twice) has variance v <= 2 / (N(N-1)). Cantelli's inequality bounds the chance of
        # a mean this large by v / (v + mean^2) with no normal approximation (z far out means nothing).
        v = 2 / pairs
        p_bound = v / (v + mean ** 2) if mean > 0 else 1.0
        z = mean / math.sqrt(2 * max(mean_sq, 1e-300) / pairs)
        return dict(mean=mean, std=math.sqrt(max(mean_sq - mean ** 2, 0.0)), z=z, p_bound=p_bound, n=n)

    def direction(self) -> torch.Tensor:
        """The contraction direction: the mean of the normalized vectors (S, d for S sets)."""
        return self.sum / self.n


# ----------------------------------------------------------------------------- a probe on the command line
# What probe.py shares with the studies built on it (studies/fresh_probes.py lists them): the flags of a run, the
# architecture and its fresh inits, the device, the results, the tables and figures.

SEEDS, EMBED_SEED = [42, 43], 0     # the fresh inits' defaults: Table 1's seeds, the shared embedding


def add_probe_flags(parser, out: str, lengths: bool = False, compile: bool = True) -> None:
    """The random inputs' sizes, the pass's options, the device and --out. lengths: --seq_len takes several
    lengths (a row each), else one; compile: --compile, for a run that calls probe()."""
    parser.add_argument("--sequences", type=flag_type("int>=2"), default=512,
                        help="random sequences per model (the cosines are between pairs of them)")
    several = dict(nargs="+", action=Distinct, default=[64]) if lengths else dict(default=64)
    parser.add_argument("--seq_len", type=flag_type("int>=1"), **several)
    parser.add_argument("--batch_size", type=flag_type("int>=1"), default=32)
    parser.add_argument("--data_seed", type=seed_int, default=1234, help="seed of the random inputs")
    if compile:
        add_compile_flags(parser, "the probe pass (GPU throughput; compiled before the clock starts)")
    add_device_flags(parser, "dtype of the weights (bfloat16: the paper's GPU setting)", dtype_default="float32")
    parser.add_argument("--out", default=out)


def given_model(args) -> Optional[str]:
    """The checkpoint or Hugging Face directory --model names, or None for a preset."""
    return args.model if args.model not in PRESETS and os.path.exists(args.model) else None


def architecture(args, stored: Optional[hf.Stored] = None) -> GPTConfig:
    """The config of --model: a preset with the knob flags on top, or a given model's own (`stored`, as hf.read
    leaves it: its config read once, no weight read; no knob flags)."""
    if stored is not None:
        if config_overrides(args):
            raise ValueError(f"--model {args.model} is a model with its own config: drop the knob flags "
                             f"({', '.join('--' + k for k in config_overrides(args))})")
        return stored.config
    if args.model not in PRESETS:
        raise ValueError(f"--model {args.model!r} is no preset ({', '.join(PRESETS)}) and no checkpoint or Hugging "
                         f"Face directory")
    return config_from_flags(args)


def check_lengths(args, config: GPTConfig) -> None:
    """--out, every --seq_len against the model's context, and --compile_mode only beside --compile on, before any
    work."""
    check_output(args.out)
    if hasattr(args, "compile"):
        check_compile_mode(args.compile, args.compile_mode)
    lengths = args.seq_len if isinstance(args.seq_len, list) else [args.seq_len]
    bad = [T for T in lengths if not 1 <= T <= config.block_size]
    if bad:
        raise ValueError(f"--seq_len {bad[0]} is outside [1, the model's block_size {config.block_size}]")


def fresh_model(args, config: GPTConfig, seed: int, **knobs) -> GPT:
    """A fresh init of `config` (the knobs on top) from block seed `seed` and --embed_seed, on --device in --dtype."""
    cfg = dataclasses.replace(config, **knobs)
    return build(cfg, seed, args.embed_seed, device=args.device, dtype=getattr(torch, args.dtype)).eval()


def run_probe(args, model: GPT, kind: str = "tokens", seq_len: int = None) -> dict:
    """probe() of `model` at the flags' sizes (one length: `seq_len`, else --seq_len or its first), logged."""
    T = seq_len or (args.seq_len[0] if isinstance(args.seq_len, list) else args.seq_len)
    return probe(model, kind, args.sequences, T, args.batch_size, args.data_seed, log=True, compile=args.compile,
                 compile_mode=args.compile_mode)


def layer_rows(curves: dict, extra: dict = None) -> list:
    """One row per residual-stream state, a column per curve: 'mean +- std' of the pairwise cosine."""
    n = len(next(iter(curves.values())))
    rows = []
    for i in range(n):
        row = dict(state="input" if i == 0 else "final norm" if i == n - 1 else f"block {i}")
        row.update({name: f"{c[i]['mean']:.4f} +- {c[i]['std']:.4f}" for name, c in curves.items()})
        row.update({name: f"{e[i]:.4f}" if i < len(e) else "" for name, e in (extra or {}).items()})
        rows.append(row)
    return rows


def plot_layers(path: str, curves: dict, title: str, closed_forms: dict = None) -> None:
    """The pairwise cosine by layer (input .. last block; the final norm left out), +- one std, with closed forms
    ({label: values}) dotted beside."""
    plt, fig, ax = figure(figsize=(6, 4))
    for label, c in curves.items():
        x = np.arange(len(c) - 1)
        m, sd = np.array([s["mean"] for s in c[:-1]]), np.array([s["std"] for s in c[:-1]])
        ax.plot(x, m, "o-", ms=3, label=label)
        ax.fill_between(x, m - sd, m + sd, alpha=0.15)
    for label, values in (closed_forms or {}).items():
        ax.plot(np.arange(len(values)), values, "k:", label=label)
    ax.set(xlabel="layer", ylabel="pairwise cosine of last-token states")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_preference(path: str, hist: dict, title: str, baseline: np.ndarray = None, k: int = 50) -> None:
    """Fig 1's histogram: each model's k largest argmax counts by rank, beside the uniform draws' (baseline)."""
    plt, fig, ax = figure(figsize=(7, 4))
    for label, counts in hist.items():
        ax.bar(np.arange(k), np.asarray(counts)[:k], alpha=0.5, label=label)
    if baseline is not None:
        ax.plot(np.arange(k), baseline[:k], "r--", label="uniform draws (baseline)")
    ax.set(yscale="log", xlabel="rank of predicted token", ylabel="count of argmax next token")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path)


# ----------------------------------------------------------------------------- the experiments on one model
# Each prints its table, draws its figure and returns what goes into results.json. With --model DIR they run on
# the weights given (`given`, loaded once for all of them), else on fresh inits of the preset (contraction and dims:
# the first of --seeds).

def _model(args, config, seed, given: Optional[GPT]):
    """The model given by --model DIR, or a fresh init of the preset from block seed `seed`."""
    return given if given is not None else fresh_model(args, config, seed)


def _which(args, seed) -> str:
    """How a row or a title names its model: a preset's seed, or the model given."""
    return args.model if given_model(args) else f"{args.model} seed {seed}"


def exp_table1(args, config, given=None):
    rows, hist = [], {}
    for seed in args.seeds:
        model = _model(args, config, seed, given)
        for T in args.seq_len:
            r = run_probe(args, model, seq_len=T)
            rows.append(dict(seed=seed, seq_len=T, **token_preference(r["counts"]), seconds=r["seconds"],
                             tokens_per_s=r["tokens_per_s"], tflops=r["tflops"], mfu=r["mfu"],
                             compile_seconds=r["compile_seconds"]))
            hist[f"{_which(args, seed)}, T={T}"] = np.sort(r["counts"])[::-1][:200].tolist()
    print(f"Table 1: {args.model}, {args.sequences} random token sequences per row, vocab {config.vocab_size}")
    print_table([dict(seed=r["seed"], seq_len=r["seq_len"], top1_id=r["top1_id"], freq=f"{100 * r['top1_freq']:.2f}%",
                      x_top_uniform=f"{r['ratio_to_top_uniform']:.1f}", x_expected=f"{r['ratio_to_uniform']:.1f}",
                      log10_p=f"{r['log10_p']:.1f}") for r in rows])
    plot_preference(os.path.join(args.out, "fig1_token_preference.png"), hist,
                    f"{args.model} at init: argmax next token, {args.sequences} random sequences",
                    baseline=uniform_baseline(args.sequences, config.vocab_size))
    return dict(rows=rows, hist=hist)


def exp_contraction(args, config, given=None):
    r = run_probe(args, _model(args, config, args.seeds[0], given))
    print(f"Fig 2: inter-sequence cosine of last-token states, {_which(args, args.seeds[0])}, "
          f"{args.sequences} random token sequences of {args.seq_len[0]}")
    print_table(layer_rows({"full": r["cosine"]}))
    plot_layers(os.path.join(args.out, "fig2_inter_sequence.png"), {"full model": r["cosine"]},
                "Fig 2: inter-sequence contraction")
    return dict(cosine=r["cosine"])


def exp_dims(args, config, given=None):
    r = run_probe(args, _model(args, config, args.seeds[0], given))
    dims, counts = r["dim_counts"], r["counts"]
    top = np.argsort(dims)[::-1][:5]
    print(f"Fig 10: argmax dimension of final-norm last-token states, {_which(args, args.seeds[0])}, "
          f"{args.sequences} sequences")
    print("  top dimensions: " + ", ".join(f"{int(d)} ({100 * dims[d] / args.sequences:.1f}%)" for d in top) +
          f"; uniform would give {100 / config.n_embd:.2f}% each; {int((dims > 0).sum())} of {config.n_embd} ever win")
    plt, fig, (a1, a2) = figure(2, 1, figsize=(7, 5))
    a1.bar(np.arange(len(counts)), counts, width=1.0)
    a1.set(ylabel="argmax token count", title="Fig 10: token and hidden-dimension preference")
    a2.bar(np.arange(len(dims)), dims, width=1.0, color="C1")
    a2.set(ylabel="argmax dimension count", xlabel="token id (top) / hidden dimension (bottom)")
    save_figure(fig, os.path.join(args.out, "fig10_dimension_preference.png"))
    return dict(dim_counts=dims.tolist(), top_dims=top.tolist(), tokens=token_preference(counts))


# ----------------------------------------------------------------------------- the script

EXPERIMENTS = {"table1": exp_table1, "contraction": exp_contraction, "dims": exp_dims}


def main(argv=None):
    parser = ArgumentParser(prog="probe.py", description="What a transformer is born with: token preference and "
                            "contraction on random inputs (paper Sections 3-4), on fresh inits or a given model.")
    add_config_flags(parser, or_model=True)
    parser.add_argument("--exp", nargs="+", default=["table1"], choices=tuple(EXPERIMENTS) + ("all",),
                        help="which tables / figures to make (default table1); the studies make the rest "
                        "(python -m studies.contraction_origin, attention_averaging, seed_preference)")
    seeded = parser.add_argument_group("fresh inits (a preset only: a model given by path brings its weights)")
    seeded.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=None,
                        help=f"block init seeds (default {' '.join(map(str, SEEDS))}); contraction and dims take "
                        "the first")
    seeded.add_argument("--embed_seed", type=seed_int, default=None,
                        help=f"shared embedding / LM head seed (default {EMBED_SEED})")
    add_probe_flags(parser, "out/probe", lengths=True)
    args = parser.parse_args(argv)
    stored = hf.read(args.model) if given_model(args) else None     # its config: read once, no weight read yet
    config = architecture(args, stored)                    # a bad preset, knob or model is one line, before any work
    check_lengths(args, config)
    if torchrun_rank()[1] > 1:
        raise ValueError("probe.py runs one process; the sweep over many seeds that torchrun splits over its ranks is "
                         "python -m studies.seed_preference --exp direction")
    if given_model(args):               # one model, no seed: results.json records no seed it did not use
        refuse_unused(args, ("seeds", "embed_seed"),
                      f"--model {args.model} brings its own weights: {{flags}} (fresh inits' seeds) would do nothing")
        args.seeds = [None]
    else:
        args.seeds = SEEDS if args.seeds is None else args.seeds
        args.embed_seed = EMBED_SEED if args.embed_seed is None else args.embed_seed
    prepare_device(args)
    given = hf.load(stored, args.device, getattr(torch, args.dtype)).eval() if stored else None    # one pass
    with results_of(args, dict(config=dataclasses.asdict(config))) as results:
        for name in EXPERIMENTS if "all" in args.exp else args.exp:
            results[name] = EXPERIMENTS[name](args, config, given)
        if "table1" in results:
            results["token_preference"] = results["table1"]["rows"]     # per seed and length: top1_id, log10_p, ...


if __name__ == "__main__":
    run_script(main, "probe.py")
