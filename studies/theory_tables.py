"""
studies/theory_tables.py: every closed form of the paper beside its Monte Carlo twin (Section 4, Appendix A).

theory.py holds the forms; this study puts them side by side in tables and figures:

    Prop 2 / Fig 5   ReLU MLP0's arc-cosine map against simulated networks over 12 layers; tanh stays at 0
    Table 3 / Prop 4 MLP0, MLP0 -> MLP0, MLP0 -> Attn0, Attn0 -> MLP0 at n = 128 (paper: 0.31 / 0.49 / 0.98)
    Fig 6            GELU's asymmetry as a function of its input's width (why LayerNorm matters)
    Prop 5 / Fig 8   Attn0's intra-sequence cosine, exact (A^L), continuum (Gamma functions) and simulated, and
                     where the continuum limit fails
    Eq. 2 / Fig 9    the variance at position t after L Attn0 layers, exact and simulated
    Attn0 at init    how close a GPT-2-init softmax attention is to Attn0, layer by layer (gpt2-nano; not --quick)

Makes the README's and docs/theory.md's numbers and figures (theory_fig5.png, theory_fig8.png):

    python -m studies.theory_tables          # 40 s on 2 cores
    python -m studies.theory_tables --quick  # smaller Monte Carlo, no GPT-2 check: a few seconds
"""
import math
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, check_output, figure, flag_type, lock_dir, print_table, run_script, save_figure,
                    seed_int, update_results)
import numpy as np
import torch

from init import build
from model import get_config, qkv_sizes
from theory import (RHO1, all_pairs_mean, arccos_map, attn0_intra_cosine, attn0_intra_cosine_limit,
                    attn0_intra_cosine_mc, attn0_last_cosine, attn0_n_for, attn0_variance, attn0_variance_mc,
                    gelu_mlp0_cosine, gelu_mlp0_cosine_mc, gelu_moments, mlp0_cosine, mlp0_cosine_mc, table3_mc)


def attn0_quality_at_init(preset: str = "gpt2-nano", seq_len: int = 256, batch: int = 2, seed: int = 42) -> dict:
    """How close real causal softmax attention is to Attn0 at GPT-2 init, per layer, on random tokens:
    the mean KL(attention row || uniform over the visible prefix), and the mean cosine between each
    head's softmax output sum_s p_ts v_s and its Attn0 output (1/t) sum_{s<=t} v_s."""
    model = build(get_config(preset), seed=seed).eval()
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (batch, seq_len), generator=g)
    H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
    t = torch.arange(1, seq_len + 1, dtype=torch.float32).view(seq_len, 1)
    kl, cos = [], []
    with torch.no_grad():
        out = model.trace(idx, hidden="all", attn_probs=True)
        for layer, (x, p) in enumerate(zip(out["hidden"], out["attn_probs"])):
            block = model.transformer.h[layer]
            v = block.attn.c_attn(block.ln_1(x)).split(qkv_sizes(cfg), dim=-1)[2]
            v = v.view(batch, seq_len, Hkv, hd).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
            plogp = torch.where(p > 0, p * p.clamp_min(1e-30).log(), torch.zeros(()))
            kl.append(float((plogp.sum(-1) + t.log().view(seq_len)).mean()))     # KL to uniform(1/t)
            soft, uniform = p @ v, v.cumsum(dim=2) / t
            cos.append(float(torch.nn.functional.cosine_similarity(soft, uniform, dim=-1).mean()))
    return dict(preset=preset, seq_len=seq_len, kl=kl, cosine=cos)


def main(argv=None):
    parser = ArgumentParser(prog="studies.theory_tables", description="Every closed form of the paper beside "
                            "Monte Carlo; figures under --out.")
    parser.add_argument("--quick", action="store_true", help="smaller Monte Carlo, no GPT-2 init check")
    parser.add_argument("--width", type=flag_type("int>=64,<=4096"), default=None,
                        help="Monte Carlo width (default 512, quick 256): below 64 a ReLU layer can zero a whole "
                        "vector (probability 2^-width), whose cosine is 0/0; its memory grows as the square")
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--out", default="out/theory")
    args = parser.parse_args(argv)
    check_output(args.out)
    t_start = time.time()
    with lock_dir(args.out):
        res = run_all(args)
        update_results(os.path.join(args.out, "results.json"), dict(theory=res))
    print(f"\nwrote {args.out}/results.json and figures, {time.time() - t_start:.1f} s")


