"""
studies/edits.py: what people do to a model's weights -- the derivatives a lineage test must still recognize,
and the reparametrizations that keep a model's function but move its coordinates.

Each edit returns a new model and leaves its input as it is. The first group changes the function a little, as
the post-development techniques of LeaFBench (2508.19843) do; the second keeps the logits and changes only the
coordinates, which hides a lineage from a test that compares coordinates one by one (seedprint.py's exact
verdict) but not from its aligned verdict:

    changes the function a little     quantize, prune, merge, low_rank_update, add_noise, extend_vocab
    keeps the function                permute_residual (signs flipped or not), permute_mlp, rotate_residual (QuaRot)
    makes a smaller child             prune_width (residual coordinates, by residual_importance), prune_depth

Used by studies/derivatives.py on a real checkpoint, and by the calibration studies (permuted descendants).
"""
import dataclasses

import torch
import torch.nn.functional as F

from model import GPT

def _copy(model: GPT, config=None) -> GPT:
    out = GPT(config or model.config).to(next(model.parameters()).dtype)
    if config is None:
        out.load_state_dict(model.state_dict())
    return out.eval()


def _matrices(model: GPT, embeddings: bool = True):
    """(name, parameter) of every weight matrix; embeddings=False: those of the blocks only."""
    return [(n, p) for n, p in model.named_parameters()
            if p.dim() == 2 and (embeddings or n.startswith("transformer.h."))]


@torch.no_grad()
def quantize(model: GPT, bits: int, group: int = 0) -> GPT:
    """A round trip through signed `bits`-bit integers of every weight matrix: symmetric, one absmax scale per
    row (group=0) or per `group` consecutive input columns."""
    out, qmax = _copy(model), 2 ** (bits - 1) - 1
    for _, w in _matrices(out):
        n = group or w.shape[1]
        pad = -w.shape[1] % n                                    # a last, shorter group: zero columns never win absmax
        g = F.pad(w, (0, pad)).view(w.shape[0], -1, n)
        scale = g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / qmax
        w.copy_(((g / scale).round().clamp(-qmax, qmax) * scale).view(w.shape[0], -1)[:, :w.shape[1]])
    return out


@torch.no_grad()
def prune(model: GPT, fraction: float) -> GPT:
    """Magnitude pruning: the smallest `fraction` of each block matrix's entries set to 0."""
    out = _copy(model)
    for _, w in _matrices(out, embeddings=False):
        k = int(fraction * w.numel())
        if k:
            w.view(-1)[w.abs().view(-1).argsort()[:k]] = 0
    return out


@torch.no_grad()
def merge(a: GPT, b: GPT, weight: float = 0.5) -> GPT:
    """Linear merge (1 - weight) a + weight b of two models of one architecture."""
    out, sb = _copy(a), b.state_dict()
    for n, p in out.named_parameters():
        p.lerp_(sb[n].to(p.dtype), weight)
    return out


@torch.no_grad()
def low_rank_update(model: GPT, rank: int, relative: float, seed: int = 0) -> GPT:
    """W + B A on every block matrix (a LoRA-like update), B and A Gaussian of rank `rank`, scaled so that
    |B A| = relative |W| (Frobenius)."""
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    for _, w in _matrices(out, embeddings=False):
        delta = torch.randn(w.shape[0], rank, generator=g) @ torch.randn(rank, w.shape[1], generator=g)
        w.add_((delta * (relative * w.float().norm() / delta.norm())).to(w.dtype))
    return out


@torch.no_grad()
def add_noise(model: GPT, relative: float, seed: int = 0) -> GPT:
    """Gaussian noise on every weight matrix, of std `relative` times that matrix's own std."""
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    for _, w in _matrices(out):
        w.add_((torch.randn(w.shape, generator=g) * relative * w.float().std()).to(w.dtype))
    return out


@torch.no_grad()
def extend_vocab(model: GPT, extra: int, seed: int = 0) -> GPT:
    """`extra` new tokens: new rows of the embedding (and of an untied head), drawn with the table's std."""
    cfg = dataclasses.replace(model.config, vocab_size=model.config.vocab_size + extra)
    out, g, old = _copy(model, cfg), torch.Generator().manual_seed(seed), model.state_dict()
    for n, p in out.state_dict().items():
        if n in ("transformer.wte.weight", "lm_head.weight"):
            p[:len(old[n])] = old[n]
            p[len(old[n]):] = (torch.randn(extra, p.shape[1], generator=g) * old[n].float().std()).to(p.dtype)
        else:
            p.copy_(old[n])
    return out


