"""
common.py: the conventions every script and study of this project shares. Not an idea of the paper: the
paper's ideas live in model.py, init.py, theory.py, probe.py, seedprint.py and sink.py (data.py feeds them
inputs, hf.py brings models from disk); this file is how they behave as command-line programs, the same way
in each, so that each script's first screen is its idea.

  errors     bad input refused before any work, one line on stderr, exit 2; a bug: one line, exit 1;
  flags      settings: a dataclass field carries its flag's help and its range, checked once (setting);
             seeds, lists of distinct seeds, on|off, --device and --dtype, output directories
  outputs    a run locks its output directory; every file is written whole or not at all
  results    results.json entries that record how they were made (command, commit, machine); never NaN
  reporting  progress lines, aligned tables, figures (matplotlib, Agg)
  GPUs       torchrun ranks and process groups, the bf16 peak behind MFU

It imports no file of the project. The one idiom for requirements: every script and study imports this file
before any third-party package,

    from common import ...      # first: checks the requirements before torch is imported

and importing it checks them, so `python SCRIPT.py --help` answers even without them, and a run without
them is refused in one line. model.py and theory.py are libraries and need none of it; hf.py's small command
line does without it too (it is the one door to a model on disk, which common.py never opens).
"""
import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from typing import Optional
try:
    import fcntl                      # POSIX file locks: one run per output directory (lock_dir)
except ImportError:                   # Windows has none: runs there are not locked, and lock_dir says so
    fcntl = None


def check_requirements(names=("numpy", "scipy", "torch", "matplotlib")) -> None:
    """Before any of them is imported: are the requirements installed? A script or study of this project run
    without them still answers --help (its docstring; the list of flags needs them) and otherwise says in one
    line what to install, exit code 2. Imported from elsewhere (a notebook, a test), the usual
    ModuleNotFoundError."""
    import importlib.util
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if not missing:
        return
    message = f"needs {', '.join(missing)}: pip install -r requirements.txt"
    main = sys.modules.get("__main__")
    script = os.path.abspath(getattr(main, "__file__", None) or "")
    root = os.path.dirname(os.path.abspath(__file__))
    if os.path.dirname(script) not in (root, os.path.join(root, "studies")):
        raise ModuleNotFoundError(message, name=missing[0])
    name = script_name(script)
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print((main.__doc__ or name).strip())
        print(f"\n(the full list of {name}'s flags {message})")
        sys.exit(0)
    sys.stderr.write(f"{name}: error: {message}\n")
    sys.exit(2)


def script_name(path: str) -> str:
    """How a script or study is named in its messages: probe.py, or studies.lineage_fpr (run with python -m)."""
    folder, file = os.path.split(os.path.abspath(path))
    if os.path.basename(folder) == "studies":
        return f"studies.{os.path.splitext(file)[0]}"
    return file


check_requirements()

import numpy
import torch
import torch.distributed as dist
import torch.nn.functional as F


# ----------------------------------------------------------------------------- errors: one line, exit code 2
# Bad input is refused before any work, in one line on stderr that says what is wrong and what to do,
# with exit code 2; a traceback only when BORN_BIASED_DEBUG=1 asks for one. An error that is not bad input
# (a bug) is one line too, exit code 1, and says how to get its traceback.

DEBUG_ENV = "BORN_BIASED_DEBUG"


def one_line(message) -> str:
    """A message as one line of plain text: its whitespace runs made one space, and any other character a terminal
    would act on (an escape code in a file name) shown escaped, never sent raw."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(str(message).split()))


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (no usage block) and exit code 2, as every other refusal."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")
        sys.exit(2)


def run_script(main_fn, name: str, argv=None):
    """Run a script's main under the convention above."""
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    out_of_memory = "not enough memory ({}); use a smaller model, fewer or shorter sequences, or another --device"
    try:
        return main_fn(argv)
    except KeyboardInterrupt:
        sys.stderr.write(f"{name}: interrupted\n")
        sys.exit(130)
    except Exception as e:
        if debug:
            raise
        if isinstance(e, (OSError, ValueError, FloatingPointError)):     # bad input, a missing file, NaN activations
            sys.stderr.write(f"{name}: error: {one_line(e)}\n")
        elif isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(e):
            sys.stderr.write(f"{name}: error: {out_of_memory.format(one_line(e)[:120])}\n")
        else:
            sys.stderr.write(f"{name}: internal error {type(e).__name__}: {one_line(e)} (a bug: rerun with "
                             f"{DEBUG_ENV}=1 for the traceback and report it)\n")
            sys.exit(1)
        sys.exit(2)


