"""
studies/lineage.py: what the lineage studies share (seedprint_tables, lineage_fpr, fresh_inits, aligned_floor,
derivatives, pruned, registry) -- their flags, models trained from known seeds on known data, fresh inits,
SeedPrint verdicts from fingerprints cached on disk, the reference implementation's tests, rates with their
intervals, and how a floor is fit.

A study trains or builds many models and tests many pairs of them; each model is made once and kept under
the study's --out, so a second run reuses every model and every fingerprint and takes minutes:

    TRAINING, training(args)       the study's training flags: train.TrainConfig's own, on this template
    trained(template, out, ...)    the directory of one training run, trained on first use
    corpus(out, name, ...)         a named corpus or a text file, prepared once under out/data
    base_corpus(out, name, base)   the same, tokenized by a released model's tokenizer (--base)
    init_checkpoint(out, cfg, s)   a fresh init saved as a checkpoint (fingerprints are cached by file)
    fresh_init(cfg, s)             the same, built in memory on demand (a seedprint.Recipe)
    permuted(path, flip)           a model's copy in a permuted (signed) residual basis (a seedprint.Recipe)
    Lineage                        verdicts of pairs from cached fingerprints and token-table rows
    reference_tests(HA, HB, ...)   the SeedPrint reference implementation's tests, measured beside the verdict
    rate_summary(...)              a false-positive rate with its Clopper-Pearson interval, and the power
    rate(x, n), fit_floor(taus)    one rate with its interval; a floor: twice the largest tau, rounded up
"""
import dataclasses
import functools
import json
import math
import os
import warnings

from common import add_device_flags, add_settings_flags, atomic_write, provenance, settings_given
from model import GPTConfig, LLAMA_KNOBS, get_config, write_checkpoint
import numpy as np
from scipy import stats
import torch

import data
import hf
import seedprint
import train
from init import add_config_flags, build, config_overrides
from studies.edits import permute_residual


# ----------------------------------------------------------------------------- flags every lineage study takes

# How a lineage study trains its models: train.py's recipe, short. Its flags are TrainConfig's own, generated from
# these fields with these defaults; training() fills in the rest.
TRAINING = train.TrainConfig(max_steps=200, ckpt_every=50, batch_size=16, eval_every=0, log_every=50)
TRAINING_FLAGS = ("data_seed", "max_steps", "ckpt_every", "batch_size", "lr")


def add_lineage_flags(parser, out: str, template: train.TrainConfig = TRAINING) -> None:
    """The flags of a study that tests pairs of models with SeedPrint: the architecture (a preset and its knobs,
    LLaMA-style blocks on top), with a training template the data and the training of its models (None: the study
    trains nothing), and the test."""
    add_config_flags(parser, default_model="tiny")
    if template is not None:
        g = parser.add_argument_group("data and training (train.py's flags)")
        g.add_argument("--corpus", default="shakespeare", help="pretraining corpus: a named corpus of data.py, "
                       "or a text file")
        g.add_argument("--corpus2", default="brown", help="the corpus a continuation is trained on")
        g.add_argument("--tokenizer", choices=("bytes", "gpt2"), default="bytes",
                       help="bytes (the default: a vocabulary of 256, fast on a laptop) or gpt2 (50,257 tokens, as "
                       "the README's calibration)")
        g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (data.py --from)")
        add_settings_flags(g, template, TRAINING_FLAGS)
    add_test_flags(parser)
    parser.add_argument("--out", default=out, help="results.json, figures, and every model and fingerprint made")


def add_test_flags(parser) -> None:
    """seedprint.py's flags for the test of each pair, and the device and dtype its fingerprints are made in."""
    add_settings_flags(parser.add_argument_group("the test (seedprint.py's flags)"), seedprint.Options())
    add_device_flags(parser, "load the models in this dtype for their fingerprints (default: as saved)")


