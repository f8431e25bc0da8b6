"""Search-augmented question answering in the Search-R1 / verl-agent format.

**Actions.** A model turn holds ``<search> query </search>`` or ``<answer> text </answer>``
(verl-agent's search prompt; the step prompt's closing instruction is :data:`VERL_AGENT_INSTRUCTION` under the
default ``prompt_style: verl_agent``, :data:`INSTRUCTION` under ``seedrl``).
:meth:`SearchEnv.parse_action` returns the *first* complete block in canonical tag form,
``"<search>query</search>"`` / ``"<answer>text</answer>"``, whitespace collapsed: Search-R1
executes the first action of a turn, and generation stops at its closing tag
(:attr:`SearchEnv.stop`). No block, an empty block, or a block over 300 characters is an invalid
turn (``None``). ``step`` also accepts ``search[query]`` / ``answer[text]`` (for ``seedrl play``).

**Observations.** After a search: the retrieved passages rendered as Search-R1 does,
``<information>Doc 1(Title: "…") text\\nDoc 2…</information>``. The first observation is the
question.

**Reward.** An answer ends the episode with ``WIN_REWARD * exact_match`` (Search-R1's
normalisation: lowercase, punctuation and articles removed, whitespace collapsed; any of the gold
answers); ``info`` carries ``em`` and token ``f1``; ``info["won"]`` is the exact match. Searches
earn 0. ``max_turns`` (env kwarg, default none: the trainer's ``env.max_steps`` is the limit) ends
the episode unanswered after that many actions.

**Tasks.** Two sources, chosen by env kwargs:

- default: the generated multi-hop QA world of :mod:`seedrl.envs.search.qa_world` (task ids
  ``hop{k}-s{n}``, task types ``hop1``/``hop2``/``hop3``; seen/unseen rule in that module), searched
  with in-process BM25 (``bm25s``) over its ~170 short documents, top-3 by default. The expert is
  the gold evidence path: search each hop's entity by its exact name, in order, then answer.
- ``data_path`` / ``test_data_path``: Search-R1 datasets (JSONL, or parquet when pyarrow or pandas
  is installed) with ``question`` and ``golden_answers`` (or ``reward_model.ground_truth.target``)
  and ``data_source``. ``train`` = rows of ``data_path``; ``valid_seen`` / ``valid_unseen`` = rows of
  ``test_data_path`` whose ``data_source`` is / is not among ``seen_sources`` (default: the sources of
  ``data_path``, else Search-R1's ``nq``, ``hotpotqa``). Task ids ``{source}-tr{row}`` /
  ``{source}-te{row}``; the task type is the source, the static skill SDAR's question type of the
  source and question (:func:`sdar_question_type`). These need a retriever: ``retriever_url`` (the
  Search-R1 retrieval server, e.g. over wiki-18) or ``corpus_path`` (a Search-R1 JSONL corpus for
  in-process BM25). There is no gold evidence, so the expert searches the question, then answers
  the first gold answer (a format demonstration, not evidence-grounded).

**Retriever faults.** A timeout or error of the retriever raises
:class:`~seedrl.envs.search.retrievers.RetrieverError` out of ``step``; the rollout runner ends that
episode (truncated, error recorded) and the run goes on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from seedrl.agent.prompts import TURN_LINE
from seedrl.envs.base import WIN_REWARD, Env, EnvOptions, Float, Int, PathStr, Str, StrList
from seedrl.envs.search.qa_world import RELATIONS, Question, get_world, parse_task_id
from seedrl.envs.search.retrievers import (
    BM25Retriever,
    HttpRetriever,
    Passage,
    Retriever,
    bm25_tokenize,
    format_passages,
    load_corpus_jsonl,
)
from seedrl.envs.search.state import SearchDatasetState, SearchHop, SearchWorldState
from seedrl.errors import SeedRLError, unknown_name

INSTRUCTION = (
    TURN_LINE + "\n"
    "You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags.\n"
    "After completing your reasoning, choose only one of the following actions (do not perform both):\n"
    "(1) If you find you lack some knowledge, you can call a search engine to get more external information "
    "using format: <search> your query </search>.\n"
    "(2) If you have enough knowledge to answer the question confidently, provide your final answer within "
    "<answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>."
)
#: the closing instruction of the ``verl_agent`` layout (verl-agent's SEARCH_TEMPLATE)
VERL_AGENT_INSTRUCTION = (
    "Now it's your turn to respond for the current step.\n"
    "You should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags.\n"
    "After completing your reasoning, choose only one of the following actions (do not perform both):\n"
    "(1) If you find you lack some knowledge, you can call a search engine to get more external information "
    "using format: <search> your query </search>.\n"
    "(2) If you have enough knowledge to answer the question confidently, provide your final answer within "
    "<answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>."
)
#: the env option ``prompt_style`` -> the step-prompt layout (``seedrl.agent.prompts.PROMPT_STYLES``)
LAYOUTS = {"verl_agent": "verl_agent_search", "seedrl": "seedrl"}
INVALID_TEXT = ("My previous action is invalid. If I want to search, I should put the query between <search> and "
                "</search>. If I want to give the final answer, I should put the answer between <answer> and "
                "</answer>. Let me try again.")
MAX_ACTION_CHARS = 300
SEARCH_R1_SEEN_SOURCES = ("nq", "hotpotqa")

_TAG_RE = re.compile(r"<(search|answer)>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
_BRACKET_RE = re.compile(r"^(search|answer)\[(.*)\]$", re.DOTALL | re.IGNORECASE)
_DATA_TASK_RE = re.compile(r"^([a-z0-9_]+)-(tr|te)(\d{6})$")


# -- answers ------------------------------------------------------------------------------------
#: the start of a Search task's description (``task_description``); the question follows it
TASK_PREFIX = "answer this question: "

#: SDAR's question type of a Search-R1 data source, decided before the question is read
#: (``SkillProvider.get_privileged_info_from_data_source``, ZJU-REAL/SDAR ``verl/trainer/ppo/rlsd_utils.py``);
#: the values are the skills of SDAR's ``skills/search/skill_mapping.json`` and the files of ``skills/`` here
SDAR_SOURCE_TYPES = {"popqa": "entity_attribute_lookup", "nq": "direct_retrieval", "triviaqa": "direct_retrieval",
                     "hotpotqa": "multi_hop_reasoning"}
#: the sources SDAR calls multi-hop when the question is not a comparison
SDAR_MULTI_HOP_SOURCES = ("2wikimultihopqa", "musique", "bamboogle")


def sdar_question_type(source: str, question: str) -> str | None:
    """SDAR's skill type of a Search-R1 question (None: the general skill alone): ``popqa`` ->
    ``entity_attribute_lookup``; ``nq``, ``triviaqa`` -> ``direct_retrieval``; ``hotpotqa`` ->
    ``multi_hop_reasoning``; any other source: ``compare`` when the lower-cased question contains
    "which" and "or" but not "for" (substrings, as SDAR tests them: "author" has an "or", "formed" a
    "for"), else ``multi_hop_reasoning`` for ``2wikimultihopqa``, ``musique``, ``bamboogle``, else None.
    SDAR tests the whole decoded step prompt, whose verl-agent template always holds "for"
    ("information", "For example"), so there the compare branch never fires; here it reads the question
    (``docs/deviations.md``)."""
    if source in SDAR_SOURCE_TYPES:
        return SDAR_SOURCE_TYPES[source]
    q = question.lower()
    if "which" in q and "or" in q and "for" not in q:
        return "compare"
    if source in SDAR_MULTI_HOP_SOURCES:
        return "multi_hop_reasoning"
    return None


def normalize_answer(s: str) -> str:
    """Search-R1 / SQuAD normalisation: lowercase, drop punctuation and articles, collapse spaces."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, golds: Sequence[str]) -> bool:
    p = normalize_answer(prediction)
    return any(p == normalize_answer(g) for g in golds)


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Best token F1 over the gold answers (SQuAD's, on normalised tokens)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for g in golds:
        gold = normalize_answer(g).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(pred), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


# -- actions ------------------------------------------------------------------------------------
def parse_search_action(text: str) -> str | None:
    """The first complete ``<search>``/``<answer>`` block of a model turn, canonical; None if invalid."""
    if not isinstance(text, str):
        return None
    m = _TAG_RE.search(text)
    if m is None:
        return None
    kind, body = m.group(1).lower(), " ".join(m.group(2).split())
    if not body or len(body) > MAX_ACTION_CHARS:
        return None
    return f"<{kind}>{body}</{kind}>"


def split_action(action: str) -> tuple[str, str] | None:
    """``("search"|"answer", body)`` of an action in tag or bracket form; None if neither."""
    if not isinstance(action, str):
        return None
    text = action.strip()
    m = _BRACKET_RE.match(text)
    if m is None:
        parsed = parse_search_action(text)
        if parsed is None:
            return None
        m = _TAG_RE.match(parsed)
        assert m is not None
    kind, body = m.group(1).lower(), " ".join(m.group(2).split())
    if not body or len(body) > MAX_ACTION_CHARS:
        return None
    return kind, body


def restates_question(query: str, question: str) -> bool:
    """The query is (most of) the question's wording rather than an entity name."""
    q = set(bm25_tokenize(question))
    return len(q) >= 3 and len(set(bm25_tokenize(query)) & q) >= 0.6 * len(q)


# -- datasets -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class QARecord:
    source: str
    question: str
    answers: tuple[str, ...]
    row: int


def _source_name(raw: Any) -> str:
    s = re.sub(r"[^a-z0-9_]+", "_", str(raw or "qa").lower()).strip("_")
    return s or "qa"


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if hasattr(v, "tolist"):  # numpy arrays from parquet
        v = v.tolist()
    if isinstance(v, dict):
        return _as_list(v.get("target"))
    return [str(x) for x in v]


def _record(row: dict[str, Any], n: int, where: str) -> QARecord:
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    question = row.get("question") or extra.get("question")
    prompt = row.get("prompt")
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if not question and isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[-1], dict):
        content = str(prompt[-1].get("content", ""))  # Search-R1 prompts end "Question: ...\n"
        question = content.rsplit("Question:", 1)[-1].strip() if "Question:" in content else content.strip()
    answers = _as_list(row.get("golden_answers"))
    if not answers and isinstance(row.get("reward_model"), dict):
        answers = _as_list(row["reward_model"].get("ground_truth") or {})
    if not answers:
        answers = _as_list(row.get("answers", row.get("answer")))
    if not question or not answers:
        raise SeedRLError(f"{where}: row {n} needs 'question' and 'golden_answers' (Search-R1 format; also "
                          "accepted: reward_model.ground_truth.target, answer, answers)")
    return QARecord(_source_name(row.get("data_source", row.get("source"))), str(question).strip(),
                    tuple(a.strip() for a in answers), n)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        except ImportError:
            pass
        try:
            import pandas as pd
        except ImportError:
            raise SeedRLError(f"reading {path} needs pyarrow or pandas (pip install pyarrow), or convert it to "
                              "JSONL (one {\"question\": ..., \"golden_answers\": [...], \"data_source\": ...} "
                              "per line)") from None
        return pd.read_parquet(path).to_dict("records")
    text = path.read_text()
    if path.suffix == ".json" and text.lstrip().startswith("["):
        return json.loads(text)
    rows = []
    for n, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SeedRLError(f"{path}:{n + 1}: not JSON ({exc})") from None
    return rows


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime: float, size: int) -> tuple[QARecord, ...]:
    rows = _read_rows(Path(path))
    if not rows:
        raise SeedRLError(f"search dataset {path} is empty")
    return tuple(_record(r, n, path) for n, r in enumerate(rows))


