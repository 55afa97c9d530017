"""
studies/vocab_derivatives.py: does SeedPrint find a model's children when their vocabulary changed? (paper
Section 6.1, with seedprint.py's inputs by token: the tokens both tokenizers hold, each model fed its own ids)

Two parents, trained --max_steps on --corpus: one on bytes (256 tokens), one on a byte-level BPE of --corpus
(--bpe_vocab tokens, the 256 bytes first, in byte order). Their children, each trained --deriv_steps more:

    extension     the byte parent with the BPE's merges appended: the old ids keep their rows, the new ones are new
    transplant    the byte parent moved onto a BPE of --corpus2 (its bytes at other ids, other merges): the shared
                  tokens' rows copied to their new ids, the rest new; the BPE parent moved onto it too (then bytes
                  and the merges both tokenizers learned are shared)
    permuted      the byte parent's ids permuted (a tokenizer of the same 256 bytes in another order), every row
                  moved with its token: the lineage hidden by a swapped tokenizer

Each child against its parent: seedprint.py's exact and aligned verdicts by token (as seedprint.py compares them)
and by id (as it did before: the same ids for both, whatever tokens they name), so the table shows why the
tokens matter. Then the false-positive rate where the tokenizers differ: --fpr_a models trained on bytes against
--fpr_b trained on the --corpus2 BPE, independent seeds, every cross pair (200 by default) with both verdicts by
token: the pairs called related, with their 95% Clopper-Pearson interval. Makes docs/seedprint.md's "Vocabulary
changes" (results.json's "vocab_derivatives", vocab_derivatives.png):

    python -m studies.vocab_derivatives        # 36 models of width 64, 200 pairs: 6 min on 2 cores

With --base DIR, a released model instead (a Hugging Face directory with its tokenizer.json):
its tokenizer extended by --base_extra tokens (Tokenizer.add_tokens, new rows), and the model moved onto GPT-2's
tokenizer (the rows of the tokens both hold copied to GPT-2's ids, the rest new), each against the base, and each
trained --base_steps on --corpus where asked:

    python -m studies.vocab_derivatives --base DIR --sequences 300 --seq_len 32 --base_steps 20
                                    # SmolLM2-135M: 8 min on 2 cores (4.3 of them for the untrained children)

Every tokenizer, model and fingerprint is made once under --out: a second run takes a minute.
"""
import dataclasses
import json
import math
import os

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Progress, atomic_write, check_output, figure, flag_type, lock_dir, print_table,
                    provenance, resolve_device, run_script, save_figure, seed_int, seed_range, update_results,
                    write_json)
from model import GPT, write_checkpoint
import numpy as np
from tokenizers import ByteLevelBPETokenizer
import torch

import data
import evidence
import hf
import seedprint
from evidence import Options
from studies.lineage import (Lineage, add_lineage_flags, check_base, check_k, check_lineage_flags, checkpoints,
                             clopper_pearson, rate, trained, training)


# ----------------------------------------------------------------------------- tokenizers of known tokens

def byte_char(b: int) -> str:
    """The character a byte-level BPE writes byte b as (data.byte_level_alphabet's inverse)."""
    return {byte: c for c, byte in data.byte_level_alphabet().items()}[b]


