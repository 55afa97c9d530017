"""data.py: every input a model sees -- random inputs the same on every device and batch size, corpora fetched and
checked, tokenizers, token files written whole and read through once, training windows by (data_seed, step)."""
import hashlib
import io
import json
import os
import tarfile
import zipfile

import numpy as np
import pytest
import torch

import data
from conftest import TEXT, cli_error
from init import build
from model import get_config

OFFLINE = os.environ.get("BORN_BIASED_DATA")      # a folder of the corpora's files, where a user has one


def tokens_of(data_dir):
    return np.concatenate([np.fromfile(os.path.join(data_dir, f"{s}.bin"), dtype=np.uint16) for s in ("train", "val")])


def test_prepare_round_trips_bytes(data_dir):
    meta = json.load(open(os.path.join(data_dir, "meta.json")))
    tokens = tokens_of(data_dir)
    assert meta["tokenizer"] == "bytes" and meta["vocab_size"] == 256
    assert meta["train_tokens"] + meta["val_tokens"] == len(tokens) == len(TEXT.encode("utf-8"))
    _, decode, _ = data.get_tokenizer("bytes")
    assert decode(tokens) == TEXT


# tiktoken's cache names each file by the sha1 of its URL: GPT-2's two BPE files
GPT2_BPE_URLS = [f"https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/{name}"
                 for name in ("vocab.bpe", "encoder.json")]


def _tiktoken_offline():
    """TIKTOKEN_CACHE_DIR where it holds GPT-2's BPE files, else None: a folder without them (a machine with no
    network) would make tiktoken download, and tests never do."""
    cache = os.environ.get("TIKTOKEN_CACHE_DIR")
    names = [hashlib.sha1(url.encode()).hexdigest() for url in GPT2_BPE_URLS]
    return cache if cache and all(os.path.isfile(os.path.join(cache, n)) for n in names) else None


@pytest.mark.skipif(_tiktoken_offline() is None, reason="GPT-2 BPE files not cached (tests never download)")
def test_prepare_round_trips_gpt2(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _tiktoken_offline())
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    meta = data.prepare([str(tmp_path / "t.txt")], str(tmp_path / "gpt2"), tokenizer="gpt2")
    tokens = tokens_of(str(tmp_path / "gpt2"))
    _, decode, vocab = data.get_tokenizer("gpt2")
    assert meta["vocab_size"] == vocab == 50257
    assert len(tokens) < len(TEXT) / 2        # BPE, not bytes
    assert decode(tokens.tolist()) == TEXT


def test_micro_and_rank_slices_cover_the_global_batch_once():
    offsets = data.batch_offsets(7, 3, 10_000, 16, 24)
    assert np.array_equal(offsets, data.batch_offsets(7, 3, 10_000, 16, 24))
    assert not np.array_equal(offsets, data.batch_offsets(7, 4, 10_000, 16, 24))   # each step new windows
    assert offsets.min() >= 0 and offsets.max() <= 10_000 - 16 - 1                  # room for the targets
    for world, micro in ((1, 24), (2, 3), (4, 2), (3, 8)):
        accum = 24 // (world * micro)
        parts = [data.micro_offsets(offsets, m, r, world, micro) for m in range(accum) for r in range(world)]
        assert np.array_equal(np.sort(np.concatenate(parts)), np.sort(offsets))


def _fake_corpus(monkeypatch, name, text, **entry):
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    monkeypatch.setitem(data.CORPORA, name, dict(file=f"{name}.txt", license="test", sha256=sha, **entry))
    return sha


def test_corpus_from_a_local_directory_is_checked_and_reused(tmp_path, monkeypatch):
    text = "local copy of a corpus\n" * 10
    _fake_corpus(monkeypatch, "fake", text, url="http://invalid.invalid/fake.txt")
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "fake.txt").write_text(text)
    path = data.corpus_file("fake", str(tmp_path / "data"), source=str(tmp_path / "mirror"))
    assert open(path).read() == text
    (tmp_path / "mirror" / "fake.txt").write_text("something else")      # the copy in data/ is used from now on
    assert data.corpus_file("fake", str(tmp_path / "data"), source=str(tmp_path / "mirror")) == path
    os.remove(path)
    with pytest.raises(ValueError, match="does not hold the expected fake text"):
        data.corpus_file("fake", str(tmp_path / "data"), source=str(tmp_path / "mirror"))
    assert not os.path.exists(path)
    with pytest.raises(ValueError, match="unknown corpus"):
        data.corpus_file("nope", str(tmp_path / "data"))