def run_all(args) -> dict:
    """Every table of the script, printed and returned; figures under args.out."""
    width = args.width or (256 if args.quick else 512)
    nets = 8 if args.quick else 16
    res = {"width": width}

    L = 12
    print(f"Prop 2 / Fig 5: inter-sequence cosine after L MLP0 layers "
          f"(Monte Carlo: width {width}, {nets} nets x 256 pairs)")
    relu_mc, relu_se = mlp0_cosine_mc(L, "relu", width, 256, nets, args.seed)
    tanh_mc, tanh_se = mlp0_cosine_mc(L, "tanh", width, 256, nets, args.seed)
    theory = [mlp0_cosine(l) for l in range(1, L + 1)]
    print_table([dict(L=l + 1, relu_theory=f"{theory[l]:.5f}", relu_mc=f"{relu_mc[l]:.5f} +- {relu_se[l]:.5f}",
                      tanh_theory="0", tanh_mc=f"{tanh_mc[l]:.5f} +- {tanh_se[l]:.5f}") for l in range(L)])
    res["prop2"] = dict(theory=theory, relu_mc=relu_mc.tolist(), relu_se=relu_se.tolist(),
                        tanh_mc=tanh_mc.tolist(), tanh_se=tanh_se.tolist(),
                        layer1_finite_width=RHO1 + 5 / (4 * math.pi * width))

    n = 128
    print(f"\nTable 3 / Prop 4: inter-sequence cosine of the last position, n = {n}")
    t3 = table3_mc(n, width=min(width, 256), n_pairs=64 if args.quick else 128, n_nets=nets // 2, seed=args.seed)
    t3_theory = {"MLP0": RHO1, "MLP0 -> MLP0": float(arccos_map(RHO1)),
                 "MLP0 -> Attn0": float(attn0_last_cosine(n)), "Attn0 -> MLP0": RHO1}
    print_table([dict(setting=k, theory=f"{t3_theory[k]:.4f}", monte_carlo=f"{t3[k][0]:.4f} +- {t3[k][1]:.4f}",
                      paper=paper) for k, paper in zip(t3, ("0.31", "0.49", "0.98", "-"))])
    n98 = attn0_n_for(0.98)
    print(f"MLP0 -> Attn0 reaches 0.98 at n = 49 (pi - 1) = {n98:.1f}; at n = 128 it is {attn0_last_cosine(128):.4f}.")
    print("Order matters: averaging independent Gaussian tokens leaves two sequences independent, so an MLP0\n"
          "after Attn0 starts again from rho = 0 (-> 1/pi); only once the MLP has given every token a shared\n"
          "component does the average keep that component and shrink the token-specific rest by 1/n.")
    res["table3"] = dict(n=n, theory=t3_theory, mc=t3, n_for_098=n98)

    print("\nFig 6: GELU's asymmetry is engaged only by a wide input (one MLP0 layer, pre-activation std s)")
    fig6 = []
    for s in (0.01, 0.02, 0.1, 0.55, 1.0, 3.0):
        m, m2 = gelu_moments(s)
        mc, se = gelu_mlp0_cosine_mc(s, width=1024, n_pairs=500 if args.quick else 2000, seed=args.seed)
        fig6.append(dict(std=s, mean=m, sd=math.sqrt(m2 - m * m), cos=gelu_mlp0_cosine(s), cos_mc=mc, cos_se=se))
    print_table([dict(s=r["std"], mean=f"{r['mean']:.2e}", sd=f"{r['sd']:.2e}",
                      mean_over_sd=f"{r['mean'] / r['sd']:.4f}", cos_theory=f"{r['cos']:.5f}",
                      cos_mc=f"{r['cos_mc']:.5f} +- {r['cos_se']:.5f}") for r in fig6])
    print("In gpt2-nano, LayerNorm gives the MLP input unit variance, so the GELU pre-activation has std\n"
          f"0.02 sqrt(768) = {0.02 * math.sqrt(768):.2f}; without it the input keeps the embedding's 0.02 and the\n"
          f"pre-activation std is 0.02 x 0.02 x sqrt(768) = {0.02 * 0.02 * math.sqrt(768):.3f}: "
          f"GELU is then nearly odd.")
    res["fig6"] = fig6

    print("\nProp 5 / Fig 8: intra-sequence cosine (pairs i != j) after L Attn0 layers")
    fig8 = {}
    for n_tok in (64, 1024):
        mc, se = attn0_intra_cosine_mc(n_tok, L, width=128, n_seq=8 if args.quick else 16, seed=args.seed)
        exact = [attn0_intra_cosine(n_tok, l) for l in range(1, L + 1)]
        limit = [attn0_intra_cosine_limit(l) for l in range(1, L + 1)]
        fig8[n_tok] = dict(exact=exact, continuum=limit, mc=mc.tolist(), se=se.tolist())
        print_table([dict(n=n_tok, L=l + 1, exact=f"{exact[l]:.5f}", continuum=f"{limit[l]:.5f}",
                          monte_carlo=f"{mc[l]:.5f} +- {se[l]:.5f}") for l in range(L)])
    res["fig8"] = fig8

    print("\nWhere the continuum limit fails: 1 - S over all n^2 pairs, exact vs continuum (ln n >> L needed)")
    ns, Ls = (64, 256, 1024) + (() if args.quick else (4096,)), (1, 2, 4, 8, 12)
    limit_table = []
    for n_tok in ns:
        for l in Ls:
            ex = all_pairs_mean(attn0_intra_cosine(n_tok, l), n_tok)
            co = all_pairs_mean(attn0_intra_cosine_limit(l), n_tok)
            limit_table.append(dict(n=n_tok, layers=l, exact=ex, continuum=co, gap_ratio=(1 - co) / (1 - ex)))
    print_table([dict(n=n_tok, ln_n=f"{math.log(n_tok):.2f}", **{f"L={r['layers']}": f"{1 - r['exact']:.2e} / "
                                                                  f"{1 - r['continuum']:.2e}"
                                                                  for r in limit_table if r["n"] == n_tok})
                 for n_tok in ns])
    res["continuum_limit"] = limit_table

    print("\nEq. 2 / Fig 9: variance at position t after L Attn0 layers (unit-variance inputs)")
    n_var = 256
    est, se = attn0_variance_mc(n_var, 4, width=64, n_seq=64 if args.quick else 256, seed=args.seed)
    print_table([dict(t=t, **{f"L={l} exact / MC": f"{attn0_variance(t, l):.5f} / {est[l - 1, t - 1]:.5f}"
                              for l in (1, 2, 4)}) for t in (1, 2, 8, 64, 256)])
    print(f"t = 1024: L=2 {attn0_variance(1024, 2):.4e}, L=4 {attn0_variance(1024, 4):.4e}, "
          f"L=8 {attn0_variance(1024, 8):.4e} "
          f"(naive 1/t^L: {1024.0 ** -2:.1e}, {1024.0 ** -4:.1e}, {1024.0 ** -8:.1e})")
    res["fig9"] = dict(n=n_var, exact={l: attn0_variance(np.arange(1, n_var + 1), l).tolist() for l in (1, 2, 4)},
                       mc={l: est[l - 1].tolist() for l in (1, 2, 4)})

    if not args.quick:
        q = attn0_quality_at_init()
        res["attn0_at_init"] = q
        print(f"\nAttn0 at GPT-2 init ({q['preset']}, n = {q['seq_len']}, random tokens): per layer")
        print("KL(row || uniform): " + " ".join(f"{k:.3f}" for k in q["kl"]))
        print("cos(softmax, Attn0): " + " ".join(f"{c:.3f}" for c in q["cosine"]))

    _figures(args.out, res, L)
    return res


def _figures(out, res, L):
    layers = np.arange(1, L + 1)
    save = lambda fig, name: save_figure(fig, os.path.join(out, name))

    p2 = res["prop2"]
    plt, fig, ax = figure(figsize=(5.5, 4))
    ax.plot(layers, p2["theory"], "b-", label="ReLU, arc-cosine map (Prop 2)")
    ax.errorbar(layers, p2["relu_mc"], yerr=p2["relu_se"], fmt="bo", ms=4, label=f"ReLU MLP0, MC (d={res['width']})")
    ax.plot(layers, np.zeros(L), "r--", label="tanh, theory (0)")
    ax.errorbar(layers, p2["tanh_mc"], yerr=p2["tanh_se"], fmt="rs", ms=4, label="tanh MLP0, MC (same weights)")
    ax.set_xlabel("MLP0 layers")
    ax.set_ylabel("inter-sequence cosine")
    ax.set_title("Fig 5: asymmetric activations contract")
    ax.legend(fontsize=8)
    save(fig, "fig5_mlp0_relu_tanh.png")

    plt, fig, ax = figure(figsize=(5.5, 4))
    for n_tok, style in zip(res["fig8"], ("C0", "C1")):
        f8 = res["fig8"][n_tok]
        ax.plot(layers, f8["exact"], "-", color=style, label=f"n={n_tok} exact (A^L)")
        ax.plot(layers, f8["continuum"], ":", color=style,
                label=f"n={n_tok} continuum (Gamma)" if n_tok == 64 else None)
        ax.errorbar(layers, f8["mc"], yerr=f8["se"], fmt="o", color=style, ms=4, label=f"n={n_tok} Monte Carlo")
    ax.set_xlabel("Attn0 layers")
    ax.set_ylabel("intra-sequence cosine (i != j)")
    ax.set_title("Fig 8: attention contracts a sequence")
    ax.legend(fontsize=8)
    save(fig, "fig8_attn0_intra.png")

    f9 = res["fig9"]
    t = np.arange(1, f9["n"] + 1)
    plt, fig, ax = figure(figsize=(5.5, 4))
    for l, c in zip((1, 2, 4), ("C0", "C1", "C2")):
        ax.loglog(t, np.sqrt(f9["exact"][l]), "-", color=c, label=f"L={l} exact std")
        ax.loglog(t, np.sqrt(f9["mc"][l]), ".", color=c, ms=3, label=f"L={l} Monte Carlo")
    ax.loglog(t, 1 / np.sqrt(t), "k--", lw=0.8, label="1/sqrt(t)")
    ax.set_xlabel("position t")
    ax.set_ylabel("std of Attn0 output")
    ax.set_title("Fig 9: the first position is a variance outlier")
    ax.legend(fontsize=8)
    save(fig, "fig9_position_variance.png")


if __name__ == "__main__":
    run_script(main, "studies.theory_tables")
