"""
studies/edits.py: what people do to a model's weights -- the derivatives a lineage test must still recognize,
and the reparametrizations that keep a model's function but move its coordinates.

Each edit returns a new model and leaves its input as it is. The first group changes the function a little, as
the post-development techniques of LeaFBench (2508.19843) do; the second keeps the logits and changes only the
coordinates, which hides a lineage from a test that compares coordinates one by one (seedprint.py's exact
verdict) but not from its aligned verdict; the third keeps the logits and the residual stream, and changes
only the weights, as one hides a lineage from a test that compares weights (MergeLock's per-head maps): the
fingerprint stays, except where fold_norms folds the final norm, whose gain then leaves the final-norm state:

    changes the function a little     quantize, prune, merge, low_rank_update, add_noise, extend_vocab
    keeps the function                permute_residual (signs flipped or not), permute_mlp, rotate_residual (QuaRot)
    keeps the residual stream         map_qk, map_vo (per-head invertible maps), permute_heads,
                                      fold_norms (final=True: the final norm's gain moves into the head)
    makes a smaller child             prune_width (residual coordinates, by residual_importance), prune_depth
    makes a mixture of experts        upcycle (every expert a copy of the dense MLP, a new router)

Used by studies/derivatives.py on a real checkpoint, and by the calibration studies (permuted descendants).
"""
import dataclasses
import math
import re

import torch
import torch.nn.functional as F

