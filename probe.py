"""
Probe a model at birth with random inputs: its token preference and the contraction behind it
(paper Sections 3, 4 and 5).

Feed a freshly initialized transformer N sequences of uniformly random token ids (or Gaussian
vectors with the embedding's mean and std, Section 4.1) and look at the last position:
- token preference (Sec 3, Table 1, Fig 1): the argmax next token piles onto a few
  seed-dependent tokens, orders of magnitude above uniform. The significance of the top-1 count
  is the binomial upper tail under the uniform null, Bonferroni-corrected over the vocabulary
  (Appendix B.2), computed in log space so it never underflows.
- inter-sequence contraction (Fig 2, 4, 7, Table 2): the last-token states of *different*
  sequences share a direction; their mean pairwise cosine rises with depth.
- the contraction direction (Finding 2.2): the mean of the normalized final states, read
  through the LM head, names the most-predicted token.
- where it comes from: the architecture ablation (Fig 3), MLP0 stacks with ReLU vs tanh (Fig 5),
  LayerNorm engaging GELU's asymmetry (Fig 6), Table 3 on model blocks, intra-sequence
  contraction by attention (Fig 8), the positional variance of attention (Fig 9), and the
  hidden-dimension preference (Fig 10).
One pass per model: everything is accumulated batch by batch in memory independent of N.

    python probe.py                      # Table 1 protocol, gpt2-nano, seeds 42 43, ~1 min on 2 CPU cores
    python probe.py --exp all            # every table and figure (several minutes on CPU)
    python probe.py --n 10000 --seq_len 64 256 1024 --device cuda                 # the paper's size
    torchrun --nproc_per_node 8 probe.py --exp direction --models 100 --sequences 2000 --seq_len 1024
"""
import argparse
import dataclasses
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from scipy.special import logsumexp
from scipy.stats import binom, norm

import theory
from init import build
from model import GPT, add_config_flags, config_from_flags, peak_flops, write_json

EXPERIMENTS = ("table1", "contraction", "ablation", "direction", "mlp0", "layernorm", "table3",
               "intra", "variance", "dims", "seeds", "bench")


# ----------------------------------------------------------------------------- statistics

def log10_binom_tail(k: int, n: int, p: float) -> float:
    """log10 P(X >= k), X ~ Binomial(n, p), summed in log space: never underflows to -inf."""
    if k <= 0:
        return 0.0
    if k > n:
        return -math.inf
    j = np.arange(k, n + 1)
    return float(logsumexp(binom.logpmf(j, n, p)) / math.log(10))


def log10_bonferroni_p(top1_count: int, n: int, vocab_size: int) -> float:
    """Appendix B.2: p = min(1, V * P(X >= c_top1)) under the uniform null p = 1/V, as log10."""
    return min(0.0, math.log10(vocab_size) + log10_binom_tail(top1_count, n, 1.0 / vocab_size))


def uniform_baseline(n: int, vocab_size: int, seed: int = 0) -> np.ndarray:
    """Sorted counts (descending) of n uniform draws from the vocabulary: the red dashed line of Fig 1."""
    rng = np.random.default_rng(seed)
    return np.sort(np.bincount(rng.integers(0, vocab_size, n), minlength=vocab_size))[::-1]


def token_preference(counts: np.ndarray) -> dict:
    """Table 1's row from argmax counts: top-1 id, its frequency, ratio to uniform, log10 p."""
    n, vocab = int(counts.sum()), len(counts)
    top1 = int(counts.argmax())
    c = int(counts[top1])
    return dict(top1_id=top1, top1_count=c, top1_freq=c / n, ratio_to_uniform=c / (n / vocab),
                log10_p=log10_bonferroni_p(c, n, vocab), n=n, distinct_predicted=int((counts > 0).sum()))


def unit(x: torch.Tensor) -> torch.Tensor:
    """x / |x| in float64 along the last dim. Not F.normalize: its eps of 1e-12 leaves tiny vectors
    un-normalized, and residual-free MLP0 stacks do shrink activations below 1e-12 by layer 12."""
    x = x.double()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)