# ----------------------------------------------------------------------------- flags: settings with their ranges
# A setting is a dataclass field that carries its flag's help and its range (setting()). The flag is generated
# from the field (add_settings_flags), and the range is checked once, by the dataclass itself (check_settings in
# its __post_init__), whether the value came from the command line or from code; the flag's type is the same
# check, so a bad value on the command line is refused as it is parsed. Flags that are no dataclass's take their
# type from the same table (flag_type), lists of seeds must be distinct (Distinct).

SEED_LIMIT = 2 ** 63            # seeds lie in [0, 2^63): numpy and torch take no other


def parse_bool(s: str) -> bool:
    low = str(s).lower()
    if low in ("1", "true", "on", "yes"):
        return True
    if low in ("0", "false", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on/off, got {s!r}")


F32_MAX = 3.4e38                # a larger number overflows the float32 state it ends up in (optimizer, weights)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < F32_MAX


def range_rule(check: str):
    """(test, what a value must be) of a range: "int>=N" (an integer, at least N), "int>=N,<=M" (and at most M),
    "seed", "float>0", "float>=0", "[0,1)" or "(0,1)" (numbers), "seeds" (a list of distinct seeds)."""
    if check.startswith("int>="):
        low, _, high = check[5:].partition(",<=")
        low, high = int(low), int(high) if high else None
        if high is None:
            return (lambda v: _integer(v) and v >= low), f"an integer >= {low}"
        return (lambda v: _integer(v) and low <= v <= high), f"an integer in [{low}, {high}]"
    rules = {"seed": (lambda v: _integer(v) and 0 <= v < SEED_LIMIT, "an integer in [0, 2^63)"),
             "float>0": (lambda v: _real(v) and v > 0, "a finite number > 0"),
             "float>=0": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
             "[0,1)": (lambda v: _real(v) and 0 <= v < 1, "a number in [0, 1)"),
             "(0,1)": (lambda v: _real(v) and 0 < v < 1, "a number in (0, 1)"),
             "seeds": (lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and len(set(v)) == len(v)
                       and all(_integer(x) and 0 <= x < SEED_LIMIT for x in v), "a list of distinct seeds")}
    if check not in rules:
        raise KeyError(f"unknown range {check!r}")
    return rules[check]


def flag_type(check: str):
    """An argparse type that parses a number and checks it against range_rule(check) ("seeds": each seed)."""
    test, what = range_rule("seed" if check == "seeds" else check)
    kind = int if check.startswith("int") or check.startswith("seed") else float

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value
    return parse


seed_int = flag_type("seed")          # the argparse type of a seed


def seed_range(first: int, count: int, flag: str) -> list:
    """`count` consecutive seeds from `first` (a study's seeds from --X_seed0), refused where they pass the last
    seed 2^63 - 1."""
    if first + count > SEED_LIMIT:
        raise ValueError(f"{flag} {first} and {count} seeds after it pass the largest seed 2^63 - 1; lower {flag}")
    return list(range(first, first + count))


class Distinct(argparse.Action):
    """A list flag whose values must differ: a repeated seed would be one model counted twice (a model compared
    with itself is no unrelated pair, one run twice gives an interval of zero width)."""

    def __call__(self, parser, namespace, values, option_string=None):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            parser.error(f"{option_string} lists {repeated[0]} more than once: each value names one model or run; "
                         f"give distinct values")
        setattr(namespace, self.dest, values)


def setting(default, help: str, check: Optional[str] = None, choices: tuple = None):
    """A dataclass field with its flag's help and its range (range_rule), or its choices."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=dict(help=help, check=check))
    return dataclasses.field(default=default, metadata=dict(help=help, check=check, choices=choices))


def check_settings(obj) -> None:
    """Every setting of the dataclass instance `obj` in its range, each refusal naming its flag. None passes where
    the field's type allows it (Optional)."""
    for f in dataclasses.fields(obj):
        value, check, choices = getattr(obj, f.name), f.metadata.get("check"), f.metadata.get("choices")
        if value is None and "Optional" in str(f.type):
            continue
        if choices is not None and value not in choices:
            raise ValueError(f"--{f.name} must be one of {', '.join(map(str, choices))}, got {value!r}")
        if check is not None:
            test, what = range_rule(check)
            if not test(value):
                raise ValueError(f"--{f.name} must be {what}, got {value!r}")


def add_settings_flags(parser, template, names=None) -> None:
    """One flag per setting of the dataclass instance `template` (or of those in `names`), its value the flag's
    default: a study passes its own template, with its own defaults, and never declares the flag again."""
    for f in dataclasses.fields(template):
        if "help" not in f.metadata or (names is not None and f.name not in names):
            continue
        default, check, choices = getattr(template, f.name), f.metadata.get("check"), f.metadata.get("choices")
        extra = dict(choices=choices) if choices else {}
        if f.type is bool:                   # --resume alone is on; --compile off
            extra = dict(type=parse_bool, nargs="?", const=True, metavar="on|off")
        elif check == "seeds":
            extra = dict(type=flag_type(check), nargs="+", action=Distinct, metavar="SEED")
        elif check is not None:
            extra = dict(type=flag_type(check), metavar="INT" if check.startswith(("int", "seed")) else "FLOAT")
        elif "float" in str(f.type):
            extra = dict(type=float, metavar="FLOAT")
        elif "int" in str(f.type):
            extra = dict(type=int, metavar="INT")
        shown = "" if default is None or isinstance(default, bool) else f" (default {default})"
        parser.add_argument(f"--{f.name}", default=default, help=f.metadata["help"] + shown, **extra)


def refuse_unused(args: argparse.Namespace, names, template: str, parser=None) -> None:
    """A flag that would do nothing is refused, never recorded as if it had done something. The flags among
    `names` that the command line set -- apart from their default in `parser`, or from None without one -- are
    refused in one line: `template` says why, naming them as {flags} (the one placeholder read: a path with braces
    in the template stays as it is)."""
    default = parser.get_default if parser is not None else (lambda name: None)
    unused = [f"--{name}" for name in names if getattr(args, name) != default(name)]
    if unused:
        message = template.replace("{flags}", ", ".join(unused)) + f"; drop {'them' if len(unused) > 1 else 'it'}"
        if parser is not None:
            parser.error(message)
        raise ValueError(message)


def settings_given(args: argparse.Namespace, cls, names=None) -> dict:
    """The settings of the dataclass `cls` (or those in `names`) found in parsed flags (add_settings_flags)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if "help" in f.metadata and hasattr(args, f.name) and (names is None or f.name in names)}


def check_output(path: str, flag: str = "--out") -> str:
    """An output directory given on the command line, checked before any work: not empty, not a file, and
    not under a file."""
    if not path:
        raise ValueError(f"{flag} is empty; give a directory")
    here = os.path.abspath(path)
    while here and not os.path.exists(here):
        here = os.path.dirname(here)
    if os.path.exists(path) and not os.path.isdir(path) or (here and not os.path.isdir(here)):
        culprit = here if here != os.path.abspath(path) else path
        raise FileExistsError(f"{flag} {path}: {culprit} is a file, not a directory")
    return path


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


DEVICE_HELP = "auto (cuda if available, else cpu), cpu, cuda, cuda:N, mps"


def add_device_flags(parser: argparse.ArgumentParser, dtype_help: str, dtype_default: Optional[str] = None) -> None:
    """--device and --dtype with one vocabulary in every script."""
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=dtype_default, help=dtype_help)


# torch.compile's modes (--compile_mode): "max-autotune-no-cudagraphs" times several kernels for each matrix product
# and fuses what follows it (a bias, GELU) into it where the compiler can; "reduce-overhead" replays CUDA graphs. Each
# is accepted on any device and recorded with the run: without CUDA, CUDA graphs are left out.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead")
COMPILE_MODE_HELP = ("torch.compile's mode with --compile on (max-autotune-no-cudagraphs: autotuned matrix products, "
                     "GELU fused into its product where it can; its compile takes longer)")


def add_compile_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """--compile on|off and --compile_mode with one vocabulary in every script that compiles a pass."""
    parser.add_argument("--compile", type=parse_bool, default=False, metavar="on|off", help=f"torch.compile {what}")
    parser.add_argument("--compile_mode", choices=COMPILE_MODES, default="default", help=COMPILE_MODE_HELP)


def replays_cuda_graphs(compile: bool, mode: str, device: torch.device) -> bool:
    """Whether a model compiled so replays CUDA graphs: "max-autotune" and "reduce-overhead" do, on CUDA only."""
    return compile and mode in ("max-autotune", "reduce-overhead") and device.type == "cuda"


def check_compile_mode(compile: bool, mode: str) -> None:
    """A compile mode other than the default without --compile on would do nothing: refused."""
    if mode != "default" and not compile:
        raise ValueError(f"--compile_mode {mode} goes with --compile on: without it nothing is compiled")


def resolve_device(name: Optional[str] = "auto") -> torch.device:
    """The torch.device a --device flag names; one that is unknown or absent on this machine is refused."""
    name = "auto" if name is None else name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: this machine has no CUDA device that torch {torch.__version__} can "
                             f"use; run with --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"--device {name}: MPS is not available here; run with --device cpu")
    elif device.type != "cpu" or device.index:
        raise ValueError(f"unsupported device {name!r}; use auto, cpu, cuda, cuda:N or mps")
    return device


def check_dtype_runs(device: torch.device, dtype: torch.dtype) -> None:
    """Refuse a dtype the device cannot run, by running the ops a forward pass uses once on tiny tensors."""
    try:
        x = torch.ones(1, 2, 4, 8, device=device, dtype=dtype)
        y = F.scaled_dot_product_attention(x, x, x, is_causal=True)
        F.softmax(F.linear(y, torch.ones(8, 8, device=device, dtype=dtype)).float(), dim=-1)
        torch.rsqrt(x.float().pow(2).mean(-1)).to(dtype).cumsum(-1)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{device} cannot run {str(dtype).replace('torch.', '')} ({one_line(e)[:100]}); "
                         f"choose another --dtype") from None


# ----------------------------------------------------------------------------- outputs: locked, written whole

_HELD = set()                          # the output directories this process holds locked


@contextlib.contextmanager
def lock_dir(path: str, flag: str = "--out"):
    """Hold an exclusive lock on the output directory `path` (created if needed) while a run writes there:
    a second run into it is refused at once, and the first run's files stay as they are. The lock is an
    flock on the directory itself, so it creates no file and dies with its process, however it ends.
    Temp files that a killed run left behind (atomic_write's *.tmpPID) are removed once the lock is held;
    directories made here and still empty when the run stops (it failed before writing) are removed."""
    check_output(path, flag)
    if os.path.realpath(path) in _HELD:              # this process holds it already (a nested writer)
        yield path
        return
    made, parent = [], os.path.abspath(path)
    while not os.path.exists(parent):
        made.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(path, exist_ok=True)
    fd = None
    try:
        if fcntl is None:
            print(f"note: {path} is not locked (no POSIX file locks on this system); run one job per {flag}",
                  file=sys.stderr)
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise OSError(f"{path} is in use by another run that holds its lock; wait for it to finish, or "
                              f"choose another {flag}") from None
        for f in os.listdir(path):
            if re.fullmatch(r".+\.tmp\d+", f) and os.path.isfile(os.path.join(path, f)):
                os.remove(os.path.join(path, f))
        _HELD.add(os.path.realpath(path))
        yield path
    finally:
        _HELD.discard(os.path.realpath(path))
        if fd is not None:
            os.close(fd)                 # closing the descriptor releases the lock
        for d in made:                   # innermost first
            if os.path.isdir(d) and not os.listdir(d):
                os.rmdir(d)


def atomic_write(path: str, write) -> None:
    """write(tmp) to a temp file beside `path`, flush it to disk, then rename it into place: a run killed
    at any moment leaves the old file or the new one, never half a file. For everything a script saves."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: str, obj) -> None:
    """obj as JSON at `path`, written whole. A NaN or inf anywhere in it is refused, naming where: JSON has no such
    number, and no result may come from one (a value that does not apply is None, written as null)."""
    bad = nonfinite_at(obj)
    if bad is not None:
        raise FloatingPointError(f"{path}: {bad} is NaN or inf; nothing written (no result comes from NaN/inf)")

    def dump(tmp):
        with open(tmp, "w") as fh:
            json.dump(obj, fh, indent=2, allow_nan=False)
    atomic_write(path, dump)


def nonfinite_at(obj, where: str = "the result") -> Optional[str]:
    """Where the first NaN or inf in a JSON-like object is (a key path), or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    return next((found for k, v in items if (found := nonfinite_at(v, f"{where}[{k!r}]")) is not None), None)


def read_json(path: str, what: str = "JSON"):
    """A JSON file's content; a missing, unreadable or malformed file is one error naming it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: {'is a directory, not' if os.path.isdir(path) else 'no'} {what} file")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid {what} ({e})") from None


# ----------------------------------------------------------------------------- results with provenance

STARTED = time.time()            # when this process imported common.py: the wall time of a run starts here


def code_version() -> Optional[dict]:
    """The git commit of this file's repository and whether tracked files differ from it; None outside one."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}      # a status that never takes index.lock from a user's commit
    git = lambda *a: subprocess.run(["git", "-C", here, *a], capture_output=True, text=True, timeout=10, env=env)
    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return dict(commit=commit.stdout.strip(), dirty=bool(dirty))
    except (OSError, subprocess.SubprocessError):
        return None


CODE_VERSION = code_version()    # read as the process starts: a long run is recorded as the code it ran, not as
                                 # whatever the repository holds when it writes its results


def provenance(device=None, dtype=None, started: float = None) -> dict:
    """How a result was made, so that every number can be traced to its run: the command line, the git commit
    of the code (with a dirty flag) where there is a repository, the versions of torch and numpy, the device's
    name, the dtype, the thread count, the date and the wall time so far (since `started`, a time.time(), where
    one process makes several results, e.g. an experiment's training runs; else since the process started).
    The commit is the one checked out when the process started (CODE_VERSION)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine()
        if os.path.isfile("/proc/cpuinfo"):
            with open("/proc/cpuinfo") as fh:
                name = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), name)
    return dict(command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), git=CODE_VERSION,
                torch=str(torch.__version__), numpy=str(numpy.__version__),
                device=str(device) if device is not None else None, device_name=name,
                dtype=str(dtype).replace("torch.", "") if dtype is not None else None, threads=torch.get_num_threads(),
                date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                wall_seconds=round(time.time() - (STARTED if started is None else started), 1))


