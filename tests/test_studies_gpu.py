"""studies.gpu_check, the prepared GPU run, at its tiny size on the CPU through the command a user types, with a
stand-in for nanoGPT written here (CI has neither nanoGPT nor a network): every stage's numbers recomputed here from
its own logs and closed-form flop counts, the torchrun comparison, the stages' time limits, the prepare step and
its checks, bad input; and the bf16 peaks MFU is read against, from NVIDIA's datasheets."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import data
import train
from common import peak_flops
from conftest import cli_error
from studies import gpu_check

TINY = gpu_check.SIZES["tiny"]

# nanoGPT's train.py at NANOGPT_COMMIT, as far as the study reads it: its configurator (every --key=value must name
# one of these globals, its value of the default's type) and the lines it prints, an iteration every 20 ms (so that
# the compare stage can pause it between stretches). It trains nothing.
STAND_IN = '''
import ast, os, sys, time
DEFAULTS = dict(out_dir="out", eval_interval=2000, log_interval=1, eval_iters=200, eval_only=False,
                always_save_checkpoint=True, init_from="scratch", wandb_log=False, wandb_project="owt",
                wandb_run_name="gpt2", dataset="openwebtext", gradient_accumulation_steps=40, batch_size=12,
                block_size=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.0, bias=False, learning_rate=6e-4,
                max_iters=600000, weight_decay=1e-1, beta1=0.9, beta2=0.95, grad_clip=1.0, decay_lr=True,
                warmup_iters=2000, lr_decay_iters=600000, min_lr=6e-5, backend="nccl", device="cuda",
                dtype="bfloat16", compile=True)
cfg = dict(DEFAULTS)
for arg in sys.argv[1:]:
    key, val = arg.split("=")
    key = key[2:]
    if key not in DEFAULTS:
        raise ValueError(f"Unknown config key: {key}")
    try:
        attempt = ast.literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) == type(DEFAULTS[key]), (key, val)
    cfg[key] = attempt
assert os.path.isfile(os.path.join("data", cfg["dataset"], "train.bin"))     # read from its own folder
L, d, V = cfg["n_layer"], cfg["n_embd"], 50304
print(f"tokens per iteration will be: {cfg['gradient_accumulation_steps'] * cfg['batch_size'] * cfg['block_size']:,}")
print("number of parameters: %.2fM" % ((V * d + L * (12 * d * d + 13 * d) + 2 * d) / 1e6,))
for i in range(cfg["max_iters"] + 1):
    time.sleep(0.02)
    print(f"iter {i}: loss {10 - 0.25 * i:.4f}, time {100 + 10 * i:.2f}ms, mfu {-100.0 if i < 5 else 1.5:.2f}%",
          flush=True)
'''

# nanoGPT's model.py as far as the profile stage reads it: GPTConfig, GPT(config) with its forward and
# configure_optimizers; here on this project's GPT-2 blocks.
STAND_IN_MODEL = '''
import dataclasses
import torch
from model import GPT as Ours, get_config

@dataclasses.dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True

class GPT(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.inner = Ours(get_config("gpt2-nano", position="learned", block_size=config.block_size,
                                     vocab_size=config.vocab_size, n_layer=config.n_layer, n_head=config.n_head,
                                     n_embd=config.n_embd))

    def forward(self, idx, targets=None):
        return self.inner(idx, targets)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)
'''

A_TEST_FILE = '''
import pytest
def test_passes():
    assert True
def test_fails():
    assert 1 == 2
@pytest.mark.skip(reason="shown as skipped")
def test_skipped():
    pass
'''


@pytest.fixture(scope="module")
def gpu_dir(tmp_path_factory):
    """What --prepare makes, with the stand-in for nanoGPT and byte tokens of a short text."""
    root = tmp_path_factory.mktemp("gpu")
    nano = root / "nanogpt"
    nano.mkdir()
    (nano / "train.py").write_text(STAND_IN)
    (nano / "model.py").write_text(STAND_IN_MODEL)
    (root / "text.txt").write_text("Whan that Aprille with his shoures soote the droghte of March hath perced.\n" * 90)
    data.prepare([str(root / "text.txt")], str(nano / "data" / gpu_check.DATASET), tokenizer="bytes")
    return root


def trainer_flops_per_token(cfg) -> float:
    """6 N + 12 L H Q T, N the matrices of GPT-2's blocks (12 d^2 + 13 d per layer with biases and LayerNorms, the
    final LayerNorm) and its tied head: PaLM's count, as nanoGPT's estimate_mfu makes it."""
    L, d, V, T = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["block_size"]
    return 6 * (L * (12 * d * d + 13 * d) + 2 * d + V * d) + 12 * L * d * T


def forward_flops_per_token(L: int, d: int, V: int, T: int, head: bool) -> float:
    """A GELU GPT-2 block's matrices (12 d^2) on each token, 4 d flops per causal (query, key) pair and layer, the
    LM head on the last position only (the probe) or not at all (a fingerprint)."""
    return (2 * 12 * d * d * L * T + 4 * d * L * T * (T + 1) / 2 + (2 * d * V if head else 0)) / T


@pytest.fixture(scope="module")
def tiny_run(gpu_dir, tmp_path_factory):
    """The study's command at its tiny size, every stage; the tests stage runs a file with one failing test."""
    tmp = tmp_path_factory.mktemp("run")
    (tmp / "test_two.py").write_text(A_TEST_FILE)
    argv = ["--gpu_dir", str(gpu_dir), "--work", str(tmp / "work"), "--out", str(tmp / "out"), "--peak_tflops", "1",
            "--tests", str(tmp / "test_two.py")]
    with pytest.raises(SystemExit) as stopped:             # one stage (the tests) failed: exit code 1
        gpu_check.main(argv)
    assert stopped.value.code == 1
    return tmp, json.loads((tmp / "out" / "results.json").read_text())


