"""The WebShop client against a local stand-in of WebShop's site (server.py): full and partial scores,
invalid actions, pagination, faults (no server, timeout, HTTP 500), the rollout ending only a faulty
episode (and the oracle on its episodes), and the presets."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from seedrl.envs.base import WIN_REWARD
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class, make_env
from seedrl.envs.webshop import env as ws
from seedrl.envs.webshop.oracle import hindsight
from seedrl.envs.webshop.state import WebShopPrivilegedState
from seedrl.errors import SeedRLError
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from tests.envs.helpers import trajectory
from tests.envs.webshop.server import GOALS, WebShopTestServer

SPLITS = ("train", "valid_seen", "valid_unseen")


WIN_PATH = ["search[bright citrus deodorant]", "click[b0deod0001]", "click[3 ounce]", "click[bright citrus]",
            "click[buy now]"]


@pytest.fixture(scope="module")
def server():
    with WebShopTestServer() as s:
        yield s


def env_for(server: WebShopTestServer, **kw: Any) -> ws.WebShopEnv:
    return make_env("webshop", server_url=server.url, **kw)


def play(env: ws.WebShopEnv, actions: list[str]) -> list[tuple[str, float, bool, dict[str, Any]]]:
    return [env.step(a) for a in actions]


def words(text: str) -> int:
    return len(text.split())


def _traj(actions: list[str | None], won: bool = False, valid: list[bool] | None = None) -> Trajectory:
    return trajectory(actions, valid, won, task_id="goal-0", task_description=GOALS[0]["instruction_text"])


# -- panels -------------------------------------------------------------------------------------
def test_panels_follow_webshop_splits_and_never_contact_the_server() -> None:
    panels = {s: build_panel("webshop", s, server_url="http://127.0.0.1:9") for s in SPLITS}
    assert [len(panels[s]) for s in SPLITS] == [512, 200, 500]
    assert panels["valid_unseen"].task_ids[:2] == ("goal-0", "goal-1") and panels["valid_unseen"].task_ids[-1] == "goal-499"
    assert panels["valid_seen"].task_ids[0] == "goal-500" and panels["train"].task_ids[0] == "goal-1500"
    ids = {s: set(p.task_ids) for s, p in panels.items()}
    assert not ids["train"] & ids["valid_seen"] and not ids["train"] & ids["valid_unseen"]
    assert not ids["valid_seen"] & ids["valid_unseen"]
    assert build_panel("webshop", "valid_unseen").hash == build_panel("webshop", "valid_unseen").hash
    assert env_class("webshop").task_type("goal-17") == "goal"
    with pytest.raises(SeedRLError, match=r"\[0, 500\]"):
        build_panel("webshop", "valid_unseen", 501)
    with pytest.raises(SeedRLError, match="server_url"):
        build_panel("webshop", "train", server_ur="x")
    with pytest.raises(SeedRLError, match="score, won"):
        make_env("webshop", reward_mode="partial")
    with pytest.raises(SeedRLError, match="goal-<index>"):
        ws.parse_task_id("webshop-3")


# -- episodes -----------------------------------------------------------------------------------
def test_search_click_options_buy_gives_full_score(server: WebShopTestServer) -> None:
    env = env_for(server)
    obs = env.reset("goal-0")
    assert env.task_description == GOALS[0]["instruction_text"]
    assert obs == "'Search'"  # verl-agent's first page: everything up to the instruction is dropped
    assert env.admissible_actions() == ["search[<your query>]"]

    obs, reward, done, info = env.step(WIN_PATH[0])
    assert (reward, done, info) == (0.0, False, {"won": False, "action_valid": True, "score": 0.0})
    assert obs.startswith("'Back to Search' [SEP] 'Page 1 (Total results: ") and "'B0DEOD0001' [SEP] 'Bright Citrus" in obs
    assert "not visible" not in obs and "WebShop" not in obs  # scripts, head and the logo never show
    adm = env.admissible_actions()
    assert adm[:2] == ["click[back to search]", "click[next >]"] and "click[b0deod0001]" in adm
    assert "search[<your query>]" not in adm

    obs, *_ = env.step("click[B0DEOD0001]")  # ASINs are matched case-insensitively, as WebShop lower-cases
    assert "'Price: $10.99'" in obs and "'size' [SEP] '2 ounce' [SEP] '3 ounce'" in obs
    assert env.admissible_actions() == ["click[back to search]", "click[< prev]", "click[description]",
                                        "click[features]", "click[reviews]", "click[buy now]", "click[2 ounce]",
                                        "click[3 ounce]", "click[bright citrus]", "click[ginger fresh]"]
    play(env, WIN_PATH[2:4])
    obs, reward, done, info = env.step("click[buy now]")
    assert done and info == {"won": True, "action_valid": True, "score": 1.0} and reward == WIN_REWARD
    assert "'Your score (min 0.0, max 1.0)' [SEP] '1.0'" in obs
    assert "sensitive skin" not in obs  # the done page's hidden goal fields stay hidden
    assert env.admissible_actions() == []
    assert env.step("click[buy now]") == (ws.GAME_OVER_OBS, 0.0, True, {"won": True, "action_valid": False,
                                                                        "score": 1.0})
    ps = env.privileged_state()
    assert WebShopPrivilegedState.parse(ps).to_dict() == ps
    assert ps["env"] == "webshop" and ps["goal_index"] == 0 and ps["won"] and ps["purchased"]
    assert ps["searches"] == ["bright citrus deodorant"] and ps["opened"] == ["B0DEOD0001"]
    assert ps["goal"]["attributes"] == ["sensitive skin"] and ps["goal"]["options"] == ["3 ounce", "bright citrus"]
    assert ps["goal"]["price_upper"] == 50.0 and ps["goal"]["asin"] == "B0DEOD0001"
    assert ps["bought"]["options"] == {"size": "3 ounce", "scent": "bright citrus"}
    assert ps["reward_info"]["r_option"] == 1.0 and ps["bought_title"].startswith("Bright Citrus")
    assert env.expert_action() is None

    # the oracle turns the win into a plan
    summary, skill = hindsight(_traj(WIN_PATH, won=True), ps)
    assert "search[bright citrus deodorant]" in skill and "'3 ounce'" in skill and "Buy Now" in skill
    assert words(skill) <= 45 and "B0DEOD0001" in summary


def test_wrong_product_gives_partial_score(server: WebShopTestServer) -> None:
    for mode, expected_reward in (("won", 0.0), ("score", WIN_REWARD * 0.5)):
        env = env_for(server, reward_mode=mode)
        env.reset("goal-0")
        steps = play(env, ["search[deodorant]", "click[b0deod0002]", "click[3 ounce]", "click[buy now]"])
        _, reward, done, info = steps[-1]
        assert done and not info["won"] and info["score"] == pytest.approx(0.5) and reward == pytest.approx(expected_reward)
    ps = env.privileged_state()
    assert not ps["won"] and ps["reward_info"]["r_option"] == 0.5
    summary, skill = hindsight(_traj(["search[deodorant]", "click[b0deod0002]", "click[3 ounce]", "click[buy now]"]), ps)
    assert "'bright citrus'" in skill and "Buy Now" in skill and words(skill) <= 45
    assert "B0DEOD0002" in summary and "'3 ounce'" in summary


def test_invalid_actions_change_nothing_and_send_nothing(server: WebShopTestServer) -> None:
    env = env_for(server)
    env.reset("goal-0")
    env.step("search[deodorant]")
    adm, page, before = env.admissible_actions(), env.privileged_state()["page"], len(server.requests)
    for bad in ("click[no such button]", "search[shoes]", "buy it", "click[]", "click[search]", ""):
        obs, reward, done, info = env.step(bad)
        assert (reward, done, info["action_valid"]) == (0.0, False, False), bad
        assert obs.startswith(ws.INVALID_ACTION_OBS) and "'Back to Search'" in obs
    assert len(server.requests) == before  # nothing was sent
    assert env.admissible_actions() == adm and env.privileged_state()["page"] == page == "results"
    assert env.step("click[back to search]")[0] == "'Search'"
    for bad in ("search[]", "search[<your query>]", "click[next >]"):
        assert env.step(bad)[3]["action_valid"] is False, bad
    assert [h["valid"] for h in env.privileged_state()["history"]].count(False) == 9


def test_pagination_sub_pages_and_back(server: WebShopTestServer) -> None:
    env = env_for(server)
    env.reset("goal-0")
    obs = env.step("search[deodorant]")[0]
    assert "Total results: 13" in obs and obs.count("'B0") == 10
    obs = env.step("click[next >]")[0]
    assert "'Page 2 (Total results: 13)'" in obs and obs.count("'B0") == 3 and "click[< prev]" in env.admissible_actions()
    env.step("click[< prev]")
    obs = env.step("click[b0deod0001]")[0]
    obs = env.step("click[description]")[0]
    assert obs == "'Back to Search' [SEP] '< Prev' [SEP] 'A gentle deodorant & body care for sensitive skin.'"
    obs = env.step("click[< prev]")[0]
    assert "'Buy Now'" in obs
    assert env.step("click[back to search]")[0] == "'Search'"
    assert env.admissible_actions() == ["search[<your query>]"]


# -- faults -------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_is_a_one_line_error_with_the_setup_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("WEBSHOP_URL", url)
    env = make_env("webshop")
    assert env.server_url == url
    with pytest.raises(SeedRLError) as exc:
        env.reset("goal-0")
    msg = str(exc.value)
    assert "\n" not in msg and url in msg
    for needle in ("princeton-nlp/WebShop", "setup.sh -d small", "web_agent_site.app", "WEBSHOP_URL"):
        assert needle in msg
    monkeypatch.delenv("WEBSHOP_URL")
    assert make_env("webshop").server_url == ws.DEFAULT_URL


def test_timeout_and_server_errors_end_only_that_episode(server: WebShopTestServer) -> None:
    env = env_for(server, timeout_s=0.3)
    env.reset("goal-0")
    t0 = time.perf_counter()
    with pytest.raises(SeedRLError, match="did not answer .* within 0.3s"):
        env.step("search[slow deodorant]")
    assert time.perf_counter() - t0 < 3
    env.reset("goal-0")
    assert "Total results: 13" in env.step("search[3 ounce / deodorant]")[0]  # "/" would break the site's routing
    env.reset("goal-0")
    with pytest.raises(SeedRLError, match="HTTP 500"):
        env.step("search[crash]")
    assert env.reset("goal-1").startswith("'Search'")  # the next episode plays normally
    with pytest.raises(SeedRLError, match="failed to open goal 7"):
        env.reset("goal-7")  # beyond the server's goal list


def test_rollout_ends_only_the_faulty_episode(server: WebShopTestServer, tiny_tokenizer) -> None:
    from seedrl.rollout.backends import Generation
    from seedrl.rollout.runner import RolloutSettings, rollout

    scripts = [WIN_PATH, ["search[slow deodorant]"] * 5, ["click[nothing]"] * 5]

    class Backend:
        calls = 0

        def sync_weights(self, model: Any) -> None:
            pass

        def generate(self, prompts, params, seed):
            turn, Backend.calls = Backend.calls, Backend.calls + 1
            out = []
            for i in range(len(prompts)):
                live = [k for k in range(3) if turn == 0 or k != 1][i]  # episode 1 dies on turn 0
                text = f"<think>go</think><action>{scripts[live][turn]}</action>"
                ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
                out.append(Generation(ids, [0.0] * len(ids), text, "stop"))
            return out

    settings = RolloutSettings(env_title=env_class("webshop").title, max_steps=5, history_length=2,
                               step_timeout_s=10.0, env_workers=3)
    trajs = rollout(Backend(), tiny_tokenizer, lambda: env_for(server, timeout_s=0.5), ["goal-0"], 3, settings, seed=0)
    won, slow, lost = trajs
    assert won.won and won.error is None and won.episode_reward == WIN_REWARD and len(won.steps) == 5
    assert slow.truncated and "did not answer" in slow.error and len(slow.steps) == 1
    assert not lost.won and lost.truncated and lost.num_invalid == 5 and lost.error is None
    assert "Your task is to: " + GOALS[0]["instruction_text"] in won.steps[0].messages[0]["content"]
    assert "search[<your query>]" in won.steps[0].messages[0]["content"]

    oracle = OracleAnalyzer()  # the env is inferred from the privileged state
    r_won, r_lost = oracle.analyze([won, lost])
    assert r_won.error is None and "search[bright citrus deodorant]" in r_won.skill
    assert r_lost.error is None and "click[" in r_lost.skill and "admissible" in r_lost.skill


def test_presets_are_twins_for_a_3b_model() -> None:
    from pathlib import Path

    from seedrl.config import TrainConfig, load_config

    root = Path(__file__).parents[3] / "configs"
    seed = load_config(TrainConfig, root / "webshop_seed.yaml").model_dump()
    grpo = load_config(TrainConfig, root / "webshop_grpo.yaml").model_dump()
    assert seed["algo"].pop("name") == "seed" and grpo["algo"].pop("name") == "grpo"
    seed.pop("run_dir"), grpo.pop("run_dir")
    assert seed == grpo
    assert seed["model"]["name"] == "Qwen/Qwen2.5-3B-Instruct" and seed["env"]["name"] == "webshop"
    assert (seed["env"]["max_steps"], seed["env"]["history_length"]) == (15, 2)


def test_webshop_preset_normalises_advantages_by_the_mean_as_seeds_launcher() -> None:
    """Issue 33, item 2: SEED's WebShop launcher (``_common/webshop.sh``) sets ``SEED_MODE=mean_norm``:
    the group mean is subtracted, there is no division by the std. The GRPO twin follows (twins)."""
    from pathlib import Path

    from seedrl.config import TrainConfig, load_config

    root = Path(__file__).parents[3] / "configs"
    for name in ("webshop_seed.yaml", "webshop_grpo.yaml"):
        assert load_config(TrainConfig, root / name).algo.adv_norm == "mean", name
