"""
studies/gpu_check.py: the code on one GPU, in prepared commands: the test suite with CUDA visible, Table 1 at
the paper's size, the trainer beside nanoGPT, torchrun against one plain process, SeedPrint's 7B fingerprint.

It makes, stage by stage, each under its own time limit and all within --budget seconds as far as its commands go
(what runs in this process has no cap: see below), into out/gpu_check/: results.json, each entry with its
provenance; gpu_check.png; stages.log, every command's whole output:
  env          the card, its memory, torch, CUDA, cuDNN and the driver; the dense bf16 peak MFU is read against
               (common.BF16_PEAK_FLOPS) beside a measured bf16 matrix product (8192^3); whether flash attention runs
  tests        python -m pytest tests with CUDA visible (tests/test_gpu.py and every test with a CUDA path):
               the summary line, the failures by name; second, as no other stage checks code that never ran on CUDA
  table1       probe.py at the paper's size: gpt2-nano, block seeds 42 and 43, 10,000 random sequences at 64, 256
               and 1,024 tokens, bf16 weights, compiled: each row's top-1 token and its share of the sequences (x
               uniform, log10 p), the pass's tokens/s and MFU, its compile time apart
  compare      train.py beside nanoGPT (karpathy/nanoGPT at NANOGPT_COMMIT, files checked) on GPT-2 124M as nanoGPT
               builds it (gpt2-nano with learned positions and nanoGPT's vocabulary padding to 50,304: the same
               parameters and flops/token), compiled, bf16 autocast, 16 x 1,024 tokens x 4 micro-steps = 65,536 tokens
               a step, the same data, learning rates (nanoGPT's warm-up is lr (i + 1) / (warmup + 1), train.py's
               lr (i + 1) / warmup: a little slower, the same decay) and shapes; nanoGPT at its own settings (its
               compile, fused AdamW, flash attention). Both processes start at once and compile side by side; after
               the warm-up they take turns on the card, one paused (SIGSTOP) while the other runs: A B A B A B, a
               timed stretch of steps each, each begun SETTLE steps after its process resumes (the step the pause
               fell in and the other's last queued work left out). Each stretch is timed as the wall time between the
               ends of its first and last steps: train.py's from the wall stamps of its log (each step's print
               included, and the writes of log.json that fall inside, at most one every train.LOG_SECONDS), nanoGPT's
               as the sum of the times it prints (each from the end of one iteration to the end of the next, its print
               included). The pairs' tokens/s ratios, their median and
               spread; MFU against the card's dense bf16 peak (nanoGPT's printed MFU is against an A100: recomputed)
  train_rope   train.py compiled on gpt2-nano as this project builds it (RoPE, the vocabulary of 50,257), the same
               recipe and shapes, timed the same way (nanoGPT has no RoPE: no comparison)
  ddp          train.py under `torchrun --nproc_per_node 1` (NCCL, DDP) against the plain run: the loss of each of
               the first 20 steps, all inside the learning-rate warm-up, so both runs take the same steps
  fingerprint  studies.fingerprint_speed: SeedPrint's fingerprint of a llama2-7b-shaped model in bf16 on 2,000
               sequences of 1,024 tokens (the paper's and SeedPrints' setting), compiled: the build and the compile
               timed apart, the fingerprint end to end, its flops and MFU; and fingerprint files of two seeded tiny
               models made on the card and on the CPU (kept beside results.json): how far the verdicts move between a
               GPU's file and a CPU's
  profile      (only when asked) where the benchmarks' time goes: the top kernels of a train.py step, of train.py's
               own loop (its records read a step late; with the host's time launching a step and reading a record),
               of nanoGPT's step (its model and its iteration, run here as its train.py runs them), of a probe pass
               and of a fingerprint pass, by device time; the device's busy time as the union of its kernels' intervals
               (overlapping kernels counted once) against the wall of the same work timed without the profiler, beside
               the profiled wall and the rate the flops imply while busy (profile_rows says why each); and where the
               device waited: its largest idle gaps, by the kernels before and after them
and the check's targets read off those numbers (not tests): train.py >= 1.05 x nanoGPT's tokens/s (the median of the
pairs, no pair below 1) and >= 40% MFU; the probe at T = 1,024 >= 50% MFU; the 7B fingerprint under 45 s; top-1
counts of the order of the paper's 58.5 times the top count of uniform draws.

    python -m studies.gpu_check --prepare --nanogpt_from CLONE     # once, on any machine: .gpu_check/
    python -m studies.gpu_check --size full --out OUT              # one H100 or H200, --budget 540 s
    python -m studies.gpu_check --size full --stages ddp tests --out OUT      # some stages again (results merge)
    python -m studies.gpu_check                                    # every stage, tiny, on the CPU

Each stage's time limit is a cap against a stage that hangs, not its expected time. The stages run in order, each cut
to what is left of --budget; one with under MIN_STAGE_SECONDS left is not started. The caps stop commands
(subprocesses) only: env, profile and the fingerprint stage's card/CPU file comparison (file_drift) run in this
process, and neither their limit nor --budget can stop them; one that runs long is recorded with its seconds and
leaves the stages after it less of --budget, one that hangs hangs the run. A run that leaves stages unfinished or not
started prints the command of the next run (the same OUT, the same flags), so a second run completes it.
docs/reproduce.md gives the command that settles the speed targets within 9 minutes, and what each stage took.

--prepare writes nanoGPT's four files at NANOGPT_COMMIT (downloaded from GitHub, or copied from a clone or a
directory; each checked against its sha256) and GPT-2 tokens of tiny-shakespeare, WikiText-2 (test) and Brown
(data.py's corpora, checked; offline --from DIR) into the git-ignored .gpu_check/ (3.8 MiB; kept under 64 MiB so
that it can be copied with the checkout to a GPU machine without network). The tiny size takes about 30 s on 2 CPU
cores, and tests/test_studies_gpu.py runs it with a stand-in for nanoGPT.
"""
import contextlib
import hashlib
import importlib.util
import io
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from itertools import islice

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (COMPILE_MODES, DEBUG_ENV, TORCHRUN_VARS, ArgumentParser, Distinct, atomic_write, check_output,
                    figure, flag_type, lock_dir, one_line, peak_flops, print_table, provenance, read_json,
                    replays_cuda_graphs, resolve_device, refuse_unused, run_script, save_figure, teardown_abort,
                    update_results)
import numpy as np
import torch

import data
import evidence
import seedprint
import train
from init import build
from model import GPT, LLAMA_KNOBS, get_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# nanoGPT: its newest commit (2025-11-12, "Update README to mention nanochat and deprecation"); the four files used
# last changed on 2024-12-09. The sha256 of each at that commit: what --prepare copies, and what a run checks.
NANOGPT_COMMIT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
NANOGPT_URL = "https://raw.githubusercontent.com/karpathy/nanoGPT/{commit}/{file}"
NANOGPT_FILES = {"model.py": "7c01703240dbec5d554527dc666e35b3df8391d0b117fddc07afcf325a21d11c",
                 "train.py": "413bd97b40bb400a2a0d01230e2946f056c263ebac1b7281c2367d964a123085",
                 "configurator.py": "5cc23aca26b4ab3c0d9e5f82740f4781f9444f42718c15abcee70d93c5aabe8f",
                 "LICENSE": "a59ec5cdb1c1e447e5266a014b3e7ded511f8d6e5a08931e931c87490ff821fe"}
GPU_DIR = os.path.join(ROOT, ".gpu_check")      # git-ignored: nanogpt/ and nanogpt/data/DATASET/
DATASET = "bench"                               # nanoGPT reads data/<dataset>/train.bin from its own folder
SCRATCH = "gpu_check_scratch"                   # the study's own folder inside --work: nothing else there is touched
CORPORA_USED = ("shakespeare", "wikitext2", "brown")     # data.py's corpora: 1.96M GPT-2 tokens, 3.8 MiB
TOKENIZER = "gpt2"
CARRY_LIMIT = 64 * 2 ** 20     # .gpu_check/ at most: small enough to copy with the checkout to an offline GPU machine

# tests right after env: the suite with CUDA visible checks the most code that has never run on one, so a run short
# of --budget leaves benchmarks for the next one, not the tests
STAGES = ("env", "tests", "table1", "compare", "train_rope", "ddp", "fingerprint")
OPTIONAL_STAGES = ("profile",)
MIN_STAGE_SECONDS = 20                          # a stage with less of --budget left is not started
NEEDS_DATA = ("compare", "train_rope", "ddp", "profile")
LR, MIN_LR = 6e-4, 6e-5                         # nanoGPT's GPT-2 recipe; weight decay 0.1, clip 1.0 below
# compare: a stretch is timed from SETTLE steps after its process resumes (the step the pause fell in, and whatever
# the other process had queued on the card before it was paused, left out)
SETTLE = 2

# Each size: where it runs and how big each stage is. "full": the paper's sizes and the benchmarks' on one GPU;
# "tiny": the same stages on a CPU, so that the command runs in the CPU suite and cannot rot before a GPU is lent.
SIZES = {
    "full": dict(device="cuda", dtype="bfloat16", compile=True,
                 probe=dict(model="gpt2-nano", seeds=(42, 43), sequences=10000, seq_len=(64, 256, 1024),
                            batch_size=250),          # 250 divides 10,000: one batch shape, one compile per length
                 trainer=dict(model="gpt2-nano", knobs=dict(position="learned", vocab_size=50304), micro=16, accum=4,
                              warm=10, timed=40, pairs=3, drain=1.0, lr_warmup=20, ddp_steps=20),
                 rope=dict(model="gpt2-nano", knobs={}, warm=10, timed=40),
                 fingerprint=dict(model="llama2-7b", sequences=2000, seq_len=1024, batch_size=50),
                 profile=dict(steps=3, loop_warm=10, loop_steps=20, probe_batches=4, fingerprint_batches=2),
                 tests=("tests",),
                 limits=dict(env=60, table1=240, compare=330, train_rope=150, ddp=150, fingerprint=240, tests=300,
                             profile=240)),
    "tiny": dict(device="cpu", dtype="float32", compile=False,
                 probe=dict(model="tiny", seeds=(42, 43), sequences=200, seq_len=(16, 64), batch_size=50),
                 trainer=dict(model="gpt2-nano", knobs=dict(position="learned", vocab_size=50304, n_layer=2,
                                                           n_head=2, n_embd=64, block_size=64),
                              micro=4, accum=2, warm=2, timed=3, pairs=3, drain=0.1, lr_warmup=4, ddp_steps=4),
                 rope=dict(model="gpt2-nano", knobs=dict(n_layer=2, n_head=2, n_embd=64, block_size=64), warm=2,
                           timed=4),
                 fingerprint=dict(model="tiny", sequences=100, seq_len=64, batch_size=25),
                 profile=dict(steps=2, loop_warm=2, loop_steps=3, probe_batches=2, fingerprint_batches=2),
                 tests=("tests/test_gpu.py",),
                 # each stage takes under 20 s on 2 CPU cores; 90 s is several times that, and all seven limits fit in
                 # the default --budget, so that one run makes every stage
                 limits=dict(env=90, table1=90, compare=90, train_rope=90, ddp=90, fingerprint=90, tests=90,
                             profile=90)),
}
PAPER_X_TOP_UNIFORM = 58.5
TARGETS = (  # (key, what is measured, threshold, how it is met: "min": at least, "max": at most, "order": within a
    #         factor of 10, "pairs": the median at least, and no pair below 1: a lead beyond the pairs' spread)
    ("train_vs_nanogpt", "train.py tokens/s over nanoGPT's, taking turns on one card: the median of the pairs' "
     "ratios", 1.05, "pairs"),
    ("train_mfu", "train.py MFU, the median of its stretches", 0.40, "min"),
    ("probe_mfu", "probe gpt2-nano MFU at the longest length (1,024 at full size), the lower of the two seeds' "
     "MFUs", 0.50, "min"),
    ("fingerprint_seconds", "7B fingerprint, 2,000 x 1,024 tokens, end to end (s)", 45.0, "max"),
    ("top1_x_top_uniform", "Table 1's top-1 count over the top count of as many uniform draws (Fig 1's red line), "
     "every row within a factor of 10 of the paper's 58.5", PAPER_X_TOP_UNIFORM, "order"),
)
PAPER_TABLE1 = ('Section 3: "The most preferred token appears 58.5 times more frequent than the random baseline" (the '
                'top count of as many uniform draws), at 10,000 sequences of up to 1,024 tokens')


