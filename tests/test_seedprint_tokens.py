"""SeedPrint where the vocabulary changed: the random inputs drawn from the tokens two tokenizers share, by their
bytes, each model fed its own ids for them (align.shared_tokens, evidence.token_inputs, data.token_bytes). Checked
against a naive search, against the draw by id (identical and extended vocabularies: the same verdict to the last
digit), on children whose vocabulary was permuted, extended or transplanted onto another tokenizer, through
fingerprint files, and on bad input."""
import dataclasses
import os

import numpy as np
import pytest
import torch

import align
import data
import evidence
import seedprint
from conftest import cli_error, forge_fingerprint, write_tokenizer_json
from init import build
from model import GPT, get_config, write_checkpoint
from studies.edits import add_noise, permute_residual

LLAMA = dict(n_layer=2, vocab_size=400, block_size=32, norm="rmsnorm", activation="swiglu", bias=False,
             tie_embeddings=False)
OPTS = dict(sequences=200, seq_len=16, k=16)
WORDS = ["<unk>"] + [f"w{i}" for i in range(399)]


# ----------------------------------------------------------------------------- the shared tokens and their bytes

def naive_shared(vocabularies):
    """The tokens every vocabulary holds, in the first's order, each at its first id in each: a loop over ids."""
    out = [[] for _ in vocabularies]
    for i, token in enumerate(vocabularies[0]):
        if token is None or vocabularies[0].index(token) != i:
            continue
        if all(token in v for v in vocabularies[1:]):
            for n, v in enumerate(vocabularies):
                out[n].append(v.index(token))
    return out


def test_the_shared_tokens_are_a_naive_searchs_and_one_vocabulary_or_an_extension_gives_the_identity():
    rng = np.random.default_rng(0)
    for trial in range(20):
        pool = [bytes([b]) * int(n) for b, n in zip(rng.integers(0, 256, 60), rng.integers(1, 3, 60))]
        vocabularies = [[pool[j] if rng.random() > 0.1 else None for j in rng.integers(0, 60, int(rng.integers(5, 50)))]
                        for _ in range(int(rng.integers(2, 4)))]
        assert [list(m) for m in align.shared_tokens(vocabularies)] == naive_shared(vocabularies), trial
    words = [w.encode() for w in WORDS]
    for a, b in ((words, words), (words, words + [b"new", b"more"]), (words + [b"new"], words), (words, words[:300])):
        for m in align.shared_tokens([a, b]):
            assert np.array_equal(m, np.arange(min(len(a), len(b))))
    perm = rng.permutation(len(words))
    ids_a, ids_b = align.shared_tokens([words, [words[p] for p in perm]])
    assert np.array_equal(ids_a, np.arange(len(words))) and np.array_equal(perm[ids_b], ids_a)


def test_token_bytes_read_each_kind_of_tokenizer_as_the_bytes_its_tokens_stand_for(tmp_path):
    from tokenizers import ByteLevelBPETokenizer, pre_tokenizers
    assert data.token_bytes("bytes") == [bytes([b]) for b in range(256)]
    assert set(data.byte_level_alphabet()) == set(pre_tokenizers.ByteLevel.alphabet())       # the library's own
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["It was the best of times, naïve café, 東京 ✓\n" * 20], vocab_size=300)
    bpe.save(str(tmp_path / "bpe.json"))
    tokens, decoded = data.token_bytes(str(tmp_path / "bpe.json")), 0
    for i, t in enumerate(tokens):          # every token that is whole UTF-8 text is what the library decodes
        try:
            text = t.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert bpe.decode([i]) == text, (i, t)
        decoded += 1
    assert decoded > 100 and b" \xe6\x9d\xb1\xe4\xba\xac" in tokens and b"\xe6" in tokens     # " 東京", a lone byte
    # added tokens are matched on the raw text: each stands for the text that encodes to it alone
    bpe.add_tokens(["é", "Ā", "zz"])
    bpe.save(str(tmp_path / "added.json"))
    added = data.token_bytes(str(tmp_path / "added.json"))
    for text in ("é", "Ā", "zz"):
        (i,) = bpe.encode(text).ids
        assert added[i] == text.encode("utf-8"), (text, added[i])
    write_tokenizer_json(tmp_path, ["<unk>", "naïve", "w1"])
    assert data.token_bytes(str(tmp_path)) == ["<unk>".encode(), "naïve".encode(), b"w1"]
    from tokenizers import Tokenizer, decoders, models             # sentencepiece's way: LLaMA's, Mistral's
    piece = Tokenizer(models.BPE({"<unk>": 0, "<0x0A>": 1, "<0xE6>": 2, "\u2581the": 3, "a\u2581b": 4}, [],
                                 unk_token="<unk>", byte_fallback=True))
    piece.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)])
    piece.save(str(tmp_path / "piece.json"))
    assert data.token_bytes(str(tmp_path / "piece.json")) == [b"<unk>", b"\n", b"\xe6", b" the", b"a b"]


