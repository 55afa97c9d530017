"""
studies/seedprint_tables.py: the paper's SeedPrint tables on models trained here from known seeds (Section 6.1:
Tables 4a-4c and 5, Fig 11, and the baselines beside them).

Models: LLaMA-style `tiny` ones (a preset and knob flags), each init seed trained for --max_steps on --corpus in one
data order; Table 5's base continued on --corpus2, and a distractor (the second seed, another data order,
continued on --corpus2 too). Every pair gets seedprint.py's exact verdict:

    table4a    init vs init, seeds differ                      -> unrelated
    table4b    each init vs its own trained model              -> related
    table4c    trained vs trained, same data and order         -> unrelated
    table5     base vs its continuation; base vs distractor    -> related; unrelated
    fig11      the first seed's most biased dimensions at birth, correlated with each of its checkpoints and
               with the second seed's (Fig 11: the bias persists through training)
    baselines  PCS, ICS, Intrinsic (HuRef) and REEF beside SeedPrint on the pairs of 4b, 4c and 5 (threshold 0.8)

Makes docs/seedprint.md's Tables 4a-4c and 5, Fig 11 and the baselines' table, with this command (after
studies/lineage_fpr.py, whose models it reuses; minutes once they exist):

    python -m studies.seedprint_tables --tokenizer gpt2 --n_embd 128 --block_size 64 --batch_size 32 \
        --seeds 100 101 102 103

The default (tiny, width 64, bytes, seeds 42 123 1000 2000, 200 steps) takes 5 minutes on 2 cores, nearly all
of it training.
"""
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, check_output, figure, flag_type, lock_dir, print_table, resolve_device,
                    run_script, save_figure, seed_int, update_results)
import numpy as np
import torch
import torch.nn.functional as F

import data
import hf
from data import random_batches
from model import qkv_sizes
from studies.lineage import (Lineage, add_lineage_flags, architecture, check_lineage_flags, checkpoints, corpus,
                            init_checkpoint, trained, training)

TABLES = ("table4a", "table4b", "table4c", "table5", "fig11", "baselines")


# ----------------------------------------------------------------------------- Fig 11: the bias persists

def biased_dims(H: np.ndarray, k: int) -> np.ndarray:
    """The k dimensions most biased at birth: largest |mean| of the normalized states (the contraction
    direction of Finding 2.2)."""
    u = H / np.linalg.norm(H, axis=1, keepdims=True)
    return np.argsort(-np.abs(u.mean(axis=0)), kind="stable")[:k]


