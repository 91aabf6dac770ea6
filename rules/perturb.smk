# Gaussian perturbations: one job per checkpoint evaluates its base model and its whole
# gamma x seed grid (the checkpoint is loaded once; finished cells are cached). Code:
# pipeline/sweeps/perturb_grid.py (sweeps/ holds every grid a checkpoint fans out over).


rule perturb:
    input:
        checkpoint=checkpoint_dir,
        corpus=study_path("data/corpus.parquet"),
    output:
        study_path(layout.PERTURB_PART),
    log:
        study_path("logs/perturb/{checkpoint}.log"),
    benchmark:
        study_path("benchmarks/perturb/{checkpoint}.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: config["perturb"]["threads"]
    resources:
        **preset_resources("perturb"),
    params:
        spec=checkpoint_spec,
        gammas=config["perturb"]["gammas"],
        seeds=config["perturb"]["seeds"],
        eval=eval_config(config),
        cache=lambda wc: study_path(f"perturb/.cells/{wc.checkpoint}"),
        device=DEVICE,
    script:
        "scripts/perturb.py"
