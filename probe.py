"""
probe.py: what a transformer is born with -- its token preference on random inputs, and the
contraction behind it (paper Sections 3, 4 and 5).

Feed a freshly initialized transformer N sequences of uniformly random token ids (or Gaussian vectors
with the embedding's mean and std, Section 4.1) and look at the last position:
- token preference (Sec 3, Table 1, Fig 1): the argmax next token piles onto a few seed-dependent
  tokens, above the top count of as many uniform draws (the paper's baseline, Fig 1's red line) and orders of
  magnitude above one token's expected count. The top-1 count's significance is the binomial upper
  tail under the uniform null, Bonferroni-corrected over the vocabulary (Appendix B.2), in log space.
- inter-sequence contraction (Fig 2, 4, 7, Table 2): the last-token states of *different* sequences
  share a direction; their mean pairwise cosine rises with depth.
- the contraction direction (Finding 2.2): the mean of the normalized final states, read through the
  LM head, names the most-predicted token.
- where it comes from: the sublayer ablation (Fig 3), MLP0 stacks with ReLU vs tanh (Fig 5), LayerNorm
  engaging GELU's asymmetry (Fig 6), Table 3 on model blocks, intra-sequence contraction by attention
  (Fig 8), positional variance (Fig 9), hidden-dimension preference (Fig 10).
All of it comes from one pass per model, accumulated batch by batch in memory independent of N.

    python probe.py                      # Table 1 protocol, gpt2-nano, seeds 42 43, ~80 s on 2 CPU cores
    python probe.py --exp all            # every table and figure (minutes on a CPU)
    python probe.py --sequences 10000 --seq_len 64 256 1024 --batch_size 250 --device cuda   # the paper's size
    torchrun --nproc_per_node 8 probe.py --exp direction --models 100 --sequences 2000 --seq_len 1024

Imports model.py, init.py (fresh inits), data.py (the random inputs), theory.py (the closed forms beside each
probe), hf.py (a model given by path) and common.py.
"""
import contextlib
import dataclasses
import math
import os
import time
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Distinct, Progress, add_device_flags, check_dtype_runs,
                    check_output, figure, flag_type, join_process_group, leave_process_group, lock_dir, parse_bool,
                    peak_flops, print_table, rank_device, refuse_unused, resolve_device, run_script, save_figure,
                    seed_int, seed_range, torchrun_rank, update_results)
from model import GPT, PRESETS, GPTConfig, forward_flops
import numpy as np
import torch
import torch.distributed as dist
from scipy.special import logsumexp
from scipy.stats import binom

import hf
import theory
from data import random_batches, random_inputs
from init import add_config_flags, build, config_from_flags, config_overrides


# ----------------------------------------------------------------------------- one pass over a model

TIMED_PASS = "probe.timed_pass"     # the timed loop's name in a torch.profiler trace (studies.gpu_check's profile)


