"""Analyzers: the API analyzer against a real local OpenAI-compatible server. (The oracle analyzer and
each env's oracle are tested under tests/envs/.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from seedrl.errors import SeedRLError
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.analyzers.api import APIAnalyzer
from seedrl.skills.prompts import skill_target

GOOD = skill_target("The agent pushed the box right.", "When the target is right of the box, push it right.")


# -- helpers ------------------------------------------------------------------------------------
def _traj(traj_id: int, task: str = "push the box", won: bool = False, n_steps: int = 2) -> Trajectory:
    steps = [StepSample(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], traj_id=traj_id, group_id=0, step=i,
                        reward=0.0, action_valid=True, response_text="<action>up</action>",
                        observation=f"board {i}", action="up") for i in range(n_steps)]
    return Trajectory(traj_id=traj_id, group_id=0, task_id=f"t{traj_id}", task_description=task, steps=steps, won=won)


def _reply(content: str | None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "x", "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                         "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return body


class FakeOpenAI:
    """A real HTTP server on 127.0.0.1 (OS-assigned port) speaking POST /v1/chat/completions.

    ``handler(request_json) -> (status, body, delay_s)``; body is a dict (sent as JSON) or raw bytes.
    Delays wait on an event that teardown sets, so no request outlives the test.
    """

    def __init__(self) -> None:
        self.handler: Callable[[dict[str, Any]], tuple[int, Any, float]] = lambda req: (200, _reply(GOOD), 0.0)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(length) or b"{}")
                with outer.lock:
                    outer.requests.append(req)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                # made, uncounted, then sent: a client may send its next request the moment it reads this reply
                try:
                    if self.path != "/v1/chat/completions":
                        status, body, delay = 404, {"error": {"message": f"no route {self.path}"}}, 0.0
                    else:
                        status, body, delay = outer.handler(req)
                    if delay:
                        outer.release.wait(delay)
                    data = body if isinstance(body, bytes) else json.dumps(body).encode()
                finally:
                    with outer.lock:
                        outer.in_flight -= 1
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture()
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI()
    try:
        yield srv
    finally:
        srv.close()


def _analyzer(srv: FakeOpenAI, **kw: Any) -> APIAnalyzer:
    kw.setdefault("api_key_env", "SEEDRL_TEST_ANALYZER_KEY")
    kw.setdefault("timeout_s", 5)
    return APIAnalyzer(srv.base_url, "test-model", **kw)


# -- API analyzer -------------------------------------------------------------------------------
def test_api_good_json(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEEDRL_TEST_ANALYZER_KEY", raising=False)
    server.handler = lambda req: (200, _reply(GOOD, {"prompt_tokens": 123, "completion_tokens": 45}), 0.0)
    [r] = _analyzer(server).analyze([_traj(7)])
    assert r.traj_id == 7 and r.error is None and r.attempts == 1
    assert r.skill == "When the target is right of the box, push it right."
    assert r.summary == "The agent pushed the box right."
    assert r.raw == GOOD
    assert (r.prompt_tokens, r.completion_tokens) == (123, 45)
    req = server.requests[0]
    assert req["model"] == "test-model" and req["temperature"] == 0.0 and req["max_tokens"] == 1024
    assert req["messages"][0]["role"] == "user" and "push the box" in req["messages"][0]["content"]
    assert "authorization" not in server.headers[0]  # no key set: no header (local servers)


def test_api_step_skills_only_when_enabled(server: FakeOpenAI) -> None:
    answer = json.dumps({"episode_summary": "s", "episode_skill": "When the target is right of the box, push it right.",
                         "step_skills": [{"step": 1, "skill": "Push the box right now, not up."},
                                         {"step": 9, "skill": "A step the trajectory does not have."}]})
    server.handler = lambda req: (200, _reply(answer), 0.0)
    [off] = _analyzer(server).analyze([_traj(1)])
    assert off.skill and off.step_skills == {} and "step_skills" not in server.requests[0]["messages"][0]["content"]
    [on] = _analyzer(server, step_skills=True).analyze([_traj(1)])
    # steps numbered from 0, as the (seed) prompt numbers them; step 9 > 2 steps
    assert on.skill == off.skill and on.step_skills == {1: "Push the box right now, not up."}
    assert '"step_skills"' in server.requests[1]["messages"][0]["content"]


def test_api_fenced_json_and_missing_usage(server: FakeOpenAI) -> None:
    server.handler = lambda req: (200, _reply("Here you go:\n```json\n" + GOOD + "\n```\n"), 0.0)
    [r] = _analyzer(server).analyze([_traj(0)])
    assert r.skill == "When the target is right of the box, push it right." and r.error is None
    assert (r.prompt_tokens, r.completion_tokens) == (0, 0)


def test_api_repair_after_garbage(server: FakeOpenAI) -> None:
    def handler(req: dict[str, Any]) -> tuple[int, Any, float]:
        if len(req["messages"]) == 1:
            return 200, _reply("I think the agent should push boxes.", {"prompt_tokens": 10, "completion_tokens": 3}), 0
        return 200, _reply(GOOD, {"prompt_tokens": 20, "completion_tokens": 5}), 0

    server.handler = handler
    [r] = _analyzer(server).analyze([_traj(0)])
    assert r.skill is not None and r.error is None and r.attempts == 2
    assert (r.prompt_tokens, r.completion_tokens) == (30, 8)
    repair = server.requests[1]["messages"]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"]
    assert repair[0] == server.requests[0]["messages"][0]
    assert repair[1]["content"] == "I think the agent should push boxes."
    assert "JSON" in repair[2]["content"]


def test_api_always_garbage(server: FakeOpenAI) -> None:
    server.handler = lambda req: (200, _reply("no json here"), 0.0)
    [r] = _analyzer(server, parse_retries=1).analyze([_traj(0)])
    assert r.skill is None and r.error.startswith("parse") and r.attempts == 2
    assert r.raw == "no json here" and len(server.requests) == 2
    # a too-short skill is a parse failure too; parse_retries=0 means one attempt
    server.handler = lambda req: (200, _reply(skill_target("s", "push right")), 0.0)
    [r] = _analyzer(server, parse_retries=0).analyze([_traj(0)])
    assert r.skill is None and r.error.startswith("parse") and "short" in r.error and r.attempts == 1


def test_api_http_500_is_not_retried(server: FakeOpenAI) -> None:
    server.handler = lambda req: (500, {"error": {"message": "model overloaded"}}, 0.0)
    [r] = _analyzer(server).analyze([_traj(0)])
    assert r.skill is None and r.error.startswith("http 500") and "overloaded" in r.error
    assert r.attempts == 1 and len(server.requests) == 1


def test_api_malformed_responses(server: FakeOpenAI) -> None:
    bodies = iter([b"<html>bad gateway</html>", {"choices": []}, _reply(None), {"error": "quota"}])
    server.handler = lambda req: (200, next(bodies), 0.0)
    results = _analyzer(server, concurrency=1).analyze([_traj(i) for i in range(4)])
    assert [r.traj_id for r in results] == [0, 1, 2, 3]
    for r in results:
        assert r.skill is None and r.error.startswith("malformed response"), r.error


@pytest.mark.slow
def test_api_timeout(server: FakeOpenAI) -> None:
    server.handler = lambda req: (200, _reply(GOOD), 30.0)
    t0 = time.perf_counter()
    [r] = _analyzer(server, timeout_s=0.5).analyze([_traj(0)])
    elapsed = time.perf_counter() - t0
    assert r.skill is None and r.error == "timeout" and r.attempts == 1
    assert elapsed < 3.0


def test_api_connection_refused() -> None:
    srv = FakeOpenAI()
    url = srv.base_url
    srv.close()
    [r] = APIAnalyzer(url, "m", timeout_s=2).analyze([_traj(0)])
    assert r.skill is None and r.error.startswith("connection")


def test_api_auth_header(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEEDRL_TEST_ANALYZER_KEY", "sk-test-secret-123")
    analyzer = _analyzer(server)
    [r] = analyzer.analyze([_traj(0)])
    assert r.skill is not None
    assert server.headers[0]["authorization"] == "Bearer sk-test-secret-123"
    assert "sk-test-secret" not in repr(analyzer) and "sk-test-secret" not in repr(r)


@pytest.mark.slow
def test_api_order_with_concurrency(server: FakeOpenAI) -> None:
    def handler(req: dict[str, Any]) -> tuple[int, Any, float]:
        content = req["messages"][0]["content"]
        i = int(content.split("marker-", 1)[1].split()[0])
        skill = f"When you see marker {i}, push the box right."
        return 200, _reply(skill_target(f"episode {i}", skill), {"prompt_tokens": i, "completion_tokens": 1}), \
            0.05 * (8 - i)  # the first requests answer last

    server.handler = handler
    trajs = [_traj(100 + i, task=f"marker-{i} push the box") for i in range(8)]
    results = _analyzer(server, concurrency=4).analyze(trajs)
    assert [r.traj_id for r in results] == [100 + i for i in range(8)]
    for i, r in enumerate(results):
        assert r.skill == f"When you see marker {i}, push the box right." and r.prompt_tokens == i
    assert 1 < server.max_in_flight <= 4
    assert _analyzer(server).analyze([]) == []


def test_api_config_errors() -> None:
    for kwargs in ({"base_url": "", "model": "m"}, {"base_url": "   ", "model": "m"},
                   {"base_url": "127.0.0.1:8000", "model": "m"}, {"base_url": "http://x/v1", "model": ""},
                   {"base_url": "http://x/v1", "model": "m", "concurrency": 0},
                   {"base_url": "http://x/v1", "model": "m", "timeout_s": 0},
                   {"base_url": "http://x/v1", "model": "m", "parse_retries": -1}):
        with pytest.raises(SeedRLError) as info:
            APIAnalyzer(**kwargs)
        assert "\n" not in str(info.value)
    a = APIAnalyzer("http://127.0.0.1:9/v1/chat/completions/", "m")
    assert a.endpoint == "http://127.0.0.1:9/v1/chat/completions" and a.name == "api"
