"""Bad input: every config error names the key and what was expected, before any job starts."""

import copy
import json
import math
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from workflow_utils import (
    HEAVY,
    ROOT,
    in_fresh_process,
    parse_time_imports,
    reordered,
    smoke_config,
    snakemake,
    workflow_config,
    write_config,
)

from pipeline.data.corpus import CorpusError, Document, build_corpus
from pipeline.models.checkpoints import local_checkpoints, study_checkpoints
from pipeline.workflow.plans import checkpoint_shape, finetune_plan, job_micro_batch
from pipeline.workflow.schema import ConfigError, fill_defaults, load_schema, validate_config

CASES = [
    ({"pertub": {"gammas": [1]}}, "pertub"),
    ({"perturb.gammas": "big"}, "gammas"),
    ({"perturb.gammas": [1, -0.5]}, "-0.5"),
    ({"pretrain.budgets": [100]}, "token budget 100 is smaller than one batch"),
    ({"pretrain.presets": ["olmo-1t"]}, "olmo-1t"),
    ({"pretrain.lr": 0}, "lr"),
    ({"corpus.embedded": ["wikipedia"]}, "wikipedia"),
    (
        {
            "checkpoints.source": "local",
            "checkpoints.local": [{"name": "a", "path": "/nonexistent/dir", "tokens": 5}],
        },
        "/nonexistent/dir",
    ),
    ({"checkpoints.source": "local", "checkpoints.local": [{"name": "a", "path": "/tmp"}]}, "tokens"),
    ({"finetune.tasks": ["code", "imdb"]}, "imdb"),
    ({"finetune.learning_rates": [1.0e-3, 0]}, "learning_rates"),
    ({"finetune.learning_rates": "all"}, "learning_rates"),
    ({"finetune.learning_rates": [1.0e-3, 1.0000001e-3]}, "differ only beyond 6 significant digits"),
    ({"finetune.schedule": "linear"}, "linear"),
    (
        {"finetune.learning_rates": {"search": {"bracket": [1e-3, 1e-1], "resolution": 0.3}}},
        "finetune.learning_rates.search.resolution: got 0.3 decades",
    ),
    (
        {"finetune.learning_rates": {"search": {"grid": "paper"}, "values": [1e-3]}},
        "finetune.learning_rates: unknown key 'values'",
    ),
    (
        {"finetune.learning_rates": {"search": {"grid": "paper"}}, "finetune.seeds_at": "all"},
        "finetune.seeds_at: all cannot go with finetune.learning_rates.search",
    ),
    ({"curvature.lambdas_wide": [1.0, 2.0]}, "curvature.lambdas_wide: a λ grid must contain 0"),
    ({"finetune.wise_ft_alphas": [0.5, 1.0]}, "finetune.wise_ft_alphas: [0.5, 1.0] must contain 0"),
    ({"finetune.methods": {"r": {"replay_fraction": 1.0}}}, "replay_fraction"),
    (
        {"finetune.methods": {"d": {"proximal": "decoupled"}}, "finetune.lambdas": [0.0, 1000.0]},
        "finetune.methods.d.proximal: the decoupled step",
    ),
    ({"finetune.ranks": 3}, "finetune.batch_size 8 cannot be split evenly over finetune.ranks 3"),
    ({"finetune.ranks": 2}, "curvature.enabled with finetune.ranks 2: the curvature stage's line"),
    (
        {"device": "cuda", "finetune.ranks": 4, "gpu.per_node": 2},
        "finetune.ranks 4 is more GPUs than a node has",
    ),
    (
        {"device": "cuda", "pretrain.ranks": 16, "pretrain.batch_size": 16, "gpu.per_node": 8},
        "pretrain.ranks 16 is more GPUs than a node has (gpu.per_node 8); a job runs on one node",
    ),
    (
        {"finetune.grid_per_job": "always"},
        "finetune.grid_per_job: got 'always'; expected one of true, false, auto",
    ),
    ({"finetune.precision": "fp16"}, "finetune.precision"),
    (
        {"device": "cuda", "gpu.memory_gb": 0.5, "finetune.ranks": 1},
        "does not fit: on 1 GPU(s) of 0.5 GB",
    ),
    # the judged metric (alpaca_eval): the reference run must be in the grid, the judge must exist
    (
        {"alpaca_eval.enabled": True, "alpaca_eval.reference.learning_rate": 3e-5},
        "alpaca_eval.reference.learning_rate: 3e-05 is not in the study's grid",
    ),
    # a theory key the schema cannot check, checked at start-up (theory disabled in the smoke study)
    (
        {"theory.spectra.x": {"kind": "values", "values": [1, 2, 3, 4, 5, 6, 7, 8]}},
        "theory.spectra.x: singular values must be strictly decreasing",
    ),
]