class PairwiseCosine:
    """Mean and std of the cosine over all pairs i < j of N vectors, streamed in batches.
    With u_i the unit vectors: sum_{i != j} u_i.u_j = |sum u|^2 - N, and
    sum_{i != j} (u_i.u_j)^2 = |U^T U|_F^2 - N (a d x d matrix, never the N x N Gram).
    Memory O(d^2), whatever N."""

    def __init__(self):
        self.n, self.sum, self.gram = 0, None, None

    def update(self, x: torch.Tensor):
        u = unit(x)
        if self.sum is None:
            self.sum, self.gram = u.sum(0), u.T @ u
        else:
            self.sum += u.sum(0)
            self.gram += u.T @ u
        self.n += len(u)

    def result(self) -> dict:
        n = self.n
        pairs = n * (n - 1)
        mean = (float(self.sum @ self.sum) - n) / pairs
        mean_sq = (float((self.gram ** 2).sum()) - n) / pairs
        std = math.sqrt(max(mean_sq - mean ** 2, 0.0))
        # against 0: if the vectors are independent with E[u] = 0, the terms u_i.u_j (i != j) are
        # uncorrelated with variance E[(u_i.u_j)^2], so the mean over the N(N-1) ordered pairs (each
        # unordered pair twice) has variance 2 E[(u_i.u_j)^2] / (N(N-1)). E[(u_i.u_j)^2] is estimated
        # from the same Gram (it is 1/d for isotropic vectors). One-sided: contraction means > 0.
        z = mean / math.sqrt(2 * max(mean_sq, 1e-300) / pairs)
        return dict(mean=mean, std=std, z=z, log10_p=float(norm.logsf(z) / math.log(10)), n=n)

    def direction(self) -> torch.Tensor:
        """The contraction direction: the mean of the normalized vectors."""
        return self.sum / self.n


# ----------------------------------------------------------------------------- inputs

def random_token_batches(n: int, seq_len: int, vocab_size: int, batch_size: int, seed: int, device):
    """Yield n uniform random token sequences in batches, generated on the device from one seeded
    generator -- never all held in memory. The same (n, seq_len, batch_size, seed) gives the
    same tokens, so two models can be fed identical inputs."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        yield torch.randint(0, vocab_size, (b, seq_len), generator=g, device=device)


def gaussian_batches(n: int, seq_len: int, width: int, mean: float, std: float, batch_size: int, seed: int, device):
    """Yield n sequences of iid N(mean, std^2) vectors (B, seq_len, width): Section 4.1's stand-in
    for embeddings of random tokens, without the accidental repeats of sampled tokens."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        yield mean + std * torch.randn(b, seq_len, width, generator=g, device=device)


def model_inputs(model: GPT, kind: str, n: int, seq_len: int, batch_size: int, seed: int):
    """Keyword arguments for model(...), batch by batch: {"idx": ...} or {"embeds": ...}. Gaussian
    inputs take the scalar mean and std of the model's own token embedding table."""
    device = next(model.parameters()).device
    if kind == "tokens":
        for idx in random_token_batches(n, seq_len, model.config.vocab_size, batch_size, seed, device):
            yield {"idx": idx}
    elif kind == "gaussian":
        w = model.transformer.wte.weight
        mean, std = w.float().mean().item(), w.float().std().item()
        for x in gaussian_batches(n, seq_len, model.config.n_embd, mean, std, batch_size, seed, device):
            yield {"embeds": x.to(w.dtype)}
    else:
        raise ValueError(f"unknown input kind {kind!r}: choose 'tokens' or 'gaussian'")


# ----------------------------------------------------------------------------- one pass over a model

def forward_flops_per_sequence(model: GPT, seq_len: int) -> float:
    """2 flops per multiply-add: 2 N_non-embedding per token, causal attention ~2 T d per token
    per layer (half of QK^T and PV), and the LM head on the last position only."""
    cfg = model.config
    per_token = 2 * model.num_params(include_embeddings=False) + 2 * cfg.n_layer * seq_len * cfg.n_embd
    return per_token * seq_len + 2 * cfg.n_embd * cfg.vocab_size


