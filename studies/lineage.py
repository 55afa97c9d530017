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
    fresh_init(cfg, s)             the same, built in memory on demand (a Recipe)
    permuted(path, flip)           a model's copy in a permuted (signed) residual basis (a Recipe)
    Recipe, cached_fingerprints    models built in code, and fingerprints cached on disk by model and options
    Lineage                        verdicts of pairs from cached fingerprints and token-table rows
    reference_tests(HA, HB, ...)   the SeedPrint reference implementation's tests, measured beside the verdict
    rate_summary(...)              a false-positive rate with its Clopper-Pearson interval, and the power
    rate(x, n), fit_floor(taus)    one rate with its interval; a floor: twice the largest tau, rounded up
"""
import dataclasses
import functools
import hashlib
import json
import math
import os
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from common import add_device_flags, add_settings_flags, atomic_write, provenance, settings_given
from model import GPT, GPTConfig, LLAMA_KNOBS, get_config, write_checkpoint
import numpy as np
from scipy import stats
import torch

import align
import data
import evidence
import hf
import seedprint
import train
from evidence import Options
from init import add_config_flags, build, config_overrides
from studies.edits import permute_residual


# ----------------------------------------------------------------------------- flags every lineage study takes

# How a lineage study trains its models: train.py's recipe, short. Its flags are TrainConfig's own, generated from
# these fields with these defaults; training() fills in the rest.
TRAINING = train.TrainConfig(max_steps=200, ckpt_every=50, batch_size=16, eval_every=0, log_every=50)
TRAINING_FLAGS = ("data_seed", "max_steps", "ckpt_every", "batch_size", "lr")


def add_lineage_flags(parser, out: str, template: train.TrainConfig = TRAINING, tokenizer: bool = True) -> None:
    """The flags of a study that tests pairs of models with SeedPrint: the architecture (a preset and its knobs,
    LLaMA-style blocks on top), with a training template the data and the training of its models (None: the study
    trains nothing; tokenizer=False: a study that makes its own tokenizers takes no --tokenizer), and the test."""
    add_config_flags(parser, default_model="tiny")
    if template is not None:
        g = parser.add_argument_group("data and training (train.py's flags)")
        g.add_argument("--corpus", default="shakespeare", help="pretraining corpus: a named corpus of data.py, "
                       "or a text file")
        g.add_argument("--corpus2", default="brown", help="the corpus a continuation is trained on")
        if tokenizer:
            g.add_argument("--tokenizer", choices=("bytes", "gpt2"), default="bytes",
                           help="bytes (the default: a vocabulary of 256, fast on a laptop) or gpt2 (50,257 tokens, "
                           "as the README's calibration)")
        g.add_argument("--data_from", default=None, help="offline: a directory holding the corpora (data.py --from)")
        add_settings_flags(g, template, TRAINING_FLAGS)
    add_test_flags(parser)
    parser.add_argument("--out", default=out, help="results.json, figures, and every model and fingerprint made")


def add_test_flags(parser) -> None:
    """seedprint.py's flags for the test of each pair, and the device and dtype its fingerprints are made in."""
    add_settings_flags(parser.add_argument_group("the test (seedprint.py's flags)"), Options())
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
    evidence.check_models(list(models.values()), list(models), seq_len=args.seq_len)
    if args.k != Options().k:                           # left at its default, k is capped at half the width
        check_k(args.k, widths or [c.n_embd for c in models.values()], which)
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
    evidence.check_models([config], [base], seq_len=seq_len)
    data.get_tokenizer(base)
    return config


def check_k(k: int, widths, which: str) -> None:
    """A --k given to a study must fit the width of every model it tests (`which` names that width in the refusal):
    the identity set is the k most extreme coordinates, at most half of them (evidence.check_models' rule, for widths
    the study makes itself)."""
    if k > min(widths) // 2:
        raise ValueError(f"--k {k} is more than {which} {min(widths)} allows: at most half of it, {min(widths) // 2}")


def base_corpus(out: str, name: str, base: str, data_from: str = None) -> str:
    """A named corpus or a text file, tokenized once by a released model's tokenizer (--base) into out/data_NAME
    (corpus() would put the tokenizer, here a path, into the directory's name)."""
    return data.prepared([name], os.path.join(out, f"data_{data.corpus_label(name)}"), base, data_from)


def released(path: str) -> "Recipe":
    """A released model (--base) as the studies test it: in float32, the dtype its derivatives are made in, keyed on
    its files; each build a fresh load from disk (a Recipe's model is moved and cast by whoever fingerprints it)."""
    key = "base:" + json.dumps(weights_identity(path))
    return Recipe(key, lambda: hf.load(path, dtype=torch.float32).eval(), hf.read_config(path))