def update_results(path: str, results: dict, device=None, dtype=None) -> None:
    """Merge `results` into the JSON file at `path`, keeping the entries other runs wrote. Its "provenance" maps
    each entry to how it was made (the command, the code's commit, the machine: provenance())."""
    old = read_json(path, "results") if os.path.isfile(path) else {}
    old = old if isinstance(old, dict) else {}
    how = provenance(device, dtype)
    made = {**old.get("provenance", {}), **{k: how for k in results}}        # entry -> the run that wrote it
    write_json(path, {**old, **jsonable(results), "provenance": made})
    print(f"wrote {path}")


@contextlib.contextmanager
def results_of(args, head: dict, write: bool = True):
    """The results of a run, {name: result} after `head` (what made them: a config) and the flags, written to
    --out/results.json at its end with --out locked meanwhile. write=False: nothing locked or written (a torchrun rank
    other than 0)."""
    results = dict(head, args=vars(args))
    t0 = time.time()
    with lock_dir(args.out) if write else contextlib.nullcontext():
        yield results
        if write:
            update_results(os.path.join(args.out, "results.json"), results, args.device, args.dtype)
            print(f"results and figures in {args.out}/ ({time.time() - t0:.0f} s)")


def jsonable(obj):
    """numpy scalars and arrays, tuples and non-string keys -> plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):            # numpy / torch arrays and scalars
        return obj.tolist()
    return obj


# ----------------------------------------------------------------------------- reporting: progress, tables, figures

class Progress:
    """`label: done/total (rate/s, ETA m:ss)` on stderr, at most every `every` seconds."""

    def __init__(self, total: int, label: str, unit: str = "", every: float = 5.0):
        self.total, self.label, self.unit, self.every = total, label, unit, every
        self.done, self.t0, self.last = 0, time.time(), time.time()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.time()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            print(f"  {self.label}: {self.done:,}/{self.total:,} {self.unit} ({rate:,.1f}/s, ETA "
                  f"{int(eta // 60)}:{int(eta % 60):02d})", file=sys.stderr, flush=True)


def short_names(paths: list) -> list:
    """Each path's shortest tail of components that no other path ends with, for a table's rows: seed0/ckpt_200.pt
    and seed1/ckpt_200.pt, never ckpt_200.pt twice."""
    parts = [os.path.normpath(p).split(os.sep) for p in paths]
    names = []
    for i, p in enumerate(parts):
        k = next((k for k in range(1, len(p) + 1) if all(q[-k:] != p[-k:] for j, q in enumerate(parts) if j != i)),
                 len(p))
        names.append(os.sep.join(p[-k:]) or paths[i])      # os.sep.join keeps a leading root: /x/m, x/m
    return names


def print_table(rows: list, floats: str = "{:.4g}") -> None:
    """Print a list of dicts as aligned columns (the keys of the first row are the header)."""
    if not rows:
        return
    cols = list(rows[0])
    cell = lambda v: floats.format(v) if isinstance(v, float) else "-" if v is None else str(v)
    cells = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in cells:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))


def figure(*subplots, figsize=(5, 3.5)):
    """(matplotlib.pyplot, fig, axes) on the Agg backend (no display needed), unless pyplot is up already: a notebook's
    inline backend is kept, or every later figure of the session would vanish from it (save_figure closes ours)."""
    import matplotlib                # only where a figure is drawn: importing it costs a second
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(*subplots, figsize=figsize)
    return plt, fig, axes


def save_figure(fig, path: str) -> None:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format=os.path.splitext(path)[1][1:] or "png"))
    plt.close(fig)
    print(f"wrote {path}")


# ----------------------------------------------------------------------------- seeds

def seed_of(*parts) -> int:
    """A 63-bit seed from any parts (a seed and a name, a seed and an index), the same in every process:
    sha256, not hash(), which Python salts per process. Generators seeded this way are independent."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