@torch.no_grad()
def probe(model: GPT, kind: str = "tokens", n: int = 512, seq_len: int = 64, batch_size: int = 32,
          data_seed: int = 1234, log: bool = False) -> dict:
    """One pass of n random sequences through `model`, returning from that pass alone:
      counts       argmax next-token counts (vocab,)
      cosine       per residual-stream state (input, each block, final norm): mean / std / log10 p of
                   the pairwise cosine of last-token states across sequences
      direction_top1  the token with the largest logit along the contraction direction
      dim_counts   how often each final-norm dimension is the largest (Fig 10)
    and the throughput. bf16 autocast on CUDA; the LM head runs on the last position only."""
    device = next(model.parameters()).device
    cfg = model.config
    counts = torch.zeros(cfg.vocab_size, dtype=torch.int64, device=device)
    dim_counts = torch.zeros(cfg.n_embd, dtype=torch.int64, device=device)
    stats = [PairwiseCosine() for _ in range(cfg.n_layer + 2)]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.time()
    for inputs in model_inputs(model, kind, n, seq_len, batch_size, data_seed):
        with autocast:
            out = model.trace(**inputs, hidden="last", logits=True)
        counts += torch.bincount(out["logits"].float().argmax(dim=-1), minlength=cfg.vocab_size)
        for acc, h in zip(stats, out["hidden"]):
            acc.update(h.float())
        dim_counts += torch.bincount(out["hidden"][-1].float().argmax(dim=-1), minlength=cfg.n_embd)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - t0
    direction = stats[-1].direction().to(model.transformer.wte.weight.dtype)
    with autocast:
        direction_top1 = int(model.unembed(direction[None]).argmax())
    flops = forward_flops_per_sequence(model, seq_len) * n
    peak = peak_flops(device)
    result = dict(counts=counts.cpu().numpy(), cosine=[s.result() for s in stats],
                  direction_top1=direction_top1,
                  dim_counts=dim_counts.cpu().numpy(), seconds=seconds, tokens_per_s=n * seq_len / seconds,
                  tflops=flops / seconds / 1e12, mfu=(flops / seconds / peak) if peak else None)
    if log:
        mfu = f", {100 * result['mfu']:.1f}% of bf16 peak" if result["mfu"] else ""
        print(f"  [{n} x {seq_len} {kind}: {seconds:.1f} s, {result['tokens_per_s']:,.0f} tok/s, "
              f"{result['tflops']:.2f} TFLOP/s{mfu}]")
    return result


@torch.no_grad()
def next_token_counts(model, n: int, seq_len: int, batch_size: int = 32, data_seed: int = 1234) -> np.ndarray:
    """How often each token is the argmax next token over n random token sequences."""
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    counts = torch.zeros(vocab, dtype=torch.int64, device=device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    for idx in random_token_batches(n, seq_len, vocab, batch_size, data_seed, device):
        with autocast:
            counts += torch.bincount(model(idx)[0].float().argmax(dim=-1), minlength=vocab)
    return counts.cpu().numpy()


# ----------------------------------------------------------------------------- experiments
# Each takes the parsed arguments and the base config, prints its table, draws its figure and
# returns what goes into results.json. Sizes come from --n, --seq_len, --seeds, --models.

def _build(args, config, seed, **overrides):
    cfg = dataclasses.replace(config, **overrides)
    return build(cfg, seed, args.embed_seed, device=args.device, dtype=getattr(torch, args.dtype)).eval()


def _probe(args, model, kind="tokens", seq_len=None, n=None):
    return probe(model, kind, n or args.n, seq_len or args.seq_len[0], args.batch_size, args.data_seed, log=True)


def _row(seed, T, r):
    return dict(seed=seed, seq_len=T, **token_preference(r["counts"]), seconds=r["seconds"],
                tokens_per_s=r["tokens_per_s"], tflops=r["tflops"], mfu=r["mfu"])


def exp_table1(args, config, seeds):
    rows, hist = [], {}
    for seed in seeds:
        model = _build(args, config, seed)
        for T in args.seq_len:
            r = _probe(args, model, seq_len=T)
            rows.append(_row(seed, T, r))
            hist[f"seed {seed}, T={T}"] = r["counts"]
    return dict(rows=rows, hist={k: np.sort(v)[::-1][:200].tolist() for k, v in hist.items()})


def report_table1(args, config, res):
    print(f"Table 1: {args.model}, {args.n} random token sequences per row, vocab {config.vocab_size}")
    print(f"{'seed':>5} {'seq_len':>7} {'top1_id':>8} {'freq':>8} {'x uniform':>10} {'log10 p':>9}")
    for r in res["rows"]:
        print(f"{r['seed']:>5} {r['seq_len']:>7} {r['top1_id']:>8} {100 * r['top1_freq']:>7.2f}% "
              f"{r['ratio_to_uniform']:>10.1f} {r['log10_p']:>9.1f}")
    _plot_hist(args, "fig1_token_preference.png", res["hist"], config.vocab_size,
               f"{args.model} at init: argmax next token, {args.n} random sequences")


def exp_contraction(args, config):
    r = _probe(args, _build(args, config, args.seeds[0]))
    print(f"Fig 2: inter-sequence cosine of last-token states, {args.model} seed {args.seeds[0]}, "
          f"{args.n} random token sequences of {args.seq_len[0]}")
    _print_layers({"full": r["cosine"]})
    _plot_layers(args, "fig2_inter_sequence.png", {"full model": r["cosine"]}, "Fig 2: inter-sequence contraction")
    return dict(cosine=r["cosine"])


def exp_ablation(args, config):
    res, hist = {}, {}
    for mode, sub in (("full", "both"), ("self-attention-only", "attn"), ("MLP-only", "mlp")):
        r = _probe(args, _build(args, config, args.seeds[0], sublayers=sub), kind="gaussian")
        res[mode] = dict(cosine=r["cosine"], **token_preference(r["counts"]))
        hist[mode] = np.sort(r["counts"])[::-1][:200].tolist()
    print(f"Table 2 / Fig 7 / Fig 4: Gaussian inputs, {args.model} seed {args.seeds[0]}, "
          f"{args.n} sequences of {args.seq_len[0]}; cosine of final-norm last-token states")
    print(f"{'mode':<20} {'avg cos':>8} {'log10 p':>9} {'top1 freq':>9} {'log10 p(top1)':>13}")
    for mode, r in res.items():
        c = r["cosine"][-1]
        print(f"{mode:<20} {c['mean']:>8.4f} {c['log10_p']:>9.1f} {100 * r['top1_freq']:>8.2f}% {r['log10_p']:>13.1f}")
    _print_layers({m: r["cosine"] for m, r in res.items()})
    _plot_layers(args, "fig7_ablation_layers.png", {m: r["cosine"] for m, r in res.items()},
                 "Fig 4 / Fig 7: which sublayer contracts")
    _plot_hist(args, "fig3_ablation_preference.png", hist, config.vocab_size, "Fig 3: token preference by ablation")
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
          f"({args.model}, {args.n} sequences of {args.seq_len[0]} each)")
    for r in rows:
        print(f"  seed {r['seed']:>5}: most predicted {r['top1_id']:>6} ({100 * r['top1_freq']:.2f}%), "
              f"direction's top logit {r['direction_top1']:>6} {'=' if r['top1_id'] == r['direction_top1'] else 'x'}")
    print(f"overlap {hits}/{len(rows)} = {100 * res['overlap']:.0f}%")


