"""train.py: data preparation, the training contract (loss falls, resume, DDP, accumulation), bad input."""
import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import data

import train
from conftest import TEXT, cli_error, torchrun
from common import TORCHRUN_VARS
from model import load_checkpoint, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--n_layer", "2", "--n_embd", "32", "--n_head", "2", "--block_size", "16", "--device", "cpu",
        "--eval_sequences", "8"]


def run(data_dir, out_dir, *flags):
    return train.train(train.parse_args(["--data", data_dir, "--out_dir", str(out_dir), *TINY, "--log_every", "1",
                                         *flags]))


def tokens_of(data_dir):
    return np.concatenate([np.fromfile(os.path.join(data_dir, f"{s}.bin"), dtype=np.uint16) for s in ("train", "val")])


def final_state(out_dir):
    steps = train.list_checkpoints(str(out_dir))
    return read_checkpoint(steps[-1][1])


# ----------------------------------------------------------------------------- data

def test_batch_order_depends_on_data_seed_only(data_dir, tmp_path, monkeypatch):
    """The windows the trainer reads, recorded from inside the trainer: the same for another init
    seed and another micro-batch split, different for another data seed."""
    seen = []
    real = train.get_batch
    monkeypatch.setattr(train, "get_batch",
                        lambda tokens, offs, T, dev: (seen.append(list(offs)), real(tokens, offs, T, dev))[1])

    def order(*flags):
        seen.clear()
        run(data_dir, tmp_path / f"run{len(os.listdir(tmp_path))}", "--max_steps", "3", "--eval_every", "0",
            "--batch_size", "4", *flags)
        return sorted(sum(seen, []))

    base = order("--init_seed", "1", "--data_seed", "5")
    assert base == order("--init_seed", "2", "--embed_seed", "9", "--data_seed", "5")
    assert base == order("--init_seed", "1", "--data_seed", "5", "--micro_batch", "1")
    assert base != order("--init_seed", "1", "--data_seed", "6")


