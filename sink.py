"""
sink.py: attention sinks -- measure them where they live, trace them to the first position's variance,
and move them with the paper's interventions (paper Section 6.2; the metric of Gu et al. 2024; the
interventions of "The Structural Origin of Attention Sink").

Causal attention is a running average: position t's aggregated output averages t values, so its variance
falls like 1/t (Eq. 2) and position 1, which averages nothing, is a variance outlier from birth. The
paper's claim: training latches onto that outlier and the first token becomes a *sink* that soaks up
attention; undo the 1/t (calibration amplify / attenuate, or head-wise RMSNorm: model.py knobs) and the
sink should not form.

Metric (Gu et al.): importance of key k = its mean attention over the queries that can see it,
alpha_k = (1 / (T - k + 1)) sum_{t >= k} A_tk, computed in float32 whatever the model's dtype. A head is a
sink head when alpha_1 > eps = 0.3 (strict); the sink rate is the percentage of (sequence, layer, head)
triples that are sink heads. Uniform attention gives alpha_1 = H_T / T (0.074 at T = 64).

    python sink.py MODEL                            # any model: 100 random-token sequences of 64, no BOS
    python sink.py MODEL --text wikitext2 --bos on  # text through the model's own tokenizer, BOS prepended
    python sink.py MODEL --exp interventions        # mask edit and variance amplification at position k
    python sink.py MODEL --exp variance             # Eq. 2 by layer: is position 1 the variance outlier?

Models trained to see a sink form, with and without each intervention, are studies:
studies/sink_testbed.py (a sink grown on a CPU) and studies/sink_calibration.py (Fig 12 on natural text).
Imports model.py, hf.py (the model given), data.py (its inputs) and common.py.
"""
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Distinct, Progress, add_device_flags, check_dtype_runs, check_output,
                    figure, flag_type, lock_dir, parse_bool, print_table, refuse_unused, resolve_device,
                    run_script, save_figure, seed_int, update_results)
from model import GPT, allowed_keys
import numpy as np
import torch

import hf
from data import check_token_ids, random_tokens, read_ids, tokenize_text, windows

EPS = 0.3
# The interventions' defaults (their flags apply to --exp interventions alone; k's default depends on T)
INTERVENTIONS = dict(k=None, layer=1, lambdas=[1, 2, 4, 8, 16], mu="batch")


# ----------------------------------------------------------------------------- the metric

def sink_scores(attn: torch.Tensor, check: bool = True, rows_sum_to_one: bool = True) -> torch.Tensor:
    """Importance of every key, (..., T), from causal attention (..., T, T) (queries x keys), in float32:
    alpha_k = mean over the queries t >= k of A[t, k] (1-indexed k: divide by T - k + 1).
    rows_sum_to_one=False is for the sink controls whose rows may sum to less than 1 (softmax1, a learned
    sink logit, softpick): the weights are used as they are, as the softpick paper measures them, and the
    check asks only that each row be >= 0 and sum to at most 1."""
    if attn.dim() < 2 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention must be (..., T, T), got {tuple(attn.shape)}")
    a = attn.float()
    if check:
        if a.triu(diagonal=1).abs().max() > 1e-6:
            raise ValueError("attention puts weight on later keys: sink scores need causal attention")
        rows = a.sum(dim=-1)
        rows_ok = (rows - 1).abs().max() <= 1e-3 if rows_sum_to_one else rows.max() <= 1 + 1e-3
        if a.min() < 0 or not rows_ok:
            raise ValueError("attention rows must be probability distributions (>= 0, summing to 1)" if rows_sum_to_one
                             else "attention rows must be >= 0 and sum to at most 1")
    T = a.shape[-1]
    seen_by = torch.arange(T, 0, -1, device=a.device, dtype=torch.float32)   # T - k + 1 queries see key k
    return a.sum(dim=-2) / seen_by