@torch.no_grad()
def probe(model: GPT, kind: str = "tokens", sequences: int = 512, seq_len: int = 64, batch_size: int = 32,
          data_seed: int = 1234, log: bool = False, compile: bool = False) -> dict:
    """One pass of random sequences through `model`, returning from that pass alone:
      counts         argmax next-token counts (vocab,)
      cosine         per residual-stream state (input, each block, final norm): mean / std / log10 p of
                     the pairwise cosine of last-token states across sequences
      direction_top1 the token with the largest logit along the contraction direction
      dim_counts     how often each final-norm dimension is the largest (Fig 10)
    and the throughput. bf16 autocast on CUDA; the LM head runs on the last position only. compile: the pass
    through torch.compile (fused kernels), compiled on each batch shape before the clock starts."""
    device, cfg = next(model.parameters()).device, model.config
    counts = torch.zeros(cfg.vocab_size, dtype=torch.int64, device=device)
    dim_counts = torch.zeros(cfg.n_embd, dtype=torch.int64, device=device)
    stats = [PairwiseCosine() for _ in range(cfg.n_layer + 2)]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    trace = model.trace
    if compile:
        # Compile time is not throughput: a batch of each shape the pass will see (full batches and the
        # smaller last one) runs once before the clock, discarded. Static shapes, and a fresh compile cache
        # per call, so no shape is compiled in the timed loop and dynamo's recompile limit is never reached
        # (past it, it would fall back to eager without a word).
        torch._dynamo.reset()
        trace = torch.compile(model.trace, dynamic=False)
        for n in {min(batch_size, sequences), sequences % batch_size} - {0}:
            with autocast:
                trace(**next(random_inputs(model, kind, n, seq_len, batch_size, data_seed)), hidden="last",
                      logits=True)
    sync()
    t0 = time.time()
    # named for a profiler, which can then read this loop apart from the compiling before it (negligible without one)
    with torch.profiler.record_function(TIMED_PASS):
        for inputs in random_inputs(model, kind, sequences, seq_len, batch_size, data_seed):
            with autocast:
                out = trace(**inputs, hidden="last", logits=True)
            # counted with index_add_, not bincount: on CUDA bincount reads the largest id back to size its output,
            # a host sync per batch that stalls the queue of kernels
            top = out["logits"].float().argmax(dim=-1)
            counts.index_add_(0, top, torch.ones_like(top))
            for acc, h in zip(stats, out["hidden"]):
                acc.update(h.float())
            top = out["hidden"][-1].float().argmax(dim=-1)
            dim_counts.index_add_(0, top, torch.ones_like(top))
        sync()
    seconds = time.time() - t0
    with autocast:
        direction_top1 = int(model.unembed(stats[-1].direction().to(model.transformer.wte.weight.dtype)[None]).argmax())
    flops = forward_flops(model, seq_len) * sequences
    peak = peak_flops(device)
    result = dict(counts=counts.cpu().numpy(), cosine=[s.result() for s in stats], direction_top1=direction_top1,
                  dim_counts=dim_counts.cpu().numpy(), seconds=seconds, tokens_per_s=sequences * seq_len / seconds,
                  tflops=flops / seconds / 1e12, mfu=(flops / seconds / peak) if peak else None)
    if log:
        mfu = f", {100 * result['mfu']:.1f}% of bf16 peak" if result["mfu"] else ""
        print(f"  [{sequences} x {seq_len} {kind}: {seconds:.1f} s, {result['tokens_per_s']:,.0f} tok/s, "
              f"{result['tflops']:.2f} TFLOP/s{mfu}]")
    return result


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
    sum_{i != j} (u_i.u_j)^2 = |U^T U|_F^2 - N a d x d matrix, never the N x N Gram: memory O(d^2)."""

    def __init__(self):
        self.n, self.sum, self.gram = 0, None, None

    def update(self, x: torch.Tensor):
        u = unit(x)
        self.sum = u.sum(0) if self.sum is None else self.sum + u.sum(0)
        self.gram = u.T @ u if self.gram is None else self.gram + u.T @ u
        self.n += len(u)

    def result(self) -> dict:
        n = self.n
        pairs = n * (n - 1)
        mean = float(theory.mean_pairwise_cosine(self.sum, n))
        mean_sq = (float((self.gram ** 2).sum()) - n) / pairs
        # against 0: if the vectors are independent with E[u] = 0, the terms u_i.u_j (i != j) are
        # uncorrelated with variance E[(u_i.u_j)^2] <= 1, so the mean over the N(N-1) ordered pairs (each
        # unordered pair twice) has variance v <= 2 / (N(N-1)). Cantelli's inequality bounds the chance of
        # a mean this large by v / (v + mean^2) with no normal approximation (z far out means nothing).
        v = 2 / pairs
        p_bound = v / (v + mean ** 2) if mean > 0 else 1.0
        z = mean / math.sqrt(2 * max(mean_sq, 1e-300) / pairs)
        return dict(mean=mean, std=math.sqrt(max(mean_sq - mean ** 2, 0.0)), z=z, p_bound=p_bound, n=n)

    def direction(self) -> torch.Tensor:
        """The contraction direction: the mean of the normalized vectors."""
        return self.sum / self.n


@torch.no_grad()
def position_variance(model: GPT, inputs: torch.Tensor, batch_size: int = 32) -> np.ndarray:
    """Variance of each head's aggregated output (what W_O sees, after calibration and head_norm), per
    layer and 1-indexed position: (L, T), pooled over heads and head dimensions around the
    per-(position, head, dim) mean across sequences (unbiased). inputs: token ids (N, T) or input
    embeddings (N, T, n_embd)."""
    if model.config.sublayers == "mlp":
        raise ValueError("the model has no attention layers (sublayers=mlp): no aggregated attention output")
    if len(inputs) < 2:
        raise ValueError(f"position_variance needs two or more sequences (a variance across them), got {len(inputs)}")
    s1 = s2 = None
    n = 0
    device = next(model.parameters()).device
    key = "embeds" if inputs.is_floating_point() else "idx"
    for i in range(0, len(inputs), batch_size):
        h = torch.stack(model.trace(**{key: inputs[i:i + batch_size].to(device)},
                                    head_out=True)["head_out"], 1).double()
        s1 = h.sum(0) if s1 is None else s1 + h.sum(0)
        s2 = (h ** 2).sum(0) if s2 is None else s2 + (h ** 2).sum(0)
        n += h.shape[0]
    var = (s2 - s1 ** 2 / n) / (n - 1)                                # (L, H, T, hd)
    return var.mean(dim=(1, 3)).cpu().numpy()


# ----------------------------------------------------------------------------- experiments
# Each takes the parsed arguments and the base config, prints its table, draws its figure and returns
# what goes into results.json. Sizes come from --sequences, --seq_len, --seeds, --models.

# The architectures each experiment derives from the base config (knobs it overrides), declared once here so
# that check_args can refuse a combination that cannot be built before any experiment runs.
MLP0 = dict(sublayers="mlp", residual=False, norm="none", bias=False)            # W2 act(W1 x): Definition 1
ATTN0 = dict(sublayers="attn", residual=False, norm="none", attention="uniform", bias=False, position="none")
DERIVED = {
    "ablation": {"full": dict(sublayers="both"), "self-attention-only": dict(sublayers="attn"),
                 "MLP-only": dict(sublayers="mlp")},
    "mlp0": {"relu": dict(MLP0, activation="relu"), "tanh": dict(MLP0, activation="tanh"),
             "mlp-only": dict(sublayers="mlp")},
    "layernorm": {"with norm": dict(sublayers="mlp"), "without norm": dict(sublayers="mlp", norm="none")},
    "table3": {"MLP0": dict(MLP0, activation="relu", n_layer=1),
               "MLP0 -> MLP0": dict(MLP0, activation="relu", n_layer=2), "Attn0": dict(ATTN0, n_layer=1)},
    "intra": {"softmax": dict(sublayers="attn", residual=False, attention="softmax"),
              "uniform": dict(sublayers="attn", residual=False, attention="uniform")},
    "variance": {"one block": dict(n_layer=1)},
}


# With --model DIR the probes run on the weights given; these experiments build fresh inits instead (variants of
# an architecture from one seed, or many seeds), so they need a preset.
NEEDS_SEEDS = ("direction", "ablation", "mlp0", "layernorm", "table3", "intra", "variance", "seed_dependence")


def given_model(args) -> Optional[str]:
    """The checkpoint or Hugging Face directory --model names, or None for a preset."""
    return args.model if args.model not in PRESETS and os.path.exists(args.model) else None


def _build(args, config, seed, **overrides):
    """A fresh init of `config` (with overrides) from block seed `seed`; with --model DIR, the model given."""
    if given_model(args):
        return hf.load(args.model, args.device, getattr(torch, args.dtype)).eval()
    cfg = dataclasses.replace(config, **overrides)
    return build(cfg, seed, args.embed_seed, device=args.device, dtype=getattr(torch, args.dtype)).eval()


def _which(args, seed) -> str:
    """How a row or a title names its model: a preset's seed, or the model given."""
    return args.model if given_model(args) else f"{args.model} seed {seed}"


