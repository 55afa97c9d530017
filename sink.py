"""
sink.py: attention sinks -- measure them where they live, trace them to the first position's variance,
and try to stop them forming (paper Section 6.2; the metric of Gu et al. 2024; the interventions of "The
Structural Origin of Attention Sink").

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
    python sink.py --exp testbed                    # Bigram-Backcopy, no BOS: does a first-position sink form
                                                    #   on a CPU, and does calibration stop it? (4 variants x 3 seeds)
    python sink.py --exp calibration                # Fig 12 / Table 7 on natural text, small scale
"""
import math
import os

import numpy as np
import torch

import train

from model import (DTYPES, GPT, LLAMA_KNOBS, ArgumentParser, Progress, add_config_flags, add_device_flags,
                   check_dtype_runs, check_token_ids, config_overrides, figure, get_config, get_tokenizer, load_model,
                   lock_dir, one_line, parse_bool, print_table, read_checkpoint, read_json, read_model_config, resolve_device, run_script,
                   save_figure, update_results)

EPS = 0.3


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
    handles = [m.register_forward_pre_hook(h) for m, h in hooks]
    cfg = model.config
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
    can only see itself): to the first token, to itself, to the previous token, and everywhere else."""
    rows, cfg = [], model.config
    sums = torch.zeros(cfg.n_layer, 4, dtype=torch.float64)
    device = next(model.parameters()).device
    with torch.no_grad():
        for batch in attention_batches(tokens, cfg.n_layer, cfg.n_head):
            for layer, p in enumerate(model.trace(batch.to(device), attn_probs=True)["attn_probs"]):
                q = p[..., 1:, :].double()                             # queries t >= 2: (B, H, T-1, T)
                first, self_ = q[..., 0], q.diagonal(offset=1, dim1=-2, dim2=-1)
                prev = q.diagonal(offset=0, dim1=-2, dim2=-1)
                prev = torch.cat([torch.zeros_like(prev[..., :1]), prev[..., 1:]], -1)   # t = 2: previous is first
                parts = torch.stack([first, self_, prev, 1 - first - self_ - prev])       # (4, B, H, T-1)
                sums[layer] += parts.flatten(1).sum(1).cpu()
    total = sums.sum(1, keepdim=True)
    for layer in range(cfg.n_layer):
        f = (sums[layer] / total[layer]).tolist()
        rows.append(dict(layer=layer + 1, first=f[0], self=f[1], previous=f[2], rest=f[3]))
    return rows


# ----------------------------------------------------------------------------- where the first token differs

@torch.no_grad()
def position_variance(model: GPT, inputs: torch.Tensor, batch_size: int = 32) -> np.ndarray:
    """Variance of each head's aggregated output (what W_O sees, after calibration and head_norm), per
    layer and 1-indexed position: (L, T), pooled over heads and head dimensions around the
    per-(position, head, dim) mean across sequences (unbiased). inputs: token ids (N, T) or input
    embeddings (N, T, n_embd)."""
    s1 = s2 = None
    n = 0
    device = next(model.parameters()).device
    key = "embeds" if inputs.is_floating_point() else "idx"
    for i in range(0, len(inputs), batch_size):
        h = torch.stack(model.trace(**{key: inputs[i:i + batch_size].to(device)}, head_out=True)["head_out"], 1).double()
        s1 = h.sum(0) if s1 is None else s1 + h.sum(0)
        s2 = (h ** 2).sum(0) if s2 is None else s2 + (h ** 2).sum(0)
        n += h.shape[0]
    var = (s2 - s1 ** 2 / n) / max(n - 1, 1)                          # (L, H, T, hd)
    return var.mean(dim=(1, 3)).cpu().numpy()


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
                         disparity_rest=disp[:, 1:].mean().item() if h.shape[1] > 1 else float("nan")))
    return rows


@torch.no_grad()
def super_neurons(model: GPT, tokens: torch.Tensor, top: int = 3) -> list:
    """Per layer, the MLP hidden units whose input weights have the largest norm (||W_up row|| times
    ||W_gate row|| for a gated MLP), and whether they fire mostly on the first token: the mean |activation|
    at position 1 over the mean at the other positions."""
    acts, hooks = [], []
    for block in model.transformer.h:
        if hasattr(block, "mlp"):
            hooks.append(block.mlp.c_proj.register_forward_pre_hook(lambda m, i: acts.append(i[0].float().abs().cpu())))
    try:
        model.trace(tokens.to(next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    rows = []
    mlps = [b.mlp for b in model.transformer.h if hasattr(b, "mlp")]
    for layer, (mlp, a) in enumerate(zip(mlps, acts)):
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
    nothing, like the first token."""
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    mask[k - 1, :k - 1] = False
    return mask


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

