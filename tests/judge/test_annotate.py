"""Pairwise annotation (pipeline/judge/annotate.py) with alpaca-eval's templates and parsers, on
real instructions and answers (MBPP problems and reference solutions) and two judges at the
boundary a backend sits on (`complete(prompts) -> completions`): one that always prefers the answer
shown first (a position bias), one that never answers in the parser's format."""

import ast
import math

import pandas as pd
import pytest

from pipeline.judge.annotate import annotate, judge_identity
from pipeline.judge.config import JudgeConfig, judge_params
from pipeline.judge.winrate import summarize

RANKING = "alpaca_eval_llama3_70b_fn"  # the paper's judge prompt: ranking_parser over model_1 / model_2


@pytest.fixture(scope="module")
def mbpp_pairs():
    """12 real instructions; output_1 the reference solution, output_2 a different real answer
    (the next problem's solution), so no pair is identical."""
    from pipeline.data.task_loading import load_task

    convs = load_task("mbpp", {"source": "embedded"}).splits["test"][:12]
    inst = [c.messages[0].content for c in convs]
    sol = [c.messages[1].content for c in convs]
    return pd.DataFrame(
        {"instruction": inst, "output_1": sol, "output_2": sol[1:] + sol[:1], "generator_2": "m"}
    )


class FirstShown:
    """A judge that ranks whichever output it is shown first as best (counts its calls)."""

    def __init__(self):
        self.prompts = []

    def __call__(self, prompts):
        self.prompts += prompts
        answer = str([{"model": "model_1", "rank": 1}, {"model": "model_2", "rank": 2}])
        return {"completions": [answer] * len(prompts)}


def judge(**kw) -> JudgeConfig:
    return JudgeConfig(**{"name": "t", "annotator": RANKING, "backend": "hf_local", "model": "stub", **kw})


def test_position_bias_shows_in_the_annotations(mbpp_pairs, tmp_path):
    cfg = judge(seed=0)
    first = FirstShown()
    out = annotate(
        mbpp_pairs, cfg, cfg.evaluator, judge_identity(judge_params(cfg)), first, tmp_path / "c.parquet"
    )
    assert len(first.prompts) == len(mbpp_pairs)  # one prompt per pair, the template filled in
    assert all(r in p for p, r in zip(first.prompts, mbpp_pairs["instruction"]))
    switched = out["is_switched_outputs"].astype(bool)
    assert 0 < switched.sum() < len(out)  # order randomised per instruction
    assert (out["shown_preference"] == 1).all()  # the judge always picks the first shown
    # mapped back to the unswitched order: the model "wins" exactly where it was shown first
    assert out["preference"].tolist() == [2.0 if s else 1.0 for s in switched]
    assert summarize(out, is_reference=False)["win_rate"] == pytest.approx(switched.mean())
    # the order is alpaca-eval's: seeded by instruction and judge seed, so another seed reorders
    other = annotate(
        mbpp_pairs, judge(seed=1), cfg.evaluator, "id-seed1", FirstShown(), tmp_path / "c1.parquet"
    )
    assert (other["is_switched_outputs"] != out["is_switched_outputs"]).any()


def test_identical_outputs_are_ties_without_the_judge(mbpp_pairs, tmp_path):
    """The reference against itself scores exactly 0.5, and the judge is never asked."""
    cfg = judge()
    same = mbpp_pairs.assign(output_2=mbpp_pairs["output_1"])
    first = FirstShown()
    out = annotate(same, cfg, cfg.evaluator, "id", first, tmp_path / "c.parquet")
    assert first.prompts == [] and (out["status"] == "identical").all()
    assert summarize(out, is_reference=True) | {"mean_length": None} == {
        "win_rate": 0.5,
        "win_rate_se": 0.0,
        "lc_win_rate": 0.5,
        "mean_length": None,
        "n_judged": 12.0,
        "n_unparsable": 0.0,
    }


