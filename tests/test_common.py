"""common.py, the scripts' conventions: settings and their flags, one-line errors, provenance of results and
checkpoints, torchrun ranks and process groups, each against what it promises."""
import argparse
import dataclasses
import shutil
from typing import Optional

import pytest
import torch

from common import (STARTED, Distinct, SEED_LIMIT, add_settings_flags, atomic_write, check_settings, flag_type,
                    leave_process_group, one_line, provenance, rank_device, refuse_unused, setting, settings_given,
                    torchrun_rank, update_results)
from init import add_config_flags, build, config_from_flags
from model import PRESETS, get_config, read_checkpoint, write_checkpoint

torch.set_num_threads(2)


@dataclasses.dataclass
class Settings:
    """A dataclass of settings as TrainConfig and seedprint.Options are made."""
    count: int = setting(3, "a count", "int>=1")
    seed: int = setting(0, "a seed", "seed")
    rate: float = setting(0.5, "a rate", "(0,1)")
    decay: float = setting(0.0, "a decay", "float>=0")
    beta: float = setting(0.9, "a beta", "[0,1)")
    width: Optional[int] = setting(None, "a width", "int>=2")
    seeds: list = setting([1, 2], "some seeds", "seeds")
    mode: str = setting("a", "a mode", choices=("a", "b"))
    flag: bool = setting(False, "a switch")

    def __post_init__(self):
        check_settings(self)


@pytest.mark.parametrize("field, bad, what", [
    ("count", 0, "an integer >= 1"), ("count", 2.5, "an integer >= 1"), ("count", True, "an integer >= 1"),
    ("seed", -1, "an integer in [0, 2^63)"), ("seed", SEED_LIMIT, "an integer in [0, 2^63)"),
    ("rate", 1.0, "a number in (0, 1)"), ("rate", float("nan"), "a number in (0, 1)"),
    ("decay", float("inf"), "a finite number >= 0"), ("decay", -0.1, "a finite number >= 0"),
    ("beta", 1.0, "a number in [0, 1)"), ("width", 1, "an integer >= 2"),
    ("seeds", [1, 1], "a list of distinct seeds"), ("seeds", [], "a list of distinct seeds"),
    ("mode", "c", "one of a, b")])
def test_a_setting_out_of_range_is_refused_by_its_flag_from_code_and_from_the_command_line(field, bad, what):
    """One range per field, checked where the dataclass is made (from code) and where the flag is parsed: the same
    words, naming the flag."""
    with pytest.raises(ValueError, match=rf"--{field} must be {__import__('re').escape(what)}"):
        Settings(**{field: bad})
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_settings_flags(parser, Settings())
    text = [str(v) for v in bad] if isinstance(bad, list) else [str(bad)]
    if field == "seeds" and not bad:
        return                                         # an empty list is no command line
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        parser.parse_args([f"--{field}", *text])


def test_settings_flags_carry_the_templates_defaults_and_parse_back_into_the_dataclass():
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Settings(count=7, seeds=[4, 5, 6]))
    args = parser.parse_args(["--rate", "0.25", "--flag", "--width", "3"])
    got = Settings(**settings_given(args, Settings))
    assert got == Settings(count=7, rate=0.25, flag=True, width=3, seeds=[4, 5, 6])
    assert settings_given(args, Settings, ("count",)) == dict(count=7)
    assert parser.parse_args(["--flag", "off"]).flag is False


def test_a_list_flag_refuses_a_value_given_twice():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--seeds", type=flag_type("seed"), nargs="+", action=Distinct)
    assert parser.parse_args(["--seeds", "1", "2"]).seeds == [1, 2]
    with pytest.raises(SystemExit):
        parser.parse_args(["--seeds", "1", "2", "1"])


def test_a_flag_that_would_do_nothing_is_refused_only_when_set_apart_from_its_default():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--tag", default=None)
    template = "{flags} would do nothing here"
    refuse_unused(parser.parse_args(["--lr", "0.1"]), ("lr", "tag"), template, parser)      # its default: not set
    refuse_unused(parser.parse_args([]), ("tag",), template)                               # None without a parser
    with pytest.raises(ValueError, match="^--lr, --tag would do nothing here; drop them$"):
        refuse_unused(parser.parse_args(["--lr", "0.2", "--tag", "x"]), ("lr", "tag"), template)
    with pytest.raises(SystemExit):
        refuse_unused(parser.parse_args(["--lr", "0.2"]), ("lr",), template, parser)
    # a user's path with braces in it is part of the why, not a placeholder
    with pytest.raises(ValueError, match=r"^--model m\{x\}\.pt: --lr would do nothing; drop it$"):
        refuse_unused(parser.parse_args(["--lr", "0.2"]), ("lr",), "--model m{x}.pt: {flags} would do nothing")


def test_one_line_joins_whitespace_and_escapes_what_a_terminal_would_act_on():
    """A refusal naming a file called with an escape code prints the code escaped, never raw."""
    assert one_line("a\n  b\tc") == "a b c"
    assert one_line("no file at 'x\x1b[31mred'") == "no file at 'x\\x1b[31mred'"
    assert all(c.isprintable() for c in one_line("\x1b]0;title\x07 \x9b2J"))

def test_config_flags_round_trip():
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    args = parser.parse_args(["--model", "tiny", "--n_layer", "3", "--calibration", "attenuate",
                              "--residual", "off", "--norm_eps", "1e-6"])
    cfg = config_from_flags(args)
    assert (cfg.n_layer, cfg.calibration, cfg.residual, cfg.norm_eps) == (3, "attenuate", False, 1e-6)
    assert cfg.n_embd == PRESETS["tiny"].n_embd
    with pytest.raises(SystemExit):
        parser.parse_args(["--calibration", "loud"])


