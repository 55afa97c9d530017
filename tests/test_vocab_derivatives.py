"""studies.vocab_derivatives: its tokenizers against the tokenizers library's own encoding, a model moved onto another
vocabulary against a naive loop over tokens, and the study end to end at a tiny size: every child related by token,
its verdicts those seedprint.py gives the same checkpoints (by token) and the same weights without a tokenizer (by
id), the false-positive table counting its pairs."""
import json
import types

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

import data
import hf
import seedprint
from conftest import llama_family, write_hf
from init import build
from model import get_config
from studies import vocab_derivatives
from studies.vocab_derivatives import onto
from test_data import _tiktoken_offline

TINY = ["--n_embd", "32", "--n_layer", "1", "--block_size", "16", "--seq_len", "16", "--max_steps", "4",
        "--ckpt_every", "2", "--batch_size", "4", "--deriv_steps", "4", "--sequences", "40", "--k", "8",
        "--bpe_vocab", "300", "--fpr_a", "3", "--fpr_b", "2", "--device", "cpu"]
OPTS = dict(sequences=40, seq_len=16, k=8)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The study run once on two small corpora of its own: (its --out, its results)."""
    root = tmp_path_factory.mktemp("vocab")
    for name, step in (("a.txt", 7919), ("b.txt", 104729)):
        words = ["".join(chr(97 + (i * step + j * 7) % 26) for j in range(1 + i % 5)) for i in range(4000)]
        (root / name).write_text(" ".join(words))
    out = root / "out"
    vocab_derivatives.main([*TINY, "--corpus", str(root / "a.txt"), "--corpus2", str(root / "b.txt"),
                            "--out", str(out)])
    return out, json.loads((out / "results.json").read_text())["vocab_derivatives"]


def test_the_tokenizers_cut_text_as_the_library_does_bytes_first_or_permuted(study):
    out, res = study
    toks = {name: Tokenizer.from_file(path) for name, path in res["tokenizers"].items() if name != "bytes"}
    text = (out.parent / "a.txt").read_text()[:2000] + " Zürich, naïve ✓"
    for name, tok in toks.items():
        assert tok.decode(tok.encode(text).ids) == text, name
    for b in range(ord("!"), ord("~") + 1):         # printable ASCII: the byte's own character, at the byte's id
        assert toks["bpe_corpus"].encode(chr(b)).ids == [b]
    assert toks["bpe_corpus"].get_vocab_size() > 256                                # merges appended
    permuted = toks["bytes_permuted"]
    assert permuted.get_vocab_size() == 256 and len(permuted.encode(text).ids) == len(text.encode("utf-8"))
    ids = [permuted.encode(chr(b)).ids[0] for b in range(ord("a"), ord("z") + 1)]
    assert sorted(set(ids)) != ids and len(set(ids)) == 26                            # other ids, one each


def test_a_tokenizer_made_here_is_named_by_what_it_was_made_from(study, tmp_path):
    """Another size, corpus or permutation seed makes another file, never the one made before (reused only for the
    same settings); its data folder's name follows. Each file's tokens, in order, are those its name says."""
    out, res = study
    corpus = str(out.parent / "a.txt")
    again = vocab_derivatives.bytes_first_bpe(str(out), corpus, 300)
    assert again == res["tokenizers"]["bpe_corpus"]                                  # the same settings: reused
    other = vocab_derivatives.bytes_first_bpe(str(out), corpus, 280)
    assert other != again and Tokenizer.from_file(other).get_vocab_size() == 280
    assert Tokenizer.from_file(again).get_vocab_size() == 300
    assert vocab_derivatives.tokenizer_label(other) != vocab_derivatives.tokenizer_label(again)
    assert vocab_derivatives.tokenizer_label("bytes") == "bytes"
    # the corpora swapped and another permutation seed: three other files, each made from what it names
    a_txt, b_txt = corpus, str(out.parent / "b.txt")
    made = lambda first, second, seed: vocab_derivatives.tokenizers(str(out), types.SimpleNamespace(
        corpus=first, corpus2=second, bpe_vocab=300, data_from=None, perm_seed=seed))
    assert made(a_txt, b_txt, 0) == res["tokenizers"]                                 # the study's: reused
    swapped = made(b_txt, a_txt, 1)
    assert all(swapped[k] != res["tokenizers"][k] for k in ("bpe_corpus", "bpe_corpus2", "bytes_permuted"))
    order = lambda path: [tok for tok, _ in sorted(Tokenizer.from_file(path).get_vocab().items(), key=lambda kv: kv[1])]
    assert order(swapped["bytes_permuted"]) != order(res["tokenizers"]["bytes_permuted"])
    assert order(swapped["bpe_corpus"])[:256] == order(res["tokenizers"]["bpe_corpus"])[:256]    # bytes first
    assert order(swapped["bpe_corpus"])[256:] != order(res["tokenizers"]["bpe_corpus"])[256:]    # b.txt's merges


def test_a_model_moved_onto_another_vocabulary_keeps_each_tokens_rows():
    config = get_config("tiny", n_layer=1, n_embd=16, vocab_size=6, block_size=8, tie_embeddings=False)
    model = build(config, 0, 0)
    old = [b"a", b"b", b"c", b"ab", b"a", b"zz"]                  # "a" twice: its first id is its row
    new = [b"zz", b"q", b"a", b"abc", b"ab", b"c"]
    moved = onto(model, old, new, seed=3)
    assert moved.config.vocab_size == len(new)
    for table in ("transformer.wte.weight", "lm_head.weight"):
        A, B = model.state_dict()[table], moved.state_dict()[table]
        for j, token in enumerate(new):
            if token in old:
                assert torch.equal(B[j], A[old.index(token)]), (table, token)
            else:
                assert not any(torch.equal(B[j], row) for row in A)
    for name, p in model.state_dict().items():                  # the blocks as they were
        if name not in ("transformer.wte.weight", "lm_head.weight"):
            assert torch.equal(p, moved.state_dict()[name]), name
    big = onto(build(get_config("tiny", n_embd=64, vocab_size=4, block_size=8), 0, 0), [b"x"] * 4,
               [str(i).encode() for i in range(4000)], seed=1)
    std = build(get_config("tiny", n_embd=64, vocab_size=4, block_size=8), 0, 0).transformer.wte.weight.std()
    assert big.transformer.wte.weight[1:].std().item() == pytest.approx(std.item(), rel=0.05)


def test_the_study_finds_every_child_by_token_as_seedprint_does_and_counts_its_unrelated_pairs(study):
    out, res = study
    rows = {r["child"]: r for r in res["derivatives"]}
    assert list(rows) == ["extension", "transplant bytes -> BPE2", "transplant BPE -> BPE2", "permuted ids"]
    vocab = {name: set(Tokenizer.from_file(path).get_vocab()) for name, path in res["tokenizers"].items()
             if name != "bytes"}
    # byte-level strings are equal where their bytes are: the shared tokens counted by the library's vocabularies
    assert rows["transplant BPE -> BPE2"]["shared"] == len(vocab["bpe_corpus"] & vocab["bpe_corpus2"])
    assert [rows[c]["shared"] for c in ("extension", "transplant bytes -> BPE2", "permuted ids")] == [256] * 3
    for name, r in rows.items():
        assert r["exact"] is r["aligned"] is True, name
        args = (r["a"], r["b"])
        assert seedprint.compare(*args, **OPTS).p == pytest.approx(r["p"], rel=1e-9)
        assert seedprint.compare(*args, align=True, **OPTS).p == pytest.approx(r["p_aligned"], rel=1e-9)
        by_id = seedprint.compare(*(hf.load(m) for m in args), **OPTS)     # in memory: no tokenizer, ids as they are
        assert by_id.p == pytest.approx(r["id_p"], rel=1e-9) and by_id.mean_tau == pytest.approx(r["id_mean_tau"])
    assert rows["extension"]["id_p"] == rows["extension"]["p"]        # an extension: the ids are its tokens
    assert rows["permuted ids"]["id_mean_tau"] < 0.3 < rows["permuted ids"]["mean_tau"]
    pairs, n = res["pairs"], 3 * 2
    assert len(pairs) == n and len({(p["a"], p["b"]) for p in pairs}) == n
    for row in res["fpr"]:
        x = sum(p[row["verdict"]] is True for p in pairs)
        assert row["related"] == x == 0 and row["pairs"] == n
        assert row["upper95"] == f"{100 * (1 - 0.025 ** (1 / n)):.2f}%"          # 0 of n: the closed form
    assert res["pairs_for_a_1pct_bound"] == 368 and 1 - 0.025 ** (1 / 368) <= 0.01 < 1 - 0.025 ** (1 / 367)
    assert (out / "vocab_derivatives.png").is_file()


@pytest.mark.skipif(_tiktoken_offline() is None, reason="GPT-2 BPE files not cached (tests never download)")
def test_a_released_models_extension_and_transplant_are_its_own_function_on_the_shared_tokens(tmp_path, monkeypatch):
    """--base on a small Hugging Face LLaMA of a byte-level BPE: untrained, each child computes its parent's function
    on the tokens both hold, so by token its fingerprint is the parent's (tau 1); trained, still related."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", _tiktoken_offline())
    from tokenizers import ByteLevelBPETokenizer
    text = " ".join(["the quick brown fox jumps over the lazy dog, and then it sleeps"] * 400)
    (tmp_path / "text.txt").write_text(text)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text], vocab_size=300, show_progress=False)
    base = tmp_path / "base"
    base.mkdir()
    bpe.save(str(base / "tokenizer.json"))
    V = bpe.get_vocab_size()
    _, cfg, t = llama_family("LlamaForCausalLM", tie=True)
    t["model.embed_tokens.weight"] = torch.randn(V, cfg["hidden_size"], generator=torch.Generator().manual_seed(1))
    write_hf(base, dict(cfg, vocab_size=V), t)
    out = tmp_path / "out"
    vocab_derivatives.main(["--base", str(base), "--sequences", "40", "--seq_len", "16", "--k", "8", "--base_extra",
                            "16", "--base_steps", "2", "--corpus", str(tmp_path / "text.txt"), "--device", "cpu",
                            "--out", str(out)])
    rows = json.loads((out / "results.json").read_text())["vocab_derivatives_base"]["derivatives"]
    assert [r["child"] for r in rows] == ["extension (+16 tokens), untrained", "extension (+16 tokens), trained 2 steps",
                                          "transplant onto GPT-2's tokenizer, untrained",
                                          "transplant onto GPT-2's tokenizer, trained 2 steps"]
    gpt2 = set(data.token_bytes("gpt2"))
    assert rows[0]["vocab"] == V + 16 and rows[2]["vocab"] == 50257
    assert rows[0]["shared"] == V and rows[2]["shared"] == len(set(data.token_bytes(str(base))) & gpt2)
    for r in rows:
        assert r["exact"] is r["aligned"] is True, r["child"]
    for r in rows[0], rows[2]:
        assert r["mean_tau"] == pytest.approx(1.0) and r["tau_aligned"] == pytest.approx(1.0)
    assert rows[0]["id_p"] == rows[0]["p"]