# ----------------------------------------------------------------------------- children of another vocabulary

def revocabulary(model: GPT, rows_of, seed: int = 0) -> GPT:
    """model with a new vocabulary: new id j takes the token table's and the head's old row rows_of[j], or, where it
    is -1, a new row drawn at the table's std."""
    state, g = {k: v.clone() for k, v in model.state_dict().items()}, torch.Generator().manual_seed(seed)
    rows_of = torch.as_tensor(rows_of)
    for name in ("transformer.wte.weight", "lm_head.weight"):
        old = state[name]
        new = torch.randn(len(rows_of), old.shape[1], generator=g) * old.std()
        new[rows_of >= 0] = old[rows_of[rows_of >= 0]]
        state[name] = new
    out = GPT(dataclasses.replace(model.config, vocab_size=len(rows_of)))
    out.load_state_dict(state)
    return out.eval()


@pytest.fixture(scope="module")
def kin(tmp_path_factory):
    """Checkpoints that record their tokenizer (a tokenizer.json of words): a base; a noisy child of the same
    tokenizer; children whose vocabulary was permuted (rows moved with their tokens; one with its residual basis
    permuted too), extended (50 tokens appended) and transplanted (300 of the base's tokens at new ids, their rows
    copied, 150 new); a stranger of the permuted tokenizer; and the models themselves in memory (no tokenizer)."""
    root = tmp_path_factory.mktemp("kin")
    rng = np.random.default_rng(1)
    base = build(get_config("tiny", **LLAMA), 1, 1).eval()
    child = add_noise(base, 0.02, seed=3)
    perm = rng.permutation(400)
    kept = rng.choice(400, 300, replace=False)
    transplanted = [WORDS[i] for i in kept] + [f"y{i}" for i in range(150)]
    order = rng.permutation(450)
    vocab = dict(base=WORDS, child=WORDS, permuted=[WORDS[p] for p in perm], hidden=[WORDS[p] for p in perm],
                 extended=WORDS + [f"x{i}" for i in range(50)], transplant=[transplanted[j] for j in order],
                 stranger=[WORDS[p] for p in perm])
    models = dict(base=base, child=child, permuted=revocabulary(child, perm),
                  hidden=permute_residual(revocabulary(child, perm), seed=5, flip=0.5),
                  extended=revocabulary(child, list(range(400)) + [-1] * 50, seed=1),
                  transplant=revocabulary(child, [WORDS.index(w) if w in WORDS else -1 for w in
                                                  (transplanted[j] for j in order)], seed=2),
                  stranger=revocabulary(build(get_config("tiny", **LLAMA), 2, 2), perm))
    paths = {}
    for name, m in models.items():
        (root / name).mkdir()
        write_tokenizer_json(root / name, vocab[name])
        paths[name] = str(root / f"{name}.pt")
        write_checkpoint(paths[name], m, tokenizer=str(root / name / "tokenizer.json"))
    return dict(paths=paths, models=models, vocab=vocab, root=root)


def record(r) -> dict:
    return {k: v for k, v in r.record().items() if k != "shared"}     # every number of a verdict


