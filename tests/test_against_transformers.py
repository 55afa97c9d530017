"""hf.load against the Hugging Face transformers library itself, for users who have it.

transformers is never a dependency of this project: without it every test here is skipped, and the
rest of the suite checks the loader against naive forwards written in tests/test_hf.py. With it
(`pip install transformers`), this file builds a tiny random model of each supported family with
transformers, saves it, loads it with hf.py, and compares logits and the final-norm hidden state
(fp32, eager attention, T = 40, past every sliding window; a LongRoPE model at T = 40 < its original context
of 64); `pytest -s` prints the errors. Each directory is checked as saved (the installed version's config
spelling) and, for the families that spell RoPE the common way, rewritten into the other spelling
(transformers 4.x `rope_theta` / `rope_scaling`, or 5.x `rope_parameters`); a mixture of experts is saved and
checked again in transformers 5's own layout (its experts fused). Then each tiny checkpoint of tests/hf_families.py,
the ground truth of the CPU suite, is read by transformers and its naive forward compared with transformers'. A
real checkpoint is compared too when BORN_BIASED_HF_DIR names one (for example a SmolLM2-135M directory).
"""
import inspect
import json
import os
import shutil

import pytest
import torch

tf = pytest.importorskip("transformers")
import hf  # noqa: E402

TOL = 1e-5
COMMON = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
FAMILIES = {   # name: (config class, model class, config fields), each turning a knob the loader must read
    "llama-llama3-rope": ("LlamaConfig", "LlamaForCausalLM", dict(
        COMMON, head_dim=16, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=32), rope_theta=50000.0)),
    "llama-linear-rope-tied": ("LlamaConfig", "LlamaForCausalLM", dict(
        COMMON, tie_word_embeddings=True, rope_scaling=dict(rope_type="linear", factor=4.0), rope_theta=20000.0)),
    "mistral-window-8": ("MistralConfig", "MistralForCausalLM", dict(COMMON, sliding_window=8, rope_theta=1e6)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, tie_word_embeddings=True, use_sliding_window=False,
                                                       rope_theta=1e6)),
    "qwen3-head-dim-24": ("Qwen3Config", "Qwen3ForCausalLM", dict(COMMON, head_dim=24, tie_word_embeddings=False,
                                                                   rope_theta=1e6)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=97, n_embd=48, n_layer=3, n_head=4, n_positions=64,
                                                   activation_function="gelu_new")),
    "pythia (parallel, rotary_pct 0.25)": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=64, rotary_pct=0.25, use_parallel_residual=True)),
    "neox (sequential, no attention biases, tied)": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=64, rotary_pct=0.5, use_parallel_residual=False, attention_bias=False,
        tie_word_embeddings=True)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(COMMON, rope_theta=5e5, tie_word_embeddings=False)),
    "gemma (MQA, head_dim 16)": ("GemmaConfig", "GemmaForCausalLM", dict(
        COMMON, num_key_value_heads=1, head_dim=16, hidden_act="gelu_pytorch_tanh")),
    "gemma2 (softcaps, window 8)": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        COMMON, head_dim=16, sliding_window=8, query_pre_attn_scalar=20, attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0)),
    "gemma3 (pattern 2, local base, linear global)": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        COMMON, num_hidden_layers=4, head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"] * 2, rope_theta=5e5, rope_local_base_freq=2e4,
        rope_scaling=dict(rope_type="linear", factor=8.0))),
    "phi3 (window 8)": ("Phi3Config", "Phi3ForCausalLM", dict(COMMON, sliding_window=8, pad_token_id=None)),
    "phi4-mini-like (longrope, partial 0.75, tied)": ("Phi3Config", "Phi3ForCausalLM", dict(
        COMMON, hidden_size=64, partial_rotary_factor=0.75, tie_word_embeddings=True, pad_token_id=None,
        max_position_embeddings=256, original_max_position_embeddings=64,
        rope_scaling=dict(type="longrope", short_factor=[1.0 + 0.1 * i for i in range(6)],
                          long_factor=[2.0 + i for i in range(6)]))),
    # mixtures of experts: k of n experts per token, the k weights renormalized or as the softmax gives them
    "mixtral (window 8, top 2 of 4)": ("MixtralConfig", "MixtralForCausalLM", dict(
        COMMON, num_local_experts=4, num_experts_per_tok=2, sliding_window=8, rope_theta=1e6)),
    "qwen2-moe (shared expert, layer 1 dense by mlp_only_layers)": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40,
        mlp_only_layers=[1], norm_topk_prob=False, use_sliding_window=False, rope_theta=1e6)),
    "qwen2-moe (decoder_sparse_step 2, top 3 renormalized, tied)": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        COMMON, num_experts=4, num_experts_per_tok=3, moe_intermediate_size=24, shared_expert_intermediate_size=40,
        decoder_sparse_step=2, norm_topk_prob=True, tie_word_embeddings=True)),
    "olmoe (top 2 of 4)": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        COMMON, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, pad_token_id=None, eos_token_id=None)),
    "olmoe (renormalized, attention bias)": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        COMMON, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, attention_bias=True, pad_token_id=None,
        eos_token_id=None)),
    "qwen3-moe (head_dim 24, window 8, layer 0 dense, renormalized)": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        COMMON, head_dim=24, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True,
        use_sliding_window=True, sliding_window=8, mlp_only_layers=[0], rope_theta=1e6)),
    "qwen3-moe (decoder_sparse_step 2, top 3, attention bias, tied)": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        COMMON, num_experts=4, num_experts_per_tok=3, moe_intermediate_size=24, decoder_sparse_step=2,
        attention_bias=True, tie_word_embeddings=True)),
}
# the mixtures of experts: transformers 5 holds their experts fused (experts.gate_up_proj, experts.down_proj) and
# writes them one tensor per expert, as published, unless save_pretrained(save_original_format=False): both are read
MOE = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "OlmoeForCausalLM", "Qwen3MoeForCausalLM")
# families whose config.json can be respelled by other_spelling (the others spell RoPE their own way)
RESPELLED = ("llama-llama3-rope", "llama-linear-rope-tied", "mistral-window-8", "qwen2", "qwen3-head-dim-24", "gpt2",
             "olmo2", "gemma (MQA, head_dim 16)", "gemma2 (softcaps, window 8)", "phi3 (window 8)",
             *(name for name, (_, model_cls, _) in FAMILIES.items() if model_cls in MOE))


