"""WebShop as an HTTP client of a WebShop server that the user runs (princeton-nlp/WebShop).

WebShop is not installable from PyPI (the ``webshop`` package there is a stub without the engine),
so this env drives WebShop's own Flask site (``python -m web_agent_site.app``, port 3000) over HTTP,
issuing the requests a browser would: GET ``/<session>`` opens the search page, the search form
POSTs ``search_query`` to ``/<session>`` (redirected to ``/search_results/...``), a product link is
a GET of its ``href``, an option (radio button) is a GET of its ``data-url``, and every button
("Back to Search", "Next >", "< Prev", "Description", "Buy Now", ...) POSTs its form. Set the server
with the env kwarg ``server_url``, else ``$WEBSHOP_URL``, else ``http://127.0.0.1:3000``. Setup:
seedrl/envs/webshop/README.md.

Tasks. ``"goal-<i>"`` is goal ``i`` of the server: WebShop's site opens goal ``i`` for a session id
containing "fixed" and ending in ``_<i>`` (here ``seedrl_fixed_<i>``). The goal list is WebShop's
human-written instructions, shuffled with seed 233, so indices follow the WebShop paper's splits:

- ``train``: goals 1500, 1501, ... (WebShop's train split; default panel 512 goals),
- ``valid_seen``: goals 500-1499 (WebShop's dev split; default 200),
- ``valid_unseen``: goals 0-499 (WebShop's test split, the 500 goals published results and
  verl-agent evaluate on; default all 500).

WebShop has no held-out task types: every goal is a new instruction from the same distribution,
so "seen" / "unseen" only name the dev and test splits. A goal index the server does not have
(``-d small`` loads fewer products and so fewer goals than ``-d all``) fails that episode's reset
with HTTP 500. verl-agent's default text env uses *synthetic* goals instead of human ones, so its
goal indices name other instructions; compare with it on this panel, not by index.

Observations follow verl-agent's WebShop env: the page's visible texts in order, everything up to
and including the instruction dropped, each part quoted and joined by ``" [SEP] "``, e.g.
``'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'Next >' [SEP] 'B078GWRC1J' [SEP] ...``.
Hidden elements (the done page's hidden goal and score details) are never shown. The instruction
is :attr:`task_description`.

Actions: ``search[<query>]`` where the page has a search bar, and ``click[<value>]`` for every
button, product link (its ASIN, lower case) and option value on the page. :meth:`admissible_actions`
lists ``search[<your query>]`` (verl-agent's placeholder; any non-empty query is accepted; a "/" in
it becomes a space, because the site's routing breaks on it) and one
``click[...]`` per clickable (buttons, then products, then options, as WebShop's text env orders
them). Differences from WebShop's text env, both to keep "admissible" exact: the search button's
own ``click[search]`` (a no-op there) is not listed, and ``search[...]`` is only valid on a page
with a search bar (the text env also searched from other pages). An action that is not admissible
is not sent: ``action_valid`` is False, the page is unchanged and the observation says so.

Reward: the episode ends at "Buy Now"; the done page reports WebShop's task score in [0, 1]. As in
verl-agent, ``won = score == 1`` and the reward is ``10 * won`` (``reward_mode="won"``, default);
``reward_mode="score"`` pays ``10 * score`` instead. ``info`` has ``won``, ``action_valid`` and
``score`` (0 before a purchase); the trainer's step limit (verl-agent: 15) ends unfinished episodes.

Expert: none (WebShop has human demonstrations only), so :meth:`expert_action` is None. The
privileged state records what the agent searched, opened and selected, the score, and, once it
bought something, what WebShop's done page carries in hidden fields: the goal's ASIN, attributes,
options and price limit, the purchased product's attributes, and the score breakdown
(``reward_info``: ``r_type``, ``r_att``, ``r_option``, ``r_price``, ...). The oracle analyzer
(:mod:`seedrl.envs.webshop.oracle`) writes hindsight skills from it.

Faults: no server -> a one-line :class:`SeedRLError` naming the setup steps; a timeout, HTTP error
or non-WebShop page raises from ``reset``/``step`` (the rollout then ends only that episode).
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, ClassVar, Literal
from urllib.parse import unquote, urljoin, urlsplit

from pydantic import Field, model_validator

from seedrl.envs.base import WIN_REWARD, Env, EnvOptions, Float, Str, sdar_keyword_types
from seedrl.envs.webshop.state import WebShopPrivilegedState
from seedrl.errors import SeedRLError, unknown_name

DEFAULT_URL = "http://127.0.0.1:3000"
URL_ENV = "WEBSHOP_URL"
SETUP_HINT = ("WebShop is not on PyPI: git clone https://github.com/princeton-nlp/WebShop, run ./setup.sh -d small "
              "in it, start the site with python -m web_agent_site.app (port 3000), then export "
              f"{URL_ENV}=http://127.0.0.1:3000 (seedrl/envs/webshop/README.md)")

#: split -> (first goal index, one past the last or None = open-ended)
SPLIT_GOALS: dict[str, tuple[int, int | None]] = {"train": (1500, None), "valid_seen": (500, 1500),
                                                  "valid_unseen": (0, 500)}
_MAX_TRAIN = 100_000
SEARCH_PLACEHOLDER = "search[<your query>]"
SESSION_PREFIX = "seedrl_fixed_"
INVALID_ACTION_OBS = "That is not a valid action here; the page did not change."
GAME_OVER_OBS = "The episode is over."
REWARD_MODES = ("won", "score")
#: the closing instruction of the ``verl_agent`` layout (verl-agent's WEBSHOP_TEMPLATE)
VERL_AGENT_INSTRUCTION = (
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation, then think carefully which admissible "
    "action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags."
)
#: the env option ``prompt_style`` -> the step-prompt layout (``seedrl.agent.prompts.PROMPT_STYLES``)
LAYOUTS = {"verl_agent": "verl_agent_webshop", "seedrl": "seedrl"}

#: SDAR's WebShop product categories and their keywords, in its order (``task_keywords`` of ZJU-REAL/SDAR's
#: ``skills/webshop/skill_mapping.json``; its ``other`` category has none, so it is never chosen): the
#: static skills of a goal are every category with a keyword in the instruction (:meth:`WebShopEnv.skill_types`)
SDAR_CATEGORY_KEYWORDS: dict[str, tuple[str, ...]] = {
    "apparel": ("shirt", "dress", "pants", "jacket", "sweater", "blouse", "skirt", "coat", "jeans", "shorts"),
    "footwear": ("shoe", "boot", "sneaker", "sandal", "slipper", "loafer", "heel"),
    "home_decor": ("pillow", "rug", "curtain", "lamp", "vase", "frame", "candle", "decor"),
    "electronics": ("phone", "charger", "cable", "speaker", "headphone", "battery", "adapter", "usb"),
    "accessories": ("bag", "wallet", "belt", "watch", "sunglasses", "hat", "scarf", "glove"),
    "beauty_health": ("shampoo", "cream", "lotion", "makeup", "brush", "serum", "moisturizer", "soap"),
}

_TASK_RE = re.compile(r"^goal-(\d+)$")
_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
_INVISIBLE = {"script", "style", "head", "title", "meta", "template", "noscript"}


# -- task ids ---------------------------------------------------------------------------------
def parse_task_id(task_id: str) -> int:
    """``"goal-12"`` -> 12."""
    m = _TASK_RE.match(str(task_id).strip())
    if m is None:
        raise SeedRLError(f"bad WebShop task id {task_id!r}; expected goal-<index>, e.g. goal-12")
    return int(m.group(1))


def make_task_id(goal: int) -> str:
    return f"goal-{goal}"


def default_server_url() -> str:
    return os.environ.get(URL_ENV) or DEFAULT_URL


# -- pages ------------------------------------------------------------------------------------
@dataclass
class Clickable:
    kind: str  # "button" (POST/GET its form), "link" (GET href), "option" (GET data-url)
    method: str
    url: str
    name: str = ""  # the option's group ("size", "color"), for options


@dataclass
class Page:
    """What the client needs from one WebShop page."""

    url: str
    parts: list[str] = field(default_factory=list)  # visible text chunks, in document order
    instruction: str = ""
    clickables: dict[str, Clickable] = field(default_factory=dict)  # lower-case text -> target
    search: Clickable | None = None  # the search form (url, method, name = input field name)
    fields: dict[str, str] = field(default_factory=dict)  # id of the nearest element with one -> <pre> text

    @property
    def kind(self) -> str:
        """index | results | item | item_sub | done | other, from WebShop's routes and page shape."""
        if "reward" in self.fields:
            return "done"
        path = urlsplit(self.url).path
        for prefix, kind in (("/search_results/", "results"), ("/item_sub_page/", "item_sub"),
                             ("/item_page/", "item"), ("/done/", "done")):
            if prefix in path:
                return kind
        return "index" if self.search is not None else "other"

    @property
    def score(self) -> float | None:
        try:
            return float(self.fields["reward"].strip())
        except (KeyError, ValueError):
            return None

    def observation(self) -> str:
        """verl-agent's text: the parts after the instruction, each quoted, joined by " [SEP] "."""
        parts = self.parts
        if self.instruction and self.instruction in parts:
            parts = parts[len(parts) - parts[::-1].index(self.instruction):]
        return " [SEP] ".join(f"'{p}'" for p in parts)