def architecture(args, **overrides) -> GPTConfig:
    """The preset of --model with LLaMA-style blocks (paper Table 13) and the knob flags on top."""
    return get_config(args.model, **{**LLAMA_KNOBS, **config_overrides(args), **overrides})


def test_options(args) -> Options:
    """The test's flags (add_test_flags) as Options."""
    return Options(**settings_given(args, Options))


# ----------------------------------------------------------------------------- data and models, each made once

def warmup_for(steps: int) -> int:
    """The warm-up of a run `steps` long: a tenth of it, at most 30 steps."""
    return min(30, steps // 10)


def training(args, device: str, template: train.TrainConfig = TRAINING) -> train.TrainConfig:
    """The study's training flags on its template, which trained() fills in for each run."""
    given = settings_given(args, train.TrainConfig, TRAINING_FLAGS)
    return dataclasses.replace(template, **given, model=args.model, knobs={**LLAMA_KNOBS, **config_overrides(args)},
                               warmup=warmup_for(given["max_steps"]), device=device)


def run_settings(template: train.TrainConfig, out: str, name: str, seed: int, data_dir: str, steps: int = None,
                 init_from: str = None, data_seed: int = None, ckpt_every: int = None) -> train.TrainConfig:
    """The settings of the run out/runs/name: from init seed `seed` (blocks and embeddings alike) on `data_dir`, or
    continued from the checkpoint `init_from`, `steps` long (the template's by default), warmed up as warmup_for
    says."""
    steps = steps or template.max_steps
    return dataclasses.replace(
        template, data=data_dir, out_dir=os.path.join(out, "runs", name), init_seed=seed, embed_seed=seed,
        init_from=init_from, model=None if init_from else template.model, knobs={} if init_from else template.knobs,
        data_seed=template.data_seed if data_seed is None else data_seed, max_steps=steps, warmup=warmup_for(steps),
        ckpt_every=ckpt_every or template.ckpt_every)


def trained(template: train.TrainConfig, out: str, name: str, seed: int, data_dir: str, steps: int = None,
            init_from: str = None, data_seed: int = None, ckpt_every: int = None) -> str:
    """out/runs/name (run_settings), trained on first use (or resumed to completion) and reused after."""
    cfg = run_settings(template, out, name, seed, data_dir, steps, init_from, data_seed, ckpt_every)
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


def fresh_init(config: GPTConfig, seed: int) -> "Recipe":
    """A fresh init of `config` from seed `seed`, built only where its fingerprints are not cached."""
    key = f"init|{json.dumps(dataclasses.asdict(config))}|{seed}"
    return Recipe(key, lambda: build(config, seed, seed), config)


def permuted(path: str, flip: float) -> "Recipe":
    """The model at `path` in a permuted residual basis, each coordinate negated with probability `flip`: the
    same function, the same lineage, other coordinates (studies.edits.permute_residual)."""
    key = f"permuted{flip}|{json.dumps(weights_identity(path))}"
    return Recipe(key, lambda: permute_residual(hf.load(path), 1, flip), hf.read_config(path))


def sign_flip(path: str) -> float:
    """The chance of a sign flip in permuted(): 0.5 where a sign flip keeps the model's function, else 0."""
    return 0.5 if align.signs_keep_function(hf.read_config(path)) else 0.0


# ----------------------------------------------------------------------------- fingerprints cached on disk
# A study tests the same models in many pairs and runs: each model is fingerprinted once per input set and options,
# cached under out/fingerprints, keyed on the identity of its weights (its files' path, size and mtime, or how a
# model built in code is made) and on every option, the device and dtype included.

@dataclass
class Recipe:
    """A model built in code (a derivative, a fresh init): fingerprinted under a cache key that names how it is
    made, and built only when that key is not cached. build returns a model of its own, never one its caller keeps
    using: cached_fingerprints moves and casts it in place (to the device and dtype asked for)."""
    key: str
    build: Callable[[], GPT]
    config: Optional[GPTConfig] = None     # its architecture, where known without building it (None: unknown)


def weights_identity(path: str) -> list:
    """What the weights at `path` are, as far as the file system tells: path, size and mtime of a checkpoint file,
    or of config.json and every weight file of a Hugging Face directory."""
    if os.path.isfile(path):
        files = [path]
    else:
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if f in ("config.json", "model.safetensors.index.json") or f.endswith(".safetensors"))
    return [[os.path.abspath(f), os.path.getsize(f), os.stat(f).st_mtime_ns] for f in files]


def config_of(m) -> Optional[GPTConfig]:
    """The config of a path, a Recipe that names it or a GPT; None for a Recipe that does not."""
    return hf.read_config(m) if isinstance(m, str) else m.config


