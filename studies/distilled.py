"""
studies/distilled.py: what SeedPrint tests is a shared initialization. Is a student distilled from a teacher, but
initialized apart, the teacher's descendant in that sense? (paper Section 6.1)

For each of --seeds s, a teacher (LLaMA-style `tiny`, bytes, trained on --corpus from init seed s) and three models
tested against it:

    student       the teacher's architecture from its own init (seed s + 1000), trained --distill_steps to match the
                  teacher's next-token distributions on the same corpus: the loss is KL(teacher || student) per
                  token (distillation_loss), the loop below, plain
    fine-tuned    the teacher continued --ft_steps on --corpus2: its descendant (the related control)
    independent   trained like the teacher, on the same data in the same order, from init seed s + 2000 (the
                  unrelated control)

How close each came to the teacher's function, on held-out windows of the corpus: the KL from the teacher's
distribution per token (nats), and how often its most likely next token is the teacher's (top-1 agreement). Then
SeedPrint's exact and aligned verdicts of each against its teacher. Makes docs/seedprint.md's "A distilled student"
and the README's answer to "is a distilled student its teacher's descendant?":

    python -m studies.distilled                   # 3 teachers, 9 pairs: 2.5 min on 2 cores
"""
import dataclasses
import os
import time

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, Distinct, SEED_LIMIT, atomic_write, check_output, figure, flag_type, lock_dir,
                    print_table, provenance, resolve_device, run_script, save_figure, seed_int, update_results)
from model import GPT, read_checkpoint, write_checkpoint
import torch
import torch.nn.functional as F

import data
import hf
import train
from init import build
from studies.lineage import (Lineage, add_lineage_flags, architecture, check_lineage_flags, checkpoints, corpus,
                             run_settings, span, trained, training, weights_identity)

STUDENT, INDEPENDENT = 1000, 2000       # the student's and the independent model's init seeds: s + these
KINDS = ("student (distilled)", "fine-tuned (related control)", "independent (unrelated control)")


# ----------------------------------------------------------------------------- distillation

def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) = sum_v p_t(v) (log p_t(v) - log p_s(v)), averaged over tokens, in nats: the
    forward KL, as Hinton et al. distil (temperature 1), which makes the student cover every token the teacher
    gives mass to. F.kl_div takes the student's log-probabilities first and the teacher's second (log_target: as
    log-probabilities too), and "batchmean" divides the sum by the first dimension: the tokens, once flattened."""
    V = student_logits.shape[-1]
    return F.kl_div(F.log_softmax(student_logits.float().reshape(-1, V), dim=-1),
                    F.log_softmax(teacher_logits.float().reshape(-1, V), dim=-1), log_target=True,
                    reduction="batchmean")


def distill(teacher: GPT, student: GPT, tokens, settings: train.TrainConfig, device) -> list:
    """Train `student` in place for settings.max_steps steps on the teacher's next-token distributions over windows
    of `tokens`, with train.py's optimizer and schedule (settings: its lr, warmup, batch, clipping and data order);
    the loss of every step."""
    settings, steps = settings.resolved(), settings.max_steps
    T = student.config.block_size
    optimizer = train.make_optimizer(student, settings, torch.device(device).type)
    teacher.eval()
    student.train()
    losses = []
    for step in range(steps):
        offsets = data.batch_offsets(settings.data_seed, step, len(tokens), T, settings.batch_size)
        x, y = data.get_batch(tokens, offsets, T, device)
        with torch.no_grad():
            target = teacher(x, y)[0]           # with targets, the logits of every position
        loss = distillation_loss(student(x, y)[0], target)
        for group in optimizer.param_groups:
            group["lr"] = train.lr_at(step, settings.lr, settings.min_lr, settings.warmup, steps)
        loss.backward()
        if settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(student.parameters(), settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def distilled(settings: train.TrainConfig, teacher: GPT, teacher_path: str, corpus_data: dict, device) -> str:
    """settings.out_dir/ckpt.pt: a student of the teacher's architecture from init seed settings.init_seed, distilled
    settings.max_steps steps on the corpus (settings.data, read as corpus_data), made on first use and reused after
    while the teacher's weights (as the file system tells) and every setting of the run are the same."""
    path = os.path.join(settings.out_dir, "ckpt.pt")
    recipe = dict(teacher=weights_identity(teacher_path),
                  **{k: getattr(settings, k) for k in train.RUN_DEFINING if k != "init_from"})
    if os.path.isfile(path) and read_checkpoint(path).get("distillation") == recipe:
        return path
    student = build(teacher.config, settings.init_seed, settings.embed_seed).to(device)
    t0 = time.time()
    losses = distill(teacher.to(device), student, corpus_data["train"], settings, device)
    print(f"student {settings.init_seed}: distilled {settings.max_steps} steps in {time.time() - t0:.0f} s, KL "
          f"{losses[0]:.3f} -> {losses[-1]:.3f} nats/token")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    meta = dict(seeds=dict(init_seed=settings.init_seed, embed_seed=settings.embed_seed),
                tokenizer=corpus_data["meta"]["tokenizer"], distillation=recipe, losses=losses, provenance=provenance())
    atomic_write(path, lambda tmp: write_checkpoint(tmp, student.cpu(), step=settings.max_steps, **meta))
    return path


@torch.no_grad()
def held_out(teacher: GPT, tokens, windows: int = 64) -> tuple:
    """(x, y, the teacher's logits) on `windows` held-out windows of `tokens` as long as its context, on the CPU:
    what closeness compares each model with, computed once per teacher."""
    T = teacher.config.block_size
    x, y = data.get_batch(tokens, data.batch_offsets(0, 0, len(tokens), T, windows), T, "cpu")
    return x, y, teacher(x, y)[0]