def random_tokens(vocab: int, n: int, T: int, seed: int = 0, bos=None) -> torch.Tensor:
    """Gu et al.'s "random" setting: n sequences of T uniform token ids (a BOS id in front, if given)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, T - (bos is not None)), generator=g)
    return _with_bos(ids, bos)


def windows(ids: np.ndarray, T: int, n: int, seed: int = 0, bos=None) -> torch.Tensor:
    """n windows of T tokens at random non-overlapping offsets of a token stream ("100 randomly selected
    sequences"); with a BOS id, BOS + T - 1 tokens."""
    width = T - (bos is not None)
    slots = len(ids) // width
    if slots < 1:
        raise ValueError(f"the input holds {len(ids)} tokens, fewer than one window of {width}")
    pick = np.sort(np.random.default_rng(seed).choice(slots, size=min(n, slots), replace=False))
    return _with_bos(torch.from_numpy(np.stack([ids[s * width:(s + 1) * width] for s in pick]).astype(np.int64)), bos)


def _with_bos(ids, bos):
    return ids if bos is None else torch.cat([torch.full((len(ids), 1), bos, dtype=ids.dtype), ids], 1)


def read_ids(path: str) -> np.ndarray:
    """A file of token ids: .npy (any integer array, flattened to a stream) or a train.py .bin (uint16)."""
    if not os.path.isfile(path):
        kind = "is a directory, not a token-id file" if os.path.isdir(path) else "no token-id file"
        raise FileNotFoundError(f"{path}: {kind} (.npy, or a train.py .bin)")
    if path.endswith(".npy"):
        try:
            ids = np.load(path, allow_pickle=False)      # a pickle could run code: refused
        except (ValueError, OSError, EOFError) as e:
            raise ValueError(f"{path} is not a readable .npy array ({one_line(e)[:100]})") from None
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{path} holds {ids.dtype}, not integer token ids")
        return ids.reshape(-1).astype(np.int64)
    if path.endswith(".bin"):
        if os.path.getsize(path) % 2:
            raise ValueError(f"{path} has an odd number of bytes: not a train.py .bin of uint16 token ids")
        return np.fromfile(path, dtype=np.uint16).astype(np.int64)
    raise ValueError(f"{path}: token ids are read from .npy or train.py .bin files")


def model_inputs(args, model: GPT, path: str, T: int) -> torch.Tensor:
    """The sequences of the command line: random tokens (default), --text through the model's own
    tokenizer, or --ids; --bos on prepends the model's bos_token_id. Range-checked once, here."""
    bos = bos_token_id(path) if args.bos else None
    if args.text:
        encode = get_tokenizer(args.tokenizer or model_tokenizer(path))[0]
        tokens = windows(np.array(encode(train.read_text(text_file(args.text)))), T, args.sequences, args.data_seed, bos)
    elif args.ids:
        tokens = windows(read_ids(args.ids), T, args.sequences, args.data_seed, bos)
    else:
        tokens = random_tokens(model.config.vocab_size, args.sequences, T, args.data_seed, bos)
    return check_token_ids(tokens, model.config.vocab_size, args.text or args.ids or "the random tokens")


def text_file(name: str) -> str:
    """A text file's path; a corpus name (wikitext2, shakespeare, brown) means data/<its file>, made by
    `python train.py prepare NAME`."""
    if os.path.isfile(name):
        return name
    files = dict(wikitext2="wikitext2_test.txt", shakespeare="tinyshakespeare.txt", brown="brown.txt")
    path = os.path.join("data", files.get(name, name))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no text {name!r}: give a file, or fetch a named corpus once with "
                                f"`python train.py prepare {name}` (it lands in data/)")
    return path