def check_lineage_flags(args, models: dict = None, which: str = "the width (--n_embd)", widths=None) -> GPTConfig:
    """Every setting of add_lineage_flags, before any data is read or model trained (the ranges were checked as
    the flags were parsed; here, what depends on several); returns the architecture of the flags (its vocabulary,
    where the study trains, comes from the data).
    models: {how a refusal names them: their config}, the models the study runs where they are not the flags'
    architecture (aligned_floor's conditions, fresh_inits' --base): --seq_len must fit each one's context, and a
    given --k each one's width (`which` names it in the refusal), or `widths` where the study tests narrower models
    made from them (studies.pruned's children)."""
    config = architecture(args)
    models = models or {"a model": config}
    seedprint.check_seq_len(args.seq_len, list(models.values()), list(models))
    if args.k != seedprint.Options().k:                 # left at its default, k is capped at half the width
        seedprint.check_k(args.k, widths or [c.n_embd for c in models.values()], which)
    if hasattr(args, "max_steps"):
        training(args, "cpu")
    return config


def check_base(base: str, seq_len: int) -> GPTConfig:
    """A released model given as --base, checked before any work without reading a weight: a Hugging Face directory,
    its tokenizer (its corpora are tokenized by it), its context long enough for the test. Its config, for the
    study's own checks of its flags; hf.check_weights_finite(base) comes after those, since it reads every weight
    (a refusal comes before any weight is read)."""
    if not os.path.isdir(base):
        raise FileNotFoundError(f"--base {base}: a Hugging Face directory is wanted (config.json, *.safetensors, "
                                f"tokenizer.json)")
    config = hf.read_config(base)
    seedprint.check_seq_len(seq_len, [config], [base])
    data.get_tokenizer(base)
    return config


def base_corpus(out: str, name: str, base: str, data_from: str = None) -> str:
    """A named corpus or a text file, tokenized once by a released model's tokenizer (--base) into out/data_NAME
    (corpus() would put the tokenizer, here a path, into the directory's name)."""
    return data.prepared([name], os.path.join(out, f"data_{data.corpus_label(name)}"), base, data_from)


def released(path: str) -> seedprint.Recipe:
    """A released model (--base) as the studies test it: in float32, the dtype its derivatives are made in, keyed on
    its files; each build a fresh load from disk (a Recipe's model is moved and cast by whoever fingerprints it)."""
    key = "base:" + json.dumps(seedprint.weights_identity(path))
    return seedprint.Recipe(key, lambda: hf.load(path, dtype=torch.float32).eval(), hf.read_config(path))


def architecture(args, **overrides) -> GPTConfig:
    """The preset of --model with LLaMA-style blocks (paper Table 13) and the knob flags on top."""
    return get_config(args.model, **{**LLAMA_KNOBS, **config_overrides(args), **overrides})


def test_options(args) -> seedprint.Options:
    """The test's flags (add_test_flags) as seedprint.Options."""
    return seedprint.Options(**settings_given(args, seedprint.Options))


# ----------------------------------------------------------------------------- data and models, each made once