def trained_bpe(text: str, vocab_size: int) -> dict:
    """A byte-level BPE of `vocab_size` tokens trained on text by the tokenizers library: its tokenizer.json, parsed
    (the 256 bytes first, in the library's order, then its merges)."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text], vocab_size=vocab_size, min_frequency=2, show_progress=False)
    return json.loads(bpe.to_str())


def reordered(spec: dict, order: list) -> dict:
    """A byte-level BPE's tokenizer.json with the tokens `order` (token strings) at ids 0, 1, ...: the merges whose
    pieces and result are all kept stay, so text is cut as before wherever the tokens allow."""
    vocab = {token: i for i, token in enumerate(order)}
    pairs = [m.split(" ") if isinstance(m, str) else m for m in spec["model"]["merges"]]
    merges = [[a, b] for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
    return dict(spec, model=dict(spec["model"], vocab=vocab, merges=merges))


def tokenizer_file(out: str, name: str, make) -> str:
    """out/tokenizers/NAME/tokenizer.json, made once by make() (a tokenizer.json, parsed) and reused after: NAME
    says what it is made from (corpus, size, seed), so that other settings make another file, never reuse this one."""
    path = os.path.join(out, "tokenizers", name, "tokenizer.json")
    if not os.path.isfile(path):
        write_json(path, make())
    return path


def tokenizer_label(tok: str) -> str:
    """How a data folder names the tokenizer it was cut by: a file made here by its folder (tokenizer_file's NAME),
    else the name given (bytes)."""
    return os.path.basename(os.path.dirname(tok)) if tok.endswith("tokenizer.json") else tok


def bytes_first_bpe(out: str, corpus: str, vocab: int, data_from: str = None) -> str:
    """The BPE of `corpus` (`vocab` tokens) with the 256 bytes first, in byte order, then its merges: an extension
    of the byte-level tokenizer (byte b keeps id b)."""
    def make():
        bpe = trained_bpe(data.read_text(data.text_file(corpus, data_from)), vocab)
        first = [byte_char(b) for b in range(256)]
        merged = [t for t, _ in sorted(bpe["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in first]
        return reordered(bpe, first + merged)
    return tokenizer_file(out, f"bpe_{data.corpus_label(corpus)}_v{vocab}_bytes_first", make)


def tokenizers(out: str, args) -> dict:
    """{name: tokenizer name as data.get_tokenizer takes it}: bytes, and three tokenizer.json files made once under
    out/tokenizers: the BPE of --corpus with the bytes first in byte order (an extension of bytes), the BPE of
    --corpus2 in the library's order, the 256 bytes in a permuted order (no merges)."""
    first = bytes_first_bpe(out, args.corpus, args.bpe_vocab, args.data_from)
    second = lambda: trained_bpe(data.read_text(data.text_file(args.corpus2, args.data_from)), args.bpe_vocab)
    perm = np.random.default_rng(args.perm_seed).permutation(256)
    # the bytes alone, permuted, in the first BPE's spec: reordered keeps none of its merges
    permuted = lambda: reordered(json.loads(data.read_text(first)), [byte_char(b) for b in perm])
    return dict(bytes="bytes", bpe_corpus=first,
                bpe_corpus2=tokenizer_file(out, f"bpe_{data.corpus_label(args.corpus2)}_v{args.bpe_vocab}", second),
                bytes_permuted=tokenizer_file(out, f"bytes_permuted_seed{args.perm_seed}", permuted))


# ----------------------------------------------------------------------------- a model moved onto another tokenizer

def onto(model: GPT, tokens: list, new_tokens: list, seed: int = 0) -> GPT:
    """model moved onto another vocabulary, token by token: new id j takes the token table's (and an untied head's)
    row of the same token (by its bytes: data.token_bytes) where model's vocabulary `tokens` holds it, else a new
    row drawn at the table's std. An extension, a transplant and a permuted vocabulary are each this move."""
    where = {t: i for i, t in reversed(list(enumerate(tokens[:model.config.vocab_size])))}
    rows_of = torch.tensor([where.get(t, -1) for t in new_tokens])
    config = dataclasses.replace(model.config, vocab_size=len(new_tokens))
    state, g = model.state_dict(), torch.Generator().manual_seed(seed)
    for name in ("transformer.wte.weight", "lm_head.weight"):
        if name in state:
            old = state[name]
            new = (torch.randn(len(new_tokens), old.shape[1], generator=g) * old.float().std()).to(old.dtype)
            new[rows_of >= 0] = old[rows_of[rows_of >= 0]]
            state[name] = new
    out = GPT(config)
    out.load_state_dict(state)
    return out.eval()


def derivative(out: str, parent: str, tokenizer: str, name: str, seed: int = 0) -> str:
    """out/derived/NAME.pt: `parent` (a checkpoint or Hugging Face directory that records its tokenizer) moved onto
    `tokenizer` (onto), in float32, a checkpoint recording that tokenizer, written once."""
    path = os.path.join(out, "derived", f"{name}.pt")
    if not os.path.isfile(path):
        old = data.token_bytes(evidence.tokenizer_of(evidence.read_model(parent)))
        moved = onto(hf.load(parent, dtype=torch.float32), old, data.token_bytes(tokenizer), seed)
        atomic_write(path, lambda tmp: write_checkpoint(tmp, moved, tokenizer=tokenizer, provenance=provenance()))
    return path


def extended_tokenizer(out: str, base: str, extra: int) -> str:
    """out/tokenizers/BASE_plusEXTRA: --base's tokenizer.json with `extra` tokens appended as a user adds them
    (Tokenizer.add_tokens): GPT-2's tokens of ASCII letters alone that --base lacks, in GPT-2's id order."""
    def make():
        held = set(data.token_bytes(base))
        new = [t.decode() for t in data.token_bytes("gpt2") if t.isascii() and t.isalpha() and t not in held]
        if len(new) < extra:
            raise ValueError(f"--base_extra {extra}: GPT-2 has only {len(new)} tokens of letters that --base lacks")
        tok, _ = data.hf_tokenizer(base)
        tok.add_tokens(new[:extra])
        return json.loads(tok.to_str())
    return tokenizer_file(out, f"{data.corpus_label(base)}_plus{extra}", make)


# ----------------------------------------------------------------------------- verdicts by token and by id

def token_maps(a: str, b: str, args) -> list:
    """Each model's ids of the random inputs' positions, as seedprint.py finds them from the tokenizers the two
    checkpoints record (evidence.token_inputs; None: one tokenizer, the ids as they are)."""
    opts = dict(sequences=args.sequences, seq_len=args.seq_len, vocab=None)
    return evidence.token_inputs([evidence.read_model(m) for m in (a, b)], opts, matched=True)


def plot(rows: list, pairs: list, path: str) -> None:
    """Left: each child's p against its parent, by token and by id; right: the unrelated pairs' p, by token."""
    plt, fig, (left, right) = figure(1, 2, figsize=(11, 4))
    floor = 1e-300                              # a p of 0 (every tau 1) drawn at the axis' end
    x = np.arange(len(rows))
    for i, (key, label) in enumerate([("p", "exact, by token"), ("p_aligned", "aligned, by token"),
                                      ("id_p", "exact, by id"), ("id_p_aligned", "aligned, by id")]):
        left.bar(x + (i - 1.5) * 0.2, [-math.log10(max(r[key], floor)) for r in rows], 0.2, label=label)
    left.axhline(-math.log10(seedprint.ALPHA), c="k", lw=0.8, ls=":", label="alpha")
    left.set(xticks=x, ylabel="-log10 p (child vs parent)", yscale="symlog", title="children of another vocabulary")
    left.set_xticklabels([r["child"] for r in rows], rotation=15, fontsize=7)
    left.legend(fontsize=7)
    if not pairs:                               # --base: children alone
        right.axis("off")
    for key, label in (("p", "exact"), ("p_aligned", "aligned")) if pairs else ():
        right.hist([r[key] for r in pairs], bins=20, range=(0, 1), histtype="step", label=label)
        right.axvline(seedprint.ALPHA, c="k", lw=0.8, ls=":")
        right.set(xlabel="p, unrelated pairs of two tokenizers", ylabel="pairs", title=f"{len(pairs)} unrelated pairs")
        right.legend(fontsize=7)
    save_figure(fig, path)


def child_row(lineage: Lineage, name: str, parent: str, child: str, args) -> dict:
    """A child against its parent: both verdicts by token and by id (id_*), with the shared tokens' count."""
    maps = token_maps(parent, child, args)
    by_id = lineage.verdicts(parent, child)
    return dict(child=name, a=parent, b=child, vocab=evidence.config_of(evidence.read_model(child)).vocab_size,
                shared=None if maps is None else len(maps[0]), **lineage.verdicts(parent, child, maps),
                **{f"id_{k}": v for k, v in by_id.items()})


def report(rows: list) -> None:
    """The children's table, as printed."""
    how = ("matched_on", "table_fit", "input_fit", "moved")            # how B was matched: in results.json
    left_out = {"a", "b", *how, *(f"id_{k}" for k in how)}
    print_table([{k: v for k, v in r.items() if k not in left_out} for r in rows], floats="{:.3g}")


# ----------------------------------------------------------------------------- the study

def tiny_study(args, device: str, seeds: list) -> None:
    """Tiny parents, their trained children of other vocabularies, and unrelated pairs of two tokenizers (seeds:
    the --fpr_a models' and the --fpr_b models')."""
    # the tokenizers, the data each is trained on, the parents
    toks = tokenizers(args.out, args)
    label = {c: data.corpus_label(c) for c in (args.corpus, args.corpus2)}
    text = lambda c, t: data.prepared([c], os.path.join(args.out, "data", f"{label[c]}_{tokenizer_label(toks[t])}"),
                                      toks[t], args.data_from)
    template = training(args, device)
    final = lambda run: checkpoints(run)[-1][1]
    parents = dict(bytes=final(trained(template, args.out, "parent_bytes", 1, text(args.corpus, "bytes"))),
                   bpe=final(trained(template, args.out, "parent_bpe", 2, text(args.corpus, "bpe_corpus"))))

    # the children: (name, parent, tokenizer, corpus), each moved onto its tokenizer, then trained on it
    kinds = [("extension", "bytes", "bpe_corpus", args.corpus),
             ("transplant bytes -> BPE2", "bytes", "bpe_corpus2", args.corpus2),
             ("transplant BPE -> BPE2", "bpe", "bpe_corpus2", args.corpus2),
             ("permuted ids", "bytes", "bytes_permuted", args.corpus)]
    lineage = Lineage(args, args.out, device)
    rows = []
    for n, (name, parent, tok, c) in enumerate(kinds):
        run_name = name.replace(" -> ", "_to_").replace(" ", "_")
        moved = derivative(args.out, parents[parent], toks[tok], run_name, seed=n)
        child = final(trained(template, args.out, f"child_{run_name}", 0, text(c, tok), steps=args.deriv_steps,
                              init_from=moved))
        rows.append(dict(child_row(lineage, name, parents[parent], child, args), tokenizers=f"{parent} -> {tok}"))

    # the false-positive rate: every cross pair of independent models of two tokenizers
    models_a = [final(trained(template, args.out, f"bytes_seed{s}", s, text(args.corpus, "bytes")))
                for s in seeds[:args.fpr_a]]
    models_b = [final(trained(template, args.out, f"bpe2_seed{s}", s, text(args.corpus2, "bpe_corpus2")))
                for s in seeds[args.fpr_a:]]
    bar = Progress(len(models_a) * len(models_b), "unrelated pairs", "pairs")
    pairs = []
    for a in models_a:
        for b in models_b:
            maps = token_maps(a, b, args)
            pairs.append(dict(a=a, b=b, shared=len(maps[0]), **lineage.verdicts(a, b, maps)))
            bar.update()
    n = len(pairs)
    fpr = []
    for verdict in ("exact", "aligned"):
        x = sum(r[verdict] for r in pairs)
        fpr.append(dict(verdict=verdict, pairs=n, related=x, **rate(x, n),
                        upper95=f"{100 * clopper_pearson(x, n)[1]:.2f}%"))
    # the pairs a 95% upper bound of 1% needs where none is called related: 1 - 0.025^(1/n) <= 0.01
    needed = math.ceil(math.log(0.025) / math.log(0.99))

    report(rows)
    print_table(fpr)
    print(f"0 related of n pairs bounds the rate at 1% (95% Clopper-Pearson) from n = {needed}")
    plot(rows, pairs, os.path.join(args.out, "vocab_derivatives.png"))
    update_results(os.path.join(args.out, "results.json"), {"vocab_derivatives": dict(
        alpha=seedprint.ALPHA, derivatives=rows, fpr=fpr, pairs_for_a_1pct_bound=needed, pairs=pairs,
        tokenizers=toks)}, device, args.dtype)


def released_study(args, device: str) -> None:
    """--base's extension and its transplant onto GPT-2's tokenizer, each against --base: untrained, and trained
    --base_steps on --corpus where asked."""
    kinds = [(f"extension (+{args.base_extra} tokens)", extended_tokenizer(args.out, args.base, args.base_extra)),
             ("transplant onto GPT-2's tokenizer", "gpt2")]
    # a short fine-tune of a released model: small batches of short windows, its own learning rate
    template = dataclasses.replace(training(args, device), batch_size=4, seq_len=64, lr=1e-4)
    lineage = Lineage(args, args.out, device)
    rows = []
    for name, tok in kinds:
        run_name = f"{data.corpus_label(args.base)}_onto_{tokenizer_label(tok)}"    # another base or tokenizer: anew
        moved = derivative(args.out, args.base, tok, run_name)
        rows.append(child_row(lineage, f"{name}, untrained", args.base, moved, args))
        if args.base_steps:
            folder = f"{data.corpus_label(args.corpus)}_{tokenizer_label(tok)}"
            text = data.prepared([args.corpus], os.path.join(args.out, "data", folder), tok, args.data_from)
            child = checkpoints(trained(template, args.out, run_name, 0, text, steps=args.base_steps,
                                        init_from=moved, ckpt_every=args.base_steps))[-1][1]
            rows.append(child_row(lineage, f"{name}, trained {args.base_steps} steps", args.base, child, args))
    report(rows)
    plot(rows, [], os.path.join(args.out, "vocab_derivatives_base.png"))
    update_results(os.path.join(args.out, "results.json"), {"vocab_derivatives_base": dict(
        alpha=seedprint.ALPHA, base=args.base, derivatives=rows)}, device, args.dtype)


def main(argv=None):
    p = ArgumentParser(prog="studies.vocab_derivatives", description="SeedPrint on children whose vocabulary was "
                       "extended, transplanted or permuted, and its false-positive rate on unrelated models of two "
                       "tokenizers; with --base, on a released model's extension and transplant.")
    p.add_argument("--deriv_steps", type=flag_type("int>=1"), default=200, help="steps each child is trained on its "
                   "new tokenizer")
    p.add_argument("--bpe_vocab", type=flag_type("int>=257"), default=512, help="tokens of each BPE: the 256 bytes "
                   "and its merges (fewer where the corpus has fewer pairs to merge)")
    p.add_argument("--perm_seed", type=seed_int, default=0, help="seed of the permuted tokenizer's order")
    p.add_argument("--fpr_a", type=flag_type("int>=1"), default=20, help="models trained on bytes, against")
    p.add_argument("--fpr_b", type=flag_type("int>=1"), default=10, help="models trained on the --corpus2 BPE, "
                   "every cross pair an unrelated pair")
    p.add_argument("--fpr_seed0", type=seed_int, default=100, help="their seeds: --fpr_a from here, then --fpr_b")
    p.add_argument("--base", default=None, help="instead: a Hugging Face directory with its tokenizer.json, extended "
                   "and moved onto GPT-2's tokenizer (tiktoken's files: TIKTOKEN_CACHE_DIR offline), untrained")
    p.add_argument("--base_extra", type=flag_type("int>=1"), default=1024, help="tokens appended to --base's")
    p.add_argument("--base_steps", type=flag_type("int>=0"), default=0, help="with --base: also each child trained "
                   "this many steps on --corpus (batches of 4 windows of 64 tokens, lr 1e-4)")
    add_lineage_flags(p, out="out/vocab_derivatives", tokenizer=False)
    p.set_defaults(block_size=64)               # short windows: 200 steps of a tiny model in seconds
    args = p.parse_args(argv)
    if args.base:
        config = check_base(args.base, args.seq_len)
        if args.k != Options().k:                 # left at its default, k is capped at half the width
            check_k(args.k, [config.n_embd], "the width of --base")
        data.token_bytes("gpt2")                  # GPT-2's tokenizer loads before any weight is read
        hf.check_weights_finite(args.base)
    else:
        check_lineage_flags(args)
        seeds = seed_range(args.fpr_seed0, args.fpr_a + args.fpr_b, "--fpr_seed0")
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        released_study(args, device) if args.base else tiny_study(args, device, seeds)


if __name__ == "__main__":
    run_script(main, "studies.vocab_derivatives")