@pytest.mark.parametrize("change, needle", CASES, ids=[c[1][:20] for c in CASES])
def test_bad_config_is_rejected_with_a_clear_message(tmp_path, change, needle):
    cfg = smoke_config(study="bad-config", **{k: v for k, v in change.items() if "." in k})
    cfg.update({k: v for k, v in change.items() if "." not in k})
    assert_stops_at_start_up(write_config(tmp_path, cfg), needle, "bad-config")


def assert_stops_at_start_up(configfile: Path, needle: str, study: str) -> str:
    """A dry run of `configfile` stops with `needle` in its message, no traceback, nothing written;
    its output."""
    res = snakemake(configfile, "-n", "--cores", "1")
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert needle in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert not (ROOT / "results" / study).exists()
    return text


# the study's data files, checked before anything reads them: the message names the key and the file
MISSING = "/nonexistent/tokenizer.json"
# id, tokenizer.path (a file's text, MISSING or None), a folder among the shards, allow_repeat, message
DATA_CASES = [
    (
        "missing",
        MISSING,
        False,
        False,
        f"tokenizer.path: {MISSING} does not exist; expected a tokenizer.json",
    ),
    ("null", None, False, False, "tokenizer.path is required when tokenizer.kind is 'file'"),
    ("not-json", "not json", False, False, "tokenizer.path: {file} is not JSON (Expecting value: line 1"),
    ("no-vocab", '{"model": {"type": "BPE"}}', False, False, "tokenizer.path: {file} holds no vocabulary"),
    ("shard-folder", "", True, False, "pretrain.token_shards.paths: {folder} is a folder (expected token"),
    ("shard-folder-repeat", "", True, True, "pretrain.token_shards.paths: {folder} is a folder (expected"),
]


@pytest.mark.parametrize(
    "case, tokenizer, folder, repeat, needle", DATA_CASES, ids=[c[0] for c in DATA_CASES]
)
def test_bad_data_files_stop_the_dry_run_naming_key_and_file(
    tmp_path, case, tokenizer, folder, repeat, needle
):
    """pretrain.token_shards with a tokenizer file: the tokenizer is checked first (the shards' id
    type needs its vocabulary), present, JSON, holding a vocabulary; a folder among the shards (its
    size is no count of ids) is named, with pretrain.allow_repeat too."""
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "part-000.npy").write_bytes(bytes(2 * 4096))
    file = tmp_path / "tokenizer.json"
    if tokenizer not in (None, MISSING):  # "": a valid one
        file.write_text(tokenizer or json.dumps({"model": {"vocab": {str(i): i for i in range(512)}}}))
    cfg = smoke_config(study="bad-data")
    path = tokenizer if tokenizer in (None, MISSING) else str(file)
    cfg["tokenizer"] = {"kind": "file", "vocab_size": 512, "path": path}
    cfg["pretrain"] |= {
        "allow_repeat": repeat,
        "token_shards": {"paths": [str(shards if folder else shards / "part-000.npy")], "dtype": "uint16"},
    }
    assert_stops_at_start_up(write_config(tmp_path, cfg), needle.format(file=file, folder=shards), "bad-data")


# more of the judged metric's checks, in process (the check_config the Snakefile runs at parse time)
JUDGE_CASES = [
    (
        {
            "alpaca_eval.enabled": True,
            "finetune.learning_rates": {"search": {"bracket": [1e-3, 1e-1], "resolution": 0.5}},
        },
        "alpaca_eval: the judged metric needs every fine-tuning run before judging",
    ),
    (
        {
            "alpaca_eval.enabled": True,
            "alpaca_eval.reference.learning_rate": 3e-3,
            "alpaca_eval.reference.seed": 7,
        },
        "alpaca_eval.reference.seed: 7 is not in the study's grid [0]",
    ),
    (
        {"alpaca_eval.enabled": True, "alpaca_eval.judge.annotator": "gpt5_judge"},
        "alpaca_eval.judge.annotator: 'gpt5_judge' is neither an alpaca-eval evaluator config",
    ),
    (
        {
            "alpaca_eval.enabled": True,
            "alpaca_eval.reference.learning_rate": 3e-3,
            "alpaca_eval.instructions.source": "task",
            "alpaca_eval.instructions.task": "code",
        },
        "alpaca_eval.instructions.task: 'code' is not a chat task",
    ),
    (
        {
            "alpaca_eval.enabled": True,
            "alpaca_eval.reference.learning_rate": 3e-3,
            "alpaca_eval.instructions.source": "local",
            "alpaca_eval.instructions.path": "/no/such.json",
        },
        "alpaca_eval.instructions.path: /no/such.json does not exist",
    ),
    ({"finetune.select_metric": "win_rate"}, "finetune.select_metric: win_rate needs the judged metric"),
    (
        {
            "finetune.grid_per_job": True,
            "finetune.learning_rates": {"search": {"bracket": [1e-3, 1e-1], "resolution": 0.5}},
        },
        "finetune.grid_per_job: a search's learning rates are known only as it goes",
    ),
    (
        {
            "finetune.grid_per_job": True,
            "alpaca_eval.enabled": True,
            "alpaca_eval.reference.learning_rate": 3e-3,
        },
        "finetune.grid_per_job: the judged metric's responses are one job's output per run",
    ),
]