def load_qa_dataset(path: str | Path) -> tuple[QARecord, ...]:
    """Records of a Search-R1 style dataset (JSONL / JSON list / parquet), cached by file identity."""
    p = Path(path)
    if not p.exists():
        raise SeedRLError(f"search dataset {str(path)!r} not found; pass a Search-R1 JSONL or parquet file "
                          "(rows with question, golden_answers, data_source) as env kwarg data_path / test_data_path")
    st = p.stat()
    return _load_cached(str(p.resolve()), st.st_mtime, st.st_size)


# -- config -------------------------------------------------------------------------------------
def file_fingerprint(path: str) -> str:
    """What identifies a data file in a panel hash: its name and content (sha256; over the first and
    last MiB and the size for files above 64 MiB), never the folder it sits in. A missing file: its path."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return str(path)
    return _fingerprint(str(p.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=32)
def _fingerprint(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 64 << 20:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        else:
            h.update(f.read(1 << 20))
            f.seek(size - (1 << 20))
            h.update(f.read(1 << 20))
            h.update(str(size).encode())
    return f"{Path(path).name}:sha256:{h.hexdigest()[:16]}"


class SearchConfig(EnvOptions):
    """Env options, shared by the constructor and :meth:`SearchEnv.panel_task_ids`. The retrieval
    server's address, timeout and retries are machine-local; the dataset and corpus files enter the
    panel hash by their content (:func:`file_fingerprint`), not their path."""

    env_name: ClassVar[str] = "search"
    #: the retriever's address, timeout and retries, and the step prompt's layout, never change which tasks a
    #: panel holds: not part of the panel hash
    local: ClassVar[frozenset[str]] = frozenset({"retriever_url", "retriever_timeout", "retriever_retries",
                                                 "prompt_style"})

    #: generated world (ignored with data_path / test_data_path)
    world_seed: Int = Field(0, ge=0, description="an integer >= 0")
    scale: Int = Field(1, ge=1, description="an integer >= 1")
    #: passages returned per search (Search-R1: 3)
    topk: Int = Field(3, ge=1, description="an integer >= 1")
    #: actions per episode before it ends unanswered (None: only the trainer's env.max_steps)
    max_turns: Int | None = Field(None, ge=1, description="an integer >= 1, or null")
    #: "bm25" (in-process, over the world or corpus_path) or "http" (Search-R1 retrieval server);
    #: "http" by default when retriever_url is given
    retriever: Str = Field("bm25", description="bm25 or http")
    retriever_url: Str | None = Field(None, description="the URL of a Search-R1 retrieval server")
    retriever_timeout: Float = Field(10.0, gt=0, description="seconds, a number > 0")
    retriever_retries: Int = Field(1, ge=0, description="an integer >= 0")
    corpus_path: PathStr | None = Field(None, description="a Search-R1 JSONL corpus file")
    data_path: PathStr | None = Field(None, description="a Search-R1 train file (JSONL, JSON or parquet)")
    test_data_path: PathStr | None = Field(None, description="a Search-R1 test file (JSONL, JSON or parquet)")
    seen_sources: StrList | None = Field(None, description="a list of data source names")
    #: the step prompt: verl-agent's SEARCH_TEMPLATE structure (the question, the history as "Step k:<action>
    #: <observation>") or this project's layout (the tiny presets' models learnt it)
    prompt_style: Literal["verl_agent", "seedrl"] = Field(
        "verl_agent", description="verl_agent (verl-agent's Search step-prompt structure, the default) or seedrl "
                                  "(this project's layout)")

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> SearchConfig:
        kw = dict(kwargs)
        if kw.get("retriever_url") and "retriever" not in kw:
            kw["retriever"] = "http"
        return cls.parse(kw)

    @field_validator("seen_sources")
    @classmethod
    def _sources(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if v is None else tuple(_source_name(x) for x in v)

    @model_validator(mode="after")
    def _check(self) -> SearchConfig:
        if self.retriever not in ("bm25", "http"):
            raise unknown_name("search retriever", self.retriever, ["bm25", "http"])
        if self.retriever == "http" and not self.retriever_url:
            raise SeedRLError("search env: retriever 'http' needs retriever_url (the Search-R1 retrieval server, "
                              "e.g. http://127.0.0.1:8000/retrieve)")
        if self.dataset_mode and self.retriever == "bm25" and not self.corpus_path:
            raise SeedRLError("search env with data_path/test_data_path needs a retriever: set retriever_url (the "
                              "Search-R1 retrieval server over e.g. wiki-18) or corpus_path (a Search-R1 JSONL corpus "
                              "for in-process BM25)")
        if self.corpus_path and Path(self.corpus_path).is_file() and not _has_a_line(*_stat_key(self.corpus_path)):
            raise SeedRLError(f"search corpus {self.corpus_path!r} is empty: it holds no document line (Search-R1 "
                              f"JSONL, one {{\"id\": ..., \"contents\": ...}} per line)")
        return self

    def identity(self) -> dict[str, Any]:
        out = super().identity()
        for k in ("corpus_path", "data_path", "test_data_path"):
            if out.get(k) is not None:
                out[k] = file_fingerprint(out[k])
        return out

    @property
    def dataset_mode(self) -> bool:
        return bool(self.data_path or self.test_data_path)


def _stat_key(path: str) -> tuple[str, int, int]:
    st = Path(path).stat()
    return str(path), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=16)
def _has_a_line(path: str, mtime_ns: int, size: int) -> bool:
    """Whether a file holds a non-blank line (read only up to the first one: corpora are GBs). Cached per
    (path, mtime, size): the options are validated for every episode's env, the file is read once."""
    with open(path, "rb") as fh:
        return any(line.strip() for line in fh)