class _PageParser(HTMLParser):
    """Visible texts, clickables, the search form and ``<pre>`` fields of a WebShop page.

    Tolerant of WebShop's mismatched tags (``<h4>...</h5>``): an end tag closes the most recent
    open element of that name, or is ignored when none is open.
    """

    def __init__(self, url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page(url=url)
        self._stack: list[tuple[str, dict[str, str]]] = []
        self._forms: list[dict[str, str]] = []  # open forms (innermost last)
        self._buttons: list[tuple[str, Clickable]] = []
        self._links: list[tuple[str, Clickable]] = []
        self._options: list[tuple[str, Clickable]] = []
        self._capture: list[list[Any]] = []  # open <button>/<a>/<pre>/#instruction-text: [tag, attrs, texts]
        self._search_form_depth: int | None = None

    # -- structure ---------------------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k.lower(): (v if v is not None else "") for k, v in attrs_list}
        if tag == "form":
            self._forms.append(attrs)
        if tag == "input":
            self._input(attrs)
        if tag in _VOID:
            return
        self._stack.append((tag, attrs))
        if tag in ("button", "a", "pre") or attrs.get("id") == "instruction-text":
            self._capture.append([tag, attrs, [], len(self._stack)])

    def handle_startendtag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs_list)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                while len(self._stack) > i:
                    self._close(*self._stack.pop())
                return

    def _close(self, tag: str, attrs: dict[str, str]) -> None:
        depth = len(self._stack) + 1
        if self._capture and self._capture[-1][3] == depth:
            ctag, cattrs, texts, _ = self._capture.pop()
            text = " ".join(" ".join(texts).split())
            if cattrs.get("id") == "instruction-text":
                self._instruction(texts)
            elif ctag == "button":
                self._button(text)
            elif ctag == "a" and "product-link" in cattrs.get("class", "").split():
                self._links.append((text.lower(), Clickable("link", "GET", self._abs(cattrs.get("href", "")))))
            elif ctag == "pre":
                owner = next((a["id"] for _, a in reversed(self._stack) if a.get("id")), None)
                if owner is not None and owner not in self.page.fields:
                    self.page.fields[owner] = "\n".join(texts).strip()
        if tag == "form" and self._forms:
            self._forms.pop()
            if self._search_form_depth is not None and len(self._forms) < self._search_form_depth:
                self._search_form_depth = None

    # -- content -----------------------------------------------------------------------------
    def handle_data(self, data: str) -> None:
        for cap in self._capture:
            cap[2].append(data)
        if self._hidden():
            return
        text = " ".join(data.split())
        if text:
            self.page.parts.append(text)

    def _hidden(self) -> bool:
        for tag, attrs in self._stack:
            if tag in _INVISIBLE or "hidden" in attrs:
                return True
            if re.search(r"display\s*:\s*none", attrs.get("style", ""), re.IGNORECASE):
                return True
        return False

    def _abs(self, href: str) -> str:
        return urljoin(self.page.url, href)

    def _form_target(self) -> tuple[str, str]:
        form = self._forms[-1] if self._forms else {}
        return (form.get("method") or "GET").upper(), self._abs(form.get("action") or self.page.url)

    def _input(self, attrs: dict[str, str]) -> None:
        kind = attrs.get("type", "text").lower()
        if attrs.get("id") == "search_input" or (kind in ("text", "search") and self._forms and self.page.search is None):
            method, url = self._form_target()
            self.page.search = Clickable("search", method, url, name=attrs.get("name") or "search_query")
            self._search_form_depth = len(self._forms)
        elif kind == "radio":
            target = attrs.get("data-url") or attrs.get("href")
            value = " ".join(attrs.get("value", "").split()).lower()
            if target and value:
                self._options.append((value, Clickable("option", "GET", self._abs(target), name=attrs.get("name", ""))))

    def _button(self, text: str) -> None:
        if not text or self._search_form_depth is not None:  # the search form's own submit button
            return
        method, url = self._form_target()
        self._buttons.append((text.lower(), Clickable("button", method, url)))

    def _instruction(self, texts: list[str]) -> None:
        chunks = [" ".join(t.split()) for t in texts]
        chunks = [c for c in chunks if c]
        if chunks and chunks[0].rstrip(":").lower() == "instruction":
            chunks = chunks[1:]
        elif chunks and chunks[0].lower().startswith("instruction:"):
            chunks[0] = chunks[0].split(":", 1)[1].strip()
        self.page.instruction = " ".join(c for c in chunks if c)

    def result(self) -> Page:
        while self._stack:
            self._close(*self._stack.pop())
        for key, target in self._buttons + self._links + self._options:
            self.page.clickables.setdefault(key, target)
        return self.page


