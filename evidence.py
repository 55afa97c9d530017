"""
evidence.py: a model's SeedPrint fingerprint as a file -- the evidence that travels in a dispute (paper Section 6.1).

In a dispute the models rarely sit on one machine, and an owner may not publish weights. One .npz file holds
everything a verdict reads of one model: its fingerprints on the exact verdict's inputs and on the aligned verdict's
test and held-out inputs (align.input_sets), its token table's held-out rows, the options that fixed them, its
config, and each weight file's name, size and sha256. A verdict from two files is the verdict from the two models:
the same arrays reach the same test. A registry is a folder of such files; `python seedprint.py SUSPECT --against
DIR` tests one suspect against all of them.

A file is evidence only if it holds up when the other side made it. Whoever reads one gets it checked, each refusal
one line: a file that is no fingerprint file, of a format version this code does not know, whose members are not
the ones its record announces or are larger than its record allows (checked on the zip's directory, before any
member is decompressed), whose content does not match its own sha256, or whose arrays do not fit its options and
config, hold NaN or inf, or are constant (a fingerprint with nothing to rank, which a model with such states is
refused for too: check_states). The sha256 proves a file whole, not that it came from a model: anyone can compute it.
A file records the base name of the weights it came from, never a path of its maker's machine.

    Options                 what fixes a fingerprint and its test: the inputs and the statistic, each a flag of
                            seedprint.py and of every lineage study, with its range
    Fingerprint             one file, in memory
    write(path, fp)         fp as a file, whole or not at all; an existing file is never replaced (check_new)
    read(path)              a file, checked
    registry(folder)        every file of a folder, read
    report, report_search   a comparison and a suspect's search of a registry, printed and recorded
    agreed_options(...)     the options of a comparison: the files' (all alike), the flags' (alike with them)
    check_models(...)       the models a comparison's inputs can be taken of (context, vocabulary, k)
    check_statistic(...)    the statistic's options in range (Options', temperature and alpha)
    check_states(H, name)   what any fingerprint must be to be evidence, made here or read from a file
    shared_by_construction  what two models' own records (checkpoints' seeds, files' sha256s) say they share

Imports align.py (the input sets' names), model.py (GPTConfig) and common.py (flags, writing a file whole).
"""
import dataclasses
import hashlib
import json
import math
import os
import zipfile
from dataclasses import dataclass

import numpy as np
import torch

from align import SETS, two_widths
import hf
from common import atomic_write, check_settings, figure, print_table, provenance, save_figure, setting, short_names
from model import GPT, GPTConfig

FILE_FORMAT, FILE_VERSION = "seedprint-fingerprint", 1
# The options a file records: the inputs (N, T, their seed, the token ids' bound) and the statistic (k, rank_by,
# set_mode). seedprint.py's Options gives them their ranges, under their flags' names (--input_seed: seed).
OPTIONS = ("sequences", "seq_len", "seed", "vocab", "k", "rank_by", "set_mode")
META_BYTES = 1 << 20          # the largest record (meta.npy) read: a real one is a few kilobytes
NPY_HEADER = 4096             # the most an array member may hold beyond its numbers (numpy writes 128 bytes)