@torch.no_grad()
def closeness(model: GPT, reference: tuple) -> dict:
    """How close model's function is to the teacher's on its held-out windows (reference: held_out's): the KL from
    the teacher per token (nats) and the share of positions where the two models' most likely next tokens agree."""
    x, y, a = reference
    b = model(x, y)[0]
    return dict(kl=distillation_loss(b, a).item(), top1=(a.argmax(-1) == b.argmax(-1)).float().mean().item(),
                val_loss=F.cross_entropy(b.flatten(0, 1), y.flatten()).item())


# ----------------------------------------------------------------------------- the verdicts

def row(lineage: Lineage, teacher: str, model: str, seed: int, kind: str, reference: tuple) -> dict:
    """One pair's line: how close the model's function is to the teacher's (reference: held_out's), and both
    verdicts."""
    near = closeness(hf.load(model).eval(), reference)
    return dict(teacher=seed, model=kind, **near, **lineage.verdicts(teacher, model))


def summary(rows: list) -> list:
    """Per kind of model, over the teachers: the closeness range and how many pairs each verdict calls related."""
    out = []
    for kind in KINDS:
        rs = [r for r in rows if r["model"] == kind]
        of = lambda key: [r[key] for r in rs]
        out.append(dict(model=kind, pairs=len(rs), kl=span(of("kl"), "{:.3f}"), top1=span(of("top1"), "{:.1%}"),
                        exact=f"{sum(of('exact'))}/{len(rs)}", p_min=min(of("p")),
                        mean_tau=span(of("mean_tau")),
                        aligned=f"{sum(of('aligned'))}/{len(rs)}",
                        p_aligned_min=min(of("p_aligned")), tau_aligned=span(of("tau_aligned"))))
    return out


def plot(rows: list, path: str) -> None:
    """Each pair's KL from its teacher against its exact mean tau, by kind: the student near the teacher in
    function, at the independent model's tau."""
    plt, fig, ax = figure(1, 1, figsize=(5.5, 3.8))
    for kind, marker in zip(KINDS, "o^s"):
        rs = [r for r in rows if r["model"] == kind]
        ax.scatter([r["kl"] for r in rs], [r["mean_tau"] for r in rs], marker=marker, label=kind)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("KL from the teacher (nats/token, held-out text)")
    ax.set_ylabel("exact verdict's mean tau vs the teacher")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None):
    p = ArgumentParser(prog="studies.distilled", description="SeedPrint on a student distilled from a teacher but "
                       "initialized apart, beside a fine-tuned copy of the teacher and an independent model.")
    p.add_argument("--seeds", type=seed_int, nargs="+", action=Distinct, default=[0, 1, 2],
                   help="the teachers' init seeds (the student's is s + 1000, the independent model's s + 2000)")
    p.add_argument("--distill_steps", type=flag_type("int>=1"), default=600, help="the student's training steps")
    p.add_argument("--ft_steps", type=flag_type("int>=1"), default=100, help="the fine-tuned copy's steps on "
                   "--corpus2")
    add_lineage_flags(p, out="out/distilled")
    p.set_defaults(block_size=64)
    args = p.parse_args(argv)
    if max(args.seeds) + INDEPENDENT >= SEED_LIMIT:
        p.error(f"--seeds: the independent model's init seed s + {INDEPENDENT} passes the largest seed 2^63 - 1; "
                f"lower the largest of --seeds")
    check_lineage_flags(args)
    check_output(args.out)
    device = str(resolve_device(args.device))
    with lock_dir(args.out):
        t0 = time.time()
        text, text2 = (corpus(args.out, c, args.tokenizer, args.data_from) for c in (args.corpus, args.corpus2))
        corpus_data = data.load_data(text)
        vocab = corpus_data["meta"]["vocab_size"]
        template = training(args, device)
        lineage = Lineage(args, args.out, device, vocab=vocab)
        rows = []
        for s in args.seeds:
            teacher = checkpoints(trained(template, args.out, f"teacher{s}", s, text))[-1][1]
            teacher_model = hf.load(teacher).eval()                  # read once: the reference, then the distilling
            reference = held_out(teacher_model, corpus_data["val"])
            student = run_settings(template, args.out, f"student{s + STUDENT}", s + STUDENT, text,
                                   steps=args.distill_steps)
            models = {
                KINDS[0]: distilled(student, teacher_model, teacher, corpus_data, device),
                KINDS[1]: checkpoints(trained(template, args.out, f"teacher{s}_{data.corpus_label(args.corpus2)}", s,
                                              text2, steps=args.ft_steps, init_from=teacher))[-1][1],
                KINDS[2]: checkpoints(trained(template, args.out, f"independent{s + INDEPENDENT}", s + INDEPENDENT,
                                              text))[-1][1]}
            rows += [row(lineage, teacher, m, s, kind, reference) for kind, m in models.items()]
        table = summary(rows)
        print_table(rows, floats="{:.3g}")
        print_table(table, floats="{:.3g}")
        plot(rows, os.path.join(args.out, "distilled.png"))
        update_results(os.path.join(args.out, "results.json"),
                       {"distilled": dict(config=dataclasses.asdict(architecture(args, vocab_size=vocab)),
                                          table=table, pairs=rows, seconds=time.time() - t0)}, device, args.dtype)


if __name__ == "__main__":
    run_script(main, "studies.distilled")