def test_lr_schedule_warmup_and_cosine():
    lrs = [train.lr_at(s, 1.0, 0.1, 10, 110) for s in range(111)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lrs[60] == pytest.approx(0.1 + 0.9 * 0.5)      # half way through the cosine
    assert lrs[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


# ----------------------------------------------------------------------------- training

def test_loss_falls_on_repeated_text(data_dir, tmp_path):
    log = run(data_dir, tmp_path, "--max_steps", "80", "--eval_every", "40", "--batch_size", "8", "--lr", "3e-3",
              "--warmup", "5", "--ckpt_every", "40")
    vals = [r["val_loss"] for r in log["val"]]
    assert vals[0] == pytest.approx(np.log(256), abs=0.3)      # ~uniform over bytes at birth
    assert vals[-1] < vals[0] - 2.0
    assert [s for s, _ in train.list_checkpoints(str(tmp_path))] == [0, 40, 80]
    assert os.path.isfile(tmp_path / "loss.png") and json.load(open(tmp_path / "log.json"))["val"][-1]["step"] == 80


def test_writing_the_log_at_a_pause_is_not_counted_as_training_time(data_dir, tmp_path, monkeypatch):
    """tokens/s and ms/step time the steps alone: the log written at a pause (here a checkpoint after every step; a
    JSON file, fsynced) falls outside the next record's clock, as the checkpoint and evaluation do, while the wall
    stamps hold it. Each write is made to take 0.5 s here: the clock of each record is then at least 0.5 s shorter
    than the wall time since the last one (however long a step takes on a busy machine), where it would be longer
    had it counted the write."""
    import time
    write = train.write_json

    def slow_write(path, obj):
        time.sleep(0.5)
        write(path, obj)
    monkeypatch.setattr(train, "write_json", slow_write)
    log = run(data_dir, tmp_path, "--max_steps", "3", "--eval_every", "0", "--ckpt_every", "1")
    assert [r["step"] for r in log["train"]] == [1, 2, 3]
    walls = [0.0] + [r["wall"] for r in log["train"]]      # each gap holds a write: after the init, after each step
    for r, gap in zip(log["train"], np.diff(walls)):
        assert r["ms_per_step"] / 1000 < gap - 0.45, (log["train"], walls)


def test_the_log_is_written_at_pauses_not_at_every_record(data_dir, tmp_path, monkeypatch):
    """With --log_every 1, log.json is written before each checkpoint, after each evaluation, at the end and every
    LOG_SECONDS, not at each record (rewriting the whole file while the device waits); each write is the whole log
    so far, in order. Then, with LOG_SECONDS 0, between pauses too, whenever a record was read since the last
    write: at step s once step s is run and before record s - 1 is read (so the device, with both steps queued, works
    on while the host writes), holding the records up to s - 2."""
    writes, events = [], []
    write, train_step = train.write_json, train.train_step

    def counted(path, obj):
        if os.path.basename(path) == "log.json":
            writes.append(([r["step"] for r in obj["train"]], [r["step"] for r in obj["val"]]))
            events.append(("write", writes[-1][0]))
        write(path, obj)
    monkeypatch.setattr(train, "write_json", counted)
    monkeypatch.setattr(train, "train_step", lambda *a: (events.append("step"), train_step(*a))[1])
    log_train = train.log_train
    monkeypatch.setattr(train, "log_train", lambda log, flight, *a: (events.append(("read", flight["step"])),
                                                                      log_train(log, flight, *a))[1])
    monkeypatch.setattr(train, "LOG_SECONDS", 1e9)
    log = run(data_dir, tmp_path / "a", "--max_steps", "8", "--ckpt_every", "4", "--eval_every", "6")
    # at the init's evaluation and checkpoint, step 4's checkpoint, step 6's evaluation, step 8, the end
    assert writes == [([], [0]), ([1, 2, 3, 4], [0]), ([1, 2, 3, 4, 5, 6], [0, 6]),
                      ([*range(1, 9)], [0, 6, 8]), ([*range(1, 9)], [0, 6, 8])]
    assert json.loads((tmp_path / "a" / "log.json").read_text())["train"] == log["train"]
    writes.clear()
    events.clear()
    monkeypatch.setattr(train, "LOG_SECONDS", 0.0)
    run(data_dir, tmp_path / "b", "--max_steps", "5", "--eval_every", "0")
    assert writes == [([], []), ([1], []), ([1, 2], []), ([*range(1, 6)], []), ([*range(1, 6)], [])]
    for s in (3, 4):                           # the writes between pauses
        at = events.index(("write", list(range(1, s - 1))))
        assert events[:at].count("step") == s and events[at + 1] == ("read", s - 1), events


def test_logged_losses_are_their_steps_losses(data_dir, tmp_path):
    """Each train record's loss is the mean of its steps' losses, recomputed here from the checkpoints: step s's
    loss is the loss of checkpoint s - 1 on step s's windows (data.batch_offsets, sliced from train.bin here);
    its lr is lr_at(s - 1). Records made every 2 steps, one read a step late, one at a checkpoint, one at the end."""
    from model import load_checkpoint
    log = run(data_dir, tmp_path, "--max_steps", "5", "--ckpt_every", "1", "--eval_every", "0", "--log_every", "2",
              "--batch_size", "4", "--lr", "3e-3", "--warmup", "1")
    tokens = data.load_data(data_dir)["train"]
    losses = []
    for step in range(5):
        model = load_checkpoint(train.checkpoint_path(str(tmp_path), step))
        rows = np.stack([tokens[o:o + 17].astype(np.int64) for o in data.batch_offsets(1234, step, len(tokens), 16, 4)])
        with torch.no_grad():
            losses.append(model(torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:]))[1].item())
    assert [r["step"] for r in log["train"]] == [2, 4, 5]
    for r, steps in zip(log["train"], [(0, 1), (2, 3), (4,)]):
        assert r["loss"] == pytest.approx(sum(losses[s] for s in steps) / len(steps), rel=1e-6)
        assert r["lr"] == train.lr_at(steps[-1], 3e-3, 1e-4, 1, 5)
    assert min(abs(a - b) for a, b in zip(losses, losses[1:])) > 1e-3     # records off by a step would not match


