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
    python sink.py MODEL --exp variance             # Eq. 2 by layer: is position 1 the variance outlier?
    python sink.py --exp testbed                    # a first-position sink grown on a CPU (no BOS), seeds 0-9;
                                                    #   --variants adds sink controls, paired seed by seed
    python sink.py --exp calibration                # Fig 12 / Table 7 on natural text, small scale
"""
import dataclasses
import hashlib
import json
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Progress, add_config_flags, add_device_flags, check_dtype_runs,
                    check_output, config_overrides, figure, load_model, lock_dir, one_line, parse_bool, print_table,
                    random_batches, read_json, read_model_config, resolve_device, run_script, save_figure, seed_int,
                    update_results, write_json)
from model import GPT, LLAMA_KNOBS, allowed_keys, get_config, read_checkpoint
import numpy as np
import torch

import train
from probe import position_variance


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

def random_tokens(vocab: int, n: int, T: int, seed: int = 0, bos=None) -> torch.Tensor:
    """Gu et al.'s "random" setting: n sequences of T uniform token ids (a BOS id in front, if given)."""
    return _with_bos(next(random_batches("tokens", n, T - (bos is not None), n, seed, vocab=vocab)), bos)


def windows(ids: np.ndarray, T: int, n: int, seed: int = 0, bos=None, name: str = "the input") -> torch.Tensor:
    """n windows of T tokens at random non-overlapping offsets of a token stream ("100 randomly selected
    sequences"); with a BOS id, BOS + T - 1 tokens. A stream too short for n windows is refused."""
    width = T - (bos is not None)
    slots = len(ids) // width
    if slots < n:
        raise ValueError(f"{name} holds {len(ids)} tokens: {slots} windows of {width}, fewer than the {n} sequences "
                         f"asked for; lower --sequences or the lengths, or give more text")
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



def check_token_ids(idx: torch.Tensor, vocab_size: int, where: str = "the input") -> torch.Tensor:
    """Token ids must index the embedding table; checked once where data enters (one host sync)."""
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise ValueError(f"token ids of {where} must lie in [0, {vocab_size}); got min {int(idx.min())}, max "
                         f"{int(idx.max())} -- is it tokenized for this model's vocabulary?")
    return idx


def model_inputs(args, model: GPT, path: str, T: int) -> torch.Tensor:
    """The sequences of the command line: random tokens (default), --text through the model's own
    tokenizer, or --ids; --bos on prepends the model's bos_token_id. Range-checked once, here."""
    bos = bos_token_id(path) if args.bos else None
    if args.text or args.ids:
        tokens = windows(input_stream(args, path), T, args.sequences, args.data_seed, bos, args.text or args.ids)
    else:
        tokens = random_tokens(model.config.vocab_size, args.sequences, T, args.data_seed, bos)
    return check_token_ids(tokens, model.config.vocab_size, args.text or args.ids or "the random tokens")


def input_stream(args, path: str) -> np.ndarray:
    """The token stream of --text (through the model's own tokenizer, or --tokenizer) or --ids, read once."""
    key = (args.text, args.ids, args.tokenizer, path)
    if getattr(args, "_stream", (None,))[0] != key:
        if args.text:
            encode = train.get_tokenizer(args.tokenizer or model_tokenizer(path))[0]
            args._stream = key, np.array(encode(train.read_text(text_file(args.text, args.data_from))), dtype=np.int64)
        else:
            args._stream = key, read_ids(args.ids)
    return args._stream[1]


def calibration_text(args) -> np.ndarray:
    """--exp calibration's evaluation text (--text, default wikitext2) in the trained models' tokenizer, or
    --ids already tokenized, read once: checked before any training (ids inside the vocabulary), reused for
    every variant."""
    if getattr(args, "_calibration_text", None) is None:
        if args.ids:           # the vocabulary of prepared data is in its meta.json: no tokenizer to load
            meta = prepared_train_text(args)
            vocab = meta["vocab_size"] if meta else train.get_tokenizer(args.tokenizer)[2]
            ids = read_ids(args.ids)
            if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
                raise ValueError(f"--ids {args.ids} holds ids in [{ids.min()}, {ids.max()}], outside the "
                                 f"{args.tokenizer} vocabulary of {vocab} the models are trained on")
        else:
            encode = train.get_tokenizer(args.tokenizer)[0]
            ids = np.array(encode(train.read_text(text_file(args.text or "wikitext2", args.data_from))), dtype=np.int64)
        args._calibration_text = ids
    return args._calibration_text