# ----------------------------------------------------------------------------- GPUs: torchrun and MFU

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")      # what torchrun sets for every process it starts


def torchrun_rank() -> tuple:
    """(rank, world size, local rank) of a process that torchrun started; (0, 1, 0) for a plain `python` run.
    An environment that sets some of torchrun's variables but not all is refused: it is neither."""
    present = [k for k in TORCHRUN_VARS if k in os.environ]
    if not present:
        return 0, 1, 0
    if len(present) < len(TORCHRUN_VARS):
        missing = [k for k in TORCHRUN_VARS if k not in present]
        raise ValueError(f"{', '.join(present)} set but not {', '.join(missing)}: start multi-process runs with "
                         f"torchrun, or unset {', '.join(present)} for a plain run")
    return tuple(int(os.environ[k]) for k in TORCHRUN_VARS)


def rank_device(device: torch.device) -> torch.device:
    """The device this process runs on, made current: under torchrun a CUDA job puts rank r on cuda:LOCAL_RANK
    (one process per GPU); anything else is `device` itself. Refused before any group forms: more processes
    per node than GPUs (NCCL would fail later and less clearly), and a GPU index under torchrun (the local
    rank chooses the GPU; CUDA_VISIBLE_DEVICES chooses which GPUs the job sees)."""
    _, _, local = torchrun_rank()
    if device.type != "cuda" or "RANK" not in os.environ:
        return device
    if device.index is not None:
        raise ValueError(f"--device {device}: under torchrun each process takes cuda:LOCAL_RANK; pass --device cuda "
                         f"(and CUDA_VISIBLE_DEVICES to choose the GPUs)")
    if local >= torch.cuda.device_count():
        raise ValueError(f"torchrun started local rank {local}, but this machine has {torch.cuda.device_count()} "
                         f"CUDA device(s): one process per GPU, so lower --nproc_per_node")
    torch.cuda.set_device(local)         # before any CUDA work, so no rank makes a context on GPU 0
    return torch.device("cuda", local)


