"""Completions of a judge's prompts, in alpaca-eval's `fn_completions` contract:
`complete(prompts) -> {"completions": [...], "price_per_example": [...], "time_per_example": [...]}`.

alpaca-eval's templates are ChatML text; both backends send them as chat messages
(`alpaca_eval.utils.prompt_to_chatml`). An answer is either text (for the text parsers) or, for
`logprob_parser`, the first answer token's top log-probabilities in the OpenAI response shape the
parser reads (AlpacaEval 2's weighted judge: P("m") / (P("m") + P("M"))).

- hf_local: a causal LM loaded in the job (`from_pretrained`, hub id + revision from the cache, or
  a local directory), the prompt rendered with its chat template; greedy text, or one forward pass
  for log-probabilities. alpaca-eval's own huggingface_local_completions reloads the model for every
  chunk and ignores chat templates, hence this one.
- openai: alpaca-eval's `openai_completions` against an OpenAI-compatible endpoint (a vLLM server
  the user runs, or an API), the key from an environment variable.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from pipeline.evaluate.generation import generate_responses, left_padded, prompt_ids
from pipeline.evaluate.generation_config import GenerationConfig
from pipeline.judge.config import LOGPROB_PARSER, JudgeConfig, JudgeConfigError
from pipeline.models.hub import hub_offline
from pipeline.models.loading import with_adapter_lookup

log = logging.getLogger(__name__)

Completions = Callable[[list[str]], dict]


def wants_logprobs(evaluator: dict) -> bool:
    return evaluator["fn_completion_parser"] == LOGPROB_PARSER


def answer_tokens(cfg: JudgeConfig, evaluator: dict) -> int:
    """The most tokens of an answer: the judge's max_tokens, else the evaluator config's."""
    return cfg.max_tokens or int(evaluator.get("completions_kwargs", {}).get("max_tokens", 100))


def check_endpoint(cfg: JudgeConfig, timeout: float = 10.0) -> None:
    """The openai backend's endpoint answers `GET /models` with the judge's key, and serves the
    judge's model: else a JudgeConfigError saying what failed (run before any generation)."""
    import requests

    url = cfg.base_url.rstrip("/") + "/models"
    headers = (
        {"Authorization": f"Bearer {os.environ[cfg.api_key_env]}"} if cfg.api_key_env in os.environ else {}
    )
    try:
        response = requests.get(url, headers=headers, timeout=timeout)
    except requests.RequestException as err:
        raise JudgeConfigError(
            f"alpaca_eval.judge.base_url: the judge endpoint {url} is unreachable "
            f"({type(err).__name__}: {err}); "
            "start the server (e.g. `vllm serve <model>`) or fix base_url"
        ) from None
    if response.status_code != 200:
        raise JudgeConfigError(
            f"alpaca_eval.judge.base_url: {url} answered HTTP {response.status_code} "
            f"(key from ${cfg.api_key_env}: {'set' if headers else 'not set'}): {response.text[:200]}"
        )
    served = [m.get("id") for m in response.json().get("data", [])]
    if served and cfg.model not in served:
        raise JudgeConfigError(
            f"alpaca_eval.judge.model: {cfg.model!r} is not served at {url}; it serves {served}"
        )


def openai_backend(cfg: JudgeConfig, evaluator: dict) -> Completions:
    """alpaca-eval's openai_completions with the judge's model, endpoint and key (given to it
    directly: neither a client config file nor OPENAI_API_BASE can send the judge elsewhere)."""
    from pathlib import Path

    from alpaca_eval.decoders.openai import openai_completions

    kwargs = dict(evaluator.get("completions_kwargs", {}))
    kwargs.pop(
        "client_kwargs", None
    )  # e.g. the evaluator's own provider URL: the judge's base_url replaces it
    kwargs.setdefault("requires_chatml", True)  # the templates are ChatML: send them as chat messages
    kwargs.update(
        model_name=cfg.model,
        max_tokens=answer_tokens(cfg, evaluator),
        openai_api_keys=[os.environ.get(cfg.api_key_env) or "EMPTY"],  # a vLLM server takes any key
        openai_api_base=cfg.base_url,
        client_config_path=Path(os.devnull),  # not a config file: the two settings above are used
    )
    return lambda prompts: openai_completions(prompts=prompts, **kwargs)