def cached_fingerprints(m, cache_dir: str, device, dtype: str, options: dict, sets: dict) -> dict:
    """{name: m's fingerprint (seedprint.fingerprint) on the options updated by sets[name]}: m a path, a Recipe or a
    GPT. Paths and recipes are read from the cache under cache_dir (None: none) where made before; the model is
    loaded (or built) once for the
    rest, and the new fingerprints are written only once all are made: a run that fails on one writes nothing."""
    identity = weights_identity(m) if isinstance(m, str) else m.key if isinstance(m, Recipe) else None
    out, new, model = {}, [], m if isinstance(m, GPT) else None
    for name, s in sets.items():
        opts = dict(options, **s)
        key = json.dumps(dict(weights=identity, device=str(device), dtype=str(dtype), options=opts,
                              autocast="bf16" if str(device).startswith("cuda") else None, version=4), sort_keys=True)
        file = os.path.join(cache_dir, hashlib.sha256(key.encode()).hexdigest()[:20] + ".npz") \
            if cache_dir and identity is not None else None
        if file and os.path.isfile(file):
            out[name] = np.load(file)["H"]
            continue
        if model is None:
            torch_dtype = getattr(torch, dtype) if dtype else None
            model = m.build().to(device, torch_dtype) if isinstance(m, Recipe) else hf.load(m, device, torch_dtype)
            model.eval()
        out[name] = seedprint.fingerprint(model, name=m if isinstance(m, str) else getattr(m, "key", "a model"),
                                          progress=isinstance(m, str), **opts)
        if file:
            new.append((file, out[name], key))
    for file, H, key in new:
        def save(tmp, H=H, key=key):
            with open(tmp, "wb") as fh:
                np.savez(fh, H=H, key=key)
        atomic_write(file, save)
    return out