def _probe(args, model, kind="tokens", seq_len=None, sequences=None):
    return probe(model, kind, sequences or args.sequences, seq_len or args.seq_len[0], args.batch_size,
                 args.data_seed, log=True, compile=args.compile)


def _layer_rows(curves: dict, extra: dict = None) -> list:
    """One row per residual-stream state, a column per curve: 'mean +- std' of the pairwise cosine."""
    n = len(next(iter(curves.values())))
    rows = []
    for i in range(n):
        row = dict(state="input" if i == 0 else "final norm" if i == n - 1 else f"block {i}")
        row.update({name: f"{c[i]['mean']:.4f} +- {c[i]['std']:.4f}" for name, c in curves.items()})
        row.update({name: f"{e[i]:.4f}" if i < len(e) else "" for name, e in (extra or {}).items()})
        rows.append(row)
    return rows


def exp_table1(args, config, seeds):
    rows, hist = [], {}
    for seed in seeds:
        model = _build(args, config, seed)
        for T in args.seq_len:
            r = _probe(args, model, seq_len=T)
            rows.append(dict(seed=seed, seq_len=T, **token_preference(r["counts"]), seconds=r["seconds"],
                             tokens_per_s=r["tokens_per_s"], tflops=r["tflops"], mfu=r["mfu"]))
            hist[f"{_which(args, seed)}, T={T}"] = np.sort(r["counts"])[::-1][:200].tolist()
    return dict(rows=rows, hist=hist)