def test_one_tokenizer_or_an_extended_one_gives_the_verdicts_of_the_ids_to_the_last_digit(kin, monkeypatch):
    """The second path: the same models in memory, no tokenizer, drawn by id as before tokens were compared.
    The extension goes through the shared tokens (the map is the identity), and its verdicts are the ids' too."""
    p, m = kin["paths"], kin["models"]
    maps = []
    real = evidence.token_inputs
    monkeypatch.setattr(evidence, "token_inputs", lambda *a: maps.append(real(*a)) or maps[-1])
    for b in ("child", "extended"):
        for aligned in (False, True):
            by_tokens = seedprint.compare(p["base"], p[b], align=aligned, **OPTS)
            by_ids = seedprint.compare(m["base"], m[b], align=aligned, **OPTS)
            assert record(by_tokens) == record(by_ids), (b, aligned)
    assert maps[0] is None and maps[1] is None                      # one tokenizer, and none: ids as they are
    assert all(np.array_equal(x, np.arange(400)) for x in maps[4])   # the extension: the identity, by its tokens
    H = seedprint.fingerprint(m["base"], sequences=50, seq_len=8, ids=np.arange(400))
    assert np.array_equal(H, seedprint.fingerprint(m["base"], sequences=50, seq_len=8))


def test_a_child_whose_vocabulary_was_permuted_extended_or_transplanted_is_related_by_its_tokens(kin):
    """Each model fed the same tokens (checked by their words), each child related, exact and aligned verdicts; the
    permuted child, compared by id, loses nearly all its tau; the stranger of the same tokenizer stays unrelated;
    the aligned verdict matches the token tables on the shared tokens' rows (a basis permuted on top is seen)."""
    p, m, vocab = kin["paths"], kin["models"], kin["vocab"]
    for b in ("permuted", "extended", "transplant"):
        models = [evidence.read_model(p["base"]), evidence.read_model(p[b])]
        opts = dict(sequences=200, seq_len=16, vocab=None)
        ids_a, ids_b = evidence.token_inputs(models, opts, False)
        assert [vocab["base"][i] for i in ids_a] == [vocab[b][i] for i in ids_b]
        assert opts["vocab"] == len(set(vocab["base"]) & set(vocab[b])) == len(ids_a)
        for aligned in (False, True):
            r = seedprint.compare(p["base"], p[b], align=aligned, **OPTS)
            assert r.related and r.mean_tau > 0.9, (b, aligned, r)
    assert seedprint.compare(m["base"], m["permuted"], **OPTS).mean_tau < 0.3      # by id: other tokens
    for aligned in (False, True):
        assert not seedprint.compare(p["permuted"], p["stranger"], align=aligned, **OPTS).related
    r = seedprint.compare(p["base"], p["hidden"], align=True, **OPTS)
    assert r.related and r.alignment.matched_on == "token table" and r.alignment.moved > 20, r


# ----------------------------------------------------------------------------- fingerprint files

def test_a_file_records_its_tokens_and_meets_a_model_of_another_tokenizer_as_the_models_meet(kin, tmp_path):
    p = kin["paths"]
    path = str(tmp_path / "base.npz")
    evidence.write(path, seedprint.make_fingerprint(p["base"], **OPTS))
    fp = evidence.read(path)
    assert fp.tokens == [w.encode() for w in WORDS]
    for b in ("permuted", "extended"):
        for aligned in (False, True):
            assert record(seedprint.compare(path, p[b], align=aligned)) == \
                record(seedprint.compare(p["base"], p[b], align=aligned, **OPTS)), (b, aligned)
    with pytest.raises(ValueError, match=r"the models hold 300 of the 400 tokens .* a file is compared only"):
        seedprint.compare(path, p["transplant"])
    other = str(tmp_path / "permuted.npz")               # made on its own ids: other tokens than the base's file
    evidence.write(other, seedprint.make_fingerprint(p["permuted"], **OPTS))
    with pytest.raises(ValueError, match="were made on other tokens: files are compared at once only if"):
        seedprint.compare(path, other)
    old = forge_fingerprint(path, tmp_path / "old.npz", lambda a: [a.pop(k) for k in ("token_bytes", "token_ends")],
                            lambda meta: meta.update(version=1, tokens=None) or meta.pop("tokens"))
    assert evidence.read(old).tokens is None
    with pytest.raises(ValueError, match="records no tokens .* the vocabularies differ .*make the file again"):
        seedprint.compare(old, p["extended"])
    assert record(seedprint.compare(old, p["child"])) == record(seedprint.compare(path, p["child"]))   # one size
    bad = forge_fingerprint(path, tmp_path / "bad.npz", lambda a: a.update(token_ends=a["token_ends"][::-1].copy()))
    with pytest.raises(ValueError, match="records its tokens' ends out of order"):
        evidence.read(bad)