def test_every_stage_runs_at_the_tiny_size_and_records_how(tiny_run):
    tmp, res = tiny_run
    stages = res["stages"]
    assert [s for s in gpu_check.STAGES if stages[s]["status"] == "ok"] == [s for s in gpu_check.STAGES
                                                                             if s != "tests"]
    assert stages["tests"]["status"] == "failed" and "1 failed, 1 passed, 1 skipped" in stages["tests"]["error"]
    for name in gpu_check.STAGES:
        assert res[name]["size"] == "tiny" and res[name]["stage"]["status"] == stages[name]["status"]
        how = res["provenance"][name]
        assert how["command"] and how["torch"] == str(torch.__version__) and how["device_name"], name
    env = res["env"]
    assert env["card"] == res["provenance"]["env"]["device_name"] and env["torch"] == str(torch.__version__)
    assert "cuda" in env and env["cuda"] == torch.version.cuda
    assert env["peak_flops"] == 1e12 and env["peak_from"] == "--peak_tflops" and env["matmul_tflops"] > 0
    assert res["tests"]["counts"] == dict(failed=1, passed=1, skipped=1, seconds=res["tests"]["counts"]["seconds"])
    assert [f.split("::")[-1] for f in res["tests"]["failed"]] == ["test_fails"]
    log = (tmp / "out" / "stages.log").read_text()
    assert "probe.py" in log and "torch.distributed.run" in log and "iter 5: loss" in log
    assert (tmp / "out" / "gpu_check.png").is_file()
    assert sorted(os.listdir(tmp / "out")) == ["fingerprints", "gpu_check.png", "results.json", "stages.log"]


def test_table1_and_the_fingerprint_report_mfu_against_the_peak_given(tiny_run):
    """MFU = tokens/s x the forward's flops per token / the peak (1 TFLOP/s here), the flops written out here."""
    _, res = tiny_run
    tiny = gpu_check.get_config("tiny")
    rows = res["table1"]["rows"]
    p = TINY["probe"]
    assert sorted((r["seed"], r["seq_len"]) for r in rows) == sorted((s, T) for s in p["seeds"] for T in p["seq_len"])
    for r in rows:
        assert r["sequences"] == p["sequences"] and 0 < r["top1_share"] <= 1
        assert r["x_uniform"] == pytest.approx(r["top1_share"] * tiny.vocab_size)
        top_of_uniform = np.bincount(np.random.default_rng(0).integers(0, tiny.vocab_size, r["sequences"])).max()
        assert r["x_top_uniform"] == pytest.approx(r["top1_count"] / top_of_uniform)
        per_token = forward_flops_per_token(tiny.n_layer, tiny.n_embd, tiny.vocab_size, r["seq_len"], head=True)
        assert r["mfu"] == pytest.approx(r["tokens_per_s"] * per_token / 1e12, rel=1e-9)
    f = res["fingerprint"]
    T = TINY["fingerprint"]["seq_len"]
    per_token = forward_flops_per_token(tiny.n_layer, tiny.n_embd, tiny.vocab_size, T, head=False)
    assert f["mfu"] == pytest.approx(f["tokens_per_s"] * per_token / 1e12, rel=1e-9)
    assert f["tokens_per_s"] == pytest.approx(f["sequences"] * T / f["seconds"], rel=1e-9)
    assert f["build_and_fingerprint_seconds"] == pytest.approx(f["build_seconds"] + f["seconds"])
    files = f["files"]                   # the card's files against the CPU's: here both are the CPU, so they agree
    assert sorted(files["files"]) == [f"fingerprints/{w}_seed{s}.npz" for w in ("card", "cpu") for s in (0, 1)]
    assert files["card seed 0 vs cpu seed 0"]["related"] and files["card seed 0 vs cpu seed 0"]["tau"] > 0.99
    assert not files["card seed 0 vs card seed 1"]["related"]
    assert files["card seed 0 vs card seed 1"] == files["cpu seed 0 vs cpu seed 1"]


def test_train_py_and_nanogpt_take_turns_and_are_timed_the_same_way(tiny_run):
    """A B A B A B: each stretch ran with the other trainer paused (its lines said no step meanwhile), A's and B's
    stretches alternate, each begins SETTLE steps after its side resumed and covers `timed` steps. Both timed alike:
    tokens per step x steps / the wall time between the ends of a stretch's first and last steps; train.py's from its
    log's wall stamps (not its own ms_per_step, which leaves out printing and the log's writing), nanoGPT's from the
    times the stand-in printed (100 + 10 i ms at iteration i). The ratios, their median and spread recomputed here."""
    tmp, res = tiny_run
    t = TINY["trainer"]
    cfg = dict(gpu_check.get_config(t["model"], **t["knobs"]).__dict__)
    per_step = t["micro"] * t["accum"] * cfg["block_size"]
    fpt = trainer_flops_per_token(cfg)
    log = json.loads((tmp / "work" / gpu_check.SCRATCH / "compare_train" / "log.json").read_text())["train"]
    wall = {r["step"]: r["wall"] for r in log}
    c = res["compare"]
    assert len(c["pairs"]) == t["pairs"] and c["order"].startswith("A B A B A B")
    ratios, ends = [], []
    for p in c["pairs"]:
        assert p["paused_side_steps"] == [0, 0]
        (a0, a1), (b0, b1) = p["train_steps"], p["nanogpt_steps"]
        assert a1 - a0 + 1 == t["timed"] == b1 - b0 + 1 and a0 > t["warm"] + gpu_check.SETTLE - 1
        ends.append((a0, a1, b0, b1))
        train_s = wall[a1] - wall[a0 - 1]
        nano_s = sum(100 + 10 * (step - 1) for step in range(b0, b1 + 1)) / 1000    # step s: iteration s - 1
        assert p["train_seconds"] == pytest.approx(train_s, rel=1e-9)
        assert p["nanogpt_seconds"] == pytest.approx(nano_s, rel=1e-9)
        assert p["train_tokens_per_s"] == pytest.approx(per_step * t["timed"] / train_s, rel=1e-9)
        assert p["nanogpt_tokens_per_s"] == pytest.approx(per_step * t["timed"] / nano_s, rel=1e-9)
        # the wall between step ends holds the steps' own clock and what it leaves out
        assert sum(r["ms_per_step"] for r in log if a0 <= r["step"] <= a1) / 1000 <= train_s
        ratios.append(train_s and (per_step * t["timed"] / train_s) / (per_step * t["timed"] / nano_s))
    for (_, a1, _, b1), (a0, _, b0, _) in zip(ends, ends[1:]):      # each side's stretches in order, apart
        assert a0 > a1 + gpu_check.SETTLE - 1 and b0 > b1 + gpu_check.SETTLE - 1
    assert c["ratio_median"] == pytest.approx(float(np.median(ratios)))
    assert (c["ratio_min"], c["ratio_max"]) == pytest.approx((min(ratios), max(ratios)))
    tr, nano = c["train"], c["nanogpt"]
    assert tr["tokens_per_s"] == pytest.approx(np.median([p["train_tokens_per_s"] for p in c["pairs"]]))
    assert tr["mfu"] == pytest.approx(tr["tokens_per_s"] * fpt / 1e12, rel=1e-9)
    assert nano["mfu"] == pytest.approx(nano["tokens_per_s"] * fpt / 1e12, rel=1e-9)
    assert tr["losses"] == [x["loss"] for x in log] and tr["loss_last_step"] == log[-1]["loss"]
    assert nano["losses"] == [10 - 0.25 * i for i in range(len(nano["losses"]))]
    assert nano["printed_mfu_a100"] == 0.015 and nano["same_parameters"] and nano["files_match_commit"] is False
    target = {x["target"]: x for x in res["targets"]}["train_vs_nanogpt"]
    assert target["value"] == c["ratio_median"] and target["kind"] == "pairs"