@pytest.mark.parametrize("change, needle", JUDGE_CASES, ids=[c[1][:30] for c in JUDGE_CASES])
def test_bad_judge_config_is_rejected_at_parse_time(change, needle):
    assert needle in parse_time_error(change)


def parse_time_error(change: dict) -> str:
    """The ConfigError of the smoke config with `change` (schema-valid), as the Snakefile raises it."""
    from pipeline.workflow.config import check_config

    cfg = workflow_config(smoke_config(study="bad-config", **change))
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    with pytest.raises(ConfigError) as err:
        check_config(cfg, check_benchmark_tasks=False)
    return str(err.value)


# every theory key is checked before any job starts: what config/schema.yaml cannot say is checked by
# the theory job's own check (pipeline/theory/config.py check_config), run by check_config at parse time
DECREASING = [1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01]  # d = 8 values (config.yaml's theory.d)
THEORY_CASES = [
    (
        {"theory.spectra.x": {"kind": "values", "values": [1, 2, 3]}},
        "theory.spectra.x: 3 values given for d = 8",
    ),
    (
        {"theory.spectra.x": {"kind": "values", "values": [math.inf, *DECREASING[1:]]}},
        "theory.spectra.x: spectrum has non-finite values",
    ),
    (
        {"theory.spectra.g": {"kind": "geometric", "ratio": 1e-200}},
        "theory.spectra.g: singular values must be > 0",
    ),
    (
        {
            "theory.finetune.tasks": {
                "ft": {"pretrain": "power-2", "spectrum": {"kind": "values", "values": DECREASING[::-1]}}
            }
        },
        "theory.finetune.tasks.ft.spectrum: singular values must be strictly decreasing",
    ),
    (
        {
            "theory.finetune.tasks": {
                "ft": {"pretrain": "nope", "spectrum": {"kind": "geometric", "ratio": 0.5}}
            }
        },
        "theory.finetune.tasks.ft.pretrain: 'nope' is not one of theory.spectra",
    ),
    ({"theory.max_time": 0.01}, "theory.dt / theory.max_time: need 0 < dt < max_time < inf"),
    ({"theory.max_time": math.inf}, "theory.dt / theory.max_time: need 0 < dt < max_time < inf"),
    ({"theory.dt": 0.5}, "theory.dt: dt = 0.5 is too large for RK4 on a spectrum with sigma_1 = 1;"),
    ({"theory.tau": math.inf}, "theory.tau: need a finite tau > 0"),
    (
        {"theory.perturbation.gammas": [0.1, math.inf]},
        "theory.perturbation.gammas: gamma must be finite and >= 0",
    ),
    (
        {"theory.finetune.lambdas": [0.0, 2.0, 1.0]},
        "theory.finetune.lambdas: need a strictly increasing list",
    ),
    ({"theory.finetune.lambdas": [0.0, math.inf]}, "theory.finetune.lambdas: lambda must be finite and >= 0"),
    ({"theory.finetune.learning_rate": math.inf}, "theory.finetune.learning_rate: need a finite value > 0"),
    ({"theory.finetune.alpha": math.inf}, "theory.finetune.alpha: need a finite alpha > 0"),
    # theory.transfer (pipeline/theory/transfer/config.py; every case: tests/theory/test_transfer.py)
    (
        {"theory.transfer.features_are_fate.n": [20, 100]},
        "theory.transfer.features_are_fate.n: grid point n = 100 with d = 100",
    ),
]


