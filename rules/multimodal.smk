# LLaVA (the paper's multimodal setting; docs/multimodal.md): the study's LLaVA data and vision
# tower, each checkpoint's stage 1 (the projector, pipeline/train/llava_stage1.py) and stage 2 as a
# fine-tuning task (finetune.tasks: [llava]; every run of the grid / search / seeds_at, one job each,
# pipeline/train/finetune.py with its LLaVA task). Stage 1's rows are the task's "base" rows.


# The LLaVA data: the offline toy corpus built from pinned image packages (multimodal.data.source
# toy), or the cluster's files checked once (local); data.json names where each part is.
rule vlm_data:
    output:
        study_path(layout.VLM_DATA),
    log:
        study_path("logs/vlm/data.log"),
    benchmark:
        study_path("benchmarks/vlm/data.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(8000, 120),
    params:
        data=vlm_data_params(config),
    script:
        "scripts/vlm_data.py"


# The frozen vision tower: a hub CLIP (saved into the study), or the toy CLIP trained
# contrastively on the toy's training captions (with the study's tokenizer for the captions).
rule vlm_tower:
    input:
        data=study_path(layout.VLM_DATA),
        tokenizer=vlm_tower_tokenizer,
    output:
        directory(study_path(layout.VLM_TOWER)),
    log:
        study_path("logs/vlm/tower.log"),
    benchmark:
        study_path("benchmarks/vlm/tower.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: config["finetune"]["threads"]
    resources:
        **fixed_resources(8000, 120),
    params:
        tower=vlm_tower_params(config),
    script:
        "scripts/vlm_tower.py"


# Stage 1 per checkpoint: the projector trained on the captions (Table 2, stage 1), saved for every
# stage-2 run of the checkpoint, and the stage-1 model's benchmark rows (the task's base rows).
rule vlm_projector:
    input:
        checkpoint=checkpoint_dir,
        data=study_path(layout.VLM_DATA),
        tower=study_path(layout.VLM_TOWER),
    output:
        projector=study_path(layout.VLM_PROJECTOR),
        base=study_path(layout.TASK_BASE_PART),
    log:
        study_path("logs/finetune/{checkpoint}/{task}/projector.log"),
    benchmark:
        study_path("benchmarks/finetune/{checkpoint}/{task}/projector.tsv")
    wildcard_constraints:
        task=VLM_TASK,
    priority: budget_priority
    conda:
        "../envs/overtrain.yaml"
    threads: config["finetune"]["threads"]
    resources:
        **preset_resources("finetune"),
    params:
        spec=checkpoint_spec,
        hp=vlm_stage1_params(config),
        state=study_path("finetune/.resume/{checkpoint}/{task}/projector"),
        device=DEVICE,
    script:
        "scripts/vlm_projector.py"


# Stage 2: one job per (checkpoint, LLaVA task, method, learning rate, lambda, seed), from the
# checkpoint's stage-1 projector; the same job as rule finetune's (scripts/finetune.py).
use rule finetune as vlm_finetune with:
    input:
        checkpoint=checkpoint_dir,
        data=study_path(layout.VLM_DATA),
        tower=study_path(layout.VLM_TOWER),
        projector=study_path(layout.VLM_PROJECTOR),
        corpus=study_path(layout.CORPUS),
    wildcard_constraints:
        task=VLM_TASK,
    params:
        spec=checkpoint_spec,
        hp=finetune_method_params,
        task=vlm_task_params,
        eval=eval_config(config),
        token_cache=study_path(layout.TOKEN_CACHE),
        bench=benchmark_params(config),
        curv=None,
        state=study_path("finetune/.resume/{checkpoint}/{task}/{method}/lr{lr}_lam{lam}_seed{seed}"),
        device=DEVICE,


rule vlm_figures:
    input:
        data=study_path(layout.VLM_DATA),
        metrics=study_path(layout.METRICS),
        tuned=study_path(layout.FINETUNE_TUNED),
    output:
        **figure_outputs("vlm_figures"),
    log:
        study_path("logs/vlm_figures.log"),
    benchmark:
        study_path("benchmarks/vlm_figures.tsv")
    conda:
        "../envs/overtrain.yaml"
    threads: 1
    resources:
        **fixed_resources(2000, 10),
    script:
        "scripts/vlm_figures.py"