def load_judge_model(cfg: JudgeConfig, device: str):
    """(model, tokenizer) of an hf_local judge: a hub id (+ revision, cache) or a local directory;
    bf16 over every visible GPU (device cuda), float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {
        "revision": cfg.revision,
        "cache_dir": cfg.cache_dir,
        "local_files_only": hub_offline(cfg.offline),
    }
    tokenizer = AutoTokenizer.from_pretrained(cfg.model, **kwargs)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    # bf16 with the layers spread over the job's GPUs (a 70B judge), else float32 on the CPU
    cuda = torch.device(device).type == "cuda"
    placement = {"dtype": torch.bfloat16, "device_map": "auto"} if cuda else {"dtype": torch.float32}
    model = AutoModelForCausalLM.from_pretrained(cfg.model, **placement, **with_adapter_lookup(kwargs))
    return model.eval(), tokenizer


def answer_token_ids(evaluator: dict, tokenizer) -> list[int]:
    """The token ids of logprob_parser's answer tokens (e.g. "m", "M"): each must be one token."""
    kwargs = evaluator.get("completion_parser_kwargs", {})
    ids = []
    for token in dict.fromkeys([kwargs["numerator_token"], *kwargs["denominator_tokens"]]):
        encoded = tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise JudgeConfigError(
                f"alpaca_eval.judge: the judge's tokenizer splits the answer token {token!r} into {encoded}; "
                "logprob_parser needs one token per answer"
            )
        ids.append(encoded[0])
    return ids


def hf_local_backend(cfg: JudgeConfig, evaluator: dict, model, tokenizer) -> Completions:
    """Completions from a model in this process: greedy text answers, or the log-probabilities of
    the first answer token: the top ones (as many as the evaluator config asks: top_logprobs) and,
    always, those of the parser's answer tokens. An API shows only its top few, so a weak judge
    that ranks neither "m" nor "M" there is unparsable; a local model's full distribution gives the
    same ratio P(m) / (P(m) + P(M)) for every prompt."""
    from alpaca_eval.utils import prompt_to_chatml

    top_k = int(evaluator.get("completions_kwargs", {}).get("top_logprobs", 5))
    text_cfg = GenerationConfig(max_new_tokens=answer_tokens(cfg, evaluator), batch_size=cfg.batch_size)

    def complete(prompts: list[str]) -> dict:
        t0 = time.perf_counter()
        chats = [prompt_to_chatml(p) for p in prompts]
        if wants_logprobs(evaluator):
            extra = answer_token_ids(evaluator, tokenizer)
            answers = first_token_logprobs(model, tokenizer, chats, top_k, cfg.batch_size, extra)
        else:
            answers = [r["output"] for r in generate_responses(model, tokenizer, chats, text_cfg)]
        per = (time.perf_counter() - t0) / max(len(prompts), 1)
        n = len(prompts)
        return {
            "completions": answers,
            "completions_all": answers,
            "price_per_example": [0.0] * n,
            "time_per_example": [per] * n,
        }

    return complete


def first_token_logprobs(
    model, tokenizer, chats: list[list[dict]], top_k: int, batch_size: int, extra: list[int] = ()
) -> list[dict]:
    """Per chat, the top_k next tokens after the assistant header with their log-probabilities
    (then those of the `extra` token ids not among them), shaped as an OpenAI chat completion's
    `logprobs` (what alpaca-eval's logprob_parser reads)."""
    import torch

    context = model.config.max_position_embeddings
    prompts = [prompt_ids(tokenizer, c)[-context:] for c in chats]
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            rows = prompts[start : start + batch_size]
            ids, mask = left_padded(rows, tokenizer.pad_token_id)
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, -1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            top = logprobs.topk(top_k, dim=-1).indices.tolist()
            for row, indices in zip(logprobs, top):
                ids = indices + [i for i in extra if i not in indices]
                tops = [{"token": tokenizer.decode([i]), "logprob": float(row[i])} for i in ids]
                out.append(
                    {"text": tops[0]["token"], "logprobs": {"content": [{**tops[0], "top_logprobs": tops}]}}
                )
    return out