def exp_mlp0(args, config):
    L = config.n_layer
    stacks = {}
    for act in ("relu", "tanh"):   # same seed: identical weights, only the nonlinearity differs
        m = _build(args, config, args.seeds[0], sublayers="mlp", residual=False, norm="none", activation=act, bias=False)
        stacks[f"MLP0 {act}"] = _probe(args, m, kind="gaussian")["cosine"]
    std = _build(args, config, args.seeds[0], sublayers="mlp")
    stacks[f"MLP-only ({config.activation}, {config.norm}, residual)"] = _probe(args, std, kind="gaussian")["cosine"]
    theory_curve = [theory.mlp0_cosine(l) for l in range(L + 1)]
    print(f"Fig 5: inter-sequence cosine through MLP blocks, {args.model} width, Gaussian inputs")
    _print_layers(stacks, extra={"ReLU theory": theory_curve})
    _plot_layers(args, "fig5_mlp0.png", stacks, "Fig 5: MLP0 with ReLU vs tanh (same weights)", theory_curve=theory_curve)
    return dict(stacks=stacks, theory=theory_curve)


def exp_layernorm(args, config):
    """Std of the MLP pre-activation (the c_fc output, what GELU sees) per layer, with the norm and
    without it: LayerNorm decides how much of GELU's asymmetry is engaged."""
    res = {}
    for label, norm_kind in ((f"with {config.norm}", config.norm), ("without norm", "none")):
        model = _build(args, config, args.seeds[0], sublayers="mlp", norm=norm_kind)
        moments = [torch.zeros(3, dtype=torch.float64) for _ in model.transformer.h]

        def record(acc):
            def hook(module, inputs, out):
                o = out.double()
                acc.add_(torch.stack([o.sum(), (o * o).sum(), torch.tensor(o.numel(), dtype=torch.float64, device=o.device)]).cpu())
            return hook

        hooks = [b.mlp.c_fc.register_forward_hook(record(m)) for b, m in zip(model.transformer.h, moments)]
        r = _probe(args, model, kind="gaussian")
        for h in hooks:
            h.remove()
        stds = [math.sqrt(float(m[1] / m[2] - (m[0] / m[2]) ** 2)) for m in moments]
        res[label] = dict(preact_std=stds, cosine=r["cosine"])
    print(f"Fig 6: MLP pre-activation std per layer, MLP-only {args.model}, Gaussian inputs (embedding scale)")
    print(f"{'':<18}" + " ".join(f"{'L' + str(l + 1):>7}" for l in range(config.n_layer)))
    for label, r in res.items():
        print(f"{label:<18}" + " ".join(f"{s:>7.3f}" for s in r["preact_std"]))
    if config.activation in ("gelu", "gelu_tanh"):
        for label, r in res.items():
            s = r["preact_std"][0]
            m, m2 = theory.gelu_moments(s)
            r["gelu_layer1"] = dict(std=s, mean_over_sd=m / math.sqrt(m2 - m * m), mlp0_cosine=theory.gelu_mlp0_cosine(s))
            print(f"{label}: layer-1 GELU input std {s:.3f} -> output mean/sd {r['gelu_layer1']['mean_over_sd']:.4f}, "
                  f"one-layer GELU MLP0 cosine {r['gelu_layer1']['mlp0_cosine']:.5f}; "
                  f"final-norm cosine after {config.n_layer} layers {r['cosine'][-1]['mean']:.4f}")
    return res