def test_corpora_are_downloaded_and_extracted(tmp_path, monkeypatch):
    """file:// URLs stand in for the network: a WikiText-style zip and a Brown-style tarball, each
    extracted to the text written out here by hand."""
    zpath = tmp_path / "wt.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("wikitext-2-raw/wiki.test.raw", " = Title = \r\n\r\n Some text .\r\n")
        z.writestr("wikitext-2-raw/wiki.train.raw", "not this split")
    _fake_corpus(monkeypatch, "wt", " = Title = \n\n Some text .\n", url=zpath.as_uri(), extract=data._wikitext2_test)
    assert open(data.corpus_file("wt", str(tmp_path / "data"))).read() == " = Title = \n\n Some text .\n"

    tpath = tmp_path / "brown.tgz"
    docs = {"package/ca01": "\n\n\tThe/at jury/nn said/vbd ./.\n\n\n\tIt/pps 1-1/2/cd was/bedz ./."
                            "\nNo/rb //in tab/nn ./.\n",
            "package/cb02": "\n\n\tSecond/od doc/nn ./.\n", "package/README": "not a document"}
    with tarfile.open(tpath, "w:gz") as tar:
        for name, body in docs.items():
            raw = body.encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    expected = "The jury said .\n\n It 1-1 was .\nNo tab .\n\n Second doc .\n"
    _fake_corpus(monkeypatch, "br", expected, url=tpath.as_uri(), extract=data._brown)
    assert open(data.corpus_file("br", str(tmp_path / "data"))).read() == expected


@pytest.mark.parametrize("name", sorted(data.CORPORA))
def test_the_named_corpora_match_their_published_text(name, tmp_path):
    if not (OFFLINE and os.path.isfile(os.path.join(OFFLINE, data.CORPORA[name]["file"]))):
        pytest.skip(f"no offline copy of {name} (BORN_BIASED_DATA): tests never download")
    assert os.path.isfile(data.corpus_file(name, str(tmp_path), source=OFFLINE))


def test_a_local_file_named_like_a_corpus_is_labelled_as_the_file_it_is_read_as(tmp_path, monkeypatch):
    """prepare and text_file read a local file before a corpus of the same name; its prepared data must not be
    cached under the corpus's label (a study would then reuse the corpus's tokens for the file, or the reverse)."""
    monkeypatch.chdir(tmp_path)
    assert data.corpus_label("shakespeare") == "shakespeare"
    (tmp_path / "shakespeare").write_text("a local text\n")
    assert data.text_file("shakespeare") == "shakespeare"
    assert data.corpus_label("shakespeare") != "shakespeare"


@pytest.mark.parametrize("tokenizer", ["bytes", "gpt2"])
def test_tokenizing_in_blocks_equals_tokenizing_the_whole_text(tokenizer, monkeypatch):
    if tokenizer == "gpt2":
        if _tiktoken_offline() is None:
            pytest.skip("GPT-2 BPE files not cached")
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _tiktoken_offline())
    encode, _, _ = data.get_tokenizer(tokenizer)
    text = "".join(f"line {i} ,  with\tspaces  \n\n\n word's end\n  {i}x\n \n" for i in range(300))
    assert data.encode_in_blocks(encode, text, block=97) == encode(text)


def test_prepared_makes_data_once(tmp_path, monkeypatch):
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    out = str(tmp_path / "d")
    assert data.prepared([str(tmp_path / "t.txt")], out, "bytes") == out
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["train_tokens"] + meta["val_tokens"] == len(TEXT.encode("utf-8"))
    monkeypatch.setattr(data, "prepare", lambda *a, **k: pytest.fail("prepared data was made again"))
    assert data.prepared([str(tmp_path / "t.txt")], out, "bytes") == out


def test_token_files_are_read_through_once_per_version(tmp_path, monkeypatch):
    """load_data hashes each token file once per process, and again once the file changed behind meta.json."""
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    out = str(tmp_path / "d")
    data.prepare([str(tmp_path / "t.txt")], out, "bytes")
    calls = []
    check = data.check_tokens
    monkeypatch.setattr(data, "check_tokens", lambda *a: calls.append(a[2]) or check(*a))
    data.load_data(out)
    data.load_data(out)
    assert sorted(os.path.basename(c) for c in calls) == ["train.bin", "val.bin"]
    path = tmp_path / "d" / "val.bin"
    ids = np.fromfile(path, dtype=np.uint16)
    ids[[0, 1]] = ids[[1, 0]] if ids[0] != ids[1] else ids[[0, 1]] + 1   # same size, other tokens
    ids.tofile(path)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10 ** 9))
    with pytest.raises(ValueError, match="changed after prepare; make it again with python data.py"):
        data.load_data(out)