def test_take_turns_pauses_each_side_while_the_other_runs():
    """take_turns on two stand-in followers that count a step whenever they are running: each warms up to `warm`
    (paused as it gets there), then the stretches alternate, A first, each SETTLE steps after its resume, and no step
    of the paused side is counted during the other's stretch."""
    events = []

    class Side:
        def __init__(self, name):
            self.name, self.done, self.running = name, 0, True

        def reached(self, steps, deadline):
            self.tick()
            return self.done >= steps

        def wait_for(self, steps, deadline):
            while not self.reached(steps, deadline):
                pass

        def tick(self):
            for side in sides:          # the processes that run make progress, whoever is being watched
                side.done += side.running

        def pause(self):
            self.running = False
            events.append(("pause", self.name, self.done))

        def resume(self):
            self.running = True
            events.append(("resume", self.name, self.done))
    sides = [Side("A"), Side("B")]
    stretches = gpu_check.take_turns(*sides, warm=3, timed=4, pairs=2, drain=0.0, deadline=time.time() + 10)
    assert [e[:2] for e in events] == [("pause", "A"), ("pause", "B")] + [
        (what, name) for name in "ABAB" for what in ("resume", "pause")]
    assert all(done >= 3 for _, _, done in events[:2])
    resumed, paused = events[2::2], events[3::2]
    for (side, first, last, moved), (_, name, at_resume), (_, _, at_pause) in zip(stretches, resumed, paused):
        assert side.name == name and moved == 0
        assert (first, last) == (at_resume + gpu_check.SETTLE, at_resume + gpu_check.SETTLE + 4) and at_pause >= last


def test_train_py_with_rope_is_timed_by_the_wall_between_step_ends_not_by_its_own_step_clock(gpu_dir, tmp_path):
    """train_rope: a log.json whose steps each take 100 ms on train.py's own clock (ms_per_step) with host work between
    them (printing, the log's writing) that grows by 10 ms a step: the timed steps' seconds are their 100 ms each
    plus those gaps, as nanoGPT's printed times hold its own; the step clock alone would make train.py look faster.
    Its MFU on the RoPE model's own flops (GPT-2's blocks and tied head, vocabulary 50,257)."""
    r = TINY["rope"]
    steps = r["warm"] + r["timed"]
    gap = lambda step: 0.010 * step                  # seconds of host work after step `step`'s sync
    run = a_run(gpu_dir, tmp_path)

    def command(cmd, **kw):                          # train.py's log, as it would write it
        assert cmd[cmd.index("--model") + 1] == r["model"] and "--position" not in cmd
        out = cmd[cmd.index("--out_dir") + 1]
        os.makedirs(out)
        wall, records = 0.0, []
        for step in range(1, steps + 1):
            wall += 0.100 + (gap(step - 1) if step > 1 else 0.0)
            records.append(dict(step=step, loss=10.0 - step / 10, ms_per_step=100.0, wall=wall))
        with open(os.path.join(out, "log.json"), "w") as fh:
            json.dump(dict(train=records, first_step=dict(step=1, seconds=0.1)), fh)
        return "ok", 0, ""
    run.command = command
    run.begin("train_rope", 60)
    e = gpu_check.stage_train_rope(run)
    seconds = sum(0.100 + gap(step - 1) for step in range(r["warm"] + 1, steps + 1))
    cfg = dict(gpu_check.get_config(r["model"], **r["knobs"]).__dict__)
    per_step = TINY["trainer"]["micro"] * TINY["trainer"]["accum"] * cfg["block_size"]
    assert e["timed_seconds"] == pytest.approx(seconds, rel=1e-9) and seconds > 0.100 * r["timed"]
    assert e["tokens_per_s"] == pytest.approx(per_step * r["timed"] / seconds, rel=1e-9)
    assert e["mfu"] == pytest.approx(e["tokens_per_s"] * trainer_flops_per_token(cfg) / 1e12, rel=1e-9)
    assert (e["position"], e["vocab_size"], e["first_step_seconds"]) == ("rope", 50257, 0.1)


def test_torchrun_takes_the_plain_runs_steps(tiny_run):
    _, res = tiny_run
    d = res["ddp"]
    n = TINY["trainer"]["ddp_steps"]
    assert d["backend"] == "gloo" and d["steps"] == n and d["plain_from"] == "the compare stage's train.py run"
    assert d["plain"] == res["compare"]["train"]["losses"][:n] and len(d["ddp"]) == n
    assert d["same"] and d["max_abs_diff"] <= 1e-5 * max(d["plain"])


def test_the_targets_are_read_against_the_issues_thresholds():
    rows = lambda *x: [dict(seq_len=T, mfu=m, x_top_uniform=x_) for T, m, x_ in x]
    pairs = lambda *r: dict(ratio_median=float(np.median(r)), ratio_min=min(r), ratio_max=max(r), train=dict(mfu=0.39),
                            nanogpt=dict(size="tiny"))
    res = dict(table1=dict(rows=rows((64, 0.2, 6.0), (1024, 0.55, 500.0), (1024, 0.51, 100.0))),
               compare=pairs(1.02, 0.9, 1.1), fingerprint=dict(seconds=46.5))
    t = {x["target"]: x for x in gpu_check.targets(res)}
    assert t["train_vs_nanogpt"]["value"] == 1.02 and t["train_vs_nanogpt"]["short_by"] == pytest.approx(0.1)
    assert not t["train_mfu"]["met"] and t["train_mfu"]["short_by"] == pytest.approx(0.01)
    assert t["probe_mfu"]["value"] == 0.51 and t["probe_mfu"]["met"]             # the longest length, either seed
    assert not t["fingerprint_seconds"]["met"] and t["fingerprint_seconds"]["short_by"] == pytest.approx(1.5)
    assert t["top1_x_top_uniform"]["met"]                        # 6 and 500: within a factor 10 of 58.5
    for ratios, met in (((1.06, 1.07, 1.2), True), ((1.06, 0.99, 1.2), False), ((1.04, 1.01, 1.2), False)):
        res["compare"] = pairs(*ratios)             # the median at 1.05 or more, and no pair below 1
        assert {x["target"]: x for x in gpu_check.targets(res)}["train_vs_nanogpt"]["met"] is met, ratios
    res["table1"]["rows"][0]["x_top_uniform"] = 5.0
    t = {x["target"]: x for x in gpu_check.targets(res)}
    assert not t["top1_x_top_uniform"]["met"] and t["top1_x_top_uniform"]["short_by"] == pytest.approx(1.17)
    assert all(x["met"] is None for x in gpu_check.targets({}))
    for status, said in (("failed", "it failed"), ("timed out", "it timed out"), ("skipped", "it did not run")):
        # a full-size compare stage that measured nothing: said so, not taken for files or a model unlike nanoGPT's
        res["compare"] = dict(size="full", stage=dict(status=status, error="..."))
        t = {x["target"]: x for x in gpu_check.targets(res)}["train_vs_nanogpt"]
        assert t["value"] is None and t["met"] is None and t["not_read"] == f"nanoGPT not compared: {said}", status


