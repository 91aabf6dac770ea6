# Theory track (Section 4 / Appendix A): two-layer linear networks, one CPU job of a few seconds.
# Any change of the `theory` config section but theory.transfer reruns it (params.cfg).
rule theory:
    output:
        metrics=study_path(layout.THEORY_METRICS),
        figures=[
            report(
                study_path(layout.FIGURE, name=f.name, ext=ext),
                caption=f"../{f.caption}",
                category=f.category,
            )
            for f in figures_of_rule("theory")
            for ext in FORMATS
        ],
    log:
        study_path("logs/theory.log"),
    benchmark:
        study_path("benchmarks/theory.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        cfg=theory_params(config),
        formats=FORMATS,
    script:
        "scripts/theory.py"


# Transfer theory (docs/theory.md, "Transfer"): "Features are fate" and "Fine-tuning with linear
# teachers" with exact finite-sample expectations checked by simulation, and the one-layer vs deep
# bridge to Section 4; one CPU job of ~20 s (threads: 1, BLAS on one thread). Its params are
# theory.transfer plus the keys of `theory` it reads (theory_transfer_params): changing theory.transfer
# reruns only this rule, changing theory.perturbation only rule theory.
rule theory_transfer:
    output:
        table=study_path(layout.THEORY_TRANSFER),
        figures=[
            report(
                study_path(layout.FIGURE, name=f.name, ext=ext),
                caption=f"../{f.caption}",
                category=f.category,
            )
            for f in figures_of_rule("theory_transfer")
            for ext in FORMATS
        ],
    log:
        study_path("logs/theory_transfer.log"),
    benchmark:
        study_path("benchmarks/theory_transfer.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    params:
        cfg=theory_transfer_params(config),
        formats=FORMATS,
    script:
        "scripts/theory_transfer.py"