def attention_batches(tokens: torch.Tensor, L: int, H: int, budget: float = 2 ** 29):
    """Batches small enough that one batch's float32 probabilities (B, L, H, T, T) fit in `budget` bytes."""
    T = tokens.shape[1]
    size = max(1, int(budget // (4 * L * H * T * T)))
    return [tokens[i:i + size] for i in range(0, len(tokens), size)]


@torch.no_grad()
def key_scores(model: GPT, tokens: torch.Tensor, attn_mask=None, hooks=()) -> torch.Tensor:
    """alpha for every (sequence, layer, head, key): (N, L, H, T), float32, from the model's own attention.
    hooks: (module, forward_pre_hook) pairs active during the pass (the interventions)."""
    cfg = model.config
    if cfg.sublayers == "mlp":
        raise ValueError("the model has no attention layers (sublayers=mlp): no attention to score")
    handles = [m.register_forward_pre_hook(h) for m, h in hooks]
    try:
        device = next(model.parameters()).device
        out = []
        for batch in attention_batches(tokens, cfg.n_layer, cfg.n_head):
            probs = model.trace(batch.to(device), attn_probs=True, attn_mask=attn_mask)["attn_probs"]
            out.append(torch.stack([sink_scores(p, check=attn_mask is None, rows_sum_to_one=cfg.rows_sum_to_one)
                                    for p in probs], dim=1).cpu())
        return torch.cat(out)
    finally:
        for h in handles:
            h.remove()


def sink_rates(alpha_1: torch.Tensor, eps: float = EPS) -> dict:
    """From alpha_1 (N, L, H): the sink rate in % overall and per layer (strictly above eps)."""
    sink = (alpha_1 > eps).float()
    return dict(rate=100 * sink.mean().item(), per_layer=(100 * sink.mean(dim=(0, 2))).tolist())


def sink_rate(model: GPT, tokens: torch.Tensor, eps: float = EPS) -> float:
    """Percentage of (sequence, layer, head) triples whose first token has alpha_1 > eps."""
    return sink_rates(key_scores(model, tokens)[..., 0], eps)["rate"]


def attention_mass(model: GPT, tokens: torch.Tensor) -> list:
    """Where each layer's attention goes, averaged over heads, sequences and the queries t >= 2 (query 1
    can only see itself): to the first token, to itself, to the previous token, everywhere else, and, for
    the sink controls whose rows sum to less than 1, nowhere ("none")."""
    if model.config.sublayers == "mlp":
        raise ValueError("the model has no attention layers (sublayers=mlp): no attention to follow")
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"attention_mass needs (sequences, T >= 2) tokens: query 1 sees only itself; got shape "
                         f"{tuple(tokens.shape)}")
    rows, cfg = [], model.config
    sums, count = torch.zeros(cfg.n_layer, 5, dtype=torch.float64), 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for batch in attention_batches(tokens, cfg.n_layer, cfg.n_head):
            for layer, p in enumerate(model.trace(batch.to(device), attn_probs=True)["attn_probs"]):
                q = p[..., 1:, :].double()                             # queries t >= 2: (B, H, T-1, T)
                first, self_ = q[..., 0], q.diagonal(offset=1, dim1=-2, dim2=-1)
                prev = q.diagonal(offset=0, dim1=-2, dim2=-1)
                prev = torch.cat([torch.zeros_like(prev[..., :1]), prev[..., 1:]], -1)   # t = 2: previous is first
                total = q.sum(-1)
                parts = torch.stack([first, self_, prev, total - first - self_ - prev, 1 - total])   # (5, B, H, T-1)
                sums[layer] += parts.flatten(1).sum(1).cpu()
            count += batch.shape[0] * cfg.n_head * (batch.shape[1] - 1)
    for layer in range(cfg.n_layer):
        f = (sums[layer] / count).tolist()
        rows.append(dict(layer=layer + 1, first=f[0], self=f[1], previous=f[2], rest=f[3], none=f[4]))
    return rows


# ----------------------------------------------------------------------------- the first position's variance (Eq. 2)

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


# ----------------------------------------------------------------------------- where the first token differs

def dimension_disparity(h: torch.Tensor) -> torch.Tensor:
    """max_j |h_j| / mean_j |h_j| over the last dimension: ~3-4 for a Gaussian vector of width ~1000,
    far larger when a few "super" dimensions carry the token."""
    a = h.float().abs()
    return a.amax(dim=-1) / a.mean(dim=-1)


@torch.no_grad()
def massive_activations(model: GPT, tokens: torch.Tensor) -> list:
    """Per residual-stream state (input, after each block): the top |activation|, the median, their
    ratio, the 1-indexed position holding the top, and the first token's dimension disparity beside the
    other tokens' (Sun et al. 2024: "massive" = > 100 and ~1000x the median)."""
    states = model.trace(tokens.to(next(model.parameters()).device), hidden="all")["hidden"][:-1]
    rows = []
    for layer, h in enumerate(states):
        a = h.float().abs()
        top, median = a.max(), a.median()
        disp = dimension_disparity(h)
        rows.append(dict(state=layer, top=top.item(), median=median.item(), ratio=(top / median).item(),
                         top_position=int((a == top).nonzero()[0, 1]) + 1, disparity_first=disp[:, 0].mean().item(),
                         disparity_rest=disp[:, 1:].mean().item() if h.shape[1] > 1 else None))
    return rows


@torch.no_grad()
def super_neurons(model: GPT, tokens: torch.Tensor, top: int = 3) -> list:
    """Per layer, the MLP hidden units whose input weights have the largest norm (||W_up row|| times
    ||W_gate row|| for a gated MLP), and whether they fire mostly on the first token: the mean |activation|
    at position 1 over the mean at the other positions. A mixture of experts' layers are left out: an expert's
    units see only the tokens routed to it."""
    acts, hooks = [], []
    mlps = {layer: b.mlp for layer, b in enumerate(model.transformer.h) if hasattr(getattr(b, "mlp", None), "c_proj")}
    for mlp in mlps.values():
        hooks.append(mlp.c_proj.register_forward_pre_hook(lambda m, i: acts.append(i[0].float().abs().cpu())))
    try:
        model.trace(tokens.to(next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    rows = []
    for (layer, mlp), a in zip(mlps.items(), acts):
        norm = mlp.c_fc.weight.float().norm(dim=1)
        if hasattr(mlp, "c_gate"):
            norm = norm * mlp.c_gate.weight.float().norm(dim=1)
        first, rest = a[:, 0].mean(0), a[:, 1:].mean((0, 1))              # per unit
        units = torch.argsort(norm.cpu(), descending=True)[:top]
        hottest = int(torch.argmax(first / rest.clamp_min(1e-12)))
        rows.append(dict(layer=layer + 1, units=units.tolist(), first_over_rest=(first / rest)[units].tolist(),
                         hottest_unit=hottest, hottest_ratio=float(first[hottest] / rest[hottest])))
    return rows


# ----------------------------------------------------------------------------- the interventions

def self_only_mask(T: int, k: int) -> torch.Tensor:
    """The mask edit: causal, except that 1-indexed token k attends only to itself -- it then aggregates
    nothing, like the first token (the knob self_only builds a model with this mask from birth)."""
    return allowed_keys(T, self_only=k)


def amplify_hook(k: int, lam: float, mu: str = "batch"):
    """A forward pre-hook for attn.c_proj (W_O) that rescales token k's aggregated attention output o_k:
    mu="batch"     o'_k = mu + lam (o_k - mu), mu = the mean of o_k over the batch (the variance at
                   position k across inputs, the quantity that is an outlier at position 1);
    mu="sequence"  the same with mu = the mean over the sequence's positions;
    mu="zero"      o'_k = lam o_k: plain scaling, the control."""
    if mu not in ("batch", "sequence", "zero"):
        raise ValueError(f"mu must be batch, sequence or zero, got {mu!r}")

    def hook(module, inputs):
        (o,) = inputs                                           # (B, T, H * hd)
        o = o.clone()
        m = {"batch": lambda: o[:, k - 1].mean(0, keepdim=True), "sequence": lambda: o.mean(1),
             "zero": lambda: torch.zeros_like(o[:, 0])}[mu]()
        o[:, k - 1] = m + lam * (o[:, k - 1] - m)
        return (o,)
    return hook


# ----------------------------------------------------------------------------- inputs

def input_tokens(args, model: GPT, stream, T: int, bos: int = None) -> torch.Tensor:
    """The sequences of the command line: random tokens (default), or windows of `stream` (--text through the
    model's own tokenizer, or --ids: input_stream); `bos` (--bos on: the model's bos_token_id) prepended where
    given. Range-checked once, here."""
    if stream is not None:
        tokens = windows(stream, T, args.sequences, args.data_seed, bos, args.text or args.ids)
    else:
        tokens = random_tokens(model.config.vocab_size, args.sequences, T, args.data_seed, bos)
    return check_token_ids(tokens, model.config.vocab_size, args.text or args.ids or "the random tokens")


def input_stream(args, stored: hf.Stored):
    """The token stream of --text (through the model's own tokenizer, or --tokenizer) or --ids, read once per
    run; None for random tokens."""
    if args.text:
        return tokenize_text(args.text, args.tokenizer or model_tokenizer(stored), args.data_from)
    if args.ids:
        return read_ids(args.ids)
    return None


def model_tokenizer(stored: hf.Stored) -> str:
    """The tokenizer a model (hf.read's) was trained with: a train.py checkpoint records it; a Hugging Face
    directory ships tokenizer.json."""
    if stored.checkpoint is None:
        return stored.path
    name = stored.checkpoint.get("tokenizer")
    if not isinstance(name, str):
        raise ValueError(f"{stored.path} does not record its tokenizer; pass --tokenizer "
                         f"(bytes, gpt2, or a tokenizer.json dir)")
    return name


def bos_token_id(stored: hf.Stored) -> int:
    """The bos_token_id a Hugging Face directory's config.json names (hf.read's); a checkpoint names none."""
    bos = (stored.json or {}).get("bos_token_id")
    if bos is None:
        raise ValueError(f"{stored.path} names no bos_token_id (config.json); run with --bos off")
    if isinstance(bos, bool) or not isinstance(bos, int) or bos < 0:
        raise ValueError(f"{stored.path}/config.json: bos_token_id must be a token id, got {bos!r}")
    return bos


# ----------------------------------------------------------------------------- measuring a model

def measure(args, model: GPT, stream, bos: int = None) -> dict:
    """`python sink.py MODEL`: the sink rate (overall and per layer) at each length, then at the first
    length the first token's dimension disparity, the massive activations and the super neurons."""
    res = dict(model=args.model_path, inputs=_describe(args), rates={})
    lengths = args.lengths
    for T in lengths:
        tokens = input_tokens(args, model, stream, T, bos)
        alpha = key_scores(model, tokens)
        res["rates"][T] = dict(**sink_rates(alpha[..., 0], args.eps), mean_alpha_1=alpha[..., 0].mean().item(),
                               uniform_alpha_1=sum(1 / t for t in range(1, T + 1)) / T)
        r = res["rates"][T]
        print(f"T={T:>4}: sink rate {r['rate']:5.1f}% (mean alpha_1 {r['mean_alpha_1']:.3f}, uniform "
              f"{r['uniform_alpha_1']:.3f}); per layer " + " ".join(f"{x:.0f}" for x in r["per_layer"]))
    tokens = input_tokens(args, model, stream, lengths[0], bos)[:16]
    res["massive_activations"] = massive_activations(model, tokens)
    res["super_neurons"] = super_neurons(model, tokens)
    print_table([{k: r[k] for k in ("state", "top", "median", "ratio", "top_position", "disparity_first",
                                    "disparity_rest")} for r in res["massive_activations"]], floats="{:.3g}")
    print_table([dict(layer=r["layer"], units=r["units"], first_over_rest=[round(x, 1) for x in r["first_over_rest"]],
                      hottest_unit=r["hottest_unit"], hottest_ratio=round(r["hottest_ratio"], 1))
                 for r in res["super_neurons"]])
    return res


def _describe(args):
    what = f"text {args.text}" if args.text else f"ids {args.ids}" if args.ids else "random tokens"
    return f"{args.sequences} sequences of {what}, BOS {'on' if args.bos else 'off'}, eps {args.eps}"


def exp_interventions(args, model: GPT, stream, bos: int = None) -> dict:
    """The two causal interventions on a model (default: the one given): (i) mask edit -- token k attends
    only to itself in every layer; (ii) variance amplification of token k's aggregated attention output at
    layer --layer, o'_k = mu + lam (o_k - mu), against plain scaling lam o_k. alpha_k per layer, for each k
    and lam, beside its baseline."""
    T = args.lengths[0]
    tokens = input_tokens(args, model, stream, T, bos)
    ks = args.k                                                     # check_args filled in the default
    w_o = model.transformer.h[args.layer].attn.c_proj
    base = key_scores(model, tokens)
    per_layer = lambda alpha, k: alpha[..., k - 1].mean(dim=(0, 2)).tolist()     # mean over sequences and heads
    res = dict(model=args.model_path, inputs=_describe(args), T=T, layer=args.layer, mu=args.mu,
               alpha_1=per_layer(base, 1), runs={})
    bar = Progress(len(ks) * (1 + 2 * len(args.lambdas)), "interventions", "passes")
    for k in ks:
        run = dict(baseline=per_layer(base, k), sink_rate_baseline=sink_rates(base[..., k - 1], args.eps)["rate"])
        edited = key_scores(model, tokens, attn_mask=self_only_mask(T, k))
        run.update(mask_edit=per_layer(edited, k), sink_rate_mask_edit=sink_rates(edited[..., k - 1], args.eps)["rate"])
        bar.update()
        for lam in args.lambdas:
            for name, mu in (("amplify", args.mu), ("scale", "zero")):
                alpha = key_scores(model, tokens, hooks=[(w_o, amplify_hook(k, lam, mu))])
                run[f"{name} x{lam:g}"] = per_layer(alpha, k)
                bar.update()
        res["runs"][k] = run
        later = slice(args.layer + 1, None)                 # the layers after the edit
        mean = lambda xs: float(np.mean(xs[later]))
        print(f"k={k:>3}: alpha_k in layers > {args.layer}: baseline {mean(run['baseline']):.4f} | mask edit "
              f"{mean(run['mask_edit']):.4f} (sink rate {run['sink_rate_baseline']:.1f}% -> "
              f"{run['sink_rate_mask_edit']:.1f}%)")
        for lam in args.lambdas:
            print(f"        lam {lam:>4g}: amplify ({args.mu} mean) {mean(run[f'amplify x{lam:g}']):.4f} | "
                  f"plain scaling {mean(run[f'scale x{lam:g}']):.4f}")
    _plot_interventions(args, res)
    return res


def _plot_interventions(args, res):
    ks = list(res["runs"])
    plt, fig, axes = figure(1, len(ks), figsize=(4.2 * len(ks), 3.6))
    axes = np.atleast_1d(axes)
    cmap = plt.get_cmap("viridis")
    for ax, k in zip(axes, ks):
        run = res["runs"][k]
        layers = np.arange(1, len(run["baseline"]) + 1)
        ax.plot(layers, run["baseline"], "k-", lw=2, label="baseline")
        ax.plot(layers, run["mask_edit"], "r--", lw=2, label="mask edit")
        for i, lam in enumerate(args.lambdas):
            c = cmap(i / max(len(args.lambdas) - 1, 1))
            ax.plot(layers, run[f"amplify x{lam:g}"], "-", color=c, label=f"amplify x{lam:g}")
            ax.plot(layers, run[f"scale x{lam:g}"], ":", color=c, label=f"scale x{lam:g}")
        ax.axvline(res["layer"] + 1, c="gray", lw=0.5)
        ax.set(yscale="log", xlabel="layer", ylabel=f"alpha_k (k={k})", title=f"k = {k}, T = {res['T']}")
    axes[0].legend(fontsize=6, ncol=2)
    save_figure(fig, os.path.join(args.out, "interventions.png"))


def variance_by_layer(args, model: GPT, stream, bos: int = None) -> dict:
    """Eq. 2 on a real model: the variance, across inputs, of each head's aggregated attention output (what
    W_O sees) by position, per layer, beside the layer's sink rate. Is position 1 the outlier, and in which
    layers, compared with where the sinks start?"""
    T = args.lengths[0]
    tokens = input_tokens(args, model, stream, T, bos)
    var = position_variance(model, tokens)                              # (L, T)
    rates = sink_rates(key_scores(model, tokens)[..., 0], args.eps)["per_layer"]
    rows = [dict(layer=l + 1, var_first=float(v[0]), var_rest_median=float(np.median(v[1:])),
                 first_over_rest=float(v[0] / np.median(v[1:])), first_is_max=bool(v[0] >= v.max()),
                 var_t2_over_tT=float(v[1] / v[-1]), sink_rate=r) for l, (v, r) in enumerate(zip(var, rates))]
    print_table([{k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()} for row in rows])
    plt, fig, (a1, a2) = figure(1, 2, figsize=(10, 3.8))
    layers = np.arange(1, len(rows) + 1)
    a1.semilogy(layers, [r["first_over_rest"] for r in rows], "o-")
    a1.axhline(1, c="gray", lw=0.5)
    a1.set(xlabel="layer", ylabel="var(position 1) / median var(t > 1)", title="the first position's variance")
    a2.plot(layers, rates, "s-", c="C3")
    a2.set(xlabel="layer", ylabel=f"sink rate (%), eps = {args.eps}", title="sinks by layer")
    save_figure(fig, os.path.join(args.out, "variance_by_layer.png"))
    return dict(model=args.model_path, inputs=_describe(args), T=T, layers=rows, variance=var.tolist())


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = ArgumentParser(prog="sink.py", description="Attention sinks on a given model: the metric, the first "
                       "position's variance by layer, and the causal interventions.")
    p.add_argument("model_path", metavar="MODEL", help="a train.py checkpoint or Hugging Face directory")
    p.add_argument("--exp", choices=("interventions", "variance"), default=None,
                   help="default: the sink rate, massive activations and super neurons")
    g = p.add_argument_group("inputs (Gu et al.: 100 sequences of 64, eps 0.3)")
    add_measure_flags(g)
    g.add_argument("--text", default=None, help="text file or corpus name (wikitext2, ...), tokenized by the model's "
                   "own tokenizer; default: random tokens")
    g.add_argument("--ids", default=None, help="a file of token ids (.npy or a data.py .bin) instead of text")
    g.add_argument("--tokenizer", default=None, help="override the tokenizer: bytes, gpt2, or a tokenizer.json dir")
    g.add_argument("--bos", type=parse_bool, default=False, metavar="on|off",
                   help="prepend the model's bos_token_id (config.json)")
    g.add_argument("--data_seed", type=seed_int, default=1234, help="seed of the random tokens or windows")
    g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (data.py --from)")
    add_device_flags(g, "load the model in this dtype (default: its own); the metric is float32 either way")
    g = p.add_argument_group("--exp interventions")
    g.add_argument("--k", type=flag_type("int>=2"), nargs="+", action=Distinct, default=None,
                   help="1-indexed positions (default T/8, T/4, T/2)")
    g.add_argument("--layer", type=flag_type("int>=0"), default=None,
                   help=f"layer (0-indexed) of the variance amplification (default {INTERVENTIONS['layer']})")
    g.add_argument("--lambdas", type=flag_type("float>=0"), nargs="+", action=Distinct, default=None,
                   help=f"amplifications (default {' '.join(map(str, INTERVENTIONS['lambdas']))})")
    g.add_argument("--mu", choices=("batch", "sequence"), default=None,
                   help="amplify around the batch mean at position k (default), or around the sequence mean")
    p.add_argument("--out", default="out/sink")
    args = p.parse_args(argv)
    stored, stream = check_args(p, args)              # the model's config read once, its weights not yet
    bos = bos_token_id(stored) if args.bos else None
    device = resolve_device(args.device)
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    args.device = str(device)
    with lock_dir(args.out):
        model = hf.load(stored, args.device, DTYPES[args.dtype] if args.dtype else None).eval()   # one pass
        run = dict(interventions=exp_interventions, variance=variance_by_layer).get(args.exp, measure)
        results = {args.exp or "measure": run(args, model, stream, bos)}
        update_results(os.path.join(args.out, "results.json"), results, args.device, args.dtype)


def add_measure_flags(group, lengths=(64,)) -> None:
    """The measurement's flags, sink.py's and the sink studies' (Gu et al.: 100 sequences of 64, eps 0.3), each
    range checked as it is parsed. lengths=None: the study's context."""
    group.add_argument("--sequences", type=flag_type("int>=1"), default=100, help="sequences measured")
    group.add_argument("--lengths", type=flag_type("int>=2"), nargs="+", action=Distinct,
                       default=list(lengths) if lengths else None,
                       help="sequence lengths T" + ("" if lengths else " (default: the context)"))
    group.add_argument("--eps", type=flag_type("(0,1)"), default=EPS, help="a sink head: alpha_1 > eps")


def check_args(p, args):
    """Every count, range and file of the command line, against the model it will run on (its config only),
    before any work. Returns the model as hf.read leaves it (config checked, no weight read) and the token stream of
    --text or --ids (None: random tokens), each read once."""
    if args.text and args.ids:
        p.error("give --text or --ids, not both")
    if not args.text:
        refuse_unused(args, ("tokenizer", "data_from"), "{flags} would do nothing without --text", p)
    if args.exp != "interventions":
        refuse_unused(args, INTERVENTIONS, "{flags} would do nothing without --exp interventions", p)
    if args.exp == "variance" and args.sequences < 2:
        p.error("--exp variance: a variance across sequences needs --sequences 2 or more")
    if args.exp in ("interventions", "variance") and len(args.lengths) > 1:
        p.error(f"--exp {args.exp} measures at one length: give one --lengths (got {len(args.lengths)})")
    if args.exp == "interventions":
        for k, default in INTERVENTIONS.items():
            setattr(args, k, default if getattr(args, k) is None else getattr(args, k))
    check_output(args.out)
    stored = hf.read(args.model_path)
    cfg = stored.config
    if cfg.sublayers == "mlp":
        raise ValueError(f"{args.model_path} has no attention layers (sublayers=mlp): no sink to measure")
    too_long = [T for T in args.lengths if T > cfg.block_size]
    if too_long:
        raise ValueError(f"--lengths {too_long[0]} exceeds the context of {args.model_path} ({cfg.block_size} tokens)")
    if args.bos:
        bos_token_id(stored)                            # refuses a model that names no BOS
    stream = input_stream(args, stored)
    if stream is not None:                              # enough windows for every length?
        for T in args.lengths:
            windows(stream, T, args.sequences, args.data_seed, 0 if args.bos else None, args.text or args.ids)
    if args.exp == "interventions":
        T = args.lengths[0]
        if args.k is None:                  # the default, T/8, T/4, T/2: three distinct positions from T = 16
            if T < 16:
                raise ValueError(f"the default --k (T/8, T/4, T/2) needs T >= 16, got T = {T}: give --k positions "
                                 f"in [2, {T}]")
            args.k = [T // 8, T // 4, T // 2]
        if any(not 2 <= k <= T for k in args.k):
            raise ValueError(f"--k positions must lie in [2, T={T}] (1-indexed; 1 is the first token), got {args.k}")
        if not 0 <= args.layer < cfg.n_layer:
            raise ValueError(f"--layer must index an attention layer in [0, {cfg.n_layer - 1}], got {args.layer}")
    return stored, stream


if __name__ == "__main__":
    run_script(main, "sink.py")
