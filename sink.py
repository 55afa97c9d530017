"""
sink.py: attention sinks -- measure them, trace them to the first position's variance, remove them.

Paper Section 6.2; the metric of Gu et al. (2024); the interventions of "The Structural Origin of
Attention Sink". Causal attention is a running average: the aggregated output at 1-indexed position t
averages t values, so its variance falls like 1/t (theory.attn0_variance) and position 1, which
averages nothing, is a variance outlier from birth. Training then latches onto it: the first token
becomes a *sink* that soaks up attention. Undo the 1/t at birth (calibration amplify / attenuate, or
a head-wise RMSNorm, model.py knobs) and the sink should not form.

Metric (Gu et al.): importance of key k = its mean attention over the queries that can see it,
alpha_k = (1 / (T - k + 1)) sum_{t >= k} A_tk; a head is a sink head when alpha_1 > eps = 0.3
(strict); the sink rate is the percentage of (sequence, layer, head) triples that are sink heads.

    python sink.py --exp calibration --train_text ../shared/data/tinyshakespeare.txt \\
                   --text ../shared/data/wikitext2_test.txt    # Fig 12 / Table 7, small CPU sizes
    python sink.py --exp arbitrary        # mask edit and variance amplification at position k
    python sink.py --exp birth            # first-position variance at init, sink rate through training
    python sink.py out/train/ckpt_0000300.pt --data FILE     # measure a checkpoint or a GPT-2 HF directory
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

import theory
import train
from model import GPT, add_config_flags, config_overrides, get_tokenizer, read_checkpoint, write_json

VARIANTS = {   # Section 6.2.1 and head-wise RMSNorm: the knob flags each variant adds to the baseline
    "baseline": [],
    "amplify": ["--calibration", "amplify"],
    "attenuate": ["--calibration", "attenuate"],
    "head_norm": ["--head_norm", "on"],
}
EXPERIMENTS = ("calibration", "arbitrary", "birth")
# the trained variants are LLaMA-style like the paper's Nano LLaMA-2; knob flags override these
LLAMA_KNOBS = dict(norm="rmsnorm", activation="swiglu", bias=False, tie_embeddings=False)


# ----------------------------------------------------------------------------- metrics

def sink_scores(attn: torch.Tensor, check: bool = True) -> torch.Tensor:
    """Importance of every key, (..., T) from causal attention (..., T, T) (queries x keys):
    alpha_k = mean over the queries t >= k of A[t, k] (1-indexed k: divide by T - k + 1).
    alpha_1 >= 1/T always (A_11 = 1); uniform causal attention gives alpha_1 = H_T / T."""
    if attn.dim() < 2 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention must be (..., T, T), got {tuple(attn.shape)}")
    a = attn.float()
    if check:
        if a.triu(diagonal=1).abs().max() > 1e-6:
            raise ValueError("attention puts weight on later keys: sink scores need causal attention")
        if (a.sum(dim=-1) - 1).abs().max() > 1e-3 or a.min() < 0:
            raise ValueError("attention rows must be probability distributions (>= 0, summing to 1)")
    T = a.shape[-1]
    seen_by = torch.arange(T, 0, -1, device=a.device, dtype=torch.float32)   # T - k + 1 queries see key k
    return a.sum(dim=-2) / seen_by


@torch.no_grad()
def key_scores(model: GPT, tokens: torch.Tensor, batch_size: int = 8, attn_mask=None, hooks=()) -> torch.Tensor:
    """alpha for every (sequence, layer, head, key): (N, L, H, T) from the model's own attention.
    `hooks`: (module, forward_pre_hook) pairs active during the pass (the interventions)."""
    handles = [m.register_forward_pre_hook(h) for m, h in hooks]
    try:
        out = []
        for i in range(0, len(tokens), batch_size):
            probs = model.trace(tokens[i:i + batch_size], attn_probs=True, attn_mask=attn_mask)["attn_probs"]
            out.append(torch.stack([sink_scores(p, check=attn_mask is None) for p in probs], dim=1).cpu())
        return torch.cat(out)
    finally:
        for h in handles:
            h.remove()


def sink_rate(model: GPT, tokens: torch.Tensor, eps: float = 0.3, batch_size: int = 8) -> float:
    """Percentage of (sequence, layer, head) triples whose first token has alpha_1 > eps."""
    alpha_1 = key_scores(model, tokens, batch_size)[..., 0]
    return 100.0 * (alpha_1 > eps).float().mean().item()


@torch.no_grad()
def position_variance(model: GPT, tokens: torch.Tensor, batch_size: int = 8) -> np.ndarray:
    """Variance of each head's aggregated attention output (what W_O sees, after calibration and
    head_norm), per layer and 1-indexed position: (L, T), pooled over sequences, heads and head
    dimensions around the per-(position, head, dim) mean across sequences."""
    s1 = s2 = None
    n = 0
    for i in range(0, len(tokens), batch_size):
        heads = model.trace(tokens[i:i + batch_size], head_out=True)["head_out"]
        h = torch.stack(heads, dim=1).double()                 # (B, L, H, T, hd)
        s1 = h.sum(0) if s1 is None else s1 + h.sum(0)
        s2 = (h ** 2).sum(0) if s2 is None else s2 + (h ** 2).sum(0)
        n += h.shape[0]
    var = s2 / n - (s1 / n) ** 2                                 # (L, H, T, hd)
    return var.mean(dim=(1, 3)).cpu().numpy() * n / max(n - 1, 1)


def dimension_disparity(h: torch.Tensor) -> torch.Tensor:
    """max_j |h_j| / mean_j |h_j| over the last dimension: ~3-4 for a Gaussian vector of width
    ~1000, far larger when a few "super" dimensions carry the token."""
    a = h.float().abs()
    return a.amax(dim=-1) / a.mean(dim=-1)


@torch.no_grad()
def massive_activations(model: GPT, tokens: torch.Tensor) -> list:
    """Per residual-stream state (input, each block): the top |activation|, the median |activation|,
    their ratio, the position holding the top, and the first token's dimension disparity beside the
    other tokens' (Sun et al. 2024: "massive" = > 100 and ~1000x the median)."""
    states = model.trace(tokens, hidden="all")["hidden"][:-1]
    rows = []
    for layer, h in enumerate(states):
        a = h.float().abs()
        top = a.max()
        pos = int((a == top).nonzero()[0, 1]) + 1
        disp = dimension_disparity(h)
        rows.append(dict(state=layer, top=top.item(), median=a.median().item(), ratio=(top / a.median()).item(),
                         top_position=pos, disparity_first=disp[:, 0].mean().item(),
                         disparity_rest=disp[:, 1:].mean().item() if h.shape[1] > 1 else None))
    return rows