def parse_page(html: str, url: str) -> Page:
    """Parse a WebShop page (stdlib ``html.parser``; never raises on odd HTML)."""
    parser = _PageParser(url)
    parser.feed(html)
    parser.close()
    return parser.result()


def _literal(text: str | None) -> Any:
    """A Python/JSON literal shown on the done page (dict, list, float), else the raw text."""
    if text is None:
        return None
    text = text.strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except Exception:
            continue
    return text


def done_details(page: Page) -> dict[str, Any]:
    """The goal, the purchase and the score breakdown from WebShop's done page (hidden fields)."""
    f = page.fields
    goal = {"asin": f.get("goal-asin"), "options": _literal(f.get("goal-options")),
            "attributes": _literal(f.get("goal-attrs")), "price_upper": _literal(f.get("goal-price")),
            "instruction": f.get("goal-instruction-text"), "category": f.get("goal-category"),
            "product_category": f.get("goal-pc"), "query": f.get("goal-query")}
    full_goal = _literal(f.get("goal"))
    if isinstance(full_goal, dict):
        goal.setdefault("name", full_goal.get("name"))
        for k, v in (("options", full_goal.get("goal_options")), ("attributes", full_goal.get("attributes")),
                     ("price_upper", full_goal.get("price_upper")), ("asin", full_goal.get("asin"))):
            if goal.get(k) in (None, "") and v is not None:
                goal[k] = v
    bought = {"asin": f.get("asin"), "options": _literal(f.get("options")),
              "attributes": _literal(f.get("purchased_attrs")), "category": f.get("purchased-category"),
              "query": f.get("purchased-query"), "product_category": f.get("purchased-pc")}
    info = _literal(f.get("reward_info"))
    return {"goal": {k: v for k, v in goal.items() if v not in (None, "")} or None,
            "bought": {k: v for k, v in bought.items() if v not in (None, "")} or None,
            "reward_info": info if isinstance(info, dict) else None}


