"""
seedprint.py: the lineage test -- do two checkpoints share an initialization? (paper Section 6.1)

A model's birth bias (a few preferred directions of its final hidden state, Sections 2-5) is set by
its init seed and survives training. SeedPrint reads it on inputs that carry no meaning:
  1. fingerprint: the final-norm hidden state of the last token on N random inputs, H (N x d);
     random token ids below the smaller vocabulary (pretrained models) or Gaussian input embeddings
     N(mu, sigma) with the scalars of a fresh embedding table (models trained here);
  2. identity dimensions: the k dimensions with the smallest mean output, intersected across the
     two models ("coset") or the base model's alone ("base");
  3. statistic: per input, softmax(H[:, S] / 10); per identity dimension, Kendall's tau-b between
     the two models across the N inputs;
  4. tests at alpha = 0.01: the analytic z-test of mean tau (two-sided p, as the reference code does:
     2 sf(z)); and against a null of the same pipeline on two independent Gaussian matrices of the
     same shape (10 trials pooled): one-sided two-sample t-test and Mann-Whitney U.
Verdict: related when both empirical tests reject.

    python seedprint.py A B                    # two train.py checkpoints or Hugging Face directories
    python seedprint.py --exp seeds            # Table 4a; also lineage, same_data, continual, persistence,
                                               # calibration, baselines, all (small CPU defaults)
"""
import argparse
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

import train
from init import STD, build
from model import GPT, add_config_flags, config_overrides, get_config, load_model, read_checkpoint, write_json

EXPERIMENTS = ("seeds", "lineage", "same_data", "continual", "persistence", "calibration", "baselines")
ALPHA = 0.01


# ----------------------------------------------------------------------------- 1. fingerprint

@torch.no_grad()
def fingerprint(model: GPT, n: int = 2000, seq_len: int = 64, inputs: str = "tokens", vocab: int | None = None,
                mean: float = 0.0, std: float = STD, seed: int = 0, batch_size: int = 32) -> np.ndarray:
    """H (n x d, float32): the final-norm state of the last token on n random sequences.
    inputs="tokens": ids uniform below `vocab` (default: the model's; pass the smaller one of two
    models so both see the same ids). inputs="gaussian": embeddings N(mean, std) fed past the token
    table (default: the N(0, 0.02) of init.py's fresh table). Same seed -> same inputs."""
    if inputs not in ("tokens", "gaussian"):
        raise ValueError(f"inputs must be 'tokens' or 'gaussian', got {inputs!r}")
    param = next(model.parameters())
    device, d = param.device, model.config.n_embd
    vocab = vocab or model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    out = []
    for i in range(0, n, batch_size):
        b = min(batch_size, n - i)
        if inputs == "tokens":
            kw = dict(idx=torch.randint(0, vocab, (b, seq_len), generator=g).to(device))
        else:   # drawn on the CPU in float32, so every device and dtype sees the same inputs
            kw = dict(embeds=(torch.randn(b, seq_len, d, generator=g) * std + mean).to(device, param.dtype))
        with autocast:
            h = model.trace(**kw, hidden="last")["hidden"][-1]
        out.append(h.float().cpu())
    return torch.cat(out).numpy()


def fingerprint_cached(path: str, cache_dir: str | None, device="cpu", **options) -> np.ndarray:
    """fingerprint() of the model at `path`, saved once under cache_dir (keyed by the path and the
    input options), so comparing M models costs M forward passes, not M^2."""
    key = json.dumps(dict(path=os.path.abspath(path), **options), sort_keys=True)
    file = None
    if cache_dir:
        file = os.path.join(cache_dir, hashlib.sha256(key.encode()).hexdigest()[:16] + ".npz")
        if os.path.isfile(file) and os.path.getmtime(file) >= os.path.getmtime(path):
            return np.load(file)["H"]
    H = fingerprint(load_model(path, device).eval(), **options)
    if file:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = file + f".tmp{os.getpid()}.npz"
        np.savez(tmp, H=H, description=key)
        os.replace(tmp, file)
    return H


# ----------------------------------------------------------------------------- 2-3. statistic

