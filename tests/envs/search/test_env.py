"""The search env: gold paths, observations, parsing, answers, the step instruction, datasets, latency."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from seedrl.agent.prompts import TURN_LINE, build_step_prompt
from seedrl.envs.base import WIN_REWARD
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class, make_env
from seedrl.envs.search import qa_world as qw
from seedrl.envs.search.env import (
    INVALID_TEXT,
    SearchEnv,
    exact_match,
    f1_score,
    normalize_answer,
    parse_search_action,
)
from seedrl.envs.search.retrievers import BM25Retriever
from seedrl.envs.search.state import SearchDatasetState, SearchPrivilegedState, SearchWorldState
from seedrl.errors import SeedRLError
from tests.envs.helpers import SPLITS
from tests.envs.search.common import play

pytest.importorskip("bm25s")  # the generated world is searched with in-process BM25 (seedrl[envs])


# -- the generated world ------------------------------------------------------------------------
@pytest.mark.parametrize("split", SPLITS)
def test_gold_path_wins_every_hop_count(split: str) -> None:
    env = make_env("search")
    world = qw.get_world()
    for k in qw.HOPS:
        for tid in world.splits[split][k][:6]:
            traj = play(env, tid)
            ps = traj.privileged_state
            assert SearchPrivilegedState.parse(ps).to_dict() == ps and isinstance(SearchPrivilegedState.parse(ps), SearchWorldState)
            assert traj.won and traj.episode_reward == WIN_REWARD, tid
            assert len(traj.steps) == k + 1  # one search per hop, then the answer
            assert ps["queries"] == ps["expert_queries"] and ps["all_evidence_retrieved"]
            assert ps["failed_hop"] is None and ps["em"] and ps["f1"] == 1.0
            assert env.expert_action() is None


def test_observation_is_search_r1_format() -> None:
    env = make_env("search")
    tid = qw.get_world().splits["train"][2][0]
    first = env.reset(tid)
    assert first == f"Question: {env._question_text}" and env.task_description.endswith(env._question_text)
    obs, reward, done, info = env.step(env.expert_action())
    assert obs.startswith('<information>Doc 1(Title: "') and obs.endswith("</information>")
    assert obs.count("Doc ") <= 3 and reward == 0.0 and not done and info["action_valid"] and info["searches"] == 1
    p = BM25Retriever(qw.get_world().docs).search("anything zzz", 3)
    assert p == []  # no term in common: nothing, not three arbitrary documents
    assert env.step("<search>zzzz qqqq</search>")[0] == "<information>No results found for this query.</information>"


def test_bad_task_ids_and_kwargs() -> None:
    env = make_env("search")
    for bad in ("hop4-s00001", "hop2-42", "6x6-b1-s00001"):
        with pytest.raises(SeedRLError, match="task id"):
            env.reset(bad)
    with pytest.raises(SeedRLError, match="not in the world"):
        env.reset("hop1-s09999")
    with pytest.raises(SeedRLError, match="topk"):
        make_env("search", top_k=3)
    with pytest.raises(SeedRLError, match="retriever_url"):
        make_env("search", retriever="http")
    with pytest.raises(SeedRLError, match="has .* train questions"):
        build_panel("search", "train", 5000)
    with pytest.raises(SeedRLError, match="reset"):
        make_env("search").step("<search>x</search>")


# -- answers and actions ------------------------------------------------------------------------
def test_answer_normalisation() -> None:
    assert normalize_answer("  The Eiffel Tower!! ") == "eiffel tower"
    assert normalize_answer("An apple, a pear") == "apple pear"
    assert normalize_answer("Theory") == "theory"  # articles only as whole words
    assert exact_match("the kelbra.", ["Kelbra"]) and exact_match("1931", ["x", "1931"])
    assert not exact_match("Kelbra city", ["Kelbra"])
    assert f1_score("Tavo", ["Tavo Brisk"]) == pytest.approx(2 / 3)
    assert f1_score("nothing", ["Tavo Brisk"]) == 0.0 and f1_score("x", ["y", "x"]) == 1.0


def test_parse_action_and_invalid_actions() -> None:
    env = make_env("search")
    p = env.parse_action
    assert p("<think>hm</think><search> Tavo\n Brisk </search>") == "<search>Tavo Brisk</search>"
    assert p("<ANSWER>Kelbra</ANSWER>") == "<answer>Kelbra</answer>"
    assert p("<search>a</search> then <answer>b</answer>") == "<search>a</search>"  # first block, as Search-R1
    assert p("<action><search>a</search></action>") == "<search>a</search>"
    for bad in ("", "<think>only thinking</think>", "<search></search>", "<search>unclosed", "<action>up</action>",
                "<answer>" + "x" * 400 + "</answer>", None):
        assert p(bad) is None, bad  # type: ignore[arg-type]
    assert parse_search_action("<search>x</answer>") is None
    tid = qw.get_world().splits["train"][2][0]
    first = env.reset(tid)
    for bad in ("jump", "<think>x</think>", "search[]"):
        obs, reward, done, info = env.step(bad)
        assert not info["action_valid"] and reward == 0.0 and not done and obs == f"{INVALID_TEXT}\n{first}"
    assert env.privileged_state()["queries"] == []
    obs, _, _, info = env.step(f"search[{env.privileged_state()['expert_queries'][0]}]")  # bracket form too
    assert info["action_valid"] and obs.startswith("<information>")
    obs, reward, done, info = env.step("answer[definitely wrong]")
    assert done and reward == 0.0 and not info["won"] and info["answered"]
    assert env.step("<answer>x</answer>")[1:3] == (0.0, True)  # over: no second reward


def test_max_turns_ends_the_episode_unanswered() -> None:
    env = make_env("search", max_turns=2)
    env.reset("hop3-s00000")
    assert env.step("<search>a b c</search>")[2] is False
    _, reward, done, info = env.step("nonsense")
    assert done and info["truncated"] and reward == 0.0 and not info["won"]
    assert env.privileged_state()["truncated"]


def test_prompt_carries_the_search_instruction() -> None:
    """This project's layout (``prompt_style: seedrl``, the tiny presets'; the default is verl-agent's,
    tests/agent/test_verl_agent_prompt.py)."""
    env = make_env("search", prompt_style="seedrl")
    assert env_class("search").instruction.startswith(TURN_LINE)
    obs = env.reset("hop2-s00000")
    text = build_step_prompt(env.title, env.task_description, obs, instruction=env.instruction)
    assert text.startswith("You are an expert agent playing Search-QA.\nYour task is to: answer this question: ")
    assert "<search> your query </search>" in text and "<answer> </answer>" in text
    assert text.rstrip().endswith("<answer>Beijing</answer>.") and "<action>" not in text
    assert env.format_response("<search>x</search>") == "<think></think><search>x</search>"
    assert env.parse_action(env.format_response(env.expert_action())) == env.expert_action()


# -- Search-R1 datasets -------------------------------------------------------------------------
def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dataset_loader_panels_and_expert(tmp_path: Path) -> None:
    corpus = _write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "0", "contents": '"Kelbra"\nKelbra is the largest port of Velmora.'},
        {"id": "1", "contents": '"Velmora"\nVelmora is a small island nation.'},
        {"id": "2", "contents": '"Zentrix"\nZentrix was founded by Tavo Brisk.'}])
    train = _write_jsonl(tmp_path / "train.jsonl", [
        {"id": "a", "question": "what is the largest port of velmora?", "golden_answers": ["Kelbra"],
         "data_source": "nq"},
        {"id": "b", "question": "who founded zentrix?", "golden_answers": ["Tavo Brisk"], "data_source": "hotpotqa"}])
    test = _write_jsonl(tmp_path / "test.jsonl", [
        {"question": "largest port of velmora?", "golden_answers": ["Kelbra"], "data_source": "nq"},
        {"prompt": [{"role": "user", "content": "Answer the given question. ... Question: who founded zentrix?\n"}],
         "reward_model": {"ground_truth": {"target": ["Tavo Brisk", "T. Brisk"]}, "style": "rule"},
         "data_source": "bamboogle"},
        {"question": "what is velmora?", "answer": "an island nation", "data_source": "PopQA"}])
    kw = {"data_path": str(train), "test_data_path": str(test), "corpus_path": str(corpus)}
    tr = build_panel("search", "train", 2, **kw).task_ids
    assert sorted(tr) == ["hotpotqa-tr000001", "nq-tr000000"]
    assert build_panel("search", "valid_seen", 1, **kw).task_ids == ("nq-te000000",)  # train sources = seen
    assert sorted(build_panel("search", "valid_unseen", 2, **kw).task_ids) == ["bamboogle-te000001", "popqa-te000002"]
    assert build_panel("search", "train", 2, **kw).hash == build_panel("search", "train", 2, **kw).hash
    with pytest.raises(SeedRLError, match="has 1 questions"):
        build_panel("search", "valid_seen", 5, **kw)
    env = make_env("search", **kw)
    for tid in tr + ("bamboogle-te000001",):
        traj = play(env, tid)
        assert traj.won and len(traj.steps) == 2, tid
        ps = traj.privileged_state
        assert isinstance(SearchPrivilegedState.parse(ps), SearchDatasetState)
        assert ps["mode"] == "dataset" and ps["queries"] == [ps["question"]] and ps["gold_evidence"] is None
    assert ps["gold_answers"] == ["Tavo Brisk", "T. Brisk"] and ps["answer_in_results"]
    assert SearchEnv.task_type("bamboogle-te000001") == "bamboogle" and SearchEnv.task_type("hop2-s00001") == "hop2"
    assert exact_match("T Brisk", ps["gold_answers"])


def test_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(SeedRLError, match="retriever_url.*corpus_path"):
        make_env("search", data_path="x.jsonl")
    with pytest.raises(SeedRLError, match="not found"):
        build_panel("search", "train", retriever_url="http://127.0.0.1:9", data_path=str(tmp_path / "none.jsonl"))
    with pytest.raises(SeedRLError, match="test_data_path"):
        build_panel("search", "valid_seen", retriever_url="http://127.0.0.1:9", data_path=str(tmp_path / "a.jsonl"))
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "q?"}])
    with pytest.raises(SeedRLError, match="golden_answers"):
        build_panel("search", "train", 1, retriever_url="http://127.0.0.1:9", data_path=str(bad))
    with pytest.raises(SeedRLError, match="contents"):
        make_env("search", data_path=str(bad), corpus_path=str(_write_jsonl(tmp_path / "c.jsonl", [{"x": 1}]))) \
            .retriever  # noqa: B018
    # an empty corpus fails when the panel is built, before any training, not at the first search
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(SeedRLError, match="is empty: it holds no document line"):
        build_panel("search", "train", 1, data_path=str(bad), corpus_path=str(tmp_path / "empty.jsonl"))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        try:
            import pandas  # noqa: F401
        except ImportError:
            (tmp_path / "d.parquet").write_bytes(b"PAR1")
            with pytest.raises(SeedRLError, match="pyarrow"):
                build_panel("search", "train", 1, retriever_url="http://127.0.0.1:9",
                            data_path=str(tmp_path / "d.parquet"))


def test_step_latency() -> None:
    env = make_env("search")
    ids = build_panel("search", "valid_unseen", 30).task_ids
    steps, t0 = 0, time.perf_counter()
    for tid in ids:
        env.reset(tid)
        done = False
        while not done:
            _, _, done, _ = env.step(env.expert_action())
            steps += 1
    per_step = (time.perf_counter() - t0) / steps
    print(f"\nsearch (BM25, {len(qw.get_world().docs)} docs) step latency: {per_step * 1e3:.3f} ms over {steps} steps")
    assert per_step < 0.05


def test_qwen_search_presets_follow_seeds_search_launcher() -> None:
    """Issue 33, item 3: SEED's search launcher (``_common/search.sh``) trains 150 steps on 128
    questions x group 8 with mini-batch 512 step samples (verl-agent keeps ``rollout.n`` 1, so verl
    does not multiply it by the group), micro-batch 16, lr 1e-6 warmed up over 10 % of the steps, KL
    0.001, no entropy bonus and an invalid-action penalty of 0.01."""
    from seedrl.config import TrainConfig, load_config

    root = Path(__file__).parents[3] / "configs"
    for name in ("search_qwen_seed.yaml", "search_qwen_grpo.yaml"):
        c = load_config(TrainConfig, root / name)
        assert (c.rollout.tasks_per_batch, c.rollout.group_size, c.iterations) == (128, 8, 150), name
        assert (c.optim.mini_batch_size, c.optim.micro_batch_size, c.optim.warmup_ratio) == (512, 16, 0.1), name
        assert (c.optim.warmup_steps, c.optim.lr) == (0, 1e-6), name
        assert (c.algo.kl_coef, c.algo.entropy_coef, c.algo.invalid_penalty) == (0.001, 0.0, 0.01), name
