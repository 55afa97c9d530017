"""
hf.py: models on disk, loaded exactly -- the released models whose birth bias, lineage and sinks the paper's
questions are asked of, and the project's own checkpoints, through one door: load(path).

A Hugging Face directory holds config.json (an architecture in transformers' field names) and *.safetensors files
(its weights in transformers' tensor names). Each family here is mapped field by field onto GPTConfig's knobs and
tensor by tensor onto GPT's parameters, so that the project's own forward pass computes what transformers computes,
within float32 rounding, without transformers:

    family (architectures)          what sets it apart, as model.py's knobs
    LlamaForCausalLM                pre-norm RMSNorm, SwiGLU, RoPE (default, linear, llama3), GQA
    MistralForCausalLM              + a sliding window on every layer
    Qwen2ForCausalLM                + q/k/v biases; windows from max_window_layers on
    Qwen3ForCausalLM                + per-head q/k RMSNorm, head_dim set apart
    GPT2LMHeadModel                 LayerNorm, learned positions, tanh GELU, Conv1D layout
    GPTNeoXForCausalLM (Pythia)     parallel residual, partial RoPE, LayerNorm, fused per-head [q|k|v]
    Olmo2ForCausalLM                RMSNorm on each sublayer's output, q/k RMSNorm over all heads at once
    GemmaForCausalLM                embeddings x sqrt(width), RMSNorm x (1 + w), GeGLU (tanh), head_dim apart
    Gemma2ForCausalLM               + norms around each sublayer, soft-capped scores and logits,
                                    query_pre_attn_scalar, sliding and global layers alternating
    Gemma3ForCausalLM               + per-head q/k norm, layer_types, the local layers' own RoPE base
    (Gemma3ForConditionalGeneration: its language model, the vision tower left unread)
    Phi3ForCausalLM (Phi-3, -4-mini) fused qkv_proj and gate_up_proj, partial RoPE, LongRoPE up to its
                                    original context
    MixtralForCausalLM              Mistral's block, its MLP a mixture of experts: k of n per token, the k weights
                                    renormalized
    Qwen2MoeForCausalLM (Qwen1.5-MoE) + q/k/v biases, the k weights as the softmax gives them (or renormalized:
                                    norm_topk_prob), a sigmoid-gated shared expert, dense layers among the MoE ones
    OlmoeForCausalLM                OLMo's q/k RMSNorm over all heads, pre-norm, experts as Qwen2-MoE's, none shared
    Qwen3MoeForCausalLM             Qwen3's block, experts as Qwen2-MoE's, none shared; a window on every layer
    (the experts in either layout: one tensor per expert, as published, or transformers 5's fused experts.gate_up_proj
    and experts.down_proj)

  - each family reads exactly the fields its transformers class reads (FIELDS), in both spellings transformers
    writes (SPELLINGS: 4.x rope_theta + rope_scaling, 5.x rope_parameters); a field left out takes the class
    default, the sizes excepted (a file without them is refused, not read as the class's default model; Gemma 3's
    may be left out, as its published multimodal configs do); an explicit null means what it means to that class
    (a softcap: off, a bias: none), or is refused by name where transformers builds no one model from it (4.57 and
    5.x both fail on it, or build two different models);
  - a field the class does not read is refused by name unless it is null or says what the class builds anyway; so
    is a model_type naming another family than architectures, and a value 4.x and 5.x read as two models;
  - a field not understood, a tensor missing, unknown, misshapen or stored twice, an architecture not carried: each
    is one error naming it (and the config.json fields behind a tensor), before any weight is read. A tied LM head
    stored apart from its embedding must hold the same values. Nothing is approximated in silence.

A model here is a path: a Hugging Face directory, or a train.py checkpoint file (model.py's format). Every script
reads it through these, config.json once and each weight file once:

    read(path)               -> a Stored: its GPTConfig and every check that reads no weight (tensor names, shapes
                                and dtypes against config.json, on a model built on the meta device), shards open
    load(path or Stored)     -> a GPT in the checkpoint's dtype, filled in one pass over the files: each weight
                                checked finite as it lands, each file's sha256 taken on the same bytes if asked
    read_config(path)        -> read(path)'s GPTConfig alone
    check_weights_finite(path) -> every weight streamed once, one that holds NaN/inf refused by name
    token_rows(path, lo, hi) -> rows lo..hi of the token table alone
    main([path, ...])        -> hf.py's command line: what each model maps onto, nothing loaded

Needs model.py alone (the .safetensors format is read here, with plain file reads); copy the two files together.
"""
import argparse
import contextlib
import dataclasses
import enum
import hashlib
import io
import itertools
import json
import math
import os
import re
import sys
from typing import Optional

import torch

from model import (GPT, GPTConfig, all_finite, check_model_weights_finite, model_from_checkpoint, nonfinite_weight,
                   qkv_sizes, read_checkpoint)

# The families loaded, each architecture with the model_type transformers' AutoConfig
# expects of it (it builds the model_type's class): the one list of what hf.py carries
MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
               "Qwen3ForCausalLM": "qwen3", "Olmo2ForCausalLM": "olmo2", "GemmaForCausalLM": "gemma",
               "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3",
               "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox", "Gemma3ForConditionalGeneration": "gemma3",
               "MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe", "OlmoeForCausalLM": "olmoe",
               "Qwen3MoeForCausalLM": "qwen3_moe"}
FAMILIES = tuple(MODEL_TYPES)
CHECKPOINT = "train.py checkpoint"      # a Stored's arch where the model is one of this project's checkpoint files


# ----------------------------------------------------------------------------- a model on disk, read once
# read() does every check that needs no weight and reads no weight; load() then reads each file once, front to
# back. A script reads its model with read() first (its config decides what the script may do), refuses what it
# must, and only then loads: config.json is opened once, each weight file once.

@dataclasses.dataclass
class Shard:
    """One .safetensors file, open: its header as stored (8 bytes of length, then JSON), and each tensor's dtype,
    shape and byte range [begin, end) after the header. load() reads the rest of the file once and closes it."""
    file: str
    handle: io.BufferedReader
    head: bytes
    tensors: dict
    size: int                       # the file's bytes, header included


@dataclasses.dataclass
class Stored:
    """A model on disk as read() leaves it, its config checked and no weight read: a Hugging Face directory's
    architecture, open shards and plan of which tensor fills which parameter; a train.py checkpoint, memory-mapped
    (its seeds and init_from are records a lineage test reads)."""
    path: str
    config: GPTConfig
    params: int                     # its parameters, counted on the model the checks built (on the meta device)
    arch: str = CHECKPOINT
    shards: dict = None             # {file: Shard}, in the order load() reads them
    plan: dict = None               # plan_weights' {name relative to the prefix: (file, tensor name, pieces)}
    dtype: torch.dtype = None       # the dtype load() builds in where none is asked for (built_dtype)
    twin: dict = None               # a tied LM head stored apart: {embedding, head (relative names): tensor names}
    json: dict = None               # a directory's config.json, as read (fields no GPTConfig knob holds: bos_token_id)
    checkpoint: dict = None

    def close(self) -> None:
        for shard in (self.shards or {}).values():
            shard.handle.close()


def read(path) -> Stored:
    """The model at `path`, read as far as its checks need, no weight read: a Hugging Face directory's config.json
    and each shard's header, every tensor checked against the config on a model built on the meta device; a
    checkpoint's file structure (memory-mapped)."""
    path = checked_path(path)
    if os.path.isfile(path):
        checkpoint = read_checkpoint(path, mmap=True)
        config = GPTConfig(**checkpoint["config"])
        with torch.device("meta"):
            params = GPT(config).num_params()
        return Stored(path, config, params, checkpoint=checkpoint)
    config, arch, shards, hf_json = read_dir(path)
    try:
        with torch.device("meta"):
            model = GPT(config)
        fields = hf_json["text_config"] if arch == "Gemma3ForConditionalGeneration" else hf_json    # a tensor's causes
        plan = plan_weights(model, shards, arch, path, fields)
        embedding, head = top_tensors(arch)
        heads = [name for shard in shards.values() for name in shard.tensors if relative_name(name, arch) == head]
        twin = {embedding: plan[embedding][1], head: heads[0]} if config.tie_embeddings and heads else None
        return Stored(path, config, model.num_params(), arch, shards, plan, built_dtype(shards, arch), twin, hf_json)
    except BaseException:
        for shard in shards.values():
            shard.handle.close()
        raise