@torch.no_grad()
def exp_table3(args, config):
    """Table 3 on model blocks: ReLU MLP blocks without norm, residual or bias (MLP0: W2 relu(W1 x),
    the extra linear W2 preserves cosines at large width) and uniform-attention blocks (Attn0 through
    W_V, W_O), chained through `embeds`. Last position of two different sequences."""
    seed, T = args.seeds[0], args.seq_len[0]
    mlp0 = dict(sublayers="mlp", residual=False, norm="none", activation="relu", bias=False)
    attn0 = dict(sublayers="attn", residual=False, norm="none", attention="uniform", bias=False, position="none")
    m1 = _build(args, config, seed, n_layer=1, **mlp0)
    m2 = _build(args, config, seed, n_layer=2, **mlp0)           # its first block is m1's block
    a1 = _build(args, config, seed + 1, n_layer=1, **attn0)
    settings = {
        "MLP0": lambda x: m1.trace(embeds=x, hidden="last")["hidden"][-1],
        "MLP0 -> MLP0": lambda x: m2.trace(embeds=x, hidden="last")["hidden"][-1],
        "MLP0 -> Attn0": lambda x: a1.trace(embeds=m1.trace(embeds=x, hidden="all")["hidden"][-1],
                                            hidden="last")["hidden"][-1],
        "Attn0 -> MLP0": lambda x: m1.trace(embeds=a1.trace(embeds=x, hidden="all")["hidden"][-1],
                                            hidden="last")["hidden"][-1],
    }
    acc = {k: PairwiseCosine() for k in settings}
    w = m1.transformer.wte.weight
    for x in gaussian_batches(args.n, T, config.n_embd, 0.0, 1.0, args.batch_size, args.data_seed, w.device):
        for k, f in settings.items():
            acc[k].update(f(x.to(w.dtype)).float())
    expected = {"MLP0": 1 / math.pi, "MLP0 -> MLP0": theory.mlp0_cosine(2),
                "MLP0 -> Attn0": float(theory.attn0_last_cosine(T)), "Attn0 -> MLP0": 1 / math.pi}
    res = {k: dict(theory=expected[k], **acc[k].result()) for k in settings}
    print(f"Table 3 on model blocks: {args.model} width, n = {T} tokens, {args.n} Gaussian sequences")
    print(f"{'setting':<15} {'theory':>8} {'measured':>9} {'std':>7} {'log10 p':>9} {'paper':>6}")
    for (k, r), paper in zip(res.items(), ("0.31", "0.49", "0.98", "-")):
        print(f"{k:<15} {r['theory']:>8.4f} {r['mean']:>9.4f} {r['std']:>7.4f} {r['log10_p']:>9.1f} {paper:>6}")
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
            model = _build(args, config, args.seeds[0], sublayers="attn", residual=False, attention=attention)
            per_layer = np.zeros((config.n_layer, n_seq))
            w = model.transformer.wte.weight
            for i, x in enumerate(gaussian_batches(n_seq, T, config.n_embd, 0.0, 1.0, 1, args.data_seed, w.device)):
                hidden = model.trace(embeds=x.to(w.dtype), hidden="all")["hidden"]
                for layer in range(config.n_layer):
                    u = unit(hidden[layer + 1][0])
                    per_layer[layer, i] = (float(u.sum(0) @ u.sum(0)) - T) / (T * (T - 1))
            curves[attention] = dict(mean=per_layer.mean(1).tolist(), std=per_layer.std(1).tolist())
        curves["Attn0 theory"] = [theory.attn0_intra_cosine(T, l) for l in range(1, config.n_layer + 1)]
        res[T] = curves
        print(f"Fig 8: intra-sequence cosine, n = {T}, {n_seq} sequences, {args.model} attention-only, no residual")
        print(f"{'layer':>5} {'softmax':>9} {'uniform':>9} {'Attn0':>9}")
        for l in range(config.n_layer):
            print(f"{l + 1:>5} {curves['softmax']['mean'][l]:>9.4f} {curves['uniform']['mean'][l]:>9.4f} "
                  f"{curves['Attn0 theory'][l]:>9.4f}")
    _plot_intra(args, res, config.n_layer)
    return res