@pytest.mark.parametrize("change, needle", THEORY_CASES, ids=[c[1][:40] for c in THEORY_CASES])
def test_bad_theory_config_is_rejected_at_parse_time(change, needle):
    """A schema-valid config stops at parse time (theory disabled or not) with one line naming the key."""
    message = parse_time_error(change)
    assert message.startswith(f"invalid config: {needle}") and "\n" not in message, message


def test_empty_split_is_a_clear_error():
    docs = [Document(f"d{i}", "x", "some text") for i in range(3)]
    with pytest.raises(CorpusError, match="split .* is empty"):
        build_corpus(docs, {"validation": 0.01, "test": 0.01})


def test_missing_data_package_names_the_file(tmp_path):
    from pipeline.data.corpus import load_embedded

    with pytest.raises(CorpusError, match="make setup"):
        load_embedded("sotu", tmp_path)


# --- readable schema errors, and the defaults validation adds ---------------------------------------

SCHEMA = load_schema(ROOT / "config" / "schema.yaml")


def validated(**overrides) -> dict:
    cfg = workflow_config(smoke_config(study="t", **overrides))
    validate_config(cfg, SCHEMA)
    return cfg


def test_a_values_spectrum_is_accepted_and_gets_no_foreign_default():
    """`kind: values` (documented) validates: the `top` default of the other oneOf branches is not
    injected into it (it once was, and that branch forbids extra keys)."""
    values = {"kind": "values", "values": [1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01]}
    cfg = validated(**{"theory.spectra.v": values, "theory.spectra.g": {"kind": "geometric", "ratio": 0.5}})
    assert cfg["theory"]["spectra"]["v"] == values
    assert cfg["theory"]["spectra"]["g"] == {"kind": "geometric", "ratio": 0.5, "top": 1.0}
    hub = cfg["checkpoints"]["hub"]  # other schema defaults are still filled in
    assert (hub["preset"], hub["cache_dir"], hub["offline"]) == (None, None, None)


@pytest.mark.parametrize(
    "change, line",
    [
        (
            {"theory.spectra.g": {"kind": "geometric", "ratio": 1.5}},
            "theory.spectra.g.ratio: got 1.5; expected a value > 0 and < 1",
        ),
        ({"finetune.learning_rates": [1.0e-3, 0]}, "finetune.learning_rates[1]: got 0; expected a value > 0"),
        (
            {"checkpoints.hub.revisions": [{"rev": "main"}]},
            "checkpoints.hub.revisions[0]: unknown key 'rev'; expected one of revision, tokens",
        ),
        ({"perturb.gammas": "big"}, "perturb.gammas: got 'big'; expected a list of numbers >= 0"),
    ],
)
def test_schema_errors_are_one_short_line_naming_the_key(change, line):
    """A failed oneOf is described by the branch the value meant, not by printing the schema."""
    with pytest.raises(ConfigError) as err:
        validated(**change)
    lines = str(err.value).splitlines()
    assert lines[0] == "invalid config:" and line in [ln.strip() for ln in lines], str(err.value)
    assert len(lines) <= 3 and all(len(ln) < 160 for ln in lines), str(err.value)


def test_a_reordered_config_is_the_same_config():
    """Params by meaning: validation puts the config in canonical form (schema order, free-named keys
    such as finetune.methods' sorted, whole floats of integer keys as ints), so every rule's params,
    taken from it, are the same text for a reordered but equal config (Snakemake compares that text)."""
    base = workflow_config(ROOT / "config" / "lora.yaml")
    cfg, other = copy.deepcopy(base), reordered(base)
    other["pretrain"]["batch_size"] = float(other["pretrain"]["batch_size"])  # 16.0: the same batch
    validate_config(cfg, SCHEMA), validate_config(other, SCHEMA)
    assert repr(other) == repr(cfg)
    assert list(cfg["finetune"]["methods"]) == ["lora", "replay", "sft"]


def key_order(node, at: str = "") -> list[str]:
    """Every key path of a config, in order."""
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in key_order(v, f"{at}[{i}]")]
    if not isinstance(node, dict):
        return []
    return [p for k, v in node.items() for p in (f"{at}.{k}", *key_order(v, f"{at}.{k}"))]