def load(model, device="cpu", dtype: Optional[torch.dtype] = None, digests: Optional[dict] = None) -> GPT:
    """The model at `model` (a path, or read()'s Stored of one), built in its stored dtype (bf16 stays bf16; `dtype`
    overrides) and filled in one pass over its files, tensor by tensor, so loading peaks near the checkpoint's own
    size. A weight that holds NaN or inf, as stored or as cast, is refused by name; so is a tied LM head stored apart
    with other values than its embedding (check_tied_head). digests, a dict: filled with each file's size and
    sha256, computed on the bytes the load reads."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ValueError(f"a model loads in a floating-point dtype (float32, bfloat16, float16), not {dtype}")
    stored = model if isinstance(model, Stored) else read(model)
    if stored.checkpoint is not None:
        return load_checkpoint_file(stored, device, dtype, digests)
    with torch.device("meta"):
        model = GPT(stored.config).to(dtype or stored.dtype)      # dtype on the meta device: nothing allocated yet
    model = model.to_empty(device=device)
    params, tied = dict(model.named_parameters()), {}
    with torch.no_grad(), contextlib.closing(stored):
        for name, t in stream(stored, digests):
            check_tied_head(stored, name, t, tied, dtype or stored.dtype)
            if name not in stored.plan:              # the tied head's twin: no parameter reads it
                continue
            _, hf_name, pieces = stored.plan[name]
            for param, rows, read_rows, transpose in pieces:
                dest = params[param] if rows is None else params[param][rows]
                src = t if read_rows is None else t[read_rows]
                dest.copy_(src.T if transpose else src)
                if not all_finite(dest):            # as cast: a float32 weight past float16's range is inf there
                    raise nonfinite_weight(stored.path, hf_name, dest)
    return model


def load_checkpoint_file(stored: Stored, device, dtype, digests) -> GPT:
    """load() of a train.py checkpoint. With digests, the file is read whole, once, and its sha256 taken on the
    same bytes (the memory-mapped checkpoint's weights are left untouched)."""
    checkpoint = stored.checkpoint
    if digests is not None:
        with open(stored.path, "rb") as fh:
            data = fh.read()
        digests[os.path.basename(stored.path)] = dict(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        del data
    model = model_from_checkpoint(checkpoint, stored.path, device)      # checked finite as stored ...
    return model if dtype is None else check_model_weights_finite(model.to(dtype), stored.path)   # ... and as cast


def checked_path(path) -> str:
    """`path` as a string, refused in one line where nothing is there."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path!r}: give a train.py checkpoint (.pt) or a Hugging Face directory")
    return path


def read_config(path) -> GPTConfig:
    """The GPTConfig of the model at `path`, checked as read() checks it, no weight read."""
    stored = read(path)
    stored.close()
    return stored.config


def stream(stored: Stored, digests: Optional[dict] = None):
    """(name relative to the family's prefix, tensor as stored) of every tensor the loader reads (plan_weights'
    and a tied head's twin), each file read once, front to back, and closed. digests: each file's size and sha256
    of every byte, the tensors never read included (a vision tower), in the same pass."""
    for shard in stored.shards.values():
        sha = hashlib.sha256(shard.head) if digests is not None else None
        try:
            for hf_name, (kind, shape, (begin, end)) in sorted(shard.tensors.items(), key=lambda kv: kv[1][2]):
                name = relative_name(hf_name, stored.arch)
                wanted = name is not None and (name in stored.plan or name == top_tensors(stored.arch)[1])
                if wanted or sha is not None:
                    t = read_tensor(shard, hf_name)
                    if sha is not None:
                        sha.update(t.reshape(-1).view(torch.uint8).numpy())
                    if wanted:
                        yield name, t
        finally:
            shard.handle.close()
        if sha is not None:
            digests[os.path.relpath(shard.file, stored.path)] = dict(bytes=shard.size, sha256=sha.hexdigest())


def check_weights_finite(path) -> None:
    """Stream every weight of the model at `path` once and refuse, by name, one that holds NaN or inf, or a tied LM
    head stored apart that differs from its embedding: load()'s checks, for a study that does not load the model.
    Tensors the loader never reads (NOT_READ: a vision tower, a mask buffer) cannot refuse a model that loads."""
    stored = read(path)
    if stored.checkpoint is not None:
        for name, t in stored.checkpoint["model"].items():
            if t.is_floating_point() and not all_finite(t):
                raise nonfinite_weight(stored.path, name, t)
        return
    tied = {}
    try:
        for name, t in stream(stored):
            check_tied_head(stored, name, t, tied, stored.dtype)
            if not all_finite(t):
                raise nonfinite_weight(stored.path, stored.plan[name][1] if name in stored.plan else stored.twin[name],
                                       t)
    finally:
        stored.close()


def token_rows(model, lo: int, hi: int):
    """Rows [lo, hi) of the token embedding table, float32 numpy (rows x width): those rows of one tensor alone
    (a checkpoint memory-mapped)."""
    stored = model if isinstance(model, Stored) else read(model)
    if stored.checkpoint is not None:
        return stored.checkpoint["model"]["transformer.wte.weight"][lo:hi].float().numpy()
    file, hf_name, _ = stored.plan[top_tensors(stored.arch)[0]]
    shard = stored.shards[file]
    kind, (rows, width), (begin, _) = shard.tensors[hf_name]
    lo, hi = max(0, min(lo, rows)), max(0, min(hi, rows))
    row_bytes = width * SAFETENSORS_BYTES[kind]
    t = read_bytes(shard, begin + lo * row_bytes, max(0, hi - lo) * row_bytes, SAFETENSORS_FLOATS[kind])
    stored.close()
    return t.view(-1, width).float().numpy()


# ----------------------------------------------------------------------------- config.json -> GPTConfig
# One reader for every field of every family: FIELDS lists, per family, the fields its transformers class reads (4.57
# and 5.x, eager attention), each with what a value must be, the class default (taken where the field is absent) and
# what an explicit null means. 4.x hands a null on as None, which its modeling code reads as "off" (`if softcap is not
# None`, nn.Linear(bias=None)) or fails on; 5.x refuses a null for most fields (typed dataclasses). Where one version
# builds a model from a null and the other refuses it, that model is what the null means; where both fail on it, or
# build two different models, the null is refused by name. A field is popped as it is read; what is left at the end
# is refused unless transformers' class ignores it too (check_unread).

# what a value must be (JSON gives exact types: "12", 12.5, true or -4 never becomes a model)
INT, COUNT, NUM, BOOL = "an integer >= 1", "an integer >= 0", "a finite number > 0", "true or false"
STR, OBJ, NAME_LIST, NUMBER_LIST = "a string", "an object", "a list of names", "a list of numbers > 0"
INDEX_LIST = "a list of layer indices (integers >= 0)"
OFF = ("false (where it is true, transformers 4.57 slides every layer of a Qwen2-MoE, eager attention, and 5.x every "
       "other layer below max_window_layers: two models)")
KINDS = {INT: lambda v: type(v) is int and v >= 1,
         COUNT: lambda v: type(v) is int and v >= 0,
         NUM: lambda v: type(v) in (int, float) and math.isfinite(v) and v > 0,
         BOOL: lambda v: type(v) is bool,
         STR: lambda v: type(v) is str,
         OBJ: lambda v: type(v) is dict,
         NAME_LIST: lambda v: type(v) is list and all(type(a) is str for a in v),
         NUMBER_LIST: lambda v: type(v) is list and all(KINDS[NUM](a) for a in v),
         INDEX_LIST: lambda v: type(v) is list and all(KINDS[COUNT](a) for a in v),
         OFF: lambda v: v is False}
Mark = enum.Enum("Mark", "REQUIRED REFUSED")    # values no config.json holds: a field with no default, a null refused
REQUIRED, REFUSED = Mark.REQUIRED, Mark.REFUSED


@dataclasses.dataclass(frozen=True)
class Field:
    """How one field is read: `kind` (a key of KINDS), the value taken where it is absent (transformers' class
    default; REQUIRED: it must be given), the value an explicit null stands for (REFUSED: refused by name)."""
    kind: str
    default: object = REQUIRED
    null: object = REFUSED


class Fields:
    """One config.json object read against a table (name -> Field), each field popped as it is read: what is left
    (`left`) was read by no one. `where` names a nested object in messages (rope_scaling.)."""

    def __init__(self, raw: dict, table: dict, family: str, where: str = ""):
        self.left, self.table, self.family, self.where = dict(raw), table, family, where

    def given(self, key: str) -> bool:      # neither absent nor null (asked before the field is read)
        return self.left.get(key) is not None

    def __call__(self, key: str):
        """The field's value: as given, the default where absent, what a null means where null."""
        field = self.table[key]
        if key not in self.left:
            if field.default is REQUIRED:
                raise ValueError(f"{self.where[:-1] or 'config.json'} lacks the field {key!r}")
            return field.default
        value = self.left.pop(key)
        if value is None:
            if field.null is REFUSED:
                raise self.null_refused(key)
            return field.null
        if not KINDS[field.kind](value):
            raise ValueError(f"field {self.where}{key} must be {field.kind}, got {value!r}")
        return value

    def get(self, key: str, absent=None):
        """The field's value where the family reads it (its table holds it), else `absent`: a knob it does not
        have."""
        return self(key) if key in self.table else absent

    def used(self, key: str, value):
        """`value`, read as `key`, where the model needs it: a null (None) is refused (a field transformers reads
        only in some configurations fails on a null only there)."""
        if value is None:
            raise self.null_refused(key)
        return value

    def null_refused(self, key: str) -> ValueError:
        default = self.table[key].default
        fix = "give it a value" + ("" if default in (REQUIRED, None) else
                                   f", or leave it out for transformers' default {default!r}")
        return ValueError(f"field {self.where}{key} is null, which transformers' {self.family} builds no one model "
                          f"from (it fails on it, refuses it, or reads it two ways): {fix}")


# ----- what transformers 4.x and 5.x spell, or read, two ways: one table
# 5.x reads RoPE from one object, rope_parameters, where 4.x reads top-level fields beside rope_scaling (4.x's object:
# the kind, as rope_type or by its older key type, and the kind's factors). A file may hold either spelling, or both:
# 5.x writes back the 4.x fields it was given, and reads one where rope_parameters lacks the value. A value given both
# ways must be the same, or 4.x and 5.x build two models: refused. A null RoPE base or rotary fraction fails in 4.x
# (None ** x, int(head_dim * None)) and is moot to 5.x where rope_parameters gives the value: None here (null=None),
# refused where nothing gives it (_rope). SPELLINGS, per family: {4.x field: (where 5.x reads it, a key of
# rope_parameters ("": the object itself), and the Field it is read by here: the class default, what a null means)}.
ROPE_OBJECT = Field(OBJ, None, null=None)         # absent or null: no scaling, in both versions
ECHO = Field(NUM, None, null=None)    # a copy 4.57 writes beside the field it reads; read by neither: it must agree


def flag(default: bool) -> Field:
    """A true/false field spelled alike, whose null the two read apart: 4.x hands None on, which its code reads as
    false (nn.Linear(bias=None): no bias; `if config.tie_word_embeddings`: untied), where 5.x refuses it: false."""
    return Field(BOOL, default, null=False)


LLAMA = dict(rope_theta=("rope_theta", Field(NUM, 10000.0, null=None)),
             partial_rotary_factor=("partial_rotary_factor", Field(NUM, 1.0, null=1.0)),   # a null: 5.x rotates
             rope_scaling=("", ROPE_OBJECT))                                               # whole heads (4.x fails)
SPELLINGS = {
    "LLaMA lineage": LLAMA,
    # the LLaMA lineage's fields, its RoPE base 1e6 where absent (4.x's default, 5.x's default_theta)
    "MixtralForCausalLM": dict(LLAMA, rope_theta=("rope_theta", Field(NUM, 1e6, null=None))),
    "Phi3ForCausalLM": dict(      # Phi-3's class reads the rotary fraction in both versions: a null fails in 4.x
        rope_theta=("rope_theta", Field(NUM, 10000.0, null=None)),
        partial_rotary_factor=("partial_rotary_factor", Field(NUM, 1.0, null=None)),
        rope_scaling=("", ROPE_OBJECT)),
    "GPTNeoXForCausalLM": dict(   # its own 4.x names, and 4.57's copies of them in the LLaMA lineage's names
        rotary_emb_base=("rope_theta", Field(NUM, 10000.0, null=None)),
        rotary_pct=("partial_rotary_factor", Field(NUM, 0.25, null=None)),
        rope_scaling=("", ROPE_OBJECT), rope_theta=("rope_theta", ECHO),
        partial_rotary_factor=("partial_rotary_factor", ECHO)),
    "Gemma3ForCausalLM": dict(    # 4.x: the LLaMA lineage's fields for the global layers, and the sliding layers'
        # base; 5.x: one object per layer type, none of these three beside it (its rotary fraction is LLaMA's)
        rope_theta=("full_attention.rope_theta", Field(NUM, 1e6, null=None)),
        rope_scaling=("full_attention", ROPE_OBJECT),
        rope_local_base_freq=("sliding_attention.rope_theta", Field(NUM, 10000.0, null=None))),
    # its multimodal config: 4.x ties the LM head by text_config's field, 5.x by the top level's (both true where
    # absent, a null false): they must say the same
    "Gemma3ForConditionalGeneration": {"text_config.tie_word_embeddings": ("tie_word_embeddings", flag(True))},
}


def spelled(row: dict, v5: str) -> str:
    """The 4.x field of `row` (SPELLINGS) that 5.x reads as `v5`."""
    return next(v4 for v4, (key, field) in row.items() if key == v5 and field is not ECHO)


# RoPE's parameters, as rope_scaling (4.x) and rope_parameters (5.x) hold them: those of every kind, then each kind's,
# read as 5.x reads them where 4.x fails (llama3's original context absent: max_position_embeddings; a null LongRoPE
# factor: derived). A top-level original_max_position_embeddings 5.x reads over llama3's, 4.x never: they must agree
# (UNREAD_AGREES).
ROPE_FIELDS = dict(rope_type=Field(STR, None), type=Field(STR, None),   # "type": the older spelling
                   rope_theta=Field(NUM, None), partial_rotary_factor=Field(NUM, None))   # None: the top level's
ROPE_KIND_FIELDS = {
    "default": {},
    "linear": dict(factor=Field(NUM)),
    "llama3": dict(factor=Field(NUM), low_freq_factor=Field(NUM), high_freq_factor=Field(NUM),
                   original_max_position_embeddings=Field(INT, None)),
    "longrope": dict(short_factor=Field(NUMBER_LIST), long_factor=Field(NUMBER_LIST),
                     factor=Field(NUM, None, null=None), attention_factor=Field(NUM, None, null=None),
                     original_max_position_embeddings=Field(INT, None, null=None)),
}


# The fields of each family, as its transformers class reads them (4.57 and 5.x, eager attention).
SIZES = dict(vocab_size=Field(INT), hidden_size=Field(INT), num_hidden_layers=Field(INT),
             num_attention_heads=Field(INT), intermediate_size=Field(INT))   # no default taken: a model has its sizes
DERIVED = Field(INT, None, null=None)   # num_key_value_heads, head_dim absent or null: num_attention_heads,
                                        # hidden_size // num_attention_heads (both versions)
HEAD_DIM_GETATTR = Field(INT, None)   # no config field: the attention reads getattr(config, "head_dim", derived), a
                                      # null reaches nn.Linear and fails
SILU, GELU_TANH = Field(STR, "silu"), Field(STR, "gelu_pytorch_tanh")
LAYER_TYPES = Field(NAME_LIST, None, null=None)    # absent or null: derived from the family's other window fields


def decoder_fields(max_pos: int, kv: Field, head_dim: Optional[Field], eps: float = 1e-6, tie: bool = False,
                   rope: dict = LLAMA, **more) -> dict:
    """The fields every class of the LLaMA lineage reads, at the family's defaults (its RoPE's: SPELLINGS), and
    the family's own (`more`). head_dim None: the class derives it and reads no field (OLMoE)."""
    return dict(SIZES, num_key_value_heads=kv, **({"head_dim": head_dim} if head_dim else {}),
                max_position_embeddings=Field(INT, max_pos), rms_norm_eps=Field(NUM, eps),
                tie_word_embeddings=flag(tie), rope_parameters=ROPE_OBJECT,
                **{key: field for key, (_, field) in rope.items()}, **more)


QWEN_WINDOWS = dict(use_sliding_window=flag(False), sliding_window=Field(INT, 4096, null=None),
                    max_window_layers=Field(COUNT, 28, null=None),   # null: refused where the window needs it
                    layer_types=LAYER_TYPES)
# Qwen2-MoE reads Qwen2's window fields, but 5.x writes sliding_window 0 where use_sliding_window is false, and 4.57
# and 5.x slide other layers where it is true (refused: OFF)
QWEN_MOE_WINDOWS = dict(QWEN_WINDOWS, use_sliding_window=Field(OFF, False, null=False),
                        sliding_window=Field(COUNT, 4096, null=None))
GEMMA_SCALE = dict(query_pre_attn_scalar=Field(NUM, 256), sliding_window=Field(INT, 4096),  # a null window fails:
                   layer_types=LAYER_TYPES)                   # Gemma 2 and 3 build a sliding mask unconditionally
FIELDS = {
    "LlamaForCausalLM": decoder_fields(2048, DERIVED, DERIVED, hidden_act=SILU, attention_bias=flag(False),
                                       mlp_bias=flag(False)),
    "MistralForCausalLM": decoder_fields(131072, Field(INT, 8, null=None), DERIVED, hidden_act=SILU,
                                         sliding_window=Field(INT, 4096, null=None)),   # null: no window
    "Qwen2ForCausalLM": decoder_fields(32768, Field(INT, 32, null=None), HEAD_DIM_GETATTR, hidden_act=SILU,
                                       **QWEN_WINDOWS),
    "Qwen3ForCausalLM": decoder_fields(32768, Field(INT, 32, null=None), Field(INT, 128), hidden_act=SILU,
                                       attention_bias=flag(False), **QWEN_WINDOWS),
    "Olmo2ForCausalLM": decoder_fields(2048, DERIVED, HEAD_DIM_GETATTR, eps=1e-5, hidden_act=SILU,
                                       attention_bias=flag(False)),
    "GemmaForCausalLM": decoder_fields(8192, Field(INT, 16), Field(INT, 256), tie=True, hidden_act=GELU_TANH,
                                       attention_bias=flag(False)),
    "Gemma2ForCausalLM": decoder_fields(8192, Field(INT, 4), Field(INT, 256), tie=True, hidden_activation=GELU_TANH,
                                        attention_bias=flag(False), **GEMMA_SCALE,
                                        attn_logit_softcapping=Field(NUM, 50.0, null=None),   # null: no softcap
                                        final_logit_softcapping=Field(NUM, 30.0, null=None)),
    "Gemma3ForCausalLM": dict(decoder_fields(131072, Field(INT, 4), Field(INT, 256), tie=True,
                                             rope=dict(LLAMA, **SPELLINGS["Gemma3ForCausalLM"]),
                                             hidden_activation=GELU_TANH, attention_bias=flag(False), **GEMMA_SCALE,
                                             final_logit_softcapping=Field(NUM, None, null=None),
                                             sliding_window_pattern=Field(INT, 6, null=None)),  # used without
                              # layer_types only; published multimodal configs leave out every text field at its
                              # default, sizes too
                              vocab_size=Field(INT, 262208), hidden_size=Field(INT, 2304),
                              intermediate_size=Field(INT, 9216), num_hidden_layers=Field(INT, 26),
                              num_attention_heads=Field(INT, 8)),
    "Phi3ForCausalLM": decoder_fields(4096, DERIVED, HEAD_DIM_GETATTR, eps=1e-5, rope=SPELLINGS["Phi3ForCausalLM"],
                                      hidden_act=SILU, sliding_window=Field(INT, None, null=None),   # null: none
                                      original_max_position_embeddings=Field(INT, 4096, null=None)),  # longrope's
    # mixtures of experts: null counts and widths fail in both versions; a null norm_topk_prob is false (4.x's `if`),
    # a null mlp_only_layers no layer (both)
    "MixtralForCausalLM": decoder_fields(131072, Field(INT, 8, null=None), DERIVED, eps=1e-5,
                                         rope=SPELLINGS["MixtralForCausalLM"], hidden_act=SILU,
                                         sliding_window=Field(INT, None, null=None),     # null: no window
                                         num_local_experts=Field(INT, 8), num_experts_per_tok=Field(INT, 2)),
    "Qwen2MoeForCausalLM": decoder_fields(32768, Field(INT, 16), HEAD_DIM_GETATTR, hidden_act=SILU, qkv_bias=flag(True),
                                          **QWEN_MOE_WINDOWS, num_experts=Field(COUNT, 60),
                                          num_experts_per_tok=Field(INT, 4), norm_topk_prob=flag(False),
                                          moe_intermediate_size=Field(INT, 1408),
                                          shared_expert_intermediate_size=Field(INT, 5632),
                                          decoder_sparse_step=Field(INT, 1),
                                          mlp_only_layers=Field(INDEX_LIST, [], null=[])),
    "OlmoeForCausalLM": decoder_fields(4096, DERIVED, None, eps=1e-5, hidden_act=SILU, attention_bias=flag(False),
                                       clip_qkv=Field(NUM, None, null=None),           # null: no clamp
                                       num_experts=Field(INT, 64), num_experts_per_tok=Field(INT, 8),
                                       norm_topk_prob=flag(False)),
    "Qwen3MoeForCausalLM": decoder_fields(32768, Field(INT, 4), HEAD_DIM_GETATTR, hidden_act=SILU,
                                          attention_bias=flag(False), use_sliding_window=flag(False),
                                          sliding_window=Field(INT, 4096, null=None),   # null: none
                                          num_experts=Field(COUNT, 128), num_experts_per_tok=Field(INT, 8),
                                          num_local_experts=Field(INT, None, null=None),   # 5.x's spelling
                                          norm_topk_prob=flag(False), moe_intermediate_size=Field(INT, 768),
                                          decoder_sparse_step=Field(INT, 1),
                                          mlp_only_layers=Field(INDEX_LIST, [], null=[])),
    "GPT2LMHeadModel": dict(n_positions=Field(INT), vocab_size=Field(INT), n_layer=Field(INT), n_head=Field(INT),
                            n_embd=Field(INT), n_inner=Field(INT, None, null=None),   # absent or null: 4 * n_embd
                            activation_function=Field(STR, "gelu_new"), layer_norm_epsilon=Field(NUM, 1e-5),
                            # null: 4.x's eager attention leaves the scores unscaled, its sdpa scales them
                            scale_attn_weights=Field(BOOL, True),
                            scale_attn_by_inverse_layer_idx=flag(False), tie_word_embeddings=flag(True)),
    "GPTNeoXForCausalLM": dict(SIZES, hidden_act=Field(STR, "gelu"), max_position_embeddings=Field(INT, 2048),
                               layer_norm_eps=Field(NUM, 1e-5), use_parallel_residual=flag(True),
                               attention_bias=flag(True), tie_word_embeddings=flag(False), rope_parameters=ROPE_OBJECT,
                               **{key: field for key, (_, field) in SPELLINGS["GPTNeoXForCausalLM"].items()}),
}
# fields a family's transformers class stores but never applies, found in the configs transformers itself writes:
# ignored, whatever their value, as there
IGNORED = {"GemmaForCausalLM": {"hidden_activation"},           # Gemma 1 reads hidden_act, ...
           "Gemma2ForCausalLM": {"hidden_act"},                 # ... Gemma 2 and 3 hidden_activation
           "Gemma3ForCausalLM": {"hidden_act", "attn_logit_softcapping"}}   # stored, never passed to the attention

# fields that never change the forward pass of a causal LM in eval mode: bookkeeping, token ids,
# initialization, dropout, caching, generation defaults, heads other than the LM head
INERT = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "_model_name_or_path", "name_or_path", "_commit_hash", "bos_token_id", "eos_token_id", "pad_token_id",
    "unk_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range", "initializer_factor",
    "attention_dropout", "hidden_dropout", "dropout", "attn_pdrop", "embd_pdrop", "resid_pdrop", "use_cache",
    "output_attentions", "output_hidden_states", "return_dict", "use_return_dict", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "chunk_size_feed_forward", "is_decoder", "problem_type", "id2label", "label2id",
    "finetuning_task", "prefix", "tokenizer_class", "task_specific_params", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout", "classifier_dropout", "cache_implementation", "auto_map",
    "pretraining_tp",               # LLaMA: the same matmuls, split in slices
    "reorder_and_upcast_attn",      # GPT-2: float32 scores, the scale folded into the matmul (eager only): rounding
    "n_ctx",                        # GPT-2: a legacy alias of n_positions that neither version reads
    "_sliding_window_pattern",      # Gemma 3: a private echo that transformers writes and never reads
    "is_llama_config",              # nanotron (SmolLM2): which of its own config classes to build, nothing more
    "output_router_logits", "router_aux_loss_coef",   # a mixture of experts' training: the router's loss
    "router_jitter_noise",          # Mixtral: noise on the router's input in training mode only
}
# fields that are inert only at these values (or null)
INERT_IF = {"is_encoder_decoder": False, "add_cross_attention": False, "pruned_heads": {},
            "tie_encoder_decoder": False, "use_bidirectional_attention": False}
# the top level of a Gemma 3 multimodal config.json around its text_config (the vision tower is not read)
GEMMA3_MULTIMODAL = {"text_config", "vision_config", "boi_token_index", "eoi_token_index", "image_token_index",
                     "mm_tokens_per_image"}

# transformers' activation names as model.py's activation knob: GPT-2's and GPT-NeoX's MLP; Gemma's gated MLP, a GELU
# exact (erf) or tanh (GeGLU); the rest of the LLaMA lineage's, SwiGLU
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                    "gelu_accurate": "gelu_tanh", "gelu_python_tanh": "gelu_tanh", "gelu": "gelu",
                    "gelu_python": "gelu", "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}
GEGLU = {name: "geglu" if act == "gelu" else "geglu_tanh" for name, act in GPT2_ACTIVATIONS.items()
         if act.startswith("gelu")}
ACTIVATIONS = {"GPT2LMHeadModel": GPT2_ACTIVATIONS, "GPTNeoXForCausalLM": GPT2_ACTIVATIONS, "GemmaForCausalLM": GEGLU,
               "Gemma2ForCausalLM": GEGLU, "Gemma3ForCausalLM": GEGLU}
SWIGLU = {"silu": "swiglu", "swish": "swiglu"}


def config_from_json(hf: dict) -> GPTConfig:
    """The GPTConfig of a config.json dict; a ValueError names any field, value or architecture not exactly met."""
    if not isinstance(hf, dict):
        raise ValueError(f"config.json must hold a JSON object, got {type(hf).__name__}")
    archs = hf.get("architectures")
    if archs is not None and not KINDS[NAME_LIST](archs):
        raise ValueError(f"field architectures must be {NAME_LIST}, got {archs!r}")
    arch = (archs or [None])[0]
    if arch not in FAMILIES:
        what = repr(arch) if arch else "None: config.json's architectures is " + (
            json.dumps(archs) if "architectures" in hf else "absent") + ", it names no model class"
        raise ValueError(f"unsupported architecture {what}; hf.py loads exactly {', '.join(FAMILIES)}. "
                         f"For any other family, fingerprint a model you load yourself: seedprint.fingerprint "
                         f"accepts a callable ids -> final-norm last-token states (see docs/real_checkpoints.md)")
    if len(set(archs)) > 1:
        raise ValueError(f"field architectures names several classes {archs}: which one it is is unclear")
    if "model_type" in hf and hf["model_type"] != MODEL_TYPES[arch]:
        raise ValueError(f"field model_type {json.dumps(hf['model_type'])} contradicts its architectures "
                         f"{arch} (model_type {MODEL_TYPES[arch]!r}): transformers' AutoModelForCausalLM builds the "
                         f"class of the model_type, {arch}.from_pretrained its own; fix the one that is wrong")
    if arch == "Gemma3ForConditionalGeneration":
        return _gemma3_multimodal_config(hf)
    f = Fields({k: v for k, v in hf.items() if k not in INERT}, FIELDS[arch], arch)
    for key, inert in INERT_IF.items():
        if key in f.left and f.left.pop(key) not in (inert, None):
            raise ValueError(f"config.json sets {key}={hf[key]!r}; hf.py loads decoder-only causal LMs only")
    builder = {"GPT2LMHeadModel": _gpt2_config, "GPTNeoXForCausalLM": _neox_config}.get(arch, _decoder_config)
    config = builder(f, arch)
    check_unread(f, config, arch)
    return config


def _gemma3_multimodal_config(hf: dict) -> GPTConfig:
    """A Gemma 3 vision-language directory: the config of its language model (text_config, a Gemma3ForCausalLM),
    read as such. The vision tower and its projector serve images, which a text forward never sees."""
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise ValueError("config.json of a Gemma3ForConditionalGeneration lacks its text_config")
    unknown = sorted(set(hf) - INERT - set(INERT_IF) - GEMMA3_MULTIMODAL - {"tie_word_embeddings"})
    if unknown:
        raise ValueError(f"config.json field(s) {unknown} of this Gemma3ForConditionalGeneration are not "
                         f"understood by hf.py; refused, not approximated")
    if text.get("model_type", "gemma3_text") != "gemma3_text":
        raise ValueError(f"field text_config.model_type {json.dumps(text['model_type'])} is not "
                         f"'gemma3_text', the language model of a Gemma3ForConditionalGeneration")
    (v4, (v5, tie)), = SPELLINGS["Gemma3ForConditionalGeneration"].items()   # the LM head's tie, both spellings
    inner = v4.removeprefix("text_config.")
    if Fields(hf, {v5: tie}, "")(v5) != Fields(text, {inner: tie}, "", "text_config.")(inner):
        raise ValueError(f"fields {v5} ({json.dumps(hf.get(v5, tie.default))}, read by transformers 5.x) and "
                         f"{v4} ({json.dumps(text.get(inner, tie.default))}, read by 4.x) differ: one version would "
                         f"tie the LM head, the other not; make them agree")
    try:
        return config_from_json(dict(text, architectures=["Gemma3ForCausalLM"]))
    except ValueError as e:
        raise ValueError(f"its text_config: {e}") from None


def layer_kinds(config: GPTConfig) -> list:
    """Each layer's attention, in layer_types' words: the window where the config slides it, else full."""
    return ["sliding_attention" if config.sliding_window is not None and
            (config.sliding_layers is None or config.sliding_layers[i] == "s") else "full_attention"
            for i in range(config.n_layer)]


# Fields that some family reads and others' transformers classes do not. Left unread, one is accepted where null or
# where its value says what the class builds anyway (a layer_types naming the very layers that slide, a bias false
# on a class without biases); any other value describes a model transformers does not build from the file (and
# obeying it here would make another): refused by name. (kind, agrees(value, the GPTConfig built))
UNREAD_AGREES = {
    "sliding_window": (INT, lambda v, c: False),       # a window the class never applies
    "layer_types": (NAME_LIST, lambda v, c: v == layer_kinds(c)),
    "use_sliding_window": (BOOL, lambda v, c: v == (c.sliding_window is not None)),
    "max_window_layers": (COUNT, lambda v, c: c.sliding_window is None or layer_kinds(c) == [
        "sliding_attention" if i >= v else "full_attention" for i in range(c.n_layer)]),
    "sliding_window_pattern": (INT, lambda v, c: c.sliding_window is not None and layer_kinds(c) == [
        "full_attention" if (i + 1) % v == 0 else "sliding_attention" for i in range(c.n_layer)]),
    "attention_bias": (BOOL, lambda v, c: v == c.attn_bias),
    "mlp_bias": (BOOL, lambda v, c: v == c.mlp_bias),
    "attn_logit_softcapping": (NUM, lambda v, c: v == c.attn_softcap),
    "final_logit_softcapping": (NUM, lambda v, c: v == c.logit_softcap),
    "query_pre_attn_scalar": (NUM, lambda v, c: c.attn_scale is None and v == c.head_dim),
    "rope_local_base_freq": (NUM, lambda v, c: v == c.rope_local_theta),
    "use_parallel_residual": (BOOL, lambda v, c: v == c.parallel_residual),
    "head_dim": (INT, lambda v, c: v == c.head_dim),
    "qkv_bias": (BOOL, lambda v, c: v == c.qkv_bias),           # Qwen2: q/k/v biases whatever it says
    "clip_qkv": (NUM, lambda v, c: False),                      # a clamp the class never applies
    # a mixture of experts' fields, unread by the family (Mixtral reads num_local_experts, where 5.x's alias
    # num_experts is unread by 4.x; OLMoE the other way round): accepted where they say what the model is
    "num_experts": (COUNT, lambda v, c: v == c.n_experts),
    "num_local_experts": (INT, lambda v, c: v == c.n_experts),
    "num_experts_per_tok": (INT, lambda v, c: v == c.experts_per_token),
    "norm_topk_prob": (BOOL, lambda v, c: c.n_experts is not None and v == (c.router_norm == "topk")),
    "moe_intermediate_size": (INT, lambda v, c: c.n_experts is not None and v == c.expert_width),
    "shared_expert_intermediate_size": (INT, lambda v, c: v == c.shared_expert),
    "decoder_sparse_step": (INT, lambda v, c: c.n_experts is not None and c.moe_layers is None and v == 1),
    "mlp_only_layers": (INDEX_LIST, lambda v, c: c.n_experts is not None and c.moe_layers is None and v == []),
    # 5.x reads it over llama3's original context, 4.x never (ROPE_KIND_FIELDS)
    "original_max_position_embeddings": (INT, lambda v, c: c.rope_type not in ("llama3", "longrope") or
                                         v == c.rope_original_context),
    # written beside transformers' fields by other code (nanotron for SmolLM2, Microsoft's remote code for
    # Phi-4-mini), at their no-op values in the published configs; another value describes another model
    "rope_interleaved": (BOOL, lambda v, c: v is False),    # true: RoPE on adjacent pairs; transformers rotates halves
    "lm_head_bias": (BOOL, lambda v, c: v is False),        # true: a bias on the LM head; transformers builds none
    "full_attn_mod": (INT, lambda v, c: v == 1),            # remote-code knobs that transformers' Phi3 ignores:
    "interpolate_factor": (NUM, lambda v, c: v == 1),       # the release's 1 is the one known to change nothing
}
UNREAD_NOTES = {("MistralForCausalLM", "layer_types"): " (AutoModel reads a mistral config with layer_types as a "
                                                       "MinistralForCausalLM, which does)"}


def check_unread(f: Fields, config: GPTConfig, arch: str) -> None:
    """What no one read: a field the family's class ignores as well, null, or agreeing with the model (above), is
    accepted; anything else is refused by name, the unknown (a field no family here reads) first."""
    for key in IGNORED.get(arch, ()):
        f.left.pop(key, None)
    unknown = sorted(set(f.left) - set(UNREAD_AGREES))
    if unknown:
        raise ValueError(f"config.json field(s) {unknown} of this {arch} are not understood by hf.py; a field it "
                         f"cannot read may change the forward pass: refused, not approximated")
    for key, value in f.left.items():
        kind, agrees = UNREAD_AGREES[key]
        if value is not None and not (KINDS[kind](value) and agrees(value, config)):
            shown = json.dumps(value)
            shown = shown if len(shown) <= 60 else shown[:56] + " ..."
            raise ValueError(f"config.json sets {key}={shown}, which transformers' {arch} does not read"
                             f"{UNREAD_NOTES.get((arch, key), '')}: it builds another model than the field says; "
                             f"remove the field")


def _activation(f: Fields, arch: str) -> str:
    """model.py's activation, from the family's activation field (FIELDS) and names (ACTIVATIONS). Gemma 1's "gelu"
    (google/gemma-7b's config) is run as tanh GELU, as 5.x rewrites it and as Gemma was trained (4.x ran it exact);
    Gemma 2 and 3 run "gelu" exact in both versions, and so does this loader."""
    key = next(key for key in ("activation_function", "hidden_activation", "hidden_act") if key in f.table)
    act, names = f(key), ACTIVATIONS.get(arch, SWIGLU)
    if arch == "GemmaForCausalLM" and act == "gelu":
        return "geglu_tanh"
    if act not in names:
        raise ValueError(f"unsupported {key} {act!r} for {arch}; known: {sorted(names)}")
    return names[act]


def _gpt2_config(f: Fields, arch: str) -> GPTConfig:
    """GPT-2: LayerNorm and biases everywhere, learned positions, scores scaled by 1/sqrt(head_dim) alone."""
    activation = _activation(f, arch)
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if f(key) != want:
            raise ValueError(f"GPT-2 config sets {key}={json.dumps(not want)}: attention scaled other than by "
                             f"1/sqrt(head_dim) is not supported")
    return GPTConfig(block_size=f("n_positions"), vocab_size=f("vocab_size"), n_layer=f("n_layer"), n_head=f("n_head"),
                     n_embd=f("n_embd"), mlp_hidden=f("n_inner"), norm="layernorm", norm_eps=f("layer_norm_epsilon"),
                     position="learned", activation=activation, bias=True,
                     tie_embeddings=f("tie_word_embeddings"))


def _neox_config(f: Fields, arch: str) -> GPTConfig:
    """GPT-NeoX (Pythia): LayerNorm with biases, an MLP with biases, attention biases where attention_bias says,
    the two sublayers side by side or one after the other, RoPE on the first rotary_pct of each head."""
    H, n_embd, L = f("num_attention_heads"), f("hidden_size"), f("num_hidden_layers")
    activation = _activation(f, arch)
    max_pos = f("max_position_embeddings")
    rope = _rope(f, max_pos, n_embd // H, ("default", "linear"), SPELLINGS[arch], partial_ok=True)
    return GPTConfig(block_size=max_pos, vocab_size=f("vocab_size"), n_layer=L, n_head=H, n_embd=n_embd,
                     mlp_hidden=f("intermediate_size"), norm="layernorm", norm_eps=f("layer_norm_eps"),
                     norm_bias=True, parallel_residual=f("use_parallel_residual"),
                     activation=activation, position="rope", **rope, bias=f("attention_bias"),
                     mlp_bias=True, tie_embeddings=f("tie_word_embeddings"))


# what each family of the LLaMA lineage sets apart: its norm, where its norms sit, its q/k norm
NORMS = {"Olmo2ForCausalLM": ("rmsnorm", "post", "all"), "Qwen3ForCausalLM": ("rmsnorm", "pre", "head"),
         "GemmaForCausalLM": ("rmsnorm_1p", "pre", "none"), "Gemma2ForCausalLM": ("rmsnorm_1p", "sandwich", "none"),
         "Gemma3ForCausalLM": ("rmsnorm_1p", "sandwich", "head"), "OlmoeForCausalLM": ("rmsnorm", "pre", "all"),
         "Qwen3MoeForCausalLM": ("rmsnorm", "pre", "head")}
GEMMA = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
ROPE_KINDS = ("default", "linear", "llama3")


def _decoder_config(f: Fields, arch: str) -> GPTConfig:
    """The LLaMA lineage: RMSNorm (Gemma: x (1 + w)), a gated MLP, RoPE, GQA. They differ in where the norms sit,
    biases, q/k norms, head width, windows, RoPE's variants, and Gemma's scales and soft-caps: each knob read where
    the family's fields (FIELDS) hold it."""
    H, n_embd, L = f("num_attention_heads"), f("hidden_size"), f("num_hidden_layers")
    n_kv = f("num_key_value_heads") or H
    head_dim = f.get("head_dim") or n_embd // H
    max_pos = f("max_position_embeddings")
    activation = _activation(f, arch)
    # Qwen2 has q/k/v biases and no others whatever attention_bias says, Qwen2-MoE where qkv_bias says; Mistral and
    # Phi-3 none (check_unread)
    bias = {key: f.get(key, False) for key in ("attention_bias", "mlp_bias")}
    qkv_bias = f.get("qkv_bias", arch == "Qwen2ForCausalLM")
    norm, norm_position, qk_norm = NORMS.get(arch, ("rmsnorm", "pre", "none"))
    window, sliding_layers = _windows(f, L)
    clip = f.get("clip_qkv")
    if clip is not None:
        raise ValueError(f"clip_qkv={clip}: OLMoE clamps q, k and v to it, which model.py does not; refused, not "
                         f"approximated (OLMoE's published configs have it null)")
    gemma = dict(embed_scale=math.sqrt(n_embd)) if arch in GEMMA else {}    # rounded to the model's dtype at run time
    if "query_pre_attn_scalar" in f.table:           # Gemma 2 and 3
        gemma.update(attn_scale=f("query_pre_attn_scalar") ** -0.5, logit_softcap=f("final_logit_softcapping"))
    if "attn_logit_softcapping" in f.table:          # Gemma 2 (Gemma 3 stores it, never applies it)
        gemma["attn_softcap"] = f("attn_logit_softcapping")
    if arch == "Gemma3ForCausalLM":
        rope = _gemma3_rope(f, max_pos, head_dim, sliding=window is not None)
    elif arch == "Phi3ForCausalLM":   # both versions read default and LongRoPE (also by its older names su, yarn)
        original = f("original_max_position_embeddings")
        rope = _rope(f, max_pos, head_dim, ("default", "longrope"), SPELLINGS[arch], partial_ok=True,
                     original=lambda: f.used("original_max_position_embeddings", original))
    else:
        rope = _rope(f, max_pos, head_dim, ROPE_KINDS, LLAMA)
    return GPTConfig(block_size=max_pos, vocab_size=f("vocab_size"), n_layer=L, n_head=H, n_kv_head=n_kv,
                     n_embd=n_embd, head_size=head_dim if head_dim != n_embd // H else None,
                     mlp_hidden=f("intermediate_size"), norm=norm, norm_eps=f("rms_norm_eps"),
                     norm_position=norm_position, qk_norm=qk_norm, activation=activation, position="rope", **rope,
                     sliding_window=window, sliding_layers=sliding_layers, **gemma, **_experts(f, L), bias=False,
                     qkv_bias=qkv_bias, attn_bias=bias["attention_bias"], mlp_bias=bias["mlp_bias"],
                     tie_embeddings=f("tie_word_embeddings"))


def _experts(f: Fields, n_layer: int) -> dict:
    """A mixture of experts' knobs, from the router fields the family reads (FIELDS): its experts (Mixtral:
    num_local_experts), k of them per token, their width (Qwen2-MoE: moe_intermediate_size; else intermediate_size),
    the k weights renormalized (always in Mixtral; where norm_topk_prob says in the others), the shared expert
    (Qwen2-MoE), and the layers that have experts (Qwen2-MoE: each decoder_sparse_step-th, but mlp_only_layers);
    none for a dense family."""
    key = next((key for key in ("num_local_experts", "num_experts") if key in f.table), None)
    if key is None:
        return {}
    n, k = f(key), f("num_experts_per_tok")
    if key == "num_local_experts" and "num_experts" in f.table:   # Qwen3-MoE reads num_experts, which 5.x writes
        other = f("num_experts") if "num_experts" in f.left or n is None else None   # as num_local_experts (its alias)
        if n is not None and other is not None and other != n:
            raise ValueError(f"fields num_local_experts ({n}, transformers 5.x's spelling) and num_experts ({other}) "
                             f"differ: which one holds is unclear; keep one")
        n, key = (n, key) if n is not None else (other, "num_experts")
    renormalized = f.get("norm_topk_prob", True)
    width, shared = f.get("moe_intermediate_size"), f.get("shared_expert_intermediate_size")
    layers = ["m"] * n_layer
    if "decoder_sparse_step" in f.table:
        step, dense = f("decoder_sparse_step"), f("mlp_only_layers")
        layers = ["m" if n > 0 and (i + 1) % step == 0 and i not in dense else "d" for i in range(n_layer)]
    if "m" not in layers:            # no layer has experts: transformers builds a dense model, the router fields unused
        return {}
    if k > n:
        raise ValueError(f"num_experts_per_tok={k} exceeds {key}={n}: each token goes through k different experts "
                         f"(transformers' top-k fails on it)")
    return dict(n_experts=n, experts_per_token=k, expert_hidden=width, router_norm="topk" if renormalized else "none",
                shared_expert=shared, moe_layers=None if "d" not in layers else "".join(layers))


def _windows(f: Fields, n_layer: int) -> tuple:
    """(sliding_window, sliding_layers: None where every layer slides), from the window fields the family reads
    (FIELDS); layer_types, where the family reads it and the file gives it, says it layer by layer."""
    if "sliding_window" not in f.table:          # LLaMA, OLMo-2, Gemma 1
        return None, None
    window = f("sliding_window")
    if "layer_types" not in f.table:             # Mistral, Phi-3: every layer (a null window: none); Qwen3-MoE:
        on = f.get("use_sliding_window", True)                                        # where use_sliding_window
        return window if on else None, None
    layers = f("layer_types")
    if "use_sliding_window" in f.table:          # Qwen: a window only with use_sliding_window, from max_window_layers
        on, first = f("use_sliding_window"), f("max_window_layers")
        window = window if on else None
        if layers is None and window is not None:
            first = f.used("max_window_layers", first)
            layers = ["sliding_attention" if i >= first else "full_attention" for i in range(n_layer)]
    elif "sliding_window_pattern" in f.table:    # Gemma 3: all but every pattern-th layer
        pattern = f("sliding_window_pattern")
        if layers is None:
            pattern = f.used("sliding_window_pattern", pattern)
            layers = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layer)]
    elif layers is None:                         # Gemma 2: its even layers
        layers = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layer)]
    if layers is None:
        return None, None
    if len(layers) != n_layer or set(layers) - {"sliding_attention", "full_attention"}:
        raise ValueError(f"layer_types must name each of the {n_layer} layers sliding_attention or full_attention, "
                         f"got {sorted(set(layers))} for {len(layers)} layers")
    if "sliding_attention" not in layers:
        return None, None
    if window is None:               # transformers builds a sliding mask without a window: it fails
        raise ValueError("layer_types names sliding_attention layers, but there is no window (sliding_window null, "
                         "or use_sliding_window false): transformers fails on that; give both, or neither")
    if "full_attention" not in layers:
        return window, None
    return window, "".join("s" if kind == "sliding_attention" else "f" for kind in layers)