def model_tokenizer(path: str) -> str:
    """The tokenizer a model was trained with: a train.py checkpoint records it; a Hugging Face directory
    ships tokenizer.json."""
    if os.path.isdir(path):
        return path
    name = read_checkpoint(path, mmap=True).get("tokenizer")   # the metadata only: no weights read
    if not isinstance(name, str):
        raise ValueError(f"{path} does not record its tokenizer; pass --tokenizer (bytes, gpt2, or a tokenizer.json dir)")
    return name


def bos_token_id(path: str) -> int:
    bos = read_json(os.path.join(path, "config.json"), "config.json").get("bos_token_id") if os.path.isdir(path) else None
    if bos is None:
        raise ValueError(f"{path} names no bos_token_id (config.json); run with --bos off")
    if isinstance(bos, bool) or not isinstance(bos, int) or bos < 0:
        raise ValueError(f"{path}/config.json: bos_token_id must be a token id, got {bos!r}")
    return bos


# ----------------------------------------------------------------------------- measuring a model

def measure(args) -> dict:
    """`python sink.py MODEL`: the sink rate (overall and per layer) at each length, then at the first
    length the first token's dimension disparity, the massive activations and the super neurons."""
    model = load_model(args.model_path, args.device, getattr(torch, args.dtype) if args.dtype else None).eval()
    res = dict(model=args.model_path, inputs=_describe(args), rates={})
    lengths = args.lengths
    for T in lengths:
        tokens = model_inputs(args, model, args.model_path, T)
        alpha = key_scores(model, tokens)
        res["rates"][T] = dict(**sink_rates(alpha[..., 0], args.eps), mean_alpha_1=alpha[..., 0].mean().item(),
                               uniform_alpha_1=sum(1 / t for t in range(1, T + 1)) / T)
        r = res["rates"][T]
        print(f"T={T:>4}: sink rate {r['rate']:5.1f}% (mean alpha_1 {r['mean_alpha_1']:.3f}, uniform "
              f"{r['uniform_alpha_1']:.3f}); per layer " + " ".join(f"{x:.0f}" for x in r["per_layer"]))
    tokens = model_inputs(args, model, args.model_path, lengths[0])[:16]
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


def exp_interventions(args) -> dict:
    """The two causal interventions on a model (default: the one given): (i) mask edit -- token k attends
    only to itself in every layer; (ii) variance amplification of token k's aggregated attention output at
    layer --layer, o'_k = mu + lam (o_k - mu), against plain scaling lam o_k. alpha_k per layer, for each k
    and lam, beside its baseline."""
    if not args.model_path:
        raise ValueError("--exp interventions needs a MODEL (a train.py checkpoint or Hugging Face directory)")
    model = load_model(args.model_path, args.device, getattr(torch, args.dtype) if args.dtype else None).eval()
    T = args.lengths[0]
    tokens = model_inputs(args, model, args.model_path, T)
    ks = args.k or [T // 8, T // 4, T // 2]
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
              f"{mean(run['mask_edit']):.4f} (sink rate {run['sink_rate_baseline']:.1f}% -> {run['sink_rate_mask_edit']:.1f}%)")
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


# ----------------------------------------------------------------------------- the emergence testbed

