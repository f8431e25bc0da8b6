"""An analyzer that asks any OpenAI-compatible chat-completions endpoint for the hindsight skill.

This is SEED's ``analysis_backend=openai`` (seed_algorithm.md §1.1, §1.5): temperature 0, 1,024
max tokens, the Stage-1 analysis prompt, up to ``1 + parse_retries`` attempts where every retry
re-asks with a repair prompt, and a skill that must have ``min_words`` words. Works against OpenAI,
vLLM / SGLang / llama.cpp servers, or any proxy that speaks ``POST {base_url}/chat/completions``.

Per-trajectory failures never raise: a timeout, an HTTP error, a malformed response or an
unparsable answer becomes an :class:`AnalysisResult` with ``skill=None`` and ``error`` set
(``"timeout"``, ``"http 500: …"``, ``"connection: …"``, ``"malformed response: …"``,
``"parse: …"``, ``"exception: …"``). Only configuration mistakes raise a one-line
:class:`~seedrl.errors.SeedRLError`, at construction.

The API key is read from the environment variable ``api_key_env`` at each :meth:`analyze` call and
sent as ``Authorization: Bearer …`` when set; local servers need none. It is never logged, stored
in errors, or shown in ``repr``: a server error that quotes it (a 401 from OpenAI says "Incorrect
API key provided: sk-…") is passed through :func:`seedrl.errors.redact` before it is kept, so no
result field (error, raw answer, summary, skill) and no log line carries the key or any
Authorization value.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from seedrl.errors import SeedRLError, redact
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult

log = logging.getLogger(__name__)

_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}
_ERROR_DETAIL_CHARS = 200
_MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # a chat completion is kilobytes; refuse runaway bodies


class _RequestError(Exception):
    """One failed request, already phrased as the result's ``error`` string."""