def a_run(gpu_dir, tmp_path, size="tiny"):
    """gpu_check's Run of the tiny size's stages, as main makes it, with a scratch folder; `size` is the size it
    records (--size)."""
    args = argparse.Namespace(size=size, peak_tflops=1.0, gpu_dir=str(gpu_dir), out=str(tmp_path / "out"),
                              budget=540, tests=None, compile_mode="default")
    os.makedirs(args.out, exist_ok=True)
    run = gpu_check.Run(args, TINY)
    run.work = str(tmp_path / "work")
    os.makedirs(run.work, exist_ok=True)
    return run


def test_a_full_size_nanogpt_that_is_not_nanogpt_is_measured_but_not_compared():
    """At full size a compare entry whose nanoGPT files are not those of the pinned commit, or whose model has other
    parameters, is kept but no target is read off it; at the tiny size the stand-in is compared, by design
    (test_train_py_and_nanogpt_take_turns_and_are_timed_the_same_way)."""
    nano = dict(tokens_per_s=500e3, files_match_commit=True, same_parameters=True, parameters_printed_millions=124.44)
    res = dict(compare=dict(ratio_median=1.1, ratio_min=1.05, ratio_max=1.2, size="full", nanogpt=nano,
                            train=dict(mfu=0.4)))
    read = lambda: {x["target"]: x for x in gpu_check.targets(res)}["train_vs_nanogpt"]
    assert read()["value"] == pytest.approx(1.1) and read()["met"] and read()["not_read"] is None
    for flag, said in (("files_match_commit", "its files are not nanoGPT's at 3adf61e"), ("same_parameters",
                                                                                         "124.44M")):
        res["compare"]["nanogpt"] = dict(nano, **{flag: False})
        assert read()["value"] is None and read()["met"] is None and said in read()["not_read"], flag
        assert said in gpu_check.unlike_nanogpt(dict(res["compare"]["nanogpt"], size="full"))
    res["compare"]["size"] = "tiny"                                             # the stand-in
    assert read()["met"] and gpu_check.unlike_nanogpt(dict(nano, files_match_commit=False, size="tiny")) is None


def test_torchrun_reuses_train_losses_only_from_the_same_commit_card_and_size(gpu_dir, tmp_path, monkeypatch):
    """An earlier run's compare entry in --out stands for the plain run only where its provenance names this commit
    (with no tracked file changed), this card and this size; else the ddp stage trains a plain run first."""
    now = dict(gpu_check.provenance("cpu"), git=dict(commit="a" * 40, dirty=False))
    monkeypatch.setattr(gpu_check, "provenance", lambda *a, **k: dict(now))
    n = TINY["trainer"]["ddp_steps"]

    def first_command(tmp, how, size="tiny"):
        """The ddp stage's first command with results.json holding a train entry made as `how` says."""
        out = tmp / "out"
        out.mkdir(parents=True)
        (out / "results.json").write_text(json.dumps(dict(
            compare=dict(train=dict(losses=[10.0 - i for i in range(n + 2)]), size=size, stage=dict(status="ok")),
            provenance=dict(compare=how))))
        run, seen = a_run(gpu_dir, tmp), []

        def command(cmd, **kw):
            seen.append(cmd)
            raise gpu_check.StageFailed("only the first command is looked at")
        run.command = command
        run.begin("ddp", 60)
        with pytest.raises(gpu_check.StageFailed, match="only the first"):
            gpu_check.stage_ddp(run)
        return "torchrun" if "torch.distributed.run" in seen[0] else "plain" if "train.py" in seen[0] else seen[0]

    assert first_command(tmp_path / "same", now) == "torchrun"
    for case, how in (("commit", dict(now, git=dict(commit="b" * 40, dirty=False))),
                      ("dirty", dict(now, git=dict(commit="a" * 40, dirty=True))),
                      ("no git", dict(now, git=None)),
                      ("card", dict(now, device_name="NVIDIA H200")),
                      ("no provenance", None)):
        assert first_command(tmp_path / case, how) == "plain", case
    assert first_command(tmp_path / "size", now, size="full") == "plain"


def test_torchrun_is_run_once_more_after_gloos_teardown_abort_and_only_after_it(gpu_dir, tmp_path):
    """The ddp stage's torchrun job, failed by gloo's abort at exit (its message and torchrun's report of a rank
    ended by SIGABRT, as the tests' torchrun helper retries it: common.teardown_abort), runs once more from an empty
    folder; any other failure, or the abort twice, fails the stage."""
    n = TINY["trainer"]["ddp_steps"]
    abort = ("terminate called without an active exception\n... exitcode  : -6 (pid: 7)\n"
             "traceback : Signal 6 (SIGABRT) received by PID 7\n")

    def ddp_stage(case, torchrun_said):
        """The stage with each command stood in for: torchrun says torchrun_said[i] at its i-th try (None: it
        trains); the commands it was given, in order."""
        run, seen = a_run(gpu_dir, tmp_path / case), []

        def command(cmd, check=True, **kw):
            seen.append("torchrun" if "torch.distributed.run" in cmd else "plain")
            out = cmd[cmd.index("--out_dir") + 1]
            said = torchrun_said[seen.count("torchrun") - 1] if seen[-1] == "torchrun" else None
            if said is not None:
                os.makedirs(out, exist_ok=True)              # a failed try leaves its checkpoints behind
                return "failed", 1, said
            assert not os.path.exists(out), "a try began over an earlier one's files"
            os.makedirs(out)
            with open(os.path.join(out, "log.json"), "w") as fh:
                json.dump(dict(train=[dict(step=i, loss=10.0 - i) for i in range(1, n + 1)]), fh)
            return "ok", 0, "DDP over gloo" if seen[-1] == "torchrun" else ""
        run.command = command
        run.begin("ddp", 60)
        try:
            entry = gpu_check.stage_ddp(run)
        except gpu_check.StageFailed as e:
            entry = f"failed: {e}"
        return entry, seen

    entry, seen = ddp_stage("abort once", [abort, None])
    assert seen == ["plain", "torchrun", "torchrun"] and entry["same"] and entry["backend"] == "gloo"
    for case, said in (("abort twice", [abort, abort]), ("another failure", ["Traceback: ValueError\n"]),
                       ("the message alone", ["terminate called without an active exception\n"])):
        entry, seen = ddp_stage(case, said)
        assert entry.startswith("failed: torchrun failed") and seen == ["plain"] + ["torchrun"] * len(said), case