def _rope(f: Fields, max_pos: int, head_dim: int, kinds: tuple, row: dict, partial_ok: bool = False,
          original=None) -> dict:
    """RoPE's knobs from either spelling of `row` (the family's in SPELLINGS), read as the table says. `kinds`: the
    RoPE types the family's class computes; partial_ok: it rotates part of each head (GPT-NeoX, Phi-3; the others
    whole heads); `original`: LongRoPE's original context, asked for only by a LongRoPE."""
    top = {v5: (v4, f.given(v4), f(v4)) for v4, (v5, field) in row.items() if v5 and field is not ECHO}
    scaling, params = f(spelled(row, "")), f("rope_parameters")
    if scaling and params and scaling != params:
        raise ValueError(f"config.json has both {spelled(row, '')} {scaling} and rope_parameters {params}, and they "
                         f"differ")
    where = spelled(row, "") if scaling else "rope_parameters"
    p = Fields(scaling or params or {}, ROPE_FIELDS, f.family, where + ".")
    if any(isinstance(v, dict) for v in p.left.values()):
        raise ValueError(f"per-layer-type RoPE parameters {sorted(p.left)} are not supported for this family")
    read = {}
    for name, (key, given, value) in top.items():
        inner = p(name)
        if inner is not None and given and inner != value:
            raise ValueError(f"config.json has {key}={value} and {where}.{name}={inner}: transformers 4.x reads the "
                             f"first, 5.x the second; keep one")
        read[name] = f.used(key, value) if inner is None else inner   # a null top-level value: moot, or refused
    for echo, (name, field) in row.items():
        value = f(echo) if field is ECHO else None
        if value is not None and value != read[name]:
            raise ValueError(f"config.json's {echo} disagrees with the value {f.family} reads ({read[name]}); which "
                             f"one holds is unclear: refused")
    return _rope_parameters(p, max_pos, head_dim, read["rope_theta"], read["partial_rotary_factor"], kinds,
                            partial_ok, original)


