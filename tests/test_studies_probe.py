"""The studies built on probe.py's pass (contraction_origin, attention_averaging, seed_preference, probe_bench): each
end to end at a tiny size, through the command a user types, checked for the direction of the paper's claim; their
Gaussian tokens from data.py; torchrun's split of the seeds against one process."""
import json
from pathlib import Path

import pytest
import torch

from conftest import torchrun
from studies import attention_averaging, contraction_origin, probe_bench, seed_preference

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny", "--n_embd", "384", "--n_head", "6", "--n_layer", "3", "--sequences", "64", "--seq_len",
        "16", "--device", "cpu"]


def test_where_the_contraction_comes_from_points_the_papers_way(tmp_path):
    """Attention alone keeps independent sequences independent and the MLP alone does not; ReLU MLP0 contracts
    and tanh does not; LayerNorm widens GELU's input; Table 3's order (MLP0 -> Attn0 above MLP0 -> MLP0 above
    MLP0)."""
    contraction_origin.main([*TINY, "--out", str(tmp_path)])
    r = json.loads((tmp_path / "results.json").read_text())
    ablation = {mode: [c["mean"] for c in v["cosine"]] for mode, v in r["ablation"].items()}
    assert max(abs(c) for c in ablation["self-attention-only"]) < 0.01
    assert ablation["MLP-only"][-1] > 0.05 and ablation["full"][-1] > 0.05
    stacks = {name: [c["mean"] for c in curve] for name, curve in r["mlp0"]["stacks"].items()}
    assert stacks["MLP0 relu"][1] < stacks["MLP0 relu"][2] < stacks["MLP0 relu"][3]
    assert max(abs(c) for c in stacks["MLP0 tanh"]) < 0.05 < stacks["MLP0 relu"][1]
    std = {label: v["preact_std"][0] for label, v in r["layernorm"].items()}
    assert std["with layernorm"] > 10 * std["without norm"]
    t3 = {k: v["mean"] for k, v in r["table3"].items()}
    assert t3["MLP0 -> Attn0"] > t3["MLP0 -> MLP0"] > t3["MLP0"] > 0.2
    assert {p.name for p in tmp_path.glob("*.png")} == {"fig3_ablation_preference.png", "fig7_ablation_layers.png",
                                                         "fig5_mlp0.png"}


def test_attention_averaging_points_the_papers_way(tmp_path):
    """Attention contracts a sequence layer by layer, softmax at init like uniform averaging; Eq. 2's 1/sqrt(t)."""
    attention_averaging.main([*TINY, "--out", str(tmp_path)])
    r = json.loads((tmp_path / "results.json").read_text())
    intra = r["intra"]["64"]
    assert intra["softmax"]["mean"] == sorted(intra["softmax"]["mean"])
    assert max(abs(s - u) for s, u in zip(intra["softmax"]["mean"], intra["uniform"]["mean"])) < 0.05
    assert all(0.9 < x < 1.1 for x in r["variance"]["ratio_to_theory"][:16])


def test_seed_preference_runs_every_seed_and_repeats_one_exactly(tmp_path):
    """direction: one row per seed from the first of --seeds; a seed built twice gives the same counts."""
    seed_preference.main([*TINY, "--models", "3", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "results.json").read_text())
    assert [row["seed"] for row in r["direction"]["rows"]] == [42, 43, 44] and 0 <= r["direction"]["overlap"] <= 1
    overlap = sum(row["top1_id"] == row["direction_top1"] for row in r["direction"]["rows"]) / 3
    assert r["direction"]["overlap"] == overlap
    assert r["seed_dependence"]["identical_repeat"]
    assert [row["seed"] for row in r["seed_dependence"]["rows"]] == [42, 43, 42]


def test_torchrun_splits_the_direction_seeds_and_gathers_the_same_rows(tmp_path):
    flags = ["--model", "tiny", "--tie_embeddings", "off", "--n_layer", "2", "--sequences", "16", "--seq_len", "8",
             "--exp", "direction", "--seeds", "1", "--models", "3", "--device", "cpu"]
    # torchrun -m studies.seed_preference: the study is a module of the repository root
    proc = torchrun("-m", ["studies.seed_preference", *flags], tmp_path / "ddp", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seed_preference.main([*flags, "--out", str(tmp_path / "one")])          # one plain process: this one
    rows = [json.load(open(tmp_path / d / "results.json"))["direction"]["rows"] for d in ("ddp", "one")]
    assert rows[0] == rows[1] and [r["seed"] for r in rows[0]] == [1, 2, 3]


def test_table3_and_fig8_draw_their_gaussian_tokens_from_data_py(tmp_path, monkeypatch):
    """Table 3's and Fig 8's iid N(0, I) tokens come from data.random_batches, whose draws are the same on every
    device (tests/test_data.py): a run on a GPU sees the CPU's inputs."""
    import data
    import model
    drawn, seen = [], []

    def recorded(*a, **k):
        for x in data.random_batches(*a, **k):
            drawn.append(x.clone())
            yield x
    for study in (contraction_origin, attention_averaging):
        monkeypatch.setattr(study, "random_batches", recorded)
    trace = model.GPT.trace

    def watched(self, *a, embeds=None, **k):
        if embeds is not None:
            seen.append(embeds.detach().clone())
        return trace(self, *a, embeds=embeds, **k)
    monkeypatch.setattr(model.GPT, "trace", watched)
    flags = ["--model", "tiny", "--sequences", "8", "--seq_len", "16", "--device", "cpu"]
    contraction_origin.main([*flags, "--exp", "table3", "--out", str(tmp_path / "table3")])
    attention_averaging.main(["--model", "tiny", "--device", "cpu", "--exp", "intra", "--out", str(tmp_path / "fig8")])
    assert len(drawn) == 1 + 2 * 16        # Table 3: 8 sequences, one batch; Fig 8 at T = 64: 2 attentions x 16
    assert all(any(x.shape == d.shape and torch.equal(x, d) for x in seen) for d in drawn)   # each enters a model


def test_the_bench_study_times_a_probe_pass_against_its_bare_matmuls(tmp_path):
    """python -m studies.probe_bench at a tiny size: the ratio is the probe pass's seconds over the bare matmuls'
    (both measured), and the sequences are whole batches, as the bare matmuls run them."""
    probe_bench.main(["--model", "tiny", "--n_layer", "2", "--sequences", "40", "--seq_len", "16", "--batch_size", "16",
                      "--device", "cpu", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "results.json").read_text())["bench"]
    assert r["sequences"] == 48 and r["seq_len"] == 16
    assert r["seconds"] > 0 and r["bare_matmul_seconds"] > 0
    assert r["ratio"] == pytest.approx(r["seconds"] / r["bare_matmul_seconds"])
    assert r["tokens_per_s"] == pytest.approx(48 * 16 / r["seconds"])