# ----------------------------------------------------------------------------- interventions

def self_only_mask(T: int, k: int) -> torch.Tensor:
    """The mask edit: causal, except that 1-indexed token k attends only to itself -- it then
    aggregates nothing, like the first token."""
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    mask[k - 1, :k - 1] = False
    return mask


def amplify_hook(k: int, lam: float, center: bool = True):
    """A forward pre-hook for attn.c_proj (W_O) that rescales token k's aggregated attention output:
    center=True  o'_k = mu + lam (o_k - mu), mu = the mean output over the sequence's positions
                 (variance amplification: token k becomes a variance outlier, like position 1);
    center=False o'_k = lam o_k (plain scaling, the control)."""
    def hook(module, inputs):
        (o,) = inputs                                            # (B, T, H * hd)
        o = o.clone()
        mu = o.mean(dim=1) if center else torch.zeros_like(o[:, 0])
        o[:, k - 1] = mu + lam * (o[:, k - 1] - mu)
        return (o,)
    return hook


# ----------------------------------------------------------------------------- data

def text_windows(path: str, tokenizer: str, T: int, n: int, seed: int = 0) -> torch.Tensor:
    """n windows of T tokens from a text file, at random non-overlapping offsets ("100 randomly
    selected sequences"), tokenized the way the model was trained."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no text file {path!r}; pass one with --text (WikiText-2 test: "
                                f"../shared/data/wikitext2_test.txt)")
    encode, _, _ = get_tokenizer(tokenizer)
    ids = np.array(encode(open(path, encoding="utf-8").read()), dtype=np.int64)
    slots = len(ids) // T
    if slots < 1:
        raise ValueError(f"{path} has {len(ids)} tokens, fewer than one window of {T}")
    rng = np.random.default_rng(seed)
    pick = rng.choice(slots, size=min(n, slots), replace=False)
    return torch.from_numpy(np.stack([ids[s * T:(s + 1) * T] for s in np.sort(pick)]))


def window_loss(model: GPT, tokens: torch.Tensor, batch_size: int = 8) -> float:
    """Mean next-token loss over the windows (for perplexity)."""
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(tokens), batch_size):
            x = tokens[i:i + batch_size]
            total += model(x[:, :-1], x[:, 1:])[1].item() * len(x)
    return total / len(tokens)


# ----------------------------------------------------------------------------- experiments

def train_variant(args, name: str) -> str:
    """Train (or reuse, via --resume) one variant; every variant shares init seed and data order."""
    data = os.path.join(args.out, "data")
    if not os.path.isfile(os.path.join(data, "meta.json")):
        train.prepare([args.train_text], data, tokenizer=args.tokenizer)
    out_dir = os.path.join(args.out, "runs", name)
    knobs = [f"--{k}={('on' if v else 'off') if isinstance(v, bool) else v}"
             for k, v in {**LLAMA_KNOBS, **config_overrides(args)}.items()]
    flags = ["--data", data, "--out_dir", out_dir, "--model", args.model, *knobs, *VARIANTS[name],
             "--init_seed", str(args.seed), "--data_seed", str(args.data_seed), "--max_steps", str(args.steps),
             "--ckpt_every", str(args.ckpt_every), "--eval_every", str(args.steps), "--log_every", "50",
             "--batch_size", str(args.batch_size), "--lr", str(args.lr), "--resume"]
    if args.device:
        flags += ["--device", args.device]
    print(f"--- {name}: python train.py {' '.join(flags)}")
    train.train(train.parse_args(flags))
    return out_dir


def load(path: str, device) -> tuple:
    """(model, info with its "tokenizer") of a train.py checkpoint or a Hugging Face directory. Text
    is tokenized here with tiktoken or bytes only, so of HF models only GPT-2 reads text."""
    if os.path.isdir(path):
        model = GPT.from_pretrained(path, device=device).eval()
        if model.config.position != "learned":     # LLaMA / Qwen2: a sentencepiece/BPE we do not ship
            raise ValueError(f"{path}: only GPT-2 Hugging Face models can be fed text here (tiktoken); "
                             f"LLaMA/Qwen2 tokenizers are not part of this project")
        return model, dict(tokenizer="gpt2")
    return GPT.from_checkpoint(path, device=device).eval(), read_checkpoint(path)


def exp_calibration(args) -> dict:
    """Fig 12 / Table 7: sink rate vs T for baseline / amplify / attenuate / head_norm, same init and
    data order, plus perplexity on the evaluation text."""
    res = {}
    for name in VARIANTS:
        out_dir = train_variant(args, name)
        model, ckpt = load(train.list_checkpoints(out_dir)[-1][1], args.device or "cpu")
        rates = {}
        for T in args.lengths:
            if T > model.config.block_size:
                continue
            tokens = text_windows(args.text, ckpt["tokenizer"], T, args.sequences, args.data_seed)
            rates[T] = sink_rate(model, tokens.to(args.device or "cpu"), args.eps, args.batch_size)
        T = max(rates)
        ppl = math.exp(window_loss(model, text_windows(args.text, ckpt["tokenizer"], T, args.sequences, 1)
                                   .to(args.device or "cpu"), args.batch_size))
        res[name] = dict(sink_rate=rates, ppl=ppl, checkpoint=train.list_checkpoints(out_dir)[-1][1])
        print(f"{name:>10}: sink rate % " + "  ".join(f"T={t}: {r:5.1f}" for t, r in rates.items())
              + f" | ppl {ppl:.2f} (T={T})")
    _plot_rates(args, res)
    return res


def exp_arbitrary(args) -> dict:
    """Sinks at arbitrary positions in the trained baseline: (i) mask edit, (ii) variance
    amplification of token k's attention output at one layer vs plain scaling."""
    path = args.checkpoint or train.list_checkpoints(train_variant(args, "baseline"))[-1][1]
    model, ckpt = load(path, args.device or "cpu")
    T = min(args.lengths[-1], model.config.block_size)
    k = args.k or T // 2
    tokens = text_windows(args.text, ckpt["tokenizer"], T, args.sequences, args.data_seed).to(args.device or "cpu")
    layer = args.layer
    before = key_scores(model, tokens, args.batch_size)
    edited = key_scores(model, tokens, args.batch_size, attn_mask=self_only_mask(T, k).to(tokens.device))
    res = dict(checkpoint=path, T=T, k=k, layer=layer, eps=args.eps,
               mask_edit=dict(alpha_k_before=before[..., k - 1].mean().item(),
                              alpha_k_after=edited[..., k - 1].mean().item(),
                              sink_rate_k_before=100 * (before[..., k - 1] > args.eps).float().mean().item(),
                              sink_rate_k_after=100 * (edited[..., k - 1] > args.eps).float().mean().item(),
                              alpha_1_before=before[..., 0].mean().item(), alpha_1_after=edited[..., 0].mean().item()))
    print(f"mask edit at k={k}: alpha_k {res['mask_edit']['alpha_k_before']:.3f} -> "
          f"{res['mask_edit']['alpha_k_after']:.3f}; sink heads at k {res['mask_edit']['sink_rate_k_before']:.1f}% "
          f"-> {res['mask_edit']['sink_rate_k_after']:.1f}%")
    w_o = model.transformer.h[layer].attn.c_proj
    curves = {"variance amplification": [], "plain scaling (control)": []}
    for lam in args.lambdas:
        for name, center in (("variance amplification", True), ("plain scaling (control)", False)):
            s = key_scores(model, tokens, args.batch_size, hooks=[(w_o, amplify_hook(k, lam, center))])
            curves[name].append(s[:, layer + 1:, :, k - 1].mean().item())   # layers after the edit
    res["amplification"] = dict(lambdas=list(args.lambdas), alpha_k_later_layers=curves)
    for name, ys in curves.items():
        print(f"{name:>26} at layer {layer}: alpha_k in later layers " +
              "  ".join(f"x{lam:g}: {y:.3f}" for lam, y in zip(args.lambdas, ys)))
    _plot_amplification(args, res)
    return res