def _rope_parameters(p: Fields, max_pos: int, head_dim: int, theta: float, partial: float, kinds: tuple,
                     partial_ok: bool = False, original=None) -> dict:
    """The knobs of one RoPE whose base and rotary fraction are known, from its parameters `p` (type, factors)."""
    kind, old_kind = p("rope_type"), p("type")
    if kind and old_kind and kind != old_kind:
        raise ValueError(f"RoPE parameters name two types: rope_type={kind!r}, type={old_kind!r}")
    kind = kind or old_kind or "default"
    if "longrope" in kinds:           # Phi-3's older names for LongRoPE, read as such by both versions
        kind = {"su": "longrope", "yarn": "longrope"}.get(kind, kind)
    if not 0 < partial <= 1:
        raise ValueError(f"partial_rotary_factor (rotary_pct) must lie in (0, 1], got {partial}")
    if partial != 1 and not partial_ok:
        raise ValueError(f"partial_rotary_factor {partial}: RoPE on part of each head is not supported for this "
                         f"family (its transformers class rotates whole heads)")
    dims = int(head_dim * partial)
    if dims % 2 or dims < 2:
        raise ValueError(f"RoPE on {dims} dims of each head (head_dim {head_dim} x {partial}) is not supported: an "
                         f"even number is")
    if kind not in kinds:
        raise ValueError(f"RoPE type {kind!r} is not supported for {p.family}: its transformers class computes "
                         f"{', '.join(kinds)}, and so does model.py, exactly")
    p.table = dict(p.table, **ROPE_KIND_FIELDS[kind])
    out = dict(rope_theta=float(theta), rope_dims=dims if dims < head_dim else None)
    if kind == "linear":
        out.update(rope_type="linear", rope_factor=float(p("factor")))
    elif kind == "llama3":
        out.update(rope_type="llama3", rope_factor=float(p("factor")),
                   rope_low_freq_factor=float(p("low_freq_factor")), rope_high_freq_factor=float(p("high_freq_factor")),
                   rope_original_context=p("original_max_position_embeddings") or max_pos)
    elif kind == "longrope":
        out.update(_longrope(p, max_pos, dims, original()))
    if p.left:
        raise ValueError(f"RoPE parameter(s) {sorted(p.left)} are not understood for rope_type {kind!r}")
    return out