def test_one_search_reads_files_of_several_token_sets_the_suspect_read_once_and_fed_each_sets_tokens(kin, tmp_path,
                                                                                                       capsys,
                                                                                                       monkeypatch):
    """A registry of files made on three token sets: the base's, a stranger's (the same words at other ids) and an
    extension's (50 words more). The suspect -- the base's child with its vocabulary permuted and its basis
    permuted -- is read once, fed each set's tokens, and compared with the two sets whose tokens it holds: each
    verdict before Holm is its pair's alone, Holm runs across the two, and it derives from the base. The extension's
    file is not compared, and the search says why (the suspect holds 400 of its 450 tokens); a suspect that can be
    compared with no file is refused in one line."""
    p, reg = kin["paths"], tmp_path / "reg"
    reg.mkdir()
    for name in ("base", "stranger", "extended"):
        evidence.write(str(reg / f"{name}.npz"), seedprint.make_fingerprint(p[name], **OPTS))
    files = evidence.registry(str(reg))                         # base, extended, stranger: by name
    assert [len(g) for g in evidence.token_groups(files)] == [1, 1, 1]
    loads, real = [], evidence.loaded
    monkeypatch.setattr(evidence, "loaded", lambda m, *a, **kw: loads.append(evidence.name_of(m)) or real(m, *a, **kw))
    found = seedprint.search(p["hidden"], files, align=True)
    monkeypatch.undo()
    assert loads == [p["hidden"]]                               # the suspect, read once for both sets
    names = [os.path.basename(f.path) for f in files]
    assert found["answer"] == "derives from" and names[found["base"]] == "base.npz"
    assert list(found["not_compared"]) == [names.index("extended.npz")] and found["results"][1] is None
    assert "hold 400 of the 450 tokens" in found["not_compared"][1]
    compared = [i for i, r in enumerate(found["results"]) if r is not None]
    alone = [seedprint.compare(files[i].path, p["hidden"], align=True) for i in compared]
    for i, r in zip(compared, alone):
        assert found["results"][i].p_raw == pytest.approx(r.p, rel=1e-12) and \
            found["results"][i].mean_tau == r.mean_tau, names[i]
    assert [found["results"][i].p for i in compared] == pytest.approx(seedprint.holm([r.p for r in alone]))
    out = str(tmp_path / "out")
    seedprint.main([p["hidden"], "--against", str(reg), "--align", "on", "--out", out])
    printed = capsys.readouterr().out
    assert "not compared with extended.npz: the models hold 400 of the 450 tokens" in printed
    assert "derives from base.npz" in printed and "(1 of 3 bases not compared: above)" in printed
    two = tmp_path / "two"
    two.mkdir()
    for name in ("extended", "base"):
        evidence.write(str(two / f"{name}.npz"), evidence.read(str(reg / f"{name}.npz")))
    line = cli_error(seedprint.main, "seedprint.py", [p["transplant"], "--against", str(two), "--out", out + "2"])
    assert "can be compared with none of the bases" in line and "hold 300 of the 400 tokens" in line
    # the base and its child made on the child's own ids, two sets: both related, never tested against one another
    evidence.write(str(two / "permuted.npz"), seedprint.make_fingerprint(p["permuted"], **OPTS))
    both = seedprint.search(p["hidden"], evidence.registry(str(two)), align=True)
    assert both["answer"] == "inconclusive" and both["related"] == [0, 2] and both["one_lineage"] is None
    assert both["among_related"] == {} and list(both["not_compared"]) == [1]


