"""
init.py: a model at birth -- seeded GPT-2 initialization (paper Appendix B.1), so two models differ only where
you say, and the architecture a command line names (a preset and its knobs).

The paper's bias is a property of the random draw, so the draw must be reproducible and
controllable. Two seeds split the model (footnote 2, Appendix B.2):
  seed        everything inside the transformer blocks
  embed_seed  the token embedding, the LM head (if untied) and the learned position table
so models of one architecture with different `seed` still share token identities and
their top-1 token ids can be compared.

A script names an architecture as --model PRESET plus one flag per GPTConfig knob (--n_layer 4,
--calibration attenuate, ...): add_config_flags and config_from_flags, here because every script that takes
them builds its model with build().

    python init.py --model gpt2-nano --seed 42      # per-group std table -> out/init/init_stats.json

Imports model.py and common.py (the scripts' conventions).
"""
import argparse
import dataclasses
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

# common.py first: before torch is imported, it checks the requirements (and answers --help without them)
from common import (ArgumentParser, check_output, lock_dir, parse_bool, print_table, provenance, run_script, seed_int,
                    seed_of, write_json)
from model import CHOICES, GPT, PRESETS, GPTConfig, get_config
import torch


STD = 0.02
EMBEDDING_PARAMS = ("transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight")
RESIDUAL_PROJECTIONS = ("attn.c_proj.weight", "mlp.c_proj.weight")


def param_seed(seed: int, name: str) -> int:
    """A 63-bit seed for one parameter, from (seed, its name), the same in every process (common.seed_of)."""
    return seed_of(int(seed), name)


def target_std(name: str, n_layer: int) -> float:
    """The GPT-2 std of a weight matrix or embedding, by parameter name. Each expert of a mixture of experts, and
    its shared expert, is an MLP: its down projection is a residual projection too."""
    name = re.sub(r"\.mlp\.(experts\.\d+|shared_expert)\.", ".mlp.", name)
    if name.endswith(RESIDUAL_PROJECTIONS):
        return STD / math.sqrt(2 * n_layer)
    return STD


@torch.no_grad()
def init_weights(model: GPT, seed: int, embed_seed: int = 0, threads: Optional[int] = None) -> GPT:
    """Initialize `model` in place, GPT-2 style, and return it. Every choice:

    1. Weight matrices (q/k/v, MLP up and gate) and embeddings (token, position, untied LM head):
       N(0, 0.02^2). A mixture of experts' router (`mlp.router`) and its shared expert's gate are plain
       linear maps: N(0, 0.02^2) too.
    2. Residual projections (attention output W_O `attn.c_proj`, MLP down `mlp.c_proj`):
       N(0, (0.02 / sqrt(2 n_layer))^2), so the residual stream's variance does not grow with
       depth. The factor is 2 n_layer whatever `sublayers` is, so an MLP-only model has the same
       MLP weights as the full model with the same seed. Each expert (`mlp.experts.3.c_fc`, ...) and a
       shared expert is drawn as the dense MLP's matrices are, its own draw for each (item 4).
    3. Biases 0; norm gains 1 (LayerNorm, RMSNorm, head-wise RMSNorm, q/k norms; for norm="rmsnorm_1p", whose
       norms multiply by 1 + w, w = 0: a gain of 1 all the same); LayerNorm biases 0; learned sink
       logits (attn_sink) 0, so that at birth such a head is softmax + 1. The gate of gated attention
       (attn_gate) is a weight matrix like q/k/v: item 1, so sigmoid(gate) starts near 1/2.
    4. Each drawn parameter gets its own CPU torch.Generator, seeded from (seed, parameter name)
       -- embed_seed for the names in EMBEDDING_PARAMS, seed for everything else. Consequences:
       - the global RNG is never touched and the order in which models or modules are built,
         or parameters visited, does not matter;
       - two configs that share a parameter name share its weights (the attention of an
         attention-only model is the attention of the full model with the same seed);
       - the draw is float32 on the CPU, then cast and moved: identical weights on CPU and GPU,
         and float32 vs bfloat16 differ only by bf16 rounding;
       - the draws are independent, so they run in a pool of `threads` (default torch.get_num_threads())
         with the same weights, bit for bit. Each draw is scaled in place, so a thread holds one float32 copy
         of its parameter at a time (docs/reproduce.md times a 7B model's build, under the 7B fingerprint).
    5. A tied LM head is the token embedding itself (model.py reads wte.weight), drawn once.
    """
    n_layer = model.config.n_layer
    drawn = []
    for name, p in model.named_parameters():
        if name.endswith((".bias", "attn.sink")):
            p.zero_()
        elif p.dim() == 1:      # norm gains: LayerNorm/RMSNorm weight, head_norm and q/k norm weights
            p.fill_(0.0 if model.config.norm == "rmsnorm_1p" else 1.0)      # 1p norms multiply by 1 + w
        else:
            drawn.append((name, p))

    def draw(item):
        name, p = item
        g = torch.Generator(device="cpu")
        g.manual_seed(param_seed(embed_seed if name in EMBEDDING_PARAMS else seed, name))
        w = torch.randn(p.shape, generator=g, dtype=torch.float32).mul_(target_std(name, n_layer))
        with torch.no_grad():          # grad mode is per thread: the decorator above does not reach the pool's
            p.copy_(w)

    threads = min(threads or torch.get_num_threads(), len(drawn))
    if threads <= 1:
        for item in drawn:
            draw(item)
    else:                              # largest first, so that no thread is left with a big one at the end
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(draw, sorted(drawn, key=lambda item: -item[1].numel())))
    return model


