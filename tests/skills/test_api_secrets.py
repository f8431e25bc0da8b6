"""No API key reaches disk or a log: a server's error that quotes the key (a 401 from OpenAI says
"Incorrect API key provided: sk-...") is redacted before the analyzer keeps it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seedrl.errors import redact
from seedrl.skills.analyzers.api import APIAnalyzer
from tests.skills.analyzers.test_analyzers import FakeOpenAI, _traj

KEY = "sk-proj-Zq81xYtWv0aBcDeFgHiJkLmNoPqRsTuV42"
ENV = "SEEDRL_TEST_SECRET_KEY"
ROOT = Path(__file__).resolve().parents[2]


def _fragments(key: str = KEY) -> list[str]:
    """The key and every 8-character piece of it: none may appear anywhere."""
    return [key] + [key[i:i + 8] for i in range(len(key) - 7)]


def assert_no_key(text: str, where: str) -> None:
    for frag in _fragments():
        assert frag not in text, (where, frag, text[:2000])


# -- redact(): pure --------------------------------------------------------------------------------
def test_redact_the_key_and_its_pieces():
    assert redact(f"Incorrect API key provided: {KEY}.", [KEY]) == "Incorrect API key provided: sk-***."
    half = KEY[:8] + "*" * 20 + KEY[-4:]  # how OpenAI echoes a key: its start and end
    assert_no_key(redact(f"key {half} is wrong", [KEY]), "half-masked")
    assert_no_key(redact(f"cut off: {KEY[:12]}", [KEY]), "truncated")
    assert redact(None, [KEY]) is None and redact("", [KEY]) == ""
    assert redact("nothing secret here", [KEY, None, ""]) == "nothing secret here"
    assert redact("x hf_abcdefghijkl y", ["hf_abcdefghijkl"]) == "x *** y"


def test_redact_header_values_and_foreign_keys():
    assert redact("Authorization: Bearer abc.def-ghi") == "Authorization: ***"
    assert redact("{'authorization': 'Basic dXNlcjpwYXNz'}") == "{'authorization': '***'}"
    assert redact("sent bearer tok_123456 to the proxy") == "sent bearer *** to the proxy"
    assert redact("key sk-someoneElses1234 leaked") == "key sk-*** leaked"
    # the model's own text: only the key itself, never a word that merely looks like a header
    assert redact("the bearer of the box", [KEY], patterns=False) == "the bearer of the box"
    assert redact(f"the bearer {KEY}", [KEY], patterns=False) == "the bearer sk-***"


# -- the analyzer against a server that quotes the key ---------------------------------------------
def _quoting(status: int):
    def handler(req):
        half = KEY[:8] + "*" * 24 + KEY[-4:]
        return status, {"error": {"message": f"Incorrect API key provided: {KEY} ({half}); header was "
                                             f"'Authorization: Bearer {KEY}'", "type": "invalid_request_error",
                                  "code": "invalid_api_key"}}, 0.0
    return handler


@pytest.mark.parametrize("status", [401, 200])  # 200: a proxy that answers errors with status 200
def test_api_error_quoting_the_key_is_redacted(status, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(ENV, KEY)
    caplog.set_level(logging.DEBUG)
    srv = FakeOpenAI()
    try:
        srv.handler = _quoting(status)
        analyzer = APIAnalyzer(srv.base_url, "m", api_key_env=ENV, timeout_s=5, parse_retries=1)
        results = analyzer.analyze([_traj(0), _traj(1)])
    finally:
        srv.close()
    assert srv.headers[0]["authorization"] == f"Bearer {KEY}"  # the key is sent...
    assert all(r.skill is None and r.error for r in results)
    assert "Incorrect API key provided: sk-***" in results[0].error  # ...and the reason still reads
    out = tmp_path / "skills.jsonl"  # what the trainer writes per trajectory
    out.write_text("\n".join(json.dumps(dataclasses.asdict(r)) for r in results))
    assert_no_key(out.read_text(), "skills.jsonl")
    assert_no_key(caplog.text, "log")
    assert_no_key(repr(results) + repr(analyzer), "repr")


def test_seedrl_analyze_with_a_rejected_key_writes_no_key(tmp_path):
    """The real command (policy plays one tiny episode; the api analyzer gets a 401 quoting the key):
    every file it wrote and everything it printed, --verbose logs included, is free of the key."""
    srv = FakeOpenAI()
    try:
        srv.handler = _quoting(401)
        out = tmp_path / "data" / "skills.jsonl"
        env = os.environ | {ENV: KEY, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-m", "seedrl.cli", "analyze", "--env", "sokoban", "--model", "tiny-micro",
                            "--analyzer", "api", "--tasks", "1", "--rollouts", "1", "--out", str(out), "-v",
                            "--set", "env.max_steps=1", "--set", "rollout.max_new_tokens=4",
                            "--set", f"skills.api.base_url={srv.base_url}", "--set", f"skills.api.api_key_env={ENV}",
                            "--set", "skills.api.timeout_s=5"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        srv.close()
    assert srv.requests, r.stderr  # the server was asked
    assert r.returncode == 2, r.stderr  # (--verbose: the traceback of the user error is shown too)
    assert "0 of 1 trajectories kept" in r.stderr.splitlines()[-1]
    assert_no_key(r.stdout + r.stderr, "output")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written  # the (empty) data file and its .meta.json
    for p in written:
        assert_no_key(p.read_text(errors="replace"), str(p))