def report_table1(args, config, res):
    print(f"Table 1: {args.model}, {args.sequences} random token sequences per row, vocab {config.vocab_size}")
    print_table([dict(seed=r["seed"], seq_len=r["seq_len"], top1_id=r["top1_id"], freq=f"{100 * r['top1_freq']:.2f}%",
                      x_top_uniform=f"{r['ratio_to_top_uniform']:.1f}", x_expected=f"{r['ratio_to_uniform']:.1f}",
                      log10_p=f"{r['log10_p']:.1f}") for r in res["rows"]])
    plt, fig, ax = figure(figsize=(7, 4))
    k = 50
    for label, counts in res["hist"].items():
        ax.bar(np.arange(k), np.asarray(counts)[:k], alpha=0.5, label=label)
    ax.plot(np.arange(k), uniform_baseline(args.sequences, config.vocab_size)[:k], "r--",
            label="uniform draws (baseline)")
    ax.set(yscale="log", xlabel="rank of predicted token", ylabel="count of argmax next token")
    ax.set_title(f"{args.model} at init: argmax next token, {args.sequences} random sequences", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "fig1_token_preference.png"))


def exp_contraction(args, config):
    r = _probe(args, _build(args, config, args.seeds[0]))
    print(f"Fig 2: inter-sequence cosine of last-token states, {_which(args, args.seeds[0])}, "
          f"{args.sequences} random token sequences of {args.seq_len[0]}")
    print_table(_layer_rows({"full": r["cosine"]}))
    _plot_layers(args, "fig2_inter_sequence.png", {"full model": r["cosine"]}, "Fig 2: inter-sequence contraction")
    return dict(cosine=r["cosine"])


def exp_ablation(args, config):
    res, hist = {}, {}
    for mode in DERIVED["ablation"]:
        r = _probe(args, _build(args, config, args.seeds[0], **DERIVED["ablation"][mode]), kind="gaussian")
        res[mode] = dict(cosine=r["cosine"], **token_preference(r["counts"]))
        hist[mode] = np.sort(r["counts"])[::-1][:200].tolist()
    print(f"Table 2 / Fig 7 / Fig 4: Gaussian inputs, {args.model} seed {args.seeds[0]}, {args.sequences} sequences "
          f"of {args.seq_len[0]}; cosine of final-norm last-token states")
    print_table([dict(mode=m, cosine=f"{r['cosine'][-1]['mean']:.4f}", p_bound=f"{r['cosine'][-1]['p_bound']:.1e}",
                      top1_freq=f"{100 * r['top1_freq']:.2f}%", log10_p_top1=f"{r['log10_p']:.1f}")
                 for m, r in res.items()])
    print_table(_layer_rows({m: r["cosine"] for m, r in res.items()}))
    _plot_layers(args, "fig7_ablation_layers.png", {m: r["cosine"] for m, r in res.items()},
                 "Fig 4 / Fig 7: which sublayer contracts")
    plt, fig, ax = figure(figsize=(7, 4))
    for label, counts in hist.items():
        ax.bar(np.arange(50), np.asarray(counts)[:50], alpha=0.5, label=label)
    ax.set(yscale="log", xlabel="rank of predicted token", ylabel="count of argmax next token",
           title="Fig 3: token preference by ablation")
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "fig3_ablation_preference.png"))
    return res


def exp_direction(args, config, seeds):
    rows = []
    for seed in seeds:
        r = _probe(args, _build(args, config, seed))
        pref = token_preference(r["counts"])
        rows.append(dict(seed=seed, top1_id=pref["top1_id"], top1_freq=pref["top1_freq"],
                         direction_top1=r["direction_top1"]))
    return dict(rows=rows)


def report_direction(args, config, res):
    rows = res["rows"]
    hits = sum(r["top1_id"] == r["direction_top1"] for r in rows)
    res["overlap"] = hits / len(rows)
    print(f"Finding 2.2: token along the contraction direction vs most-predicted token, {len(rows)} models "
          f"({args.model}, {args.sequences} sequences of {args.seq_len[0]} each)")
    print_table([dict(seed=r["seed"], most_predicted=r["top1_id"], freq=f"{100 * r['top1_freq']:.2f}%",
                      direction_top1=r["direction_top1"], same="=" if r["top1_id"] == r["direction_top1"] else "x")
                 for r in rows])
    print(f"overlap {hits}/{len(rows)} = {100 * res['overlap']:.0f}%")


def exp_mlp0(args, config):
    stacks = {}
    for act in ("relu", "tanh"):   # same seed: identical weights, only the nonlinearity differs
        m = _build(args, config, args.seeds[0], **DERIVED["mlp0"][act])
        stacks[f"MLP0 {act}"] = _probe(args, m, kind="gaussian")["cosine"]
    std = _build(args, config, args.seeds[0], **DERIVED["mlp0"]["mlp-only"])
    stacks[f"MLP-only ({config.activation}, {config.norm}, residual)"] = _probe(args, std, kind="gaussian")["cosine"]
    theory_curve = [theory.mlp0_cosine(layer) for layer in range(config.n_layer + 1)]
    print(f"Fig 5: inter-sequence cosine through MLP blocks, {args.model} width, Gaussian inputs")
    print_table(_layer_rows(stacks, extra={"ReLU theory": theory_curve}))
    _plot_layers(args, "fig5_mlp0.png", stacks, "Fig 5: MLP0 with ReLU vs tanh (same weights)",
                 theory_curve=theory_curve)
    return dict(stacks=stacks, theory=theory_curve)