def build(config: GPTConfig, seed: int, embed_seed: int = 0, device="cpu", dtype=torch.float32) -> GPT:
    """A freshly initialized GPT on `device` in `dtype`. The module is built on the meta device
    (no memory, no default PyTorch init, which for a 1.2B model wastes a minute), then
    allocated in `dtype` (a bf16 7B model never holds a float32 copy) and filled by init_weights."""
    with torch.device("meta"):
        model = GPT(config).to(dtype)
    model = model.to_empty(device=device)
    return init_weights(model, seed, embed_seed)


# ----------------------------------------------------------------------------- the architecture on the command line

def add_config_flags(parser: argparse.ArgumentParser, default_model: Optional[str] = "gpt2-nano",
                     or_model: bool = False) -> None:
    """--model PRESET plus one flag per GPTConfig knob (--n_layer 4, --calibration attenuate, ...).
    Knobs left unset are None, so a caller can tell which ones were given. or_model: --model may also name a
    model (a train.py checkpoint or a Hugging Face directory), which brings its own config."""
    also = "; or a train.py checkpoint or Hugging Face directory (its own config)" if or_model else ""
    parser.add_argument("--model", default=default_model, help=f"preset: {', '.join(PRESETS)}{also}")
    group = parser.add_argument_group("config knobs (override the preset)")
    for f in dataclasses.fields(GPTConfig):
        if f.name in CHOICES:
            group.add_argument(f"--{f.name}", choices=CHOICES[f.name], default=None)
        elif f.type is bool:
            group.add_argument(f"--{f.name}", type=parse_bool, default=None, metavar="on|off")
        elif f.type is Optional[tuple]:                 # a list of numbers (LongRoPE's factors)
            group.add_argument(f"--{f.name}", type=float, nargs="+", default=None, metavar="FLOAT")
        elif f.type is Optional[str]:
            group.add_argument(f"--{f.name}", default=None, metavar="STR")
        else:
            kind = float if f.type in (float, Optional[float]) else int
            group.add_argument(f"--{f.name}", type=kind, default=None, metavar=kind.__name__.upper())


def config_overrides(args: argparse.Namespace) -> dict:
    """The config knobs given on the command line (those not None)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(GPTConfig)
            if getattr(args, f.name, None) is not None}


def config_from_flags(args: argparse.Namespace) -> GPTConfig:
    return get_config(args.model, **config_overrides(args))


# ----------------------------------------------------------------------------- the weights' stds, as a script

def weight_stats(model: GPT) -> dict:
    """Empirical std of each parameter beside its GPT-2 target (for the table and the tests)."""
    n_layer = model.config.n_layer
    rows = {}
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        rows[name] = dict(std=p.float().std().item(), target=target_std(name, n_layer), numel=p.numel())
    return rows


def main(argv=None):
    parser = ArgumentParser(prog="init.py", description="Initialize a preset and report each weight group's std.")
    add_config_flags(parser)
    parser.add_argument("--seed", type=seed_int, default=42, help="seed of the transformer blocks")
    parser.add_argument("--embed_seed", type=seed_int, default=0, help="seed of embeddings and LM head")
    parser.add_argument("--out", default="out/init")
    args = parser.parse_args(argv)
    config = config_from_flags(args)                 # a bad preset or knob is one error line, before any work
    check_output(args.out)
    model = build(config, args.seed, args.embed_seed)
    # group the per-layer matrices: "transformer.h.3.attn.c_proj.weight" -> "h.*.attn.c_proj.weight"
    groups = {}
    for name, row in weight_stats(model).items():
        parts = name.split(".")
        key = ".".join(["h", "*"] + parts[3:]) if parts[:2] == ["transformer", "h"] else name
        g = groups.setdefault(key, dict(target=row["target"], sq=0.0, n=0))
        g["sq"] += row["std"] ** 2 * row["numel"]
        g["n"] += row["numel"]
    table = {key: dict(std=math.sqrt(g["sq"] / g["n"]), target=g["target"], numel=g["n"]) for key, g in groups.items()}
    print(f"{args.model}: seed={args.seed} embed_seed={args.embed_seed}, {model.num_params():,} parameters")
    print_table([dict(group=key, std=f"{r['std']:.5f}", target=f"{r['target']:.5f}",
                      ratio=f"{r['std'] / r['target']:.4f}")
                 for key, r in table.items()])
    path = os.path.join(args.out, "init_stats.json")
    with lock_dir(args.out):
        write_json(path, dict(config=dataclasses.asdict(config), seed=args.seed, embed_seed=args.embed_seed,
                              groups=table, provenance=provenance()))
    print(f"wrote {path}")


if __name__ == "__main__":
    run_script(main, "init.py")
