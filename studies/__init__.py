"""
studies/: the scripts that train or build many models to make the README's and docs' numbers. A top-level file
applies one idea of the paper to a model it is given; a study runs it over the models it needs, and says at its
top what it measures, which numbers it makes, its full command and its time. Run each from the repository root:

    python -m studies.theory_tables       # closed forms beside Monte Carlo (Section 4, App. A)
    python -m studies.contraction_origin  # where the contraction comes from: ablation, MLP0, LayerNorm, Table 3
    python -m studies.attention_averaging # attention's average over positions: Fig 8, Fig 9
    python -m studies.seed_preference     # the preferred token over many seeds: Finding 2.2, seed dependence
    python -m studies.probe_bench         # a probe pass against its bare matrix products
    python -m studies.seedprint_tables    # Tables 4a-4c and 5, Fig 11, the baselines (Section 6.1)
    python -m studies.lineage_fpr         # SeedPrint's false-positive rate and power on trained models
    python -m studies.fresh_inits         # its false-positive rate on fresh inits, at any width
    python -m studies.aligned_floor       # the aligned verdict's calibration: related and unrelated pairs' matches
    python -m studies.derivatives --base DIR   # SeedPrint on a real model's derivatives
    python -m studies.vocab_derivatives   # children of another vocabulary; unrelated pairs of two tokenizers
    python -m studies.pruned              # children pruned in width (the matched verdict) or depth, and strangers
    python -m studies.upcycling           # mixtures of experts upcycled from a dense model, and strangers
    python -m studies.registry            # one suspect against a registry of fingerprint files
    python -m studies.registry_scale      # a registry of a hundred bases: times, memory, false 'derives from'
    python -m studies.reparametrized      # attention and norms reparametrized, the function kept: both verdicts
    python -m studies.distilled           # a student distilled from a teacher but initialized apart
    python -m studies.fingerprint_speed   # the time of one fingerprint
    python -m studies.load_cost DIR       # the time and memory of loading a model
    python -m studies.sink_testbed        # a first-position sink grown on a CPU, and the interventions on it
    python -m studies.sink_calibration    # Fig 12 / Table 7 on natural text, at the flags' scale
    python -m studies.gpu_check           # the prepared GPU run (--size full): tests, Table 1, trainers, 7B

lineage.py holds what the lineage studies share, sink_variants.py the sink studies' mechanisms, edits.py the
weight edits of the lineage studies, fresh_probes.py the command line of the studies on probe.py's pass: HELPERS,
the modules here that are no study.
"""
HELPERS = ("lineage", "sink_variants", "edits", "fresh_probes")