def bigram_backcopy(n: int, vocab: int = 64, triggers: int = 4, successors: int = 4, seed: int = 0,
                    recall: int = 0) -> np.ndarray:
    """A token stream from Guo et al.'s Bigram-Backcopy task (2410.13835), with no BOS: each token has a
    few likely successors (a sparse random bigram chain), except that after a trigger token the next
    token copies the one before the trigger. A head that backcopies is needed only on triggers and must
    do nothing everywhere else -- an active-dormant head, which is where sinks form.

    recall > 0 is an induction variant: after a trigger, the next token is the one that followed the
    same trigger's previous occurrence, if that lies within the last `recall` tokens and is no trigger
    (else the chain goes on). Its active-dormant head needs a previous-token head below it, so it sits in layer 2 or later,
    where the first position can already be told apart; plain backcopy can be done by one layer-1 head,
    which sees token embeddings only."""
    rng = np.random.default_rng(seed)
    succ = np.stack([rng.choice(vocab - triggers, successors, replace=False) for _ in range(vocab)])
    succ[rng.random(succ.shape) < triggers / vocab] = vocab - 1     # triggers (the top ids) occur now and then
    trig = np.arange(vocab - triggers, vocab)
    prob = rng.dirichlet(np.ones(successors), size=vocab)
    x = np.empty(n, dtype=np.int64)
    x[:2] = rng.integers(0, vocab - triggers, 2)
    draws, picks = rng.random(n), rng.integers(0, triggers, n)
    last = {}                                                       # trigger -> its latest position
    for t in range(1, n - 1):
        if x[t] >= vocab - triggers and not recall:
            x[t + 1] = x[t - 1]
        elif x[t] >= vocab - triggers and t - last.get(x[t], -n) <= recall and x[last[x[t]] + 1] < vocab - triggers:
            x[t + 1] = x[last[x[t]] + 1]
        else:
            x[t + 1] = succ[x[t], min(np.searchsorted(np.cumsum(prob[x[t]]), draws[t]), successors - 1)]
            if x[t + 1] == vocab - 1:
                x[t + 1] = trig[picks[t]]
        if x[t] >= vocab - triggers:
            last[x[t]] = t
    return x


def context2_entropy(x: np.ndarray, vocab: int) -> float:
    """Empirical entropy (nats) of the next token given the two before it, H(x[t+1] | x[t-1], x[t]): the
    loss floor of Bigram-Backcopy (for the induction variant, an upper bound of it)."""
    counts = np.bincount((x[:-2] * vocab + x[1:-1]) * vocab + x[2:], minlength=vocab ** 3).reshape(-1, vocab)
    counts = counts[counts.sum(1) > 0].astype(np.float64)
    p = counts / counts.sum(1, keepdims=True)
    return float(-(counts * np.log(np.where(counts > 0, p, 1.0))).sum() / counts.sum())


VARIANTS = {   # Section 6.2.1 and head-wise RMSNorm: the knobs each variant sets on top of the baseline
    "baseline": {},
    "attenuate": dict(calibration="attenuate"),
    "amplify": dict(calibration="amplify"),
    "head_norm": dict(head_norm=True),
}