def training(args, device: str, template: train.TrainConfig = TRAINING) -> train.TrainConfig:
    """The study's training flags on its template, which trained() fills in for each run."""
    given = settings_given(args, train.TrainConfig, TRAINING_FLAGS)
    return dataclasses.replace(template, **given, model=args.model, knobs={**LLAMA_KNOBS, **config_overrides(args)},
                               warmup=min(30, given["max_steps"] // 10), device=device)


def trained(template: train.TrainConfig, out: str, name: str, seed: int, data_dir: str, steps: int = None,
            init_from: str = None, data_seed: int = None, ckpt_every: int = None) -> str:
    """out/runs/name: a run from init seed `seed` (blocks and embeddings alike) on `data_dir`, or continued from the
    checkpoint `init_from`, trained on first use (or resumed to completion) and reused after."""
    steps = steps or template.max_steps
    cfg = dataclasses.replace(
        template, data=data_dir, out_dir=os.path.join(out, "runs", name), init_seed=seed, embed_seed=seed,
        init_from=init_from, model=None if init_from else template.model, knobs={} if init_from else template.knobs,
        data_seed=template.data_seed if data_seed is None else data_seed, max_steps=steps, warmup=min(30, steps // 10),
        ckpt_every=ckpt_every or template.ckpt_every)
    train.ensure(cfg)
    return cfg.out_dir


def checkpoints(run: str) -> list:
    """(step, path) of every checkpoint of a run, step 0 (its init) first."""
    return train.list_checkpoints(run)


def corpus(out: str, name: str, tokenizer: str, data_from: str = None) -> str:
    """A named corpus or a text file, tokenized once into out/data/NAME_TOKENIZER."""
    label = f"{data.corpus_label(name)}_{tokenizer}"
    return data.prepared([name], os.path.join(out, "data", label), tokenizer, data_from)


def init_checkpoint(out: str, config: GPTConfig, seed: int, tokenizer: str) -> str:
    """out/inits/seedS.pt: a fresh init of `config` from seed S (blocks and embeddings), saved once."""
    path = os.path.join(out, "inits", f"seed{seed}.pt")
    if not os.path.isfile(path):
        meta = dict(seeds=dict(init_seed=seed, embed_seed=seed), tokenizer=tokenizer, provenance=provenance())
        atomic_write(path, lambda tmp: write_checkpoint(tmp, build(config, seed, seed), **meta))
    return path


def fresh_init(config: GPTConfig, seed: int) -> seedprint.Recipe:
    """A fresh init of `config` from seed `seed`, built only where its fingerprints are not cached."""
    key = f"init|{json.dumps(dataclasses.asdict(config))}|{seed}"
    return seedprint.Recipe(key, lambda: build(config, seed, seed), config)


def permuted(path: str, flip: float) -> seedprint.Recipe:
    """The model at `path` in a permuted residual basis, each coordinate negated with probability `flip`: the
    same function, the same lineage, other coordinates (studies.edits.permute_residual)."""
    key = f"permuted{flip}|{json.dumps(seedprint.weights_identity(path))}"
    return seedprint.Recipe(key, lambda: permute_residual(hf.load(path), 1, flip), hf.read_config(path))


def sign_flip(path: str) -> float:
    """The chance of a sign flip in permuted(): 0.5 where a sign flip keeps the model's function, else 0."""
    return 0.5 if seedprint.signs_keep_function(hf.read_config(path)) else 0.0


# ----------------------------------------------------------------------------- verdicts of pairs

class Lineage:
    """SeedPrint verdicts of a study's pairs: fingerprints cached under out/fingerprints (each model is run once
    per input set), whitened token-table rows kept in memory for the pairs that follow (each model read and
    whitened once).
    vocab: the token ids' bound for every model (None: the smaller vocabulary of each pair)."""

    def __init__(self, args, out: str, device: str, vocab: int = None, rows_kept: int = 64):
        self.cache = os.path.join(out, "fingerprints")
        self.device, self.dtype, self.vocab = device, args.dtype, vocab
        self.inputs = test_options(args).recorded()
        self.test = {key: self.inputs.pop(key) for key in seedprint.STATISTIC}
        self.rows, self.rows_kept = {}, rows_kept

    def bound(self, *models) -> int:
        """The token ids' bound of a pair: self.vocab, else their smaller vocabulary."""
        if self.vocab:
            return self.vocab
        return min((seedprint.config_of(m) or m.build().config).vocab_size for m in models)

    def fingerprint_sets(self, m, vocab: int, names=seedprint.SETS) -> dict:
        """{name: m's fingerprint on that input set} for each name given of seedprint.SETS (input_sets): the exact
        verdict's inputs, the aligned verdict's test and held-out (alignment) inputs."""
        if not names:                    # fingerprint_all, given no set, would make the exact one
            return {}
        every = seedprint.input_sets(vocab, self.inputs["seed"])
        return seedprint.fingerprint_all([m], self.cache, self.device, self.dtype, dict(self.inputs, vocab=vocab),
                                         {name: every[name] for name in names})[0]

    def exact_fingerprint(self, m, vocab: int) -> np.ndarray:
        """m's fingerprint on the exact verdict's inputs."""
        return self.fingerprint_sets(m, vocab, ["exact"])["exact"]

    def whitened_rows(self, m, lo: int, hi: int):
        """Rows [lo, hi) of m's token table (seedprint.token_rows), whitened (seedprint.whitened_table, as
        table_match takes them with whitened=True; None where they cannot be), kept for the next pairs (the last
        rows_kept models): a model is matched in many pairs, its table read and whitened once."""
        key = json.dumps([seedprint.weights_identity(m) if isinstance(m, str) else m.key, lo, hi])
        if key not in self.rows:
            if len(self.rows) >= self.rows_kept:
                self.rows.pop(next(iter(self.rows)))
            self.rows[key] = seedprint.whitened_table(seedprint.token_rows(m, lo, hi))
        return self.rows[key]

    def pair(self, a, b, aligned: bool = True) -> tuple:
        """(exact verdict, aligned verdict or None) of two models (paths or Recipes); two widths: (None, the matched
        verdict)."""
        vocab = self.bound(a, b)
        # the widths from the configs, before any fingerprint: a pair of two widths has no exact test, so its exact
        # set is never made; a model of unknown config (a Recipe that names none) shows its width in that set
        configs = [seedprint.config_of(m) for m in (a, b)]
        widths = None if None in configs else [c.n_embd for c in configs]
        names = ([] if seedprint.two_widths(widths) else ["exact"]) + (["test", "held_out"] if aligned else [])
        A, B = (self.fingerprint_sets(m, vocab, names) for m in (a, b))
        one_width = not seedprint.two_widths(widths or [A["exact"].shape[1], B["exact"].shape[1]])
        exact = seedprint.seedprint_test(A["exact"], B["exact"], **self.test) if one_width else None
        if not aligned:
            return exact, None
        signed = seedprint.signs_keep_function(seedprint.config_of(a), seedprint.config_of(b))
        tables = [self.whitened_rows(m, vocab // 2, vocab) for m in (a, b)]
        matched = seedprint.seedprint_test(A["test"], B["test"], **self.test, align=(A["held_out"], B["held_out"]),
                                           signed=signed, tables=tables, whitened=True)
        return exact, matched

    def row(self, a, b, label: str, related: bool = None) -> dict:
        """A table row of the exact verdict of a pair, with the reference tests beside it."""
        r, _ = self.pair(a, b, aligned=False)
        vocab = self.bound(a, b)
        reference = reference_tests(self.exact_fingerprint(a, vocab), self.exact_fingerprint(b, vocab), **self.test)
        truth = {None: "-", True: "related", False: "unrelated"}[related]
        return dict(pair=label, truth=truth, verdict="RELATED" if r.related else "unrelated", p=r.p, p_perm=r.p_perm,
                    p_overlap=r.p_overlap, mean_tau=r.mean_tau, S=r.n_identity, **reference)


# ----------------------------------------------------------------------------- the reference tests

def reference_tests(HA: np.ndarray, HB: np.ndarray, k: int = 400, rank_by: str = "smallest", set_mode: str = "coset",
                    temperature: float = 10.0) -> dict:
    """The SeedPrint reference implementation's tests on two fingerprints, for the calibration studies that show
    why they are not seedprint.py's verdict: p_z, the analytic z of mean tau (2 sf(z), as the reference computes
    it: a one-sided test at alpha/2, not a two-sided p), and p_t, p_u, a one-sided t-test and Mann-Whitney U of
    the identity dimensions' taus against null_taus. None where |S| < 2 (no tau to test)."""
    S, _, C = seedprint.cross_matrix(HA, HB, k, rank_by, set_mode, temperature)
    if len(S) < 2:
        return dict(p_z=None, p_t=None, p_u=None)
    N, d = HA.shape
    taus = np.diag(C)
    sd = math.sqrt(2 * (2 * N + 5) / (9 * N * (N - 1)))          # std of tau-b under independence
    null = null_taus(N, d, k=k, rank_by=rank_by, set_mode=set_mode, temperature=temperature)
    with warnings.catch_warnings():               # identical fingerprints (a model against itself) are legitimate
        warnings.simplefilter("ignore", RuntimeWarning)
        p_t = float(stats.ttest_ind(taus, null, alternative="greater").pvalue)
        p_u = float(stats.mannwhitneyu(taus, null, alternative="greater").pvalue)
    defined = lambda p: None if math.isnan(p) else p      # a model against itself: no spread, the statistics are 0/0
    return dict(p_z=float(min(1.0, 2 * stats.norm.sf(taus.mean() / (sd / math.sqrt(len(S)))))), p_t=defined(p_t),
                p_u=defined(p_u))


@functools.lru_cache(maxsize=16)
def null_taus(N: int, d: int, trials: int = 10, seed: int = 0, k: int = 400, rank_by: str = "smallest",
              set_mode: str = "coset", temperature: float = 10.0) -> np.ndarray:
    """The reference's null: the same pipeline on `trials` pairs of independent randn(N, d) matrices, pooled.
    Cached on every argument it depends on."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        A, B = rng.standard_normal((N, d)), rng.standard_normal((N, d))
        S, _ = seedprint.identity_set(A, B, k, rank_by, set_mode)
        if len(S) == 0:
            continue
        A, B = seedprint.softmax_rows(A[:, S], temperature), seedprint.softmax_rows(B[:, S], temperature)
        out += [stats.kendalltau(A[:, j], B[:, j]).statistic for j in range(len(S))]
    return np.array(out)


# ----------------------------------------------------------------------------- rates

def clopper_pearson(x: int, n: int, level: float = 0.95):
    """The exact binomial confidence interval of a rate x / n."""
    lo = stats.beta.ppf((1 - level) / 2, x, n - x + 1) if x > 0 else 0.0
    hi = stats.beta.ppf(1 - (1 - level) / 2, x + 1, n - x) if x < n else 1.0
    return float(lo), float(hi)


def rate(x: int, n: int) -> dict:
    """x of n as a percentage with its 95% Clopper-Pearson interval, as the tables print them."""
    lo, hi = clopper_pearson(x, n)
    return dict(rate=f"{100 * x / n:.2f}%", CI95=f"[{100 * lo:.2f}, {100 * hi:.2f}]%")


def fit_floor(taus: list):
    """The floor a matched mean tau must reach, fit on unrelated pairs' taus: twice the largest, rounded up to 0.01
    (at least 0.01); None without a pair. How ALIGNED_TAU_FLOOR and PARTIAL_TAU_FLOOR were fit."""
    return max(0.01, math.ceil(200 * max(taus)) / 100) if taus else None


def rate_summary(unrelated: list, related: list, permuted: list = ()) -> dict:
    """FPR with its 95% Clopper-Pearson interval on unrelated pairs' p, TPR on related pairs (and on the ones
    whose B was permuted)."""
    unrelated = np.array(unrelated)
    x, n = int((unrelated < seedprint.ALPHA).sum()), len(unrelated)
    if n == 0:
        out = dict(FPR="no pair", CI95="-")
    else:
        fpr = rate(x, n)
        out = dict(FPR=fpr["rate"], CI95=fpr["CI95"])
    if len(related):
        out["TPR"] = f"{100 * np.mean(np.array(related) < seedprint.ALPHA):.1f}%"
    if len(permuted):
        out["TPR_permuted"] = f"{100 * np.mean(np.array(permuted) < seedprint.ALPHA):.1f}%"
    return out