def _longrope(p: Fields, max_pos: int, dims: int, original: int) -> dict:
    """Phi-3's LongRoPE up to its original context (the top-level field's, over rope_parameters' copy, as in
    transformers): each frequency divided by its short factor, cos and sin times sqrt(1 + ln(factor) / ln(original)),
    factor = max_position_embeddings / original (5.x's own factor and attention_factor, where given, win). Past the
    original context transformers switches to the long factors; the model refuses such sequences instead."""
    p("original_max_position_embeddings")
    short, long = p("short_factor"), p("long_factor")
    if len(short) != dims // 2 or len(long) != dims // 2:
        raise ValueError(f"longrope needs one short and one long factor per frequency ({dims // 2}), got "
                         f"{len(short)} and {len(long)}")
    factor = p("factor") or max_pos / original
    attention = p("attention_factor")
    if attention is None and factor > 1 and original < 2:     # ln(1) = 0: transformers divides by zero there too
        raise ValueError(f"original_max_position_embeddings {original} gives longrope no scale (ln of it is 0); "
                         f"give attention_factor, or an original context of 2 or more")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return dict(rope_type="longrope", rope_factors=tuple(float(s) for s in short), rope_attention_factor=attention,
                rope_original_context=original)


def _gemma3_rope(f: Fields, max_pos: int, head_dim: int, sliding: bool) -> dict:
    """Gemma 3's two RoPEs: the global (full_attention) layers' base with its scaling, the sliding layers' own
    base, unscaled, in either spelling (SPELLINGS)."""
    row = SPELLINGS["Gemma3ForCausalLM"]
    local_key = spelled(row, "sliding_attention.rope_theta")
    params = f("rope_parameters")
    if params is None:                          # 4.x: the global layers' RoPE as the LLaMA lineage spells it
        local_theta = f(local_key)
        rope = _rope(f, max_pos, head_dim, ROPE_KINDS, LLAMA)
        return dict(rope, rope_local_theta=float(f.used(local_key, local_theta)) if sliding else None)
    if set(params) - {"full_attention", "sliding_attention"} or not all(v is None or isinstance(v, dict)
                                                                       for v in params.values()):
        raise ValueError(f"Gemma 3's rope_parameters name each layer type's RoPE (full_attention, "
                         f"sliding_attention), got {sorted(params)}: transformers would ignore a flat one")
    for key in row:
        if f.given(key):
            raise ValueError(f"config.json has both rope_parameters and {key}: which one holds is unclear")
        f.left.pop(key, None)
    partial = f("partial_rotary_factor")        # whole heads: anything else is refused below
    base = {v5: Field(NUM, field.default) for v5, field in row.values()}    # each layer type's, as in 4.x
    full = Fields(params.get("full_attention") or {}, dict(ROPE_FIELDS, rope_theta=base["full_attention.rope_theta"]),
                  f.family, "rope_parameters.full_attention.")
    rope = _rope_parameters(full, max_pos, head_dim, full("rope_theta"), full("partial_rotary_factor") or partial,
                            ROPE_KINDS)
    local = Fields(params.get("sliding_attention") or {},
                   dict(rope_type=Field(STR, "default"), rope_theta=base["sliding_attention.rope_theta"]),
                   f.family, "rope_parameters.sliding_attention.")
    if local("rope_type") != "default" or local.left.keys() - {"rope_theta"}:
        raise ValueError(f"Gemma 3's sliding layers use plain RoPE; got sliding_attention "
                         f"{params.get('sliding_attention')}")
    local_theta = local("rope_theta")
    return dict(rope, rope_local_theta=float(local_theta) if sliding else None)