# -- retriever cache (one index per corpus per process, shared by the rollout's env instances) --
_LOCK = threading.Lock()
_RETRIEVERS: dict[tuple[Any, ...], Retriever] = {}


def _retriever(cfg: SearchConfig) -> Retriever:
    if cfg.retriever == "http":
        key: tuple[Any, ...] = ("http", cfg.retriever_url, cfg.retriever_timeout, cfg.retriever_retries)
    elif cfg.corpus_path:
        p = Path(cfg.corpus_path)
        key = ("corpus", str(p.resolve()), p.stat().st_mtime if p.exists() else 0)
    else:
        key = ("world", cfg.world_seed, cfg.scale)
    with _LOCK:
        r = _RETRIEVERS.get(key)
        if r is None:
            if key[0] == "http":
                r = HttpRetriever(str(cfg.retriever_url), cfg.retriever_timeout, cfg.retriever_retries)
            elif key[0] == "corpus":
                r = BM25Retriever(load_corpus_jsonl(str(cfg.corpus_path)))
            else:
                r = BM25Retriever(get_world(cfg.world_seed, cfg.scale).docs)
            _RETRIEVERS[key] = r
        return r


def _dataset_ids(records: Sequence[QARecord], tag: str) -> list[str]:
    """Task ids in a fixed pseudo-random order (sources interleave; independent of row order)."""
    ids = [f"{r.source}-{tag}{r.row:06d}" for r in records]
    return sorted(ids, key=lambda t: hashlib.sha256(t.encode()).hexdigest())