def exp_birth(args) -> dict:
    """Birth to sink: the first position's variance at init beside theory, then the sink rate at each
    checkpoint of the baseline run."""
    out_dir = train_variant(args, "baseline")
    steps = train.list_checkpoints(out_dir)
    model, ckpt = load(steps[0][1], args.device or "cpu")
    T = min(args.lengths[-1], model.config.block_size)
    tokens = text_windows(args.text, ckpt["tokenizer"], T, args.sequences, args.data_seed).to(args.device or "cpu")
    var = position_variance(model, tokens, args.batch_size)[0]         # layer 1: one running average
    # theory: a running average of t values with correlation-free inputs keeps var / t of position 1
    predicted = theory.attn0_variance(np.arange(1, T + 1), layers=1, sigma2=float(var[0]))
    res = dict(T=T, variance_layer1=var.tolist(), attn0_prediction=predicted.tolist(), sink_rate=[])
    print(f"init, layer 1: var(position 1) / var(position {T}) = {var[0] / var[-1]:.1f} "
          f"(Attn0 theory, uniform attention on uncorrelated inputs: {T})")
    for step, path in steps:
        m, _ = load(path, args.device or "cpu")
        rate = sink_rate(m, tokens, args.eps, args.batch_size)
        res["sink_rate"].append(dict(step=step, rate=rate))
        print(f"step {step:>6}: sink rate {rate:5.1f}%")
    _plot_birth(args, res)
    return res


