# Theory track (Section 4 / Appendix A): two-layer linear networks, one CPU job of a few seconds.
# Any change of the `theory` config section reruns it (params.cfg).
rule theory:
    output:
        metrics=study_path("theory/metrics.parquet"),
        figures=[
            report(
                study_path(f"figures/{s}.{ext}"),
                caption=f"../report/{s}.rst",
                category="Theory: two-layer linear networks",
            )
            for s in FIGURE_STEMS
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
        cfg=lambda wc: config["theory"],
        formats=FORMATS,
    script:
        "scripts/theory.py"