def exp_testbed(args) -> dict:
    """A synthetic task with active-dormant heads and no BOS (Bigram-Backcopy or its induction variant;
    LLaMA-style blocks with RoPE, context 64 unless --block_size says otherwise), trained as baseline and
    with each of calibration attenuate, calibration amplify and head_norm, for several seeds: sink rate
    (mean +- std), where the attention mass goes instead, and the validation loss. Whether a first-position
    sink forms here at all is the first thing it reports."""
    if "vocab_size" in args.knobs:
        raise ValueError("the testbed's vocabulary is --testbed_vocab, not --vocab_size")
    knobs = {**LLAMA_KNOBS, "block_size": 64, **args.knobs, "vocab_size": args.testbed_vocab}
    get_config(args.model, **knobs)                               # a bad knob fails here, before any work
    task = f"induction{args.recall}" if args.recall else "backcopy"
    # the directory is named by everything the stream depends on, so a changed flag never reuses stale data
    data = os.path.join(args.out, "testbed",
                        f"data_{task}_vocab{args.testbed_vocab}_seed{args.data_seed}_{args.testbed_tokens}")
    if not os.path.isfile(os.path.join(data, "meta.json")):
        tokens = bigram_backcopy(args.testbed_tokens, args.testbed_vocab, seed=args.data_seed, recall=args.recall)
        train.save_tokens(tokens, data, "bigram-backcopy", args.testbed_vocab, ["bigram_backcopy"], 0.02)
    splits = train.load_data(data)
    val = splits["val"]
    floor = context2_entropy(np.asarray(splits["train"], dtype=np.int64), args.testbed_vocab)
    res = dict(task=task, knobs=knobs, steps=args.steps, loss_floor=floor, variants={})
    for name in args.variants:
        runs = []
        for seed in args.seeds:
            out_dir = os.path.join(args.out, "testbed", f"{task}_{name}_seed{seed}")
            cfg = train.TrainConfig(data=data, out_dir=out_dir, model=args.model, knobs={**knobs, **VARIANTS[name]},
                                    init_seed=seed, embed_seed=seed, data_seed=args.data_seed,
                                    batch_size=args.batch_size, max_steps=args.steps, lr=args.lr,
                                    warmup=min(100, args.steps // 10), ckpt_every=args.steps, eval_every=args.steps,
                                    eval_sequences=64, log_every=max(args.steps // 4, 1), device=args.device)
            log = train.ensure(cfg)
            model = load_model(train.list_checkpoints(out_dir)[-1][1]).eval()
            T = model.config.block_size
            tokens = windows(np.asarray(val, dtype=np.int64), T, args.sequences, 0)
            alpha = key_scores(model, tokens)[..., 0]
            runs.append(dict(seed=seed, **sink_rates(alpha, args.eps), val_loss=log["val"][-1]["val_loss"],
                             mass=attention_mass(model, tokens)))
        rates = [r["rate"] for r in runs]
        res["variants"][name] = dict(runs=runs, rate_mean=float(np.mean(rates)), rate_std=float(np.std(rates)),
                                     loss_mean=float(np.mean([r["val_loss"] for r in runs])))
    rows = []
    for name, v in res["variants"].items():
        sinkiest = max(range(len(v["runs"][0]["per_layer"])), key=lambda l: np.mean([r["per_layer"][l] for r in v["runs"]]))
        mass = {key: np.mean([r["mass"][sinkiest][key] for r in v["runs"]]) for key in ("first", "self", "previous", "rest")}
        rows.append(dict(variant=name, seeds=len(v["runs"]), sink_rate=f"{v['rate_mean']:.1f} +- {v['rate_std']:.1f}",
                         per_layer=" ".join(f"{np.mean([r['per_layer'][l] for r in v['runs']]):.0f}"
                                            for l in range(len(v["runs"][0]["per_layer"]))),
                         val_loss=f"{v['loss_mean']:.4f}", layer=sinkiest + 1,
                         **{f"to_{k}": f"{m:.2f}" for k, m in mass.items()}))
    print_table(rows)
    print(f"loss floor of the task (entropy of the next token given the two before it): {floor:.4f}")
    res["table"] = rows
    _plot_testbed(args, res)
    return res


def _plot_testbed(args, res):
    plt, fig, (a1, a2) = figure(1, 2, figsize=(10, 3.8))
    names = list(res["variants"])
    for i, name in enumerate(names):
        v = res["variants"][name]
        a1.scatter([i] * len(v["runs"]), [r["rate"] for r in v["runs"]], alpha=0.6)
        a1.errorbar([i], [v["rate_mean"]], [v["rate_std"]], fmt="k_", capsize=6)
        layer = int(res["table"][i]["layer"]) - 1
        parts = [np.mean([r["mass"][layer][k] for r in v["runs"]]) for k in ("first", "self", "previous", "rest")]
        bottom = 0
        for part, key, c in zip(parts, ("first", "self", "previous", "rest"), ("C3", "C0", "C2", "0.7")):
            a2.bar(i, part, bottom=bottom, color=c, label=key if i == 0 else None)
            bottom += part
    a1.set(xticks=range(len(names)), xticklabels=names, ylabel=f"sink rate (%), eps={args.eps}",
           title="Bigram-Backcopy, no BOS")
    a2.set(xticks=range(len(names)), xticklabels=names, ylabel="attention mass, queries t >= 2",
           title="where the sinkiest layer attends")
    a2.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "testbed.png"))


# ----------------------------------------------------------------------------- Fig 12 on natural text

def exp_calibration(args) -> dict:
    """Fig 12 / Table 7 at small scale: the variants trained from one init on one data order (natural
    text), their sink rate at each length on the evaluation text, and its perplexity."""
    data = os.path.join(args.out, "calibration", f"{args.train_text}_{args.tokenizer}")
    if not os.path.isfile(os.path.join(data, "meta.json")):
        train.prepare([args.train_text], data, tokenizer=args.tokenizer, from_dir=args.data_from)
    res = {}
    for name in args.variants:
        out_dir = os.path.join(args.out, "calibration", name)
        cfg = train.TrainConfig(data=data, out_dir=out_dir, model=args.model, knobs={**LLAMA_KNOBS, **args.knobs,
                                **VARIANTS[name]}, init_seed=args.seeds[0], data_seed=args.data_seed,
                                batch_size=args.batch_size, max_steps=args.steps, lr=args.lr, ckpt_every=args.steps,
                                eval_every=args.steps, log_every=50, device=args.device)
        train.ensure(cfg)
        path = train.list_checkpoints(out_dir)[-1][1]
        model = load_model(path).eval()
        encode = get_tokenizer(args.tokenizer)[0]
        stream = np.array(encode(train.read_text(text_file(args.text or "wikitext2"))))
        rates = {T: sink_rate(model, windows(stream, T, args.sequences, args.data_seed), args.eps)
                 for T in args.lengths}
        T = max(rates)
        x = windows(stream, T, args.sequences, 1)
        with torch.no_grad():
            loss = float(np.mean([model(x[i:i + 16, :-1], x[i:i + 16, 1:])[1].item() for i in range(0, len(x), 16)]))
        res[name] = dict(rates=rates, ppl=math.exp(loss), checkpoint=path)
        print(f"{name:>10}: sink rate % " + "  ".join(f"T={t}: {r:5.1f}" for t, r in rates.items())
              + f" | ppl {math.exp(loss):.2f} (T={T})")
    plt, fig, ax = figure()
    for name, r in res.items():
        ax.plot(list(r["rates"]), list(r["rates"].values()), "o-", label=f"{name} (ppl {r['ppl']:.1f})")
    ax.set(xscale="log", xlabel="sequence length T", ylabel=f"sink rate (%), eps={args.eps}")
    ax.legend(fontsize=8)
    save_figure(fig, os.path.join(args.out, "fig12_sink_rate.png"))
    return res


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = ArgumentParser(prog="sink.py", description="Attention sinks: the metric on any model, the causal "
                       "interventions, and a testbed where calibration can be put to the test.")
    p.add_argument("model_path", nargs="?", metavar="MODEL", help="a train.py checkpoint or Hugging Face directory")
    p.add_argument("--exp", choices=("interventions", "testbed", "calibration"), default=None)
    g = p.add_argument_group("inputs (Gu et al.: 100 sequences of 64, eps 0.3)")
    g.add_argument("--text", default=None, help="text file or corpus name (wikitext2, ...), tokenized by the model's "
                   "own tokenizer; default: random tokens")
    g.add_argument("--ids", default=None, help="a file of token ids (.npy or train.py .bin) instead of text")
    g.add_argument("--tokenizer", default=None, help="override the tokenizer: bytes, gpt2, or a tokenizer.json dir")
    g.add_argument("--bos", type=parse_bool, default=False, metavar="on|off",
                   help="prepend the model's bos_token_id (config.json)")
    g.add_argument("--sequences", type=int, default=100)
    g.add_argument("--lengths", type=int, nargs="+", default=[64])
    g.add_argument("--eps", type=float, default=EPS)
    g.add_argument("--data_seed", type=int, default=1234)
    add_device_flags(g, "load the model in this dtype (default: its own); the metric is float32 either way")
    g = p.add_argument_group("--exp interventions")
    g.add_argument("--k", type=int, nargs="+", default=None, help="1-indexed positions (default T/8, T/4, T/2)")
    g.add_argument("--layer", type=int, default=1, help="layer (0-indexed) of the variance amplification")
    g.add_argument("--lambdas", type=float, nargs="+", default=[1, 2, 4, 8, 16])
    g.add_argument("--mu", choices=("batch", "sequence"), default="batch",
                   help="amplify around the batch mean at position k, or around the sequence mean")
    g = p.add_argument_group("--exp testbed / calibration (models trained here)")
    add_config_flags(p, default_model="tiny")
    g.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    g.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    g.add_argument("--steps", type=int, default=600)
    g.add_argument("--batch_size", type=int, default=32)
    g.add_argument("--lr", type=float, default=3e-3)
    g.add_argument("--testbed_tokens", type=int, default=2_000_000)
    g.add_argument("--testbed_vocab", type=int, default=64)
    g.add_argument("--recall", type=int, default=0, help="0: Bigram-Backcopy; > 0: its induction variant (see "
                   "bigram_backcopy)")
    g.add_argument("--train_text", default="shakespeare", help="--exp calibration: training corpus (train.py name)")
    g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (train.py --from)")
    p.add_argument("--out", default="out/sink")
    args = p.parse_args(argv)
    args.knobs = config_overrides(args)
    if args.tokenizer is None and args.exp == "calibration":
        args.tokenizer = "bytes"
    check_args(p, args)
    device = resolve_device(args.device)
    if args.dtype:
        check_dtype_runs(device, DTYPES[args.dtype])
    args.device = str(device)
    with lock_dir(args.out):
        results = {}
        if args.exp is None:
            results["measure"] = measure(args)
        else:
            results[args.exp] = dict(interventions=exp_interventions, testbed=exp_testbed,
                                     calibration=exp_calibration)[args.exp](args)
        update_results(os.path.join(args.out, "results.json"), results)


def check_args(p, args) -> None:
    """Every count, range and file of the command line, against the model it will run on (its config only),
    before any work."""
    if args.sequences < 1 or min(args.lengths) < 2 or not 0 < args.eps < 1:
        p.error("need --sequences >= 1, --lengths >= 2 and 0 < --eps < 1")
    if args.text and args.ids:
        p.error("give --text or --ids, not both")
    if args.exp in (None, "interventions") and not args.model_path:
        p.error("give a MODEL to measure" + (", or --exp NAME" if args.exp is None else " (--exp interventions)"))
    if args.exp in ("testbed", "calibration") and args.model_path:
        p.error(f"--exp {args.exp} trains its own models; drop MODEL")
    for name in ("steps", "batch_size", "testbed_tokens", "testbed_vocab"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not math.isfinite(args.lr) or args.lr <= 0 or args.recall < 0:
        p.error("need --lr > 0 and --recall >= 0")
    if args.exp == "calibration":
        cfg = get_config(args.model, **{**LLAMA_KNOBS, **args.knobs})
        if max(args.lengths) > cfg.block_size:
            raise ValueError(f"--lengths {max(args.lengths)} exceeds the trained models' block_size {cfg.block_size}")
        get_tokenizer(args.tokenizer)
    if args.model_path:
        cfg = read_model_config(args.model_path)
        too_long = [T for T in args.lengths if T > cfg.block_size]
        if too_long:
            raise ValueError(f"--lengths {too_long[0]} exceeds the context of {args.model_path} ({cfg.block_size} tokens)")
        if args.bos:
            bos_token_id(args.model_path)                   # refuses a model that names no BOS
        if args.text:
            text_file(args.text)
            get_tokenizer(args.tokenizer or model_tokenizer(args.model_path))
        if args.ids:
            read_ids(args.ids)
        if args.exp == "interventions":
            T = args.lengths[0]
            ks = args.k or [T // 8, T // 4, T // 2]
            if any(not 2 <= k <= T for k in ks):
                raise ValueError(f"--k positions must lie in [2, T={T}] (1-indexed; 1 is the first token), got {ks}")
            if not 0 <= args.layer < cfg.n_layer or cfg.sublayers == "mlp":
                raise ValueError(f"--layer must index an attention layer in [0, {cfg.n_layer - 1}], got {args.layer}")
            if any(not math.isfinite(lam) or lam < 0 for lam in args.lambdas):
                raise ValueError(f"--lambdas must be finite and >= 0, got {args.lambdas}")


if __name__ == "__main__":
    run_script(main, "sink.py")