def identity_dims(H: np.ndarray, k: int, rank_by: str = "smallest") -> np.ndarray:
    """The k dimensions of H's mean output ranked by `rank_by`: smallest (the reference), largest, abs."""
    m = H.mean(axis=0)
    key = {"smallest": m, "largest": -m, "abs": -np.abs(m)}[rank_by]
    return np.sort(np.argsort(key, kind="stable")[:k])


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    return stats.kendalltau(x, y, variant="b").statistic


def seedprint_taus(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest",
                   set_mode: str = "coset", temperature: float = 10.0) -> tuple:
    """(taus over the identity set, the set). Identity set: bottom-k of A intersected with bottom-k
    of B (coset) or A's alone (base); softmax(H[:, S] / temperature) per input; tau-b per dimension."""
    if HA.shape != HB.shape:
        raise ValueError(f"fingerprints differ in shape {HA.shape} vs {HB.shape}: the models must have the same "
                         f"width and see the same N inputs")
    k = min(k, HA.shape[1] // 2)    # at most half the width, so that "the k smallest" still selects
    S = identity_dims(HA, k, rank_by)
    if set_mode == "coset":
        S = np.intersect1d(S, identity_dims(HB, k, rank_by))
    elif set_mode != "base":
        raise ValueError(f"set_mode must be 'coset' or 'base', got {set_mode!r}")
    if len(S) == 0:
        return np.zeros(0), S
    A = torch.softmax(torch.from_numpy(HA[:, S]).double() / temperature, dim=1).numpy()
    B = torch.softmax(torch.from_numpy(HB[:, S]).double() / temperature, dim=1).numpy()
    return np.array([kendall_tau_b(A[:, j], B[:, j]) for j in range(len(S))]), S


# ----------------------------------------------------------------------------- 4. tests

@dataclass
class SeedPrintResult:
    p_t: float              # one-sided two-sample t-test, taus > null taus
    p_u: float              # Mann-Whitney U, taus > null taus
    p_analytic: float       # z-test of mean tau against 0, two-sided (2 sf(z)) as the reference code
    related: bool           # p_t < alpha and p_u < alpha
    mean_tau: float
    null_mean_tau: float
    z: float
    n_identity: int         # size of the identity set
    n_inputs: int
    taus: list


def null_taus(N: int, d: int, trials: int = 10, seed: int = 0, **options) -> np.ndarray:
    """The same pipeline on pairs of independent randn(N, d) matrices, `trials` pairs pooled."""
    rng = np.random.default_rng(seed)
    return np.concatenate([seedprint_taus(rng.standard_normal((N, d)).astype(np.float32),
                                          rng.standard_normal((N, d)).astype(np.float32), **options)[0]
                           for _ in range(trials)])


def seedprint_test(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest",
                   set_mode: str = "coset", trials: int = 10, alpha: float = ALPHA, null_seed: int = 0,
                   null=None) -> SeedPrintResult:
    """All of steps 2-4 on two fingerprints of the same N inputs."""
    opts = dict(k=k, rank_by=rank_by, set_mode=set_mode)
    taus, S = seedprint_taus(HA, HB, **opts)
    N = HA.shape[0]
    if len(taus) < 2:    # the two models share (almost) no identity dimension: nothing to test, unrelated
        return SeedPrintResult(p_t=1.0, p_u=1.0, p_analytic=1.0, related=False, mean_tau=float(np.mean(taus))
                               if len(taus) else 0.0, null_mean_tau=float("nan"), z=0.0, n_identity=len(S),
                               n_inputs=N, taus=taus.tolist())
    if null is None:
        null = null_taus(N, HA.shape[1], trials, null_seed, **opts)
    sd = math.sqrt(2 * (2 * N + 5) / (9 * N * (N - 1)))          # std of tau under independence
    z = taus.mean() / (sd / math.sqrt(len(taus)))
    p_t = stats.ttest_ind(taus, null, alternative="greater").pvalue
    p_u = stats.mannwhitneyu(taus, null, alternative="greater").pvalue
    return SeedPrintResult(p_t=float(p_t), p_u=float(p_u), p_analytic=float(min(1.0, 2 * stats.norm.sf(z))),
                           related=bool(p_t < alpha and p_u < alpha), mean_tau=float(taus.mean()),
                           null_mean_tau=float(null.mean()), z=float(z), n_identity=len(S), n_inputs=N,
                           taus=taus.tolist())


def compare(model_a, model_b, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
            trials: int = 10, alpha: float = ALPHA, cache_dir: str | None = None, device="cpu",
            **fingerprint_options) -> SeedPrintResult:
    """Do model_a (the base) and model_b share an initialization? Each may be a GPT, a path (train.py
    checkpoint or Hugging Face directory) or a fingerprint array. Token inputs use ids below the
    smaller of the two vocabularies."""
    if "vocab" not in fingerprint_options and fingerprint_options.get("inputs", "tokens") == "tokens":
        vocabs = [_vocab(m) for m in (model_a, model_b)]
        if None not in vocabs:
            fingerprint_options["vocab"] = min(vocabs)
    HA, HB = (_fingerprint(m, cache_dir, device, **fingerprint_options) for m in (model_a, model_b))
    if HA.shape[1] != HB.shape[1]:
        raise ValueError(f"the models differ in width ({HA.shape[1]} vs {HB.shape[1]}): SeedPrint compares models "
                         f"of one architecture")
    return seedprint_test(HA, HB, k, rank_by, set_mode, trials, alpha)


def _vocab(m):
    if isinstance(m, GPT):
        return m.config.vocab_size
    if isinstance(m, str):
        if os.path.isdir(m):
            return json.load(open(os.path.join(m, "config.json")))["vocab_size"]
        return read_checkpoint(m)["config"]["vocab_size"]
    return None


def _fingerprint(m, cache_dir, device, **options):
    if isinstance(m, np.ndarray):
        return m
    if isinstance(m, GPT):
        return fingerprint(m.eval(), **options)
    if isinstance(m, str):
        return fingerprint_cached(m, cache_dir, device, **options)
    raise TypeError(f"expected a GPT, a path or a fingerprint array, got {type(m).__name__}")


# ----------------------------------------------------------------------------- baselines (threshold 0.8)

def _flat(model, keep):
    return torch.cat([p.detach().float().flatten() for n, p in model.named_parameters() if keep(n)])


def _blocks(name):
    return name.startswith("transformer.h.")


def pcs(a: GPT, b: GPT) -> float:
    """Parameter cosine similarity of all block parameters (embeddings and head excluded)."""
    return torch.nn.functional.cosine_similarity(_flat(a, _blocks), _flat(b, _blocks), dim=0).item()


def _zscore(x):
    return (x - x.mean()) / x.std()


def ics(a: GPT, b: GPT, n_tokens: int = 4096) -> float:
    """HuRef's invariant terms of the last two layers on the first n_tokens token embeddings X (each
    model its own): X Wq^T Wk X^T, X Wv^T Wo^T X^T, X (Wgate^T * Wup^T) Wdown^T X^T (Wup^T Wdown^T
    without a gate); each z-scored; cosine of the concatenations."""
    def terms(m):
        cfg, out = m.config, []
        X = m.transformer.wte.weight[:n_tokens].detach().float()
        H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
        for block in list(m.transformer.h)[-2:]:
            W = block.attn.c_attn.weight.detach().float()
            Wq, Wk, Wv = W.split([H * hd, Hkv * hd, Hkv * hd])
            Wk, Wv = (w.view(Hkv, hd, -1).repeat_interleave(H // Hkv, 0).reshape(H * hd, -1) for w in (Wk, Wv))
            Wo = block.attn.c_proj.weight.detach().float()
            up = block.mlp.c_fc.weight.detach().float()
            if hasattr(block.mlp, "c_gate"):
                up = up * block.mlp.c_gate.weight.detach().float()
            down = block.mlp.c_proj.weight.detach().float()
            out += [_zscore(X @ Wq.T @ Wk @ X.T), _zscore(X @ Wv.T @ Wo.T @ X.T), _zscore(X @ up.T @ down.T @ X.T)]
        return torch.cat([t.flatten() for t in out])
    return torch.nn.functional.cosine_similarity(terms(a), terms(b), dim=0).item()


def intrinsic(a: GPT, b: GPT) -> float:
    """Per-layer std of the q, k, v, o weights, z-scored across layers; Pearson per type; mean."""
    def profile(m):
        cfg = m.config
        rows = []
        for block in m.transformer.h:
            q, k, v = block.attn.c_attn.weight.detach().float().split(
                [cfg.n_head * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim])
            rows.append([q.std(), k.std(), v.std(), block.attn.c_proj.weight.detach().float().std()])
        return _zscore(torch.tensor(rows))
    pa, pb = profile(a), profile(b)
    if pa.shape[0] < 2:
        return float("nan")
    return float(np.mean([np.corrcoef(pa[:, j], pb[:, j])[0, 1] for j in range(4)]))


def reef(a: GPT, b: GPT, n: int = 200, seq_len: int = 64, layer: int = -1, seed: int = 0) -> float:
    """Linear CKA between the two models' last-token states at one residual-stream state (default:
    the final norm) on the same n random token sequences."""
    vocab = min(a.config.vocab_size, b.config.vocab_size)
    x = torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        X, Y = (m.eval().trace(x, hidden="last")["hidden"][layer].double() for m in (a, b))
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return ((Y.T @ X).norm() ** 2 / ((X.T @ X).norm() * (Y.T @ Y).norm())).item()


BASELINES = {"PCS": pcs, "ICS": ics, "Intrinsic": intrinsic, "REEF": reef}


# ----------------------------------------------------------------------------- experiments

def _train(args, name, *flags):
    """A small model with train.py, reused when already trained (--resume)."""
    out_dir = os.path.join(args.out, "runs", name)
    cmd = ["--out_dir", out_dir, "--model", args.model, *_knobs(args), "--max_steps", str(args.steps),
           "--ckpt_every", str(args.ckpt_every), "--eval_every", "0", "--log_every", "50",
           "--batch_size", str(args.batch_size), "--resume", *flags]
    if args.device:
        cmd += ["--device", args.device]
    print(f"--- {name}: python train.py {' '.join(cmd)}")
    train.train(train.parse_args(cmd))
    return out_dir


def _knobs(args):
    return [f"--{k}={('on' if v else 'off') if isinstance(v, bool) else v}" for k, v in config_overrides(args).items()]


def _data(args, i):
    """Prepared data dir for corpus i of --texts (bytes tokenizer by default: works offline)."""
    if i >= len(args.texts):
        raise ValueError(f"this experiment needs {i + 1} text files in --texts, got {len(args.texts)}")
    path = os.path.join(args.out, "data", f"corpus{i}")
    if not os.path.isfile(os.path.join(path, "meta.json")):
        train.prepare([args.texts[i]], path, tokenizer=args.tokenizer)
    return path


def _last(out_dir):
    return train.list_checkpoints(out_dir)[-1][1]


def _fp(args, path):
    return fingerprint_cached(path, os.path.join(args.out, "fingerprints"), args.device or "cpu",
                              **_fp_options(args))


def _fp_options(args):
    return dict(n=args.n, seq_len=args.seq_len, inputs=args.inputs, seed=args.input_seed)


_NULLS = {}


def _null(args, d):
    """The null taus for fingerprints of width d: one draw per experiment run, shared by every pair."""
    if d not in _NULLS:
        _NULLS[d] = null_taus(args.n, d, args.trials, 0, k=args.k)
    return _NULLS[d]


def _test(args, a, b, label):
    HA, HB = _fp(args, a), _fp(args, b)
    r = seedprint_test(HA, HB, k=args.k, null=_null(args, HA.shape[1]))
    print(f"{label:<44} mean tau {r.mean_tau:+.4f} | |S| {r.n_identity:>3} | p_t {r.p_t:.2e} | p_u {r.p_u:.2e} | "
          f"p_z {r.p_analytic:.2e} | {'RELATED' if r.related else 'unrelated'}")
    row = dataclasses.asdict(r)
    row.pop("taus")
    return dict(a=a, b=b, label=label, **row)


def exp_seeds(args):
    """Table 4a: inits differing only in the block seed -> every pair unrelated."""
    paths = {s: _model_file(args, s) for s in args.seeds}
    return [_test(args, paths[a], paths[b], f"init seed {a} vs init seed {b}")
            for i, a in enumerate(args.seeds) for b in args.seeds[i + 1:]]


def exp_lineage(args):
    """Table 4b: each init vs its own trained descendant -> related."""
    rows = []
    for s in args.seeds:
        run = _train(args, f"seed{s}", "--data", _data(args, 0), "--init_seed", str(s), "--embed_seed", str(s), "--data_seed", str(args.data_seed))
        rows.append(_test(args, train.checkpoint_path(run, 0), _last(run), f"init {s} vs its trained descendant"))
    return rows


def exp_same_data(args):
    """Table 4c: trained on the same data in the same order, different init -> unrelated."""
    runs = {s: _last(_train(args, f"seed{s}", "--data", _data(args, 0), "--init_seed", str(s), "--embed_seed", str(s),
                            "--data_seed", str(args.data_seed))) for s in args.seeds}
    return [_test(args, runs[a], runs[b], f"trained {a} vs trained {b} (same data+order)")
            for i, a in enumerate(args.seeds) for b in args.seeds[i + 1:]]


def exp_continual(args):
    """Table 5: base (seed A) continued on corpus 2 -> related to the base; a distractor (seed B,
    another data order, continued on corpus 2 as well) -> unrelated."""
    a, b = args.seeds[0], args.seeds[1]
    base = _last(_train(args, f"seed{a}", "--data", _data(args, 0), "--init_seed", str(a), "--embed_seed", str(a), "--data_seed", str(args.data_seed)))
    other = _last(_train(args, f"seed{b}_order2", "--data", _data(args, 0), "--init_seed", str(b), "--embed_seed", str(b),
                         "--data_seed", str(args.data_seed + 1)))
    child = _last(_train(args, f"seed{a}_continued", "--data", _data(args, 1), "--init_from", base))
    distractor = _last(_train(args, f"seed{b}_order2_continued", "--data", _data(args, 1), "--init_from", other))
    return [_test(args, base, child, f"base {a} vs its descendant on corpus 2"),
            _test(args, base, distractor, f"base {a} vs distractor ({b}) on corpus 2")]


def exp_persistence(args):
    """Fig 11: overlap and correlation of the top-k biased dimensions (largest |mean output|) of an
    init with those of its own checkpoints through training, beside another seed's init."""
    a, b = args.seeds[0], args.seeds[1]
    run = _train(args, f"seed{a}", "--data", _data(args, 0), "--init_seed", str(a), "--embed_seed", str(a), "--data_seed", str(args.data_seed))
    other = _model_file(args, b)
    H0 = _fp(args, train.checkpoint_path(run, 0))
    m0 = H0.mean(0)
    k = min(args.top, len(m0))
    top = identity_dims(H0, k, "abs")
    rows = []
    for step, path in train.list_checkpoints(run):
        m = _fp(args, path).mean(0)
        rows.append(dict(step=step, overlap=len(np.intersect1d(top, identity_dims(_fp(args, path), k, "abs"))) / k,
                         pearson=float(np.corrcoef(m0[top], m[top])[0, 1])))
    mo = _fp(args, other).mean(0)
    base = dict(overlap=len(np.intersect1d(top, identity_dims(_fp(args, other), k, "abs"))) / k,
                pearson=float(np.corrcoef(m0[top], mo[top])[0, 1]))
    for r in rows:
        print(f"step {r['step']:>5}: top-{k} overlap {r['overlap']:.2f}, Pearson {r['pearson']:+.3f}")
    print(f"another seed's init: overlap {base['overlap']:.2f}, Pearson {base['pearson']:+.3f}")
    _plot_persistence(args, rows, base, k)
    return dict(k=k, trajectory=rows, other_seed=base)


def exp_calibration(args):
    """False-positive rate over unrelated pairs (inits of --calibration_seeds seeds, all pairs) and
    true-positive rate over related pairs (each init vs its checkpoints), alpha = 0.01."""
    seeds = list(range(100, 100 + args.calibration_seeds))
    fps = {s: _fp(args, _model_file(args, s)) for s in seeds}
    null = _null(args, next(iter(fps.values())).shape[1])
    unrelated = [seedprint_test(fps[a], fps[b], k=args.k, null=null) for i, a in enumerate(seeds) for b in seeds[i + 1:]]
    related = []
    for s in args.seeds:
        run = _train(args, f"seed{s}", "--data", _data(args, 0), "--init_seed", str(s), "--embed_seed", str(s), "--data_seed", str(args.data_seed))
        for step, path in train.list_checkpoints(run)[1:]:
            related.append(seedprint_test(_fp(args, train.checkpoint_path(run, 0)), _fp(args, path), k=args.k, null=null))
    res = {}
    for name in ("p_t", "p_u", "p_analytic"):
        pu = np.array([getattr(r, name) for r in unrelated])
        pr = np.array([getattr(r, name) for r in related])
        res[name] = dict(fpr=float((pu < ALPHA).mean()), tpr=float((pr < ALPHA).mean()), unrelated_p=pu.tolist())
        print(f"{name:>10}: FPR {100 * res[name]['fpr']:5.1f}% over {len(pu)} unrelated pairs | "
              f"TPR {100 * res[name]['tpr']:5.1f}% over {len(pr)} related pairs")
    res["verdict"] = dict(fpr=float(np.mean([r.related for r in unrelated])), tpr=float(np.mean([r.related for r in related])))
    print(f"   verdict: FPR {100 * res['verdict']['fpr']:5.1f}% | TPR {100 * res['verdict']['tpr']:5.1f}%")
    _plot_calibration(args, res)
    return res


def _model_file(args, seed):
    """A fresh init saved as a checkpoint file (so that fingerprints are cached by path)."""
    path = os.path.join(args.out, "inits", f"seed{seed}.pt")
    if not os.path.isfile(path):
        data = train.load_data(_data(args, 0))
        cfg = dataclasses.replace(_config(args), vocab_size=data["meta"]["vocab_size"])
        model = build(cfg, seed, embed_seed=seed)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        train.save_checkpoint(path, dict(config=dataclasses.asdict(cfg), model=model.state_dict(), step=0,
                                         seeds=dict(init_seed=seed, embed_seed=seed), tokenizer=data["meta"]["tokenizer"]))
    return path


def _config(args):
    return get_config(args.model, **config_overrides(args))


def exp_baselines(args):
    """PCS, ICS, Intrinsic, REEF beside SeedPrint on the pairs of Tables 4b, 4c and 5 (threshold 0.8)."""
    pairs = exp_lineage(args) + exp_same_data(args)[:1] + exp_continual(args)
    rows = []
    for r in pairs:
        a, b = load_model(r["a"]).eval(), load_model(r["b"]).eval()
        scores = {name: f(a, b) for name, f in BASELINES.items()}
        rows.append(dict(label=r["label"], seedprint_related=r["related"], p_u=r["p_u"], **scores))
        print(f"{r['label']:<44} " + " ".join(f"{n} {v:+.3f}{'*' if v > 0.8 else ' '}" for n, v in scores.items())
              + f" | SeedPrint {'RELATED' if r['related'] else 'unrelated'}")
    print("(* = above the 0.8 threshold: 'related' for that baseline)")
    return rows


# ----------------------------------------------------------------------------- figures

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, args, name):
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, name)
    fig.tight_layout()
    fig.savefig(path + f".tmp{os.getpid()}.png", dpi=120)
    os.replace(path + f".tmp{os.getpid()}.png", path)
    print(f"wrote {path}")


def _plot_persistence(args, rows, base, k):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["pearson"] for r in rows], "o-", label=f"init vs own checkpoints (top-{k} dims)")
    ax.axhline(base["pearson"], ls="--", c="gray", label="init vs another seed's init")
    ax.set_xlabel("training step")
    ax.set_ylabel("Pearson of mean outputs")
    ax.legend(fontsize=8)
    _save(fig, args, "fig11_persistence.png")
    plt.close(fig)