def test_the_step_prefetches_and_reads_its_loss_a_step_late(data_dir, tmp_path, monkeypatch):
    """The order of the trainer's work, recorded from inside it: a train record is read once the next step has run
    (a step late), or at once where the training pauses anyway (a checkpoint, the end); either way the first
    micro-batch of the step after the last one run is fetched before the record is read (nanoGPT's prefetch)."""
    events = []
    for name, what in (("get_batch", "fetch"), ("train_step", "step")):
        real = getattr(train, name)
        monkeypatch.setattr(train, name, lambda *a, real=real, what=what: (real(*a), events.append(what))[0])
    log_train = train.log_train
    monkeypatch.setattr(train, "log_train", lambda log, flight, *a: (events.append(flight["step"]),
                                                                      log_train(log, flight, *a))[1])
    run(data_dir, tmp_path, "--max_steps", "5", "--ckpt_every", "2", "--eval_every", "0", "--batch_size", "4",
        "--micro_batch", "2")
    reads = [e for e in events if isinstance(e, int)]
    assert reads == [1, 2, 3, 4, 5]
    for s in reads:
        before = events[:events.index(s)]
        ran = s if s % 2 == 0 or s == 5 else s + 1          # steps run before record s is read
        assert before.count("step") == ran, (s, events)
        assert before.count("fetch") == min(2 * ran + 1, 10), (s, events)     # two micro-batches a step


def test_checkpoint_records_everything_and_rebuilds_the_model(data_dir, tmp_path):
    run(data_dir, tmp_path, "--max_steps", "2", "--eval_every", "0", "--init_seed", "3", "--embed_seed", "4",
        "--data_seed", "5", "--n_layer", "3")
    ckpt = final_state(tmp_path)
    assert ckpt["step"] == 2 and ckpt["tokenizer"] == "bytes"
    assert ckpt["seeds"] == dict(init_seed=3, embed_seed=4, data_seed=5)
    assert ckpt["config"]["n_layer"] == 3 and ckpt["config"]["vocab_size"] == 256   # vocab from meta.json
    model = load_checkpoint(train.checkpoint_path(str(tmp_path), 2))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ckpt["model"].items())
    # the step-0 checkpoint is init.py's draw itself
    from init import build
    fresh = build(model.config, 3, 4)
    step0 = read_checkpoint(train.checkpoint_path(str(tmp_path), 0))["model"]
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in step0.items())


def test_resume_is_bit_identical(data_dir, tmp_path):
    flags = ["--max_steps", "6", "--ckpt_every", "2", "--eval_every", "3", "--batch_size", "4", "--micro_batch", "2"]
    run(data_dir, tmp_path / "whole", *flags)
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    for step in (4, 6):   # as if killed after writing step 2's checkpoint... and step 3's log line
        os.remove(train.checkpoint_path(str(tmp_path / "cut"), step))
    log = run(data_dir, tmp_path / "cut", *flags, "--resume")
    a, b = final_state(tmp_path / "whole"), final_state(tmp_path / "cut")
    assert a["step"] == b["step"] == 6
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for k in sa[i]:
            assert torch.equal(sa[i][k], sb[i][k]), (i, k)
    assert [r["step"] for r in log["train"]] == [1, 2, 3, 4, 5, 6]
    whole = json.load(open(tmp_path / "whole" / "log.json"))
    assert [r["loss"] for r in log["train"]] == [r["loss"] for r in whole["train"]]