def fingerprint_file(m, cache_dir: str, device, dtype: str, options: dict, names=align.SETS,
                     tokens: list = None) -> evidence.Fingerprint:
    """m (a path or a Recipe) as seedprint.py --save makes its fingerprint file, its fingerprints from the cache: for
    a study that registers and searches many models. options: Options.recorded()'s (vocab: the model's own); names:
    the input sets made (a suspect searched, not written, needs only those its verdict reads); tokens: the bytes
    of the token each id below vocab names (data.token_bytes), recorded where models of other tokenizers meet it."""
    config, options = config_of(m) or m.build().config, dict(Options().recorded(), **options)
    vocab = options.get("vocab") or config.vocab_size
    inputs = {k: v for k, v in options.items() if k not in ("k", "rank_by", "set_mode")}
    every = align.input_sets(vocab, options["seed"])
    H = cached_fingerprints(m, cache_dir, device, dtype, dict(inputs, vocab=vocab), {n: every[n] for n in names})
    weights = dict(recipe=m.key) if isinstance(m, Recipe) else evidence.weights_record(m, file_digests(m))
    return evidence.Fingerprint(H, token_rows(m, vocab // 2, vocab), dict(options, vocab=vocab),
                                dataclasses.asdict(config), weights, evidence.made(device, dtype),
                                path=m if isinstance(m, str) else m.key, tokens=tokens and tokens[:vocab])


def file_digests(path: str) -> dict:
    """Each weight file's size and sha256, as hf.load(digests=...) records them, read apart (the studies' models are
    small; seedprint.py takes them on the load's own read)."""
    stored = hf.read(path)
    stored.close()
    files = [stored.path] if stored.checkpoint is not None else list(stored.shards)
    digests = {}
    for f in files:
        with open(f, "rb") as fh:
            digests[os.path.relpath(f, path) if os.path.isdir(path) else os.path.basename(f)] = dict(
                bytes=os.path.getsize(f), sha256=hashlib.file_digest(fh, "sha256").hexdigest())
    return digests


def token_rows(m, lo: int, hi: int):
    """Rows [lo, hi) of a model's token table, float32 (rows x d): a path's read alone (hf.token_rows), a Recipe's
    or a GPT's from the model."""
    if isinstance(m, str):
        return hf.token_rows(m, lo, hi)
    table = (m if isinstance(m, GPT) else m.build()).transformer.wte.weight
    return table[lo:hi].detach().float().cpu().numpy()


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
        self.test = {key: self.inputs.pop(key) for key in ("k", "rank_by", "set_mode")}
        self.rows, self.rows_kept = {}, rows_kept

    def bound(self, *models) -> int:
        """The token ids' bound of a pair: self.vocab, else their smaller vocabulary."""
        if self.vocab:
            return self.vocab
        return min((config_of(m) or m.build().config).vocab_size for m in models)

    def fingerprint_sets(self, m, vocab: int, names=align.SETS, ids=None) -> dict:
        """{name: m's fingerprint on that input set} for each name given of align.SETS (align.input_sets): the exact
        verdict's inputs, the aligned verdict's test and held-out (alignment) inputs. ids: m's ids of the inputs'
        positions (evidence.token_inputs, where two tokenizers differ; None: the positions are the ids)."""
        every = align.input_sets(vocab, self.inputs["seed"])
        fed = {} if ids is None else dict(ids=[int(i) for i in ids])      # in the cache key: a list, not an array
        return cached_fingerprints(m, self.cache, self.device, self.dtype, dict(self.inputs, vocab=vocab, **fed),
                                   {name: every[name] for name in names})

    def exact_fingerprint(self, m, vocab: int) -> np.ndarray:
        """m's fingerprint on the exact verdict's inputs."""
        return self.fingerprint_sets(m, vocab, ["exact"])["exact"]

    def whitened_rows(self, m, lo: int, hi: int, ids=None):
        """Rows [lo, hi) of m's token table (token_rows; ids: the rows of ids[lo:hi], the same tokens' in two
        tokenizers), whitened (align.whitened_table, as whitened_match takes them with whitened=True; None where they
        cannot be), kept for the next pairs (the last rows_kept models): a model is matched in many pairs, its table
        read and whitened once."""
        held = None if ids is None else [int(i) for i in ids[lo:hi]]
        key = json.dumps([weights_identity(m) if isinstance(m, str) else m.key, lo, hi, held])
        if key not in self.rows:
            if len(self.rows) >= self.rows_kept:
                self.rows.pop(next(iter(self.rows)))
            rows = token_rows(m, lo, hi) if held is None else token_rows(m, 0, max(held) + 1)[held]
            self.rows[key] = align.whitened_table(rows)
        return self.rows[key]

    def pair(self, a, b, aligned: bool = True, tokens=None) -> tuple:
        """(exact verdict, aligned verdict or None) of two models (paths or Recipes); two widths: (None, the matched
        verdict). tokens: each model's ids of the inputs' positions where their tokenizers differ
        (evidence.token_inputs, as seedprint.py feeds them), drawn below their number; None: ids as they are."""
        vocab = self.bound(a, b) if tokens is None else len(tokens[0])
        ids = (None, None) if tokens is None else tokens
        # the widths from the configs, before any fingerprint: a pair of two widths has no exact test, so its exact
        # set is never made; a model of unknown config (a Recipe that names none) shows its width in that set
        configs = [config_of(m) for m in (a, b)]
        widths = None if None in configs else [c.n_embd for c in configs]
        names = ([] if align.two_widths(widths) else ["exact"]) + (["test", "held_out"] if aligned else [])
        A, B = (self.fingerprint_sets(m, vocab, names, i) for m, i in zip((a, b), ids))
        one_width = not align.two_widths(widths or [A["exact"].shape[1], B["exact"].shape[1]])
        exact = seedprint.seedprint_test(A["exact"], B["exact"], **self.test) if one_width else None
        if not aligned:
            return exact, None
        signed = align.signs_keep_function(*configs)
        tables = [self.whitened_rows(m, vocab // 2, vocab, i) for m, i in zip((a, b), ids)]
        matched = seedprint.seedprint_test(A["test"], B["test"], **self.test, held_out=(A["held_out"], B["held_out"]),
                                           signed=signed, tables=tables, whitened=True)
        return exact, matched

    def verdicts(self, a, b, tokens=None) -> dict:
        """Both verdicts of a pair of one width as a table row's fields: the exact one (exact, p, mean_tau, S) and
        the aligned one (aligned, p_aligned, tau_aligned, S_aligned), with how B's coordinates were matched
        (matched_on, table_fit, input_fit, moved). tokens: as pair's (None: by id)."""
        exact, aligned = self.pair(a, b, tokens=tokens)
        m = aligned.alignment
        return dict(exact=bool(exact.related), p=exact.p, mean_tau=exact.mean_tau, S=exact.n_identity,
                    aligned=bool(aligned.related), p_aligned=aligned.p, tau_aligned=m.tau_aligned,
                    S_aligned=m.n_identity_aligned, matched_on=m.matched_on, table_fit=m.table_fit,
                    input_fit=m.input_fit, moved=m.moved)

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


def span(values, fmt: str = "{:+.3f}") -> str:
    """The range of some values as the tables print it: "min to max" in `fmt`; "-" where there are none. A NaN or
    inf is refused: as text it would pass write_json's refusal of them, and min and max misread a NaN."""
    values = list(values)
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"a table's range of {len(values)} values holds {bad[0]}: not finite")
    return f"{fmt.format(min(values))} to {fmt.format(max(values))}" if values else "-"


def fit_floor(taus: list):
    """The floor a matched mean tau must reach, fit on unrelated pairs' taus: twice the largest, rounded up to 0.01
    (at least 0.01); None without a pair. How PARTIAL_TAU_FLOOR was fit (and the aligned verdict's floor
    of the rule before, studies.aligned_floor)."""
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
