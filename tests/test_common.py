"""common.py, the scripts' conventions: config flags, random inputs, provenance of results and checkpoints,
torchrun ranks and process groups, each against what it promises."""
import argparse
import shutil

import pytest
import torch

from common import (STARTED, add_config_flags, config_from_flags, leave_process_group, provenance, random_batches,
                    rank_device, save_checkpoint, torchrun_rank, update_results)
from init import build
from model import PRESETS, get_config, read_checkpoint

torch.set_num_threads(2)


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


def test_random_inputs_are_the_same_whatever_the_batch_size_and_the_script():
    import probe
    import seedprint
    import sink
    for kind, kw in (("tokens", dict(vocab=50)), ("gaussian", dict(width=8, mean=0.5, std=2.0))):
        whole = torch.cat(list(random_batches(kind, 23, 6, 23, seed=4, **kw)))
        for b in (1, 5, 64):
            assert torch.equal(torch.cat(list(random_batches(kind, 23, 6, b, seed=4, **kw))), whole)
        assert not torch.equal(torch.cat(list(random_batches(kind, 23, 6, 23, seed=5, **kw))), whole)
    g = torch.cat(list(random_batches("gaussian", 4000, 2, 4000, seed=0, width=4, mean=0.5, std=2.0)))
    assert g.mean().item() == pytest.approx(0.5, abs=0.05) and g.std().item() == pytest.approx(2.0, rel=0.03)
    model = build(get_config("tiny", n_layer=1, vocab_size=50), 0).eval()
    seen = []
    record = lambda ids: seen.append(ids) or model.trace(ids, hidden="last")["hidden"][-1]
    seedprint.fingerprint(record, sequences=23, seq_len=6, vocab=50, seed=4, batch_size=5)
    probe_ids = torch.cat([b["idx"] for b in probe.model_inputs(model, "tokens", 23, 6, 7, seed=4)])
    assert torch.equal(torch.cat(seen), probe_ids) and torch.equal(sink.random_tokens(50, 23, 6, seed=4), probe_ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_random_inputs_are_identical_on_cpu_and_cuda():
    for kind, kw in (("tokens", dict(vocab=50)), ("gaussian", dict(width=8))):
        cpu = torch.cat(list(random_batches(kind, 9, 4, 3, seed=1, **kw)))
        assert torch.equal(torch.cat([x.cuda() for x in random_batches(kind, 9, 4, 4, seed=1, **kw)]).cpu(), cpu)


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
    save_checkpoint(str(tmp_path / "c.pt"), build(get_config("tiny", n_layer=1), 0), step=3)
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