def test_a_run_killed_between_log_writes_resumes_to_the_whole_runs_log(data_dir, tmp_path, monkeypatch):
    """Killed after step 5, two steps past the last write of log.json (at step 3's checkpoint): the log on disk
    holds steps 1-3 (not the records of steps 4 and 5, made since), and --resume from step 3 makes the run's log
    and weights exactly those of the run that was never stopped."""
    flags = ["--max_steps", "7", "--ckpt_every", "3", "--eval_every", "0", "--batch_size", "4"]
    monkeypatch.setattr(train, "LOG_SECONDS", 1e9)
    whole = run(data_dir, tmp_path / "whole", *flags)
    lr_at = train.lr_at

    def killed_at_step_5(step, *a):
        if step == 5:
            raise KeyboardInterrupt
        return lr_at(step, *a)
    monkeypatch.setattr(train, "lr_at", killed_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        run(data_dir, tmp_path / "cut", *flags)
    monkeypatch.setattr(train, "lr_at", lr_at)
    on_disk = json.loads((tmp_path / "cut" / "log.json").read_text())
    assert [r["step"] for r in on_disk["train"]] == [1, 2, 3]
    assert [s for s, _ in train.list_checkpoints(str(tmp_path / "cut"))] == [0, 3]
    log = run(data_dir, tmp_path / "cut", *flags, "--resume")
    assert [(r["step"], r["loss"], r["lr"]) for r in log["train"]] == [(r["step"], r["loss"], r["lr"])
                                                                         for r in whole["train"]]
    assert json.loads((tmp_path / "cut" / "log.json").read_text())["train"] == log["train"]
    a, b = final_state(tmp_path / "whole"), final_state(tmp_path / "cut")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_accumulated_micro_batches_equal_one_large_batch(data_dir, tmp_path):
    common = ["--max_steps", "3", "--eval_every", "0", "--batch_size", "8", "--warmup", "1", "--grad_clip", "0.5"]
    run(data_dir, tmp_path / "one", *common, "--micro_batch", "8")
    run(data_dir, tmp_path / "acc", *common, "--micro_batch", "2")
    a, b = final_state(tmp_path / "one"), final_state(tmp_path / "acc")
    init = read_checkpoint(train.checkpoint_path(str(tmp_path / "one"), 0))["model"]
    for k in a["model"]:
        moved = (a["model"][k] - init[k]).abs().max()
        assert torch.allclose(a["model"][k], b["model"][k], rtol=1e-4, atol=1e-6), k
        assert moved > 1e-4 or k.endswith("bias")     # the comparison is not vacuous


def test_forward_backward_accumulates_the_gradient_of_the_whole_batch():
    from init import build
    from model import get_config
    model = build(get_config("tiny", n_layer=2, n_embd=32, n_head=2, block_size=16, vocab_size=256), seed=0)
    x = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(0))
    y = torch.roll(x, -1, dims=1)
    _, loss = model(x, y)                       # reference: one batch of 8, plain autograd
    ref = torch.autograd.grad(loss, list(model.parameters()))
    import contextlib
    for accum in (1, 2, 4):
        autograd_sum = None
        # graphs: the sum kept outside autograd, as under CUDA graphs; the same additions in the same order
        for graphs in (False, True):
            model.zero_grad(set_to_none=True)
            chunks = ((x[i:i + 8 // accum], y[i:i + 8 // accum]) for i in range(0, 8, 8 // accum))
            mean = train.forward_backward(model, chunks, accum, ddp=False, autocast=contextlib.nullcontext(),
                                          graphs=graphs)
            assert mean.item() == pytest.approx(loss.item(), rel=1e-6)
            for g, p in zip(ref, model.parameters()):
                assert torch.allclose(p.grad, g, rtol=1e-4, atol=1e-7)
            if autograd_sum is None:
                autograd_sum = [p.grad.clone() for p in model.parameters()]
            else:
                assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), autograd_sum))