def prepare_device(args) -> torch.device:
    """--device resolved (under torchrun: this rank's GPU) and checked against --dtype, args.device set to it; TF32
    matmuls on CUDA."""
    device = rank_device(resolve_device(args.device))
    check_dtype_runs(device, DTYPES[args.dtype])
    args.device = str(device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    return device


def join_process_group(device: torch.device) -> bool:
    """Under torchrun, join the job's process group and return True; a plain run joins nothing (False).
    NCCL for a CUDA device (rank_device has made this rank's GPU current), gloo otherwise. A one-process
    torchrun job joins a group of one, so a single GPU runs the same code path (DDP, gathers) as eight.
    Pair with leave_process_group()."""
    if "RANK" not in os.environ:
        return False
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True


def leave_process_group() -> None:
    """End a torchrun job's process group with every rank at once. A rank that tears gloo down while another
    still works (rank 0 writing results.json) can abort at exit (GLOO_TEARDOWN_ABORT, SIGABRT); the barrier makes
    the ranks leave together."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# gloo, on a loaded machine, now and then still aborts a rank as it tears down after the job's work is done, its
# results already written: rarer with leave_process_group's barrier, not gone, and never seen for a bare init /
# all_gather / barrier / destroy script. What runs torchrun jobs (the tests, studies.gpu_check) runs such a job
# once more rather than fail on it.
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def teardown_abort(returncode: Optional[int], output: str) -> bool:
    """Whether a torchrun job failed by gloo's teardown abort alone, as far as its output says: a non-zero exit,
    the abort's message and torchrun's report of a rank ended by SIGABRT ("Signal 6 (SIGABRT) received by PID").
    output: the job's stdout and stderr together. A job still running or stopped for time (None) is no abort."""
    return returncode not in (0, None) and GLOO_TEARDOWN_ABORT in output and "(SIGABRT)" in output


# Dense bf16 peak of known GPUs (flop/s, NVIDIA's datasheets: half the "with sparsity" figure), matched as a
# substring of torch.cuda.get_device_name, more specific names first: the NVL (PCIe) cards run at lower clocks
# than the SXM ones ("NVIDIA H100 80GB HBM3", "NVIDIA H200"). MFU = achieved flop/s / this. train.py's
# --peak_tflops overrides it.
BF16_PEAK_FLOPS = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "H200 NVL": 835e12, "H100": 989e12, "H200": 989e12,
                   "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "RTX 4090": 165e12}


def peak_flops(device) -> Optional[float]:
    """The bf16 peak of `device` from BF16_PEAK_FLOPS, or None (CPU, unknown GPU)."""
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK_FLOPS.items() if key in name), None)