# ----------------------------------------------------------------------------- the prepare step (CPU, once)

def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def file_sha256(path: str):
    """The sha256 of a file's bytes; None where there is no such file."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        return sha256(fh.read())


def write_file(path: str, content) -> None:
    """bytes or text, written whole (common.atomic_write)."""
    def write(tmp):
        with open(tmp, "wb" if isinstance(content, bytes) else "w") as fh:
            fh.write(content)
    atomic_write(path, write)


def nanogpt_file(name: str, source) -> bytes:
    """One of nanoGPT's files at NANOGPT_COMMIT, from `source`: a git clone holding that commit (any clone, bare
    or not), a directory holding the file, or None: downloaded from GitHub at that commit."""
    if source is None:
        url = NANOGPT_URL.format(commit=NANOGPT_COMMIT, file=name)
        try:
            return data.download(url)
        except OSError as e:
            raise OSError(f"could not download {url} ({one_line(e)}); offline, pass --nanogpt_from a clone of "
                          f"karpathy/nanoGPT or a directory holding {', '.join(NANOGPT_FILES)}") from None
    if not os.path.isdir(source):
        raise FileNotFoundError(f"--nanogpt_from {source}: no such directory (a nanoGPT clone, or a directory "
                                f"holding {', '.join(NANOGPT_FILES)})")
    git = lambda *a: subprocess.run(["git", "-C", source, *a], capture_output=True, timeout=60)
    try:
        if git("cat-file", "-e", f"{NANOGPT_COMMIT}^{{commit}}").returncode == 0:
            return git("show", f"{NANOGPT_COMMIT}:{name}").stdout
    except (OSError, subprocess.SubprocessError):
        pass                           # no git: read the directory
    path = os.path.join(source, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--nanogpt_from {source} holds neither nanoGPT's commit {NANOGPT_COMMIT[:7]} nor "
                                f"a file {name}")
    with open(path, "rb") as fh:
        return fh.read()


def prepare(gpu_dir: str, nanogpt_from=None, from_dir=None) -> dict:
    """The one CPU step before a GPU run: nanoGPT's files at NANOGPT_COMMIT (each checked against its sha256) and
    the corpora CORPORA_USED in TOKENIZER's tokens, nanoGPT's train.bin/val.bin format, into gpu_dir/nanogpt.
    Everything is fetched and checked before anything is written there."""
    files = {}
    for name, expected in NANOGPT_FILES.items():
        content = nanogpt_file(name, nanogpt_from)
        if sha256(content) != expected:
            raise ValueError(f"nanoGPT's {name} from {nanogpt_from or 'GitHub'} is not the file of commit "
                             f"{NANOGPT_COMMIT[:7]} (sha256 {sha256(content)[:12]}..., expected {expected[:12]}...)")
        files[name] = content
    data.get_tokenizer(TOKENIZER)                  # offline without tiktoken's files: refused here, before writing
    for name in CORPORA_USED:
        if name in data.CORPORA:
            data.corpus_file(name, source=from_dir)    # fetched (or copied) and checked into data/
    nano = os.path.join(gpu_dir, "nanogpt")
    with lock_dir(gpu_dir, "--gpu_dir"):
        for name, content in files.items():
            write_file(os.path.join(nano, name), content)
        source = (f"karpathy/nanoGPT at {NANOGPT_COMMIT}, unmodified (MIT License, see LICENSE); copied by "
                  f"python -m studies.gpu_check --prepare. sha256: "
                  + ", ".join(f"{k} {v}" for k, v in NANOGPT_FILES.items()) + "\n")
        write_file(os.path.join(nano, "SOURCE.txt"), source)
        meta = data.prepare(list(CORPORA_USED), os.path.join(nano, "data", DATASET), TOKENIZER, from_dir=from_dir)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(gpu_dir) for f in fs)
    print(f"{gpu_dir}: nanoGPT@{NANOGPT_COMMIT[:7]} and {meta['train_tokens']:,} + {meta['val_tokens']:,} "
          f"{TOKENIZER} tokens, {size / 2 ** 20:.1f} MiB (at most {CARRY_LIMIT // 2 ** 20} MiB, to copy with the "
          f"checkout to a GPU machine)")
    if size > CARRY_LIMIT:
        raise ValueError(f"{gpu_dir} holds {size / 2 ** 20:.1f} MiB, more than the {CARRY_LIMIT // 2 ** 20} MiB "
                         f"that is copied with the checkout to a GPU machine")
    return meta


# ----------------------------------------------------------------------------- running a stage's commands

class StageFailed(Exception):
    """A stage that ran and failed: a command's exit, a time limit, or output without what it should hold. What
    it measured before failing (`entry`) is kept."""

    def __init__(self, message: str, status: str = "failed", entry: dict = None, tail: str = ""):
        super().__init__(message)
        self.status, self.entry, self.tail = status, entry, tail


def stop(proc: subprocess.Popen) -> None:
    """End a command and everything it started (torchrun's workers, the compiler's): its own process group.
    SIGTERM first, so that torchrun can end its workers; then SIGKILL to the group, for the command itself where it
    outlived SIGTERM and for any member that did, even once the command has exited."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):       # no member left
            break
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue


def run_command(cmd: list, log_path: str, limit: float, cwd: str, env: dict) -> tuple:
    """(status "ok" | "failed" | "timed out", exit code, seconds) of `cmd`, its output in log_path, stopped with
    all it started once it has run `limit` seconds."""
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(limit, 0.1))
        except subprocess.TimeoutExpired:
            stop(proc)
            return "timed out", None, time.time() - t0
        except BaseException:           # interrupted: the command must not run on without us
            stop(proc)
            raise
    return ("ok" if rc == 0 else "failed"), rc, time.time() - t0


def child_env(debug: bool = True, **extra) -> dict:
    """The environment of a stage's command: unbuffered output, no display, no torchrun variables of ours;
    tracebacks on (BORN_BIASED_DEBUG) for the benchmarks, off for the tests, which check one-line errors."""
    env = {k: v for k, v in os.environ.items()
           if k not in (*TORCHRUN_VARS, "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", DEBUG_ENV)}
    env.update(PYTHONUNBUFFERED="1", MPLBACKEND="Agg", **extra)
    if debug:
        env[DEBUG_ENV] = "1"
    return env