def test_cuda_graphs_are_refused_under_torchrun(data_dir, tmp_path, monkeypatch):
    """DDP all-reduces the gradient autograd holds; under CUDA graphs the micro-steps' sum is kept outside it."""
    for k in TORCHRUN_VARS:
        monkeypatch.setenv(k, "0" if k != "WORLD_SIZE" else "1")
    monkeypatch.setattr(train, "replays_cuda_graphs", lambda compile, mode, device: True)   # as on a GPU
    args = train.TrainConfig(data=data_dir, out_dir=str(tmp_path / "o"), eval_every=0, compile=True,
                             compile_mode="reduce-overhead")
    with pytest.raises(ValueError, match="replays CUDA graphs, which train.py runs in a plain process only"):
        train.resolve_run(args)


@pytest.mark.parametrize("nproc", [2, 1])
def test_torchrun_ddp_equals_one_plain_process(data_dir, tmp_path, nproc):
    """Two ranks split each batch; a torchrun job of one rank still goes through DDP (the path a single GPU
    checks before eight run it). Both must train the plain run's weights."""
    flags = ["--data", data_dir, *TINY, "--max_steps", "3", "--eval_every", "3", "--batch_size", "4",
             "--log_every", "1"]
    proc = torchrun("train.py", flags, tmp_path / "ddp", "--out_dir", cwd=ROOT, nproc=nproc)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{nproc} process(es)" in proc.stdout and "DDP over gloo" in proc.stdout, proc.stdout[-2000:]
    run(data_dir, tmp_path / "one", "--max_steps", "3", "--eval_every", "3", "--batch_size", "4")
    a, b = final_state(tmp_path / "ddp"), final_state(tmp_path / "one")
    for k in a["model"]:
        assert torch.allclose(a["model"][k], b["model"][k], rtol=1e-4, atol=1e-6), k
    la, lb = (json.load(open(tmp_path / d / "log.json")) for d in ("ddp", "one"))
    assert [r["loss"] for r in la["train"]] == pytest.approx([r["loss"] for r in lb["train"]], rel=1e-5)
    assert la["val"][-1]["val_loss"] == pytest.approx(lb["val"][-1]["val_loss"], rel=1e-5)


def test_init_from_continues_the_lineage(data_dir, tmp_path):
    run(data_dir, tmp_path / "base", "--max_steps", "2", "--eval_every", "0", "--init_seed", "11")
    base = train.checkpoint_path(str(tmp_path / "base"), 2)
    run(data_dir, tmp_path / "child", "--max_steps", "2", "--eval_every", "0", "--init_from", base,
        "--data_seed", "99")
    child0 = read_checkpoint(train.checkpoint_path(str(tmp_path / "child"), 0))
    assert all(torch.equal(child0["model"][k], v) for k, v in read_checkpoint(base)["model"].items())
    assert child0["seeds"]["init_seed"] == 11 and child0["seeds"]["data_seed"] == 99


# ----------------------------------------------------------------------------- bad input

def error_of(argv):
    return cli_error(train.main, "train.py", argv)          # the script's own error handling: one line, exit 2


def test_missing_data_dir_is_one_clear_error(tmp_path):
    msg = error_of(["--data", str(tmp_path / "nope"), "--out_dir", str(tmp_path / "out")])
    assert "python data.py" in msg and not (tmp_path / "out").exists()


def test_vocab_larger_than_model_is_refused(data_dir, tmp_path):
    msg = error_of(["--data", data_dir, "--out_dir", str(tmp_path / "out"), *TINY, "--vocab_size", "100"])
    assert "vocab 256" in msg and not (tmp_path / "out").exists()


