"""
studies/contraction_origin.py: where the contraction comes from -- fresh inits of architectures derived from one
preset (its sublayers, activation, norm and residual turned on and off), each probed on random Gaussian inputs by
probe.py's pass (paper Sections 4.1-4.3).

    ablation   Fig 3, Table 2, Fig 4 / Fig 7: the full model, self-attention only and MLP only, from one seed: the
               pairwise cosine of last-token states at every layer (which sublayer contracts) and the top-1 token's
               frequency and log10 p (which prefers tokens)
    mlp0       Fig 5: residual-free, norm-free, bias-free MLP blocks (MLP0, Definition 1) with ReLU and with tanh on
               the same weights, beside the MLP-only model and Prop 2's arc-cosine map
    layernorm  Fig 6: the MLP pre-activation's std (what GELU sees) per layer of the MLP-only model, with its norm
               and without; for GELU, the asymmetry that std engages (mean over sd) and the one-layer MLP0 cosine
               it gives (theory.gelu_mlp0_cosine), beside the final cosine
    table3     Table 3 on model blocks: the last-position cosine after MLP0, MLP0 -> MLP0, MLP0 -> Attn0 and
               Attn0 -> MLP0 (uniform attention through W_V, W_O) on iid N(0, I) tokens, beside Prop 4's values
               (the closed forms against Monte Carlo alone: studies/theory_tables.py)

Makes docs/reproduce.md's numbers for Figs 3-7, Table 2 and Table 3 (gpt2-nano, block seed 42, embedding seed 0,
512 sequences of 64), and the README's Table 2 rows:

    python -m studies.contraction_origin                    # every section: 3 min 36 s on 2 cores
    python -m studies.contraction_origin --exp ablation     # 68 s on 2 cores

Figures fig3_ablation_preference.png, fig7_ablation_layers.png and fig5_mlp0.png, and results.json, under --out.
"""
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import ArgumentParser, print_table, run_script, seed_int
import numpy as np
import torch

import theory
from data import random_batches
from probe import (PairwiseCosine, fresh_model, layer_rows, plot_layers, plot_preference,
                   run_probe, token_preference)
from studies.fresh_probes import add_study_flags, run_sections, study_config

# The architectures each section derives from the preset (the knobs it overrides), declared once here so that a
# combination the flags make impossible is refused before any section runs.
MLP0 = dict(sublayers="mlp", residual=False, norm="none", bias=False)            # W2 act(W1 x): Definition 1
ATTN0 = dict(sublayers="attn", residual=False, norm="none", attention="uniform", bias=False, position="none")
VARIANTS = {
    "ablation": {"full": dict(sublayers="both"), "self-attention-only": dict(sublayers="attn"),
                 "MLP-only": dict(sublayers="mlp")},
    "mlp0": {"relu": dict(MLP0, activation="relu"), "tanh": dict(MLP0, activation="tanh"),
             "mlp-only": dict(sublayers="mlp")},
    "layernorm": {"with norm": dict(sublayers="mlp"), "without norm": dict(sublayers="mlp", norm="none")},
    "table3": {"MLP0": dict(MLP0, activation="relu", n_layer=1),
               "MLP0 -> MLP0": dict(MLP0, activation="relu", n_layer=2), "Attn0": dict(ATTN0, n_layer=1)},
}


# ----------------------------------------------------------------------------- Fig 3, Table 2, Fig 4 / 7: ablation

def ablation(args, config) -> dict:
    res, hist = {}, {}
    for mode, knobs in VARIANTS["ablation"].items():
        r = run_probe(args, fresh_model(args, config, args.seed, **knobs), kind="gaussian")
        res[mode] = dict(cosine=r["cosine"], **token_preference(r["counts"]))
        hist[mode] = np.sort(r["counts"])[::-1][:200].tolist()
    print(f"Table 2 / Fig 7 / Fig 4: Gaussian inputs, {args.model} seed {args.seed}, {args.sequences} sequences "
          f"of {args.seq_len}; cosine of final-norm last-token states")
    print_table([dict(mode=m, cosine=f"{r['cosine'][-1]['mean']:.4f}", p_bound=f"{r['cosine'][-1]['p_bound']:.1e}",
                      top1_freq=f"{100 * r['top1_freq']:.2f}%", log10_p_top1=f"{r['log10_p']:.1f}")
                 for m, r in res.items()])
    print_table(layer_rows({m: r["cosine"] for m, r in res.items()}))
    plot_layers(os.path.join(args.out, "fig7_ablation_layers.png"), {m: r["cosine"] for m, r in res.items()},
                "Fig 4 / Fig 7: which sublayer contracts")
    plot_preference(os.path.join(args.out, "fig3_ablation_preference.png"), hist,
                    "Fig 3: token preference by ablation")
    return res