def test_every_result_and_checkpoint_records_how_it_was_made(tmp_path):
    import json
    import sys
    update_results(str(tmp_path / "results.json"), dict(a=[1, 2]), device="cpu", dtype=torch.float32)
    update_results(str(tmp_path / "results.json"), dict(b=dict(x=1)))
    res = json.load(open(tmp_path / "results.json"))
    assert res["a"] == [1, 2] and res["b"] == dict(x=1) and set(res["provenance"]) == {"a", "b"}
    how = res["provenance"]["a"]
    assert how["command"].split()[1:] == sys.argv[1:] and how["dtype"] == "float32" and how["device"] == "cpu"
    assert how["torch"] == torch.__version__ and how["threads"] == torch.get_num_threads() and how["wall_seconds"] >= 0
    assert how["git"] is None or (len(how["git"]["commit"]) == 40 and isinstance(how["git"]["dirty"], bool))
    model = build(get_config("tiny", n_layer=1), 0)
    atomic_write(str(tmp_path / "c.pt"), lambda tmp: write_checkpoint(tmp, model, 3, provenance=provenance("cpu",
                                                                                                  torch.float32)))
    ckpt = read_checkpoint(str(tmp_path / "c.pt"))
    assert ckpt["step"] == 3 and ckpt["provenance"]["dtype"] == "float32"
    import time
    since = provenance(started=time.time() - 2.0)["wall_seconds"]       # one run among several in a process
    assert 2.0 <= since < 3.0 and provenance()["wall_seconds"] >= round(time.time() - STARTED, 1) - 0.1


def test_leave_process_group_waits_for_every_rank_then_ends_the_group(tmp_path):
    """One process as a world of one (gloo, a file store): leaving waits at a barrier (what makes the ranks leave
    together), then the group ends; leaving without a group is a no-op."""
    import torch.distributed as dist
    leave_process_group()                                     # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    calls = []
    real_barrier = dist.barrier
    dist.barrier = lambda *a, **k: (calls.append("barrier"), real_barrier(*a, **k))
    try:
        leave_process_group()
    finally:
        dist.barrier = real_barrier
    assert calls == ["barrier"] and not dist.is_initialized()


def test_a_torchrun_rank_runs_on_its_own_gpu_and_more_ranks_than_gpus_are_refused(monkeypatch):
    """Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK set) a CUDA rank takes cuda:LOCAL_RANK and makes it current; a
    rank without a GPU of its own, a GPU index under torchrun, and a half-set environment are refused before any
    group forms; CPU ranks and plain runs keep the device they asked for."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert torchrun_rank() == (0, 1, 0) and rank_device(cuda) == cuda       # a plain run: untouched
    current = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError,
                       match="RANK set but not WORLD_SIZE, LOCAL_RANK: start multi-process runs with torchrun"):
        torchrun_rank()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert torchrun_rank() == (3, 4, 1)
    assert rank_device(cuda) == torch.device("cuda", 1) and current == [1] and rank_device(cpu) == cpu
    with pytest.raises(ValueError, match="under torchrun each process takes cuda:LOCAL_RANK; pass --device cuda"):
        rank_device(torch.device("cuda", 0))
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ValueError, match="local rank 2, but this machine has 2 CUDA device.*--nproc_per_node"):
        rank_device(cuda)
    assert current == [1]                                   # refused before any device was made current


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_provenance_records_the_commit_the_process_started_on(tmp_path):
    """A long run records the code it ran: a commit made while it runs does not become its provenance."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    for f in ("common.py", "model.py"):
        shutil.copy(Path(__file__).resolve().parents[1] / f, tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    run = lambda *a: subprocess.run([*git, *a], check=True, capture_output=True, text=True).stdout.strip()
    run("init", "-q")
    run("add", "common.py", "model.py")
    run("commit", "-q", "--no-verify", "-m", "first")
    first = run("rev-parse", "HEAD")
    code = ("import json, subprocess, sys; git = json.loads(sys.argv[2]); sys.path.insert(0, sys.argv[1]); "
            "import common; open(sys.argv[1] + '/later.txt', 'w').write('x'); "
            "subprocess.run(git + ['add', 'later.txt'], check=True); "
            "subprocess.run(git + ['commit', '-q', '--no-verify', '-m', 'later'], check=True); "
            "print(common.provenance()['git']['commit'])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), json.dumps(git)], capture_output=True,
                         text=True, check=True)
    assert run("rev-parse", "HEAD") != first and out.stdout.strip() == first


def test_a_result_that_holds_nan_or_inf_is_refused_naming_where_and_nothing_is_written(tmp_path):
    """JSON has no NaN; a result computed from one is no result. update_results names the first one, by its key
    path, and leaves the file as it was."""
    import math
    update_results(str(tmp_path / "results.json"), dict(a=1.0))
    before = (tmp_path / "results.json").read_text()
    for bad, where in ((dict(b=[0.5, float("nan")]), "['b'][1]"), (dict(c=dict(d=-math.inf)), "['c']['d']"),
                       (dict(e=torch.tensor([1.0, float("inf")])), "['e'][1]")):
        with pytest.raises(FloatingPointError, match=__import__("re").escape(where)):
            update_results(str(tmp_path / "results.json"), bad)
        assert (tmp_path / "results.json").read_text() == before
    update_results(str(tmp_path / "results.json"), dict(f=None))        # a value that does not apply: null
    assert '"f": null' in (tmp_path / "results.json").read_text()