@dataclass(frozen=True)
class Options:
    """What fixes a verdict: the random inputs every model sees and the statistic on their fingerprints. Each field
    is a flag of seedprint.py and of every lineage study, its range checked here; a fingerprint file records them
    under RECORDED_AS's names (OPTIONS), with the token ids' bound (vocab: no field, a model's own by default)."""
    sequences: int = setting(2000, "random input sequences N", "int>=10")
    seq_len: int = setting(64, "tokens per input (the paper: 1024)", "int>=1")
    input_seed: int = setting(0, "seed of the random inputs", "seed")
    k: int = setting(400, "identity dimensions per model (by default capped at half the width; given, at most half "
                     "the narrower width)", "int>=2")
    rank_by: str = setting("smallest", "the identity dimensions: the k of smallest, largest or largest |mean output|",
                           choices=("smallest", "largest", "abs"))
    set_mode: str = setting("coset", "coset: A's identity set intersected with B's; base: A's alone",
                            choices=("coset", "base"))
    RECORDED_AS = {"input_seed": "seed"}

    def __post_init__(self):
        check_settings(self)

    def recorded(self, fields=None) -> dict:
        """These options (every field, or those named in `fields`) under the names a file records them by."""
        fields = [f.name for f in dataclasses.fields(self)] if fields is None else fields
        return {self.RECORDED_AS.get(name, name): getattr(self, name) for name in fields}

    @classmethod
    def from_recorded(cls, options: dict) -> "Options":
        """recorded's inverse, every range checked (the token ids' bound too, where given); a key that recorded
        never writes raises TypeError."""
        field_of = {cls.RECORDED_AS.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(field_of) - {"vocab"})
        if unknown:
            raise TypeError(f"no option is recorded as {', '.join(unknown)}")
        if options.get("vocab") is not None and not (type(options["vocab"]) is int and options["vocab"] >= 2):
            raise ValueError(f"--vocab must be an integer >= 2, got {options['vocab']!r}")
        return cls(**{field_of[k]: v for k, v in options.items() if k != "vocab"})


def check_statistic(k=400, rank_by="smallest", set_mode="coset", temperature=10.0, alpha=0.01) -> None:
    """The statistic's options in range (Options' ranges, and the two that are no flag)."""
    Options(k=k, rank_by=rank_by, set_mode=set_mode)
    if not temperature > 0 or not 0 < alpha < 1:
        raise ValueError(f"need temperature > 0 and 0 < alpha < 1, got {temperature}, {alpha}")


@dataclass
class Fingerprint:
    """One model's fingerprint file, in memory."""
    sets: dict          # {name in SETS: the fingerprint on those inputs, N x d float32}
    rows: np.ndarray    # the token table's held-out rows [vocab // 2, vocab), float32 (align.input_sets)
    options: dict       # what fixed the inputs and the statistic: OPTIONS
    config: dict        # the model's GPTConfig fields (its width, vocabulary, norm)
    weights: dict       # the weights it came from: their base name, each file's size and sha256
    provenance: dict    # device, dtype, versions, date
    path: str = ""


def check_states(H: np.ndarray, name: str) -> None:
    """A fingerprint is evidence only where it can rank inputs: a row with NaN or inf (an fp16/bf16 overflow), or
    more than half its dimensions constant across the inputs (a degenerate model, or too few distinct inputs), is
    refused, naming the model or file."""
    bad = int((~np.isfinite(H)).any(axis=1).sum())
    if bad:
        raise ValueError(f"{name}: {bad} of {len(H)} fingerprint rows hold NaN or inf (an fp16/bf16 overflow?); "
                         f"load the model in float32 (--dtype float32)")
    constant = int((H.std(axis=0, dtype=np.float64) <= 1e-6 * (np.abs(H).max() + 1e-30)).sum())   # float32's std
                                                                                    # of a constant column is not 0
    if constant > H.shape[1] // 2:
        raise ValueError(f"{name}: {constant} of {H.shape[1]} fingerprint dimensions are constant across the "
                         f"{len(H)} inputs: nothing to rank (a degenerate or overflowing model, or too few inputs)")