def test_a_file_named_like_a_corpus_is_read_as_everywhere_else(tmp_path, monkeypatch):
    """prepare reads a local file before a corpus of the same name, as text_file (sink.py --text) does."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shakespeare").write_text("a local file, not the corpus\n" * 4)
    assert data.text_file("shakespeare") == "shakespeare"
    data.prepare(["shakespeare"], "d", tokenizer="bytes")
    stored = np.concatenate([np.fromfile(f"d/{name}.bin", dtype=np.uint16) for name in ("train", "val")])
    assert bytes(stored.astype(np.uint8)) == (tmp_path / "shakespeare").read_bytes()


def test_random_inputs_are_the_same_whatever_the_batch_size_and_the_script():
    import seedprint
    for kind, kw in (("tokens", dict(vocab=50)), ("gaussian", dict(width=8, mean=0.5, std=2.0))):
        whole = torch.cat(list(data.random_batches(kind, 23, 6, 23, seed=4, **kw)))
        for b in (1, 5, 64):
            assert torch.equal(torch.cat(list(data.random_batches(kind, 23, 6, b, seed=4, **kw))), whole)
        assert not torch.equal(torch.cat(list(data.random_batches(kind, 23, 6, 23, seed=5, **kw))), whole)
    g = torch.cat(list(data.random_batches("gaussian", 4000, 2, 4000, seed=0, width=4, mean=0.5, std=2.0)))
    assert g.mean().item() == pytest.approx(0.5, abs=0.05) and g.std().item() == pytest.approx(2.0, rel=0.03)
    model = build(get_config("tiny", n_layer=1, vocab_size=50), 0).eval()
    seen = []
    record = lambda ids: seen.append(ids) or model.trace(ids, hidden="last")["hidden"][-1]
    seedprint.fingerprint(record, sequences=23, seq_len=6, vocab=50, seed=4, batch_size=5)
    probe_ids = torch.cat([b["idx"] for b in data.random_inputs(model, "tokens", 23, 6, 7, seed=4)])
    assert torch.equal(torch.cat(seen), probe_ids) and torch.equal(data.random_tokens(50, 23, 6, seed=4), probe_ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_random_inputs_are_identical_on_cpu_and_cuda():
    for kind, kw in (("tokens", dict(vocab=50)), ("gaussian", dict(width=8))):
        cpu = torch.cat(list(data.random_batches(kind, 9, 4, 3, seed=1, **kw)))
        assert torch.equal(torch.cat([x.cuda() for x in data.random_batches(kind, 9, 4, 4, seed=1, **kw)]).cpu(), cpu)


def test_the_command_line_prepares_a_corpus_and_refuses_bad_input_in_one_line(tmp_path):
    """python data.py: a text file tokenized into a directory; a missing file and a directory given as text are one
    line each, exit 2, and write nothing."""
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    data.main([str(tmp_path / "t.txt"), "--tokenizer", "bytes", "--out", str(tmp_path / "d"), "--val_fraction", "0.2"])
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["train_tokens"] > 0
    assert "no such text file or named corpus" in cli_error(data.main, "data.py", [str(tmp_path / "missing.txt"),
                                                                                  "--out", str(tmp_path / "e")])
    assert "is a directory, not a text file" in cli_error(data.main, "data.py", [str(tmp_path), "--out",
                                                                                str(tmp_path / "e")])
    assert not (tmp_path / "e").exists()


def test_random_tokens_windows_bos_and_id_files(tmp_path):
    r = data.random_tokens(50, 4, 10, seed=0, bos=7)
    assert r.shape == (4, 10) and (r[:, 0] == 7).all() and torch.equal(r[:, 1:], data.random_tokens(50, 4, 9, seed=0))
    stream = np.arange(100)
    w = data.windows(stream, 10, 5, seed=0)
    assert w.shape == (5, 10) and all((row.numpy() % 10 == np.arange(10)).all() for row in w)   # aligned slots
    assert (data.windows(stream, 10, 5, seed=0, bos=99)[:, 0] == 99).all()
    with pytest.raises(ValueError, match="0 windows of 1000"):
        data.windows(stream, 1000, 5)
    with pytest.raises(ValueError, match="3 windows of 30, fewer than the 5"):   # 100 // 30 = 3
        data.windows(stream, 30, 5)
    np.save(tmp_path / "ids.npy", np.arange(12).reshape(3, 4))
    np.arange(7, dtype=np.uint16).tofile(tmp_path / "ids.bin")
    assert data.read_ids(str(tmp_path / "ids.npy")).tolist() == list(range(12))
    assert data.read_ids(str(tmp_path / "ids.bin")).tolist() == list(range(7))
    with pytest.raises(FileNotFoundError, match="token-id file"):
        data.read_ids(str(tmp_path / "nope.npy"))