class Run:
    """One invocation: its size, places, the card's peak, the results so far (this run's and those already in
    --out/results.json), and the running stage's clock."""

    def __init__(self, args, size: dict):
        self.args, self.size = args, size
        self.tests = list(args.tests or size["tests"])      # what the tests stage gives pytest
        self.device = resolve_device(size["device"])
        self.dtype, self.compile = size["dtype"], size["compile"]
        self.peak = args.peak_tflops * 1e12 if args.peak_tflops else peak_flops(self.device)
        self.gpu_dir = os.path.abspath(args.gpu_dir)
        self.data_dir = os.path.join(self.gpu_dir, "nanogpt", "data", DATASET)
        self.results_path = os.path.join(args.out, "results.json")
        self.log_path = os.path.join(args.out, "stages.log")
        self.deadline = time.time() + args.budget
        self.compile_mode = args.compile_mode
        t, r = size["trainer"], size["rope"]
        self.train_config, self.rope_config = get_config(t["model"], **t["knobs"]), get_config(r["model"], **r["knobs"])
        self.tokens_per_step = t["micro"] * t["accum"] * self.train_config.block_size
        self.rope_tokens_per_step = t["micro"] * t["accum"] * self.rope_config.block_size
        with torch.device("meta"):     # sizes and flops only: no memory, no init
            self.train_model, rope_model = GPT(self.train_config), GPT(self.rope_config)
        self.train_flops_per_token = train.train_flops_per_token(self.train_model, self.train_config.block_size)
        self.rope_flops_per_token = train.train_flops_per_token(rope_model, self.rope_config.block_size)
        old = read_json(self.results_path, "results") if os.path.isfile(self.results_path) else {}
        self.results = {k: v for k, v in old.items() if isinstance(v, dict) and v.get("size") == args.size}
        # how each entry was made (common.update_results), and the stages this process ran: an earlier run's entry
        # may come from another card or another commit
        self.made = {k: v for k, v in (old.get("provenance") or {}).items() if k in self.results}
        self.ran_here = set()
        self.work = self.stage = None

    def mfu(self, tokens_per_s: float, flops_per_token: float):
        """Model flops utilization against the card's dense bf16 peak; None where there is no peak (a CPU)."""
        return tokens_per_s * flops_per_token / self.peak if self.peak else None

    def begin(self, stage: str, limit: float) -> None:
        self.stage, self.stage_deadline, self.commands = stage, time.time() + limit, []

    def command(self, cmd: list, cwd: str = ROOT, env: dict = None, check: bool = True) -> tuple:
        """Run one of the stage's commands within the stage's time left; (status, exit code, its output).
        check: a command that fails or runs out of time fails the stage (StageFailed)."""
        left = self.stage_deadline - time.time()
        shown = " ".join(shlex.quote(c) for c in cmd).replace(sys.executable, "python")
        self.commands.append(shown if cwd == ROOT else f"(cd {cwd} && {shown})")
        path = os.path.join(self.work, f"{self.stage}.{len(self.commands)}.log")
        status, rc, seconds = run_command(cmd, path, left, cwd, env or child_env())
        with open(path, errors="replace") as fh:
            output = fh.read()
        self.append_log(f"=== {self.stage}: {shown}\n{output}=== {status}, exit {rc}, {seconds:.1f} s\n\n")
        if check and status != "ok":
            raise StageFailed(f"{shown[:200]}: {status}" + (f" (exit {rc})" if rc is not None else
                                                            f" after {seconds:.0f} s"), status, tail=output)
        return status, rc, output

    def follow(self, name: str, cmd: list, cwd: str, steps_done) -> "Follower":
        """Start one of the stage's commands and follow its printed steps as it runs (Follower), its output in a log
        of the stage's, as command() keeps it."""
        shown = " ".join(shlex.quote(c) for c in cmd).replace(sys.executable, "python")
        self.commands.append(shown if cwd == ROOT else f"(cd {cwd} && {shown})")
        path = os.path.join(self.work, f"{self.stage}.{len(self.commands)}.log")
        return Follower(name, shown, cmd, cwd, child_env(), path, steps_done)

    def append_log(self, text: str) -> None:
        old = ""
        if os.path.isfile(self.log_path):
            with open(self.log_path, errors="replace") as fh:
                old = fh.read()
        write_file(self.log_path, old + text)

    def scratch(self, name: str) -> str:
        """An empty directory in the study's scratch folder for one command's outputs (a --work reused from an
        earlier run holds that run's checkpoints, which train.py would refuse to train over)."""
        path = os.path.join(self.work, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def earlier(self, stage: str):
        """The entry a stage made at this size, in this run or an earlier one into --out (None if it failed)."""
        entry = self.results.get(stage)
        return entry if entry and entry.get("stage", {}).get("status") == "ok" else None

    def reusable(self, stage: str):
        """earlier(stage) where this run made it, or an earlier run at the same size on a card of the same name from
        the same commit with no tracked file changed (a dirty tree's commit does not name its code); else None."""
        entry = self.earlier(stage)
        if entry is None or stage in self.ran_here:
            return entry
        how, now = self.made.get(stage) or {}, provenance(self.device)
        git = how.get("git") or {}
        # the size needs no check: __init__ keeps only the entries of this run's size
        same = (git.get("commit") and not git.get("dirty") and git == now["git"]
                and how.get("device_name") == now["device_name"])
        return entry if same else None


@contextlib.contextmanager
def scratch_space(work):
    """The folder the stages' commands write in, for as long as the run lasts: SCRATCH inside --work, locked (a
    second run with the same --work is refused rather than emptying this one's folders), or without --work a
    temporary directory, removed at the end. Only what is inside it is ever removed."""
    if work:
        with lock_dir(os.path.join(work, SCRATCH), "--work") as path:
            yield path
        return
    path = tempfile.mkdtemp(prefix="gpu_check_")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- the stages

def card_name(device: torch.device) -> str:
    return provenance(device)["device_name"]


def nvidia_driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def matmul_tflops(device: torch.device) -> float:
    """A square matrix product's flop/s: bf16 8192^3 on a GPU (what its tensor cores give in practice), float32
    512^3 on a CPU."""
    cuda = device.type == "cuda"
    n, dtype, reps = (8192, torch.bfloat16, 10) if cuda else (512, torch.float32, 5)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12


def stage_env(run: Run) -> dict:
    d = run.device
    e = dict(card=card_name(d), device=str(d), torch=str(torch.__version__), cuda=torch.version.cuda,
             cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
             numpy=str(np.__version__), python=platform.python_version(), cpus=os.cpu_count(),
             peak_flops=run.peak, peak_from=("--peak_tflops" if run.args.peak_tflops else
                                             "common.BF16_PEAK_FLOPS" if run.peak else None))
    if d.type == "cuda":
        props = torch.cuda.get_device_properties(d)
        e.update(gpus=torch.cuda.device_count(), memory_gib=props.total_memory / 2 ** 30,
                 multiprocessors=props.multi_processor_count, capability=f"{props.major}.{props.minor}",
                 driver=nvidia_driver())
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = torch.randn(4, 12, 1024, 64, device=d, dtype=torch.bfloat16)
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):      # raises where flash cannot run these shapes
                torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.125)
            e["flash_attention"] = "runs"
        except RuntimeError as err:
            e["flash_attention"] = f"does not run: {one_line(err)[:200]}"
    e["matmul_tflops"] = matmul_tflops(d)
    e["matmul_share_of_peak"] = e["matmul_tflops"] * 1e12 / run.peak if run.peak else None
    if d.type == "cuda":
        torch.cuda.empty_cache()       # the stages after run in processes of their own: leave them the memory
    return e


def stage_table1(run: Run) -> dict:
    p = run.size["probe"]
    out = run.scratch("probe")
    run.command([sys.executable, "probe.py", "--model", p["model"], "--exp", "table1",
                 "--seeds", *map(str, p["seeds"]), "--sequences", str(p["sequences"]),
                 "--seq_len", *map(str, p["seq_len"]), "--batch_size", str(p["batch_size"]), "--dtype", run.dtype,
                 *compile_flags(run), "--device", str(run.device), "--out", out])
    rows = []
    for r in read_json(os.path.join(out, "results.json"), "probe.py results")["table1"]["rows"]:
        per_token = r["tflops"] * 1e12 / r["tokens_per_s"]         # model.forward_flops per token
        rows.append(dict(seed=r["seed"], seq_len=r["seq_len"], top1_id=r["top1_id"], top1_count=r["top1_count"],
                         sequences=r["n"], top1_share=r["top1_freq"], x_uniform=r["ratio_to_uniform"],
                         x_top_uniform=r["ratio_to_top_uniform"], log10_p=r["log10_p"],
                         distinct_predicted=r["distinct_predicted"], seconds=r["seconds"],
                         tokens_per_s=r["tokens_per_s"], tflops=r["tflops"], flops_per_token=per_token,
                         mfu=run.mfu(r["tokens_per_s"], per_token), compile_seconds=r["compile_seconds"]))
    return dict(model=p["model"], sequences=p["sequences"], batch_size=p["batch_size"], dtype=run.dtype,
                compiled=run.compile, compile_mode=run.compile_mode if run.compile else None, rows=rows,
                paper=PAPER_TABLE1)


def trainer_flags(run: Run, steps: int, out_dir: str, shape: str = "trainer") -> list:
    """train.py's flags for a timed run: nanoGPT's GPT-2 recipe (LR, MIN_LR, weight decay 0.1, clip 1.0), no
    evaluation, checkpoints only at the first and last step, a log record every step. shape: the model of the size's
    "trainer" (nanoGPT's GPT-2) or "rope" (the project's gpt2-nano), the trainer's batch either way."""
    t, model = run.size["trainer"], run.size[shape]
    knobs = [word for k, v in model["knobs"].items() for word in (f"--{k}", str(v))]
    return ["--data", run.data_dir, "--model", model["model"], *knobs, "--batch_size", str(t["micro"] * t["accum"]),
            "--micro_batch", str(t["micro"]), "--max_steps", str(steps), "--lr", str(LR), "--min_lr", str(MIN_LR),
            "--warmup", str(t["lr_warmup"]), "--weight_decay", "0.1", "--grad_clip", "1.0", "--eval_every", "0",
            "--ckpt_every", str(10 ** 9), "--log_every", "1", *compile_flags(run), "--dtype", run.dtype,
            "--device", str(run.device), "--out_dir", out_dir]


def train_log(out_dir: str, steps: int) -> dict:
    """train.py's log.json, its per-step records (--log_every 1) checked to cover steps 1..steps."""
    log = read_json(os.path.join(out_dir, "log.json"), "train.py log")
    if [r["step"] for r in log["train"]] != list(range(1, steps + 1)):
        raise StageFailed(f"{out_dir}/log.json records steps {[r['step'] for r in log['train']][:5]}..., not "
                          f"1..{steps}")
    return log


def wall_seconds(records: list, first: int, last: int) -> float:
    """train.py's steps first + 1 .. last, timed as nanoGPT's times add up: the wall time between the ends of steps
    first and last (each record's wall stamp), each step's print included and any pause between them (an evaluation,
    a checkpoint, and the log.json written there), which train.py's own ms_per_step leaves out, so it is not read
    here."""
    wall = {r["step"]: r["wall"] for r in records}
    return wall[last] - wall[first]


TRAIN_LINE = re.compile(r"^step\s+(\d+) \| loss ")
NANO_ITER = re.compile(r"^iter (\d+): loss (\S+), time ([\d.]+)ms, mfu (-?[\d.]+)%", re.M)


def train_steps_done(line: str):
    """The steps train.py's printed record says are done (its step number), or None."""
    m = TRAIN_LINE.match(line)
    return int(m.group(1)) if m else None


def nanogpt_steps_done(line: str):
    """The steps nanoGPT's printed iteration says are done (iteration i is step i + 1), or None."""
    m = NANO_ITER.match(line)
    return int(m.group(1)) + 1 if m else None


class Follower:
    """A trainer's process whose printed steps are followed as it runs, so that it can be paused (SIGSTOP) between
    stretches of steps and resumed (SIGCONT): train.py and nanoGPT take turns on the card (stage_compare). Its output
    goes to a log file as it comes; `done` is the most steps its lines have said are done."""

    def __init__(self, name: str, shown: str, cmd: list, cwd: str, env: dict, log_path: str, steps_done):
        self.name, self.shown, self.log_path, self.steps_done = name, shown, log_path, steps_done
        self.done, self.ended, self.lines = 0, False, []
        self.changed = threading.Condition()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace", start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with open(self.log_path, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                n = self.steps_done(line)
                with self.changed:
                    self.lines.append(line)
                    self.done = max(self.done, n or 0)
                    self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def output(self) -> str:
        with self.changed:
            return "".join(self.lines)

    def wait_for(self, steps: int, deadline: float) -> None:
        """Until its lines say `steps` steps are done; a process that ends first, or the deadline, fails the stage."""
        with self.changed:
            while not self.reached(steps, deadline):
                self.changed.wait(min(max(deadline - time.time(), 0.01), 1.0))

    def reached(self, steps: int, deadline: float) -> bool:
        """Whether its lines say `steps` steps are done; a process that ended before, or the deadline, fails the
        stage."""
        with self.changed:
            if self.done >= steps:
                return True
            if self.ended:
                raise StageFailed(f"{self.name} ended after {self.done} steps, before step {steps}",
                                  tail=self.output())
            if time.time() > deadline:
                raise StageFailed(f"{self.name} had done {self.done} steps, not {steps}, when the stage's time ran "
                                  f"out", "timed out", tail=self.output())
            return False

    def pause(self) -> None:
        """Stop the process where it is (its queued kernels run on: take_turns waits for them)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def finish(self, deadline: float) -> str:
        """Resumed and run to its end within the deadline; its output. A failure or an overrun fails the stage."""
        self.resume()
        try:
            rc = self.proc.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            self.stop()
            raise StageFailed(f"{self.shown[:200]}: timed out", "timed out", tail=self.output()) from None
        self.reader.join()
        if rc != 0:
            raise StageFailed(f"{self.shown[:200]}: failed (exit {rc})", tail=self.output())
        return self.output()

    def stop(self) -> None:
        """End it and all it started, wherever it is (a paused process is resumed first, to take SIGTERM)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            stop(self.proc)