def test_the_loss_comparison_fails_where_the_losses_differ():
    plain = [10.9, 10.5, 10.1, 9.8]
    same = gpu_check.compare_losses(plain + [9.5], plain, "float32")
    assert same["same"] and same["max_abs_diff"] == 0 and same["steps"] == 4
    moved = gpu_check.compare_losses(plain, plain[:2] + [10.1 + 1e-3, 9.8], "float32")
    assert not moved["same"] and moved["at_step"] == 3 and moved["max_abs_diff"] == pytest.approx(1e-3)
    assert gpu_check.compare_losses(plain, [x + 0.01 for x in plain], "bfloat16")["same"]
    assert not gpu_check.compare_losses(plain, [x + 0.03 for x in plain], "bfloat16")["same"]
    with pytest.raises(gpu_check.StageFailed, match="nothing to compare"):
        gpu_check.compare_losses(plain[:2], plain, "float32")


def test_the_tests_run_right_after_env_and_a_next_run_makes_the_stages_left_in_order():
    """The suite with CUDA visible runs second, so a short run leaves benchmarks, not the tests, for later; a next
    run makes what is left in the stages' order (train.py and nanoGPT are one stage, compare)."""
    assert gpu_check.STAGES[:2] == ("env", "tests") and sorted(gpu_check.STAGES) == sorted(set(gpu_check.STAGES))
    assert gpu_check.next_stages(["ddp", "fingerprint"]) == ["ddp", "fingerprint"]
    assert gpu_check.next_stages(["fingerprint", "compare", "tests"]) == ["tests", "compare", "fingerprint"]
    assert gpu_check.next_stages(["profile", "train_rope"]) == ["train_rope", "profile"]


def test_stages_past_the_budget_are_not_started_and_the_next_run_is_printed(gpu_dir, tmp_path, capsys,
                                                                              monkeypatch):
    """With less than MIN_STAGE_SECONDS of --budget left a stage is not started: here env runs and the others are
    left (none begun), the command of the next run is printed with this run's flags, in the stages' order; an earlier
    run's entry of a stage not run is kept."""
    env = gpu_check.STAGE_RUNS["env"]

    def slow_env(run):                                       # env takes 6 s of --budget 100: 94 s left after it
        run.deadline -= 6                                    # (the clock moved on, without the wait)
        return env(run)
    monkeypatch.setitem(gpu_check.STAGE_RUNS, "env", slow_env)
    monkeypatch.setattr(gpu_check, "MIN_STAGE_SECONDS", 95)     # env starts, nothing after it
    out = tmp_path / "out"
    argv = ["--gpu_dir", str(gpu_dir), "--work", str(tmp_path / "work"), "--out", str(out), "--budget", "100",
            "--stages", "env", "compare", "table1"]
    with pytest.raises(SystemExit) as stopped:
        gpu_check.main(argv)
    assert stopped.value.code == 1
    res = json.loads((out / "results.json").read_text())
    assert res["stages"]["env"]["status"] == "ok"
    for name in ("compare", "table1"):
        assert res["stages"][name]["status"] == "skipped" and "of --budget left" in res["stages"][name]["error"]
    assert not (tmp_path / "work" / gpu_check.SCRATCH / "compare_train").exists()
    said = capsys.readouterr().out
    assert (f"--size tiny --stages table1 compare --gpu_dir {gpu_dir} --budget 100 --work {tmp_path / 'work'} "
            f"--out {out}") in said
    res["compare"] = dict(size="tiny", stage=dict(status="ok"))               # as if an earlier run made it
    (out / "results.json").write_text(json.dumps(res))
    with pytest.raises(SystemExit):
        gpu_check.main(argv)
    assert json.loads((out / "results.json").read_text())["compare"] == res["compare"]


def test_work_keeps_the_users_own_folders_and_a_second_run_on_it_is_refused(gpu_dir, tmp_path, monkeypatch):
    """--work DIR holding the user's folders named as the stages' outputs: the stages write in a folder of the
    study's own inside it, and the user's files stay. While a run holds --work, a second run with it is refused in
    one line before any work (here another process holds the lock)."""
    work, names = tmp_path / "work", ("probe", "compare_train", "compare_nanogpt", "train_rope", "plain", "ddp",
                                      "fingerprint")
    for name in names:
        (work / name).mkdir(parents=True)
        (work / name / "keep.txt").write_text("the user's own")
    made = []

    def env(run):                                   # every scratch directory the stages ask for, written into
        for name in names:
            made.append(run.scratch(name))
            os.makedirs(made[-1])
            with open(os.path.join(made[-1], "out.txt"), "w") as fh:
                fh.write("a stage's output")
        return {}
    monkeypatch.setitem(gpu_check.STAGE_RUNS, "env", env)
    argv = ["--stages", "env", "--gpu_dir", str(gpu_dir), "--work", str(work)]
    gpu_check.main([*argv, "--out", str(tmp_path / "out")])
    assert all((work / name / "keep.txt").read_text() == "the user's own" for name in names)
    assert sorted(os.listdir(work)) == sorted([*names, gpu_check.SCRATCH])
    assert [os.path.dirname(path) for path in made] == [str(work / gpu_check.SCRATCH)] * len(names)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                               "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
                               "time.sleep(60)", str(work / gpu_check.SCRATCH)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        line = cli_error(gpu_check.main, "studies.gpu_check", [*argv, "--out", str(tmp_path / "second")])
    finally:
        holder.kill()
        holder.wait()
    assert "in use by another run" in line and "choose another --work" in line
    assert not (tmp_path / "second").exists()                   # nothing written


