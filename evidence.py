"""
evidence.py: a model's SeedPrint fingerprint as a file -- the evidence that travels in a dispute (paper Section 6.1).

In a dispute the models rarely sit on one machine, and an owner may not publish weights. One .npz file holds
everything a verdict reads of one model: its fingerprints on the exact verdict's inputs and on the aligned verdict's
test and held-out inputs (align.input_sets), its token table's held-out rows, the options that fixed them, its
config, each weight file's name, size and sha256, and the bytes of the token each drawn id names (version 2), so that
a model of another tokenizer can be fed the same tokens by its own ids. A verdict from two files is the verdict from
the two models: the same arrays reach the same test. A registry is a folder of such files; `python seedprint.py
SUSPECT --against DIR` tests one suspect against all of them.

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
    plan(models, asked)     every check of a comparison, before any weight is read: the options agreed, the
                            statistic in range, the models against the inputs
    comparable_sets(...)    a suspect against a registry's bases: all at once, else a set of tokens at a time
    agreed_options(...)     the options of a comparison: the files' (all alike), the flags' (alike with them)
    check_models(...)       the models a comparison's inputs can be taken of (context, vocabulary, k)
    check_statistic(...)    the statistic's options in range (Options', temperature and alpha)
    check_states(H, name)   what any fingerprint must be to be evidence, made here or read from a file
    token_inputs(...)       where tokenizers differ, the tokens all models share and each one's ids for them
    shared_by_construction  what two models' own records (checkpoints' seeds, files' sha256s) say they share

Imports align.py (the input sets, the shared tokens), data.py (tokenizers), hf.py (models on disk), model.py
(GPTConfig) and common.py (flags, writing a file whole).
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

import align
from align import SETS, two_widths
import hf
from data import token_bytes
from common import atomic_write, check_settings, figure, print_table, provenance, save_figure, setting, short_names
from model import GPT, GPTConfig

FILE_FORMAT, FILE_VERSION = "seedprint-fingerprint", 2       # 2: the tokens drawn, by their bytes
# The options a file records: the inputs (N, T, their seed, the token ids' bound) and the statistic (k, rank_by,
# set_mode). seedprint.py's Options gives them their ranges, under their flags' names (--input_seed: seed).
OPTIONS = ("sequences", "seq_len", "seed", "vocab", "k", "rank_by", "set_mode")
META_BYTES = 1 << 20          # the largest record (meta.npy) read: a real one is a few kilobytes
TOKEN_BYTES = 1024            # the most bytes a recorded token may average (a real vocabulary's: under 10)
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
    tokens: list = None     # the bytes of the token each drawn id names, [0, vocab) (None: the model's tokenizer
                            # was unknown, or the file is of version 1): what a model of another tokenizer is fed


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
    if fp.tokens is not None:           # every token's bytes, one after another, and where each ends
        arrays["token_bytes"] = np.frombuffer(b"".join(fp.tokens), dtype=np.uint8)
        arrays["token_ends"] = np.cumsum([len(t) for t in fp.tokens], dtype=np.int64)
    meta = dict(format=FILE_FORMAT, version=FILE_VERSION, options=fp.options, config=fp.config, weights=fp.weights,
                provenance=fp.provenance, rows_dtype=rows_dtype,
                tokens=None if fp.tokens is None else dict(count=len(fp.tokens), bytes=len(arrays["token_bytes"])))
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
                       meta["provenance"], path=path, tokens=recorded_tokens(path, arrays, remake))


def recorded_tokens(path: str, arrays: dict, remake: str):
    """The tokens a file records (a list of bytes; None: none recorded), their ends checked against their bytes."""
    if "token_ends" not in arrays:
        return None
    ends, data = arrays["token_ends"], arrays["token_bytes"].tobytes()
    if len(ends) and (ends[0] < 0 or (np.diff(ends) < 0).any() or ends[-1] != len(data)):
        raise ValueError(f"{path} records its tokens' ends out of order or past their bytes: {remake}")
    starts = np.concatenate([[0], ends[:-1]])
    return [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


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
    arrays = {**{name: ((sequences, d), np.dtype(np.float32)) for name in SETS},
              "rows": ((vocab - vocab // 2, d), np.dtype(ROWS_DTYPES[meta["rows_dtype"]]))}
    tokens = meta.get("tokens")               # version 1 records none
    if version > 1 and "tokens" not in meta or tokens is not None and not (
            isinstance(tokens, dict) and set(tokens) == {"count", "bytes"} and type(tokens["count"]) is int
            and tokens["count"] == vocab and type(tokens["bytes"]) is int
            and 0 <= tokens["bytes"] <= TOKEN_BYTES * vocab):
        raise ValueError(f"{path} records its tokens as {tokens!r}, not as the count and bytes of its {vocab} token "
                         f"ids: {remake}")
    if tokens is not None:
        arrays.update(token_bytes=((tokens["bytes"],), np.dtype(np.uint8)), token_ends=((vocab,), np.dtype(np.int64)))
    return arrays


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
    """Print each base's verdict in a suspect's search of a registry (seedprint.search's `res`), the bases it could
    not be compared with and why, and the answer; return them for results.json."""
    names = short_names(bases)
    rows = [dict(base=name, verdict="RELATED" if r.related else "unrelated", p_holm=r.p, p=r.p_raw,
                 mean_tau=r.mean_tau if r.alignment is None else r.alignment.tau_aligned,
                 test="exact" if r.alignment is None else f"matched (widths {r.alignment.widths})"
                 if two_widths(r.alignment.widths) else "aligned") for name, r in zip(names, res["results"]) if r]
    print_table(rows, floats="{:.3g}")
    compared = [name for name, r in zip(names, res["results"]) if r]
    for i, why in res["not_compared"].items():
        print(f"not compared with {names[i]}: {why}")
    related = [names[i] for i in res["related"]]
    if res["answer"] == "derives from":
        p_holm = rows[compared.index(related[0])]["p_holm"]
        answer = f"{suspect} derives from {related[0]} (Holm-adjusted p {p_holm:.3g})"
    elif res["answer"] == "none":
        answer = (f"{suspect} derives from none of these {len(rows)} bases (smallest Holm-adjusted p "
                  f"{min(r['p_holm'] for r in rows):.3g}, alpha {alpha})")
    else:
        lineage = ("some of them were made on other tokens and cannot be tested against one another, so no single "
                   "base can be named" if res["one_lineage"] is None else "they are one lineage by their own test: "
                   "the suspect derives from that lineage, and this test cannot tell from which of them"
                   if res["one_lineage"] else "they are not all one lineage by their own test, so no single base "
                   "can be named")
        answer = f"inconclusive: {suspect} is related to {', '.join(related)}; {lineage}"
    if res["not_compared"]:
        answer += f" ({len(res['not_compared'])} of {len(bases)} bases not compared: above)"
    for name, r in zip(names, res["results"]):
        if r and r.shared:
            print(f"{name} and the suspect: {r.shared}")
    print(f"{answer} [{seconds:.1f} s]")
    return dict(suspect=suspect, answer=res["answer"], statement=answer, base=bases[res["base"]] if res["base"]
                is not None else None, related=[bases[i] for i in res["related"]], one_lineage=res["one_lineage"],
                bases=[dict(base=b, **r.record()) for b, r in zip(bases, res["results"]) if r],
                not_compared={bases[i]: why for i, why in res["not_compared"].items()}, options=res["options"],
                seconds=seconds)


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


def table_rows(model, vocab: int = None, ids: np.ndarray = None):
    """A model's token-table rows of the positions [vocab // 2, vocab) the aligned verdict holds out (align.input_sets),
    float32 numpy, as loaded: those ids, or the model's ids of those shared tokens (ids: token_inputs'); None without
    vocab or a table (a callable)."""
    if vocab is None or not isinstance(model, GPT):
        return None
    held = np.arange(vocab // 2, vocab) if ids is None else ids[vocab // 2:vocab]
    return model.transformer.wte.weight[torch.as_tensor(held)].detach().float().cpu().numpy()


def tokenizer_of(m, given: str = None):
    """The tokenizer of a model as read_model leaves it, by data.get_tokenizer's name: a train.py checkpoint's (it
    records it), a Hugging Face directory's tokenizer.json, else `given` (--tokenizer: the tokenizer of every model
    or file that records none); None: unknown (a model in memory, a callable, a file of version 1)."""
    if isinstance(m, hf.Stored) and m.checkpoint is not None and m.checkpoint.get("tokenizer"):
        return m.checkpoint["tokenizer"]
    if isinstance(m, hf.Stored) and m.checkpoint is None and os.path.isfile(os.path.join(m.path, "tokenizer.json")):
        return os.path.join(m.path, "tokenizer.json")
    return given


def vocabulary_of(m, given: str = None):
    """The bytes of the token each id of a model names, by id up to its vocabulary (data.token_bytes; None where no
    token has an id); a fingerprint file's recorded tokens; None where the tokenizer is unknown."""
    if isinstance(m, Fingerprint) and m.tokens is not None:
        return m.tokens
    name = tokenizer_of(m, given)
    if name is None:
        return None
    config = config_of(m)
    return token_bytes(name)[:config.vocab_size if config is not None else None]


