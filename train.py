"""
train.py: one-file trainer for one CPU, one GPU, or many GPUs under torchrun (paper Appendix B.4).

The lineage test (Section 6.1) and the sink experiments (Section 6.2) need models trained from a
*known* init, on *known* data in a *known* order, with every checkpoint kept. So the sources of
randomness are separate settings, and each can change alone:
  init_seed    the transformer blocks (init.py)
  embed_seed   token/position embeddings and the untied LM head (init.py); by default the init seed, so runs
               from two seeds share nothing -- the paper's shared-embedding experiments set it explicitly
  data_seed    which windows of train.bin make each step's batch -- a function of (data_seed, step)
               only, so it is the same for any number of processes and any init
Recipe of the paper: AdamW betas (0.9, 0.95), weight decay 0.1 on matrices only, grad clip 1.0,
cosine schedule with linear warmup; bf16 autocast and TF32 on CUDA.

    python data.py shakespeare --tokenizer bytes              # fetch, check, tokenize -> data/shakespeare_bytes
    python train.py --data data/shakespeare_bytes             # tiny model, CPU, under a minute
    python train.py --data data/owt_gpt2 --model gpt2-nano --batch_size 512 --micro_batch 16 --compile on
    torchrun --standalone --nproc_per_node=8 train.py --data data/owt_gpt2 --model gpt2-nano --batch_size 512

In code, studies call the same function as the command line: train(TrainConfig(...)), whose fields are the
flags. A checkpoint (out_dir/ckpt_STEP.pt, step 0 = the init) holds the config, seeds, step, tokenizer and
optimizer state; model.load_checkpoint(path) rebuilds the model from it alone. Imports model.py, init.py (the
seeded init), data.py (token files and batches), hf.py (checks of --init_from) and common.py.
"""
import contextlib
import dataclasses
import math
import os
import re
import time
from dataclasses import dataclass, field
from itertools import islice
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (COMPILE_MODE_HELP, COMPILE_MODES, DEVICE_HELP, DTYPES, ArgumentParser, add_settings_flags,
                    atomic_write, check_compile_mode, check_dtype_runs, check_output, check_settings, figure,
                    join_process_group, leave_process_group, lock_dir, peak_flops, provenance, rank_device, read_json,
                    replays_cuda_graphs, resolve_device, run_script, save_figure, setting, settings_given,
                    torchrun_rank, write_json)
from model import GPT, GPTConfig, get_config, load_checkpoint, read_checkpoint, write_checkpoint
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import hf
from data import batch_offsets, get_batch, load_data, micro_offsets
from init import add_config_flags, build, config_overrides