def dimension_correlations(H0: np.ndarray, H: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Per dimension j, the Pearson correlation across the N inputs between H0[:, j] and H[:, j]."""
    a, b = H0[:, dims] - H0[:, dims].mean(0), H[:, dims] - H[:, dims].mean(0)
    return (a * b).sum(0) / np.sqrt((a * a).sum(0) * (b * b).sum(0))


# ----------------------------------------------------------------------------- the baselines (threshold 0.8)

def _flat(model, keep):
    return torch.cat([p.detach().float().flatten() for n, p in model.named_parameters() if keep(n)])


def pcs(a, b) -> float:
    """HuRef's parameter cosine similarity of all block parameters (embeddings and head excluded)."""
    blocks = lambda name: name.startswith("transformer.h.")
    return F.cosine_similarity(_flat(a, blocks), _flat(b, blocks), dim=0).item()


def _zscore(x):
    return (x - x.mean()) / x.std()


def ics(a, b, n_tokens: int = 4096) -> float:
    """HuRef's invariant terms of the last two layers on the first n_tokens token embeddings X (each
    model its own): X Wq^T Wk X^T, X Wv^T Wo^T X^T, X (Wgate^T * Wup^T) Wdown^T X^T (Wup^T Wdown^T
    without a gate); each z-scored; cosine of the concatenations."""

    def terms(m):
        cfg, out = m.config, []
        X = m.transformer.wte.weight[:n_tokens].detach().float()
        H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
        for block in list(m.transformer.h)[-2:]:
            Wq, Wk, Wv = block.attn.c_attn.weight.detach().float().split(qkv_sizes(cfg))
            Wk, Wv = (w.view(Hkv, hd, -1).repeat_interleave(H // Hkv, 0).reshape(H * hd, -1) for w in (Wk, Wv))
            Wo = block.attn.c_proj.weight.detach().float()
            up = block.mlp.c_fc.weight.detach().float()
            if hasattr(block.mlp, "c_gate"):
                up = up * block.mlp.c_gate.weight.detach().float()
            down = block.mlp.c_proj.weight.detach().float()
            out += [_zscore(X @ Wq.T @ Wk @ X.T), _zscore(X @ Wv.T @ Wo.T @ X.T), _zscore(X @ up.T @ down.T @ X.T)]
        return torch.cat([t.flatten() for t in out])
    return F.cosine_similarity(terms(a), terms(b), dim=0).item()


def intrinsic(a, b):
    """Per-layer std of the q, k, v, o weights, z-scored across layers; Pearson per type; mean. None where it is
    undefined: one layer, or a weight type whose std is the same in every layer (at birth: 0/0)."""

    def profile(m):
        rows = []
        for block in m.transformer.h:
            q, k, v = block.attn.c_attn.weight.detach().float().split(qkv_sizes(m.config))
            rows.append([q.std(), k.std(), v.std(), block.attn.c_proj.weight.detach().float().std()])
        return _zscore(torch.tensor(rows))
    pa, pb = profile(a), profile(b)
    if pa.shape[0] < 2:
        return None
    r = np.mean([np.corrcoef(pa[:, j], pb[:, j])[0, 1] for j in range(4)])
    return None if math.isnan(r) else float(r)


def reef(a, b, n: int = 200, seq_len: int = 64, layer: int = -1, seed: int = 0) -> float:
    """Linear CKA between the two models' last-token states at one residual-stream state (default:
    the final norm) on the same n random token sequences of seq_len tokens (at most the models' context)."""
    vocab = min(a.config.vocab_size, b.config.vocab_size)
    seq_len = min(seq_len, a.config.block_size, b.config.block_size)
    x = next(random_batches("tokens", n, seq_len, n, seed, vocab=vocab))
    with torch.no_grad():
        X, Y = (m.eval().trace(x, hidden="last")["hidden"][layer].double() for m in (a, b))
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return ((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm())).item()


BASELINES = {"PCS": pcs, "ICS": ics, "Intrinsic": intrinsic, "REEF": reef}


# ----------------------------------------------------------------------------- the study

def main(argv=None):
    p = ArgumentParser(prog="studies.seedprint_tables", description="The paper's SeedPrint Tables 4a-4c and 5, "
                       "Fig 11 and the baselines, on small models trained here from known seeds.")
    p.add_argument("--exp", nargs="+", choices=TABLES + ("all",), default=["all"], help="which tables (default all)")
    p.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=[42, 123, 1000, 2000],
                   help="init seeds (the paper's); Table 5 and Fig 11 use the first two")
    p.add_argument("--top", type=flag_type("int>=1"), default=16, help="Fig 11: the most biased dimensions followed")
    add_lineage_flags(p, out="out/lineage")
    args = p.parse_args(argv)
    check_lineage_flags(args)
    if len(args.seeds) < 2:
        p.error("need at least two --seeds: the pairs are between them")
    check_output(args.out)
    device = str(resolve_device(args.device))
    tables = TABLES if "all" in args.exp else [t for t in TABLES if t in args.exp]
    a, b = args.seeds[0], args.seeds[1]
    with lock_dir(args.out):
        # the models: each made once under --out, and reused by the next study that asks for them
        text = corpus(args.out, args.corpus, args.tokenizer, args.data_from)
        meta = data.load_data(text)["meta"]
        template = training(args, device)
        config = architecture(args, vocab_size=meta["vocab_size"])
        inits = {s: init_checkpoint(args.out, config, s, meta["tokenizer"]) for s in args.seeds}
        runs = {s: trained(template, args.out, f"seed{s}", s, text) for s in args.seeds}
        final = {s: checkpoints(runs[s])[-1][1] for s in args.seeds}
        if {"table5", "baselines"} & set(tables):
            text2 = corpus(args.out, args.corpus2, args.tokenizer, args.data_from)
            label2 = data.corpus_label(args.corpus2)      # a corpus as one path component
            other = checkpoints(trained(template, args.out, f"seed{b}_order2", b, text,
                                        data_seed=args.data_seed + 1))[-1][1]
            child = checkpoints(trained(template, args.out, f"seed{a}_on_{label2}", a, text2,
                                        steps=args.max_steps // 2 or 1, init_from=final[a]))[-1][1]
            distractor = checkpoints(trained(template, args.out, f"seed{b}_order2_on_{label2}", b, text2,
                                             steps=args.max_steps // 2 or 1, init_from=other))[-1][1]
        lineage = Lineage(args, args.out, device)
        cross = [(x, y) for i, x in enumerate(args.seeds) for y in args.seeds[i + 1:]]
        results = {}

        if "table4a" in tables:      # inits that differ only in their seed
            results["table4a"] = [lineage.row(inits[x], inits[y], f"init {x} vs init {y}", False) for x, y in cross]
        if "table4b" in tables:      # each init against its own trained model
            results["table4b"] = [lineage.row(checkpoints(runs[s])[0][1], final[s], f"init {s} vs trained {s}", True)
                                  for s in args.seeds]
        if "table4c" in tables:      # the same data in the same order, other inits
            results["table4c"] = [lineage.row(final[x], final[y], f"trained {x} vs trained {y}", False)
                                  for x, y in cross]
        if {"table5", "baselines"} & set(tables):
            table5 = [lineage.row(final[a], child, f"base {a} vs its descendant on {args.corpus2}", True),
                      lineage.row(final[a], distractor, f"base {a} vs distractor ({b}) on {args.corpus2}", False)]
            if "table5" in tables:
                results["table5"] = table5
        for name in ("table4a", "table4b", "table4c", "table5"):
            if name in results:
                print(f"=== {name}")
                print_table(results[name], floats="{:.3g}")

        if "fig11" in tables:        # correlation of the most biased dimensions with the init, through training
            own, theirs = checkpoints(runs[a]), checkpoints(runs[b])
            H0 = lineage.exact_fingerprint(own[0][1], meta["vocab_size"])
            dims = biased_dims(H0, min(args.top, H0.shape[1]))
            rows = []
            for (step, p_own), (_, p_other) in zip(own, theirs):
                H_own, H_other = (lineage.exact_fingerprint(m, meta["vocab_size"]) for m in (p_own, p_other))
                c_own, c_other = dimension_correlations(H0, H_own, dims), dimension_correlations(H0, H_other, dims)
                rows.append(dict(step=step, own_mean=float(c_own.mean()), own_std=float(c_own.std()),
                                 other_mean=float(c_other.mean()), other_std=float(c_other.std())))
            print(f"=== fig11: top-{len(dims)} biased dimensions of init {a}, correlated across inputs")
            print_table(rows, floats="{:.3f}")
            plt, fig, ax = figure()
            steps = [r["step"] for r in rows]
            for key, label in (("own", f"init {a} vs its checkpoints"), ("other", f"init {a} vs seed {b}'s")):
                ax.errorbar(steps, [r[f"{key}_mean"] for r in rows], [r[f"{key}_std"] for r in rows], marker="o",
                            capsize=3, label=label)
            ax.set(xlabel="training step", ylabel=f"correlation across inputs, top-{len(dims)} dims")
            ax.legend(fontsize=8)
            save_figure(fig, os.path.join(args.out, "fig11_persistence.png"))
            results["fig11"] = dict(k=len(dims), dims=dims.tolist(), rows=rows)

        if "baselines" in tables:    # weight- and representation-based tests on the pairs of 4b, 4c and 5
            pairs = [(checkpoints(runs[a])[0][1], final[a], f"init {a} vs trained {a}", True),
                     (final[a], final[b], f"trained {a} vs trained {b}", False),
                     (final[a], child, table5[0]["pair"], True), (final[a], distractor, table5[1]["pair"], False)]
            rows = []
            for pa, pb, label, truth in pairs:
                ma, mb = hf.load(pa).eval(), hf.load(pb).eval()
                scores = {name: f(ma, mb) for name, f in BASELINES.items()}
                scores = {name: None if v is None else round(v, 3) for name, v in scores.items()}
                rows.append(dict(pair=label, truth="related" if truth else "unrelated", **scores,
                                 SeedPrint=lineage.row(pa, pb, label)["verdict"]))
            print("=== baselines (threshold 0.8: a baseline says 'related' above it)")
            print_table(rows)
            results["baselines"] = rows
        update_results(os.path.join(args.out, "results.json"), results, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.seedprint_tables")
