"""
studies/sink_variants.py: the sink controls the sink studies train side by side (sink_testbed, sink_calibration):
the knobs each sets on top of a baseline, and their training flags.
"""
import dataclasses

from common import Distinct, add_settings_flags, settings_given
from model import get_config

import train

# The mechanisms compared on one protocol: the knobs each sets on top of the baseline (model.py names its paper).
VARIANTS = {
    "baseline": {},
    "attenuate": dict(calibration="attenuate"),       # Section 6.2.1: x sqrt(t / T)
    "amplify": dict(calibration="amplify"),           # Section 6.2.1: x sqrt(t)
    "head_norm": dict(head_norm=True),                # head-wise RMSNorm
    "gated": dict(attn_gate=True),                    # gated attention (2505.06708)
    "softmax1": dict(attention="softmax1"),           # softmax + 1
    "sink_logit": dict(attn_sink=True),               # a learned sink logit per head (gpt-oss)
    "softpick": dict(attention="softpick"),           # rectified softmax (2504.20966)
}


def variant_configs(model: str, knobs: dict, variants: list) -> dict:
    """The config of each variant (the preset, the knobs, the variant's own), every one checked before any trains:
    one that these flags make impossible, or one without attention to measure, is refused by name."""
    configs = {}
    for name in variants:
        try:
            configs[name] = get_config(model, **{**knobs, **VARIANTS[name]})
        except ValueError as e:
            raise ValueError(f"--variants {name} sets {VARIANTS[name]}, which these flags make impossible: "
                             f"{e}") from None
        if configs[name].sublayers == "mlp":
            raise ValueError("a sink study measures attention: --sublayers mlp has none")
    return configs


# The training flags both sink studies take: train.py's own, generated from each study's TrainConfig template (its
# defaults), every range checked by TrainConfig.
TRAINING_FLAGS = ("max_steps", "batch_size", "micro_batch", "lr", "weight_decay", "data_seed", "compile")


def add_variant_flags(parser, template: train.TrainConfig) -> None:
    """--variants, and the training flags on the study's template."""
    g = parser.add_argument_group("training (train.py's flags)")
    g.add_argument("--variants", nargs="+", choices=list(VARIANTS), action=Distinct, default=["baseline"],
                   help="mechanisms trained side by side from one init, on one data order")
    add_settings_flags(g, template, TRAINING_FLAGS)


def training(args, template: train.TrainConfig, **fields) -> train.TrainConfig:
    """The study's template with its training flags and `fields` on top: a bad value is refused here, by name."""
    return dataclasses.replace(template, **settings_given(args, train.TrainConfig, TRAINING_FLAGS), **fields)
