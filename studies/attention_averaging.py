"""
studies/attention_averaging.py: attention at init is an average over the positions before it -- what that does to
the tokens of one sequence, and to the first position (paper Section 4.4).

    intra     Fig 8: one sequence of isotropic Gaussian tokens through the preset's blocks as attention alone (no
              residual): the mean pairwise cosine among its tokens after each layer, softmax attention and uniform
              attention on the same weights, beside Attn0's exact value (Prop 5), at n = 64 and 1,024 tokens (those
              within the context), 16 sequences each
    variance  Fig 9: the std of the first attention block's aggregated output (what W_O sees) at each position t,
              on --sequences Gaussian inputs of --seq_len, against std(1) / sqrt(t) (Eq. 2)

Makes docs/reproduce.md's numbers for Figs 8 and 9 (gpt2-nano, block seed 42, embedding seed 0; 512 sequences of
64 for Fig 9); the closed forms alone, against Monte Carlo, are studies/theory_tables.py's:

    python -m studies.attention_averaging                   # both sections: 22 s on 2 cores
    python -m studies.attention_averaging --exp variance --seq_len 1024    # Fig 9 over 1,024 positions

Figures fig8_intra_sequence.png and fig9_position_variance.png, and results.json, under --out.
"""
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import ArgumentParser, figure, print_table, refuse_unused, run_script, save_figure, seed_int
import numpy as np
import torch

import theory
from data import random_batches, random_inputs
from probe import fresh_model, unit
from sink import position_variance
from studies.fresh_probes import add_study_flags, run_sections, study_config

# The architectures each section derives from the preset (the knobs it overrides), checked before any runs.
VARIANTS = {
    "intra": {"softmax": dict(sublayers="attn", residual=False, attention="softmax"),
              "uniform": dict(sublayers="attn", residual=False, attention="uniform")},
    "variance": {"one block": dict(n_layer=1)},
}
LENGTHS, SEQUENCES = (64, 1024), 16         # Fig 8's sequence lengths n and its sequences at each


# ----------------------------------------------------------------------------- Fig 8: attention contracts a sequence

@torch.no_grad()
def intra(args, config) -> dict:
    res = {}
    for T in [t for t in LENGTHS if t <= config.block_size]:
        curves = {}
        for attention in ("softmax", "uniform"):
            model = fresh_model(args, config, args.seed, **VARIANTS["intra"][attention])
            per_layer = np.zeros((config.n_layer, SEQUENCES))
            w = model.transformer.wte.weight
            for i, x in enumerate(random_batches("gaussian", SEQUENCES, T, 1, args.data_seed, width=config.n_embd)):
                hidden = model.trace(embeds=x.to(w.device, w.dtype), hidden="all")["hidden"]
                for layer in range(config.n_layer):
                    per_layer[layer, i] = float(theory.mean_pairwise_cosine(unit(hidden[layer + 1][0]).sum(0), T))
            curves[attention] = dict(mean=per_layer.mean(1).tolist(), std=per_layer.std(1).tolist())
        curves["Attn0 theory"] = [theory.attn0_intra_cosine(T, layer) for layer in range(1, config.n_layer + 1)]
        res[T] = curves
        print(f"Fig 8: intra-sequence cosine, n = {T}, {SEQUENCES} sequences, {args.model} attention-only, no "
              f"residual")
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


# ----------------------------------------------------------------------------- Fig 9: the first position's variance

@torch.no_grad()
def variance(args, config) -> dict:
    T = args.seq_len
    model = fresh_model(args, config, args.seed, **VARIANTS["variance"]["one block"])
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


SECTIONS = {"intra": intra, "variance": variance}


# ----------------------------------------------------------------------------- the study

def main(argv=None):
    p = ArgumentParser(prog="studies.attention_averaging", description="Attention at init averages over positions: "
                       "the contraction within a sequence (Fig 8) and the first position's variance (Fig 9).")
    p.add_argument("--seed", type=seed_int, default=42, help="block init seed")
    add_study_flags(p, SECTIONS, "out/attention_averaging", compile=False)   # no probe() pass to compile
    args = p.parse_args(argv)
    if "variance" not in args.exp and "all" not in args.exp:
        refuse_unused(args, ("sequences", "seq_len", "batch_size"), f"--exp intra runs {SEQUENCES} sequences at each "
                      f"of n = {', '.join(map(str, LENGTHS))}: {{flags}} would do nothing", p)
    config, exps = study_config(args, SECTIONS, VARIANTS)
    if "variance" in exps and config.sublayers == "mlp":
        raise ValueError("--exp variance measures attention outputs: the model needs attention layers (not "
                         "--sublayers mlp)")
    run_sections(args, config, SECTIONS, exps)


if __name__ == "__main__":
    run_script(main, "studies.attention_averaging")