def _plot_calibration(args, res):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name in ("p_t", "p_u", "p_analytic"):
        ax.hist(res[name]["unrelated_p"], bins=10, range=(0, 1), histtype="step", label=name)
    ax.set_xlabel("p-value, unrelated pairs (uniform if honest)")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=8)
    _save(fig, args, "calibration_pvalues.png")
    plt.close(fig)


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = argparse.ArgumentParser(description="SeedPrint: do two models share an initialization?")
    p.add_argument("models", nargs="*", help="two train.py checkpoints or Hugging Face directories (base first)")
    p.add_argument("--exp", choices=EXPERIMENTS + ("all",), default=None)
    p.add_argument("--n", type=int, default=2000, help="random inputs N")
    p.add_argument("--seq_len", type=int, default=64, help="tokens per input (the paper: 1024)")
    p.add_argument("--inputs", choices=("tokens", "gaussian"), default=None,
                   help="tokens (default) or gaussian embeddings; see the README on Gaussian inputs")
    p.add_argument("--input_seed", type=int, default=0)
    p.add_argument("--k", type=int, default=400, help="identity dimensions per model (capped at half the width)")
    p.add_argument("--rank_by", choices=("smallest", "largest", "abs"), default="smallest")
    p.add_argument("--set_mode", choices=("coset", "base"), default="coset")
    p.add_argument("--trials", type=int, default=10, help="null trials pooled")
    p.add_argument("--device", default=None)
    p.add_argument("--out", default="out/seedprint")
    g = p.add_argument_group("experiments")
    g.add_argument("--texts", nargs="+", default=["../shared/data/tinyshakespeare.txt", "../shared/data/brown.txt"],
                   help="training corpora: the first for pretraining, the second for continual training")
    g.add_argument("--tokenizer", choices=("bytes", "gpt2"), default="bytes")
    add_config_flags(p, default_model="tiny")
    g.add_argument("--seeds", type=int, nargs="+", default=[42, 123, 1000, 2000])
    g.add_argument("--data_seed", type=int, default=1234)
    g.add_argument("--steps", type=int, default=200)
    g.add_argument("--ckpt_every", type=int, default=50)
    g.add_argument("--batch_size", type=int, default=16)
    g.add_argument("--top", type=int, default=16, help="top-k biased dimensions for --exp persistence")
    g.add_argument("--calibration_seeds", type=int, default=11, help="inits -> n(n-1)/2 unrelated pairs")
    args = p.parse_args(argv)
    try:
        run(args, p)
    except (OSError, ValueError) as e:     # bad input: one line, no traceback
        sys.exit(f"seedprint.py: error: {e}")