# ----------------------------------------------------------------------------- Fig 5: MLP0, ReLU against tanh

def mlp0(args, config) -> dict:
    stacks = {}
    for act in ("relu", "tanh"):   # same seed: identical weights, only the nonlinearity differs
        model = fresh_model(args, config, args.seed, **VARIANTS["mlp0"][act])
        stacks[f"MLP0 {act}"] = run_probe(args, model, kind="gaussian")["cosine"]
    model = fresh_model(args, config, args.seed, **VARIANTS["mlp0"]["mlp-only"])
    label = f"MLP-only ({config.activation}, {config.norm}, residual)"
    stacks[label] = run_probe(args, model, kind="gaussian")["cosine"]
    closed_form = [theory.mlp0_cosine(layer) for layer in range(config.n_layer + 1)]
    print(f"Fig 5: inter-sequence cosine through MLP blocks, {args.model} width, Gaussian inputs")
    print_table(layer_rows(stacks, extra={"ReLU theory": closed_form}))
    plot_layers(os.path.join(args.out, "fig5_mlp0.png"), stacks, "Fig 5: MLP0 with ReLU vs tanh (same weights)",
                closed_forms={"ReLU MLP0 theory (Prop 2)": closed_form})
    return dict(stacks=stacks, theory=closed_form)


# ----------------------------------------------------------------------------- Fig 6: LayerNorm engages GELU

def layernorm(args, config) -> dict:
    """Std of the MLP pre-activation (the c_fc output, what GELU sees) per layer, with the norm and
    without it: LayerNorm decides how much of GELU's asymmetry is engaged."""
    res = {}
    for label, knobs in ((f"with {config.norm}", VARIANTS["layernorm"]["with norm"]),
                         ("without norm", VARIANTS["layernorm"]["without norm"])):
        model = fresh_model(args, config, args.seed, **knobs)
        moments = [torch.zeros(3, dtype=torch.float64) for _ in model.transformer.h]   # sum, sum of squares, count

        def record(acc):
            def hook(module, inputs, out):
                o = out.double()
                acc.add_(torch.stack([o.sum(), (o * o).sum(), torch.tensor(float(o.numel()), dtype=torch.float64,
                                                                              device=o.device)]).cpu())
            return hook

        hooks = [b.mlp.c_fc.register_forward_hook(record(m)) for b, m in zip(model.transformer.h, moments)]
        r = run_probe(args, model, kind="gaussian")
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


# ----------------------------------------------------------------------------- Table 3 on model blocks

@torch.no_grad()
def table3(args, config) -> dict:
    """ReLU MLP blocks without norm, residual or bias (MLP0: W2 relu(W1 x), the extra linear W2 preserves cosines
    at large width) and uniform-attention blocks (Attn0 through W_V, W_O), chained through `embeds`. Last position
    of two different sequences."""
    seed, T = args.seed, args.seq_len
    m1 = fresh_model(args, config, seed, **VARIANTS["table3"]["MLP0"])
    m2 = fresh_model(args, config, seed, **VARIANTS["table3"]["MLP0 -> MLP0"])   # its first block is m1's block
    a1 = fresh_model(args, config, seed + 1, **VARIANTS["table3"]["Attn0"])
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


SECTIONS = {"ablation": ablation, "mlp0": mlp0, "layernorm": layernorm, "table3": table3}


# ----------------------------------------------------------------------------- the study

def main(argv=None):
    p = ArgumentParser(prog="studies.contraction_origin", description="Where the contraction comes from: fresh "
                       "inits of architectures derived from one preset, probed on Gaussian inputs (Sections 4.1-4.3).")
    p.add_argument("--seed", type=seed_int, default=42, help="block init seed of every variant (table3's Attn0: the "
                   "next seed)")
    add_study_flags(p, SECTIONS, "out/contraction_origin")
    args = p.parse_args(argv)
    config, exps = study_config(args, SECTIONS, VARIANTS)
    if "table3" in exps and args.seq_len < 2:
        raise ValueError("--exp table3 compares two positions: --seq_len must be at least 2")
    run_sections(args, config, SECTIONS, exps)


if __name__ == "__main__":
    run_script(main, "studies.contraction_origin")
