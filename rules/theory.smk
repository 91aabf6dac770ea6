# Theory track (Section 4 / Appendix A): two-layer linear networks, one CPU job of a few seconds.
# Any change of the `theory` config section reruns it (params.cfg).
rule theory:
    output:
        metrics=study_path("theory/metrics.parquet"),
        figures=[study_path(f"figures/{s}.{ext}") for s in FIGURE_STEMS for ext in FORMATS],
    params:
        cfg=lambda wc: config["theory"],
        formats=FORMATS,
    log:
        study_path("logs/theory.log"),
    benchmark:
        study_path("benchmarks/theory.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "scripts/theory.py"