def test_a_stage_over_its_limit_is_stopped_with_everything_it_started(tmp_path):
    """A command that started a process of its own and sleeps: after its limit both are gone."""
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " print(c.pid, flush=True); time.sleep(60)")
    t0 = time.time()
    status, rc, seconds = gpu_check.run_command([sys.executable, "-c", code], str(tmp_path / "log"), 2, str(tmp_path),
                                                dict(os.environ))
    assert (status, rc) == ("timed out", None) and 2 <= seconds < 20 and time.time() - t0 < 20
    child = int((tmp_path / "log").read_text().split()[0])
    for _ in range(50):                     # killed; reaped by init once it is gone
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the command's own child {child} outlived the time limit")


def test_a_stopped_command_leaves_no_process_that_outlived_sigterm(tmp_path):
    """A command whose own child ignores SIGTERM: the command ends at SIGTERM, and the child is killed all the same
    (SIGKILL to the command's process group after it)."""
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)'], "
            "stdout=subprocess.PIPE); c.stdout.readline(); print(c.pid, flush=True); time.sleep(60)")
    status, rc, seconds = gpu_check.run_command([sys.executable, "-c", code], str(tmp_path / "log"), 3, str(tmp_path),
                                                dict(os.environ))
    assert (status, rc) == ("timed out", None) and seconds < 10        # the command itself ends at SIGTERM
    child = int((tmp_path / "log").read_text().split()[0])

    def gone():                          # a zombie (killed, not yet reaped by init) is gone too
        try:
            with open(f"/proc/{child}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True
    for _ in range(50):
        if gone():
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        raise AssertionError(f"the command's child {child}, which ignores SIGTERM, outlived the stop")


def test_a_profile_window_reads_only_what_ran_inside_it_for_as_long_as_it_lasted():
    """profile_rows(window=...) against a second count: a large product before a record_function range and three
    small ones inside it. The window reads the three alone (the whole profile all four), and its profiled wall is the
    range's length, which a clock inside the range brackets (the profiler adds its own microseconds)."""
    big, small = torch.randn(300, 300), torch.randn(40, 40)
    inner = []

    def fn():
        torch.mm(big, big)                          # before the range: compiling, in a probe pass
        with torch.profiler.record_function("timed"):
            t0 = time.perf_counter()
            for _ in range(3):
                torch.mm(small, small)
            inner.append(time.perf_counter() - t0)

    windowed = gpu_check.profiled(fn, cuda=False, window="timed", wall=1.0)
    whole = gpu_check.profiled(fn, cuda=False)
    calls = lambda out: {r["op"]: r["calls"] for r in out["top"]}["aten::mm"]
    assert calls(windowed) == 3 and calls(whole) == 4
    assert inner[0] <= windowed["profiled_wall_seconds"] < inner[0] + 0.05
    assert windowed["busy_seconds"] <= windowed["profiled_wall_seconds"] and windowed["wall_seconds"] == 1.0
    assert windowed["busy_share"] == pytest.approx(windowed["busy_seconds"])          # against the wall given
    with pytest.raises(gpu_check.StageFailed, match="no 'timed' range"):
        gpu_check.profiled(lambda: torch.mm(small, small), cuda=False, window="timed")


def test_the_busy_share_counts_overlapping_kernels_once_on_the_devices_clock_against_the_unprofiled_wall():
    """A synthetic GPU profile (microseconds): the timed range on the host from 0 to 10,000, its annotation on the
    device's timeline from 500 to 10,500 (the device's clock, or its queue, runs behind the host's), a kernel of the
    compile before it, two matrix products that overlap by 1,000 and a GELU that ends after the host's range. Read
    on the device's clock all three count, their union (9,500) is the busy time where their sum (10,500) would count
    the overlap twice, and the share is read against the same pass timed without the profiler (9,800); the rate the
    flops imply while busy stays under the peak unless the flops need more kernels than the profile holds. The
    reading before issue 58 (kernels placed by the host's range, their times summed over the profiled wall) gave 80%
    here: a matrix product's time then has to carry more flops than the card can do."""
    from types import SimpleNamespace
    from torch.autograd import DeviceType

    def event(name, device, start, end, annotation=False):
        return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation,
                               time_range=SimpleNamespace(start=start, end=end), self_device_time_total=end - start,
                               self_cpu_time_total=end - start)
    cuda = DeviceType.CUDA
    events = [event("timed", DeviceType.CPU, 0, 10_000), event("timed", cuda, 500, 10_500, annotation=True),
              event("compile_kernel", cuda, -2_000, -1_000), event("gemm", cuda, 500, 4_500),
              event("gemm", cuda, 3_500, 7_500), event("gelu", cuda, 8_000, 10_500)]
    prof = SimpleNamespace(events=lambda: events)
    r = gpu_check.profile_rows(prof, cuda=True, window="timed", wall=9.8e-3, flops=5e12, peak=989e12)
    assert r["busy_seconds"] == pytest.approx(9.5e-3) and r["kernel_seconds"] == pytest.approx(10.5e-3)
    assert r["span_seconds"] == pytest.approx(10e-3)            # the first product's start to GELU's end
    assert r["busy_share_span"] == pytest.approx(0.95)           # 9.5 ms busy of the 10 ms span
    assert r["profiled_wall_seconds"] == pytest.approx(10e-3) and r["wall_seconds"] == 9.8e-3
    assert r["busy_share"] == pytest.approx(9.5 / 9.8) and r["busy_share_profiled"] == pytest.approx(0.95)
    assert r["summed_share_profiled"] == pytest.approx(1.05) and r["profiler_slowdown"] == pytest.approx(10 / 9.8)
    assert r["device_tflops"] == pytest.approx(5e12 / 9.5e-3 / 1e12) and r["over_peak"] is False
    assert [(t["op"], t["calls"]) for t in r["top"]] == [("gemm", 2), ("gelu", 1)]
    assert r["top"][0]["share"] == pytest.approx(8 / 10.5)
    assert gpu_check.profile_rows(prof, cuda=True, window="timed", wall=9.8e-3, flops=1e13, peak=989e12)["over_peak"]
    host_only = [e for e in events if not e.is_user_annotation]     # no annotation on the device: the host's range
    r = gpu_check.profile_rows(SimpleNamespace(events=lambda: host_only), cuda=True, window="timed")
    assert [(t["op"], t["calls"]) for t in r["top"]] == [("gemm", 2)] and r["busy_share"] == pytest.approx(0.7)
    assert gpu_check.union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.7), (3, 4)]) == 5