def write(path: str, fp: Fingerprint) -> None:
    """fp as one .npz file, written whole: the arrays, and their meta (format, version, options, config, weights,
    provenance) with a sha256 over all of it, so that a damaged or edited file is refused when read. The table's
    rows are stored in the narrowest float type that holds them exactly (bf16 weights stay two bytes a number).
    An existing file is refused, whoever's it is (check_new)."""
    check_new(path)
    rows, rows_dtype = compact(fp.rows)
    arrays = {**{name: fp.sets[name] for name in SETS}, "rows": rows}
    meta = dict(format=FILE_FORMAT, version=FILE_VERSION, options=fp.options, config=fp.config, weights=fp.weights,
                provenance=fp.provenance, rows_dtype=rows_dtype)
    meta["sha256"] = digest(meta, arrays)

    def save(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    atomic_write(path, save)


def check_new(path: str) -> None:
    """A fingerprint file is never replaced, whoever's it is: one that exists is refused (remove it to remake it)."""
    if os.path.exists(path):
        raise FileExistsError(f"{path} exists: a fingerprint file is never replaced; remove it, or give another name")


def read(path: str) -> Fingerprint:
    """A fingerprint file, checked as the module's docstring says; each refusal one line naming the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no fingerprint file at {path!r}" + (" (a directory)" if os.path.isdir(path) else ""))
    remake = "make it again with python seedprint.py MODEL --save FILE"
    try:
        with zipfile.ZipFile(path) as z:
            sizes = {info.filename: info.file_size for info in z.infolist()}
            if sizes.get("meta.npy", META_BYTES + 1) > META_BYTES:
                raise ValueError(f"{path} is not a SeedPrint fingerprint file (make one with python seedprint.py "
                                 f"MODEL --save FILE)")
            meta = json.loads(str(np.lib.format.read_array(z.open("meta.npy"), allow_pickle=False)))
            expected = announced(path, meta, remake)
            if set(sizes) != {f"{name}.npy" for name in ("meta", *expected)} or any(
                    sizes[f"{name}.npy"] > shape_bytes(*expected[name]) + NPY_HEADER for name in expected):
                raise ValueError(f"{path} holds other members, or larger ones, than its record announces "
                                 f"({', '.join(sorted(sizes))}): {remake}")
            arrays = {name: np.lib.format.read_array(z.open(f"{name}.npy"), allow_pickle=False) for name in expected}
    except (zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a readable fingerprint file: damaged, truncated or another format "
                         f"({type(e).__name__}: {str(e)[:80]})") from None
    if meta.get("sha256") != digest({k: v for k, v in meta.items() if k != "sha256"}, arrays):
        raise ValueError(f"{path} does not match its own sha256: the file is damaged or was edited; make it again")
    for name, (shape, dtype) in expected.items():
        a = arrays[name]
        if a.shape != shape or a.dtype != dtype:
            raise ValueError(f"{path} holds its {name} array as {a.dtype} {a.shape}, where its options and config "
                             f"make it {np.dtype(dtype)} {shape}: {remake}")
    rows = expand(arrays["rows"], meta["rows_dtype"])
    for name, a in (*((name, arrays[name]) for name in SETS), ("rows", rows)):
        if not np.isfinite(a).all():                    # NaN ties every pair: scored, it would read "unrelated"
            raise ValueError(f"{path} holds NaN or inf in its {name} array: {remake}")
    for name in SETS:
        check_states(arrays[name], f"{path} ({name} inputs)")
    return Fingerprint({name: arrays[name] for name in SETS}, rows, meta["options"], meta["config"], meta["weights"],
                       meta["provenance"], path=path)


def announced(path: str, meta, remake: str) -> dict:
    """{array name: (shape, dtype)} a file's record announces, its record checked on the way: a fingerprint file of a
    format version this code reads (1 to FILE_VERSION), with a config, weights and provenance record, exactly the
    OPTIONS, each in range (Options), and a known rows_dtype."""
    if not isinstance(meta, dict) or meta.get("format") != FILE_FORMAT:
        raise ValueError(f"{path} is not a SeedPrint fingerprint file (make one with python seedprint.py MODEL "
                         f"--save FILE)")
    version = meta.get("version")
    if type(version) is not int or not 1 <= version <= FILE_VERSION:
        raise ValueError(f"{path} is a fingerprint file of format version {version!r}; this code reads versions 1 "
                         f"to {FILE_VERSION}" + (": update the project" if type(version) is int
                                                 and version > FILE_VERSION else f": {remake}"))
    for record in ("config", "weights", "provenance"):
        if not isinstance(meta.get(record), dict):
            raise ValueError(f"{path} records no {'model config' if record == 'config' else record}: {remake}")
    unknown = sorted(set(meta["config"]) - {f.name for f in dataclasses.fields(GPTConfig)})
    if unknown:                    # GPTConfig(**config) would fail far from here, as an internal error
        raise ValueError(f"{path} records a model config with fields this code does not know ({', '.join(unknown)}):"
                         f" a later version of the project made it; update the project")
    options = meta.get("options")
    if not isinstance(options, dict) or set(options) != set(OPTIONS):
        got = set(options) if isinstance(options, dict) else set()
        raise ValueError(f"{path} records other options than a fingerprint file holds (missing: "
                         f"{', '.join(sorted(set(OPTIONS) - got)) or 'none'}; unknown: "
                         f"{', '.join(sorted(got - set(OPTIONS))) or 'none'}): {remake}")
    try:
        Options.from_recorded(options)
        if options["vocab"] is None:
            raise ValueError("no token ids' bound (vocab)")
        d = GPTConfig(**meta["config"]).n_embd
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path} records an option or a config it cannot have been made with ({e}): {remake}") \
            from None
    sequences, vocab = options["sequences"], options["vocab"]
    if not isinstance(meta.get("rows_dtype"), str) or meta["rows_dtype"] not in ROWS_DTYPES:    # a list: unhashable
        raise ValueError(f"{path} records its table's rows as {meta.get('rows_dtype')!r}, not one of "
                         f"{', '.join(ROWS_DTYPES)}: {remake}")
    return {**{name: ((sequences, d), np.dtype(np.float32)) for name in SETS},
            "rows": ((vocab - vocab // 2, d), np.dtype(ROWS_DTYPES[meta["rows_dtype"]]))}


def shape_bytes(shape: tuple, dtype: np.dtype) -> int:
    return int(np.prod(shape)) * dtype.itemsize


def registry(folder: str) -> list:
    """The fingerprint files (*.npz) of a folder, by name, read; an empty folder, or an .npz that is no fingerprint
    file, is refused."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"--against {folder}: {'a file' if os.path.exists(folder) else 'no such'} folder; "
                                f"give a folder of fingerprint files (python seedprint.py MODEL --save DIR/NAME.npz)")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".npz"))
    if not files:
        raise FileNotFoundError(f"--against {folder} holds no fingerprint file (*.npz); make them with python "
                                f"seedprint.py MODEL --save {folder}/NAME.npz")
    return [read(f) for f in files]