def prepared_train_text(args):
    """meta.json of --train_text when it is a directory that train.py prepare wrote (its tokens are checked
    once per process), else None (a corpus name or a text file)."""
    return train.load_data(args.train_text)["meta"] if os.path.isdir(args.train_text) else None


def calibration_tokenizer(args) -> str:
    """--exp calibration's tokenizer: a prepared --train_text directory's own (a --tokenizer that differs is
    refused), else --tokenizer, bytes by default."""
    meta = prepared_train_text(args)
    if meta is None:
        return args.tokenizer or "bytes"
    own = meta["tokenizer"]
    if args.tokenizer not in (None, own):
        raise ValueError(f"--train_text {args.train_text} holds {own} tokens; drop --tokenizer {args.tokenizer} "
                         f"(the evaluation text is tokenized like the training data)")
    return own


def text_file(name: str, from_dir: str = None) -> str:
    """A text file's path, or a named corpus of train.py (wikitext2, shakespeare, brown), fetched on first use
    (offline: from --data_from)."""
    if os.path.isfile(name):
        return name
    if name in train.CORPORA:
        return train.corpus_file(name, source=from_dir)
    raise FileNotFoundError(f"no text file {name!r} ({'a directory' if os.path.isdir(name) else 'no such file'}); "
                            f"give a UTF-8 file, or a corpus name: {', '.join(train.CORPORA)}")


def model_tokenizer(path: str) -> str:
    """The tokenizer a model was trained with: a train.py checkpoint records it; a Hugging Face directory
    ships tokenizer.json."""
    if os.path.isdir(path):
        return path
    name = read_checkpoint(path, mmap=True).get("tokenizer")   # the metadata only: no weights read
    if not isinstance(name, str):
        raise ValueError(f"{path} does not record its tokenizer; pass --tokenizer "
                         f"(bytes, gpt2, or a tokenizer.json dir)")
    return name


def bos_token_id(path: str) -> int:
    bos = (read_json(os.path.join(path, "config.json"), "config.json").get("bos_token_id")
           if os.path.isdir(path) else None)
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


def exp_variance(args) -> dict:
    """Eq. 2 on a real model: the variance, across inputs, of each head's aggregated attention output (what
    W_O sees) by position, per layer, beside the layer's sink rate. Is position 1 the outlier, and in which
    layers, compared with where the sinks start?"""
    model = load_model(args.model_path, args.device, DTYPES[args.dtype] if args.dtype else None).eval()
    T = args.lengths[0]
    tokens = model_inputs(args, model, args.model_path, T)
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


# The mechanisms compared on one protocol: the knobs each sets on top of the baseline (model.py names its paper).
VARIANTS = {
    "baseline": {},
    "attenuate": dict(calibration="attenuate"),       # Section 6.2.1: x sqrt(t / T)
    "amplify": dict(calibration="amplify"),           # Section 6.2.1: x sqrt(t)
    "head_norm": dict(head_norm=True),                # head-wise RMSNorm
    "gated": dict(attn_gate=True),                    # gated attention (2505.06708)
    "softmax1": dict(attention="softmax1"),           # softmax + 1
    "sink_logit": dict(attn_sink=True),               # a learned sink logit per head (gpt-oss)
    "softpick": dict(attention="softpick"),           # rectified softmax (2504.20966)
}