def _take(ids: list[str], size: int, what: str) -> list[str]:
    if not 0 <= size <= len(ids):
        raise SeedRLError(f"search: {what} has {len(ids)} questions; asked for {size}")
    return ids[:size]


# -- the env ------------------------------------------------------------------------------------
class SearchEnv(Env):
    """Search-R1 style QA over a generated world (default) or a user's Search-R1 dataset."""

    name = "search"
    title = "Search-QA"
    packages = ("bm25s",)
    version = "1"
    splits = {"train": 256, "valid_seen": 64, "valid_unseen": 64}
    instruction = INSTRUCTION
    options_model = SearchConfig
    #: runs saved before verl-agent's layout became the default (config_version < 2) played this project's
    kwargs_before: ClassVar[dict[int, dict[str, Any]]] = {2: {"prompt_style": "seedrl"}}

    @classmethod
    def parse_options(cls, env_kwargs: Mapping[str, Any]) -> SearchConfig:
        return SearchConfig.from_kwargs(dict(env_kwargs))
    #: generation stops at the first closing tag (as Search-R1 does)
    stop = ("</search>", "</answer>")

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        self.config = SearchConfig.from_kwargs(env_kwargs)
        self.prompt_style = LAYOUTS[self.config.prompt_style]
        if self.config.prompt_style == "verl_agent":
            self.instruction = VERL_AGENT_INSTRUCTION
        self._retriever: Retriever | None = None
        self._question: Question | None = None
        self._record: QARecord | None = None
        self._reset_state("", ())

    # -- panels ----------------------------------------------------------------------------------
    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        if split not in cls.splits:
            raise unknown_name("split of search", split, list(cls.splits))
        cfg = SearchConfig.from_kwargs(env_kwargs)
        if not cfg.dataset_mode:
            return get_world(cfg.world_seed, cfg.scale).panel(split, size)
        if split == "train":
            if not cfg.data_path:
                raise SeedRLError("search: the train panel needs env kwarg data_path (a Search-R1 train file)")
            return _take(_dataset_ids(load_qa_dataset(cfg.data_path), "tr"), size, f"{cfg.data_path}")
        if not cfg.test_data_path:
            raise SeedRLError(f"search: the {split} panel needs env kwarg test_data_path (a Search-R1 test file)")
        seen = set(cls._seen_sources(cfg))
        records = [r for r in load_qa_dataset(cfg.test_data_path) if (r.source in seen) == (split == "valid_seen")]
        return _take(_dataset_ids(records, "te"), size, f"{split} of {cfg.test_data_path} (seen sources: "
                     f"{', '.join(sorted(seen))})")

    @classmethod
    def skill_types(cls, task_id: str, task_text: str = "") -> tuple[str, ...]:
        """A generated-world task's hop type (``hop1``..``hop3``, this env's own skills); a dataset
        task's SDAR question type (:func:`sdar_question_type`) of its data source and question (read
        from ``task_text``, the task description ``answer this question: <question>``), none for a
        source SDAR does not route."""
        kind = cls.task_type(task_id)
        try:
            parse_task_id(task_id)
            return (kind,)
        except SeedRLError:
            pass
        question = task_text[len(TASK_PREFIX):] if task_text.startswith(TASK_PREFIX) else task_text
        routed = sdar_question_type(kind, question)
        return () if routed is None else (routed,)

    @staticmethod
    def _seen_sources(cfg: SearchConfig) -> tuple[str, ...]:
        if cfg.seen_sources is not None:
            return cfg.seen_sources
        if cfg.data_path:
            return tuple(sorted({r.source for r in load_qa_dataset(cfg.data_path)}))
        return SEARCH_R1_SEEN_SOURCES

    # -- episode ---------------------------------------------------------------------------------
    @property
    def retriever(self) -> Retriever:
        if self._retriever is None:
            self._retriever = _retriever(self.config)
        return self._retriever

    def parse_action(self, text: str) -> str | None:
        return parse_search_action(text)

    def format_valid(self, text: str) -> bool:
        """verl-agent's ``search_projection``: a complete ``<search>`` or ``<answer>`` block, never both
        kinds of tag, and no tag twice; no ``<think>`` check."""
        if not isinstance(text, str) or parse_search_action(text) is None:
            return False
        n_search = len(re.findall(r"<search>", text, re.IGNORECASE))
        n_answer = len(re.findall(r"<answer>", text, re.IGNORECASE))
        return not (n_search and n_answer) and n_search <= 1 and n_answer <= 1

    def format_response(self, action: str, thought: str = "") -> str:
        """The canonical model turn for an action (expert demonstrations): no ``<action>`` wrapper."""
        return f"<think>{thought}</think>{action}"

    def reset(self, task_id: str) -> str:
        self.task_id = task_id
        self._question, self._record = None, None
        if self.config.dataset_mode:
            self._record = self._load_record(task_id)
            question, golds = self._record.question, self._record.answers
        else:
            parse_task_id(task_id)
            world = get_world(self.config.world_seed, self.config.scale)
            q = world.questions.get(task_id.strip())
            if q is None:
                raise SeedRLError(f"search task {task_id!r} is not in the world (world_seed="
                                  f"{self.config.world_seed}, scale={self.config.scale}): {world.summary()}")
            self._question = q
            question, golds = q.text, (q.answer,)
        self._reset_state(question, golds)
        # verl-agent's task is the question itself ("Your question: ..."); this project's layout says
        # "Your task is to: answer this question: ..."
        self.task_description = question if self.config.prompt_style == "verl_agent" else TASK_PREFIX + question
        self._obs = f"Question: {question}"
        return self._obs

    def _reset_state(self, question: str, golds: Sequence[str]) -> None:
        self._question_text = question
        self._golds = tuple(golds)
        self._queries: list[str] = []
        self._results: list[list[Passage]] = []
        self._log: list[dict[str, Any]] = []
        self._answer: str | None = None
        self._em, self._f1 = False, 0.0
        self._done = self._truncated = False
        self._obs = ""

    def _load_record(self, task_id: str) -> QARecord:
        m = _DATA_TASK_RE.match(task_id.strip())
        if m is None:
            raise SeedRLError(f"bad search dataset task id {task_id!r}; expected SOURCE-trNNNNNN or SOURCE-teNNNNNN")
        source, tag, row = m.group(1), m.group(2), int(m.group(3))
        path = self.config.data_path if tag == "tr" else self.config.test_data_path
        if not path:
            raise SeedRLError(f"search task {task_id!r} needs env kwarg {'data_path' if tag == 'tr' else 'test_data_path'}")
        records = load_qa_dataset(path)
        if row >= len(records) or records[row].source != source:
            raise SeedRLError(f"search task {task_id!r} is not in {path}")
        return records[row]

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if not self._question_text:
            raise SeedRLError("search: call reset(task_id) before step()")
        parsed = split_action(action)
        if parsed is None:
            self._log.append({"action": str(action)[:MAX_ACTION_CHARS], "valid": False})
            self._limit()
            return f"{INVALID_TEXT}\n{self._obs}", 0.0, self._done, self._info(False)
        if self._done:  # over: nothing happens, no second reward
            return self._obs, 0.0, True, self._info(True)
        kind, body = parsed
        if kind == "search":
            passages = self.retriever.search(body, self.config.topk)  # RetrieverError ends the episode
            self._queries.append(body)
            self._results.append(passages)
            self._log.append({"action": f"<search>{body}</search>", "valid": True,
                              "retrieved": [p.doc_id for p in passages]})
            text = format_passages(passages).strip() or "No results found for this query."
            self._obs = f"<information>{text}</information>"
            self._limit()
            return self._obs, 0.0, self._done, self._info(True)
        self._answer = body
        self._em, self._f1 = exact_match(body, self._golds), f1_score(body, self._golds)
        self._log.append({"action": f"<answer>{body}</answer>", "valid": True})
        self._done = True
        self._obs = f"Your answer: {body}"
        return self._obs, WIN_REWARD if self._em else 0.0, True, self._info(True)

    def _limit(self) -> None:
        if self.config.max_turns is not None and len(self._log) >= self.config.max_turns and not self._done:
            self._done = self._truncated = True

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"won": self._em, "action_valid": valid, "em": self._em, "f1": self._f1,
                "searches": len(self._queries), "answered": self._answer is not None, "truncated": self._truncated}

    def admissible_actions(self) -> list[str] | None:
        return None

    def expert_action(self) -> str | None:
        """World: the gold evidence path -- search each hop's entity by its exact name, in order (one
        search per hop, even when a passage came back earlier by chance), then answer. Dataset: search
        the question, then answer the first gold answer."""
        if self._done or not self._question_text:
            return None
        if self._question is not None:
            searched = {normalize_answer(q) for q in self._queries}
            for hop in self._question.hops:
                if normalize_answer(hop.entity) not in searched:
                    return f"<search>{hop.entity}</search>"
        elif not self._queries:
            return f"<search>{self._question_text}</search>"
        return f"<answer>{self._golds[0]}</answer>"

    def _retrieved_ids(self) -> set[str]:
        return {p.doc_id for ps in self._results for p in ps}

    def privileged_state(self) -> dict[str, Any]:
        common: dict[str, Any] = {
            "env": "search", "task_id": self.task_id, "question": self._question_text,
            "gold_answers": list(self._golds), "queries": list(self._queries),
            "retrieved": [[p.doc_id for p in r] for r in self._results], "history": list(self._log),
            "answer": self._answer, "answered": self._answer is not None, "em": self._em, "f1": round(self._f1, 4),
            "won": self._em, "truncated": self._truncated,
            "question_queries": [i for i, q in enumerate(self._queries) if restates_question(q, self._question_text)],
        }
        q = self._question
        if q is None:
            golds = [normalize_answer(g) for g in self._golds]
            hit = next((i for i, r in enumerate(self._results)
                        if any(g and g in normalize_answer(p.contents) for p in r for g in golds)), None)
            return SearchDatasetState(**common, mode="dataset", source=self._record.source if self._record else None,
                                      gold_evidence=None, answer_in_results=hit is not None,
                                      answer_query=hit).to_dict()
        retrieved = self._retrieved_ids()
        hops: list[SearchHop] = []
        for h in q.hops:
            name_tokens = set(bm25_tokenize(h.entity))
            hops.append({"entity": h.entity, "doc_id": h.doc_id, "relation": h.relation,
                         "relation_phrase": RELATIONS[h.relation][1], "value": h.value,
                         "retrieved": h.doc_id in retrieved,
                         "searched": any(name_tokens <= set(bm25_tokenize(x)) for x in self._queries)})
        missing = next((i for i, h in enumerate(hops) if not h["retrieved"]), None)
        failed = None if self._em else (missing if missing is not None else len(hops))
        return SearchWorldState(
            **common, mode="world", question_type=q.template.name, hops=len(q.hops),
            gold_evidence=q.gold_evidence, expert_queries=q.expert_queries, chain=hops,
            evidence_retrieved=[h["retrieved"] for h in hops],
            all_evidence_retrieved=missing is None, first_missing_hop=missing, failed_hop=failed,
            answer_kind=self._answer_kind(q),
        ).to_dict()

    def _answer_kind(self, q: Question) -> str | None:
        """What a wrong answer was: an entity of the chain, another fact of the last entity, or other."""
        if self._answer is None or self._em:
            return None
        a = normalize_answer(self._answer)
        names = [h.entity for h in q.hops] + [h.value for h in q.hops[:-1]]
        if a in {normalize_answer(n) for n in names}:
            return "intermediate"
        world = get_world(self.config.world_seed, self.config.scale)
        last = world.by_name[q.hops[-1].entity]
        others = {normalize_answer(world.value(last, r)) for r in last.rel if r != q.hops[-1].relation}
        return "other_fact" if a in others else "wrong"