def take_turns(a: Follower, b: Follower, warm: int, timed: int, pairs: int, drain: float, deadline: float) -> list:
    """Run A and B alternately once each has done `warm` steps (each paused as it gets there, while the other warms
    up): pairs x (A's stretch, then B's), the other paused meanwhile. Each stretch: resumed, SETTLE steps left to
    settle, then `timed` steps; paused, and `drain` seconds given to the card to finish what it had queued (a step
    or two) and to its pipe to pass on its last lines. Returns each stretch as (side, first, last, the steps the paused side's lines said
    it did meanwhile: none): its steps first + 1 .. last, by the steps the side had printed when it resumed (its
    records may run a step behind its work; a step more or less in SETTLE changes nothing timed)."""
    warming = [a, b]
    while warming:
        for side in [s for s in warming if s.reached(warm, deadline)]:
            side.pause()
            warming.remove(side)
        time.sleep(0.01)
    time.sleep(drain)
    stretches = []
    for _ in range(pairs):
        for side, other in ((a, b), (b, a)):
            before = other.done
            side.resume()
            first = side.done + SETTLE
            side.wait_for(first + timed, deadline)
            side.pause()
            time.sleep(drain)
            stretches.append((side, first, first + timed, other.done - before))
    return stretches


def stage_compare(run: Run) -> dict:
    t = run.size["trainer"]
    warm, timed, pairs = t["warm"], t["timed"], t["pairs"]
    # every stretch inside each run, with steps to spare: a side may pass `warm`, or a stretch's end, by a few steps
    # before it is paused
    steps = 2 * warm + pairs * (SETTLE + timed + 2) + 2
    out, folder = run.scratch("compare_train"), os.path.join(run.gpu_dir, "nanogpt")
    verified = all(file_sha256(os.path.join(folder, f)) == h for f, h in NANOGPT_FILES.items())
    a = run.follow("train.py", [sys.executable, "train.py", *trainer_flags(run, steps, out)], ROOT, train_steps_done)
    b = run.follow("nanoGPT", [sys.executable, "train.py", *nanogpt_flags(run, run.scratch("compare_nanogpt"), steps)],
                   folder, nanogpt_steps_done)
    try:
        stretches = take_turns(a, b, warm, timed, pairs, t["drain"], run.stage_deadline)
        texts = {side.name: side.finish(run.stage_deadline) for side in (a, b)}
    finally:
        for side in (a, b):
            side.stop()
            run.append_log(f"=== {run.stage}: {side.shown}\n{side.output()}=== exit {side.proc.returncode}\n\n")
    log, nano = train_log(out, steps), nanogpt_iterations(texts["nanoGPT"], steps, run.tokens_per_step)
    dt = {i: seconds for i, _, seconds, _ in nano["iters"]}      # iteration i is step i + 1
    rows = []
    for (_, a0, a1, a_other), (_, b0, b1, b_other) in zip(stretches[0::2], stretches[1::2]):
        train_s, nano_s = wall_seconds(log["train"], a0, a1), sum(dt[i] for i in range(b0, b1))
        train_tps, nano_tps = run.tokens_per_step * timed / train_s, run.tokens_per_step * timed / nano_s
        rows.append(dict(train_steps=[a0 + 1, a1], nanogpt_steps=[b0 + 1, b1], paused_side_steps=[a_other, b_other],
                         train_seconds=train_s, nanogpt_seconds=nano_s, train_tokens_per_s=train_tps,
                         nanogpt_tokens_per_s=nano_tps, ratio=train_tps / nano_tps))
    ratios = [r["ratio"] for r in rows]
    median = lambda key: float(np.median([r[key] for r in rows]))
    losses = [r["loss"] for r in log["train"]]
    train_side = dict(model=f"{t['model']} {t['knobs']}", parameters=run.train_model.num_params(),
                      tokens_per_s=median("train_tokens_per_s"),
                      mfu=run.mfu(median("train_tokens_per_s"), run.train_flops_per_token),
                      compile_mode=run.compile_mode if run.compile else None,
                      first_step_seconds=(log.get("first_step") or {}).get("seconds"), steps=steps,
                      loss_last_step=losses[-1], loss_mean_last_10=float(np.mean(losses[-10:])),
                      loss_is="each step's mean over its micro-batches", losses=losses)
    printed = nano["entry"]["parameters_printed_millions"]
    ours = (run.train_model.num_params() - run.train_config.block_size * run.train_config.n_embd) / 1e6   # no wpe
    nano_side = dict(nano["entry"], commit=NANOGPT_COMMIT, files_match_commit=verified,
                     same_parameters=printed is not None and abs(printed - ours) < 0.006,
                     tokens_per_s=median("nanogpt_tokens_per_s"),
                     mfu=run.mfu(median("nanogpt_tokens_per_s"), run.train_flops_per_token))
    entry = dict(order=" ".join(("A", "B") * pairs) + " (A: train.py, B: nanoGPT)", pairs=rows,
                 ratio_median=float(np.median(ratios)), ratio_min=min(ratios), ratio_max=max(ratios),
                 ratio_spread=max(ratios) - min(ratios), tokens_per_step=run.tokens_per_step,
                 flops_per_token=run.train_flops_per_token, warm_steps=warm, timed_steps=timed, settle_steps=SETTLE,
                 timed_is="each stretch: the wall time between the ends of its first and last steps, each step's "
                 "print included (and train.py's writes of log.json), the other trainer paused", train=train_side,
                 nanogpt=nano_side, dtype=run.dtype, compiled=run.compile)
    why = unlike_nanogpt(dict(nano_side, size=run.args.size))
    if why:
        raise StageFailed(why, entry=entry)        # what it measured is kept, but no target is read off it
    return entry


def nanogpt_flags(run: Run, out_dir: str, steps: int) -> list:
    """nanoGPT's train.py flags (configurator.py: --key=value, each of the type of its default) for the same model,
    tokens per step, data, learning rates and steps as trainer_flags (nanoGPT's own warm-up formula differs a
    little: the module's docstring); its own compile, in its own mode."""
    t, cfg = run.size["trainer"], run.train_config
    flags = dict(dataset=DATASET, out_dir=out_dir, init_from="scratch", n_layer=cfg.n_layer, n_head=cfg.n_head,
                 n_embd=cfg.n_embd, block_size=cfg.block_size, bias=True, dropout=0.0, batch_size=t["micro"],
                 gradient_accumulation_steps=t["accum"],
                 max_iters=steps - 1,                  # nanoGPT runs iterations 0 .. max_iters
                 learning_rate=LR, min_lr=MIN_LR, warmup_iters=t["lr_warmup"], lr_decay_iters=steps,
                 weight_decay=0.1, grad_clip=1.0,
                 eval_interval=10 ** 9, eval_iters=0,  # it evaluates at iteration 0 whatever the interval: 0 batches
                 always_save_checkpoint=False, log_interval=1, wandb_log=False, dtype=run.dtype,
                 compile=run.compile, device=str(run.device))
    return [f"--{k}={v}" for k, v in flags.items()]


def nanogpt_iterations(text: str, steps: int, tokens_per_step: int) -> dict:
    """What nanoGPT printed: its tokens per step (checked against train.py's), each iteration's loss, time and printed
    MFU (iters: (i, loss, seconds, mfu)), its parameter count."""
    per_step = re.search(r"tokens per iteration will be: ([\d,]+)", text)
    if not per_step or int(per_step.group(1).replace(",", "")) != tokens_per_step:
        raise StageFailed(f"nanoGPT ran {per_step.group(1) if per_step else 'an unknown number of'} tokens per "
                          f"iteration, not train.py's {tokens_per_step:,}")
    iters = [(int(m[1]), float(m[2]), float(m[3]) / 1000, float(m[4]) / 100) for m in NANO_ITER.finditer(text)]
    if [i for i, *_ in iters] != list(range(steps)) or not all(math.isfinite(loss) for _, loss, *_ in iters):
        raise StageFailed(f"nanoGPT printed iterations {[i for i, *_ in iters][:5]}... with losses "
                          f"{[loss for _, loss, *_ in iters][-3:]}, not {steps} finite ones")
    params = re.search(r"number of parameters: ([\d.]+)M", text)
    losses = [loss for _, loss, *_ in iters]
    return dict(iters=iters, entry=dict(
        tokens_per_step=tokens_per_step, parameters_printed_millions=float(params.group(1)) if params else None,
        printed_mfu_a100=iters[-1][3], loss_last_step=losses[-1], loss_mean_last_10=float(np.mean(losses[-10:])),
        loss_is="the last micro-batch's loss of each step, as nanoGPT prints it", losses=losses))


def unlike_nanogpt(entry: dict):
    """Why a full-size nanogpt entry is no measure of nanoGPT beside train.py (None where it is one): its files are
    not those of NANOGPT_COMMIT, or the model it built has other parameters than train.py's. The tiny size runs a
    stand-in, which is neither, by design."""
    if entry.get("size") != "full":
        return None
    why = [what for ok, what in ((entry.get("files_match_commit"), f"its files are not nanoGPT's at "
                                  f"{NANOGPT_COMMIT[:7]}"), (entry.get("same_parameters"), "it printed "
                                  f"{entry.get('parameters_printed_millions')}M parameters, not train.py's"))
           if not ok]
    return f"nanoGPT not compared: {'; '.join(why)}" if why else None


def nanogpt_not_read(entry: dict):
    """Why train.py's tokens/s is not read against this compare entry's nanoGPT (None where it is): a stage that
    failed, timed out or did not run before measuring anything says so; one that measured is checked by
    unlike_nanogpt."""
    if entry.get("ratio_median"):
        return unlike_nanogpt(dict(entry["nanogpt"], size=entry.get("size")))
    said = {"skipped": "did not run", "failed": "failed", "timed out": "timed out"}
    return f"nanoGPT not compared: it {said.get((entry.get('stage') or {}).get('status'), 'measured no tokens/s')}"


def stage_train_rope(run: Run) -> dict:
    r = run.size["rope"]
    steps = r["warm"] + r["timed"]
    out = run.scratch("train_rope")
    run.command([sys.executable, "train.py", *trainer_flags(run, steps, out, shape="rope")])
    log = train_log(out, steps)
    seconds = wall_seconds(log["train"], r["warm"], steps)
    tokens_per_s = run.rope_tokens_per_step * r["timed"] / seconds
    return dict(model=f"{r['model']} {r['knobs']}", position=run.rope_config.position,
                vocab_size=run.rope_config.vocab_size, tokens_per_step=run.rope_tokens_per_step, warm_steps=r["warm"],
                timed_steps=r["timed"], timed_seconds=seconds, tokens_per_s=tokens_per_s,
                flops_per_token=run.rope_flops_per_token, mfu=run.mfu(tokens_per_s, run.rope_flops_per_token),
                first_step_seconds=(log.get("first_step") or {}).get("seconds"),
                compile_mode=run.compile_mode if run.compile else None, loss_last_step=log["train"][-1]["loss"],
                dtype=run.dtype, compiled=run.compile)