def testbed_data(args) -> tuple:
    """(prepared data directory, loss floor) of the testbed's task, made once in a directory named by every
    setting the stream depends on, so a changed flag never reuses a stale stream. With --bos on, each training
    sequence is a document: BOS (id --testbed_vocab) and a fresh chain of block_size tokens. The floor is the
    generating process's own mean -log p (a model that saw every earlier token of the stream; a window's
    first positions see less, so without BOS the reachable floor is slightly higher)."""
    T = args.testbed_block
    name = (f"data_v{args.testbed_vocab}_s{args.successors}_r{args.recall}_bos{int(args.bos)}_T{T}_"
            f"seed{args.data_seed}_{args.testbed_tokens}")
    data = os.path.join(args.out, "testbed", name)
    if not os.path.isfile(os.path.join(data, "meta.json")):
        n = args.testbed_tokens // (T + 1) * T if args.bos else args.testbed_tokens
        x, logp = bigram_backcopy(n, args.testbed_vocab, successors=args.successors, seed=args.data_seed,
                                  recall=args.recall, doc_len=T if args.bos else 0)
        if args.bos:
            x = np.concatenate([np.full((n // T, 1), args.testbed_vocab), x.reshape(-1, T)], axis=1).reshape(-1)
        write_json(os.path.join(data, "floor.json"), dict(loss_floor=-float(np.mean(logp))))
        train.save_tokens(x, data, "bigram-backcopy", args.testbed_vocab + args.bos, ["bigram_backcopy"], 0.02,
                          doc_len=T + 1 if args.bos else 0)                   # meta.json last: complete
    return data, read_json(os.path.join(data, "floor.json"), "floor.json")["loss_floor"]


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
    """(mean, low, high): the mean over seeds with its Student-t interval (one value: no interval)."""
    from scipy import stats
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float("nan"), float("nan")
    half = stats.t.ppf((1 + level) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def paired(base: list, other: list, level: float = 0.95, power: float = 0.8) -> dict:
    """Seed by seed, other - base (both arms from the same init on the same data order): the mean difference
    with its t interval, the two-sided sign test, and the smallest true mean difference the design detects at
    `power` with a two-sided t test at 1 - level (from the differences' spread: (t_a + t_b) sd / sqrt(n))."""
    from scipy import stats
    d = np.asarray(other, dtype=float) - np.asarray(base, dtype=float)
    mean, low, high = interval(d, level)
    up, down = int((d > 0).sum()), int((d < 0).sum())
    sign_p = stats.binomtest(up, up + down, 0.5).pvalue if up + down else 1.0
    n = len(d)
    mde = (stats.t.ppf((1 + level) / 2, n - 1) + stats.t.ppf(power, n - 1)) * d.std(ddof=1) / math.sqrt(n) \
        if n > 1 else float("nan")
    return dict(mean=mean, low=low, high=high, up=up, down=down, sign_p=float(sign_p), detectable=float(mde))


def exp_testbed(args) -> dict:
    """Does a first-position sink form, what is it, and what does each mechanism do to it? Bigram-Backcopy (on iid
    tokens by default, or with a bigram chain, or its induction variant; with or without BOS documents;
    LLaMA-style blocks, TESTBED_KNOBS unless flags say otherwise), each variant trained from the same init (shared
    parameters are drawn alike) on the same data order for the same steps, for every seed: the protocol of
    sink_profile on held-out sequences, the sink rate at each of --lengths, and the validation loss against the
    task's floor. Each number is a mean over seeds with its 95% interval. For every baseline: where its sink lives
    (position_table_probes with learned positions, token_probes always); for every other variant: the paired
    difference from the baseline, seed by seed."""
    T = args.testbed_block
    knobs = {**LLAMA_KNOBS, **args.knobs, "block_size": T, "vocab_size": args.testbed_vocab + args.bos}
    data, floor = testbed_data(args)
    val = np.asarray(train.load_data(data)["val"], dtype=np.int64)
    if args.bos:                                       # BOS and the first T - 1 tokens of each document
        tokens = torch.from_numpy(val.reshape(-1, T + 1)[:args.sequences, :T].copy())
    else:
        tokens = windows(val, T, args.sequences, 0)
    res = dict(knobs=knobs, bos=args.bos, successors=args.successors, recall=args.recall, steps=args.steps,
               lr=args.lr, weight_decay=args.weight_decay, loss_floor=floor, threads=torch.get_num_threads(),
               variants={})
    for name in args.variants:
        runs = []
        for seed in args.seeds:
            cfg = train.TrainConfig(data=data, out_dir="", model=args.model, knobs={**knobs, **VARIANTS[name]},
                                    init_seed=seed, embed_seed=seed, data_seed=args.data_seed,
                                    batch_size=args.batch_size, max_steps=args.steps, lr=args.lr,
                                    weight_decay=args.weight_decay, warmup=min(100, args.steps // 10),
                                    ckpt_every=args.steps, eval_every=args.steps, eval_sequences=64,
                                    log_every=max(args.steps // 4, 1), device=args.device,
                                    micro_batch=args.micro_batch, compile=args.compile)
            # a run's directory is named by everything that defines it, so runs of any two settings never mix
            defining = {k: getattr(cfg, k) for k in (*train.RUN_DEFINING, "model", "knobs")}
            key = hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()[:10]
            out_dir = os.path.join(args.out, "testbed", f"{name}_seed{seed}_{key}")
            log = train.ensure(dataclasses.replace(cfg, out_dir=out_dir))
            model = load_model(train.list_checkpoints(out_dir)[-1][1], device=args.device).eval()
            run = dict(seed=seed, **sink_profile(model, tokens, args.eps), val_loss=log["val"][-1]["val_loss"],
                       rate_by_length={L: sink_rate(model, tokens[:, :L], args.eps) for L in args.lengths})
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


# ----------------------------------------------------------------------------- Fig 12 on natural text

def exp_calibration(args) -> dict:
    """Fig 12 / Table 7 at the scale the flags set: the variants trained from one init on one data order
    (natural text), their sink rate at each length on the evaluation text, and its perplexity."""
    label = f"{train.corpus_label(args.train_text)}_{args.tokenizer}"
    data = args.train_text if prepared_train_text(args) else train.prepared(
        [args.train_text], os.path.join(args.out, "calibration", label), args.tokenizer, args.data_from)
    res = {}
    for name in args.variants:
        out_dir = os.path.join(args.out, "calibration", name)
        cfg = train.TrainConfig(data=data, out_dir=out_dir, model=args.model, knobs={**LLAMA_KNOBS, **args.knobs,
                                **VARIANTS[name]}, init_seed=args.seeds[0], data_seed=args.data_seed,
                                batch_size=args.batch_size, max_steps=args.steps, lr=args.lr,
                                weight_decay=args.weight_decay, ckpt_every=args.steps, eval_every=args.steps,
                                log_every=50, device=args.device, micro_batch=args.micro_batch, compile=args.compile)
        train.ensure(cfg)
        path = train.list_checkpoints(out_dir)[-1][1]
        model = load_model(path, device=args.device).eval()
        stream = calibration_text(args)
        rates = {T: sink_rate(model, windows(stream, T, args.sequences, args.data_seed), args.eps)
                 for T in args.lengths}
        T = max(rates)
        x = windows(stream, T, args.sequences, 1)
        with torch.no_grad():
            x = x.to(args.device)
            loss = float(np.mean([model(x[i:i + 16, :-1], x[i:i + 16, 1:])[1].item() for i in range(0, len(x), 16)]))
        if not math.isfinite(loss):
            raise FloatingPointError(f"{name}: non-finite loss on the evaluation text ({path}); no perplexity from it")
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

# The testbed's recipe (docs/sinks.md: the search that found it): no BOS, Bigram-Backcopy on iid tokens, learned
# positions, 2 layers of 1 head, context 16, weight decay 0.5 -- its baseline forms a first-position sink.
TESTBED_KNOBS = dict(position="learned", n_layer=2, n_head=1, block_size=16)
EXP_DEFAULTS = {None: dict(lengths=[64], steps=600, batch_size=32, lr=3e-3, weight_decay=0.1),
                "testbed": dict(steps=3000, batch_size=64, lr=1e-3, weight_decay=0.5)}     # calibration: None's


def main(argv=None):
    p = ArgumentParser(prog="sink.py", description="Attention sinks: the metric on any model, the causal "
                       "interventions, and a testbed where calibration can be put to the test.")
    p.add_argument("model_path", nargs="?", metavar="MODEL", help="a train.py checkpoint or Hugging Face directory")
    p.add_argument("--exp", choices=("interventions", "variance", "testbed", "calibration"), default=None)
    g = p.add_argument_group("inputs (Gu et al.: 100 sequences of 64, eps 0.3)")
    g.add_argument("--text", default=None, help="text file or corpus name (wikitext2, ...), tokenized by the model's "
                   "own tokenizer; default: random tokens")
    g.add_argument("--ids", default=None, help="a file of token ids (.npy or train.py .bin) instead of text")
    g.add_argument("--tokenizer", default=None, help="override the tokenizer: bytes, gpt2, or a tokenizer.json dir")
    g.add_argument("--bos", type=parse_bool, default=False, metavar="on|off",
                   help="prepend the model's bos_token_id (config.json); --exp testbed: train on documents that "
                   "open with a BOS token")
    g.add_argument("--sequences", type=int, default=100)
    g.add_argument("--lengths", type=int, nargs="+", default=None, help="sequence lengths T (default 64; --exp "
                   "testbed: its context)")
    g.add_argument("--eps", type=float, default=EPS)
    g.add_argument("--data_seed", type=seed_int, default=1234)
    add_device_flags(g, "load the model in this dtype (default: its own); the metric is float32 either way")
    g = p.add_argument_group("--exp interventions")
    g.add_argument("--k", type=int, nargs="+", default=None, help="1-indexed positions (default T/8, T/4, T/2)")
    g.add_argument("--layer", type=int, default=1, help="layer (0-indexed) of the variance amplification")
    g.add_argument("--lambdas", type=float, nargs="+", default=[1, 2, 4, 8, 16])
    g.add_argument("--mu", choices=("batch", "sequence"), default="batch",
                   help="amplify around the batch mean at position k, or around the sequence mean")
    g = p.add_argument_group("--exp testbed / calibration (models trained here)")
    add_config_flags(p, default_model="tiny")
    g.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["baseline"],
                   help=f"mechanisms trained side by side, each against the baseline seed by seed: "
                   f"{', '.join(VARIANTS)}")
    g.add_argument("--seeds", type=seed_int, nargs="+", default=list(range(10)), help="default 0 ... 9")
    g.add_argument("--steps", type=int, default=None, help="default: testbed 3000, calibration 600")
    g.add_argument("--batch_size", type=int, default=None, help="default: testbed 64, calibration 32")
    g.add_argument("--lr", type=float, default=None, help="default: testbed 1e-3, calibration 3e-3")
    g.add_argument("--weight_decay", type=float, default=None, help="default: testbed 0.5, calibration 0.1")
    g.add_argument("--testbed_tokens", type=int, default=2_000_000)
    g.add_argument("--testbed_vocab", type=int, default=64, help="the task's tokens (4 of them triggers)")
    g.add_argument("--successors", type=int, default=0, help="likely successors of each token (Guo et al.: a few); "
                   "0: iid tokens, only the copy is predictable")
    g.add_argument("--recall", type=int, default=0, help="0: Bigram-Backcopy; > 0: its induction variant (see "
                   "bigram_backcopy)")
    g.add_argument("--train_text", default="shakespeare", help="--exp calibration: training corpus (train.py name, "
                   "a text file, or a directory that train.py prepare wrote)")
    g.add_argument("--micro_batch", type=int, default=None, help="sequences per forward (train.py; default "
                   "--batch_size)")
    g.add_argument("--compile", type=parse_bool, default=False, metavar="on|off", help="torch.compile the training")
    g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (train.py --from)")
    p.add_argument("--out", default="out/sink")
    args = p.parse_args(argv)
    for key, value in EXP_DEFAULTS.get(args.exp, EXP_DEFAULTS[None]).items():      # the flags left unset
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.knobs = config_overrides(args)
    if args.exp == "testbed":
        args.knobs = {**TESTBED_KNOBS, **args.knobs}
        args.lengths = args.lengths or [args.knobs["block_size"]]
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
            results[args.exp] = dict(interventions=exp_interventions, variance=exp_variance, testbed=exp_testbed,
                                     calibration=exp_calibration)[args.exp](args)
        update_results(os.path.join(args.out, "results.json"), results, args.device, args.dtype)


def check_args(p, args) -> None:
    """Every count, range and file of the command line, against the model it will run on (its config only),
    before any work."""
    if args.sequences < 1 or min(args.lengths) < 2 or not 0 < args.eps < 1:
        p.error("need --sequences >= 1, --lengths >= 2 and 0 < --eps < 1")
    if args.text and args.ids:
        p.error("give --text or --ids, not both")
    if args.exp in (None, "interventions", "variance") and not args.model_path:
        p.error("give a MODEL to measure" + (", or --exp NAME" if args.exp is None else f" (--exp {args.exp})"))
    if args.exp in ("testbed", "calibration") and args.model_path:
        p.error(f"--exp {args.exp} trains its own models; drop MODEL")
    check_output(args.out)
    for name in ("steps", "batch_size", "testbed_tokens", "testbed_vocab"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.exp not in ("testbed", "calibration") and (args.micro_batch is not None or args.compile):
        p.error("--micro_batch and --compile are for the models --exp testbed and calibration train")
    if args.micro_batch is not None and (args.micro_batch < 1 or args.batch_size % args.micro_batch):
        p.error(f"--micro_batch must divide --batch_size {args.batch_size}, got {args.micro_batch}")
    if not math.isfinite(args.lr) or args.lr <= 0 or args.recall < 0:
        p.error("need --lr > 0 and --recall >= 0")
    if not math.isfinite(args.weight_decay) or args.weight_decay < 0:
        p.error(f"--weight_decay must be >= 0, got {args.weight_decay}")
    if args.exp == "testbed":
        if "vocab_size" in args.knobs:
            p.error("the testbed's vocabulary is --testbed_vocab (plus BOS), not --vocab_size")
        if args.testbed_vocab < 8 or not 0 <= args.successors <= args.testbed_vocab - 4:
            p.error("need --testbed_vocab >= 8 (4 ids are triggers) and 0 <= --successors <= --testbed_vocab - 4")
        args.testbed_block = args.knobs["block_size"]
        for name in args.variants:                       # every variant's model can be built, before any trains
            try:
                cfg = get_config(args.model, **{**LLAMA_KNOBS, **args.knobs, **VARIANTS[name]})
            except ValueError as e:
                raise ValueError(f"--variants {name} sets {VARIANTS[name]}, which these flags make impossible: "
                                 f"{e}") from None
            if cfg.sublayers == "mlp":
                raise ValueError("the testbed measures attention: --sublayers mlp has none")
        if max(args.lengths) > args.testbed_block:
            p.error(f"--lengths {max(args.lengths)} exceeds the testbed's context {args.testbed_block}")
        val_windows = int(args.testbed_tokens * 0.02) // (args.testbed_block + 1)
        if val_windows < max(64, args.sequences):
            p.error(f"--testbed_tokens {args.testbed_tokens} leave {val_windows} held-out sequences; "
                    f"{max(64, args.sequences)} are needed")
    if args.exp == "calibration":
        args.tokenizer = calibration_tokenizer(args)
        for name in args.variants:
            cfg = get_config(args.model, **{**LLAMA_KNOBS, **args.knobs, **VARIANTS[name]})
            if cfg.sublayers == "mlp":
                raise ValueError("--exp calibration measures attention: --sublayers mlp has none")
        if max(args.lengths) > cfg.block_size:
            raise ValueError(f"--lengths {max(args.lengths)} exceeds the trained models' block_size {cfg.block_size}")
        windows(calibration_text(args), max(args.lengths), args.sequences, 0, name=args.text or "wikitext2")
    if args.model_path:
        cfg = read_model_config(args.model_path)
        if cfg.sublayers == "mlp":
            raise ValueError(f"{args.model_path} has no attention layers (sublayers=mlp): no sink to measure")
        too_long = [T for T in args.lengths if T > cfg.block_size]
        if too_long:
            raise ValueError(f"--lengths {too_long[0]} exceeds the context of {args.model_path} "
                             f"({cfg.block_size} tokens)")
        if args.bos:
            bos_token_id(args.model_path)                   # refuses a model that names no BOS
        if args.text or args.ids:                           # read once: enough windows for every length?
            stream = input_stream(args, args.model_path)
            for T in args.lengths:
                windows(stream, T, args.sequences, args.data_seed, 0 if args.bos else None, args.text or args.ids)
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