@dataclass
class TrainConfig:
    """Everything that defines a run: each field with a help is a flag of train.py (generated from it), and each
    range is checked here, once, whether the command line or a study filled it."""
    data: str = setting("data/shakespeare_bytes", "a directory made by data.py (python data.py --help)")
    out_dir: str = setting("out/train", "checkpoints ckpt_STEP.pt, log.json, loss.png")
    model: Optional[str] = None            # a preset; None: tiny, or --init_from's architecture (init.add_config_flags)
    knobs: dict = field(default_factory=dict)   # GPTConfig fields overriding the preset (the knob flags)
    init_seed: int = setting(42, "seed of the transformer blocks", "seed")
    embed_seed: Optional[int] = setting(None, "seed of the embeddings and untied LM head (default: --init_seed; "
                                        "the same seed in two runs gives them the same embedding)", "seed")
    data_seed: int = setting(1234, "seed of the batch order", "seed")
    init_from: Optional[str] = setting(None, "start from this checkpoint's weights (continual training; with "
                                       "--resume, the one the run began from)")
    resume: bool = setting(False, "continue the run in --out_dir from its last checkpoint")
    batch_size: int = setting(16, "sequences per optimizer step, all processes together", "int>=1")
    micro_batch: Optional[int] = setting(None, "sequences per forward per process (default batch_size / processes); "
                                         "accumulation = batch_size / (micro_batch x processes)", "int>=1")
    seq_len: Optional[int] = setting(None, "tokens per training window (default: the model's block_size)", "int>=1")
    max_steps: int = setting(300, "optimizer steps", "int>=1")
    lr: float = setting(1e-3, "peak learning rate", "float>0")
    min_lr: Optional[float] = setting(None, "learning rate at the end of the cosine (default: 1e-4, or --lr where "
                                      "that is lower)", "float>=0")
    warmup: int = setting(30, "linear warmup steps", "int>=0")
    weight_decay: float = setting(0.1, "AdamW's weight decay, on matrices only", "float>=0")
    beta1: float = setting(0.9, "AdamW's beta1", "[0,1)")
    beta2: float = setting(0.95, "AdamW's beta2", "[0,1)")
    grad_clip: float = setting(1.0, "gradient norm clip (0 = off)", "float>=0")
    ckpt_every: int = setting(100, "checkpoint interval (every checkpoint is kept)", "int>=1")
    eval_every: int = setting(100, "validation interval (0 = never)", "int>=0")
    eval_sequences: int = setting(64, "validation windows of seq_len tokens", "int>=1")
    log_every: int = setting(10, "train record interval: loss, lr, speed (0 = no train records)", "int>=0")
    device: str = setting("auto", DEVICE_HELP)
    dtype: Optional[str] = setting(None, "autocast dtype of the forward pass (weights and optimizer stay float32); "
                                   "default bfloat16 on CUDA, float32 elsewhere", choices=tuple(DTYPES))
    compile: bool = setting(False, "torch.compile the model")
    compile_mode: str = setting("default", COMPILE_MODE_HELP, choices=COMPILE_MODES)
    peak_tflops: Optional[float] = setting(None, "bf16 peak per GPU for MFU (default: common.BF16_PEAK_FLOPS)",
                                           "float>0")

    def __post_init__(self):
        check_settings(self)
        check_compile_mode(self.compile, self.compile_mode)
        if self.micro_batch is not None and self.batch_size % self.micro_batch:
            raise ValueError(f"--batch_size {self.batch_size} (sequences per step) must be a multiple of --micro_batch "
                             f"{self.micro_batch}")
        if self.min_lr is not None and self.min_lr > self.lr:
            raise ValueError(f"--min_lr {self.min_lr} is above the peak --lr {self.lr}")

    def resolved(self) -> "TrainConfig":
        """The run's settings with the defaults that follow other settings filled in (what a run records): min_lr
        1e-4, or lr where that is lower; embed_seed the init seed (runs from two seeds share nothing). Left unset
        in the config itself, so that a template with another lr or init seed derives them anew."""
        return dataclasses.replace(self, min_lr=min(1e-4, self.lr) if self.min_lr is None else self.min_lr,
                                   embed_seed=self.init_seed if self.embed_seed is None else self.embed_seed)


# Settings that define a run: resume refuses to continue a run under different ones, since the
# result would be neither the old run nor a new one. (micro_batch, device, logging may change.)
RUN_DEFINING = ("data", "init_seed", "embed_seed", "data_seed", "init_from", "batch_size", "seq_len", "max_steps",
                "lr", "min_lr", "warmup", "weight_decay", "beta1", "beta2", "grad_clip")


# ----------------------------------------------------------------------------- optimization