def loss_tolerance(dtype: str, loss: float) -> float:
    """How far two runs of the same steps may differ in loss. float32, eager: the sums' order only (1e-5
    relative). bf16 under torch.compile: DDP's compiled graph is split at its gradient buckets (other fusions,
    other roundings): train.py compiles the model before wrapping it in DDP, but the compile happens at the first
    call, inside DDP's forward, where dynamo's DDPOptimizer (torch._dynamo.config.optimize_ddp, on by default)
    sees the active DDP module and splits the graph. And flash attention's backward is not deterministic; that noise
    grows over the steps. 0.02 nats over the 20 warm-up steps was set before any GPU run; what the first H100 run's
    losses differed by is in docs/reproduce.md ("What one H100 measured"), well inside it."""
    return 1e-5 * abs(loss) if dtype == "float32" else 0.02


def compare_losses(plain: list, ddp: list, dtype: str) -> dict:
    """Step by step, the losses of the torchrun run (steps 1..len(ddp)) against the plain run's same steps."""
    if not ddp or len(plain) < len(ddp):
        raise StageFailed(f"the plain run has {len(plain)} steps, the torchrun run {len(ddp)}: nothing to compare")
    diffs = [abs(a - b) for a, b in zip(ddp, plain)]
    worst = int(np.argmax(diffs))
    allowed = [loss_tolerance(dtype, b) for b in plain[:len(ddp)]]
    return dict(steps=len(ddp), plain=plain[:len(ddp)], ddp=list(ddp), max_abs_diff=diffs[worst],
                at_step=worst + 1, first_step_diff=diffs[0], tolerance=allowed[worst],
                same=all(d <= a for d, a in zip(diffs, allowed)))


def stage_ddp(run: Run) -> dict:
    n = run.size["trainer"]["ddp_steps"]
    earlier = (run.reusable("compare") or {}).get("train")
    if earlier and len(earlier["losses"]) >= n:      # all n steps inside the warm-up: a longer run took the same ones
        plain = earlier["losses"][:n]
        plain_from = "the compare stage's train.py run" + ("" if "compare" in run.ran_here else " of an earlier run "
                                                           "(the same commit, card and size)")
    else:       # no compare stage at this size, or one from another card or commit: a plain run of the same steps
        out = run.scratch("plain")
        run.command([sys.executable, "train.py", *trainer_flags(run, n, out)])
        plain, plain_from = [r["loss"] for r in train_log(out, n)["train"]], "a plain run of the same steps"
    out = run.scratch("ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "train.py",
           *trainer_flags(run, n, out)]
    status, rc, text = run.command(cmd, check=False)
    if teardown_abort(rc, text):                     # gloo's rare abort at exit (common.GLOO_TEARDOWN_ABORT)
        shutil.rmtree(out, ignore_errors=True)
        status, rc, text = run.command(cmd, check=False)
    if status != "ok":
        raise StageFailed(f"torchrun {status}" + (f" (exit {rc})" if rc is not None else ""), status, tail=text)
    backend = re.search(r"DDP over (\w+)", text)
    entry = dict(backend=backend.group(1) if backend else None, processes=1, plain_from=plain_from,
                 **compare_losses(plain, [r["loss"] for r in train_log(out, n)["train"]], run.dtype))
    expected = "nccl" if run.device.type == "cuda" else "gloo"
    if entry["backend"] != expected:
        raise StageFailed(f"the torchrun run did not go through DDP over {expected} (it says {entry['backend']})",
                          entry=entry)
    if not entry["same"]:
        raise StageFailed(f"torchrun's loss differs from the plain run's by {entry['max_abs_diff']:.3g} at step "
                          f"{entry['at_step']} (tolerance {entry['tolerance']:.3g})", entry=entry)
    return entry


def stage_fingerprint(run: Run) -> dict:
    f = run.size["fingerprint"]
    out = run.scratch("fingerprint")
    run.command([sys.executable, "-m", "studies.fingerprint_speed", "--model", f["model"],
                 "--sequences", str(f["sequences"]), "--seq_len", str(f["seq_len"]), "--batch_size",
                 str(f["batch_size"]), *compile_flags(run), "--device", str(run.device), "--dtype", run.dtype,
                 "--out", out])
    r = read_json(os.path.join(out, "results.json"), "fingerprint_speed results")["speed"]
    keep = ("model", "params", "dtype", "autocast", "sequences", "seq_len", "batch_size", "build_seconds",
            "compile_mode", "compile_seconds", "seconds", "tokens_per_s", "flops_per_token", "pflop", "tflops",
            "peak_memory_gib")
    return dict({k: r[k] for k in keep}, seconds_is="the fingerprint end to end (inputs drawn, states copied back); "
                "the build and the compile apart", build_and_fingerprint_seconds=r["build_seconds"] + r["seconds"],
                mfu=run.mfu(r["tokens_per_s"], r["flops_per_token"]), files=file_drift(run))


def compile_flags(run: Run) -> list:
    """--compile and --compile_mode of probe.py and studies.fingerprint_speed, as the size and --compile_mode say."""
    return ["--compile", "on", "--compile_mode", run.compile_mode] if run.compile else ["--compile", "off"]


def file_drift(run: Run) -> dict:
    """Fingerprint files of two seeded LLaMA-style tiny models, made on the card (bf16 autocast) and on its CPU
    (float32), written beside results.json so that any later machine can compare with them: how far a verdict moves
    when one side's files come from a GPU. The same model across the two (related: its tau should stay near 1), and
    the two seeds on each side (unrelated: p and tau should barely move). In this process, after the stage's
    command: the stage's limit does not cap it."""
    cfg = get_config("tiny", **LLAMA_KNOBS)
    folder = os.path.join(os.path.dirname(run.results_path), "fingerprints")
    files = {}
    for where, device in (("card", str(run.device)), ("cpu", "cpu")):
        for seed in (0, 1):
            files[where, seed] = os.path.join(folder, f"{where}_seed{seed}.npz")
            if os.path.exists(files[where, seed]):        # this stage's own file of an earlier run: made anew
                os.remove(files[where, seed])
            evidence.write(files[where, seed], seedprint.make_fingerprint(
                build(cfg, seed, seed).to(device), device=device, sequences=run.size["fingerprint"]["sequences"],
                seq_len=64, k=32))
    verdict = lambda a, b: (lambda r: dict(related=r.related, p=r.p, tau=r.alignment.tau_aligned))(
        seedprint.compare(files[a], files[b], align=True))
    return {"card seed 0 vs cpu seed 0": verdict(("card", 0), ("cpu", 0)),
            "card seed 0 vs card seed 1": verdict(("card", 0), ("card", 1)),
            "cpu seed 0 vs cpu seed 1": verdict(("cpu", 0), ("cpu", 1)),
            "card seed 0 vs cpu seed 1": verdict(("card", 0), ("cpu", 1)),
            "files": sorted(os.path.relpath(f, os.path.dirname(run.results_path)) for f in files.values())}


def parse_pytest(text: str) -> dict:
    """pytest's summary ("3 failed, 480 passed, 11 skipped in 95.12s") and the tests it names as failed."""
    summary, counts = None, {}
    for line in reversed(text.splitlines()):
        m = re.match(r"^=*\s*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s", line.strip())
        if m:
            summary = line.strip(" =")
            counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", m.group(1))}
            counts["seconds"] = float(m.group(2))
            break
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.M)
    return dict(summary=summary, counts=counts, failed=failed)


def stage_tests(run: Run) -> dict:
    parallel = []
    if importlib.util.find_spec("xdist") and run.device.type == "cuda":     # the GPU machine's many cores
        parallel = ["-n", str(min(8, os.cpu_count() or 1)), "--dist", "loadfile"]
    # quiet by pytest.ini's -q (a second -q would drop the summary line), the failures named (-rfE)
    cmd = [sys.executable, "-m", "pytest", *run.tests, "-rfE", "-p", "no:cacheprovider", "--durations=10", *parallel]
    env = child_env(debug=False, **(dict(OMP_NUM_THREADS="2") if parallel else {}))
    status, rc, text = run.command(cmd, env=env, check=False)
    entry = dict(parse_pytest(text), command_args=run.tests, cuda_visible=torch.cuda.is_available(),
                 workers=int(parallel[1]) if parallel else 1)
    if status != "ok":
        what = entry["summary"] or f"no summary ({status})"
        raise StageFailed(f"pytest: {what}" + (f"; failed: {', '.join(entry['failed'][:5])}" if entry["failed"]
                                               else ""), status, entry=entry, tail=text)
    return entry


# ----------------------------------------------------------------------------- profile (only when asked)