@torch.no_grad()
def exp_variance(args, config):
    """Fig 9: per-position std of the first attention block's aggregated output (before W_O) on
    Gaussian inputs, against std(t=1) / sqrt(t) (Eq. 2)."""
    T = max(args.seq_len)
    model = _build(args, config, args.seeds[0], n_layer=1)
    sq, count = torch.zeros(T, dtype=torch.float64), 0
    for inputs in model_inputs(model, "gaussian", args.n, T, args.batch_size, args.data_seed):
        h = model.trace(**inputs, head_out=True)["head_out"][0].double()     # (B, H, T, hd)
        sq += (h ** 2).sum(dim=(0, 1, 3)).cpu()     # values have zero mean at init (biases are 0)
        count += h.shape[0] * h.shape[1] * h.shape[3]
    std = (sq / count).sqrt()
    t = torch.arange(1, T + 1, dtype=torch.float64)
    ratio = (std * t.sqrt() / std[0]).tolist()
    print(f"Fig 9: std of the aggregated attention output at position t, {args.model} block 1, Gaussian inputs")
    print(f"{'t':>6} {'std':>10} {'std(1)/sqrt(t)':>15} {'ratio':>7}")
    for ti in sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, T}):
        if ti <= T:
            print(f"{ti:>6} {std[ti - 1]:>10.3e} {std[0] / math.sqrt(ti):>15.3e} {ratio[ti - 1]:>7.3f}")
    _plot_variance(args, std.numpy())
    return dict(std=std.tolist(), ratio_to_theory=ratio)


def exp_dims(args, config):
    r = _probe(args, _build(args, config, args.seeds[0]))
    dims = r["dim_counts"]
    top = np.argsort(dims)[::-1][:5]
    print(f"Fig 10: argmax dimension of final-norm last-token states, {args.model} seed {args.seeds[0]}, {args.n} sequences")
    print("  top dimensions: " + ", ".join(f"{int(d)} ({100 * dims[d] / args.n:.1f}%)" for d in top) +
          f"; uniform would give {100 / config.n_embd:.2f}% each; {int((dims > 0).sum())} of {config.n_embd} ever win")
    _plot_dims(args, r["counts"], dims)
    return dict(dim_counts=dims.tolist(), top_dims=top.tolist(), tokens=token_preference(r["counts"]))


def exp_seeds(args, config):
    rows = []
    for seed in list(args.seeds) + [args.seeds[0]]:     # the first seed twice: must repeat exactly
        counts = next_token_counts(_build(args, config, seed), args.n, args.seq_len[0], args.batch_size, args.data_seed)
        rows.append(dict(seed=seed, counts=counts, **token_preference(counts)))
    same = bool(np.array_equal(rows[0]["counts"], rows[-1]["counts"]))
    distinct = len({r["top1_id"] for r in rows[:-1]})
    print(f"Seed dependence: {args.model}, embedding seed {args.embed_seed}, {args.n} sequences of {args.seq_len[0]}")
    for r in rows:
        print(f"  seed {r['seed']:>5}: top-1 {r['top1_id']:>6} ({100 * r['top1_freq']:.2f}%, log10 p {r['log10_p']:.1f})")
    print(f"  {distinct} distinct top-1 ids over {len(rows) - 1} seeds; seed {args.seeds[0]} twice gives identical counts: {same}")
    return dict(rows=[{k: v for k, v in r.items() if k != "counts"} for r in rows], identical_repeat=same,
                distinct_top1=distinct)


@torch.no_grad()
def bare_matmul_seconds(model: GPT, batch: int, seq_len: int, batches: int) -> float:
    """Wall time of the forward's matrix products alone, with the model's own weights on random
    activations of the right shapes: per layer q/k/v, QK^T, PV, W_O, MLP up (and gate) and down;
    the LM head on the last position. The floor a probe pass is measured against."""
    p = next(model.parameters())
    cfg, dev, dt = model.config, p.device, p.dtype
    H, hd, T = cfg.n_head, cfg.head_dim, seq_len
    x = torch.randn(batch * T, cfg.n_embd, device=dev, dtype=dt)
    h = torch.randn(batch * T, cfg.mlp_width, device=dev, dtype=dt)
    q = torch.randn(batch, H, T, hd, device=dev, dtype=dt)
    probs = torch.randn(batch, H, T, T, device=dev, dtype=dt)

    def one_batch():
        for block in model.transformer.h:
            if hasattr(block, "attn"):
                x @ block.attn.c_attn.weight.T
                q @ q.transpose(-1, -2)
                probs @ q
                x @ block.attn.c_proj.weight.T
            if hasattr(block, "mlp"):
                x @ block.mlp.c_fc.weight.T
                if hasattr(block.mlp, "c_gate"):
                    x @ block.mlp.c_gate.weight.T
                h @ block.mlp.c_proj.weight.T
        model.unembed(x[:batch])

    one_batch()                                   # warm-up
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(batches):
        one_batch()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return time.time() - t0