def lr_at(step: int, lr: float, min_lr: float, warmup: int, max_steps: int) -> float:
    """Linear warmup over `warmup` steps, then cosine decay from lr to min_lr at max_steps."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: GPT, args, device_type: str) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (weights, embeddings) only, not on biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [dict(params=[p for p in params if p.dim() >= 2], weight_decay=args.weight_decay),
              dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)]
    fused = dict(fused=True) if device_type == "cuda" else {}   # one kernel for all parameters
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), **fused)


def forward_backward(model, batches, accum: int, ddp: bool, autocast, graphs: bool = False) -> torch.Tensor:
    """Accumulate into .grad the gradient of the mean loss over `accum` equal micro-batches (x, y),
    i.e. the gradient of one batch `accum` times larger; return that mean loss (a device tensor).
    graphs: the model replays CUDA graphs (run["graphs"]). Each micro-step is then a replay of its own, and the
    gradients a replay hands to .grad are the graph's own buffers, which the next replay overwrites while autograd
    would add into them (pytorch/pytorch#169545). So the micro-steps' sum is kept in tensors of our own, taken
    from .grad after each backward, in the order autograd adds them, and given to .grad after the last."""
    mean_loss = torch.zeros((), device=next(model.parameters()).device)
    keep = graphs and accum > 1         # the micro-steps' sum kept apart (above)
    params = [p for p in model.parameters() if p.requires_grad] if keep else []
    summed = None
    for m, (x, y) in enumerate(batches):
        # DDP all-reduces gradients on every backward; only the last micro-step needs it
        sync = model.no_sync() if ddp and m < accum - 1 else contextlib.nullcontext()
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with sync:
            with autocast:
                _, loss = model(x, y)
            (loss / accum).backward()
        mean_loss += loss.detach().float() / accum
        if keep:
            grads = [p.grad for p in params]
            if summed is None:
                summed = [g.clone() for g in grads]
            else:
                torch._foreach_add_(summed, grads)
            for p in params:
                p.grad = None
    if summed is not None:
        for p, g in zip(params, summed):
            p.grad = g
    return mean_loss


def train_step(model, raw: GPT, optimizer, lr: float, batches, args, run: dict) -> torch.Tensor:
    """One optimizer step at learning rate lr over the step's micro-batches (model: the module that runs them,
    raw: the model whose gradients are clipped); returns the step's mean loss, on the device."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    step_loss = forward_backward(model, batches, run["accum"], run["ddp"], run["autocast"], run["graphs"])
    if args.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(raw.parameters(), args.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return step_loss


def micro_batches(args, run: dict, start: int):
    """This rank's micro-batches (x, y) of steps start .. max_steps - 1, in order. Each is handed out only once the
    one after it is fetched, as nanoGPT prefetches: on CUDA the next one's copy (pinned, non-blocking) runs while
    the device works, and the next step's first micro-batch is on its way before this step's loss is read."""
    tokens, T, micro = run["data"]["train"], run["T"], run["micro"]
    fetched = None
    for step in range(start, args.max_steps):
        offsets = batch_offsets(args.data_seed, step, len(tokens), T, args.batch_size, run["doc_len"])
        for m in range(run["accum"]):
            batch = get_batch(tokens, micro_offsets(offsets, m, run["rank"], run["world"], micro), T, run["device"])
            if fetched is not None:
                yield fetched
            fetched = batch
    if fetched is not None:
        yield fetched


def train_flops_per_token(model: GPT, T: int) -> float:
    """6 N + 12 L H Q T (PaLM appendix B): N = the matmul parameters (blocks and LM head; the
    embedding lookup costs nothing), forward + backward; attention scores and values at context T."""
    cfg = model.config
    n = model.num_params(include_embeddings=False) + cfg.vocab_size * cfg.n_embd
    return 6 * n + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * T


@torch.no_grad()
def evaluate(model: GPT, val: np.ndarray, T: int, n_seq: int, micro_batch: int, rank: int, world: int,
             device, autocast, doc_len: int = 0) -> float:
    """Mean next-token loss on the first n_seq non-overlapping windows of val.bin (its first n_seq
    documents, with doc_len), split over ranks."""
    mine = list(range(rank, n_seq, world))
    total = torch.zeros(2, device=device, dtype=torch.float64)   # sum of losses, number of windows
    model.eval()
    for i in range(0, len(mine), micro_batch):
        chunk = mine[i:i + micro_batch]
        x, y = get_batch(val, [j * (doc_len or T) for j in chunk], T, device)
        with autocast:
            _, loss = model(x, y)
        total += torch.stack([loss.double() * len(chunk), torch.tensor(len(chunk), device=device).double()])
    model.train()
    if world > 1:
        dist.all_reduce(total)
    return (total[0] / total[1]).item()


# ----------------------------------------------------------------------------- checkpoints

def checkpoint_path(out_dir: str, step: int) -> str:
    return os.path.join(out_dir, f"ckpt_{step:07d}.pt")


def list_checkpoints(out_dir: str) -> list:
    """(step, path) of every checkpoint in out_dir, by step."""
    if not os.path.isdir(out_dir):
        return []
    found = [(int(m.group(1)), os.path.join(out_dir, f)) for f in os.listdir(out_dir)
             if (m := re.fullmatch(r"ckpt_(\d+)\.pt", f))]
    return sorted(found)


def save_checkpoint(args, run: dict, step: int, raw: GPT, optimizer) -> None:
    """ckpt_STEP.pt, written whole or not at all (a run killed mid-write leaves the old file or the new one)."""
    meta = dict(optimizer=optimizer.state_dict(), seeds=run["seeds"], tokenizer=run["data"]["meta"]["tokenizer"],
                args=dataclasses.asdict(args), rng=dict(cpu=torch.get_rng_state()), init_from=args.init_from,
                data_meta=run["data"]["meta"], provenance=provenance(run["device"], run["autocast_dtype"]))
    atomic_write(checkpoint_path(args.out_dir, step), lambda tmp: write_checkpoint(tmp, raw, step, **meta))


NEVER = torch.iinfo(torch.int64).max        # the first bad step of a run whose losses are all finite


def first_bad_step(first_bad: torch.Tensor, ddp: bool) -> torch.Tensor:
    """The run's first step with a NaN/inf loss over all ranks (NEVER: none), still on the device: tracked there,
    so checking costs one sync at a log record or a checkpoint instead of one every step."""
    bad = first_bad.clone()
    if ddp:
        dist.all_reduce(bad, op=dist.ReduceOp.MIN)   # every rank stops together
    return bad


def stop_at_bad_loss(bad: int, out_dir: str) -> None:
    """Stop the run if a step's loss was NaN/inf (bad: that step, from first_bad_step), before anything is saved."""
    if bad != NEVER:
        last = list_checkpoints(out_dir)
        raise FloatingPointError(f"non-finite loss at step {bad}; stopped without saving. The last "
                                 f"checkpoint, from before it: {last[-1][1] if last else 'none'}")


# ----------------------------------------------------------------------------- set-up (checks first)

def resolve_run(args: TrainConfig) -> dict:
    """Every check that can fail, before anything is written: the device and dtype, the data, the config,
    --init_from, the batch split. (--resume is checked against out_dir under its lock: resume_state.)
    Returns what the run needs."""
    world = torchrun_rank()[1]
    device = rank_device(resolve_device(args.device))      # under torchrun: this rank's GPU
    autocast_dtype = DTYPES[args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    check_dtype_runs(device, autocast_dtype)
    check_output(args.out_dir, "--out_dir")
    if args.resume and not list_checkpoints(args.out_dir):
        raise FileNotFoundError(f"--resume: {args.out_dir} holds no checkpoint to resume; drop --resume to start "
                                f"a new run there")
    data = load_data(args.data)
    meta = data["meta"]
    overrides = dict(args.knobs)
    base = None
    if args.init_from:
        base = read_checkpoint(args.init_from, mmap=True)      # checks only: the weights are read below
        if not args.resume:         # resumed, the run's own checkpoint holds the weights: --init_from's are not read
            hf.check_weights_finite(args.init_from)
        config = GPTConfig(**base["config"])
        asked = get_config(args.model, **overrides) if args.model else dataclasses.replace(config, **overrides)
        differ = [f"{k}: flags {getattr(asked, k)!r}, checkpoint {getattr(config, k)!r}"
                  for k in dataclasses.asdict(config)
                  if getattr(asked, k) != getattr(config, k) and (k != "vocab_size" or "vocab_size" in overrides)]
        if differ:
            raise ValueError(f"--init_from {args.init_from} is another architecture than the flags ask for: "
                             + "; ".join(differ) + ". Drop --model and the knob flags to take the checkpoint's.")
        if base.get("tokenizer") not in (None, meta["tokenizer"]):
            raise ValueError(f"--init_from {args.init_from} was trained on {base['tokenizer']} tokens, but "
                             f"{args.data} holds {meta['tokenizer']} tokens; prepare the data with its tokenizer")
    else:
        overrides.setdefault("vocab_size", meta["vocab_size"])   # the model's vocab comes from meta.json
        config = get_config(args.model or "tiny", **overrides)
    if meta["vocab_size"] > config.vocab_size:
        raise ValueError(f"{args.data} has vocab {meta['vocab_size']} ({meta['tokenizer']}), more than the "
                         f"model's vocab_size={config.vocab_size}; raise --vocab_size or re-prepare the data")
    T = args.seq_len or config.block_size
    if T > config.block_size:
        raise ValueError(f"--seq_len {T} exceeds the model's block_size {config.block_size}")
    doc_len = meta.get("doc_len", 0)
    if doc_len and doc_len != T + 1:
        raise ValueError(f"{args.data} holds documents of {doc_len} tokens, so the training window (--seq_len, "
                         f"default block_size) must be {doc_len - 1} (inputs and their next-token targets), not {T}")
    if meta["train_tokens"] <= T + 1:
        raise ValueError(f"train.bin has {meta['train_tokens']} tokens, too few for windows of block_size={T}; "
                         f"lower --block_size or prepare more text")
    windows = meta["val_tokens"] // doc_len if doc_len else (meta["val_tokens"] - 1) // T
    if args.eval_every and windows < args.eval_sequences:
        raise ValueError(f"--eval_sequences {args.eval_sequences} needs that many windows of {T} tokens, but val.bin "
                         f"holds {meta['val_tokens']} tokens ({windows} windows); lower "
                         f"--eval_sequences, raise prepare's --val_fraction, or pass --eval_every 0")
    micro = args.micro_batch or args.batch_size // world
    if micro < 1 or args.batch_size % (micro * world):
        raise ValueError(f"--batch_size {args.batch_size} (sequences per step) must be a multiple of "
                         f"--micro_batch {micro} x {world} processes")
    autocast = (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype != torch.float32
                else contextlib.nullcontext())
    graphs = replays_cuda_graphs(args.compile, args.compile_mode, device)
    if graphs and "RANK" in os.environ:
        raise ValueError(f"--compile_mode {args.compile_mode} replays CUDA graphs, which train.py runs in a plain "
                         f"process only: the micro-steps' gradient is summed outside autograd (forward_backward), "
                         f"where DDP's all-reduce would not see it. Under torchrun use --compile_mode default or "
                         f"max-autotune-no-cudagraphs")
    return dict(data=data, config=config, base=base, micro=micro, accum=args.batch_size // (micro * world),
                device=device, autocast_dtype=autocast_dtype, autocast=autocast, T=T, doc_len=doc_len,
                rank=torchrun_rank()[0], world=world, graphs=graphs)


def resume_state(args: TrainConfig, config: GPTConfig, meta: dict) -> Optional[dict]:
    """The last checkpoint of the run in out_dir to continue, or None for a new run; read under the lock.
    A run is continued only when asked (--resume) and only under the settings, config and data it began with."""
    existing = list_checkpoints(args.out_dir)
    if existing and not args.resume:
        raise ValueError(f"{args.out_dir} already holds checkpoints; pass --resume to continue that run, "
                         f"or choose another --out_dir")
    if not existing:
        if args.resume:
            raise FileNotFoundError(f"--resume: {args.out_dir} holds no checkpoint to resume; drop --resume to start "
                                    f"a new run there")
        return None
    state = read_checkpoint(existing[-1][1])
    rng = state.get("rng")
    if not isinstance(state.get("optimizer"), dict) or not isinstance(state.get("args"), dict) or not isinstance(
            rng, dict) or not isinstance(rng.get("cpu"), torch.Tensor) or not isinstance(state.get("step"), int):
        raise ValueError(f"--resume: {existing[-1][1]} lacks the optimizer, rng, args or step of a train.py run "
                         f"(damaged, or written by something else); resume from another directory or start anew")
    differ = run_differences(args, config, meta, state)
    if differ:
        raise ValueError(f"--resume: this command differs from the run in {args.out_dir}: "
                         + ", ".join(differ) + ". Resume with the same settings, or use another --out_dir")
    return state


def run_differences(args: TrainConfig, config: GPTConfig, meta: dict, state: dict) -> list:
    """What sets the run `args` describes apart from the run whose checkpoint `state` is: a setting that defines
    a run (RUN_DEFINING), the model config, or the data. Empty: the same run."""
    saved = state.get("args", {})
    def same(k, a, b):     # a path spelled another way (./out/x, or absolute) names the same data or checkpoint
        if k in ("data", "init_from") and isinstance(a, str) and isinstance(b, str):
            return os.path.realpath(a) == os.path.realpath(b)
        return a == b
    differ = [f"--{k} {getattr(args, k)!r} (checkpoint: {saved.get(k)!r}"
              + (": runs made before the embedding seed followed --init_seed used 0; pass --embed_seed 0)"
                 if k == "embed_seed" and saved.get(k) == 0 else ")")
              for k in RUN_DEFINING if not same(k, getattr(args, k), saved.get(k))]
    if state.get("config") != dataclasses.asdict(config):
        differ.append("the model config")
    old = state.get("data_meta")
    if old is not None and {k: old.get(k) for k in ("train_tokens", "val_tokens", "sha256", "tokenizer")} != \
            {k: meta.get(k) for k in ("train_tokens", "val_tokens", "sha256", "tokenizer")}:
        differ.append(f"the data in {args.data} (changed since the run began)")
    return differ


def ensure(args: TrainConfig) -> dict:
    """Train the run `args` describes unless out_dir already holds it finished; continue it if it stopped
    part-way. Returns its log. How experiments get a trained model: one call, never a second training. A
    finished run made with other settings (another --lr, --max_steps, model or data into the same --out) is
    refused, never passed off as this one."""
    args = args.resolved()
    found = list_checkpoints(args.out_dir)
    args = dataclasses.replace(args, resume=bool(found))
    log_path = os.path.join(args.out_dir, "log.json")
    if found:
        run = resolve_run(args)
        differ = run_differences(args, run["config"], run["data"]["meta"], read_checkpoint(found[-1][1], mmap=True))
        if differ:
            raise ValueError(f"{args.out_dir} holds a run made otherwise (in train.py's terms: " + ", ".join(differ)
                             + "). Use another --out, or remove that directory, to train this one")
        if found[-1][0] >= args.max_steps and os.path.isfile(log_path):
            return read_json(log_path, "training log")
    return train(args)


# ----------------------------------------------------------------------------- the log

LOG_SECONDS = 5.0     # between evaluations and checkpoints, log.json is written again at most this often


def due(step: int, every: int, max_steps: int) -> bool:
    """Whether what is done every `every` steps (0: never) is done after `step`: at its multiples and at the end."""
    return bool(every) and (step % every == 0 or step == max_steps)


@dataclass
class Interval:
    """The steps since the last train record, measured on the device so that no step waits for the host: their
    summed loss, their number and the time they began; and the run's first step whose loss was NaN/inf (NEVER:
    none yet), which each record and each checkpoint checks."""
    loss_sum: torch.Tensor
    first_bad: torch.Tensor
    t0: float = 0.0
    steps: int = 0

    def add(self, step_loss: torch.Tensor, step: int) -> None:
        self.first_bad = torch.where(torch.isfinite(step_loss), self.first_bad, self.first_bad.clamp(max=step))
        self.loss_sum += step_loss
        self.steps += 1

    def send(self, step: int, lr: float, ddp: bool) -> dict:
        """The record of these steps on its way to the host, and a new interval begun (its clock is set when the
        record is read). On CUDA the values are copied without waiting (into pinned memory) and an event marks
        their arrival, so the loop reads the record a step late, with the next step queued behind it: the device
        never idles while the host waits, prints and appends. On a CPU the values are there once computed, so
        the record's time is taken here."""
        bad = first_bad_step(self.first_bad, ddp)
        if ddp:
            dist.all_reduce(self.loss_sum)
        cuda = bad.device.type == "cuda"
        flight = dict(step=step, lr=lr, steps=self.steps, t0=self.t0, bad=bad.to("cpu", non_blocking=cuda),
                      loss_sum=self.loss_sum.to("cpu", non_blocking=cuda), arrived=None)
        if cuda:
            flight["arrived"] = torch.cuda.Event()
            flight["arrived"].record()
        flight["at"] = time.time()
        self.loss_sum, self.steps = torch.zeros_like(self.loss_sum), 0
        return flight


def log_train(log: dict, flight: dict, args, run: dict) -> float:
    """Read a record sent by Interval.send: stop at a NaN/inf loss, else append the record to the log and print it.
    Returns the time its last step was known done, where the next interval's clock starts unless the training
    pauses in between."""
    at = flight["at"]
    if flight["arrived"] is not None:
        flight["arrived"].synchronize()    # waits for this record's own step only: the next one is queued behind it
        at = time.time()
    stop_at_bad_loss(int(flight["bad"]), args.out_dir)
    steps, dt = flight["steps"], at - flight["t0"]
    loss = flight["loss_sum"].item() / steps / run["world"]
    tok_s = steps * args.batch_size * run["T"] / dt
    mfu = run["flops_per_token"] * tok_s / (run["peak"] * run["world"]) if run["peak"] else None
    # wall: seconds from this process's start of the run to the moment this record's step was known done. The gap
    # between two records holds all that ran between them, pauses included (evaluation, checkpoints, the log.json
    # written there), which ms_per_step leaves out: the clock that another program's wall-clock step times are read
    # against. A log.json written between pauses is in both: on a GPU it overlaps the steps queued, and counts only
    # where it outlasts them
    log["train"].append(dict(step=flight["step"], loss=loss, lr=flight["lr"], tokens_per_s=tok_s, mfu=mfu,
                             ms_per_step=1000 * dt / steps, wall=at - run["began"]))
    if run["rank"] == 0:
        print(f"step {flight['step']:>6} | loss {loss:.4f} | lr {flight['lr']:.2e} | {tok_s:,.0f} tok/s | "
              f"mfu {f'{100 * mfu:.1f}%' if mfu else 'n/a'} | {1000 * dt / steps:.1f} ms/step | "
              f"ETA {eta(dt / steps * (args.max_steps - flight['step']))}")
    return at


def validate(args, run: dict, raw: GPT, step: int, log: dict) -> None:
    """The validation loss at `step`, appended to the log and printed; a NaN/inf one stops the run unsaved."""
    loss = evaluate(raw, run["data"]["val"], run["T"], args.eval_sequences, run["micro"], run["rank"], run["world"],
                    run["device"], run["autocast"], run["doc_len"])
    if not math.isfinite(loss):
        raise FloatingPointError(f"non-finite validation loss at step {step}; stopped without saving it")
    log["val"].append(dict(step=step, val_loss=loss, val_ppl=math.exp(min(loss, 50.0))))
    if run["rank"] == 0:
        print(f"step {step:>6} | val loss {loss:.4f} | val ppl {math.exp(min(loss, 50.0)):.2f}")


def save_log(args, run: dict, log: dict) -> None:
    """log.json: the records so far with the run's settings, seeds and provenance, written whole. Not at every
    record: rewriting it (provenance, a JSON encode, an fsync) while the device waits would cost each step
    milliseconds, more as the log grows. It is written at pauses (eval_and_save), at the end, and between pauses
    every LOG_SECONDS while the device works through the steps queued (_train's loop)."""
    how = provenance(run["device"], run["autocast_dtype"], run["began"])    # this run's wall time, not the process's
    write_json(os.path.join(args.out_dir, "log.json"), dict(log, args=dataclasses.asdict(args), seeds=run["seeds"],
                                                            provenance=how))


def eta(seconds: float) -> str:
    return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"


def plot_log(log: dict, path: str) -> None:
    plt, fig, ax = figure()
    if log["train"]:
        ax.plot([r["step"] for r in log["train"]], [r["loss"] for r in log["train"]], label="train")
    if log["val"]:
        ax.plot([r["step"] for r in log["val"]], [r["val_loss"] for r in log["val"]], "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    if log["train"] or log["val"]:
        ax.legend()
    save_figure(fig, path)


# ----------------------------------------------------------------------------- training

def train(args: TrainConfig) -> dict:
    """Train one run; returns its log (train and validation records). The run holds a lock on out_dir
    while it works (rank 0 under torchrun): a second run into the same directory is refused."""
    args = args.resolved()
    run = resolve_run(args)        # raises before anything is written or any process group exists
    master = torchrun_rank()[0] == 0
    with lock_dir(args.out_dir, "--out_dir") if master else contextlib.nullcontext(), tf32(run["device"]):
        run["resume"] = resume_state(args, run["config"], run["data"]["meta"]) if master else None
        return _train(args, run)


@contextlib.contextmanager
def tf32(device: torch.device):
    """On CUDA, float32 matmuls outside autocast use TF32 tensor cores while training; the process's setting
    is restored afterwards, so whatever an experiment computes next in float32 is float32."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def init_model(args, run: dict) -> tuple:
    """The model and the seeds its checkpoints record: a fresh seeded init, or the weights of --init_from (resumed:
    its architecture alone, the run's checkpoint loads the weights)."""
    if run["base"] is not None:
        model = GPT(run["config"]).to(run["device"]) if args.resume else \
            load_checkpoint(args.init_from, device=str(run["device"]))
        seeds = run["base"].get("seeds", {})    # the init seeds of the lineage, not of this command
    else:
        model = build(run["config"], args.init_seed, args.embed_seed, device=str(run["device"]))
        seeds = dict(init_seed=args.init_seed, embed_seed=args.embed_seed)
    return model, dict(seeds, data_seed=args.data_seed)


def resume(args, state: Optional[dict], model: GPT, optimizer) -> tuple:
    """The step the run starts at and its log so far: 0 and an empty log for a new run (state None), else the
    checkpoint `state` loaded into the model and the optimizer with its CPU RNG state, and the records of log.json
    up to its step (a run that stopped after its last checkpoint may have logged steps past it: they run again)."""
    log = dict(train=[], val=[])
    if state is None:
        return 0, log
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["cpu"])
    path = os.path.join(args.out_dir, "log.json")
    if os.path.isfile(path):
        old = read_json(path, "training log")
        log = {k: [r for r in old.get(k, []) if r["step"] <= state["step"]] for k in log}
    return state["step"], log


def wrap(model: GPT, args, run: dict) -> torch.nn.Module:
    """The module that runs the steps: compiled with --compile, in DDP under torchrun."""
    if args.compile:
        # a fresh compile cache per run: experiments train many models in one process, and past dynamo's
        # recompile limit a compiled forward would fall back to eager without a word
        torch._dynamo.reset()
        model = torch.compile(model, mode=args.compile_mode)
    if run["ddp"]:
        model = DDP(model, device_ids=[run["device"].index] if run["device"].type == "cuda" else None)
    return model


def describe(args, run: dict, raw: GPT) -> str:
    """The run in one line: its size, the split of a step's batch, and what runs it."""
    amp = run["autocast_dtype"] != torch.float32
    return (f"{raw.num_params():,} parameters | {run['world']} process(es) x {run['micro']} sequences x "
            f"{run['accum']} micro-steps = {args.batch_size} x {run['T']} = {args.batch_size * run['T']:,} "
            f"tokens/step | {run['device']}{' | DDP over ' + dist.get_backend() if run['ddp'] else ''}"
            f"{' autocast ' + str(run['autocast_dtype']).replace('torch.', '') if amp else ''}"
            f"{f' compiled ({args.compile_mode})' if args.compile else ''}")


def first_step(step: int, args, run: dict, t0: float) -> dict:
    """The time of this process's first step (its compiling with --compile, the device's set-up), waited for once
    and reported apart, so that a compile is not read as throughput; the records' clock still counts it."""
    if run["device"].type == "cuda":
        torch.cuda.synchronize(run["device"])
    seconds = time.time() - t0
    if run["rank"] == 0:
        print(f"step {step:>6} | first step of this process: {seconds:.1f} s"
              + (f", compiling the model ({args.compile_mode})" if args.compile else ""))
    return dict(step=step, seconds=seconds, compile_mode=args.compile_mode if args.compile else None)


def eval_and_save(step: int, args, run: dict, raw: GPT, optimizer, log: dict, first_bad: torch.Tensor) -> None:
    """Where training pauses after `step`: the validation loss when due, log.json (rank 0), and a checkpoint when
    due, once no loss so far was NaN/inf. The log goes first: a run resumed from the checkpoint finds its records."""
    if due(step, args.eval_every, args.max_steps):
        validate(args, run, raw, step, log)
    if run["rank"] == 0:
        save_log(args, run, log)
    if due(step, args.ckpt_every, args.max_steps):
        stop_at_bad_loss(first_bad_step(first_bad, run["ddp"]).item(), args.out_dir)
        if run["rank"] == 0:
            save_checkpoint(args, run, step, raw, optimizer)


def _train(args: TrainConfig, run: dict) -> dict:
    ddp = join_process_group(run["device"])      # under torchrun, even a world of one: the DDP path runs
    if ddp and run["rank"]:        # every rank continues from the checkpoint rank 0 chose under the lock
        existing = list_checkpoints(args.out_dir) if args.resume else []
        run["resume"] = read_checkpoint(existing[-1][1]) if existing else None
    master, device = run["rank"] == 0, run["device"]
    raw, seeds = init_model(args, run)
    optimizer = make_optimizer(raw, args, device.type)
    run = dict(run, ddp=ddp, seeds=seeds, began=time.time(), flops_per_token=train_flops_per_token(raw, run["T"]),
               peak=args.peak_tflops * 1e12 if args.peak_tflops else peak_flops(device))
    start, log = resume(args, run["resume"], raw, optimizer)
    model = wrap(raw, args, run)       # raw keeps the weights that are evaluated and saved
    if master:
        os.makedirs(args.out_dir, exist_ok=True)
        if run["resume"] is not None:
            print(f"resuming {args.out_dir} at step {start}")
        print(describe(args, run, raw))
    interval = Interval(torch.zeros((), device=device), torch.full((), NEVER, device=device))
    if run["resume"] is None:
        eval_and_save(0, args, run, raw, optimizer, log, interval.first_bad)   # the init: the root of the lineage

    batches = micro_batches(args, run, start)
    flight = None                      # the last train record, on its way from the device (Interval.send)
    interval.t0 = written = time.time()
    saved = len(log["train"])          # the train records in log.json's last write
    for step in range(start, args.max_steps):
        done = step + 1
        lr = lr_at(step, args.lr, args.min_lr, args.warmup, args.max_steps)
        interval.add(train_step(model, raw, optimizer, lr, islice(batches, run["accum"]), args, run), done)
        if step == start:
            log["first_step"] = first_step(done, args, run, interval.t0)
        pause = due(done, args.eval_every, args.max_steps) or due(done, args.ckpt_every, args.max_steps)
        if master and not pause and len(log["train"]) > saved and time.time() - written >= LOG_SECONDS:
            # before the record in flight is read: the device works through this step and the one before it while
            # the host writes, so it never waits for the write (at a pause the log is written anyway)
            save_log(args, run, log)
            written, saved = time.time(), len(log["train"])
        if flight is not None:         # read a step late: by now this step is queued behind it on the device
            interval.t0 = log_train(log, flight, args, run)
        flight = interval.send(done, lr, ddp) if due(done, args.log_every, args.max_steps) else None
        if pause:
            if flight is not None:     # read at once: the device waits for what follows anyway
                log_train(log, flight, args, run)
                flight = None
            eval_and_save(done, args, run, raw, optimizer, log, interval.first_bad)
            written, saved = time.time(), len(log["train"])
            if interval.steps == 0:    # evaluation, checkpoints and their log.json are not training throughput
                interval.t0 = written
    if master:
        save_log(args, run, log)
        plot_log(log, os.path.join(args.out_dir, "loss.png"))
    if ddp:
        leave_process_group()
    return log


# ----------------------------------------------------------------------------- command line

def parse_args(argv=None) -> TrainConfig:
    p = ArgumentParser(prog="train.py", description="Train a model from a seeded init on prepared data "
                       "(prepare it first: python data.py --help). --model defaults to tiny, or to the --init_from "
                       "checkpoint's architecture.")
    add_config_flags(p, default_model=None)
    add_settings_flags(p.add_argument_group("the run (TrainConfig)"), TrainConfig())
    args = p.parse_args(argv)
    return TrainConfig(**settings_given(args, TrainConfig), model=args.model, knobs=config_overrides(args))


def main(argv=None):
    return train(parse_args(argv))


if __name__ == "__main__":
    run_script(main, "train.py")