# ----------------------------------------------------------------------------- bad input: one line, nothing written

def test_a_tokenizer_that_does_not_load_too_few_shared_tokens_or_an_unknown_one_is_refused_in_one_line(kin, tmp_path):
    p, m, root = kin["paths"], kin["models"], kin["root"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    write_checkpoint(str(tmp_path / "broken.pt"), m["permuted"], tokenizer=str(broken / "tokenizer.json"))
    few = tmp_path / "few"
    few.mkdir()
    write_tokenizer_json(few, WORDS[:3] + [f"z{i}" for i in range(397)])
    write_checkpoint(str(tmp_path / "few.pt"), m["permuted"], tokenizer=str(few / "tokenizer.json"))
    write_checkpoint(str(tmp_path / "none.pt"), m["base"])                  # no tokenizer recorded, vocab 400
    out = str(tmp_path / "out")
    cases = [([p["base"], str(tmp_path / "broken.pt")], "is not a readable tokenizer.json"),
             ([p["base"], str(tmp_path / "few.pt"), "--seq_len", "2", "--sequences", "10"],
              "share 3 tokens (by their bytes): too few for 10 distinct sequences of 2"),
             ([p["base"], str(tmp_path / "few.pt"), "--align", "on"], "share 3 tokens"),
             ([str(tmp_path / "none.pt"), p["extended"]], "none.pt has no tokenizer, and the vocabularies differ "
                                                          "(" + str(tmp_path / "none.pt") + ": 400 ids"),
             ([str(tmp_path / "none.pt"), p["permuted"], "--vocab", "300", "--tokenizer", str(few)], "share 3"),
             ([str(tmp_path / "none.pt"), "--save", str(tmp_path / "x.npz"), "--tokenizer", str(broken)],
              "is not a readable tokenizer.json")]
    for argv, why in cases:
        argv = argv + ([] if "--seq_len" in argv else ["--seq_len", "16"])     # the models' context: 32
        line = cli_error(seedprint.main, "seedprint.py", argv + ([] if "--save" in argv else ["--out", out]))
        assert why is None or why in line, (argv, line)
        assert len(line) < 600 and not os.path.exists(out) and not os.path.exists(tmp_path / "x.npz")
    r = seedprint.compare(str(tmp_path / "none.pt"), p["extended"], tokenizer=str(root / "base"), **OPTS)
    assert record(r) == record(seedprint.compare(p["base"], p["extended"], **OPTS))     # given, it is the base's


def test_a_hugging_face_directory_is_read_with_its_tokenizer_json(tmp_path):
    """A directory's tokenizer.json is its tokenizer: a child directory whose token rows were permuted with its
    tokenizer.json is related by tokens; without its tokenizer.json (the same size: taken as the base's ids), by id."""
    from conftest import llama_family, write_hf
    spec, config, tensors = llama_family("LlamaForCausalLM", seed=0)
    words = ["<unk>"] + [f"w{i}" for i in range(spec["V"] - 1)]
    perm = np.random.default_rng(2).permutation(spec["V"])
    moved = {k: v[torch.as_tensor(perm)] if k in ("model.embed_tokens.weight", "lm_head.weight") else v
             for k, v in tensors.items()}
    write_hf(tmp_path / "base", config, tensors)
    write_tokenizer_json(tmp_path / "base", words)
    for name in ("child", "bare"):
        write_hf(tmp_path / name, config, moved)
    write_tokenizer_json(tmp_path / "child", [words[p] for p in perm])
    opts = dict(sequences=200, seq_len=16, k=8)
    by_tokens = seedprint.compare(str(tmp_path / "base"), str(tmp_path / "child"), **opts)
    by_ids = seedprint.compare(str(tmp_path / "base"), str(tmp_path / "bare"), **opts)
    assert by_tokens.related and by_tokens.mean_tau > 0.9 > by_ids.mean_tau + 0.5, (by_tokens, by_ids)
    assert evidence.tokenizer_of(evidence.read_model(str(tmp_path / "bare"))) is None
