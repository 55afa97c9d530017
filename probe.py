"""
Probe a model at birth with random inputs: the extreme token preference (paper Section 3).

Feed a freshly initialized transformer N sequences of uniformly random token ids and count
which token it predicts (argmax of the last-position logits). A blank slate would spread the
N predictions over the vocabulary; a born-biased model piles them onto a few seed-dependent
tokens, orders of magnitude above uniform (Table 1, Fig 1). The significance of the top-1
count is the binomial upper tail under the uniform null, Bonferroni-corrected over the
vocabulary (Appendix B.2), computed in log space so it never underflows.

    python probe.py                       # Table 1 protocol, gpt2-nano, seeds 42 43, ~1 min on 2 CPU cores
    python probe.py --n 10000 --seq_len 64 256 1024 --device cuda     # the paper's size
"""
import argparse
import dataclasses
import math
import os
import time

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import binom

from init import build
from model import add_config_flags, config_from_flags, write_json


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


# ----------------------------------------------------------------------------- measurements

def random_token_batches(n: int, seq_len: int, vocab_size: int, batch_size: int, seed: int, device):
    """Yield n uniform random token sequences in batches, generated on the device from one seeded
    generator -- never all held in memory. The same (n, seq_len, batch_size, seed) gives the
    same tokens, so two models can be fed identical inputs."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        yield torch.randint(0, vocab_size, (b, seq_len), generator=g, device=device)


@torch.no_grad()
def next_token_counts(model, n: int, seq_len: int, batch_size: int = 32, data_seed: int = 1234) -> np.ndarray:
    """How often each token is the argmax next token over n random sequences (length vocab_size)."""
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    counts = torch.zeros(vocab, dtype=torch.int64, device=device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else _nullcontext()
    for idx in random_token_batches(n, seq_len, vocab, batch_size, data_seed, device):
        with autocast:
            logits = model(idx)          # (B, vocab): the LM head runs on the last position only
        counts += torch.bincount(logits.argmax(dim=-1), minlength=vocab)
    return counts.cpu().numpy()


def token_preference(counts: np.ndarray) -> dict:
    """Table 1's row from argmax counts: top-1 id, its frequency, ratio to uniform, log10 p."""
    n, vocab = int(counts.sum()), len(counts)
    top1 = int(counts.argmax())
    c = int(counts[top1])
    return dict(top1_id=top1, top1_count=c, top1_freq=c / n, ratio_to_uniform=c / (n / vocab),
                log10_p=log10_bonferroni_p(c, n, vocab), n=n, distinct_predicted=int((counts > 0).sum()))


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ----------------------------------------------------------------------------- the script

def plot_histogram(path, counts_by_seed: dict, baseline: np.ndarray, title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    k = 50
    for label, counts in counts_by_seed.items():
        ax.bar(np.arange(k), np.sort(counts)[::-1][:k], alpha=0.6, label=label)
    ax.plot(np.arange(k), baseline[:k], "r--", label="uniform draws (baseline)")
    ax.set_yscale("log")
    ax.set_xlabel("rank of predicted token")
    ax.set_ylabel("count of argmax next token")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description="Extreme token preference of a randomly initialized transformer "
                                                 "(paper Table 1 / Fig 1).")
    add_config_flags(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43], help="block init seeds")
    parser.add_argument("--embed_seed", type=int, default=0, help="shared embedding / LM head seed")
    parser.add_argument("--n", type=int, default=512, help="random sequences per (seed, length)")
    parser.add_argument("--seq_len", type=int, nargs="+", default=[64])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--data_seed", type=int, default=1234, help="seed of the random token inputs")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", default="out/probe")
    args = parser.parse_args()
    config = config_from_flags(args)
    for T in args.seq_len:
        if T > config.block_size:
            parser.error(f"--seq_len {T} exceeds the model's block_size {config.block_size}")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    results = dict(config=dataclasses.asdict(config), args=vars(args), token_preference=[])
    counts_for_plot = {}
    print(f"{args.model}, {args.n} random sequences per row, vocab {config.vocab_size}, device {args.device}")
    print(f"{'seed':>5} {'seq_len':>7} {'top1_id':>8} {'freq':>8} {'x uniform':>10} {'log10 p':>9} {'tok/s':>8}")
    for seed in args.seeds:
        model = build(config, seed, args.embed_seed, device=args.device, dtype=getattr(torch, args.dtype)).eval()
        for T in args.seq_len:
            t0 = time.time()
            counts = next_token_counts(model, args.n, T, args.batch_size, args.data_seed)
            dt = time.time() - t0
            row = dict(seed=seed, seq_len=T, **token_preference(counts), seconds=dt, tokens_per_s=args.n * T / dt)
            results["token_preference"].append(row)
            counts_for_plot[f"seed {seed}, T={T}"] = counts
            print(f"{seed:>5} {T:>7} {row['top1_id']:>8} {100 * row['top1_freq']:>7.2f}% "
                  f"{row['ratio_to_uniform']:>10.1f} {row['log10_p']:>9.1f} {row['tokens_per_s']:>8.0f}")
    os.makedirs(args.out, exist_ok=True)
    plot_histogram(os.path.join(args.out, "fig1_token_preference.png"), counts_for_plot,
                   uniform_baseline(args.n, config.vocab_size),
                   f"{args.model} at init: argmax next token over {args.n} random sequences")
    write_json(os.path.join(args.out, "results.json"), results)
    print(f"wrote {args.out}/results.json and {args.out}/fig1_token_preference.png")


if __name__ == "__main__":
    main()