def other_spelling(cfg: dict) -> dict:
    """The same RoPE settings in the other transformers generation's config.json spelling."""
    cfg = dict(cfg)
    if "rope_parameters" in cfg:                                        # 5.x -> 4.x
        p = dict(cfg.pop("rope_parameters"))
        cfg["rope_theta"], kind = p.pop("rope_theta"), p.pop("rope_type")
        cfg["rope_scaling"] = None if kind == "default" else dict(p, rope_type=kind)
    elif "rope_theta" in cfg:                                           # 4.x -> 5.x
        scaling = dict(cfg.pop("rope_scaling", None) or {})
        kind = scaling.pop("rope_type", scaling.pop("type", "default"))
        cfg["rope_parameters"] = dict(scaling, rope_type=kind, rope_theta=cfg.pop("rope_theta"))
    return cfg


def stored_names(path) -> list:
    """The tensor names of a directory's weight files, as stored."""
    stored = hf.read(str(path))
    stored.close()
    return [name for shard in stored.shards.values() for name in shard.tensors]


def relative_error(got, want) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def compare(path: str, reference, ids) -> None:
    ours = hf.load(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits, _ = ours(ids, ids)
        hidden = ours.trace(ids, hidden="all", logits=False)["hidden"][-1]
        ref = reference(input_ids=ids, output_hidden_states=True)
        ref_hidden = ref.hidden_states[-1]           # after the final norm, in every family
    errors = relative_error(logits, ref.logits), relative_error(hidden, ref_hidden)
    print(f"\n{path}: max relative error, logits {errors[0]:.1e}, final hidden {errors[1]:.1e}")   # pytest -s
    assert max(errors) <= TOL, (path, errors)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_tiny_random_model_of_each_family_matches_transformers(name, tmp_path):
    config_cls, model_cls, fields = FAMILIES[name]
    torch.manual_seed(0)
    config = getattr(tf, config_cls)(**fields)
    config._attn_implementation = "eager"
    reference = getattr(tf, model_cls)(config).eval()
    with torch.no_grad():   # random gains and biases too, so that a misread norm or bias shows
        for n, p in reference.named_parameters():
            is_gain = ("norm" in n or ".ln" in n) and n.endswith("weight")
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2) + (1.0 if is_gain else 0.0))
    saved = tmp_path / "saved"
    reference.save_pretrained(saved)
    ids = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(0))   # 40 > Mistral's window
    compare(str(saved), reference, ids)
    if model_cls in MOE:
        assert any(".experts.0." in tensor for tensor in stored_names(saved)), "not one tensor per expert"
        if "save_original_format" in inspect.signature(reference.save_pretrained).parameters:   # transformers 5
            fused = tmp_path / "fused"
            reference.save_pretrained(fused, save_original_format=False)
            assert any(tensor.endswith(hf.FUSED) for tensor in stored_names(fused)), "experts not fused"
            compare(str(fused), reference, ids)
    if name not in RESPELLED:
        return
    respelled = tmp_path / "respelled"
    shutil.copytree(saved, respelled)
    cfg = json.loads((saved / "config.json").read_text())
    (respelled / "config.json").write_text(json.dumps(other_spelling(cfg)))
    compare(str(respelled), reference, ids)