def exp_bench(args, config):
    """A probe pass (Table 1's measurement, every statistic on) against the bare matmuls of the same
    forward: the overhead of everything that is not a matrix product."""
    model = _build(args, config, args.seeds[0])
    T = args.seq_len[0]
    batches = math.ceil(args.n / args.batch_size)
    _probe(args, model, "tokens", T, args.batch_size)                   # warm-up pass
    r = _probe(args, model, "tokens", T, batches * args.batch_size)
    bare = bare_matmul_seconds(model, args.batch_size, T, batches)
    ratio = r["seconds"] / bare
    print(f"bench: {batches * args.batch_size} x {T} tokens: probe {r['seconds']:.2f} s, bare matmuls {bare:.2f} s, "
          f"ratio {ratio:.2f} ({r['tokens_per_s']:,.0f} tok/s, {r['tflops']:.2f} TFLOP/s)")
    return dict(seconds=r["seconds"], bare_matmul_seconds=bare, ratio=ratio, tokens_per_s=r["tokens_per_s"],
                tflops=r["tflops"], mfu=r["mfu"], sequences=batches * args.batch_size, seq_len=T)


# ----------------------------------------------------------------------------- printing and figures

def _print_layers(curves: dict, extra: dict | None = None):
    names = list(curves) + list(extra or {})
    n_states = len(next(iter(curves.values())))
    print(f"{'state':>10} " + " ".join(f"{n[:22]:>22}" for n in names))
    for i in range(n_states):
        label = "input" if i == 0 else ("final norm" if i == n_states - 1 else f"block {i}")
        cells = [f"{c[i]['mean']:>9.4f} ± {c[i]['std']:.4f}" for c in curves.values()]
        cells += [f"{e[min(i, len(e) - 1)]:>22.4f}" if i < n_states - 1 else f"{'':>22}" for e in (extra or {}).values()]
        print(f"{label:>10} " + " ".join(f"{c:>22}" for c in cells))


def _save(fig, args, name):
    os.makedirs(args.out, exist_ok=True)
    fig.tight_layout()
    path = os.path.join(args.out, name)
    fig.savefig(path + ".tmp.png", dpi=120)
    os.replace(path + ".tmp.png", path)
    import matplotlib.pyplot as plt
    plt.close(fig)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plot_hist(args, name, hist: dict, vocab: int, title: str):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    k = 50
    for label, counts in hist.items():
        ax.bar(np.arange(k), np.asarray(counts)[:k], alpha=0.5, label=label)
    ax.plot(np.arange(k), uniform_baseline(args.n, vocab)[:k], "r--", label="uniform draws (baseline)")
    ax.set_yscale("log")
    ax.set_xlabel("rank of predicted token")
    ax.set_ylabel("count of argmax next token")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, args, name)


def _plot_layers(args, name, curves: dict, title: str, theory_curve=None):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, c in curves.items():
        x = np.arange(len(c) - 1)            # input .. last block; the final norm is left out
        m = np.array([s["mean"] for s in c[:-1]])
        sd = np.array([s["std"] for s in c[:-1]])
        ax.plot(x, m, "o-", ms=3, label=label)
        ax.fill_between(x, m - sd, m + sd, alpha=0.15)
    if theory_curve is not None:
        ax.plot(np.arange(len(theory_curve)), theory_curve, "k:", label="ReLU MLP0 theory (Prop 2)")
    ax.set_xlabel("layer")
    ax.set_ylabel("pairwise cosine of last-token states")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, args, name)


def _plot_intra(args, res, L):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(1, L + 1)
    for (T, c), color in zip(res.items(), ("C0", "C1", "C2")):
        ax.plot(x, c["softmax"]["mean"], "o-", color=color, ms=3, label=f"n={T} softmax attention")
        ax.plot(x, c["uniform"]["mean"], "s--", color=color, ms=3, label=f"n={T} uniform attention")
        ax.plot(x, c["Attn0 theory"], ":", color="k" if color == "C0" else "gray", label=f"n={T} Attn0 exact")
    ax.set_xlabel("attention layers")
    ax.set_ylabel("intra-sequence cosine")
    ax.set_title("Fig 8: attention contracts a sequence", fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, args, "fig8_intra_sequence.png")


