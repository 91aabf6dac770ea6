"""Pairwise annotation, as AlpacaEval does it, with alpaca-eval's own pieces: per item the two
outputs are presented in a random order seeded by the instruction and the judge's seed
(`RandomSwitchTwoColumnsProcessor`), formatted into the evaluator's prompt template
(`utils.make_prompts`), answered by a backend and read by the evaluator's parser
(`completion_parsers`); the preference is then mapped back to the unswitched order.

Preferences use alpaca-eval's encoding: 1 = output_1 (the reference) is better, 2 = output_2 (the
model) is better, 1.5 a tie; a weighted judge gives values in between. Identical outputs are a tie
without asking the judge (AlpacaEval's rule), so the reference against itself scores exactly 0.5.
An answer the parser cannot read is asked again up to `max_retries` times, then recorded with
status "unparsable" and no preference: it is never counted as a tie.

The cache: one Parquet file per judge job, keyed by (judge identity, instruction, output_1,
output_2), rewritten atomically after every chunk, so a killed judge job resumes where it stopped
and a rerun with new runs asks only about new pairs. The judge identity hashes everything that can
change an answer (evaluator config, template text, backend, model, revision, answer length, seed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.fields import changes_numbers
from pipeline.io import write_parquet
from pipeline.judge.config import JudgeConfig

if TYPE_CHECKING:
    from pipeline.judge.backends import Completions

log = logging.getLogger(__name__)

SWITCH = "is_switched_outputs"  # alpaca-eval's column name for a pair shown in the swapped order
CACHE_COLUMNS = ("key", "preference", "shown_preference", SWITCH, "raw_completion", "status", "attempts")
# fields of JudgeConfig that cannot change an answer (labels, speed, what is done with answers)
NOT_IDENTITY = frozenset(f.name for f in fields(JudgeConfig) if not changes_numbers(f))


class Lazy:
    """A backend built on first need (loading a judge model, checking an endpoint)."""

    def __init__(self, build: Callable[[], Completions]):
        self.build = build

    def __call__(self) -> Completions:
        return self.build()


def judge_identity(params: dict) -> str:
    """A hash of the judge rule's params that can change an annotation."""
    kept = {k: v for k, v in params.items() if k not in NOT_IDENTITY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pair_key(identity: str, instruction: str, output_1: str, output_2: str) -> str:
    return hashlib.sha256(json.dumps([identity, instruction, output_1, output_2]).encode()).hexdigest()


def read_cache(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.is_file() else pd.DataFrame(columns=list(CACHE_COLUMNS))


def parse_answer(parser, completion, kwargs: dict) -> float | None:
    """The evaluator's parser on one answer: a preference in [1, 2], or None (unparsable)."""
    try:
        values = list(parser(completion, **kwargs))
    except Exception as err:  # noqa: BLE001 -- any parser failure means "unparsable", recorded as such
        log.debug("unparsable answer %r: %s", completion, err)
        return None
    value = values[0] if len(values) == 1 else None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and 1 <= value <= 2 else None


def _shown(pending: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The pairs in the order the judge sees them (alpaca-eval's per-instruction random switch)."""
    from alpaca_eval.processors import RandomSwitchTwoColumnsProcessor

    switch = RandomSwitchTwoColumnsProcessor(
        two_columns_to_switch=["output_1", "output_2"],
        random_seed_columns=["instruction"],
        seed=seed,
        _switch_column=SWITCH,
    )
    return switch.preprocess(pending)


def _ask(shown: pd.DataFrame, evaluator: dict, complete: Completions, max_retries: int) -> list[dict]:
    """Answers for shown pairs: per pair its shown-order preference (None: unparsable after every
    attempt), the raw answer and the number of attempts."""
    from alpaca_eval import completion_parsers
    from alpaca_eval.utils import make_prompts

    parser = getattr(completion_parsers, evaluator["fn_completion_parser"])
    parser_kwargs = evaluator.get("completion_parser_kwargs", {})
    answer_key = evaluator.get("completion_key", "completions")
    template = Path(evaluator["prompt_template"]).read_text()
    prompts, _ = make_prompts(shown[["instruction", "output_1", "output_2"]], template)
    results = [{"shown_preference": None, "raw_completion": None, "attempts": 0} for _ in prompts]
    todo = list(range(len(prompts)))
    for attempt in range(1 + max_retries):
        if not todo:
            break
        answers = complete([prompts[i] for i in todo])
        answers = answers.get(answer_key, answers["completions"])
        for i, answer in zip(todo, answers):
            results[i].update(
                shown_preference=parse_answer(parser, answer, parser_kwargs),
                raw_completion=answer if isinstance(answer, str) else json.dumps(answer, default=str),
                attempts=attempt + 1,
            )
        todo = [i for i in todo if results[i]["shown_preference"] is None]
        if todo and attempt < max_retries:
            log.warning(
                "%d of %d answers unparsable; asking again (%d/%d)",
                len(todo),
                len(prompts),
                attempt + 1,
                max_retries,
            )
    return results


def annotate(
    pairs: pd.DataFrame,
    judge: JudgeConfig,
    evaluator: dict,
    identity: str,
    complete: Completions | Lazy | None,
    cache_path: str | Path,
    chunk: int = 32,
) -> pd.DataFrame:
    """`pairs` (instruction, output_1, output_2, any identity columns) with the judge's annotation
    columns (CACHE_COLUMNS). complete: the backend, or a function that builds it (called only when
    some pair is not cached: a rerun from the cache loads no judge); None: every non-identical pair
    must be cached."""
    cache_path = Path(cache_path)
    pairs = pairs.assign(
        key=[
            pair_key(identity, *t)
            for t in pairs[["instruction", "output_1", "output_2"]].itertuples(index=False)
        ]
    )
    cache = read_cache(cache_path)
    known = set(cache["key"])
    identical = pairs["output_1"] == pairs["output_2"]
    pending = pairs[~identical & ~pairs["key"].isin(known)].drop_duplicates("key")
    log.info(
        "%d pairs: %d identical (ties), %d cached, %d to judge",
        len(pairs),
        int(identical.sum()),
        int((~identical & pairs["key"].isin(known)).sum()),
        len(pending),
    )
    if len(pending) and complete is None:
        raise ValueError(
            f"{len(pending)} pairs are not in the judge's cache {cache_path} and no judge was given"
        )
    if len(pending) and isinstance(complete, Lazy):
        complete = complete()
    t0 = time.perf_counter()
    for start in range(0, len(pending), chunk):
        shown = _shown(pending.iloc[start : start + chunk], judge.seed)
        answers = pd.DataFrame(_ask(shown, evaluator, complete, judge.max_retries), index=shown.index)
        done = shown[["key", SWITCH]].join(answers)
        done["status"] = done["shown_preference"].isna().map({True: "unparsable", False: "judged"})
        shown_pref = done["shown_preference"].astype(float)
        done["preference"] = shown_pref.where(~done[SWITCH], 3 - shown_pref)  # back to the unswitched order
        cache = (
            pd.concat([cache, done[list(CACHE_COLUMNS)]], ignore_index=True)
            if len(cache)
            else done[list(CACHE_COLUMNS)]
        )
        write_parquet(cache_path, cache.reset_index(drop=True))
        n, elapsed = start + len(shown), time.perf_counter() - t0
        log.info(
            "judged %d/%d pairs | %.2f pairs/s, ETA %.0fs",
            n,
            len(pending),
            n / elapsed,
            elapsed / n * (len(pending) - n),
        )
    out = pairs.merge(cache.drop_duplicates("key", keep="last"), on="key", how="left")
    ties = out["output_1"] == out["output_2"]
    out.loc[ties, ["preference", "shown_preference", "status", "attempts"]] = [1.5, 1.5, "identical", 0]
    return out
