"""
studies/fresh_probes.py: what the studies that probe fresh inits with probe.py's pass (contraction_origin,
attention_averaging, seed_preference) share -- their command line (--exp over their sections, the embedding seed,
probe.py's flags), its checks (the preset they build: a model given by path is refused, as they build from seeds,
not from its weights; each section's derived architectures, built before any section runs) and the run of the
sections asked for.
"""
import dataclasses

from common import prepare_device, results_of, seed_int
from init import add_config_flags
from probe import EMBED_SEED, add_probe_flags, architecture, check_lengths, given_model


def add_study_flags(parser, sections, out: str, compile: bool = True) -> None:
    """The preset and its knobs, --exp (which of `sections`, default all), --embed_seed and probe.py's flags."""
    add_config_flags(parser)
    parser.add_argument("--exp", nargs="+", choices=(*sections, "all"), default=["all"],
                        help="which sections (default all)")
    parser.add_argument("--embed_seed", type=seed_int, default=EMBED_SEED, help="shared embedding / LM head seed")
    add_probe_flags(parser, out, compile=compile)


def study_config(args, sections, variants: dict = None) -> tuple:
    """(the preset's config, the sections asked for), before any work. variants: {section: {label: knobs}}, the
    architectures each section derives from the preset; one that these flags make impossible is refused by name."""
    if given_model(args):
        raise ValueError(f"this study builds fresh inits from seeds (block seed against embedding seed), not the "
                         f"weights of --model {args.model}: give a preset; on a given model probe.py runs table1, "
                         f"contraction and dims")
    config = architecture(args)
    asked = [name for name in sections if name in args.exp or "all" in args.exp]
    check_lengths(args, config)
    for name in asked:
        for label, knobs in (variants or {}).get(name, {}).items():
            try:
                dataclasses.replace(config, **knobs)
            except ValueError as e:
                raise ValueError(f"--exp {name} builds a model with {knobs} ({label}), which these flags make "
                                 f"impossible: {e}") from None
    return config, asked


def run_sections(args, config, sections: dict, asked: list) -> None:
    """The sections asked for, in the study's order, on --device: sections[name](args, config) is stored under name
    in --out/results.json (common.results_of)."""
    prepare_device(args)
    with results_of(args, dict(config=dataclasses.asdict(config))) as results:
        for name in asked:
            results[name] = sections[name](args, config)