@pytest.mark.skipif(not os.environ.get("BORN_BIASED_HF_DIR"), reason="set BORN_BIASED_HF_DIR to a checkpoint")
def test_real_checkpoint_matches_transformers():
    path = os.environ["BORN_BIASED_HF_DIR"]
    reference = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.randint(0, reference.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    compare(path, reference, ids)


# ----- the ground truth of the CPU suite: tests/hf_families.py's naive forwards against transformers itself
import hf_families  # noqa: E402

VERSION_SPELLINGS = ["4.x", "5.x"] if int(tf.__version__.split(".")[0]) >= 5 else ["4.x"]   # 4.x reads its own


@pytest.mark.parametrize("spelling", VERSION_SPELLINGS)
@pytest.mark.parametrize("case", list(hf_families.CASES))
def test_the_naive_forwards_the_suite_trusts_match_transformers(tmp_path, case, spelling):
    """Each tiny checkpoint tests/test_hf.py loads, as hf_families writes it (config.json and tensor names), read by
    transformers itself (float64, eager attention, every tensor used and none missing): its logits and final-norm
    state are those of hf_families' naive forward, within the float32 rounding of transformers' RoPE, whose angles
    are computed in float32 whatever the model's dtype (a misread knob is off by 1e-2 or more)."""
    spec, cfg, t = hf_families.checkpoint(case, spelling)
    if spec.get("expert_layout") == "fused" and VERSION_SPELLINGS == ["4.x"]:
        pytest.skip("transformers 4 reads one tensor per expert only")
    if hf_families.CASES[case].get("legacy_gelu") and VERSION_SPELLINGS == ["4.x"]:
        pytest.skip("Gemma 1's \"gelu\": exact in 4.x, tanh in 5.x, as trained and as the loader and reference read it")
    hf_families.write_checkpoint(tmp_path, cfg, t)
    auto = tf.AutoModelForImageTextToText if cfg["architectures"][0].endswith("ConditionalGeneration") else \
        tf.AutoModelForCausalLM
    experts = dict(experts_implementation="eager") if "experts" in spec and VERSION_SPELLINGS != ["4.x"] else {}
    reference, info = auto.from_pretrained(tmp_path, dtype=torch.float64, attn_implementation="eager",
                                           output_loading_info=True, **experts)   # 5's grouped_mm has no float64
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    for B, T in hf_families.CASES[case]["ids"]:
        ids = torch.randint(0, spec["V"], (B, T), generator=torch.Generator().manual_seed(T))
        with torch.no_grad():
            ref = reference.eval()(input_ids=ids, output_hidden_states=True)
        logits, hidden = hf_families.naive_forward(spec, t, ids)
        errors = relative_error(logits, ref.logits), relative_error(hidden, ref.hidden_states[-1])
        print(f"\n{case} ({spelling}, T={T}): max relative error, logits {errors[0]:.1e}, final hidden {errors[1]:.1e}")
        assert max(errors) <= TOL, (case, spelling, T, errors)