def test_idle_gaps_name_where_the_device_waited_against_a_naive_timeline():
    """idle_gaps against a count over a timeline of microseconds: each microsecond of the span that no op covers
    belongs to the gap between the op that ended last before it (of ops ending together, the one begun last) and the
    op that begins first after it."""
    import random
    rng = random.Random(0)
    names = ["gemm", "gelu", "copy", "adam"]
    for _ in range(20):
        ops, t = [], 0
        for _ in range(12):
            t += rng.choice([0, 0, 1, 3, 7])                   # some ops start at once, some after a wait
            end = t + rng.randint(1, 6)
            ops.append((t, end, rng.choice(names)))
            t = rng.choice([t, end])                         # the next begins inside this one, or after it
        expect = {}
        for us in range(min(s for s, _, _ in ops), max(e for _, e, _ in ops)):
            if any(s <= us < e for s, e, _ in ops):
                continue
            ended = [(e, i) for i, (s, e, _) in enumerate(sorted(ops)) if e <= us]
            after = sorted(ops)[max(ended)[1]][2]             # the latest end; among equal ends the last begun
            before = min((s, i) for i, (s, _, _) in enumerate(sorted(ops)) if s > us)
            key = (after, sorted(ops)[before[1]][2])
            expect[key] = expect.get(key, 0) + 1e-6
        got = {(g["after"], g["before"]): g["seconds"] for g in gpu_check.idle_gaps(ops, k=100)}
        assert got.keys() == expect.keys() and all(got[key] == pytest.approx(expect[key]) for key in got)
    top = gpu_check.idle_gaps([(0, 1, "a"), (5, 6, "b"), (7, 8, "a"), (9, 10, "b")], k=1)
    assert top == [dict(after="a", before="b", gaps=2, seconds=pytest.approx(5e-6))]


def test_the_profile_stage_reads_each_benchmark_at_the_tiny_size(gpu_dir, tmp_path):
    """--stages profile at the tiny size, as a GPU runs it: train.py's step, its own loop, nanoGPT's (its model.py, here
    the stand-in), the probe's timed loop (the window probe.py names; a renamed range would fail the stage) and the
    fingerprint, each with its top ops, its busy time against the unprofiled wall and the rate its flops imply."""
    out = tmp_path / "out"
    gpu_check.main(["--stages", "profile", "--gpu_dir", str(gpu_dir), "--out", str(out)])
    prof = json.loads((out / "results.json").read_text())["profile"]
    names = ("train", "train_loop", "nanogpt", "table1", "fingerprint")
    assert set(names) <= set(prof) and prof["table1"]["window"] == "probe.timed_pass"
    for name in names:
        p = prof[name]
        assert p["top"] and 0 < p["busy_seconds"] and 0 < p["wall_seconds"] and p["device_tflops"] > 0, name
        assert p["busy_share"] == pytest.approx(p["busy_seconds"] / p["wall_seconds"]), name
    # train.py's own loop on a CPU, where a step's launch is its work and its record is stamped as it ends: between
    # the stamps that bound the window lie exactly its n launches and n reads, with little else (a print, a record
    # sent), so the log's wall holds their sum and not much more; reading a record (there at once) takes less than a
    # launch; the trainer's functions are its own again after it
    loop = prof["train_loop"]
    assert loop["steps"] == TINY["profile"]["loop_steps"] and loop["warm_steps"] == TINY["profile"]["loop_warm"]
    assert 0.8 * loop["ms_per_step"] <= loop["launch_ms"] + loop["read_ms"] <= loop["ms_per_step"], loop
    assert loop["read_ms"] < loop["launch_ms"] <= loop["launch_ms_max"] and loop["busy_share_span"] <= 1, loop
    idle = sum(g["seconds"] for g in loop["idle"])           # at most the span's idle time (the largest groups)
    assert 0 <= idle <= loop["span_seconds"] - loop["busy_seconds"] + 1e-9, loop["idle"]
    assert train.train_step.__module__ == "train" and train.log_train.__module__ == "train"


def test_the_loops_profile_starts_after_the_windows_last_record_is_read(gpu_dir, tmp_path, monkeypatch):
    """On a GPU a record is stamped when it is read, in the call after its step's: the profiler starts (a sync and its
    start-up) only once the unprofiled window's last record has been read, and stops after as many steps again, so
    neither falls inside the wall the window is read by. The order as it happens, by the trainer's own calls."""
    import torch.profiler
    events, real_profile, real_read = [], torch.profiler.profile, train.log_train

    class Recorded:
        def __init__(self, *a, **k):
            self.inner = real_profile(*a, **k)

        def start(self):
            events.append("start")
            self.inner.start()

        def stop(self):
            events.append("stop")
            self.inner.stop()

        def __getattr__(self, name):
            return getattr(self.inner, name)

    def read(log, flight, *a):
        events.append(flight["step"])
        return real_read(log, flight, *a)
    monkeypatch.setattr(torch.profiler, "profile", Recorded)
    monkeypatch.setattr(train, "log_train", read)
    run = a_run(gpu_dir, tmp_path)
    run.stage = "profile"
    loop = gpu_check.profile_train_loop(run)
    warm, n = TINY["profile"]["loop_warm"], TINY["profile"]["loop_steps"]
    start, stop = events.index("start"), events.index("stop")
    # records warm .. warm + n bound the unprofiled window; the profiled one holds n steps of its own after it
    assert events[:start] == list(range(1, warm + n + 1)), events
    assert events[start + 1:stop] == list(range(warm + n + 1, warm + 2 * n + 1)), events
    assert loop["steps"] == n


def test_the_probes_profile_reads_its_pass_against_the_same_pass_unprofiled(gpu_dir, tmp_path, monkeypatch):
    """probe() compiles and warms before its own clock, and the profile reads only that clock's window: one pass
    timed by its own clock without the profiler, then the same pass under it, that clock the wall its busy time is
    read against."""
    import probe
    passes, real = [], probe.probe

    def counted(*a, **k):
        passes.append(real(*a, **k))
        return passes[-1]
    monkeypatch.setattr(probe, "probe", counted)
    prof = gpu_check.profile_probe(a_run(gpu_dir, tmp_path))
    n = TINY["profile"]["probe_batches"] * TINY["probe"]["batch_size"]
    assert [int(p["counts"].sum()) for p in passes] == [n, n] and prof["window"] == "probe.timed_pass"
    assert prof["wall_seconds"] == passes[0]["seconds"] and prof["profiled_wall_seconds"] >= 0.5 * passes[1]["seconds"]