def _plot_variance(args, std):
    plt = _plt()
    t = np.arange(1, len(std) + 1)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(t, std, "r--", label="measured std")
    ax.loglog(t, std[0] / np.sqrt(t), "b:", label="std(1) / sqrt(t) (Eq. 2)")
    ax.set_xlabel("position t")
    ax.set_ylabel("std of aggregated attention output")
    ax.set_title("Fig 9: positional variance decay", fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, args, "fig9_position_variance.png")


def _plot_dims(args, counts, dims):
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 5))
    a1.bar(np.arange(len(counts)), counts, width=1.0)
    a1.set_ylabel("argmax token count")
    a2.bar(np.arange(len(dims)), dims, width=1.0, color="C1")
    a2.set_ylabel("argmax dimension count")
    a2.set_xlabel("token id (top) / hidden dimension (bottom)")
    a1.set_title("Fig 10: token and hidden-dimension preference", fontsize=10)
    _save(fig, args, "fig10_dimension_preference.png")


# ----------------------------------------------------------------------------- the script

def _distributed():
    """Under torchrun: (rank, world size), after joining the process group; else (0, 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return dist.get_rank(), dist.get_world_size()


def _gather(obj, world):
    if world == 1:
        return [obj]
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def main():
    parser = argparse.ArgumentParser(description="What a transformer is born with: token preference and contraction "
                                                 "on random inputs (paper Sections 3-5).")
    add_config_flags(parser)
    parser.add_argument("--exp", nargs="+", default=["table1"], choices=EXPERIMENTS + ("all",),
                        help="which tables / figures to make (default table1)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43], help="block init seeds")
    parser.add_argument("--models", type=int, default=8, help="number of seeds for --exp direction (paper: 100)")
    parser.add_argument("--embed_seed", type=int, default=0, help="shared embedding / LM head seed")
    # --sequences is the same flag: torchrun's own parser mistakes "--n" for one of its options
    parser.add_argument("--n", "--sequences", dest="n", type=int, default=512, help="random sequences per model")
    parser.add_argument("--seq_len", type=int, nargs="+", default=[64])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--data_seed", type=int, default=1234, help="seed of the random inputs")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", default="out/probe")
    args = parser.parse_args()
    config = config_from_flags(args)
    if max(args.seq_len) > config.block_size:
        parser.error(f"--seq_len {max(args.seq_len)} exceeds the model's block_size {config.block_size}")
    if args.n < 2:
        parser.error("--n must be at least 2 (pairwise statistics)")
    rank, world = _distributed()
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        if world > 1:
            args.device = f"cuda:{torch.cuda.current_device()}"
    exps = list(EXPERIMENTS) if "all" in args.exp else args.exp
    results = dict(config=dataclasses.asdict(config), args=vars(args))
    t0 = time.time()
    # per-seed experiments: each rank takes every world-th seed, rank 0 merges and reports
    per_seed = {"table1": (exp_table1, report_table1, args.seeds),
                "direction": (exp_direction, report_direction, list(range(args.seeds[0], args.seeds[0] + args.models)))}
    # whole-model experiments: rank 0 alone
    single = {"contraction": exp_contraction, "ablation": exp_ablation, "mlp0": exp_mlp0, "layernorm": exp_layernorm,
              "table3": exp_table3, "intra": exp_intra, "variance": exp_variance, "dims": exp_dims, "seeds": exp_seeds,
              "bench": exp_bench}
    for name in exps:
        if name in per_seed:
            run, report, seeds = per_seed[name]
            parts = _gather(run(args, config, seeds[rank::world]), world)
            res = {key: _merge([p[key] for p in parts]) for key in parts[0]}
            res["rows"].sort(key=lambda r: (r["seed"], r.get("seq_len", 0)))
            if rank == 0:
                report(args, config, res)
        elif rank == 0:
            res = single[name](args, config)
        else:
            continue
        if name == "table1":
            results["token_preference"] = res["rows"]     # per seed and length: top1_id, top1_freq, log10_p
        results[name] = res
        if rank == 0:
            print()
    if rank == 0:
        write_json(os.path.join(args.out, "results.json"), _jsonable(results))
        print(f"wrote {args.out}/results.json and figures ({time.time() - t0:.0f} s)")
    if world > 1:
        dist.destroy_process_group()


def _merge(parts):
    """Join the ranks' pieces of one result: lists are concatenated, dicts updated."""
    if isinstance(parts[0], list):
        return [x for p in parts for x in p]
    return {k: v for p in parts for k, v in p.items()}


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    return obj


if __name__ == "__main__":
    main()