from init import param_seed, target_std
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
    each RMSNorm's gain is folded into the matrices that read its output (fold_norms: the gains become 1, so the
    norm commutes with Q), readers become W diag(g) Q, writers Q^T W, the embedding E Q, and the head, which now
    carries the final norm's gain, is untied. The final-norm states (the fingerprint) are rotated and lose
    that gain: a lineage test by coordinates cannot see through this."""
    cfg = model.config
    if cfg.norm != "rmsnorm" or cfg.norm_position != "pre" or cfg.bias or cfg.position == "learned":
        raise ValueError("rotate_residual needs pre-norm RMSNorm blocks without norm biases or a position table")
    d = cfg.n_embd
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    new, config = _folded(model, final=True)
    new["transformer.wte.weight"] = new["transformer.wte.weight"] @ Q
    new["lm_head.weight"] = new["lm_head.weight"] @ Q
    for _, readers, writers in _sublayers(model):
        for r in readers:
            new[r + ".weight"] = new[r + ".weight"] @ Q
        for w in writers:
            new[w + ".weight"] = Q.T @ new[w + ".weight"]
            if w + ".bias" in new:
                new[w + ".bias"] = new[w + ".bias"] @ Q
    return _loaded(model, config, new)


# ----------------------------------------------------------------------------- reparametrized attention and norms
# Four more edits that keep the function and change the weights, as one hides a lineage from a test that compares
# weights (MergeLock does the first two). None of them touches the residual stream, so the fingerprint (the
# final-norm state) stays as it is -- except fold_norms on the final norm, which changes the fingerprint itself.

def _invertible(n: int, g: torch.Generator, scale: float):
    """(A, A^-1), float64 n x n: U diag(s) V^T with U, V random orthogonal and s log-uniform in [1/scale, scale]:
    invertible, not orthogonal (scale > 1), its inverse exact by construction rather than solved for."""
    U, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    s = torch.exp((2 * torch.rand(n, generator=g, dtype=torch.float64) - 1) * math.log(scale))
    return U * s @ V.T, V / s @ U.T


def _rope_commuting(config, g: torch.Generator, scale: float):
    """(M, M^-T), float64 head_dim x head_dim: a map of one head's query space that commutes with every RoPE
    rotation, and its inverse transpose for the keys. RoPE turns each pair (dim i, dim i + r/2) of the rotated dims
    (the rotate-half layout) as a complex number z -> e^{i t w} z; what commutes with that for every angle is a
    complex scalar c = rho e^{i phi} per pair (a 2x2 scaled rotation), whose inverse transpose is (1/rho) e^{i phi}.
    The dims RoPE leaves alone (partial rotary; all of them without RoPE) take any invertible map."""
    hd = config.head_dim
    r = config.rotary_dims if config.position == "rope" else 0
    M, N = torch.zeros(hd, hd, dtype=torch.float64), torch.zeros(hd, hd, dtype=torch.float64)
    i = torch.arange(r // 2)
    j = i + r // 2
    rho = torch.exp((2 * torch.rand(r // 2, generator=g, dtype=torch.float64) - 1) * math.log(scale))
    phi = 2 * math.pi * torch.rand(r // 2, generator=g, dtype=torch.float64)
    for X, radius in ((M, rho), (N, 1 / rho)):
        X[i, i], X[i, j], X[j, i], X[j, j] = (radius * phi.cos(), -radius * phi.sin(), radius * phi.sin(),
                                              radius * phi.cos())
    A, A_inv = _invertible(hd - r, g, scale)
    M[r:, r:], N[r:, r:] = A, A_inv.T
    return M, N


def _map_qkv(attn, q, k, v) -> None:
    """Each head's rows of the fused q/k/v projection (and bias) left-multiplied by its map: q, k, v lists of
    float64 head_dim x head_dim maps, one per query head, key head, value head."""
    full = torch.block_diag(*q, *k, *v)
    for p in (attn.c_attn.weight, attn.c_attn.bias):
        if p is not None:
            p.copy_((full @ p.double()).to(p.dtype))


@torch.no_grad()
def map_qk(model: GPT, seed: int = 0, scale: float = 2.0) -> GPT:
    """The same function with each head's query and key projections reparametrized by an invertible, non-orthogonal
    map: W_q -> M W_q, W_k -> M^-T W_k (rows: head dims), so every score q.k = q^T M^T M^-T k is unchanged. M
    commutes with RoPE's rotations (_rope_commuting), so the scores at every pair of positions are kept; under
    grouped-query attention one M per kv head serves all its query heads. scale: the largest stretch of M (its
    singular values, or each RoPE pair's modulus, lie in [1/scale, scale]). Where q and k are RMS-normalized
    (qk_norm) a non-orthogonal M changes the RMS, so such models are refused."""
    cfg = model.config
    if cfg.qk_norm != "none":
        raise ValueError(f"map_qk keeps the function only without q/k norms: qk_norm={cfg.qk_norm!r} divides q and k "
                         f"by their RMS, which a non-orthogonal map changes")
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
    for block in out.transformer.h:
        if hasattr(block, "attn"):
            maps = [_rope_commuting(cfg, g, scale) for _ in range(Hkv)]
            _map_qkv(block.attn, [maps[h // (H // Hkv)][0] for h in range(H)], [N for _, N in maps],
                     [torch.eye(hd, dtype=torch.float64)] * Hkv)
    return out


@torch.no_grad()
def map_vo(model: GPT, seed: int = 0, scale: float = 2.0) -> GPT:
    """The same function with each head's value and output projections reparametrized by an invertible,
    non-orthogonal map: W_v -> B W_v (rows: head dims), W_O -> W_O B^-1 (that head's columns). A head's output
    is a weighted average of its values, so it becomes B y, which W_O B^-1 reads as y. Under grouped-query
    attention one B per kv head serves its query heads' columns of W_O. A head norm (head_norm) or an output
    gate (attn_gate) acts per coordinate between the two and does not commute with B: such models are refused."""
    cfg = model.config
    if cfg.head_norm or cfg.attn_gate:
        raise ValueError("map_vo keeps the function only where nothing acts per coordinate between W_v and W_O; "
                         "head_norm and attn_gate do")
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
    for block in out.transformer.h:
        if hasattr(block, "attn"):
            maps = [_invertible(hd, g, scale) for _ in range(Hkv)]
            eye = torch.eye(hd, dtype=torch.float64)
            _map_qkv(block.attn, [eye] * H, [eye] * Hkv, [B for B, _ in maps])
            w = block.attn.c_proj.weight
            w.copy_((w.double() @ torch.block_diag(*[maps[h // (H // Hkv)][1] for h in range(H)])).to(w.dtype))
    return out


@torch.no_grad()
def permute_heads(model: GPT, seed: int = 0) -> GPT:
    """The same function with each layer's attention heads in another order: W_O sums the heads, in any order. The
    kv heads are permuted, each taking its group of query heads along (grouped-query attention ties a query head
    to its kv head by index), and the query heads within each group: rows of q, k and v (and biases), columns of
    W_O, and whatever else is per head (a sink logit, an output gate's rows, an all-heads q/k norm's gains; a
    per-head q/k norm or head norm shares one gain across heads and stays)."""
    cfg = model.config
    out, g = _copy(model), torch.Generator().manual_seed(seed)
    H, Hkv, hd = cfg.n_head, cfg.kv_heads, cfg.head_dim
    group = H // Hkv
    rows = lambda heads: (heads[:, None] * hd + torch.arange(hd)).flatten()    # the dims of those heads, in order
    for block in out.transformer.h:
        if not hasattr(block, "attn"):
            continue
        attn, kv = block.attn, torch.randperm(Hkv, generator=g)
        # new query head j * group + i is old head kv[j] * group + (a permutation of the group)[i]
        q = torch.cat([kv[j] * group + torch.randperm(group, generator=g) for j in range(Hkv)])
        qkv = torch.cat([rows(q), H * hd + rows(kv), (H + Hkv) * hd + rows(kv)])
        per_head = [(attn.c_attn.weight, qkv), (attn.c_attn.bias, qkv), (getattr(attn, "sink", None), q)]
        if cfg.attn_gate:
            per_head += [(attn.c_gate.weight, rows(q)), (attn.c_gate.bias, rows(q))]
        if cfg.qk_norm == "all":                  # one gain per dim of every head: it moves with its head
            per_head += [(attn.q_norm.weight, rows(q)), (attn.k_norm.weight, rows(kv))]
        for p, index in per_head:
            if p is not None:
                p.copy_(p[index])
        attn.c_proj.weight.copy_(attn.c_proj.weight[:, rows(q)])
    return out


def _sublayers(model: GPT) -> list:
    """(input norm, readers, writers) of every block's sublayer, by state-dict name (without ".weight"): the norm
    that reads the block's stream for it (absent from the state where the block is post-norm), the linears that read
    the norm's output (every linear of the sublayer but its output projections: q/k/v and the attention gate; up
    and gate, or a router and every expert's) and those output projections (c_proj), which write the stream."""
    out = []
    for i, block in enumerate(model.transformer.h):
        for norm, name in (("ln_1", "attn"), ("ln_2", "mlp")):
            if hasattr(block, name):
                h = f"transformer.h.{i}."
                linears = [f"{h}{name}.{n}" for n, m in getattr(block, name).named_modules()
                           if isinstance(m, torch.nn.Linear)]
                out.append((h + norm, [n for n in linears if not n.endswith("c_proj")],
                            [n for n in linears if n.endswith("c_proj")]))
    return out


def _folded(model: GPT, final: bool = True):
    """(state in float64, config) of fold_norms."""
    cfg = model.config
    src = {n: p.double() for n, p in model.state_dict().items()}
    new, config = dict(src), cfg
    unit = 0.0 if cfg.norm == "rmsnorm_1p" else 1.0          # the stored value of a gain of 1 (Gemma stores g - 1)
    norms = [(norm, [r + ".weight" for r in readers]) for norm, readers, _ in _sublayers(model)]
    if final:
        new["lm_head.weight"] = src.get("lm_head.weight", src["transformer.wte.weight"])
        config = dataclasses.replace(cfg, tie_embeddings=False)
        norms.append(("transformer.ln_f", ["lm_head.weight"]))
    norms = [(n, readers) for n, readers in norms if n + ".weight" in src]       # post-norm blocks have no input norm
    if not norms:
        raise ValueError(f"fold_norms: no norm of this model is read by a linear (norm={cfg.norm!r}, "
                         f"norm_position={cfg.norm_position!r}, final={final})")
    for norm, readers in norms:
        gain = src[norm + ".weight"] + (1.0 - unit)
        if norm + ".bias" in src and not gain.all():
            raise ValueError(f"fold_norms: {norm} has a gain of 0 beside its bias, which cannot move past it")
        for r in readers:
            new[r] = new[r] * gain               # W N(x) = W (g * n(x)) = (W diag g) n(x)
        new[norm + ".weight"] = torch.full_like(gain, unit)
        if norm + ".bias" in src:                    # g * n + b = g * (n + b / g): the bias stays in the norm
            new[norm + ".bias"] = src[norm + ".bias"] / gain
    return new, config


def _loaded(model: GPT, config, state: dict) -> GPT:
    """A new model of `config` holding `state` (float64), in model's dtype."""
    out, dtype = _copy(model, config), next(model.parameters()).dtype
    out.load_state_dict({n: p.to(dtype) for n, p in state.items()})
    return out


@torch.no_grad()
def fold_norms(model: GPT, final: bool = True) -> GPT:
    """The same function with each norm's gain folded into the linears that read its output, the gain set to 1 (a
    LayerNorm's bias divided by it): W (g * n(x)) = (W diag g) n(x). A block's input norms (ln_1: q, k, v and the
    attention gate; ln_2: the MLP's up and gate) fold into their sublayer; norms whose output is added to the
    residual stream (post-norm, sandwich's output norms) are read by no linear and stay. final: the final norm
    too, into the LM head (untied where tied, as QuaRot does): the logits are kept, but the final-norm state, which
    is the fingerprint, is divided by the gain coordinate by coordinate. final=False keeps every residual state."""
    state, config = _folded(model, final)
    return _loaded(model, config, state)


def logit_change(a: GPT, b: GPT, vocab: int, seed: int = 0) -> float:
    """How far b's function is from a's, for an edit meant to keep it: max |logits_b - logits_a| / max |logits_a| on
    4 random sequences of 32 tokens (fewer where the context is shorter), at every position (not the last alone),
    over the first `vocab` tokens."""
    T = min(32, a.config.block_size, b.config.block_size)
    x = torch.randint(0, vocab, (4, T), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():           # with targets (any), the model returns the logits of every position
        la, lb = a(x, x)[0][..., :vocab].double(), b(x, x)[0][..., :vocab].double()
    return float((lb - la).abs().max() / la.abs().max())


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


# ----------------------------------------------------------------------------- upcycling into a mixture of experts

@torch.no_grad()
def upcycle(model: GPT, n_experts: int, experts_per_token: int, noise: float = 0.0, seed: int = 0,
            router_norm: str = "topk") -> GPT:
    """A dense model upcycled into a mixture of experts (Komatsuzaki et al. 2022, "Sparse Upcycling"): every MLP
    becomes n_experts copies of itself, each token routed to k = experts_per_token of them by a new router, drawn
    as init.py draws a router (N(0, 0.02^2), from `seed` and its name); attention, norms, embeddings and head are
    copied. noise > 0: each expert's matrices get Gaussian noise of std noise x that matrix's std, a draw of its
    own, so that the experts can part ways in training.
    At noise 0 with router_norm "topk" the function is the dense model's whatever the router: the k weights sum
    to 1 and every expert computes the same MLP. With "none" the MLP's output is scaled by the sum of the k
    largest router probabilities, at most 1: another function."""
    cfg = model.config
    if cfg.n_experts is not None:
        raise ValueError(f"upcycle takes a dense model; this one is already a mixture of {cfg.n_experts} experts")
    if not noise >= 0:
        raise ValueError(f"noise is a std relative to each expert matrix's own, >= 0; got {noise}")
    config = dataclasses.replace(cfg, n_experts=n_experts, experts_per_token=experts_per_token,
                                 router_norm=router_norm)          # GPTConfig refuses k > n, an unknown norm, ...
    out, dtype, source = _copy(model, config), next(model.parameters()).dtype, model.state_dict()
    state = {}
    for name, p in out.state_dict().items():
        if ".mlp.router." in name:
            g = torch.Generator().manual_seed(param_seed(seed, name))
            state[name] = torch.randn(p.shape, generator=g) * target_std(name, cfg.n_layer)
            continue
        dense = re.sub(r"\.mlp\.experts\.\d+\.", ".mlp.", name)      # expert e's c_fc is the dense MLP's c_fc
        w = source[dense]
        if noise and dense != name and w.dim() == 2:
            g = torch.Generator().manual_seed(param_seed(seed, "noise|" + name))
            w = w + (torch.randn(w.shape, generator=g) * noise * w.float().std()).to(w.dtype)
        state[name] = w
    out.load_state_dict({n: w.to(dtype) for n, w in state.items()})     # a router drawn in float32, as init.py's
    return out