# -- HTTP -------------------------------------------------------------------------------------
_CLIENTS: dict[tuple[int, float], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(timeout_s: float) -> Any:
    """One shared, thread-safe httpx client per timeout (episodes run on threads of the rollout executor)."""
    import httpx

    key = (os.getpid(), timeout_s)  # a forked child must not reuse its parent's connections
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            # trust_env=False: a proxy from the environment must not intercept a local server
            _CLIENTS[key] = httpx.Client(timeout=timeout_s, follow_redirects=True, trust_env=False,
                                         limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))
        return _CLIENTS[key]


class WebShopHTTPError(SeedRLError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _short(url: str) -> str:
    path = unquote(urlsplit(url).path)
    return path if len(path) <= 80 else path[:77] + "..."


# -- the env ----------------------------------------------------------------------------------
class WebShopOptions(EnvOptions):
    """Env options of ``webshop``; the server and its timeout are machine-local."""

    env_name: ClassVar[str] = "webshop"
    #: the step prompt's layout never changes which goals a panel holds: not part of the panel hash
    local: ClassVar[frozenset[str]] = frozenset({"server_url", "timeout_s", "prompt_style"})

    server_url: Str | None = Field(None, description="the http(s) URL of a WebShop server (default "
                                                     "$WEBSHOP_URL)")
    timeout_s: Float = Field(30.0, gt=0, description="a positive number of seconds")
    reward_mode: Str = Field("won", description=f"one of {', '.join(REWARD_MODES)}")
    prompt_style: Literal["verl_agent", "seedrl"] = Field(
        "verl_agent", description="verl_agent (verl-agent's WebShop step-prompt structure, the default) or seedrl "
                                  "(this project's layout)")

    @model_validator(mode="after")
    def _check(self) -> WebShopOptions:
        if self.reward_mode not in REWARD_MODES:
            raise unknown_name("webshop reward_mode", self.reward_mode, list(REWARD_MODES))
        return self


class WebShopEnv(Env):
    """A WebShop episode over HTTP against the user's WebShop server."""

    name = "webshop"
    title = "the WebShop e-commerce environment"
    version = "1"
    splits = {"train": 512, "valid_seen": 200, "valid_unseen": 500}
    options_model = WebShopOptions
    #: runs saved before verl-agent's layout became the default (config_version < 2) played this project's
    kwargs_before: ClassVar[dict[int, dict[str, Any]]] = {2: {"prompt_style": "seedrl"}}

    @classmethod
    def skill_types(cls, task_id: str, task_text: str = "") -> tuple[str, ...]:
        """SDAR's keyword route (:func:`seedrl.envs.base.sdar_keyword_types`) over the goal's instruction
        (``task_text``): every category of :data:`SDAR_CATEGORY_KEYWORDS` with a keyword in it, as
        substrings ("hat" in "that" too, as SDAR matches), so a goal may get several category skills."""
        return sdar_keyword_types(task_text, SDAR_CATEGORY_KEYWORDS)

    @classmethod
    def sdar_skills(cls, task_id: str, task_to_skill: Mapping[str, str], task_text: str = "",
                    task_keywords: Mapping[str, Sequence[str]] | None = None) -> tuple[str, ...]:
        """SDAR's folder: its own ``task_keywords`` (else :data:`SDAR_CATEGORY_KEYWORDS`) over the
        instruction, each matched category through its ``task_to_skill``."""
        kinds = sdar_keyword_types(task_text, task_keywords or SDAR_CATEGORY_KEYWORDS)
        return tuple(task_to_skill[k] for k in kinds if k in task_to_skill)

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        o = self.options = WebShopOptions.parse(env_kwargs)
        self.server_url = (o.server_url or default_server_url()).rstrip("/")
        if not urlsplit(self.server_url).scheme.startswith("http"):
            raise SeedRLError(f"webshop server_url must be an http(s) URL, got {self.server_url!r}")
        self.timeout_s = o.timeout_s
        self.reward_mode = o.reward_mode
        self.prompt_style = LAYOUTS[o.prompt_style]
        if o.prompt_style == "verl_agent":
            self.instruction = VERL_AGENT_INSTRUCTION
        self._page: Page | None = None
        self._done = False
        self._score: float | None = None
        self._history: list[dict[str, Any]] = []
        self._searches: list[str] = []
        self._opened: list[str] = []
        self._selected: dict[str, str] = {}
        self._seen: dict[str, dict[str, str]] = {}
        self._details: dict[str, Any] = {}
        self._goal: int | None = None

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """Goal indices ``start .. start + size - 1`` of the split (see the module docstring); the
        server is not contacted, so panels are a pure function of (split, size)."""
        if split not in SPLIT_GOALS:
            raise unknown_name("split of webshop", split, list(SPLIT_GOALS))
        WebShopOptions.parse(env_kwargs)
        start, stop = SPLIT_GOALS[split]
        limit = (stop - start) if stop is not None else _MAX_TRAIN
        if not 0 <= size <= limit:
            raise SeedRLError(f"webshop {split} panel size must be in [0, {limit}], got {size}")
        return [make_task_id(start + i) for i in range(size)]

    # -- HTTP ----------------------------------------------------------------------------------
    def _request(self, method: str, url: str, data: dict[str, str] | None = None) -> Page:
        import httpx

        try:
            resp = _client(self.timeout_s).request(method, url, data=data)
        except httpx.TimeoutException:
            raise SeedRLError(f"webshop: the server at {self.server_url} did not answer {method} {_short(url)} "
                              f"within {self.timeout_s:g}s") from None
        except httpx.TransportError as exc:
            raise SeedRLError(f"no WebShop server answers at {self.server_url} ({type(exc).__name__}); "
                              f"{SETUP_HINT}") from None
        if resp.status_code >= 400:
            raise WebShopHTTPError(f"webshop: the server at {self.server_url} answered HTTP {resp.status_code} to "
                                   f"{method} {_short(url)}", resp.status_code)
        return parse_page(resp.text, str(resp.url))

    # -- episode ---------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        goal = parse_task_id(task_id)
        self._page = None  # a failed reset leaves no page of an earlier episode to step on
        url = f"{self.server_url}/{SESSION_PREFIX}{goal}"
        try:
            page = self._request("GET", url)
        except WebShopHTTPError as exc:
            if exc.status >= 500:
                raise SeedRLError(f"webshop: the server at {self.server_url} failed to open goal {goal} "
                                  f"(HTTP {exc.status}); its goal list may be shorter (./setup.sh -d small loads "
                                  f"fewer goals than -d all) or its data or spaCy model is missing (see the "
                                  f"server's log)") from None
            raise SeedRLError(f"{exc}; is {URL_ENV}={self.server_url} a WebShop server?") from None
        if not page.instruction or page.search is None:
            raise SeedRLError(f"webshop: {url} is not a WebShop search page (no instruction or search bar); "
                              f"is {URL_ENV}={self.server_url} a WebShop server?")
        self.task_id, self._goal = task_id, goal
        self.task_description = page.instruction
        self._page, self._done, self._score = page, False, None
        self._history, self._searches, self._opened = [], [], []
        self._selected, self._seen, self._details = {}, {}, {}
        return page.observation()

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._page is None:
            raise SeedRLError("webshop: call reset(task_id) before step()")
        if self._done:
            return GAME_OVER_OBS, 0.0, True, self._info(valid=False)
        page = self._page
        m = _ACTION_RE.match(action or "")
        kind, arg = (m.group(1).lower(), " ".join(m.group(2).split())) if m else (None, "")
        target, data = None, None
        if kind == "search":
            # WebShop's site puts the keywords in a URL path segment without quoting "/", so a "/"
            # would break its routing (HTTP 404); it carries no search meaning, so it becomes a space
            arg = " ".join(arg.replace("/", " ").split())
            if page.search is not None and arg and arg.lower() != "<your query>":
                target, data = page.search, {page.search.name: arg}
        elif kind == "click":
            target = page.clickables.get(arg.lower())
        if target is None:
            self._history.append({"action": action, "valid": False, "page": page.kind})
            return f"{INVALID_ACTION_OBS}\n{page.observation()}", 0.0, False, self._info(valid=False)

        self._record_before(page, kind, arg.lower(), target)
        new = self._request(target.method, target.url, data)
        self._page = new
        self._history.append({"action": action, "valid": True, "page": page.kind, "to": new.kind})
        self._record_after(new)
        reward = 0.0
        if new.kind == "done":
            self._done = True
            self._score = new.score if new.score is not None else 0.0
            self._details = done_details(new)
            if self.reward_mode == "score":
                reward = WIN_REWARD * self._score
            elif self._won():
                reward = WIN_REWARD
        return new.observation(), reward, self._done, self._info(valid=True)

    def _record_before(self, page: Page, kind: str | None, arg: str, target: Clickable) -> None:
        if kind == "search":
            self._searches.append(arg)
        elif target.kind == "link":
            asin = arg.upper()
            self._opened.append(asin)
            self._selected = {}
        elif target.kind == "option":
            self._selected[target.name or "option"] = arg

    def _record_after(self, page: Page) -> None:
        if page.kind == "results":  # remember each listed product's title and price
            keys = {k.upper() for k, c in page.clickables.items() if c.kind == "link"}
            for i, p in enumerate(page.parts):
                if p.upper() in keys:
                    title = page.parts[i + 1] if i + 1 < len(page.parts) else ""
                    price = page.parts[i + 2] if i + 2 < len(page.parts) else ""
                    self._seen[p.upper()] = {"title": title, "price": price if price.startswith("$") else ""}
        elif page.kind == "index":
            self._selected = {}

    def _won(self) -> bool:
        return self._score is not None and self._score >= 1.0 - 1e-9

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"won": self._won(), "action_valid": valid, "score": float(self._score or 0.0)}

    def admissible_actions(self) -> list[str] | None:
        if self._page is None:
            return None
        if self._done:
            return []
        actions = [SEARCH_PLACEHOLDER] if self._page.search is not None else []
        return actions + [f"click[{k}]" for k in self._page.clickables]

    def expert_action(self) -> str | None:
        """WebShop has human demonstrations only; no programmatic expert."""
        return None

    def privileged_state(self) -> dict[str, Any]:
        if self._page is None:
            return {}
        bought = self._details.get("bought") or {}
        asin = str(bought.get("asin") or (self._opened[-1] if self._opened else "")).upper()
        return WebShopPrivilegedState(
            env="webshop",
            task_id=self.task_id,
            goal_index=self._goal,
            instruction=self.task_description,
            page=self._page.kind,
            searches=list(self._searches),
            opened=list(self._opened),
            selected_options=dict(self._selected),
            seen={a: dict(v) for a, v in self._seen.items()},
            history=[dict(h) for h in self._history],
            purchased=self._done,
            bought_title=(self._seen.get(asin) or {}).get("title") if self._done else None,
            score=self._score,
            won=self._won(),
            goal=self._details.get("goal"),
            bought=self._details.get("bought"),
            reward_info=self._details.get("reward_info"),
        ).to_dict()

    def close(self) -> None:
        """Nothing to release: the HTTP client is shared by all episodes of the process."""