def test_init_from_another_architecture_is_refused(data_dir, tmp_path):
    run(data_dir, tmp_path / "base", "--max_steps", "1", "--eval_every", "0")
    base = train.checkpoint_path(str(tmp_path / "base"), 1)
    msg = error_of(["--data", data_dir, "--out_dir", str(tmp_path / "out"), *TINY, "--n_layer", "3",
                    "--init_from", base])
    assert "n_layer" in msg and not (tmp_path / "out").exists()
    torch.save({"weights": 1}, tmp_path / "junk.pt")
    assert "not a train.py checkpoint" in error_of(["--data", data_dir, "--out_dir", str(tmp_path / "o3"),
                                                    "--init_from", str(tmp_path / "junk.pt")])
    assert not (tmp_path / "o3").exists()


def test_existing_run_needs_resume_with_the_same_settings(data_dir, tmp_path):
    run(data_dir, tmp_path, "--max_steps", "1", "--eval_every", "0")
    before = sorted(os.listdir(tmp_path))
    assert "--resume" in error_of(["--data", data_dir, "--out_dir", str(tmp_path), *TINY, "--max_steps", "1",
                                   "--eval_every", "0"])
    assert "--lr" in error_of(["--data", data_dir, "--out_dir", str(tmp_path), *TINY, "--max_steps", "1",
                               "--eval_every", "0", "--lr", "0.5", "--resume"])
    assert sorted(os.listdir(tmp_path)) == before


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(data_dir, tmp_path):
    msg = error_of(["--data", data_dir, "--out_dir", str(tmp_path), *TINY, "--lr", "1e30", "--warmup", "0",
                    "--grad_clip", "0", "--max_steps", "20", "--ckpt_every", "1", "--log_every", "0",
                    "--eval_every", "0"])
    assert "non-finite loss at step" in msg
    steps = train.list_checkpoints(str(tmp_path))
    bad_step = int(msg.split("non-finite loss at step ")[1].split(";")[0])
    assert steps[-1][0] == bad_step - 1     # the weights that gave the bad loss are the last saved
    for _, path in steps:
        assert all(torch.isfinite(v).all() for v in read_checkpoint(path)["model"].values())


# ----------------------------------------------------------------------------- named corpora

def test_resuming_on_data_that_changed_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    data.prepare([str(tmp_path / "a.txt")], str(tmp_path / "d"), tokenizer="bytes", val_fraction=0.2)
    run(str(tmp_path / "d"), tmp_path / "out", "--max_steps", "1", "--eval_every", "0")
    resume = ["--data", str(tmp_path / "d"), "--out_dir", str(tmp_path / "out"), *TINY, "--max_steps", "1",
              "--eval_every", "0", "--log_every", "1", "--resume"]
    (tmp_path / "a.txt").write_text(TEXT.replace("best", "BEST"), encoding="utf-8")    # same size, other tokens
    data.prepare([str(tmp_path / "a.txt")], str(tmp_path / "d"), tokenizer="bytes", val_fraction=0.2)
    msg = error_of(resume)
    assert "the data in" in msg and "--max_steps" not in msg      # the data alone differs
    assert [s for s, _ in train.list_checkpoints(str(tmp_path / "out"))] == [0, 1]


