# Theory track (Section 4 / Appendix A): two-layer linear networks, one CPU job of a few seconds.
# Any change of the `theory` config section reruns it (params.cfg).
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
        cfg=lambda wc: config["theory"],
        formats=FORMATS,
    script:
        "scripts/theory.py"