def file_tokens(m, vocab: int, given: str = None):
    """The tokens a fingerprint file of model m records: the bytes of the token each id below vocab names. None where
    its tokenizer is unknown or leaves some of those ids without a token (a table padded past its tokenizer): such a
    file is compared only with models of its vocabulary's size (token_inputs)."""
    vocabulary = vocabulary_of(m, given)
    if vocabulary is None or len(vocabulary) < vocab or None in vocabulary[:vocab]:
        return None
    return vocabulary[:vocab]


def token_inputs(models: list, opts: dict, matched: bool, given: str = None):
    """Each model's ids for the random inputs' positions (a list of arrays, align.shared_tokens), or None where the
    inputs are token ids as they are: every model of one tokenizer (or all unknown, or inputs not tokens). Where the
    tokenizers differ, the tokens all of them share by their bytes, in the first model's order (a fingerprint
    file's: the tokens it was made on, every one of which the models must hold); opts["vocab"], the positions'
    bound, set to their number unless asked. A model whose tokenizer is unknown beside others that differ from
    it, a file without tokens among them, or too few shared tokens for the sequences asked: refused in one line."""
    if opts.get("inputs", "tokens") != "tokens":
        return None
    names, configs = [name_of(m) for m in models], [config_of(m) for m in models]
    given_names = [f"tokens {m.path} records" if isinstance(m, Fingerprint) and m.tokens is not None
                   else tokenizer_of(m, given) for m in models]
    known = [i for i, t in enumerate(given_names) if t is not None]
    if len(set(given_names[i] for i in known)) <= 1 and not any(isinstance(models[i], Fingerprint) for i in known):
        vocabularies = {i: None for i in known}             # one tokenizer by name: its ids are its tokens
    else:
        vocabularies = {i: vocabulary_of(models[i], given) for i in known}
    one = len({tuple(v) for v in vocabularies.values() if v is not None}) <= 1
    sizes = {c.vocab_size for i, c in enumerate(configs) if c is not None}
    unknown = [i for i in range(len(models)) if i not in known]
    if unknown and known and (not one or len(sizes) > 1):
        i, j = unknown[0], known[0]
        size = lambda k: f"{names[k]}: {configs[k].vocab_size if configs[k] is not None else 'unknown'} ids"
        differ = "the others' tokenizers differ" if not one else f"the vocabularies differ ({size(i)}, {size(j)})"
        if isinstance(models[i], Fingerprint):
            what, advice = (f"{names[i]} records no tokens (a file of version 1, or of a model without a tokenizer)",
                            "make the file again with python seedprint.py MODEL --save FILE, or give its tokenizer "
                            "with --tokenizer NAME")
        else:
            what, advice = f"{names[i]} has no tokenizer", "give its tokenizer with --tokenizer NAME (bytes, gpt2, " \
                                                            "or a tokenizer.json)"
        raise ValueError(f"{what}, and {differ}: the same id may name other tokens in the two; {advice}")
    if one:
        return None
    files = [i for i in known if isinstance(models[i], Fingerprint)]
    order = files[:1] + [i for i in range(len(models)) if i not in files[:1]]
    maps = dict(zip(order, align.shared_tokens([vocabularies[i] for i in order])))
    shared = len(maps[order[0]])
    other = [i for i in files if vocabularies[i] != vocabularies[files[0]]]
    if other:
        raise ValueError(f"{names[files[0]]} and {names[other[0]]} were made on other tokens: files are compared at "
                         f"once only if made on the same tokens; compare each tokenizer's files apart")
    for i in files:
        if not np.array_equal(maps[i], np.arange(len(vocabularies[i]))):
            holds = min(len(align.shared_tokens([vocabularies[i], vocabularies[j]])[0]) for j in known if j != i)
            raise ValueError(f"the models hold {holds} of the {len(vocabularies[i])} tokens {names[i]} was made on, "
                             f"and a file is compared only with models that hold all of them (its fingerprints are of "
                             f"those tokens): compare the models themselves")
    n, T, asked = opts["sequences"], opts["seq_len"], opts["vocab"]
    if asked is not None and asked > shared or shared < (4 if matched else 2) or (
            (shared // 2 if matched else shared) ** T < n):
        raise ValueError(f"the tokenizers of {', '.join(names)} share {shared} tokens (by their bytes): too few for "
                         + (f"--vocab {asked}" if asked is not None and asked > shared else
                            f"{n} distinct sequences of {T}" + (" from each half of them (the aligned verdict)"
                                                                 if matched else ""))
                         + "; ask for fewer, or compare models whose tokenizers share more")
    opts["vocab"] = asked or shared
    return [maps[i] for i in range(len(models))]


def token_groups(bases: list) -> list:
    """A search's bases (as read_model leaves them) in groups made on the same tokens, each a list of indices in
    order: fingerprint files by the tokens they record (a file that records none, by its vocabulary's size); models,
    which can be fed any tokens, with the first group."""
    keys = [(tuple(m.tokens) if m.tokens is not None else ("ids below", m.options.get("vocab")))
            if isinstance(m, Fingerprint) else None for m in bases]
    order = list(dict.fromkeys(k for k in keys if k is not None)) or [None]
    groups = {k: [i for i, key in enumerate(keys) if key == k] for k in order}
    if order[0] is not None:                            # models join the first set of files
        groups[order[0]] = sorted(groups[order[0]] + [i for i, key in enumerate(keys) if key is None])
    return list(groups.values())


def comparable_sets(models: list, asked: dict, temperature: float, alpha: float, align: bool) -> tuple:
    """How a suspect (models[0]) meets a registry's bases (models[1:]): ([(base indices, plan's checks of the suspect
    and those bases)], {base index: why it is not compared}). All the bases at once where plan accepts them; else a
    set of tokens at a time (token_groups), a set plan refuses (the suspect lacks some of its tokens) not compared,
    with the reason. asked, temperature, alpha, align: plan's."""
    plan_of = lambda some: plan(some, asked, temperature, alpha, align)
    if len(models) < 2:
        raise ValueError("no base to search: give one or more models or fingerprint files")
    try:
        return [(list(range(len(models) - 1)), plan_of(models))], {}
    except ValueError:
        groups = token_groups(models[1:])
        if len(groups) == 1:
            raise
    planned, refused = [], {}
    for group in groups:
        try:
            planned.append((group, plan_of([models[0], *(models[b + 1] for b in group)])))
        except ValueError as e:
            refused.update({b: str(e) for b in group})
    if not planned:
        raise ValueError(f"the suspect can be compared with none of the bases: {refused[0]}")
    return planned, refused


def hashes_weights(models: list) -> bool:
    """Whether a comparison hashes each model's weight files on their one read: where a fingerprint file is compared,
    whose record names its weights' sha256s (shared_by_construction tells a copy by them)."""
    return any(isinstance(m, Fingerprint) for m in models)


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


def plan(models: list, asked: dict, temperature: float = 10.0, alpha: float = 0.01, align: bool = False) -> dict:
    """Every check of a comparison, in one place, before any weight is read (seedprint.py's compare_many, search and
    make_fingerprint): the options agreed (the files' and the asked ones: agreed_options), the statistic's in range,
    the models against the inputs (check_models). models: as read_model leaves them; asked: OPTIONS and
    seedprint.fingerprint's options (None: not given; "tokenizer": of the models that record none). -> {"inputs",
    "test", "configs" (None: unknown), "matched" (B's coordinates matched: align, two widths), "tokens"
    (token_inputs: two tokenizers' shared tokens)}"""
    files, tokenizer = [m for m in models if isinstance(m, Fingerprint)], asked.get("tokenizer")
    opts = agreed_options(files, {k: v for k, v in asked.items() if k != "tokenizer"})
    test = {key: opts.pop(key) for key in ("k", "rank_by", "set_mode")}
    check_statistic(**test, temperature=temperature, alpha=alpha)
    configs = [config_of(m) for m in models]
    known = [c for c in configs if c is not None]
    matched = align or len({c.n_embd for c in known}) > 1      # a pair of two widths has no exact test: matched
    tokens = token_inputs(models, opts, matched, tokenizer)
    if opts.get("inputs", "tokens") == "tokens" and opts["vocab"] is None and known:
        opts["vocab"] = min(c.vocab_size for c in known)
    check_models(configs, [name_of(m) for m in models], opts["seq_len"], opts["vocab"], asked.get("k"),
                 [f.path for f in files])
    if matched and any(isinstance(m, np.ndarray) for m in models):
        raise ValueError("a fingerprint array holds the exact verdict's inputs alone; give the model (or its "
                         "fingerprint file) for the aligned verdict's test and held-out inputs")
    if matched and opts["vocab"] is None:
        raise ValueError("the aligned verdict draws token ids from two halves of the vocabulary: give vocab= for "
                         "models whose vocabulary is not known (callables)")
    return dict(inputs=opts, test=test, configs=configs, matched=matched, tokens=tokens)


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