def test_ensure_trains_once_and_finishes_a_run_that_stopped(data_dir, tmp_path, monkeypatch):
    """train.ensure, how experiments get a trained model: a run that stopped part-way (its last checkpoint and
    its log lost) is continued to the same weights as the uninterrupted run; a finished run is never retrained."""
    out = tmp_path / "r"
    args = train.parse_args(["--data", data_dir, "--out_dir", str(out), *TINY, "--max_steps", "4",
                             "--ckpt_every", "2", "--eval_every", "0"])
    train.ensure(args)
    full = final_state(out)
    os.remove(train.checkpoint_path(str(out), 4))
    os.remove(out / "log.json")
    train.ensure(args)
    again = final_state(out)
    assert again["step"] == 4 and all(torch.equal(full["model"][k], again["model"][k]) for k in full["model"])
    monkeypatch.setattr(train, "train", lambda a: pytest.fail("a finished run was trained again"))
    assert train.ensure(args) == json.loads((out / "log.json").read_text())
    # the same data spelled as another path is the same run
    assert train.ensure(dataclasses.replace(args, data=os.path.abspath(data_dir) + "/.")) == train.ensure(args)
    # a run made otherwise is refused, not returned as this one: another setting, model, or length (shorter or
    # longer: a longer one is not a continuation, its learning-rate schedule differs)
    for other in (dict(lr=args.lr / 2), dict(knobs={**args.knobs, "n_embd": 64}), dict(max_steps=3),
                  dict(max_steps=6)):
        with pytest.raises(ValueError, match=r"holds a run made otherwise \(in train.py's terms: "
                                             r"(--lr|the model config|--max_steps)"):
            train.ensure(dataclasses.replace(args, **other))
    # a run continued from that one's checkpoint (--init_from), stopped part-way, resumes from its own
    child = tmp_path / "child"
    cont = train.parse_args(["--data", data_dir, "--out_dir", str(child), "--init_from",
                             train.checkpoint_path(str(out), 4), "--max_steps", "4", "--ckpt_every", "2",
                             "--eval_every", "0"])
    monkeypatch.undo()
    train.ensure(cont)
    whole = final_state(child)
    os.remove(train.checkpoint_path(str(child), 4))
    os.remove(child / "log.json")
    start = os.path.realpath(cont.init_from)           # resumed, --init_from's weights are never read: the run's are
    monkeypatch.setattr(train.hf, "check_weights_finite", lambda p: os.path.realpath(p) != start or pytest.fail(p))
    monkeypatch.setattr(train, "load_checkpoint", lambda *a, **kw: pytest.fail("--init_from loaded on resume"))
    train.ensure(cont)
    monkeypatch.undo()
    assert all(torch.equal(whole["model"][k], final_state(child)["model"][k]) for k in whole["model"])


def test_the_cosine_ends_at_or_below_the_peak_learning_rate():
    """min_lr defaults to 1e-4, or to lr where lr is lower (experiments pass only --lr), as the run resolves it; a
    template's lr replaced later derives it anew; an explicit min_lr above lr is refused naming both flags."""
    assert train.TrainConfig(lr=1e-3).resolved().min_lr == 1e-4 and train.TrainConfig(lr=5e-5).resolved().min_lr == 5e-5
    assert train.parse_args(["--data", "d", "--lr", "5e-5"]).resolved().min_lr == 5e-5
    template = train.TrainConfig(lr=1e-3, init_seed=3)
    again = dataclasses.replace(template, lr=5e-5, init_seed=4).resolved()
    assert (again.min_lr, again.embed_seed) == (5e-5, 4)
    with pytest.raises(ValueError, match="--min_lr 0.001 is above the peak --lr 0.0005"):
        train.TrainConfig(lr=5e-4, min_lr=1e-3)


def test_tf32_is_on_while_training_on_cuda_and_restored_after():
    """TF32 matmuls for a CUDA run, and the process's setting back afterwards (even when training fails), so
    float32 computed later in the same process (sink.py's scores after training) is float32; no-op on a CPU."""
    m, c = torch.backends.cuda.matmul, torch.backends.cudnn
    before = m.allow_tf32, c.allow_tf32
    try:
        m.allow_tf32 = c.allow_tf32 = False
        with train.tf32(torch.device("cpu")):
            assert not m.allow_tf32 and not c.allow_tf32
        with pytest.raises(FloatingPointError):
            with train.tf32(torch.device("cuda")):
                assert m.allow_tf32 and c.allow_tf32
                raise FloatingPointError
        assert not m.allow_tf32 and not c.allow_tf32
    finally:
        m.allow_tf32, c.allow_tf32 = before