def test_pytests_summary_is_read_with_and_without_workers():
    out = "....F\n===== short test summary info =====\nFAILED tests/test_a.py::test_b - assert 1 == 2\n" \
          "===== 1 failed, 4 passed, 2 warnings in 3.21s =====\n"
    r = gpu_check.parse_pytest(out)
    assert r["counts"] == dict(failed=1, passed=4, warnings=2, seconds=3.21)
    assert r["failed"] == ["tests/test_a.py::test_b"]
    assert gpu_check.parse_pytest("sss\n3 skipped in 0.50s\n")["counts"] == dict(skipped=3, seconds=0.5)
    assert gpu_check.parse_pytest("....[ 40%]\n")["summary"] is None             # cut off: no summary


@pytest.mark.parametrize("name,half_sparse", [("NVIDIA H100 80GB HBM3", 1979), ("NVIDIA H100 PCIe", 1513),
                                              ("NVIDIA H100 NVL", 1671), ("NVIDIA H200", 1979),
                                              ("NVIDIA H200 NVL", 1671), ("NVIDIA A100-SXM4-80GB", 624)])
def test_the_dense_bf16_peak_is_the_cards_own(name, half_sparse, monkeypatch):
    """NVIDIA's datasheets give bf16 tensor-core flop/s with 2:4 sparsity; dense is half of it. The NVL cards run
    at lower clocks than the SXM ones, under one name each."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert abs(peak_flops("cuda") - half_sparse / 2 * 1e12) <= 1e12


# ----------------------------------------------------------------------------- the prepare step and bad input

def fake_nanogpt(path, text="x"):
    path.mkdir(parents=True, exist_ok=True)
    for name in gpu_check.NANOGPT_FILES:
        (path / name).write_text(f"{text}: {name}\n")
    return {name: gpu_check.sha256((path / name).read_bytes()) for name in gpu_check.NANOGPT_FILES}


def test_prepare_copies_the_pinned_commits_files_and_the_data(tmp_path, monkeypatch):
    """From a git clone: the files as they are at the pinned commit, not as the working tree holds them; from a
    directory: the files there. Each checked against its sha256; the corpora tokenized into nanoGPT's folder."""
    if shutil.which("git") is None:
        pytest.skip("no git here to make a clone with")
    clone = tmp_path / "clone"
    hashes = fake_nanogpt(clone, "at the commit")
    git = lambda *a: subprocess.run(["git", "-C", str(clone), *a], check=True, capture_output=True, text=True)
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "pinned")
    commit = git("rev-parse", "HEAD").stdout.strip()
    fake_nanogpt(clone, "edited after the commit")
    (tmp_path / "text.txt").write_text("It is a truth universally acknowledged.\n" * 50)
    monkeypatch.setattr(gpu_check, "NANOGPT_COMMIT", commit)
    monkeypatch.setattr(gpu_check, "NANOGPT_FILES", hashes)
    monkeypatch.setattr(gpu_check, "CORPORA_USED", (str(tmp_path / "text.txt"),))
    monkeypatch.setattr(gpu_check, "TOKENIZER", "bytes")
    out = tmp_path / "gpu"
    meta = gpu_check.prepare(str(out), str(clone))
    for name in hashes:
        assert (out / "nanogpt" / name).read_text() == f"at the commit: {name}\n"
    assert commit in (out / "nanogpt" / "SOURCE.txt").read_text()
    stored = data.load_data(str(out / "nanogpt" / "data" / gpu_check.DATASET))
    assert meta["train_tokens"] + meta["val_tokens"] == len((tmp_path / "text.txt").read_bytes())
    assert bytes(stored["train"][:10].tolist()) == b"It is a tr"
    plain = tmp_path / "dir"                                             # a directory holding the same files
    plain.mkdir()
    for name in hashes:
        (plain / name).write_text(f"at the commit: {name}\n")
    gpu_check.prepare(str(tmp_path / "gpu2"), str(plain))
    assert (tmp_path / "gpu2" / "nanogpt" / "LICENSE").read_text() == "at the commit: LICENSE\n"
    (plain / "LICENSE").write_text("another license\n")
    with pytest.raises(ValueError, match="LICENSE from .* is not the file of commit"):
        gpu_check.prepare(str(tmp_path / "gpu3"), str(plain))
    assert not (tmp_path / "gpu3").exists()                              # checked before anything is written


def test_bad_input_is_refused_in_one_line_before_any_work(gpu_dir, tmp_path):
    run = lambda *argv: cli_error(gpu_check.main, "studies.gpu_check", [*argv, "--out", str(tmp_path / "out")])
    assert "invalid choice: 'bogus'" in run("--stages", "bogus")
    assert "lists env more than once" in run("--stages", "env", "env")
    assert "--budget: must be an integer >= 20" in run("--budget", "0")
    # too little for any stage to start (MIN_STAGE_SECONDS): a run that could do nothing is refused
    assert gpu_check.MIN_STAGE_SECONDS == 20 and "--budget: must be an integer >= 20, got 19" in run("--budget", "19")
    assert "--prepare first" in run("--stages", "compare", "--gpu_dir", str(tmp_path / "none"))
    assert "--compile_mode max-autotune goes with --size full" in run("--compile_mode", "max-autotune")
    # the ddp stage's torchrun refuses CUDA graphs (train.py): refused before the stages before it, not in it
    graphs = run("--size", "full", "--compile_mode", "reduce-overhead", "--gpu_dir", str(gpu_dir))
    assert "replays CUDA graphs, which train.py refuses under torchrun (the ddp stage)" in graphs
    prepare = lambda *argv: cli_error(gpu_check.main, "studies.gpu_check", ["--prepare", *argv])
    assert "--prepare runs alone: --stages would do nothing beside it; drop it" in prepare("--stages", "env")
    # flags with a default are refused too, when given at another value
    assert "--budget, --out would do nothing" in prepare("--budget", "100", "--out", str(tmp_path / "x"))
    assert "go with --prepare" in run("--nanogpt_from", str(tmp_path))
    if not torch.cuda.is_available():
        assert "--size full runs on a CUDA GPU" in run("--size", "full", "--gpu_dir", str(gpu_dir))
    fake_nanogpt(tmp_path / "fake")
    line = cli_error(gpu_check.main, "studies.gpu_check", ["--prepare", "--nanogpt_from", str(tmp_path / "fake"),
                                                             "--gpu_dir", str(tmp_path / "gpu")])
    assert "is not the file of commit 3adf61e" in line
    assert sorted(os.listdir(tmp_path)) == ["fake"]                      # nothing written
