"""Retrievers for the ``search`` env, behind one small interface.

- :class:`BM25Retriever`: Okapi BM25 (``bm25s``) over an in-memory corpus, built in-process.
  Ranking is deterministic: every document is scored, ties go to the lower corpus index, and
  documents that share no term with the query (score 0) are dropped.
- :class:`HttpRetriever`: a client for the Search-R1 retrieval server
  (``search_r1/search/retrieval_server.py``)::

      POST {url}/retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 0.8}, ...]]}

  with a timeout and ``retries`` extra attempts on timeouts, connection errors and 5xx replies.
  Any failure raises :class:`RetrieverError`; the env lets it propagate out of ``step`` so the
  rollout runner ends only that episode (truncated, error recorded).

Documents use Search-R1's corpus format: ``contents`` is the quoted title on the first line and
the text after it. :func:`format_passages` renders results exactly as Search-R1 does
(``Doc 1(Title: "…") text``); the env wraps them in ``<information>…</information>``.
"""

from __future__ import annotations

import json
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seedrl.errors import SeedRLError


class RetrieverError(SeedRLError):
    """The retriever failed (timeout, connection, malformed reply). Ends the episode, not the run."""


@dataclass(frozen=True)
class Passage:
    doc_id: str
    #: Search-R1 corpus format: '"Title"\\ntext'
    contents: str
    score: float = 0.0

    @property
    def title(self) -> str:
        return self.contents.split("\n", 1)[0]

    @property
    def text(self) -> str:
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) > 1 else ""


def make_contents(title: str, text: str) -> str:
    """A document in Search-R1's corpus format (quoted title line, then the text)."""
    return f'"{title}"\n{text}'


def format_passages(passages: Sequence[Passage]) -> str:
    """Search-R1's ``_passages2string``: one ``Doc i(Title: …) text`` line per passage."""
    return "".join(f"Doc {i + 1}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages))


class Retriever(ABC):
    """``batch_search(queries, topk)`` -> one ranked passage list per query."""

    name: str = ""

    @abstractmethod
    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Passage]]:
        ...

    def search(self, query: str, topk: int) -> list[Passage]:
        return self.batch_search([query], topk)[0]

    def close(self) -> None:
        pass


# -- BM25 -------------------------------------------------------------------------------------
_TOKEN_RE = re.compile(r"[a-z0-9]+")
#: a short English stopword list (function words only; entity names never collide with it)
STOPWORDS = frozenset("""a an and are as at be by for from has have he her his in is it its of on or she that
the their there they this to was were what when where which who whom whose why will with how does did do""".split())


def bm25_tokenize(text: str) -> list[str]:
    """Lowercase alphanumeric tokens without stopwords (no stemming: deterministic, no extra package)."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


class BM25Retriever(Retriever):
    """BM25 over ``(doc_id, contents)`` pairs; the index is built once, in-process."""

    name = "bm25"

    def __init__(self, docs: Sequence[tuple[str, str]], k1: float = 1.5, b: float = 0.75) -> None:
        try:
            import bm25s
        except ImportError as exc:
            raise SeedRLError("the search env's BM25 retriever needs bm25s: pip install bm25s "
                              "(or pip install 'seedrl[envs]')") from exc
        import numpy as np

        if not docs:
            raise SeedRLError("BM25Retriever: the corpus is empty")
        self._np = np
        self.doc_ids = [str(d) for d, _ in docs]
        self.contents = [c for _, c in docs]
        self._bm25 = bm25s.BM25(k1=k1, b=b)
        self._bm25.index([bm25_tokenize(c) or ["\x00"] for c in self.contents], show_progress=False)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Passage]]:
        np = self._np
        out = []
        for q in queries:
            tokens = bm25_tokenize(q)
            if not tokens:
                out.append([])
                continue
            scores = np.asarray(self._bm25.get_scores(tokens), dtype=np.float64)
            order = np.argsort(-scores, kind="stable")[:topk]  # stable: ties -> lower index first
            out.append([Passage(self.doc_ids[i], self.contents[i], float(scores[i])) for i in order
                        if scores[i] > 0])
        return out


def load_corpus_jsonl(path: str | Path) -> list[tuple[str, str]]:
    """A Search-R1 / FlashRAG corpus: JSONL with ``contents`` (or ``title`` + ``text``) and ``id``."""
    p = Path(path)
    if not p.exists():
        raise SeedRLError(f"search corpus {str(path)!r} not found (expected Search-R1 JSONL: "
                          '{"id": "0", "contents": "\\"Title\\"\\ntext"} per line)')
    docs = []
    with p.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SeedRLError(f"{path}:{n}: not JSON ({exc})") from None
            if "contents" in row:
                contents = str(row["contents"])
            elif "text" in row:
                contents = make_contents(str(row.get("title", "")), str(row["text"]))
            else:
                raise SeedRLError(f"{path}:{n}: a corpus line needs 'contents' (or 'title' and 'text')")
            docs.append((str(row.get("id", len(docs))), contents))
    return docs


# -- HTTP (Search-R1 retrieval server) ----------------------------------------------------------
class HttpRetriever(Retriever):
    """Client of the Search-R1 retrieval server. Thread-safe (one ``httpx.Client``, shared)."""

    name = "http"

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 1) -> None:
        import httpx

        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else url + "/retrieve"
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self._httpx = httpx
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout))
        self._lock = threading.Lock()

    def batch_search(self, queries: Sequence[str], topk: int) -> list[list[Passage]]:
        httpx = self._httpx
        payload = {"queries": list(queries), "topk": int(topk), "return_scores": True}
        last = ""
        for _attempt in range(self.retries + 1):
            try:
                resp = self._client.post(self.url, json=payload)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout:g}s"
                continue
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code >= 500:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code != 200:
                raise RetrieverError(f"retriever {self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
            return self._parse(resp, len(queries))
        raise RetrieverError(f"retriever {self.url} failed ({last}) after {self.retries + 1} attempt(s); is the "
                             f"Search-R1 retrieval server running (search_r1/search/retrieval_server.py)?")

    def _parse(self, resp: Any, n: int) -> list[list[Passage]]:
        try:
            result = resp.json()["result"]
            if not isinstance(result, list) or len(result) != n:
                raise ValueError(f"expected {n} result lists")
            out = []
            for items in result:
                passages = []
                for item in items:
                    doc = item["document"] if isinstance(item, dict) and "document" in item else item
                    passages.append(Passage(str(doc.get("id", "")), str(doc["contents"]),
                                            float(item.get("score", 0.0)) if "document" in item else 0.0))
                out.append(passages)
            return out
        except Exception as exc:
            raise RetrieverError(f"retriever {self.url} sent a malformed reply ({type(exc).__name__}: {exc}); "
                                 'expected {"result": [[{"document": {"contents": ...}, "score": ...}]]}') from None

    def close(self) -> None:
        with self._lock:
            self._client.close()