class APIAnalyzer:
    """Hindsight-skill analyzer backed by an OpenAI-compatible ``/chat/completions`` endpoint."""

    name = "api"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 60,
        concurrency: int = 8,
        parse_retries: int = 1,
        min_words: int = 5,
        max_obs_chars: int | None = None,
        step_skills: bool = False,
        max_step_skills: int = 5,
        analysis_prompt: str = "seed",
    ) -> None:
        try:
            import httpx
        except ImportError:
            raise SeedRLError("the api analyzer needs the httpx package; install it: pip install httpx") from None
        self._httpx = httpx
        if not isinstance(base_url, str) or not base_url.strip():
            raise SeedRLError("api analyzer: base_url is empty; set it to the server's OpenAI-compatible "
                              "root, e.g. http://127.0.0.1:8000/v1")
        url = base_url.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SeedRLError(f"api analyzer: base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, "
                              f"got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise SeedRLError("api analyzer: model is empty; set it to the model name the server serves")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not math.isfinite(temperature) or temperature < 0:
            raise SeedRLError(f"api analyzer: temperature must be a number >= 0, got {temperature!r}")
        for field, value, lo in (("max_tokens", max_tokens, 1), ("concurrency", concurrency, 1),
                                 ("parse_retries", parse_retries, 0), ("min_words", min_words, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise SeedRLError(f"api analyzer: {field} must be an integer >= {lo}, got {value!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
                or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise SeedRLError(f"api analyzer: timeout_s must be a number of seconds > 0, got {timeout_s!r}")
        if max_obs_chars is not None and (isinstance(max_obs_chars, bool) or not isinstance(max_obs_chars, int)
                                          or max_obs_chars < 1):
            raise SeedRLError(f"api analyzer: max_obs_chars must be an integer >= 1 or None, got {max_obs_chars!r}")
        from seedrl.skills.prompts import ANALYSIS_PROMPTS

        text_prompts = [p for p in ANALYSIS_PROMPTS if p != "seed_visual"]  # it sends text, never images
        if analysis_prompt not in text_prompts:
            raise SeedRLError(f"api analyzer: analysis_prompt must be one of {', '.join(text_prompts)}, "
                              f"got {analysis_prompt!r}")
        if api_key_env is not None and not isinstance(api_key_env, str):
            raise SeedRLError(f"api analyzer: api_key_env must be an environment variable name, got {api_key_env!r}")

        self.base_url = url
        # Accept a base_url that already names the endpoint (a common copy-paste).
        self.endpoint = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.model = model.strip()
        self.api_key_env = api_key_env or None
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.timeout_s = float(timeout_s)
        self.concurrency = concurrency
        self.parse_retries = parse_retries
        self.min_words = min_words
        self.max_obs_chars = max_obs_chars
        self.analysis_prompt = analysis_prompt
        #: OPID critical-step skills: asked for in the prompt, parsed, kept (at most max_step_skills)
        self.step_skills, self.max_step_skills = bool(step_skills), max(0, int(max_step_skills))
        # A local server must never be reached through an HTTP(S)_PROXY from the environment.
        self._trust_env = (parts.hostname or "").lower() not in _LOOPBACK_HOSTS
        #: the secrets of the analyze() call in flight (the key), removed from every text kept
        self._secrets: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never shows the key (it is not stored anyway)
        return (f"APIAnalyzer(endpoint={self.endpoint!r}, model={self.model!r}, api_key_env={self.api_key_env!r}, "
                f"temperature={self.temperature}, max_tokens={self.max_tokens}, timeout_s={self.timeout_s}, "
                f"concurrency={self.concurrency}, parse_retries={self.parse_retries})")

    # -- public -------------------------------------------------------------------------------
    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        """One result per trajectory, in order; at most ``concurrency`` requests in flight."""
        trajectories = list(trajectories)
        if not trajectories:
            return []
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key and key.strip():
            headers["Authorization"] = f"Bearer {key.strip()}"
        # the key covers the Authorization value ("Bearer <key>"); redact() also masks header values
        self._secrets = (key.strip(),) if key and key.strip() else ()
        workers = max(1, min(self.concurrency, len(trajectories)))
        httpx = self._httpx
        limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
        t0 = time.perf_counter()
        with httpx.Client(headers=headers, timeout=httpx.Timeout(self.timeout_s), limits=limits,
                          trust_env=self._trust_env, follow_redirects=False) as client, \
                ThreadPoolExecutor(max_workers=workers, thread_name_prefix="seedrl-api-analyzer") as pool:
            results = list(pool.map(lambda t: self._analyze_one(client, t), trajectories))
        for r in results:  # nothing a server echoed may carry the key into skills.jsonl or a log
            r.error = self._redact(r.error)
            # the model's own text: only the key itself (a skill may say "bearer" or "sk-" in earnest)
            r.raw, r.summary, r.skill = (self._redact(x, patterns=False) for x in (r.raw, r.summary, r.skill))
            if r.step_skills:
                r.step_skills = {i: self._redact(v, patterns=False) for i, v in r.step_skills.items()}
        failed = [r for r in results if r.skill is None]
        if failed:
            kinds: dict[str, int] = {}
            for r in failed:
                kind = (r.error or "no skill").split(":", 1)[0]
                kinds[kind] = kinds.get(kind, 0) + 1
            log.warning("api analyzer: %d/%d trajectories got no skill (%s) in %.1fs", len(failed), len(results),
                        self._redact(", ".join(f"{k}: {v}" for k, v in sorted(kinds.items()))),
                        time.perf_counter() - t0)
        return results

    def _redact(self, text: Any, patterns: bool = True) -> Any:
        return redact(text, self._secrets, patterns=patterns) if isinstance(text, str) else text

    # -- one trajectory -----------------------------------------------------------------------
    def _analyze_one(self, client: Any, traj: Trajectory) -> AnalysisResult:
        traj_id = getattr(traj, "traj_id", -1)
        try:
            return self._analyze_checked(client, traj)
        except Exception as exc:  # a bug or odd input must cost one trajectory, never the batch
            text = self._redact(f"exception: {type(exc).__name__}: {exc}")  # before the cut
            return AnalysisResult(traj_id=traj_id, skill=None, error=text[:300], attempts=0)

    def _analyze_checked(self, client: Any, traj: Trajectory) -> AnalysisResult:
        from seedrl.skills.parsing import parse_skill
        from seedrl.skills.prompts import STEP_BASE, analysis_messages, repair_messages

        base = analysis_messages(traj, max_obs_chars=self.max_obs_chars, step_skills=self.step_skills,
                                 max_step_skills=self.max_step_skills, variant=self.analysis_prompt)
        keep_steps = self.max_step_skills if self.step_skills else 0
        result = AnalysisResult(traj_id=traj.traj_id, skill=None, attempts=0)
        messages = base
        parse_error: str | None = None
        for attempt in range(1 + self.parse_retries):
            if attempt > 0:
                # Each repair re-asks from the original prompt with the latest bad answer, so the
                # prompt does not grow with the number of retries.
                messages = repair_messages(base, result.raw, error=parse_error, step_skills=self.step_skills)
            result.attempts += 1
            try:
                text, prompt_tokens, completion_tokens = self._complete(client, messages)
            except _RequestError as exc:
                result.error = str(exc)
                return result  # transport errors are not retried with a repair prompt
            result.raw = text
            result.prompt_tokens += prompt_tokens
            result.completion_tokens += completion_tokens
            parsed = parse_skill(text, min_words=self.min_words, max_step_skills=keep_steps,
                                 step_base=STEP_BASE[self.analysis_prompt])
            if parsed.skill is not None:
                result.skill, result.summary, result.error = parsed.skill, parsed.summary, None
                result.step_skills = {i: s for i, s in parsed.step_skills.items() if i < len(traj.steps)}
                return result
            result.summary = parsed.summary
            parse_error = parsed.error or "parse: no skill in the answer"
            result.error = parse_error if parse_error.startswith("parse") else f"parse: {parse_error}"
        return result

    def _complete(self, client: Any, messages: list[dict[str, str]]) -> tuple[str, int, int]:
        """One chat-completions request: (content, prompt tokens, completion tokens).

        The timeout is a deadline for the whole request: httpx's own timeout bounds each connect /
        read, and the body is streamed so a server that trickles bytes is cut off at the deadline.
        """
        httpx = self._httpx
        payload = {"model": self.model, "messages": messages, "temperature": self.temperature,
                   "max_tokens": self.max_tokens}
        deadline = time.monotonic() + self.timeout_s
        try:
            with client.stream("POST", self.endpoint, json=payload) as resp:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if time.monotonic() > deadline:
                        raise _RequestError("timeout")
                    if size > _MAX_RESPONSE_BYTES:
                        raise _RequestError(f"malformed response: body over {_MAX_RESPONSE_BYTES} bytes")
                body = b"".join(chunks)
                status = resp.status_code
        except httpx.TimeoutException:
            raise _RequestError("timeout") from None
        except httpx.HTTPError as exc:
            raise _RequestError(self._redact(f"connection: {type(exc).__name__}: {exc}")[:300]) from None
        if not 200 <= status < 300:
            raise _RequestError(f"http {status}" + _error_detail(body, self._secrets))
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            snippet = self._redact(body[:4 * _ERROR_DETAIL_CHARS].decode("utf-8", "replace"))[:_ERROR_DETAIL_CHARS]
            raise _RequestError(f"malformed response: not JSON: {snippet!r}") from None
        if not isinstance(data, dict):
            raise _RequestError(f"malformed response: expected a JSON object, got {type(data).__name__}")
        if "error" in data and "choices" not in data:  # some proxies answer errors with status 200
            raise _RequestError("malformed response: server error" + _error_detail(body, self._secrets))
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _RequestError("malformed response: no choices")
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts: join the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict)) or None
        if not isinstance(content, str):
            raise _RequestError("malformed response: no message content")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return content, _as_count(usage.get("prompt_tokens")), _as_count(usage.get("completion_tokens"))


def _as_count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _error_detail(body: bytes, secrets: tuple[str, ...] = ()) -> str:
    """": <message>" from an OpenAI-style error body (or the body's start), '' when empty; ``secrets``
    (and any key-like text) are redacted before the message is cut, so no fragment of a key survives."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            text = err["message"]
        elif isinstance(err, str):
            text = err
    except ValueError:
        pass
    text = " ".join((redact(text, secrets) or "").split())[:_ERROR_DETAIL_CHARS]
    return f": {text}" if text else ""
