"""Judge backends (pipeline/judge/backends.py): alpaca-eval's openai_completions against a local
OpenAI-compatible server (what a vLLM server speaks), the endpoint check before any job, and the
hf_local backend on the real stand-in model (SmolLM2-135M-Instruct)."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pandas as pd
import pytest
import torch

from pipeline.judge.annotate import annotate
from pipeline.judge.backends import check_endpoint, first_token_logprobs, hf_local_backend, openai_backend
from pipeline.judge.config import JudgeConfig, JudgeConfigError

SERVED = "judge-under-test"


class _OpenAI(BaseHTTPRequestHandler):
    """GET /v1/models and POST /v1/chat/completions: a ranking that prefers the output shown second."""

    requests: list = []

    def log_message(self, *args):  # keep the test output clean
        pass

    def _send(self, body: dict, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._send({"object": "list", "data": [{"id": SERVED, "object": "model"}]})
        else:
            self._send({"error": "not found"}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _OpenAI.requests.append(body)
        text = str([{"model": "model_1", "rank": 2}, {"model": "model_2", "rank": 1}])
        message = {"role": "assistant", "content": text}
        self._send(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )


@pytest.fixture()
def endpoint(monkeypatch):
    monkeypatch.setenv("OVERTRAIN_TEST_KEY", "sk-test")
    server = HTTPServer(("127.0.0.1", 0), _OpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _OpenAI.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def openai_judge(base_url: str, **kw) -> JudgeConfig:
    return JudgeConfig(
        name="t",
        annotator="alpaca_eval_llama3_70b_fn",
        backend="openai",
        model=SERVED,
        base_url=base_url,
        api_key_env="OVERTRAIN_TEST_KEY",
        **kw,
    )


def test_openai_backend_through_alpaca_eval(endpoint, tmp_path):
    cfg = openai_judge(endpoint)
    check_endpoint(cfg)
    pairs = pd.DataFrame(
        {
            "instruction": ["Write a function to reverse a string.", "Write a function to add two numbers."],
            "output_1": ["def r(s):\n    return s[::-1]", "def add(a, b):\n    return a + b"],
            "output_2": [
                "def r(s):\n    return ''.join(reversed(s))",
                "def add(a, b):\n    return sum([a, b])",
            ],
        }
    )
    out = annotate(
        pairs, cfg, cfg.evaluator, "id", openai_backend(cfg, cfg.evaluator), tmp_path / "c.parquet"
    )
    assert (out["shown_preference"] == 2).all() and (out["status"] == "judged").all()
    request = _OpenAI.requests[0]
    assert request["model"] == SERVED and request["max_tokens"] == 100 and request["temperature"] == 0
    roles = [m["role"] for m in request["messages"]]
    assert roles[0] == "system" and roles[-1] == "user"  # the ChatML template sent as chat messages
    assert any(i in request["messages"][-1]["content"] for i in pairs["instruction"])


def test_unreachable_or_wrong_endpoint_is_a_clear_error(endpoint):
    with pytest.raises(JudgeConfigError, match=r"judge endpoint .*/models is unreachable .*start the server"):
        check_endpoint(openai_judge(closed_port_url()), timeout=5)
    with pytest.raises(
        JudgeConfigError, match=f"'other-model' is not served at .*; it serves \\['{SERVED}'\\]"
    ):
        check_endpoint(JudgeConfig(**{**openai_judge(endpoint).__dict__, "model": "other-model"}))


@pytest.fixture(scope="module")
def standin_judge(standin):
    from pipeline.judge.backends import load_judge_model

    _, cache = standin
    cfg = JudgeConfig(
        name="standin",
        annotator="weighted_alpaca_eval_gpt4_turbo",
        backend="hf_local",
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        revision="main",
        cache_dir=str(cache),
        offline=True,
    )
    model, tok = load_judge_model(cfg, "cpu")
    return cfg, model, tok


def test_hf_local_logprob_judge_on_the_standin(standin_judge, tmp_path):
    """AlpacaEval 2's weighted judge answered by a real local model: every answer is parsable
    (the log-probabilities of "m" and "M" are read from its full distribution), batched and
    one-at-a-time agree (left padding), and the preference is P(M) / (P(m) + P(M)) + 1."""
    from pipeline.data.task_loading import load_task

    cfg, model, tok = standin_judge
    convs = load_task("mbpp", {"source": "embedded"}).splits["test"][:4]
    pairs = pd.DataFrame(
        {
            "instruction": [c.messages[0].content for c in convs],
            "output_1": [c.messages[1].content for c in convs],
            "output_2": ["I do not know."] * 4,
        }
    )
    out = annotate(
        pairs,
        cfg,
        cfg.evaluator,
        "id",
        hf_local_backend(cfg, cfg.evaluator, model, tok),
        tmp_path / "c.parquet",
    )
    assert (out["status"] == "judged").all() and out["preference"].between(1, 2).all()
    raw = json.loads(out["raw_completion"].iloc[0])["logprobs"]["content"][0]["top_logprobs"]
    lp = {t["token"]: t["logprob"] for t in raw}
    p_m, p_big = torch.tensor(lp["m"]).exp(), torch.tensor(lp["M"]).exp()
    assert out["shown_preference"].iloc[0] == pytest.approx(float(2 - p_m / (p_m + p_big)), abs=1e-6)
    chats = [[{"role": "user", "content": x}] for x in pairs["instruction"]]
    batched = first_token_logprobs(model, tok, chats, 5, batch_size=4)
    single = first_token_logprobs(model, tok, chats, 5, batch_size=1)
    for b, s in zip(batched, single):
        got = [t["logprob"] for t in b["logprobs"]["content"][0]["top_logprobs"]]
        want = [t["logprob"] for t in s["logprobs"]["content"][0]["top_logprobs"]]
        assert got == pytest.approx(want, abs=1e-4)


def test_onstart_checks_the_endpoint_only_when_judge_jobs_will_run():
    """The workflow's onstart check (before any job): an unreachable endpoint stops the run when
    judge jobs are planned, and costs nothing when none are."""
    from types import SimpleNamespace

    from snakemake.exceptions import WorkflowError

    from pipeline.workflow.cluster import JUDGE_RULE, check_judge_jobs

    def job(rule: str):
        return SimpleNamespace(rule=SimpleNamespace(name=rule))

    unreachable = openai_judge(closed_port_url())
    check_judge_jobs([job("finetune"), job("metrics")], unreachable)
    with pytest.raises(WorkflowError, match="is unreachable"):
        check_judge_jobs([job("finetune"), job(JUDGE_RULE)], unreachable)