def profile_rows(prof, cuda: bool, window: str = None, wall: float = None, profiled_wall: float = None,
                 flops: float = None, peak: float = None, k: int = 8) -> dict:
    """How the device spent the profiled work. The top k ops by self time on the device: on a GPU its kernels and
    copies (the ops that launched them would count their time twice), on a CPU the ops; each with its share of their
    summed time (kernel_seconds). And how busy the device was:
      busy_seconds           the union of those ops' intervals: kernels that overlap (two streams, or a kernel begun
                             before the one before it ends, as Hopper's programmatic dependent launch lets cuBLAS do)
                             counted once, where their summed times would count them twice
      span_seconds           from the first op's start to the last one's end; busy_share_span is busy_seconds /
                             span_seconds, the share of it the device was busy (no edges' drain in it)
      wall_seconds           the same work timed without the profiler (given): the profiler's hooks add host time at
                             every launch, so a loop that waits on its host runs longer under it, and its busy share
                             read against that profiled wall comes out low. busy_share is busy_seconds / wall_seconds
      profiled_wall_seconds  the wall under the profiler, for comparison: busy_share_profiled reads against it, and
                             summed_share_profiled (kernel_seconds / profiled wall) is the old reading (kernel times summed)
      device_tflops          flops (given) / busy_seconds, the rate while busy: above the card's peak (over_peak),
                             the profile misses some of the work's kernels and no share read off it holds
      idle                   where the device waited inside the span (idle_gaps): the k largest groups of gaps, each
                             named by the op before it and the op after it
    window: the name of a torch.profiler.record_function range; where given, only what ran inside it is read and the
    profiled wall is its length (a probe pass's timed loop, apart from the compiling before it). Its ops are placed
    on the device's own clock, by the range's annotation on the device's timeline where the profiler makes one (a
    GPU), else by the range on the host; the range must begin and end with the device synced, as probe() does."""
    from torch.autograd import DeviceType
    events = list(prof.events())
    device = DeviceType.CUDA if cuda else DeviceType.CPU
    spans = None
    if window:
        host = [(e.time_range.start, e.time_range.end) for e in events
                if e.name == window and e.device_type == DeviceType.CPU]
        if not host:
            raise StageFailed(f"the profile holds no {window!r} range: nothing to read the pass from")
        profiled_wall = sum(end - start for start, end in host) / 1e6       # microseconds -> seconds
        on_device = [(e.time_range.start, e.time_range.end) for e in events
                     if e.name == window and e.device_type == device and e.is_user_annotation]
        spans = on_device or host
    inside = lambda e: spans is None or any(start <= e.time_range.start and e.time_range.end <= end
                                            for start, end in spans)
    self_time = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    by_op, ops = {}, []                      # name -> [calls, microseconds]; (start, end, name) of each op
    for e in events:
        # a record_function range is no op (the window's own, optimizer.step's): on a GPU each also stands as an
        # annotation over its kernels, which would count their time twice
        if e.device_type == device and not e.is_user_annotation and inside(e):
            entry = by_op.setdefault(e.name, [0, 0.0])
            entry[0] += 1
            entry[1] += self_time(e)
            ops.append((e.time_range.start, e.time_range.end, e.name))
    summed = sum(us for _, us in by_op.values()) / 1e6
    busy = union_length([(start, end) for start, end, _ in ops]) / 1e6
    span = (max(end for _, end, _ in ops) - min(start for start, _, _ in ops)) / 1e6 if ops else None
    top = sorted(by_op.items(), key=lambda item: item[1][1], reverse=True)[:k]
    share = lambda seconds, of: seconds / of if of else None
    rate = flops / busy if flops and busy else None
    return dict(window=window, wall_seconds=wall, profiled_wall_seconds=profiled_wall, busy_seconds=busy,
                span_seconds=span, busy_share_span=share(busy, span), kernel_seconds=summed,
                busy_share=share(busy, wall or profiled_wall),
                busy_share_profiled=share(busy, profiled_wall), summed_share_profiled=share(summed, profiled_wall),
                profiler_slowdown=share(profiled_wall, wall), device_tflops=rate and rate / 1e12,
                over_peak=rate > peak if rate and peak else None,
                top=[dict(op=name, calls=calls, seconds=us / 1e6, share=share(us / 1e6, summed))
                     for name, (calls, us) in top],
                idle=idle_gaps(ops, k))


def idle_gaps(ops: list, k: int = 8) -> list:
    """Where the device waited: each gap between ops (start, end, name; microseconds) in which none ran, grouped by
    the op the device had last finished and the op that ended the wait. The k groups with the most idle time, each
    with its gaps and seconds: a gap after a step's last kernel and before the next step's first is the host's time
    between the steps; one after a kernel that waits for the host (a copy to it), that wait."""
    groups, reach, last = {}, -math.inf, None
    for start, end, name in sorted(ops):
        if last is not None and start > reach:
            group = groups.setdefault((last, name), [0, 0.0])
            group[0] += 1
            group[1] += start - reach
        if end >= reach:                     # of ops ending together, the one begun last
            reach, last = end, name
    top = sorted(groups.items(), key=lambda item: item[1][1], reverse=True)[:k]
    return [dict(after=after, before=before, gaps=gaps, seconds=us / 1e6) for (after, before), (gaps, us) in top]


def union_length(intervals: list) -> float:
    """The length of the union of (start, end) intervals: where they overlap, counted once."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def timed(fn, cuda: bool) -> float:
    """fn()'s wall time, the device synced before and after: the work as it runs without a profiler."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def profiled(fn, cuda: bool, window: str = None, wall: float = None, flops: float = None, peak: float = None) -> dict:
    """fn() once under torch.profiler, read by profile_rows; wall: the same work timed without it."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        profiled_wall = timed(fn, cuda)
    return profile_rows(prof, cuda, window, wall, profiled_wall, flops, peak)


def stage_profile(run: Run) -> dict:
    """Each benchmark after its warm-up, timed without the profiler and then once under it: what costs the time. In
    this process (the compiler's caches of the stages before make the warm-ups short); one model at a time. No
    command runs here, so neither the stage's limit nor --budget can stop it."""
    out = dict(train=profile_train(run), train_loop=profile_train_loop(run), nanogpt=profile_nanogpt(run),
               table1=profile_probe(run), fingerprint=profile_fingerprint(run))
    if run.device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def profile_steps(run: Run, steps, flops_per_step: float) -> dict:
    """A trainer's steps(n): n steps warmed up (the compile), then n timed without the profiler and n under it."""
    n, cuda = run.size["profile"]["steps"], run.device.type == "cuda"
    steps(n)
    wall = timed(lambda: steps(n), cuda)
    return dict(steps=n, **profiled(lambda: steps(n), cuda, wall=wall, flops=flops_per_step * n, peak=run.peak))


def profile_train(run: Run) -> dict:
    """train.py's step (train.train_step on train.micro_batches' prefetched micro-batches), as _train runs it in one
    process, on the compare stage's model and batch."""
    d, t = run.device, run.size["trainer"]
    args = train.TrainConfig(data=run.data_dir, lr=LR, min_lr=MIN_LR, weight_decay=0.1, grad_clip=1.0,
                             batch_size=t["micro"] * t["accum"], micro_batch=t["micro"], max_steps=10 ** 6)
    model = build(run.train_config, 42, 42, device=d)
    step_model = torch.compile(model, mode=run.compile_mode) if run.compile else model
    optimizer = train.make_optimizer(model, args, d.type)
    autocast = (torch.autocast(d.type, dtype=getattr(torch, run.dtype)) if run.dtype != "float32"
                else contextlib.nullcontext())
    state = dict(data=data.load_data(run.data_dir), T=run.train_config.block_size, micro=t["micro"],
                 accum=t["accum"], doc_len=0, rank=0, world=1, device=d, ddp=False, autocast=autocast,
                 graphs=replays_cuda_graphs(run.compile, run.compile_mode, d))
    batches = train.micro_batches(args, state, 0)

    def steps(n):
        for _ in range(n):
            train.train_step(step_model, model, optimizer, LR, islice(batches, t["accum"]), args, state)
    return profile_steps(run, steps, run.train_flops_per_token * run.tokens_per_step)


def profile_train_loop(run: Run) -> dict:
    """train.py's own loop, where profile_train runs its step alone: train.train in this process on the compare
    stage's flags (a record every step, each read a step late; log.json written every train.LOG_SECONDS between
    pauses). After loop_warm steps (the compile), loop_steps steps as they run, nothing synced: their wall by the log's
    wall stamps, as the compare stage reads it, with the host's seconds in each step's launch (train_step's call) and
    in reading the record before it (log_train: mostly waiting for that step to end). A host that launches a step in
    less time than the device runs one waits at every read; one that waits for nothing keeps the device waiting.
    Then, one step later, as many steps under the profiler, the device synced at the window's two edges: the device's
    busy time against the unprofiled steps' wall, the profiled window's, and its own span (first kernel to last, which
    leaves out the queue drained at the edges). On a GPU the profiler records the device alone: a full profile's hooks on the host
    slowed this loop from 139 to 170 ms a step on one H200, so that most of its gaps were its own."""
    from torch.profiler import ProfilerActivity, profile
    p, cuda = run.size["profile"], run.device.type == "cuda"
    warm, n = p["loop_warm"], p["loop_steps"]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    prof = profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU])
    launch, read, calls, profiling, edges = [], [], [0], [False], []
    # the window's records are stamped as they end on a CPU, but as they are read on a GPU, in the call after their
    # step's: there the launches and reads that lie between the window's two stamps come one call later
    lag = 1 if cuda else 0
    step_fn, read_fn = train.train_step, train.log_train

    def timed_step(*a):
        i = calls[0]
        calls[0] += 1
        # one call past the unprofiled window: on a GPU its last record is read in iteration warm + n, after the
        # launch there, so a sync and the profiler's start-up in that call would fall inside the window's wall
        if i == warm + n + 1:
            sync()
            prof.start()
            profiling[0] = True
            edges.append(time.perf_counter())       # the profiler's start-up left out
        elif i == warm + 2 * n + 1:
            sync()
            edges.append(time.perf_counter())
            prof.stop()
            profiling[0] = False
        t0 = time.perf_counter()
        out = step_fn(*a)
        if warm + lag <= i < warm + n + lag:        # the n launches between the window's stamps
            launch.append(time.perf_counter() - t0)
        return out

    def timed_read(*a):
        t0 = time.perf_counter()
        out = read_fn(*a)
        if warm + lag < calls[0] <= warm + n + lag:     # read in the iterations of those launches
            read.append(time.perf_counter() - t0)
        return out
    args = train.parse_args(trainer_flags(run, warm + 2 * n + 2, run.scratch("profile_train_loop")))
    printed = io.StringIO()
    train.train_step, train.log_train = timed_step, timed_read
    try:
        with contextlib.redirect_stdout(printed):
            log = train.train(args)
    finally:
        train.train_step, train.log_train = step_fn, read_fn
        if profiling[0]:                            # train.py failed inside the profiled window
            prof.stop()
        run.append_log(f"=== {run.stage}: train.py's loop in this process\n{printed.getvalue()}\n")
    if len(launch) != n or len(read) != n:
        raise StageFailed(f"train.py's loop made {len(launch)} launches and {len(read)} reads in a window of {n} "
                          f"steps, not {n} of each: a pause (an evaluation, a checkpoint) fell inside it")
    wall = wall_seconds(log["train"], warm, warm + n)
    rows = profile_rows(prof, cuda, wall=wall, profiled_wall=edges[1] - edges[0],
                        flops=run.train_flops_per_token * run.tokens_per_step * n, peak=run.peak)
    # means, not medians: a step's launch and its read are disjoint parts of its wall, so their means add up to at
    # most the mean step
    return dict(steps=n, warm_steps=warm, ms_per_step=1000 * wall / n, launch_ms=1000 * float(np.mean(launch)),
                launch_ms_max=1000 * max(launch), read_ms=1000 * float(np.mean(read)), read_ms_max=1000 * max(read),
                **rows)


