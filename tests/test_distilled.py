"""studies/distilled.py: the distillation loss against a naive loop over tokens, the loop bringing a student's
function to its teacher's, and the study end to end at a tiny size: the fine-tuned copy related, the independent
model unrelated, the student's verdict whatever it is, recorded beside how close it came."""
import dataclasses
import json
import math

import pytest
import torch

import data
import train
from init import build
from model import LLAMA_KNOBS, get_config, read_checkpoint
from studies import distilled
from studies.distilled import KINDS, closeness, distill, distillation_loss, held_out


def test_the_distillation_loss_is_the_forward_kl_per_token():
    """KL(teacher || student), not the reverse, nor summed over tokens: a loop over tokens and vocabulary, in plain
    Python floats, from each softmax written out."""
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(2, 3, 5, generator=g) * 2, torch.randn(2, 3, 5, generator=g) * 2
    total = 0.0
    for b in range(2):
        for i in range(3):
            zs, zt = [math.exp(v) for v in s[b, i].tolist()], [math.exp(v) for v in t[b, i].tolist()]
            p, q = [z / sum(zt) for z in zt], [z / sum(zs) for z in zs]
            total += sum(pv * math.log(pv / qv) for pv, qv in zip(p, q))
    assert distillation_loss(s, t).item() == pytest.approx(total / 6, rel=1e-5)
    assert distillation_loss(s, t).item() != pytest.approx(distillation_loss(t, s).item(), rel=1e-2)
    assert distillation_loss(t, t).item() == pytest.approx(0.0, abs=1e-6)


def test_distilling_brings_a_student_from_another_init_near_its_teacher(data_dir):
    """The loop lowers the student's KL from its teacher on held-out text, well below where its init starts, and
    leaves the teacher as it was."""
    knobs = dict(LLAMA_KNOBS, n_layer=2, n_embd=32, n_head=2, block_size=32)
    settings = train.TrainConfig(data=data_dir, device="cpu", batch_size=8, lr=3e-3, knobs=knobs)
    teacher = build(get_config("tiny", vocab_size=256, **knobs), 0)
    tokens = data.load_data(data_dir)
    kept = {n: p.clone() for n, p in teacher.state_dict().items()}
    student = build(teacher.config, 1)
    reference = held_out(teacher.eval(), tokens["val"])
    before = closeness(student.eval(), reference)["kl"]
    losses = distill(teacher, student, tokens["train"], dataclasses.replace(settings, max_steps=60, warmup=6), "cpu")
    after = closeness(student.eval(), reference)["kl"]
    assert after < 0.5 * before and losses[-1] < 0.5 * losses[0], (before, after, losses[0], losses[-1])
    assert all(torch.equal(p, kept[n]) for n, p in teacher.state_dict().items())


def test_the_study_end_to_end_at_a_tiny_size(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("".join(chr(32 + (i * 7919) % 90) for i in range(20000)))
    out = tmp_path / "out"
    argv = ["--seeds", "0", "--n_embd", "32", "--n_layer", "2", "--block_size", "16", "--seq_len", "16", "--max_steps", "30",
            "--ckpt_every", "30", "--batch_size", "8", "--distill_steps", "30", "--ft_steps", "10", "--sequences",
            "200", "--k", "8", "--device", "cpu", "--corpus", str(text), "--corpus2", str(text), "--out", str(out)]
    distilled.main(argv)
    res = json.loads((out / "results.json").read_text())["distilled"]
    rows = {r["model"]: r for r in res["pairs"]}
    assert sorted(rows) == sorted(KINDS) and (out / "distilled.png").is_file()
    assert rows[KINDS[1]]["exact"] is True and rows[KINDS[2]]["exact"] is False
    assert [t["pairs"] for t in res["table"]] == [1, 1, 1]
    student = next(p for p in (out / "runs").iterdir() if p.name.startswith("student"))
    assert student.name == f"student{distilled.STUDENT}"
    # the student's recorded recipe is the run it had: the teacher's corpus (as train.py recorded the teacher's run),
    # its own steps, and a warmup of a tenth of them, as every run of the study
    recipe = read_checkpoint(student / "ckpt.pt")["distillation"]
    teacher = out / "runs" / "teacher0" / "ckpt_0000030.pt"
    assert recipe["data"] == read_checkpoint(teacher)["args"]["data"]
    assert recipe["max_steps"] == 30 and recipe["warmup"] == 3 and recipe["init_seed"] == distilled.STUDENT
    assert recipe["teacher"][0][0] == str(teacher)


def test_a_seed_whose_independent_model_passes_the_last_seed_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        distilled.main(["--seeds", str(2 ** 63 - 1000), "--out", str(tmp_path / "out")])
    assert e.value.code == 2 and "passes the largest seed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