def exp_layernorm(args, config):
    """Std of the MLP pre-activation (the c_fc output, what GELU sees) per layer, with the norm and
    without it: LayerNorm decides how much of GELU's asymmetry is engaged."""
    res = {}
    for label, norm_kind in ((f"with {config.norm}", config.norm), ("without norm", "none")):
        model = _build(args, config, args.seeds[0], **DERIVED["layernorm"]["with norm" if norm_kind == config.norm
                                                                           else "without norm"])
        moments = [torch.zeros(3, dtype=torch.float64) for _ in model.transformer.h]

        def record(acc):
            def hook(module, inputs, out):
                o = out.double()
                acc.add_(torch.stack([o.sum(), (o * o).sum(), torch.tensor(float(o.numel()), dtype=torch.float64,
                                                                              device=o.device)]).cpu())
            return hook

        hooks = [b.mlp.c_fc.register_forward_hook(record(m)) for b, m in zip(model.transformer.h, moments)]
        r = _probe(args, model, kind="gaussian")
        for h in hooks:
            h.remove()
        stds = [math.sqrt(float(m[1] / m[2] - (m[0] / m[2]) ** 2)) for m in moments]
        res[label] = dict(preact_std=stds, cosine=r["cosine"])
        if config.activation in ("gelu", "gelu_tanh"):
            m, m2 = theory.gelu_moments(stds[0])
            res[label]["gelu_layer1"] = dict(std=stds[0], mean_over_sd=m / math.sqrt(m2 - m * m),
                                             mlp0_cosine=theory.gelu_mlp0_cosine(stds[0]))
    print(f"Fig 6: MLP pre-activation std per layer, MLP-only {args.model}, Gaussian inputs (embedding scale)")
    print_table([dict(norm=label, **{f"L{i + 1}": f"{s:.3f}" for i, s in enumerate(r["preact_std"])})
                 for label, r in res.items()])
    if config.activation in ("gelu", "gelu_tanh"):
        print_table([dict(norm=label, gelu_input_std=f"{r['gelu_layer1']['std']:.3f}",
                          gelu_output_mean_over_sd=f"{r['gelu_layer1']['mean_over_sd']:.4f}",
                          one_layer_mlp0_cosine=f"{r['gelu_layer1']['mlp0_cosine']:.5f}",
                          final_cosine=f"{r['cosine'][-1]['mean']:.4f}") for label, r in res.items()])
    return res


@torch.no_grad()
def exp_table3(args, config):
    """Table 3 on model blocks: ReLU MLP blocks without norm, residual or bias (MLP0: W2 relu(W1 x),
    the extra linear W2 preserves cosines at large width) and uniform-attention blocks (Attn0 through
    W_V, W_O), chained through `embeds`. Last position of two different sequences."""
    seed, T = args.seeds[0], args.seq_len[0]
    m1 = _build(args, config, seed, **DERIVED["table3"]["MLP0"])
    m2 = _build(args, config, seed, **DERIVED["table3"]["MLP0 -> MLP0"])   # its first block is m1's block
    a1 = _build(args, config, seed + 1, **DERIVED["table3"]["Attn0"])
    last = lambda m, x: m.trace(embeds=x, hidden="last")["hidden"][-1]
    every = lambda m, x: m.trace(embeds=x, hidden="all")["hidden"][-1]
    settings = {"MLP0": lambda x: last(m1, x), "MLP0 -> MLP0": lambda x: last(m2, x),
                "MLP0 -> Attn0": lambda x: last(a1, every(m1, x)), "Attn0 -> MLP0": lambda x: last(m1, every(a1, x))}
    acc = {k: PairwiseCosine() for k in settings}
    w = m1.transformer.wte.weight
    # iid N(0, I) tokens, as in the theory: data.py's draws, the same on every device
    for x in random_batches("gaussian", args.sequences, T, args.batch_size, args.data_seed, width=config.n_embd):
        for k, f in settings.items():
            acc[k].update(f(x.to(w.device, w.dtype)).float())
    expected = {"MLP0": 1 / math.pi, "MLP0 -> MLP0": theory.mlp0_cosine(2),
                "MLP0 -> Attn0": float(theory.attn0_last_cosine(T)), "Attn0 -> MLP0": 1 / math.pi}
    res = {k: dict(theory=expected[k], **acc[k].result()) for k in settings}
    print(f"Table 3 on model blocks: {args.model} width, n = {T} tokens, {args.sequences} Gaussian sequences")
    print_table([dict(setting=k, theory=f"{r['theory']:.4f}", measured=f"{r['mean']:.4f}", std=f"{r['std']:.4f}",
                      p_bound=f"{r['p_bound']:.1e}", paper=paper)
                 for (k, r), paper in zip(res.items(), ("0.31", "0.49", "0.98", "-"))])
    return res