# ----------------------------------------------------------------------------- the directory and its files

def json_file(path: str, what: str):
    """config.json and the shard index: a malformed file is one error naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid {what} ({e})") from None


def read_dir(path: str):
    """(GPTConfig, architecture, {shard file: its open Shard, header read}, config.json's object) of a Hugging Face
    directory, config.json read and checked."""
    cfg_path, index = os.path.join(path, "config.json"), os.path.join(path, "model.safetensors.index.json")
    if not os.path.isfile(cfg_path):
        why = "no config.json" if os.path.isdir(path) else "a file" if os.path.isfile(path) else "no such directory"
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory (config.json + *.safetensors): {why}")
    hf = json_file(cfg_path, "config.json")
    try:
        config = config_from_json(hf)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {str(e).removeprefix('config.json ')}") from None
    files = shard_files(path, index)
    shards = {}
    try:
        for f in files:
            shards[f] = open_shard(f)
    except BaseException:
        for shard in shards.values():
            shard.handle.close()
        raise
    return config, hf["architectures"][0], shards, hf


def shard_files(path: str, index: str) -> list:
    """The weight files of a directory, as paths: those its index names, else every *.safetensors in it."""
    if os.path.exists(index):
        weight_map = json_file(index, "safetensors index")
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index} has no weight_map object of tensor name -> shard file")
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path!r} (.bin pickles are not loaded: they run code)")
    missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise FileNotFoundError(f"{path}: shard(s) {missing} named in model.safetensors.index.json are missing")
    return [os.path.join(path, f) for f in files]


# A .safetensors file: 8 bytes (little-endian) giving the header's length, the header (JSON: each tensor's dtype,
# shape and byte range in the data that follows, an optional "__metadata__"), then the data, every byte of it some
# tensor's; read with plain file reads, so a loading process holds no mapped pages beside the model. The
# floating-point dtypes, widest first (a model is built in the widest one found), and every dtype's size.
SAFETENSORS_FLOATS = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2,
                     "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def open_shard(file: str) -> Shard:
    """`file` opened, its header read and checked (the byte ranges cover the data exactly, as the safetensors library
    requires): an empty, truncated or foreign file is one error naming it, before any weight is read."""
    handle = open(file, "rb")
    try:
        size = os.fstat(handle.fileno()).st_size
        length = int.from_bytes(handle.read(8), "little")
        if size < 8 or 8 + length > size:
            raise ValueError(f"{size} bytes, shorter than its 8-byte header length" if size < 8 else
                             f"{size} bytes, shorter than the header its first 8 bytes announce")
        handle.seek(0)
        head = handle.read(8 + length)
        tensors = parse_header(head[8:], size - 8 - length)
    except ValueError as e:
        handle.close()
        raise ValueError(f"{file} is not a valid .safetensors file (truncated, damaged or another format: {e})") \
            from None
    except BaseException:
        handle.close()
        raise
    return Shard(file, handle, head, tensors, size)


def parse_header(text: bytes, data_bytes: int) -> dict:
    """{tensor name: (dtype, shape, (begin, end))} of a header; ValueError saying what is wrong."""
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    header.pop("__metadata__", None)
    tensors, covered = {}, 0
    for name, entry in header.items():
        kind, shape, offsets = (entry.get(key) for key in ("dtype", "shape", "data_offsets")) \
            if isinstance(entry, dict) else (None, None, None)
        if kind not in SAFETENSORS_BYTES or not isinstance(shape, list) or not isinstance(offsets, list) \
                or not all(type(n) is int and n >= 0 for n in shape + offsets) or len(offsets) != 2:
            raise ValueError(f"tensor {name!r} has no valid dtype, shape and data_offsets")
        begin, end = offsets
        if end - begin != math.prod(shape) * SAFETENSORS_BYTES[kind]:
            raise ValueError(f"tensor {name!r} spans {end - begin} bytes, its shape and dtype {kind} need "
                             f"{math.prod(shape) * SAFETENSORS_BYTES[kind]}")
        tensors[name] = (kind, tuple(shape), (begin, end))
    for _, _, (begin, end) in sorted(tensors.values(), key=lambda entry: entry[2]):
        if begin != covered:
            raise ValueError(f"its tensors' byte ranges leave a gap or overlap at byte {covered}")
        covered = end
    if covered != data_bytes:
        raise ValueError(f"its tensors span {covered} bytes of data, the file holds {data_bytes}")
    return tensors


def read_tensor(shard: Shard, name: str) -> torch.Tensor:
    """One tensor of an open shard, read into memory of its own (a dtype no model reads: its raw bytes)."""
    kind, shape, (begin, end) = shard.tensors[name]
    t = read_bytes(shard, begin, end - begin, SAFETENSORS_FLOATS.get(kind, torch.uint8))
    return t.view(shape) if kind in SAFETENSORS_FLOATS else t


def read_bytes(shard: Shard, begin: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """`count` bytes of a shard's data from `begin`, as a flat tensor of `dtype`."""
    t = torch.empty(count // dtype.itemsize, dtype=dtype)
    shard.handle.seek(len(shard.head) + begin)
    if shard.handle.readinto(t.view(torch.uint8).numpy()) != count:
        raise ValueError(f"{shard.file} is not a valid .safetensors file (truncated while it was read)")
    return t


def built_dtype(shards: dict, arch: str) -> torch.dtype:
    """The dtype a model is built in where none is asked for: the widest of the tensors the loader reads."""
    found = {kind for shard in shards.values() for name, (kind, _, _) in shard.tensors.items()
             if relative_name(name, arch) is not None}
    return next((SAFETENSORS_FLOATS[k] for k in SAFETENSORS_FLOATS if k in found), torch.float32)


# ----------------------------------------------------------------------------- tensors -> parameters
# Each family's tensor names, relative to its decoder's prefix, for this model's parameters. A piece says which
# rows of the checkpoint's tensor fill which rows of one parameter: LLaMA's q, k and v fill row ranges of the fused
# c_attn, Phi-3's gate_up_proj fills two parameters, GPT-NeoX's per-head [q|k|v] rows are reordered into c_attn's
# [all q | all k | all v]; GPT-2's Conv1D weights are stored transposed; transformers 5's fused experts fill each
# expert's matrices from one slice (expert, rows) each.

PREFIXES = {"GPT2LMHeadModel": ("transformer.",), "GPTNeoXForCausalLM": ("gpt_neox.",),
            "Gemma3ForConditionalGeneration": ("language_model.model.", "model.language_model.", "language_model.")}
# tensors that are not weights (mask buffers, old RoPE tables) or that a text forward never reads (a vision tower)
NOT_READ = {"GPT2LMHeadModel": (r".*\.attn\.(masked_)?bias",),
            "GPTNeoXForCausalLM": (r".*\.attention\.(masked_)?bias", r".*rotary_emb\.inv_freq"),
            "Gemma3ForConditionalGeneration": (r"vision_tower\..*", r"multi_modal_projector\..*")}
NAMES = {   # this model's module -> the family's, per layer (a norm's name depends on where it sits)
    "llama": {"attn.c_proj": "self_attn.o_proj", "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
              "mlp.c_fc": "mlp.up_proj", "mlp.c_gate": "mlp.gate_proj", "mlp.c_proj": "mlp.down_proj",
              "mlp.shared_expert.c_fc": "mlp.shared_expert.up_proj", "mlp.shared_expert_gate": "mlp.shared_expert_gate",
              "mlp.shared_expert.c_gate": "mlp.shared_expert.gate_proj",
              "mlp.shared_expert.c_proj": "mlp.shared_expert.down_proj"},
    "pre": {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"},
    "post": {"ln_1_out": "post_attention_layernorm", "ln_2_out": "post_feedforward_layernorm"},
    "sandwich": {"ln_1": "input_layernorm", "ln_1_out": "post_attention_layernorm",
                 "ln_2": "pre_feedforward_layernorm", "ln_2_out": "post_feedforward_layernorm"},
    "neox": {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "attn.c_attn": "attention.query_key_value",
             "attn.c_proj": "attention.dense", "mlp.c_fc": "mlp.dense_h_to_4h", "mlp.c_proj": "mlp.dense_4h_to_h"},
}
TOP_NAMES = {"llama": {"transformer.wte": "embed_tokens", "transformer.ln_f": "norm", "lm_head": "lm_head"},
             "neox": {"transformer.wte": "embed_in", "transformer.ln_f": "final_layer_norm", "lm_head": "embed_out"}}
GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# A mixture of experts' tensors, in two layouts. As published (and as transformers 5 writes them by default): one
# tensor per expert, in the family's module and names, its router that module's gate.weight (n_experts, n_embd). As
# transformers 5 holds them (save_pretrained(save_original_format=False)): every module mlp., each layer's experts
# fused into experts.gate_up_proj (n_experts, 2 x width, n_embd), each expert's gate rows then its up rows, and
# experts.down_proj (n_experts, n_embd, width), each expert's matrix as nn.Linear holds it (out, in).
EXPERTS = {"MixtralForCausalLM": ("block_sparse_moe", {"c_gate": "w1", "c_fc": "w3", "c_proj": "w2"}),
           "Qwen2MoeForCausalLM": ("mlp", {"c_gate": "gate_proj", "c_fc": "up_proj", "c_proj": "down_proj"}),
           "OlmoeForCausalLM": ("mlp", {"c_gate": "gate_proj", "c_fc": "up_proj", "c_proj": "down_proj"}),
           "Qwen3MoeForCausalLM": ("mlp", {"c_gate": "gate_proj", "c_fc": "up_proj", "c_proj": "down_proj"})}
FUSED = "experts.gate_up_proj"         # a tensor name ending so: the checkpoint holds transformers 5's fused experts


def top_tensors(arch: str) -> tuple:
    """The family's (token embedding, LM head) tensor names, relative to its prefix."""
    if arch == "GPT2LMHeadModel":
        return "wte.weight", "lm_head.weight"
    top = TOP_NAMES["neox" if arch == "GPTNeoXForCausalLM" else "llama"]
    return f"{top['transformer.wte']}.weight", f"{top['lm_head']}.weight"


def tensor_targets(model: GPT, arch: str, fused: bool = False) -> dict:
    """The family's tensor name (relative to its prefix) -> [(this model's parameter, its rows filled or None,
    the checkpoint tensor's rows read or None, transpose)], for every parameter of `model`. fused: a mixture of
    experts' tensors in transformers 5's layout (EXPERTS), where each piece reads (expert, rows)."""
    cfg, targets = model.config, {}
    names = {**NAMES["llama"], **NAMES[cfg.norm_position]} if arch != "GPTNeoXForCausalLM" else NAMES["neox"]
    top = TOP_NAMES["neox" if arch == "GPTNeoXForCausalLM" else "llama"]
    add = lambda hf_name, *piece: targets.setdefault(hf_name, []).append(piece)
    for name in dict(model.named_parameters()):
        layer = re.fullmatch(r"transformer\.h\.(\d+)\.(.+)\.(weight|bias)", name)
        if arch == "GPT2LMHeadModel":
            add(name.removeprefix("transformer."), name, None, None, name.endswith(GPT2_CONV1D))
        elif layer is None:                                  # embedding, final norm, LM head
            module, kind = name.rsplit(".", 1)
            add(f"{top[module]}.{kind}", name, None, None, False)
        elif arch == "GPTNeoXForCausalLM" and layer[2] == "attn.c_attn":
            add(f"layers.{layer[1]}.{names['attn.c_attn']}.{layer[3]}", name, None, neox_qkv_rows(cfg), False)
        elif layer[2] == "attn.c_attn" and arch == "Phi3ForCausalLM":
            add(f"layers.{layer[1]}.self_attn.qkv_proj.{layer[3]}", name, None, None, False)
        elif layer[2] == "attn.c_attn":
            ends = list(itertools.accumulate(qkv_sizes(cfg)))
            for proj, start, end in zip("qkv", [0] + ends, ends):
                add(f"layers.{layer[1]}.self_attn.{proj}_proj.{layer[3]}", name, slice(start, end), None, False)
        elif layer[2] in ("mlp.c_gate", "mlp.c_fc") and arch == "Phi3ForCausalLM":
            width = cfg.mlp_width
            rows = slice(0, width) if layer[2] == "mlp.c_gate" else slice(width, 2 * width)   # [gate | up]
            add(f"layers.{layer[1]}.mlp.gate_up_proj.{layer[3]}", name, None, rows, False)
        elif layer[2] == "mlp.router":
            add(f"layers.{layer[1]}.{'mlp' if fused else EXPERTS[arch][0]}.gate.{layer[3]}", name, None, None, False)
        elif layer[2].startswith("mlp.experts."):
            expert, part = layer[2].removeprefix("mlp.experts.").split(".")
            module, parts = EXPERTS[arch]
            width, e = cfg.expert_width, int(expert)
            if not fused:
                add(f"layers.{layer[1]}.{module}.experts.{e}.{parts[part]}.{layer[3]}", name, None, None, False)
            elif part == "c_proj":
                add(f"layers.{layer[1]}.mlp.experts.down_proj", name, None, (e, slice(None)), False)
            else:
                rows = slice(0, width) if part == "c_gate" else slice(width, 2 * width)        # [gate | up]
                add(f"layers.{layer[1]}.mlp.{FUSED}", name, None, (e, rows), False)
        else:
            add(f"layers.{layer[1]}.{names[layer[2]]}.{layer[3]}", name, None, None, False)
    for pieces in targets.values():    # a fused tensor's pieces in the order of its rows
        pieces.sort(key=lambda piece: piece[2].start if isinstance(piece[2], slice) else 0)
    return targets


def neox_qkv_rows(config: GPTConfig) -> torch.Tensor:
    """GPT-NeoX's query_key_value rows in c_attn's order: its rows are per head [q_h | k_h | v_h], c_attn's
    [q_1 .. q_H | k_1 .. k_H | v_1 .. v_H]. Row j*H*hd + h*hd + i of c_attn is row h*3*hd + j*hd + i of NeoX's."""
    H, hd = config.n_head, config.head_dim
    return torch.arange(3 * H * hd).view(H, 3, hd).transpose(0, 1).reshape(-1)


def relative_name(hf_name: str, arch: str) -> Optional[str]:
    """A checkpoint's tensor name relative to its family's decoder prefix; None for a tensor never read."""
    if any(re.fullmatch(pattern, hf_name) for pattern in NOT_READ.get(arch, ())):
        return None
    for prefix in PREFIXES.get(arch, ("model.",)):
        if hf_name.startswith(prefix):
            return hf_name.removeprefix(prefix)
    return hf_name


# The config.json fields that decide whether a tensor exists, and its shape: a refusal of a tensor names them, as
# config.json gives them (a null or an absent field stands for something: the refusal says which it was)
SHAPE_FIELDS = ("vocab_size", "hidden_size", "n_embd", "num_attention_heads", "n_head", "num_key_value_heads",
                "head_dim", "intermediate_size", "n_inner", "n_positions", "num_local_experts", "num_experts",
                "moe_intermediate_size", "shared_expert_intermediate_size")
BIAS_FIELDS = ("attention_bias", "mlp_bias", "qkv_bias")
LAYER_FIELDS = ("num_hidden_layers", "n_layer")
EXPERT_FIELDS = ("num_local_experts", "num_experts", "decoder_sparse_step", "mlp_only_layers")


def fields_note(fields: Optional[dict], arch: str, keys) -> str:
    """' (config.json: key=value, ...)' for those of `keys` that the family reads; '' where none is."""
    if fields is None:
        return ""
    text = arch == "Gemma3ForConditionalGeneration"
    table = FIELDS["Gemma3ForCausalLM" if text else arch]
    shown = [f"{key}={json.dumps(fields[key]) if key in fields else 'absent'}" for key in dict.fromkeys(keys)
             if key in table]
    return f" ({'its text_config' if text else 'config.json'}: {', '.join(shown)})" if shown else ""


def tensor_fields(name: str, head: str, n_layer: int) -> tuple:
    """The fields that decide whether the tensor `name` (relative to its prefix) is part of the model."""
    layer = re.match(r"(?:layers|h)\.(\d+)\.", name)
    return (("tie_word_embeddings",) if name == head else BIAS_FIELDS if name.endswith(".bias") else
            LAYER_FIELDS if layer and int(layer[1]) >= n_layer else
            EXPERT_FIELDS if re.search(r"\.(experts|gate|shared_expert|shared_expert_gate)\b", name) else ())


def plan_weights(model: GPT, shards: dict, arch: str, where: str, fields: Optional[dict] = None) -> dict:
    """{name relative to the prefix: (file, name, pieces)} of every tensor of the shards' headers, checked against
    `model` (meta) before a weight is read: a missing, unknown, misshapen or twice-stored one is an error naming it
    and the config.json `fields` behind it. A tied LM head stored apart is checked as the embedding's twin and left
    out: no parameter reads it (check_tied_head compares its values)."""
    fused = any(name.endswith(FUSED) for shard in shards.values() for name in shard.tensors)
    targets, params = tensor_targets(model, arch, fused), dict(model.named_parameters())
    head = top_tensors(arch)[1]
    tied = model.config.tie_embeddings
    plan, seen = {}, set()
    for file, shard in shards.items():
        for hf_name, (kind, shape, _) in shard.tensors.items():
            name = relative_name(hf_name, arch)
            if name is None:
                continue       # not weights, a vision tower
            twice = name in seen
            seen.add(name)
            if twice or name not in targets and not (tied and name == head):
                raise ValueError(f"{where}: tensor {hf_name!r} is " + (
                    "stored twice" if twice else f"not part of a {arch} with this config.json"
                    + fields_note(fields, arch, tensor_fields(name, head, model.config.n_layer))))
            if kind not in SAFETENSORS_FLOATS:
                raise ValueError(f"{where}: tensor {hf_name!r} has dtype {kind}; only F64/F32/BF16/F16 load")
            want = tuple(params["transformer.wte.weight"].shape) if name == head and tied else \
                expected_shape(targets[name], params)
            if shape != want:
                raise ValueError(f"{where}: tensor {hf_name!r} has shape {list(shape)}, config.json implies "
                                 f"{list(want)}{fields_note(fields, arch, SHAPE_FIELDS)}")
            if not (name == head and tied):
                plan[name] = (file, hf_name, targets[name])
    missing = [name for name in targets if name not in plan]
    if missing:
        shown = ", ".join(f"{name} ({targets[name][0][0]})" for name in missing[:3])
        causes = [key for name in missing for key in tensor_fields(name, head, model.config.n_layer)]
        raise ValueError(f"{where}: the tensor(s) {shown}{' ...' if len(missing) > 3 else ''} of a {arch} are "
                         f"missing from the checkpoint{fields_note(fields, arch, causes)}")
    return plan


def expected_shape(pieces: list, params: dict) -> tuple:
    """The shape a checkpoint tensor must have to fill its pieces: the one parameter's (transposed where stored
    so), or the pieces' rows stacked, or (transformers 5's fused experts) one such stack per expert."""
    param, rows, read, transpose = pieces[0]
    dest = params[param] if rows is None else params[param][rows]
    if isinstance(read, tuple):        # (expert, rows): each expert's pieces stack their rows
        first = [p for p, _, (expert, _), _ in pieces if expert == read[0]]
        return (len({expert for _, _, (expert, _), _ in pieces}), sum(params[p].shape[0] for p in first),
                *dest.shape[1:])
    if len(pieces) == 1:
        return tuple(dest.shape[::-1] if transpose else dest.shape)
    # pieces of one fused tensor: each reads as many of its rows as it fills
    total = sum((params[p] if r is None else params[p][r]).shape[0] for p, r, _, _ in pieces)
    return (total, *dest.shape[1:])


@torch.no_grad()
def check_tied_head(stored: Stored, name: str, t: torch.Tensor, seen: dict, dtype: torch.dtype) -> None:
    """tie_word_embeddings true and the LM head stored apart: transformers 4.x ties after loading (the embedding is
    the head, the stored one dropped), 5.x keeps a stored head that differs. Equal in the model's dtype, both are this
    model; different, two: refused, naming both. Called with each tensor a pass reads: the first of the two waits in
    `seen` for the other, and they are compared in slices of rows."""
    if stored.twin is None or name not in stored.twin:
        return
    seen[name] = t.to(dtype)
    if len(seen) < 2:
        return
    embedding, head = (seen.pop(key) for key in stored.twin)
    rows = max(1, 2 ** 24 // max(1, math.prod(embedding.shape[1:])))
    for e, h in zip(embedding.split(rows), head.split(rows)):
        if not ((e == h) | (e.isnan() & h.isnan())).all():        # a NaN both hold: the finite check names it
            e_name, h_name = stored.twin.values()
            raise ValueError(f"{stored.path}: tie_word_embeddings is true, but the checkpoint stores the LM head "
                             f"{h_name!r} with other values than the embedding {e_name!r}: transformers 4.x would "
                             f"use the embedding as the head, 5.x the stored head; refused (drop the stored head, or "
                             f"set tie_word_embeddings to false)")


# ----------------------------------------------------------------------------- command line

def main(argv=None) -> None:
    """python hf.py PATH [PATH ...]: each model's family, the knobs it sets apart from GPTConfig's defaults and its
    parameters, after every check the loader makes, no weight read; a model that would not load is one line on
    stderr and exit code 2, before anything is printed."""
    parser = argparse.ArgumentParser(prog="hf.py", description="What a model on disk maps onto in model.py: its "
                                     "family, the GPTConfig knobs it sets, its parameters. No weight is read.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="Hugging Face directories (config.json + "
                        "*.safetensors) or train.py checkpoints")
    args = parser.parse_args(argv)
    found = []
    try:
        for path in args.paths:
            stored = read(path)
            stored.close()
            found.append((stored.path, stored.config, stored.arch, stored.params))
    except (ValueError, OSError, ImportError) as e:           # OSError: also a folder that cannot be read
        sys.stderr.write(f"hf.py: error: {' '.join(str(e).split())}\n")
        sys.exit(2)
    default = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    for path, config, arch, params in found:
        knobs = {k: v for k, v in dataclasses.asdict(config).items() if v != default[k]}
        print(f"{path}: {arch}, {params:,} parameters")
        print("  GPTConfig(" + ", ".join(f"{k}={v!r}" for k, v in knobs.items()) + ")")


if __name__ == "__main__":
    main()