def _residual_sides(name: str, p: torch.Tensor, d: int):
    """How a parameter touches the residual stream: "in" (its input columns read it), "out" (its output rows
    write it), "bias" (a writer's bias, of width d), "norm" (a norm's gain or bias, of width d), or None."""
    if name.endswith(("wte.weight", "wpe.weight", "lm_head.weight")):
        return "in"                          # rows are tokens or positions, columns residual coordinates
    if name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")):
        return "out"
    if name.endswith(("attn.c_proj.bias", "mlp.c_proj.bias")):
        return "bias"
    if p.dim() == 1 and p.shape[0] == d and (".ln_" in name or "ln_f" in name):
        return "norm"
    if name.endswith(("attn.c_attn.weight", "attn.c_gate.weight", "mlp.c_fc.weight", "mlp.c_gate.weight")):
        return "in"
    return None


@torch.no_grad()
def permute_residual(model: GPT, seed: int = 0, flip: float = 0.0) -> GPT:
    """The same function in a permuted residual basis: new coordinate j is old coordinate perm[j] in every weight
    that reads or writes the stream (norms act per coordinate or on the whole vector, so they commute).
    flip > 0: a signed permutation, each new coordinate negated with probability flip (1: all of them), which an
    RMSNorm or norm-free model also keeps (RMS ignores signs; the gains move with their coordinates, unsigned).
    A LayerNorm's mean does not commute with a sign flip, so flips are refused there."""
    d = model.config.n_embd
    if not 0 <= flip <= 1:
        raise ValueError(f"flip is the probability that a coordinate is negated, in [0, 1]; got {flip}")
    if flip and model.config.norm == "layernorm":
        raise ValueError("a sign flip does not keep the function of a LayerNorm model (LayerNorm subtracts the "
                         "mean across coordinates); use flip=0")
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    perm = torch.randperm(d, generator=g)
    s = torch.where(torch.rand(d, generator=g) < flip, -1.0, 1.0)
    for n, p in out.named_parameters():
        side, sign = _residual_sides(n, p, d), s.to(p.dtype)
        if side == "in":                     # reads the stream: its columns
            p.copy_(p[:, perm] * sign)
        elif side == "out":                  # writes the stream: its rows
            p.copy_(p[perm] * sign[:, None])
        elif side == "bias":                 # a writer's bias moves and flips
            p.copy_(p[perm] * sign)
        elif side == "norm":                 # a norm's gain only moves (flips are refused where it has a bias)
            p.copy_(p[perm])
    return out


@torch.no_grad()
def permute_mlp(model: GPT, seed: int = 0) -> GPT:
    """The same function with each MLP's hidden units permuted (rows of up and gate, columns of down)."""
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    for block in out.transformer.h:
        if not hasattr(block, "mlp"):
            continue
        perm = torch.randperm(model.config.mlp_width, generator=g)
        for lin in (block.mlp.c_fc, getattr(block.mlp, "c_gate", None)):
            if lin is not None:
                lin.weight.copy_(lin.weight[perm])
                if lin.bias is not None:
                    lin.bias.copy_(lin.bias[perm])
        block.mlp.c_proj.weight.copy_(block.mlp.c_proj.weight[:, perm])
    return out


@torch.no_grad()
def rotate_residual(model: GPT, seed: int = 0) -> GPT:
    """The same function in a randomly rotated residual basis, x -> x Q, as QuaRot and SpinQuant prepare a model:
    each RMSNorm's gain is folded into the matrices that read its output (the gains become 1, so the norm
    commutes with Q), readers become W diag(g) Q, writers Q^T W, the embedding E Q, and the head, which now
    carries the final norm's gain, is untied. The final-norm states (the fingerprint) are rotated and lose
    that gain: a lineage test by coordinates cannot see through this."""
    cfg = model.config
    if cfg.norm != "rmsnorm" or cfg.norm_position != "pre" or cfg.bias or cfg.position == "learned":
        raise ValueError("rotate_residual needs pre-norm RMSNorm blocks without norm biases or a position table")
    d = cfg.n_embd
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    src = {n: p.double() for n, p in model.state_dict().items()}
    out = _copy(model, dataclasses.replace(cfg, tie_embeddings=False))
    head = src["lm_head.weight"] if "lm_head.weight" in src else src["transformer.wte.weight"]
    new = {n: p.clone() for n, p in src.items()}
    new["transformer.wte.weight"] = src["transformer.wte.weight"] @ Q
    new["lm_head.weight"] = (head * src["transformer.ln_f.weight"]) @ Q
    new["transformer.ln_f.weight"] = torch.ones(d, dtype=torch.float64)
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        for norm, readers, writer in (("ln_1", ("attn.c_attn", "attn.c_gate"), "attn.c_proj"),
                                      ("ln_2", ("mlp.c_fc", "mlp.c_gate"), "mlp.c_proj")):
            if h + norm + ".weight" not in src:
                continue
            gain = src[h + norm + ".weight"]
            for r in readers:
                if h + r + ".weight" in src:
                    new[h + r + ".weight"] = (src[h + r + ".weight"] * gain) @ Q
            new[h + norm + ".weight"] = torch.ones(d, dtype=torch.float64)
            new[h + writer + ".weight"] = Q.T @ src[h + writer + ".weight"]
            if h + writer + ".bias" in src:
                new[h + writer + ".bias"] = src[h + writer + ".bias"] @ Q
    dtype = next(model.parameters()).dtype
    out.load_state_dict({n: p.to(dtype) for n, p in new.items()})
    return out