@torch.no_grad()
def exp_intra(args, config, lengths=(64, 1024), n_seq=16):
    """Fig 8: one sequence of isotropic Gaussian tokens through stacked self-attention blocks
    (pre-norm, no residual): mean pairwise cosine among its tokens per layer, softmax attention and
    uniform attention on the same weights, beside the exact Attn0 value."""
    res = {}
    for T in [t for t in lengths if t <= config.block_size]:
        curves = {}
        for attention in ("softmax", "uniform"):
            model = _build(args, config, args.seeds[0], **DERIVED["intra"][attention])
            per_layer = np.zeros((config.n_layer, n_seq))
            w = model.transformer.wte.weight
            for i, x in enumerate(random_batches("gaussian", n_seq, T, 1, args.data_seed, width=config.n_embd)):
                hidden = model.trace(embeds=x.to(w.device, w.dtype), hidden="all")["hidden"]
                for layer in range(config.n_layer):
                    per_layer[layer, i] = float(theory.mean_pairwise_cosine(unit(hidden[layer + 1][0]).sum(0), T))
            curves[attention] = dict(mean=per_layer.mean(1).tolist(), std=per_layer.std(1).tolist())
        curves["Attn0 theory"] = [theory.attn0_intra_cosine(T, layer) for layer in range(1, config.n_layer + 1)]
        res[T] = curves
        print(f"Fig 8: intra-sequence cosine, n = {T}, {n_seq} sequences, {args.model} attention-only, no residual")
        print_table([dict(layer=layer + 1, softmax=f"{curves['softmax']['mean'][layer]:.4f}",
                          uniform=f"{curves['uniform']['mean'][layer]:.4f}",
                          Attn0=f"{curves['Attn0 theory'][layer]:.4f}")
                     for layer in range(config.n_layer)])
    plt, fig, ax = figure(figsize=(6, 4))
    x = np.arange(1, config.n_layer + 1)
    for (T, c), color in zip(res.items(), ("C0", "C1", "C2")):
        ax.plot(x, c["softmax"]["mean"], "o-", color=color, ms=3, label=f"n={T} softmax attention")
        ax.plot(x, c["uniform"]["mean"], "s--", color=color, ms=3, label=f"n={T} uniform attention")
        ax.plot(x, c["Attn0 theory"], ":", color="k" if color == "C0" else "gray", label=f"n={T} Attn0 exact")
    ax.set(xlabel="attention layers", ylabel="intra-sequence cosine", title="Fig 8: attention contracts a sequence")
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "fig8_intra_sequence.png"))
    return res


@torch.no_grad()
def exp_variance(args, config):
    """Fig 9: per-position std of the first attention block's aggregated output (before W_O) on
    Gaussian inputs, against std(t=1) / sqrt(t) (Eq. 2)."""
    T = max(args.seq_len)
    model = _build(args, config, args.seeds[0], **DERIVED["variance"]["one block"])
    inputs = torch.cat([b["embeds"] for b in random_inputs(model, "gaussian", args.sequences, T, args.batch_size,
                                                           args.data_seed)])
    std = np.sqrt(position_variance(model, inputs, args.batch_size)[0])
    t = np.arange(1, T + 1)
    ratio = std * np.sqrt(t) / std[0]
    print(f"Fig 9: std of the aggregated attention output at position t, {args.model} block 1, Gaussian inputs")
    print_table([dict(t=ti, std=f"{std[ti - 1]:.3e}", std1_over_sqrt_t=f"{std[0] / math.sqrt(ti):.3e}",
                      ratio=f"{ratio[ti - 1]:.3f}") for ti in sorted({1, 2, 4, 8, 16, 64, 256, 1024, T}) if ti <= T])
    plt, fig, ax = figure(figsize=(6, 4))
    ax.loglog(t, std, "r--", label="measured std")
    ax.loglog(t, std[0] / np.sqrt(t), "b:", label="std(1) / sqrt(t) (Eq. 2)")
    ax.set(xlabel="position t", ylabel="std of aggregated attention output", title="Fig 9: positional variance decay")
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "fig9_position_variance.png"))
    return dict(std=std.tolist(), ratio_to_theory=ratio.tolist())


def exp_dims(args, config):
    r = _probe(args, _build(args, config, args.seeds[0]))
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