# ----------------------------------------------------------------------------- figures

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, args, name):
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, name)
    tmp = f"{path}.tmp{os.getpid()}.png"
    fig.tight_layout()
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)
    print(f"wrote {path}")


def _plot_rates(args, res):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, r in res.items():
        ax.plot(list(r["sink_rate"]), list(r["sink_rate"].values()), "o-", label=f"{name} (ppl {r['ppl']:.1f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel(f"sink rate (%), eps={args.eps}")
    ax.legend(fontsize=8)
    _save(fig, args, "fig12_sink_rate.png")
    plt.close(fig)


def _plot_amplification(args, res):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    a = res["amplification"]
    for name, ys in a["alpha_k_later_layers"].items():
        ax.plot(a["lambdas"], ys, "o-", label=name)
    ax.axhline(res["mask_edit"]["alpha_k_after"], ls="--", c="gray", label="mask edit")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("lambda")
    ax.set_ylabel(f"alpha_k (k={res['k']}), layers > {res['layer']}")
    ax.legend(fontsize=8)
    _save(fig, args, "arbitrary_position.png")
    plt.close(fig)


def _plot_birth(args, res):
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    t = np.arange(1, res["T"] + 1)
    a1.loglog(t, res["variance_layer1"], label="measured, layer 1 at init")
    a1.loglog(t, res["attn0_prediction"], "--", label="Attn0: var(1) / t")
    a1.set_xlabel("position t")
    a1.set_ylabel("variance of attention output")
    a1.legend(fontsize=8)
    a2.plot([r["step"] for r in res["sink_rate"]], [r["rate"] for r in res["sink_rate"]], "o-")
    a2.set_xlabel("training step")
    a2.set_ylabel("sink rate (%)")
    _save(fig, args, "birth_to_sink.png")
    plt.close(fig)


# ----------------------------------------------------------------------------- command line

def measure(args) -> dict:
    """`python sink.py CKPT --text FILE`: sink rate vs T, first-token variance and massive activations."""
    model, ckpt = load(args.checkpoint, args.device or "cpu")
    res = dict(checkpoint=args.checkpoint, sink_rate={})
    lengths = [T for T in args.lengths if T <= model.config.block_size]
    if not lengths:
        raise ValueError(f"every --lengths exceeds the model's context {model.config.block_size}")
    for T in lengths:
        tokens = text_windows(args.text, ckpt["tokenizer"], T, args.sequences, args.data_seed)
        res["sink_rate"][T] = sink_rate(model, tokens.to(args.device or "cpu"), args.eps, args.batch_size)
        print(f"T={T:>4}: sink rate {res['sink_rate'][T]:5.1f}%")
    res["massive_activations"] = massive_activations(model, tokens[:args.batch_size].to(args.device or "cpu"))
    for r in res["massive_activations"]:
        print(f"state {r['state']:>2}: top |h| {r['top']:8.2f} at position {r['top_position']:>4}, "
              f"{r['ratio']:7.1f}x the median | disparity first {r['disparity_first']:6.1f}, "
              f"rest {r['disparity_rest']:6.1f}")
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description="Attention sinks: metric, calibration experiment, interventions.")
    p.add_argument("checkpoint", nargs="?", help="a train.py checkpoint or GPT-2 Hugging Face directory to "
                   "measure (or the model of --exp arbitrary)")
    p.add_argument("--exp", choices=EXPERIMENTS + ("all",), default=None)
    p.add_argument("--text", "--data", dest="text", default="../shared/data/wikitext2_test.txt",
                   help="evaluation text (WikiText-2 test)")
    p.add_argument("--train_text", default="../shared/data/tinyshakespeare.txt", help="training text")
    p.add_argument("--tokenizer", default="bytes", choices=("bytes", "gpt2"))
    add_config_flags(p, default_model="tiny")   # the trained variants: preset + LLAMA_KNOBS + these
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--ckpt_every", type=int, default=50)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=42, help="init seed shared by all variants")
    p.add_argument("--data_seed", type=int, default=1234)
    p.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    p.add_argument("--sequences", type=int, default=100)
    p.add_argument("--eps", type=float, default=0.3)
    p.add_argument("--k", type=int, default=None, help="1-indexed position k of --exp arbitrary (default T/2)")
    p.add_argument("--layer", type=int, default=0, help="layer of the variance amplification (0-indexed)")
    p.add_argument("--lambdas", type=float, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--device", default=None)
    p.add_argument("--out", default="out/sink")
    args = p.parse_args(argv)
    if args.exp is None and args.checkpoint is None:
        args.exp = "calibration"
    try:
        run(args)
    except (OSError, ValueError) as e:   # bad input: one line, no traceback
        sys.exit(f"sink.py: error: {e}")


def run(args):
    results = {}
    if args.exp is None:
        results["measure"] = measure(args)
    for name in (EXPERIMENTS if args.exp == "all" else [args.exp] if args.exp else []):
        results[name] = {"calibration": exp_calibration, "arbitrary": exp_arbitrary, "birth": exp_birth}[name](args)
    path = os.path.join(args.out, "results.json")
    old = {}
    if os.path.isfile(path):      # keep the other experiments' results
        old = json.load(open(path))
    write_json(path, {**old, **results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