def test_the_embedding_seed_follows_the_init_seed_unless_given(data_dir, tmp_path):
    """Two runs "from seeds 1 and 2" share nothing: the embedding and the untied head are drawn from the init seed
    (compared with init.py's own draws). --embed_seed still shares them on purpose. A run made under the old default
    (embed_seed 0 whatever the init seed) is refused on --resume in one line that says how to resume it."""
    from init import build
    one_step = ["--max_steps", "1", "--eval_every", "0", "--tie_embeddings", "off"]
    run(data_dir, tmp_path / "a", *one_step, "--init_seed", "1")
    run(data_dir, tmp_path / "b", *one_step, "--init_seed", "2")
    run(data_dir, tmp_path / "c", *one_step, "--init_seed", "2", "--embed_seed", "1")
    step0 = {d: read_checkpoint(train.checkpoint_path(str(tmp_path / d), 0)) for d in "abc"}
    assert [step0[d]["seeds"]["embed_seed"] for d in "abc"] == [1, 2, 1]
    config = load_checkpoint(train.checkpoint_path(str(tmp_path / "a"), 0)).config
    for d, (seed, embed) in zip("abc", [(1, 1), (2, 2), (2, 1)]):
        fresh = build(config, seed, embed).state_dict()
        assert all(torch.equal(fresh[k], v) for k, v in step0[d]["model"].items()), d
    for name in ("transformer.wte.weight", "lm_head.weight"):
        assert not torch.equal(step0["a"]["model"][name], step0["b"]["model"][name])
        assert torch.equal(step0["a"]["model"][name], step0["c"]["model"][name])
    old = tmp_path / "old"                                       # stopped after step 1 of 2
    run(data_dir, old, "--max_steps", "2", "--ckpt_every", "1", "--eval_every", "0", "--init_seed", "3",
        "--embed_seed", "0")
    os.remove(train.checkpoint_path(str(old), 2))
    line = cli_error(train.main, "train.py", ["--data", data_dir, "--out_dir", str(old), *TINY, "--max_steps", "2",
                                             "--ckpt_every", "1", "--eval_every", "0", "--init_seed", "3", "--resume"])
    assert "--embed_seed 3 (checkpoint: 0" in line and "pass --embed_seed 0" in line
    run(data_dir, old, "--max_steps", "2", "--ckpt_every", "1", "--eval_every", "0", "--init_seed", "3",
        "--embed_seed", "0", "--resume")
    assert train.list_checkpoints(str(old))[-1][0] == 2


def test_the_compile_mode_reaches_torch_compile_and_the_first_step_is_timed_apart(data_dir, tmp_path, monkeypatch):
    """--compile_mode as torch.compile receives it (a stand-in that compiles nothing: compiling on a CPU takes
    seconds a kernel; tests/test_probe.py runs the one real compile), recorded with the run; the first step's time
    (the compile's) reported apart in log.json, once, and no later than the first record's wall; the losses those of
    an uncompiled run. A mode without --compile on would do nothing: refused."""
    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, mode=None, **kw: modes.append(mode) or model)
    log = run(data_dir, tmp_path / "c", "--max_steps", "3", "--eval_every", "0", "--compile", "on",
              "--compile_mode", "max-autotune-no-cudagraphs")
    plain = run(data_dir, tmp_path / "p", "--max_steps", "3", "--eval_every", "0")
    assert modes == ["max-autotune-no-cudagraphs"]
    saved = json.loads((tmp_path / "c" / "log.json").read_text())
    assert saved["args"]["compile_mode"] == "max-autotune-no-cudagraphs" and saved["first_step"] == log["first_step"]
    first = log["first_step"]
    assert (first["step"], first["compile_mode"]) == (1, "max-autotune-no-cudagraphs")
    assert 0 < first["seconds"] <= log["train"][0]["wall"]
    assert plain["first_step"]["compile_mode"] is None
    assert [r["loss"] for r in log["train"]] == [r["loss"] for r in plain["train"]]
    with pytest.raises(ValueError, match="--compile_mode reduce-overhead goes with --compile on"):
        train.TrainConfig(compile_mode="reduce-overhead")