def report(models: list, out: str, res: dict, seconds: float) -> dict:
    """Print two models' verdict in a line; of more, the verdict, Holm-adjusted p and mean tau of every pair as
    matrices, the lineages, and a heatmap of the p values (out/matrix.png). Returns them for results.json."""
    n, names = len(models), short_names(models)
    if n == 2:
        r = res["results"][(0, 1)]
        print(f"{r.explain()} [{seconds:.1f} s]")
        return {"compare": dict(a=models[0], b=models[1], **r.record(), seconds=seconds, options=res["options"])}
    cell = lambda i, j, f: "-" if i == j else f(res["results"][(min(i, j), max(i, j))])
    for title, f in (("verdict (Holm-adjusted over all pairs)", lambda r: "RELATED" if r.related else "unrelated"),
                     ("p (Holm-adjusted)", lambda r: f"{r.p:.2g}"), ("mean tau", lambda r: f"{r.mean_tau:+.3f}")):
        print(title)
        print_table([dict(model=names[i], **{f"[{j}]": cell(i, j, f) for j in range(n)}) for i in range(n)])
    groups = [[names[i] for i in g] for g in res["groups"]]
    print("lineages: " + " | ".join(", ".join(g) for g in groups) + f"   [{seconds:.1f} s for {n} models]")
    for (i, j), r in res["results"].items():
        if r.shared:
            print(f"by construction, {names[i]} and {names[j]}: {r.shared}")
    plt, fig, ax = figure(figsize=(1.0 * n + 3, 0.8 * n + 2))
    logp = np.zeros((n, n))
    for (i, j), r in res["results"].items():
        logp[i, j] = logp[j, i] = min(-math.log10(max(r.p, 1e-300)), 300)
        for a, b in ((i, j), (j, i)):
            ax.text(b, a, f"{'R' if r.related else 'u'}\n{r.mean_tau:+.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(ax.imshow(logp, cmap="viridis"), ax=ax)
    ax.set(xticks=range(n), yticks=range(n), title="SeedPrint: -log10 p (Holm), R = related, mean tau")
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    ax.set_yticklabels(names, fontsize=7)
    save_figure(fig, os.path.join(out, "matrix.png"))
    return {"matrix": dict(models=models, seconds=seconds, groups=groups,
                           pairs=[dict(a=models[i], b=models[j], **r.record()) for (i, j), r in res["results"].items()])}


def report_search(suspect: str, bases: list, res: dict, seconds: float, alpha: float) -> dict:
    """Print each base's verdict in a suspect's search of a registry (seedprint.search's `res`) and the answer;
    return them for results.json."""
    names = short_names(bases)
    rows = [dict(base=name, verdict="RELATED" if r.related else "unrelated", p_holm=r.p, p=r.p_raw,
                 mean_tau=r.mean_tau if r.alignment is None else r.alignment.tau_aligned,
                 test="exact" if r.alignment is None else f"matched (widths {r.alignment.widths})"
                 if two_widths(r.alignment.widths) else "aligned") for name, r in zip(names, res["results"])]
    print_table(rows, floats="{:.3g}")
    related = [names[i] for i in res["related"]]
    if res["answer"] == "derives from":
        answer = f"{suspect} derives from {related[0]} (Holm-adjusted p {rows[res['base']]['p_holm']:.3g})"
    elif res["answer"] == "none":
        answer = (f"{suspect} derives from none of these {len(bases)} bases (smallest Holm-adjusted p "
                  f"{min(r['p_holm'] for r in rows):.3g}, alpha {alpha})")
    else:
        lineage = ("they are one lineage by their own test: the suspect derives from that lineage, and this test "
                   "cannot tell from which of them" if res["one_lineage"] else "they are not all one lineage by "
                   "their own test, so no single base can be named")
        answer = f"inconclusive: {suspect} is related to {', '.join(related)}; {lineage}"
    for name, r in zip(names, res["results"]):
        if r.shared:
            print(f"{name} and the suspect: {r.shared}")
    print(f"{answer} [{seconds:.1f} s]")
    return dict(suspect=suspect, answer=res["answer"], statement=answer, base=bases[res["base"]] if res["base"]
                is not None else None, related=[bases[i] for i in res["related"]], one_lineage=res["one_lineage"],
                bases=[dict(base=b, **r.record()) for b, r in zip(bases, res["results"])],
                options=res["options"], seconds=seconds)


def read_model(m):
    """A model as given, read as far as a comparison's checks need: a path by hf.read (its config, no weight), an
    .npz path by read (a fingerprint file, checked); a GPT, a callable, a Fingerprint or an array as it is."""
    if isinstance(m, (str, os.PathLike)):
        return read(m) if os.fspath(m).endswith(".npz") else hf.read(m)
    return m


def config_of(m):
    """The GPTConfig of a model as read_model leaves it; None for a callable or a fingerprint array."""
    return GPTConfig(**m.config) if isinstance(m, Fingerprint) else getattr(m, "config", None)


def name_of(m) -> str:
    """How a message names a model: its path, else "a model"."""
    return m if isinstance(m, str) else getattr(m, "path", None) or "a model"


def loaded(m, device="cpu", dtype: str = None, digests: bool = False):
    """(the model, its record for shared_by_construction) of a model as read_model leaves it: one on disk loaded
    once (hf.load), its files' sha256s taken on that read where digests is asked; a GPT or a callable as it is."""
    if isinstance(m, hf.Stored):
        files = {} if digests else None
        model = hf.load(m, device, getattr(torch, dtype) if dtype else None, files).eval()
        return model, dict(record_of(m), weights=weights_record(m.path, files) if digests else {})
    if not callable(m):
        raise TypeError(f"expected a GPT, a path, a callable or a fingerprint, got {type(m).__name__}")
    return m if isinstance(m, GPT) or not hasattr(m, "eval") else m.eval(), record_of(m)


def record_of(m) -> dict:
    """What a model's own records hold for shared_by_construction: its name, its train.py checkpoint (None: none)
    and the weights a fingerprint file names (a model in memory: its type)."""
    weights = m.weights if isinstance(m, Fingerprint) else {} if isinstance(m, (hf.Stored, np.ndarray)) else \
        dict(in_memory=type(m).__name__)
    return dict(path=name_of(m), checkpoint=getattr(m, "checkpoint", None), weights=weights)


def agreed_options(files: list, asked: dict) -> dict:
    """The options of a comparison, OPTIONS' keys: the fingerprint files' (which must all agree), the ones asked for
    (None: not asked; where files are given, they must agree with them), else Options' defaults (vocab: None, the
    models' own). A disagreement is refused in one line naming every option that differs."""
    opts = {name: (files[0].options if files else Options().recorded()).get(name) for name in OPTIONS}
    for f in files[1:]:
        differ = [f"{k} {opts[k]} vs {f.options[k]}" for k in OPTIONS if f.options[k] != opts[k]]
        if differ:
            raise ValueError(f"{files[0].path} and {f.path} were made with other options ({'; '.join(differ)}): "
                             f"make every fingerprint with the same options")
    given = {k: v for k, v in asked.items() if v is not None}
    Options.from_recorded({k: v for k, v in given.items() if k in OPTIONS})      # each in range, vocab too
    if files and set(given) - set(opts):          # a file's fingerprints are of token inputs as its options fix them
        raise ValueError(f"{files[0].path} holds fingerprints on random tokens as its options fix them: "
                         f"{', '.join(sorted(set(given) - set(opts)))} cannot apply to it")
    differ = [f"{k} {v} vs the file's {opts[k]}" for k, v in given.items() if files and k in opts and v != opts[k]]
    if differ:
        raise ValueError(f"{files[0].path} was made with other options than asked for ({'; '.join(differ)}): drop "
                         f"those options, or make the file with them")
    return {**opts, **given}


def check_models(configs: list, names: list, seq_len: int = None, vocab: int = None, k: int = None,
                 files: list = ()) -> None:
    """The models (configs; None: unknown) against the inputs: each fits seq_len tokens and has a token for every
    id below vocab (where fingerprint files fixed that bound, they are to be made again), and a k given is at most
    half the narrowest width (the identity set is the k most extreme coordinates; left out, k is capped there)."""
    known = [(c, name) for c, name in zip(configs, names) if c is not None]
    common = min((c.vocab_size for c, _ in known), default=None)          # every model has these tokens
    for c, name in known:
        if seq_len is not None and seq_len > c.block_size:
            raise ValueError(f"--seq_len {seq_len} exceeds the context of {name} ({c.block_size} tokens)")
        if vocab is not None and vocab > c.vocab_size and files:
            raise ValueError(f"{', '.join(files)} draw token ids below {vocab}, beyond the vocabulary of {name} "
                             f"({c.vocab_size}): make every file again with --vocab {common}")
        if vocab is not None and vocab > c.vocab_size:
            raise ValueError(f"token ids below {vocab} reach beyond the vocabulary of {name} ({c.vocab_size}): give "
                             f"--vocab {common}")
    width = min((c.n_embd for c, _ in known), default=None)
    if k is not None and width is not None and k > width // 2:
        raise ValueError(f"--k {k} is more than the narrowest width {width} allows: at most half of it, {width // 2}")


def shared_by_construction(a: dict, b: dict, related: bool) -> str:
    """What two models' own records say they share, as a clause for the verdict line ("" where they say nothing).
    a, b: each model's path, its train.py checkpoint (None: none) and its weights record. A checkpoint records the
    seeds of its lineage's init and the checkpoint it was trained from: a shared embedding seed under different init
    seeds is a shared initialization of the embedding, the untied head and the position table, so the test's H0 is
    false for them by construction. A fingerprint file records its weights' sha256s: a file of the very weights it is
    compared with, yet called unrelated to them, is a contradiction, said as one."""
    said = []
    if same_weights(a["weights"], b["weights"]):
        said.append("both record the same weights (each file's sha256)" + ("" if related else ", yet they test "
                    "unrelated: a fingerprint file's arrays did not come from the weights it records"))
    if a["checkpoint"] is None or b["checkpoint"] is None:
        return "; ".join(said)
    for x, y, name in ((a, b, "A"), (b, a, "B")):
        source = x["checkpoint"].get("init_from")
        if source and os.path.realpath(source) == os.path.realpath(y["path"]):
            said.append(f"{name} was trained from the other (its init_from)")
    sa, sb = (x["checkpoint"].get("seeds") or {} for x in (a, b))
    if {"init_seed", "embed_seed"} <= set(sa) & set(sb):
        same_init, same_embed = sa["init_seed"] == sb["init_seed"], sa["embed_seed"] == sb["embed_seed"]
        if same_init and same_embed:
            said.append(f"both record init seed {sa['init_seed']} and embedding seed {sa['embed_seed']}: one "
                        f"initialization")
        elif same_embed:
            said.append(f"they share the embedding seed {sa['embed_seed']} (init seeds {sa['init_seed']} and "
                        f"{sb['init_seed']}): their token embedding and untied head are one draw, a shared "
                        f"initialization of those parts, so the test's H0 is false for them")
        elif same_init:
            said.append(f"they share the init seed {sa['init_seed']} (embedding seeds {sa['embed_seed']} and "
                        f"{sb['embed_seed']}): the same transformer blocks at birth")
    return "; ".join(said)


def made(device, dtype) -> dict:
    """How a fingerprint file was made (common.provenance: device, dtype, versions, date), less the command line,
    which names paths of its maker's machine."""
    return {k: v for k, v in provenance(device, dtype).items() if k != "command"}


def weights_record(path: str, digests: dict) -> dict:
    """What weights a fingerprint comes from: the model's base name (never the path on its maker's machine), and
    each of its files' size and sha256 (hf.load's digests, taken on the load's own read)."""
    return dict(name=os.path.basename(os.path.normpath(path)), files=dict(sorted(digests.items())))


def same_weights(a: dict, b: dict) -> bool:
    """Whether two weights records name the same files with the same sha256s (every file of both)."""
    files = [record.get("files") for record in (a, b)]
    return all(isinstance(f, dict) and f for f in files) and files[0] == files[1]


def digest(meta: dict, arrays: dict) -> str:
    """sha256 of a fingerprint file's meta (without its digest) and of each array's name, dtype, shape and bytes."""
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# compact's names of the rows' types, and the type each is stored as (bfloat16: its bits)
ROWS_DTYPES = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32}


def compact(rows: np.ndarray):
    """(array, dtype name): float32 rows in the narrowest float type that holds every value exactly -- bfloat16
    (stored as its uint16 bits), float16, else float32. expand() undoes it bit for bit."""
    t = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
    if torch.equal(t.bfloat16().float(), t):
        return t.bfloat16().view(torch.int16).numpy().view(np.uint16), "bfloat16"
    if np.array_equal(rows.astype(np.float16).astype(np.float32), rows):
        return rows.astype(np.float16), "float16"
    return rows.astype(np.float32), "float32"


def expand(rows: np.ndarray, dtype: str) -> np.ndarray:
    """compact's array back to float32."""
    if dtype == "bfloat16":
        return torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16).float().numpy()
    return rows.astype(np.float32)