def profile_nanogpt(run: Run) -> dict:
    """nanoGPT's step on the same model and batch: its model.py's GPT and optimizer (configure_optimizers: fused
    AdamW on a GPU), compiled as its train.py compiles it, and its iteration as its train.py runs it (NANOGPT_COMMIT,
    lines 293-323): each micro-step's forward under autocast, the next batch fetched (np.memmap, random windows,
    pinned and copied without blocking) before the backward, the gradient clipped, the optimizer stepped, the
    gradients set to None, and the loss read (its print's .item(), every iteration at log_interval 1). Its GradScaler
    is off in bf16 (as in float32), so its scale, unscale_, step and update pass through to the optimizer."""
    d, t, cfg = run.device, run.size["trainer"], run.train_config
    spec = importlib.util.spec_from_file_location("nanogpt_model", os.path.join(run.gpu_dir, "nanogpt", "model.py"))
    nano = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nano)
    model = nano.GPT(nano.GPTConfig(block_size=cfg.block_size, vocab_size=cfg.vocab_size, n_layer=cfg.n_layer,
                                    n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=0.0, bias=True)).to(d)
    optimizer = model.configure_optimizers(0.1, LR, (0.9, 0.95), d.type)
    step_model = torch.compile(model) if run.compile else model
    ctx = (torch.autocast(d.type, dtype=getattr(torch, run.dtype)) if d.type == "cuda"
           else contextlib.nullcontext())
    path, T, micro = os.path.join(run.data_dir, "train.bin"), cfg.block_size, t["micro"]

    def get_batch():
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(tokens) - T, (micro,))
        x = torch.stack([torch.from_numpy(tokens[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(tokens[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
        if d.type == "cuda":
            return x.pin_memory().to(d, non_blocking=True), y.pin_memory().to(d, non_blocking=True)
        return x.to(d), y.to(d)
    batch = [get_batch()]

    def steps(n):
        for _ in range(n):
            for _ in range(t["accum"]):
                with ctx:
                    _, loss = step_model(*batch[0])
                    loss = loss / t["accum"]
                batch[0] = get_batch()
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss.item()
    return profile_steps(run, steps, run.train_flops_per_token * run.tokens_per_step)


def profile_probe(run: Run) -> dict:
    """probe()'s timed loop (its TIMED_PASS range), read against the same pass's own clock without the profiler: two
    passes, each compiled before its clock (the second from the compiler's caches)."""
    import probe
    from model import forward_flops
    p, d, cuda = run.size["probe"], run.device, run.device.type == "cuda"
    model = build(get_config(p["model"]), 42, 0, device=d, dtype=getattr(torch, run.dtype)).eval()
    T, n = max(p["seq_len"]), p["batch_size"]
    sequences = run.size["profile"]["probe_batches"] * n
    pass_ = lambda: probe.probe(model, sequences=sequences, seq_len=T, batch_size=n, compile=run.compile,
                                compile_mode=run.compile_mode)
    wall = pass_()["seconds"]
    return dict(seq_len=T, sequences=sequences, **profiled(pass_, cuda, window=probe.TIMED_PASS, wall=wall,
                                                           flops=forward_flops(model, T) * sequences, peak=run.peak))


def profile_fingerprint(run: Run) -> dict:
    from model import forward_flops
    f, d, cuda = run.size["fingerprint"], run.device, run.device.type == "cuda"
    model = build(get_config(f["model"]), 42, device=d, dtype=getattr(torch, run.dtype)).eval()
    n, mode = f["batch_size"], run.compile_mode if run.compile else None
    sequences = run.size["profile"]["fingerprint_batches"] * n
    fingerprint = lambda: seedprint.fingerprint(model, sequences, f["seq_len"], batch_size=n, compile_mode=mode)
    seedprint.fingerprint(model, n, f["seq_len"], batch_size=n, compile_mode=mode)              # warm-up
    wall = timed(fingerprint, cuda)
    flops = forward_flops(model, f["seq_len"], logits_positions=0) * sequences
    return dict(seq_len=f["seq_len"], sequences=sequences, **profiled(fingerprint, cuda, wall=wall, flops=flops,
                                                                      peak=run.peak))


STAGE_RUNS = dict(env=stage_env, table1=stage_table1, compare=stage_compare, train_rope=stage_train_rope,
                  ddp=stage_ddp, fingerprint=stage_fingerprint, tests=stage_tests, profile=stage_profile)


# ----------------------------------------------------------------------------- the verdicts, the figure, the table

def targets(results: dict) -> list:
    """Each of the check's targets against what the stages measured (None where a stage is missing, or where
    not_read says why it is no measure)."""
    get = lambda stage, key: (results.get(stage) or {}).get(key)
    rows = (results.get("table1") or {}).get("rows") or []
    longest = [r for r in rows if r["seq_len"] == max(r["seq_len"] for r in rows)] if rows else []
    compare = results.get("compare") or {}
    reasons = dict(train_vs_nanogpt=nanogpt_not_read(compare) if compare else None)
    values = dict(train_vs_nanogpt=compare.get("ratio_median"),
                  train_mfu=(compare.get("train") or {}).get("mfu"),
                  probe_mfu=min(r["mfu"] for r in longest) if longest and all(r["mfu"] for r in longest) else None,
                  fingerprint_seconds=get("fingerprint", "seconds"),
                  top1_x_top_uniform=[r["x_top_uniform"] for r in rows] if rows and all(
                      r.get("x_top_uniform") for r in rows) else None)
    out = []
    for key, what, threshold, kind in TARGETS:
        v = None if reasons.get(key) else values[key]
        if v is None:
            met = short = None
        elif kind == "order":          # how far outside [threshold / 10, 10 threshold], as a factor
            worst = max(max(threshold / x, x / threshold) for x in v)
            met, short = worst <= 10, None if worst <= 10 else worst / 10
        elif kind == "pairs":          # the median, and every pair on train.py's side of 1
            met = v >= threshold and compare["ratio_min"] >= 1.0
            short = None if met else max(threshold - v, 1.0 - compare["ratio_min"])
        else:
            met = v >= threshold if kind == "min" else v <= threshold
            short = None if met else (threshold - v if kind == "min" else v - threshold)
        out.append(dict(target=key, what=what, value=v, threshold=threshold, kind=kind, met=met, short_by=short,
                        not_read=reasons.get(key)))
    return out


def draw(results: dict, path: str) -> None:
    plt, fig, (a1, a2) = figure(1, 2, figsize=(10, 3.8))
    pairs = (results.get("compare") or {}).get("pairs") or []
    if pairs:
        x = np.arange(len(pairs))
        a1.bar(x - 0.2, [p["train_tokens_per_s"] for p in pairs], 0.4, color="C0", label="train.py")
        a1.bar(x + 0.2, [p["nanogpt_tokens_per_s"] for p in pairs], 0.4, color="C1", label="nanoGPT")
        a1.set_xticks(x, [f"pair {i + 1}: {p['ratio']:.3f}x" for i, p in enumerate(pairs)], fontsize=7)
        a1.legend(fontsize=7)
    a1.set(ylabel="tokens/s (timed stretches)", title="GPT-2 124M, taking turns on one card")
    bars = [(f"Table 1 s{r['seed']} T{r['seq_len']}", r["mfu"]) for r in (results.get("table1") or {}).get("rows", [])]
    bars += [(label, ((results.get("compare") or {}).get(side) or {}).get("mfu"))
             for side, label in (("train", "train.py"), ("nanogpt", "nanoGPT"))]
    bars += [(label, (results.get(s) or {}).get("mfu")) for s, label in
             (("train_rope", "train.py RoPE"), ("fingerprint", "7B fingerprint"))]
    bars = [(name, 100 * v) for name, v in bars if v is not None]
    if bars:
        a2.barh([n for n, _ in bars], [v for _, v in bars], color="C2")
        a2.axvline(40, color="k", ls=":", label="40% (train.py target)")
        a2.axvline(50, color="r", ls="--", label="50% (probe target)")
        a2.legend(fontsize=7)
    a2.set(xlabel="MFU (% of the card's dense bf16 peak)", title=(results.get("env") or {}).get("card", ""))
    a2.tick_params(axis="y", labelsize=7)
    save_figure(fig, path)


def fmt(v, spec="{:.3g}") -> str:
    return "-" if v is None else spec.format(v)


def report(results: dict, order: list) -> None:
    st = results.get("stages", {})
    print_table([dict(stage=s, status=st[s]["status"], seconds=fmt(st[s].get("seconds"), "{:.0f}"),
                      limit=fmt(st[s].get("limit"), "{:.0f}"), note=(st[s].get("error") or "")[:80])
                 for s in order if s in st])
    rows = (results.get("table1") or {}).get("rows") or []
    if rows:
        print_table([dict(seed=r["seed"], T=r["seq_len"], top1=r["top1_id"], share=f"{100 * r['top1_share']:.2f}%",
                          x_top_uniform=fmt(r.get("x_top_uniform"), "{:.1f}"), x_uniform=f"{r['x_uniform']:.0f}",
                          log10_p=f"{r['log10_p']:.1f}",
                          tok_s=f"{r['tokens_per_s']:,.0f}", mfu=fmt(r["mfu"] and 100 * r["mfu"], "{:.1f}%"))
                     for r in rows])
    compare = results.get("compare") or {}
    if compare.get("pairs"):
        print_table([dict(pair=i + 1, train_tok_s=f"{p['train_tokens_per_s']:,.0f}",
                          nanogpt_tok_s=f"{p['nanogpt_tokens_per_s']:,.0f}", ratio=f"{p['ratio']:.4f}")
                     for i, p in enumerate(compare["pairs"])])
        print(f"compare: train.py / nanoGPT median {compare['ratio_median']:.4f}x (pairs {compare['ratio_min']:.4f} "
              f"to {compare['ratio_max']:.4f})")
    line = [dict(run=label, tok_s=f"{e['tokens_per_s']:,.0f}", mfu=fmt(e["mfu"] and 100 * e["mfu"], "{:.1f}%"),
                 loss_last=f"{e['loss_last_step']:.4f}")
            for e, label in ((compare.get("train"), "train.py"), (compare.get("nanogpt"), "nanoGPT"),
                             (results.get("train_rope"), "train.py RoPE")) if e and e.get("tokens_per_s")]
    print_table(line)
    if (e := results.get("ddp")) and "max_abs_diff" in e:
        print(f"ddp: torchrun (1 process, {e['backend']}) against {e['plain_from']}: max |loss difference| "
              f"{e['max_abs_diff']:.3g} at step {e['at_step']} of {e['steps']} -> {'same' if e['same'] else 'DIFFER'}")
    if (e := results.get("fingerprint")) and "seconds" in e:
        print(f"fingerprint: {e['model']} {e['sequences']} x {e['seq_len']}: build {e['build_seconds']:.1f} s, "
              f"compile {fmt(e['compile_seconds'], '{:.1f} s')}, fingerprint {e['seconds']:.1f} s end to end, "
              f"{e['tokens_per_s']:,.0f} tok/s, MFU {fmt(e['mfu'] and 100 * e['mfu'], '{:.1f}%')}")
    if (e := results.get("tests")) and "summary" in e:
        print(f"tests: {e['summary']}" + (f"; failed: {', '.join(e['failed'])}" if e["failed"] else ""))
    for name, p in (results.get("profile") or {}).items():
        if isinstance(p, dict) and p.get("top"):
            pct = lambda v: fmt(v and 100 * v, "{:.0f}%")
            print(f"profile {name}: device busy {pct(p['busy_share'])} of the unprofiled wall "
                  f"({pct(p['busy_share_profiled'])} of the profiled, {fmt(p['device_tflops'], '{:.0f}')} TFLOP/s "
                  f"while busy); "
                  + "; ".join(f"{r['op'][:40]} {pct(r['share'])}" for r in p["top"][:4]))
            if p.get("idle"):
                print(f"profile {name}: idle " + "; ".join(
                    f"{1000 * g['seconds']:.2f} ms in {g['gaps']} gap(s) after {g['after'][:40]}, before "
                    f"{g['before'][:40]}" for g in p["idle"][:3]))
            if "launch_ms" in p:
                print(f"profile {name}: {p['ms_per_step']:.1f} ms a step, the host {p['launch_ms']:.1f} ms launching "
                      f"a step and {p['read_ms']:.1f} ms reading a record (means); the device busy "
                      f"{pct(p['busy_share_span'])} of its span under the profiler")
    for t in results.get("targets", []):
        value = "/".join(fmt(v) for v in t["value"]) if isinstance(t["value"], list) else fmt(t["value"])
        print(f"target {t['target']}: {value} vs {t['threshold']} ({t['kind']}) -> "
              + (f"n/a ({t['not_read']})" if t.get("not_read") else "n/a" if t["met"] is None
                 else "met" if t["met"] else f"MISSED by {fmt(t['short_by'])}"
                 + (" times" if t["kind"] == "order" else "")))


# ----------------------------------------------------------------------------- the command line

def main(argv=None):
    p = ArgumentParser(prog="studies.gpu_check", description="The project on one GPU in prepared commands: the "
                       "tests with CUDA, Table 1 at the paper's size, train.py beside nanoGPT, torchrun against a "
                       "plain run, the 7B fingerprint. Prepare once with --prepare.")
    p.add_argument("--prepare", action="store_true", help="the CPU step: nanoGPT's files and the tokenized data into "
                   "--gpu_dir, then stop")
    p.add_argument("--nanogpt_from", default=None, help="with --prepare: a nanoGPT clone holding commit "
                   f"{NANOGPT_COMMIT[:7]}, or a directory holding its files (default: download from GitHub)")
    p.add_argument("--from", dest="from_dir", default=None, help="with --prepare, offline: a directory holding the "
                   "corpora's files (data.py --from; default $BORN_BIASED_DATA)")
    p.add_argument("--gpu_dir", default=os.path.relpath(GPU_DIR), help="what --prepare writes and a run reads "
                   "(git-ignored; copy it with the checkout to the GPU machine)")
    p.add_argument("--size", choices=tuple(SIZES), default=None, help="full: the paper's and the benchmarks' sizes on "
                   "one CUDA GPU; tiny (default): the same stages on the CPU in under a minute")
    p.add_argument("--stages", nargs="+", choices=STAGES + OPTIONAL_STAGES, action=Distinct, default=None,
                   help=f"which stages, in this order (default {' '.join(STAGES)}; profile only when named)")
    # a --budget under MIN_STAGE_SECONDS could start no stage: refused, not run to write an empty results.json
    p.add_argument("--budget", type=flag_type(f"int>={MIN_STAGE_SECONDS}"), default=540, help="seconds for all "
                   f"stages together, at least {MIN_STAGE_SECONDS}: a stage is cut to what is left, and not started "
                   f"with under {MIN_STAGE_SECONDS} s left (then the command that makes the rest is printed; default "
                   "540: 9 minutes)")
    p.add_argument("--compile_mode", choices=COMPILE_MODES, default="default", help="torch.compile's mode for "
                   "train.py, probe.py and the fingerprint at full size (nanoGPT compiles in its own); the tiny size "
                   "compiles nothing")
    p.add_argument("--tests", nargs="+", default=None, help="what the tests stage gives pytest (default: tests at "
                   "full size, tests/test_gpu.py at tiny size)")
    p.add_argument("--peak_tflops", type=flag_type("float>0"), default=None, help="the peak MFU is read against "
                   "(default: common.BF16_PEAK_FLOPS by the card's name; none on a CPU)")
    p.add_argument("--work", default=None, help=f"scratch for checkpoints and logs, kept in WORK/{SCRATCH} (emptied "
                   "stage by stage, locked while a run lasts; nothing else in WORK is touched; default: a temporary "
                   "directory, removed at the end)")
    p.add_argument("--out", default="out/gpu_check")
    args = p.parse_args(argv)
    if args.prepare:
        refuse_unused(args, ("size", "stages", "tests", "peak_tflops", "work", "budget", "compile_mode", "out"),
                      "--prepare runs alone: {flags} would do nothing beside it", p)
        prepare(args.gpu_dir, args.nanogpt_from, args.from_dir)
        return
    if args.nanogpt_from or args.from_dir:
        p.error("--nanogpt_from and --from go with --prepare")
    args.size = args.size or "tiny"
    size = SIZES[args.size]
    if args.compile_mode != "default" and not size["compile"]:
        raise ValueError(f"--compile_mode {args.compile_mode} goes with --size full: the {args.size} size compiles "
                         f"nothing")
    stages = list(args.stages or STAGES)
    if "ddp" in stages and replays_cuda_graphs(size["compile"], args.compile_mode, torch.device(size["device"])):
        # train.py refuses CUDA graphs under torchrun: refused here, not minutes later in the ddp stage
        raise ValueError(f"--compile_mode {args.compile_mode} replays CUDA graphs, which train.py refuses under "
                         f"torchrun (the ddp stage): leave ddp out of --stages, or use --compile_mode default or "
                         f"max-autotune-no-cudagraphs")
    if size["device"] == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--size {args.size} runs on a CUDA GPU, and torch {torch.__version__} sees none here; "
                         f"--size tiny runs the same stages on the CPU")
    check_output(args.out)
    if args.work:
        check_output(os.path.join(args.work, SCRATCH), "--work")
    nano = os.path.join(args.gpu_dir, "nanogpt")
    if any(s in NEEDS_DATA for s in stages) and not os.path.isfile(os.path.join(nano, "data", DATASET, "meta.json")):
        raise FileNotFoundError(f"{nano}/data/{DATASET} holds no prepared data, which stages "
                                f"{', '.join(s for s in stages if s in NEEDS_DATA)} train on: run python -m "
                                f"studies.gpu_check --prepare first (see its --help)")
    for stage, file in (("compare", "train.py"), ("profile", "model.py")):
        if stage in stages and not os.path.isfile(os.path.join(nano, file)):
            raise FileNotFoundError(f"{nano} holds no nanoGPT {file}, which stage {stage} runs: run python -m "
                                    f"studies.gpu_check --prepare first")
    run = Run(args, size)
    if any(s in NEEDS_DATA for s in stages):
        vocab = data.load_data(run.data_dir)["meta"]["vocab_size"]
        if vocab > run.train_config.vocab_size:
            raise ValueError(f"{run.data_dir} holds a vocabulary of {vocab}, more than the trainer's "
                             f"{run.train_config.vocab_size}: prepare it again with --prepare")
    failed, deferred = [], []
    with lock_dir(args.out):
        with scratch_space(args.work) as run.work:
            for name in stages:
                left = run.deadline - time.time()
                if left < MIN_STAGE_SECONDS:        # too little to start: left for the next run, not begun
                    run_stage(run, name, skip=f"{max(left, 0):.0f} s of --budget left")
                    deferred.append(name)
                else:
                    failed += [name] if run_stage(run, name) != "ok" else []
        final = dict(targets=targets(run.results))
        update_results(run.results_path, final, str(run.device), run.dtype)
        run.results.update(final)
        draw(run.results, os.path.join(args.out, "gpu_check.png"))
    report(run.results, [s for s in STAGES + OPTIONAL_STAGES if s in run.results.get("stages", {})])
    if failed or deferred:
        print(f"{len(failed)} of {len(stages)} stages did not finish ok ({', '.join(failed) or 'none'}; see "
              f"{run.log_path}), {len(deferred)} were not started ({', '.join(deferred) or 'none'}). Next run: "
              f"{next_command(p, args, next_stages(failed + deferred))}")
        sys.exit(1)


def next_stages(left: list) -> list:
    """The stages a next run makes, in STAGES' order (ddp needs no compare of its own: it reuses an earlier one from
    the same card and commit, or makes its plain run)."""
    return [name for name in STAGES + OPTIONAL_STAGES if name in left]


def next_command(parser, args, stages: list) -> str:
    """The command of a next run: these stages, with every flag this run was given apart from its default."""
    words = ["python", "-m", "studies.gpu_check", "--size", args.size, "--stages", *stages]
    for name in ("gpu_dir", "budget", "compile_mode", "tests", "peak_tflops", "work"):
        value = getattr(args, name)
        if value != parser.get_default(name):
            words += [f"--{name}", *(map(str, value) if isinstance(value, list) else [str(value)])]
    return shlex.join([*words, "--out", args.out])


def run_stage(run: Run, name: str, skip: str = None) -> str:
    """One stage under its time limit; its entry (or its failure) and the stages' table into results.json.
    skip: why it is left for another run; an entry an earlier run made in --out is then kept as it is."""
    left = run.deadline - time.time()
    limit = min(run.size["limits"][name], left)        # its cap against a hung stage, or what is left of --budget
    record = dict(limit=round(run.size["limits"][name] if skip else limit, 1))
    t0 = time.time()
    if skip:
        if name in run.results:
            print(f"  {name}: not run ({skip}); the earlier run's entry kept", flush=True)
            return "skipped"
        record.update(status="skipped", seconds=0.0, error=skip)
        entry = None
    else:
        run.begin(name, limit)
        print(f"[{time.time() - run.deadline + run.args.budget:5.0f} s] {name} (limit {limit:.0f} s)", flush=True)
        try:
            entry, status, error = STAGE_RUNS[name](run), "ok", None
        except StageFailed as e:
            entry, status, error = e.entry, e.status, one_line(e)
            tail = "\n".join(e.tail.rstrip().splitlines()[-15:])
            print(f"  {name} {status}: {error}" + (f"\n{tail}" if tail else ""), flush=True)
        except Exception as e:        # a bug in one stage must not cost the others their GPU time
            if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
                raise
            entry, status, error = None, "failed", f"internal error {type(e).__name__}: {one_line(e)}"
            print(f"  {name}: {error}", flush=True)
        record.update(status=status, seconds=round(time.time() - t0, 1), commands=run.commands, error=error)
    stages = dict(run.results.get("stages", {}), **{name: record})
    entry = dict(entry or {}, size=run.args.size, stage=record)
    stages["size"] = run.args.size
    run.results.update({name: entry, "stages": stages})
    update_results(run.results_path, {name: entry, "stages": stages}, str(run.device), run.dtype)
    run.made[name] = provenance(str(run.device), run.dtype)        # as update_results records it
    if not skip:
        run.ran_here.add(name)
    print(f"  {name}: {record['status']} ({record['seconds']:.0f} s)", flush=True)
    return record["status"]


if __name__ == "__main__":
    run_script(main, "studies.gpu_check")