def exp_seed_dependence(args, config):
    rows = []
    for seed in list(args.seeds) + [args.seeds[0]]:     # the first seed twice: must repeat exactly
        counts = _probe(args, _build(args, config, seed))["counts"]
        rows.append(dict(seed=seed, counts=counts, **token_preference(counts)))
    same = bool(np.array_equal(rows[0]["counts"], rows[-1]["counts"]))
    distinct = len({r["top1_id"] for r in rows[:-1]})
    print(f"Seed dependence: {args.model}, embedding seed {args.embed_seed}, "
          f"{args.sequences} sequences of {args.seq_len[0]}")
    print_table([dict(seed=r["seed"], top1_id=r["top1_id"], freq=f"{100 * r['top1_freq']:.2f}%",
                      log10_p=f"{r['log10_p']:.1f}") for r in rows])
    print(f"  {distinct} distinct top-1 ids over {len(rows) - 1} seeds; seed {args.seeds[0]} twice gives identical "
          f"counts: {same}")
    return dict(rows=[{k: v for k, v in r.items() if k != "counts"} for r in rows], identical_repeat=same,
                distinct_top1=distinct)


def _plot_layers(args, name, curves: dict, title: str, theory_curve=None):
    plt, fig, ax = figure(figsize=(6, 4))
    for label, c in curves.items():
        x = np.arange(len(c) - 1)            # input .. last block; the final norm is left out
        m, sd = np.array([s["mean"] for s in c[:-1]]), np.array([s["std"] for s in c[:-1]])
        ax.plot(x, m, "o-", ms=3, label=label)
        ax.fill_between(x, m - sd, m + sd, alpha=0.15)
    if theory_curve is not None:
        ax.plot(np.arange(len(theory_curve)), theory_curve, "k:", label="ReLU MLP0 theory (Prop 2)")
    ax.set(xlabel="layer", ylabel="pairwise cosine of last-token states")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, name))


# ----------------------------------------------------------------------------- the script

PER_SEED = {"table1": (exp_table1, report_table1), "direction": (exp_direction, report_direction)}   # split over ranks
WHOLE = {"contraction": exp_contraction, "ablation": exp_ablation, "mlp0": exp_mlp0, "layernorm": exp_layernorm,
         "table3": exp_table3, "intra": exp_intra, "variance": exp_variance, "dims": exp_dims,
         "seed_dependence": exp_seed_dependence}                                                  # rank 0 alone
EXPERIMENTS = tuple(PER_SEED) + tuple(WHOLE)
SEEDS, MODELS, EMBED_SEED = [42, 43], 8, 0     # the fresh inits' defaults: Table 1's seeds, the shared embedding