def run(args, parser):
    if args.exp is None and len(args.models) != 2:
        parser.error("give two models (base first), or --exp NAME")
    if args.exp is None:
        t0 = time.time()
        r = compare(args.models[0], args.models[1], k=args.k, rank_by=args.rank_by, set_mode=args.set_mode,
                    trials=args.trials, cache_dir=os.path.join(args.out, "fingerprints"), device=args.device or "cpu",
                    n=args.n, seq_len=args.seq_len, inputs=args.inputs or "tokens", seed=args.input_seed)
        print(f"mean tau {r.mean_tau:+.4f} (null {r.null_mean_tau:+.4f}) over |S| = {r.n_identity} identity dims, "
              f"N = {r.n_inputs}\np_t {r.p_t:.3e} | p_u {r.p_u:.3e} | p_analytic {r.p_analytic:.3e}\n"
              f"verdict at alpha {ALPHA}: {'RELATED (shared initialization)' if r.related else 'unrelated'} "
              f"[{time.time() - t0:.1f} s]")
        row = dataclasses.asdict(r)
        results = {"compare": dict(a=args.models[0], b=args.models[1], **row)}
    else:
        args.inputs = args.inputs or "tokens"
        funcs = dict(seeds=exp_seeds, lineage=exp_lineage, same_data=exp_same_data, continual=exp_continual,
                     persistence=exp_persistence, calibration=exp_calibration, baselines=exp_baselines)
        results = {}
        for name in (EXPERIMENTS if args.exp == "all" else [args.exp]):
            print(f"=== {name}")
            results[name] = funcs[name](args)
    path = os.path.join(args.out, "results.json")
    old = json.load(open(path)) if os.path.isfile(path) else {}
    write_json(path, {**old, **results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