# ----------------------------------------------------------------------------- smaller children: width and depth

@torch.no_grad()
def residual_importance(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """How much each residual coordinate carries: its mean square over the residual stream's states (the input and
    every block's output) on `tokens`, summed over them. Width pruning keeps the coordinates that carry most, as
    activation-based pruning does (Minitron ranks embedding channels by their aggregated activations)."""
    hidden = model.eval().trace(tokens, hidden="all")["hidden"][:-1]           # the final norm's output excluded
    return sum(h.float().pow(2).mean(dim=(0, 1)) for h in hidden)


def width_kept(d: int, fraction: float) -> int:
    """How many of d residual coordinates prune_width keeps when it prunes `fraction` of them: a caller checks a
    cut with it before any work (0 or d: no cut)."""
    return d - int(round(fraction * d))


def layers_dropped(n_layer: int, fraction: float) -> int:
    """How many of n_layer blocks prune_depth drops when it prunes `fraction` of them (0 or n_layer: no cut)."""
    return int(round(fraction * n_layer))


@torch.no_grad()
def prune_width(model: GPT, fraction: float, importance: torch.Tensor) -> GPT:
    """The child that keeps the (1 - fraction) most important residual coordinates (importance: one score per
    coordinate, residual_importance), in their order: every weight that reads or writes the stream keeps those
    columns or rows; attention and MLP widths stay as they are (head_size and mlp_hidden are set, which would
    otherwise follow the width)."""
    d = model.config.n_embd
    keep = torch.sort(importance.argsort(descending=True)[:width_kept(d, fraction)]).values
    if not 0 < len(keep) < d:
        raise ValueError(f"pruning {fraction} of width {d} keeps {len(keep)} coordinates; keep some, drop some")
    config = dataclasses.replace(model.config, n_embd=len(keep), head_size=model.config.head_dim,
                                 mlp_hidden=model.config.mlp_width)
    out = _copy(model, config)
    new = dict(out.named_parameters())
    for n, p in model.named_parameters():
        side = _residual_sides(n, p, d)
        new[n].copy_(p[:, keep] if side == "in" else p[keep] if side in ("out", "bias", "norm") else p)
    return out


@torch.no_grad()
def prune_depth(model: GPT, fraction: float, tokens: torch.Tensor) -> GPT:
    """The child without the round(fraction L) blocks that change their input least on `tokens` (the largest mean
    cosine between a block's input and output states), the others in their order: ShortGPT's rule (Men et al. 2024,
    arXiv 2403.03853, Block Influence), each block ranked on its own; not Gromov et al.'s (2403.17887), which drop
    one contiguous run of blocks."""
    cfg = model.config
    drop = layers_dropped(cfg.n_layer, fraction)
    if not 0 < drop < cfg.n_layer:
        raise ValueError(f"pruning {fraction} of {cfg.n_layer} layers drops {drop}; drop some, keep some")
    h = model.eval().trace(tokens, hidden="all")["hidden"]
    similarity = [F.cosine_similarity(h[i].float(), h[i + 1].float(), dim=-1).mean().item()
                  for i in range(cfg.n_layer)]
    kept = sorted(sorted(range(cfg.n_layer), key=lambda i: similarity[i])[:cfg.n_layer - drop])
    layers = None if cfg.sliding_layers is None else "".join(cfg.sliding_layers[i] for i in kept)
    out = _copy(model, dataclasses.replace(cfg, n_layer=len(kept), sliding_layers=layers))
    source = model.state_dict()
    state = {}
    for n in out.state_dict():
        if n.startswith("transformer.h."):
            i, rest = n.split(".", 3)[2:]
            state[n] = source[f"transformer.h.{kept[int(i)]}.{rest}"]
        else:
            state[n] = source[n]
    out.load_state_dict(state)
    return out