def main(argv=None):
    parser = ArgumentParser(prog="probe.py", description="What a transformer is born with: token preference and "
                                                 "contraction on random inputs (paper Sections 3-5).")
    add_config_flags(parser, or_model=True)
    parser.add_argument("--exp", nargs="+", default=["table1"], choices=EXPERIMENTS + ("all",),
                        help="which tables / figures to make (default table1)")
    seeded = parser.add_argument_group("fresh inits (a preset only: a model given by path brings its weights)")
    seeded.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=None,
                        help=f"block init seeds (default {' '.join(map(str, SEEDS))})")
    seeded.add_argument("--models", type=flag_type("int>=1"), default=None,
                        help=f"number of seeds for --exp direction, from the first of --seeds (default {MODELS}; "
                        "paper: 100)")
    seeded.add_argument("--embed_seed", type=seed_int, default=None,
                        help=f"shared embedding / LM head seed (default {EMBED_SEED})")
    parser.add_argument("--sequences", type=flag_type("int>=2"), default=512,
                        help="random sequences per model (the cosines are between pairs of them)")
    parser.add_argument("--seq_len", type=flag_type("int>=1"), nargs="+", action=Distinct, default=[64])
    parser.add_argument("--batch_size", type=flag_type("int>=1"), default=32)
    parser.add_argument("--data_seed", type=seed_int, default=1234, help="seed of the random inputs")
    parser.add_argument("--compile", type=parse_bool, default=False, metavar="on|off",
                        help="torch.compile the probe pass (GPU throughput; compiled before the clock starts)")
    add_device_flags(parser, "dtype of the weights (bfloat16: the paper's GPU setting)", dtype_default="float32")
    parser.add_argument("--out", default="out/probe")
    args = parser.parse_args(argv)
    config = architecture(args)                            # a bad preset, knob or model is one line, before any work
    check_args(args, config)
    device = rank_device(resolve_device(args.device))      # under torchrun: this rank's GPU
    check_dtype_runs(device, DTYPES[args.dtype])
    args.device = str(device)
    rank, world, _ = torchrun_rank()
    join_process_group(device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    with lock_dir(args.out) if rank == 0 else contextlib.nullcontext():
        run_experiments(args, config, rank, world)
    leave_process_group()


def architecture(args) -> GPTConfig:
    """The config of --model: a preset with the knob flags on top, or a given model's own (no knob flags)."""
    if given_model(args):
        if config_overrides(args):
            raise ValueError(f"--model {args.model} is a model with its own config: drop the knob flags "
                             f"({', '.join('--' + k for k in config_overrides(args))})")
        return hf.read_config(args.model)
    if args.model not in PRESETS:
        raise ValueError(f"--model {args.model!r} is no preset ({', '.join(PRESETS)}) and no checkpoint or Hugging "
                         f"Face directory")
    return config_from_flags(args)


def check_args(args, config) -> None:
    """Every count and range of the command line, against the model it will run on, before any work."""
    check_output(args.out)
    exps = list(EXPERIMENTS) if "all" in args.exp else args.exp
    seeded = [name for name in exps if name in NEEDS_SEEDS]
    if given_model(args) and seeded:
        raise ValueError(f"--exp {seeded[0]} builds fresh inits from seeds (block seed against embedding seed), not "
                         f"the weights of --model {args.model}: give a preset; on a given model probe.py runs "
                         f"table1, contraction and dims")
    if given_model(args):
        refuse_unused(args, ("seeds", "models", "embed_seed"),
                      f"--model {args.model} brings its own weights: {{flags}} (fresh inits' seeds) would do nothing")
    if args.models is not None and "direction" not in exps:
        raise ValueError("--models counts the seeds of --exp direction, which is not asked for: drop --models, or "
                         "add --exp direction")
    if given_model(args):               # one model, no seed: results.json records no seed it did not use
        args.seeds = [None]
    else:
        args.seeds = SEEDS if args.seeds is None else args.seeds
        args.models = MODELS if args.models is None else args.models
        args.embed_seed = EMBED_SEED if args.embed_seed is None else args.embed_seed
        if "direction" in exps:
            seed_range(args.seeds[0], args.models, "the first of --seeds")
    bad = [T for T in args.seq_len if not 1 <= T <= config.block_size]
    if bad:
        raise ValueError(f"--seq_len {bad[0]} is outside [1, the model's block_size {config.block_size}]")
    if "table3" in exps and min(args.seq_len) < 2:
        raise ValueError("--exp table3 compares two positions: --seq_len must be at least 2")
    for name in exps:
        for label, knobs in DERIVED.get(name, {}).items():
            try:
                derived = dataclasses.replace(config, **knobs)
            except ValueError as e:
                raise ValueError(f"--exp {name} builds a model with {knobs} ({label}), which these flags make "
                                 f"impossible: {e}") from None
            if name == "variance" and derived.sublayers == "mlp":
                raise ValueError("--exp variance measures attention outputs: the model needs attention layers "
                                 "(not --sublayers mlp)")


def run_experiments(args, config, rank: int, world: int) -> None:
    exps = list(EXPERIMENTS) if "all" in args.exp else args.exp
    results = dict(config=dataclasses.asdict(config), args=vars(args))
    t0 = time.time()
    bar = Progress(len(exps), "experiments", "", every=0) if len(exps) > 1 and rank == 0 else None
    for name in exps:
        if name in PER_SEED:            # each rank takes every world-th seed; rank 0 merges and reports
            run, report = PER_SEED[name]
            # table1: --seeds ([None] for a given model: it once); direction (presets only): --models from the first
            seeds = args.seeds if name == "table1" else list(range(args.seeds[0], args.seeds[0] + args.models))
            parts = _gather(run(args, config, seeds[rank::world]), world)
            res = {key: _merge([p[key] for p in parts]) for key in parts[0]}
            res["rows"].sort(key=lambda r: (r["seed"], r.get("seq_len", 0)))
            if rank == 0:
                report(args, config, res)
        elif rank == 0:
            res = WHOLE[name](args, config)
        else:
            continue
        if name == "table1":
            results["token_preference"] = res["rows"]     # per seed and length: top1_id, top1_freq, log10_p
        results[name] = res
        if bar:
            bar.update()
    if rank == 0:
        update_results(os.path.join(args.out, "results.json"), results, args.device, args.dtype)
        print(f"figures in {args.out}/ ({time.time() - t0:.0f} s)")


def _gather(obj, world):
    if world == 1:
        return [obj]
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _merge(parts):
    """Join the ranks' pieces of one result: lists are concatenated, dicts updated."""
    if isinstance(parts[0], list):
        return [x for p in parts for x in p]
    return {k: v for p in parts for k, v in p.items()}


if __name__ == "__main__":
    run_script(main, "probe.py")