def test_config_yaml_is_written_in_canonical_order():
    """config.yaml (the default study, run without an overlay) is in the schema's order, with the
    keys it leaves to their defaults after the keys it sets in each section: canonical form keeps
    the text of its params, so the default study reruns nothing for it."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    defaults = copy.deepcopy(cfg)
    fill_defaults(jsonschema.Draft202012Validator(SCHEMA), defaults, SCHEMA)  # appended, in place
    validate_config(cfg, SCHEMA)
    assert key_order(cfg) == key_order(defaults)


def test_unknown_spectrum_kind_lists_the_kinds():
    with pytest.raises(ConfigError, match=r"theory\.spectra\.g: got .*kind: geometric \| .*kind: values"):
        validated(**{"theory.spectra.g": {"kind": "cubic", "ratio": 0.5}})


def test_a_values_spectrum_dry_runs(tmp_path):
    """The theory stage with a `kind: values` spectrum through the real Snakefile (start-up checks)."""
    values = {"kind": "values", "values": [1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01]}
    cfg = smoke_config(study="values-spectrum", **{"theory.enabled": True, "theory.spectra": {"v": values}})
    cfg["theory"]["finetune"] = {"tasks": {"ft": {"pretrain": "v", "spectrum": values}}}
    res = snakemake(write_config(tmp_path, cfg), "-n", "--cores", "1", "--until", "theory")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]


# --- parse time: light imports, every shipped config dry-runs -----------------------------------------


def test_the_snakefile_imports_nothing_heavy():
    """Every module the Snakefile and rules/*.smk import (and the whole workflow layer), imported in a
    fresh process, loads none of torch, pandas, numpy, scipy, matplotlib: each parse of the workflow
    (every dry run, every cluster job) would pay for them."""
    modules = parse_time_imports()
    assert {"pipeline.workflow.config", "pipeline.data.tasks", "pipeline.layout"} <= set(modules)
    loaded = in_fresh_process(modules, f"[m for m in {HEAVY} if m in sys.modules]")
    assert loaded == "[]", f"imported at parse time: {loaded} (modules {modules})"


SHIPPED = [
    ROOT / "config.yaml",
    *sorted((ROOT / "config").glob("*.yaml")),
    ROOT / "tests" / "smoke" / "config.yaml",
]


@pytest.mark.parametrize(
    "configfile", [c for c in SHIPPED if c.name != "schema.yaml"], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_shipped_config_dry_runs(configfile, tmp_path, tokenizer_dir):
    """`snakemake -n` on each shipped config (over config.yaml, as --configfile does). Needs no
    download: hub revisions (config/demo-smollm2.yaml: the stand-in in data/hub-cache) are checked
    in onstart, which a dry run skips, and the hub preset names its revisions itself. --forceall:
    the whole DAG whether or not the study's results already exist. config/llava.yaml's cluster
    data paths, and config/paper-controlled.yaml's C4 shards and tokenizer, are moved to files that
    exist (start-up checks they do)."""
    local_data = {
        "llava.yaml": lambda: llava_data(tmp_path),
        "paper-controlled.yaml": lambda: paper_controlled_data(tmp_path, tokenizer_dir),
    }
    extra = [str(local_data[configfile.name]())] if configfile.name in local_data else []
    res = snakemake(configfile, *extra, "-n", "--forceall", "--cores", "1", "--quiet", "rules")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert re.search(r"^all\s+1$", res.stdout + res.stderr, re.M), (res.stdout + res.stderr)[-3000:]


def slurm_dry_run(*configs) -> str:
    """The output of a forced dry run of `configs` through the SLURM profile (which must succeed)."""
    res = snakemake(*configs, "-n", "--forceall", "--workflow-profile", str(ROOT / "profiles" / "slurm"))
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-3000:]
    return text


def job_resources(text: str, rule: str) -> list[str]:
    """The `resources:` line of every job of `rule` in a dry run's output."""
    return re.findall(rf"^rule {rule}:\n(?:    .*\n)*?    resources: (.*)$", text, re.M)


def test_paper_scale_dry_run_places_every_finetuning_job_on_the_planners_gpus():
    """OLMo-2-7B instruction tuning on 80 GB GPUs through the SLURM profile: each fine-tuning job
    asks for the memory planner's 2 GPUs and starts 2 ranks (16 B x 7.3B parameters of state)."""
    text = slurm_dry_run(ROOT / "config" / "instruct.yaml", str(ROOT / "config" / "olmo2-7b.yaml"))
    jobs = job_resources(text, "finetune")
    counted = re.search(r"^finetune\s+(\d+)$", text, re.M)
    assert (
        counted and len(jobs) == int(counted.group(1)) == 6 * 3 * 7 * 3
    )  # checkpoints x tasks x LRs x seeds
    assert all("gpu=2" in r.split(", ") and "ranks=2" in r.split(", ") for r in jobs), jobs[:2]
    # the job's micro-batch comes from the same plan (its record takes it: no job plans again)
    cfg = workflow_config(ROOT / "config" / "instruct.yaml", ROOT / "config" / "olmo2-7b.yaml")
    planned = {finetune_plan(spec, cfg).micro_batch for spec in study_checkpoints(cfg)}
    assert {f"micro_batch={m}" for m in planned} == {
        m for r in jobs for m in r.split(", ") if "micro_batch" in m
    }


def test_a_job_that_finds_its_gpu_as_it_starts_plans_as_the_workflow_does(study_files):
    """`device: auto` on a GPU machine: no resource carries a plan, so the job plans its micro-batch
    itself, with the workflow's arithmetic on its own rank count; its shape comes from the
    checkpoint's architecture (here a local checkpoint's config.json on the meta device)."""
    cfg = workflow_config(ROOT / "config.yaml")
    (spec,) = local_checkpoints([{"name": "local-tiny", "tokens": 1, "path": study_files["ckpt"]}])
    from pipeline.models.loading import architecture
    from pipeline.models.shapes import shape_of

    vocab = cfg["tokenizer"]["vocab_size"]
    assert shape_of(architecture(spec, vocab).config) == checkpoint_shape(spec, vocab)  # one shape
    cfg["finetune"]["batch_size"] = 4096  # a batch a 2 GB GPU does not hold at once: the plan splits it
    cfg["gpu"]["memory_gb"] = 2
    for gpus in (1, 2):
        cfg["finetune"]["ranks"] = gpus
        planned = finetune_plan(spec, cfg).micro_batch
        assert job_micro_batch(spec, cfg, gpus) == planned < 4096 // gpus, planned


def paper_controlled_data(tmp_path: Path, tokenizer_dir: Path) -> Path:
    """An overlay moving config/paper-controlled.yaml's data to files that exist: one sparse token
    shard of 130B tokens (start-up checks the shards' sizes against the budgets; the file takes no
    disk) and a tokenizer file."""
    shard = tmp_path / "c4" / "part-000.npy"
    shard.parent.mkdir()
    with open(shard, "wb") as f:
        f.truncate(2 * 130_000_000_000)
    overlay = {
        "tokenizer": {"path": str(tokenizer_dir / "tokenizer.json")},
        "pretrain": {"token_shards": {"paths": [str(shard.parent / "part-*.npy")], "dtype": "uint16"}},
    }
    return write_config(tmp_path, overlay, "paper-data.yaml")


def test_the_paper_controlled_study_stops_at_start_up_without_its_data(tmp_path, tokenizer_dir):
    """Its tokenizer first (the shards' check reads its vocabulary), then its shards."""
    res = snakemake(ROOT / "config" / "paper-controlled.yaml", "-n", "--cores", "1")
    assert res.returncode != 0
    assert "tokenizer.path: /data/olmo/tokenizer/gpt-neox-olmo-dolma-v1_5.json does not exist" in res.stdout
    tokenizer = {"tokenizer": {"path": str(tokenizer_dir / "tokenizer.json")}}
    res = snakemake(ROOT / "config" / "paper-controlled.yaml", str(write_config(tmp_path, tokenizer)), "-n")
    assert res.returncode != 0
    assert "pretrain.token_shards.paths: /data/olmo/c4/part-*.npy matches no file" in res.stdout + res.stderr


def test_a_gpu_pre_training_job_asks_for_the_time_its_cost_model_gives(tmp_path, tokenizer_dir):
    """config/paper-controlled.yaml's longest job (olmo-90m, 128B tokens on the planner's 8 GPUs) asks
    SLURM for its GPU-hours over the ranks at gpu.tflops, times the margin: more than the preset's
    day; olmo-15m's jobs run on one GPU each."""
    from pipeline.workflow import pretrain_sweep

    configs = [ROOT / "config" / "paper-controlled.yaml", paper_controlled_data(tmp_path, tokenizer_dir)]
    cfg = workflow_config(*configs)
    validate_config(cfg, load_schema(ROOT / "config" / "schema.yaml"))
    tokens = pretrain_sweep.job_tokens(cfg, budget=128_000_000_000)
    minutes = pretrain_sweep.runtime_minutes(cfg, "olmo-90m", tokens)
    hours = pretrain_sweep.gpu_hours(cfg, "olmo-90m", tokens)
    assert minutes == pytest.approx(hours / 8 * 60 * pretrain_sweep.RUNTIME_MARGIN, abs=1) and minutes > 1440
    text = slurm_dry_run(*configs)
    assert f"runtime={minutes}, gpu=8, ranks=8" in text
    # olmo-15m's budget jobs fit one GPU each (the planner's pretrain.ranks): its hours on one GPU
    small = pretrain_sweep.runtime_minutes(cfg, "olmo-15m", tokens)
    assert small == pytest.approx(pretrain_sweep.gpu_hours(cfg, "olmo-15m", tokens) * 60 * 1.5, abs=1)
    assert f"runtime={small}, gpu=1, ranks=1" in text


def llava_data(tmp_path: Path) -> Path:
    """An overlay moving config/llava.yaml's local LLaVA data to files and folders that exist (a dry
    run checks they exist, not what they hold)."""
    local = yaml.safe_load((ROOT / "config" / "llava.yaml").read_text())["multimodal"]["data"]["local"]
    moved = {
        "stage1": tmp_path / "stage1.json",
        "stage2": tmp_path / "stage2.json",
        "image_dir": tmp_path / "images",
    }
    for key in ("stage1", "stage2"):
        moved[key].write_text("[]")
    moved["image_dir"].mkdir()
    evals = {name: tmp_path / "eval" / name for name in local["eval"]}
    for folder in evals.values():
        folder.mkdir(parents=True)
    overlay = {
        "multimodal": {
            "data": {
                "local": {
                    **{k: str(v) for k, v in moved.items()},
                    "eval": {k: str(v) for k, v in evals.items()},
                }
            }
        }
    }
    return write_config(tmp_path, overlay, "llava-data.yaml")


@pytest.mark.parametrize("checkpoints, gpus", [(None, 1), ("olmo2-7b.yaml", 2)], ids=["olmo-1b", "olmo-2-7b"])
def test_llava_at_paper_scale_places_stage_two_on_the_planners_gpus(tmp_path, checkpoints, gpus):
    """config/llava.yaml through the SLURM profile: every stage-2 job asks for the memory planner's
    GPUs (the frozen CLIP ViT-L/14-336 counted beside the language model), stage 1 for one."""
    overlays = [str(llava_data(tmp_path))]
    if checkpoints:
        overlays.insert(0, str(ROOT / "config" / checkpoints))
    text = slurm_dry_run(ROOT / "config" / "llava.yaml", *overlays)
    stage2, stage1 = job_resources(text, "vlm_finetune"), job_resources(text, "vlm_projector")
    assert stage2 and all(f"gpu={gpus}" in r.split(", ") and f"ranks={gpus}" in r.split(", ") for r in stage2)
    assert stage1 and all("gpu=1" in r.split(", ") for r in stage1), stage1[:2]


METHOD_CASES = [  # id, the method's params, its runs' rule (finetune; finetune_grid; a search's), message
    (
        "lora-target",
        {"lora": {"rank": 4, "target_modules": ["qq_proj"]}},
        {},
        "params.lora.target_modules: 'qq_proj' matches no module",
    ),
    (
        "lora-target-grid",
        {"lora": {"rank": 4, "target_modules": ["qq_proj"]}},
        {"finetune.grid_per_job": "auto", "finetune.learning_rates": [1e-3, 3e-3]},
        "params.lora.target_modules: 'qq_proj' matches no module",
    ),
    (
        "modules-search",
        {"modules": ["*.nonexistent.*"]},
        {"finetune.learning_rates": {"search": {"bracket": [1e-3, 1e-1], "resolution": 0.5}}},
        "params.modules: '*.nonexistent.*' matches no parameter",
    ),
    ("lora-rank", {"lora": {"rank": 64, "target_modules": ["q_proj"]}}, {}, "params.lora.rank: 64 is larger"),
]


@pytest.mark.parametrize("case, params, change, message", METHOD_CASES, ids=[c[0] for c in METHOD_CASES])
def test_method_settings_that_match_nothing_stop_the_dry_run(tmp_path, case, params, change, message):
    """Checked at parse time, dry run included, on each checkpoint's architecture (meta device: the
    preset's), whichever rule runs the method (one job per rate, grid_per_job's grid jobs, a search's
    rounds): the error names the method's key and pattern and lists the model's module names."""
    methods = {"finetune.methods": {"sft": {}, "lo": {"params": params}}}
    cfg = write_config(tmp_path, smoke_config(study="bad-method", **methods, **change))
    text = assert_stops_at_start_up(cfg, f"finetune.methods.lo.{message}", "bad-method")
    assert "(checkpoint tiny-16384-s0)" in text and ("'q_proj'" in text or "rank" in case), text[-3000:]


def test_method_checks_read_each_architectures_names_from_a_cache_without_torch(tmp_path):
    """The names of a sweep's preset are built once on the meta device (its checkpoints share them)
    and kept; the next parse checks them without importing torch, and a pattern that matches nothing
    is found there too."""
    from pipeline.workflow.methods import check_methods

    lora = {"lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]}}
    cfg = validated(**{"finetune.methods": {"sft": {}, "lo": {"params": lora}}})
    cache, saved = tmp_path / "cache", tmp_path / "config.json"
    check_methods(cfg, study_checkpoints(cfg), cache=cache)
    assert len(study_checkpoints(cfg)) == 3 and len(list(cache.iterdir())) == 1
    saved.write_text(json.dumps(cfg))
    load = f"json.loads(pathlib.Path({str(saved)!r}).read_text())"
    specs = f"pipeline.models.checkpoints.study_checkpoints({load})"
    call = f"pipeline.workflow.methods.check_methods({load}, {specs}, cache=pathlib.Path({str(cache)!r}))"
    modules = ["json", "pathlib", "pipeline.workflow.methods", "pipeline.models.checkpoints"]
    assert in_fresh_process(modules, f"({call}, [m for m in {HEAVY} if m in sys.modules])[1]") == "[]"
    bad = validated(**{"finetune.methods": {"lo": {"params": {"modules": ["*.mlp.*", "*.attn_out.*"]}}}})
    with pytest.raises(ConfigError, match=r"finetune.methods.lo.params.modules: '\*.attn_out.\*' matches no"):
        check_methods(bad, study_checkpoints(bad), cache=cache)
    assert len(list(cache.iterdir())) == 1


def test_a_hub_checkpoint_is_checked_at_parse_time_only_from_the_cache(standin, tmp_path):
    """A hub revision in the cache is checked from its config.json there (nothing asked of the
    hub); one that is not is left to onstart, after its revision is found."""
    from pipeline.models.checkpoints import CheckpointSpec
    from pipeline.workflow.methods import check_methods, config_at_hand

    _, cache = standin
    model_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    cached = CheckpointSpec(
        "smol", "hub", model_id, 1, model_id=model_id, revision="main", cache_dir=str(cache)
    )
    elsewhere = CheckpointSpec(
        "smol", "hub", model_id, 1, model_id=model_id, revision="main", cache_dir=str(tmp_path)
    )
    assert config_at_hand(cached) and not config_at_hand(elsewhere)
    lora = {"lora": {"rank": 4, "target_modules": ["q_proj", "wq"]}}
    cfg = validated(**{"finetune.methods": {"lo": {"params": lora}}})
    with pytest.raises(ConfigError, match=r"target_modules: 'wq' matches no module.*\(checkpoint smol\)"):
        check_methods(cfg, [cached], cache=tmp_path / "names")


def test_duplicate_pretraining_seeds_stop_at_start_up():
    with pytest.raises(ConfigError) as err:
        validated(**{"pretrain.seeds": [0, 1, 0]})
    assert "pretrain.seeds" in str(err.value) and "no repeated items" in str(err.value)


def test_a_budget_beyond_the_tokenized_split_stops_at_start_up(tmp_path, monkeypatch):
    """Where the training split is tokenized with the config's corpus and tokenizer settings, a budget
    it cannot hold stops before any job, naming the budget and the split's size; other settings (the
    split will be made again) or pretrain.allow_repeat pass."""
    import json

    from pipeline import layout
    from pipeline.workflow.config import check_config

    monkeypatch.chdir(tmp_path)
    cfg = validated()
    info = tmp_path / layout.study_path("t", layout.TRAIN_TOKENS_INFO)
    info.parent.mkdir(parents=True)
    small = 1 + max(cfg["pretrain"]["budgets"]) // 2  # half the largest budget
    info.write_text(json.dumps({"tokens": small, "corpus": cfg["corpus"], "tokenizer": cfg["tokenizer"]}))
    with pytest.raises(ConfigError, match=rf"budget {max(cfg['pretrain']['budgets']):,} tokens exceeds"):
        check_config(cfg, check_benchmark_tasks=False)
    check_config({**cfg, "pretrain": {**cfg["pretrain"], "allow_repeat": True}}, check_benchmark_tasks=False)
    other = {**cfg, "tokenizer": {**cfg["tokenizer"], "vocab_size": 999}}
    check_config(other, check_benchmark_tasks=False)