def test_unparsable_answers_are_retried_then_recorded_never_ties(mbpp_pairs, tmp_path):
    calls = []

    def rambling(prompts):
        calls.append(len(prompts))
        return {"completions": ["Both answers are good."] * len(prompts)}

    cfg = judge(max_retries=2)
    half = mbpp_pairs.assign(
        output_2=[
            b if i % 2 else a for i, (a, b) in enumerate(zip(mbpp_pairs["output_1"], mbpp_pairs["output_2"]))
        ]
    )
    out = annotate(half, cfg, cfg.evaluator, "id", rambling, tmp_path / "c.parquet")
    assert calls == [6, 6, 6]  # the 6 non-identical pairs, asked 1 + max_retries times
    bad = out[out["status"] == "unparsable"]
    assert len(bad) == 6 and bad["preference"].isna().all() and (bad["attempts"] == 3).all()
    assert (bad["raw_completion"] == "Both answers are good.").all()  # the answer is kept
    s = summarize(out, is_reference=False)
    assert s["n_unparsable"] == 6 and s["n_judged"] == 6 and s["win_rate"] == 0.5  # the 6 identical ties only


def test_cache_is_keyed_by_judge_and_pair(mbpp_pairs, tmp_path):
    cfg, cache = judge(), tmp_path / "c.parquet"
    identity = judge_identity(judge_params(cfg))
    first = annotate(mbpp_pairs, cfg, cfg.evaluator, identity, FirstShown(), cache)
    again = annotate(mbpp_pairs, cfg, cfg.evaluator, identity, None, cache)  # no judge: all from the cache
    pd.testing.assert_frame_equal(first, again)
    more = pd.concat([mbpp_pairs, mbpp_pairs.assign(output_2="def f():\n    pass")], ignore_index=True)
    counting = FirstShown()
    annotate(more, cfg, cfg.evaluator, identity, counting, cache)
    assert len(counting.prompts) == len(mbpp_pairs)  # only the new pairs are asked
    changed = judge_identity(judge_params(judge(seed=3)))
    assert changed != identity  # a changed judge is another judge: nothing of the old one is reused
    assert (
        judge_identity(judge_params(judge(max_retries=5, name="x"))) == identity
    )  # labels and retries are not
    with pytest.raises(ValueError, match="not in the judge's cache"):
        annotate(mbpp_pairs, cfg, cfg.evaluator, changed, None, cache)


def test_unknown_evaluator_and_batched_prompts_are_config_errors():
    from pipeline.judge.config import JudgeConfigError

    with pytest.raises(JudgeConfigError, match="known evaluators: .*alpaca_eval_llama3_70b_fn"):
        _ = judge(annotator="no_such_judge").evaluator
    with pytest.raises(JudgeConfigError, match="puts 5 pairs in one prompt"):
        _ = judge(annotator="alpaca_farm_greedy_gpt4").evaluator


def test_ranking_answer_format_is_the_packages():
    """The stub's answer is what alpaca-eval's ranking_parser reads as 'model_1 is best'."""
    from alpaca_eval.completion_parsers import ranking_parser

    answer = FirstShown()(["p"])["completions"][0]
    assert ranking_parser(answer) == [1] and ast.literal_eval(answer)[0]["rank"] == 1
    assert math.isnan(ranking_parser("[{'model': 'model_1', 'rank': 3}]")[0])


def test_a_rerun_from_the_cache_builds_no_judge(mbpp_pairs, tmp_path):
    """A judge job whose pairs are all cached never loads its model (or checks its endpoint)."""
    from pipeline.judge.annotate import Lazy

    cfg, cache = judge(), tmp_path / "c.parquet"
    annotate(mbpp_pairs, cfg, cfg.evaluator, "id", FirstShown(), cache)

    def no_judge():
        raise AssertionError("the judge was built for cached pairs")

    again = annotate(mbpp_pairs, cfg, cfg.evaluator, "id", Lazy(no_judge), cache)
    assert (again["status"] == "judged").all()
    built = []
    annotate(
        mbpp_pairs.assign(output_2="x"),
        cfg,
        cfg.evaluator,
        "id",
        Lazy(lambda: built.append(1) or FirstShown()),
        cache,
    )
    assert built == [1]
