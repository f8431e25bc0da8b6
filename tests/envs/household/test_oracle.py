"""Household oracle: the hindsight skill says where the object was and where it was not, in one wording
that parses back; fact_agreement checks those facts; counterfactual names another legal, plausible
receptacle without touching the env, and None when there is none."""

from __future__ import annotations

import random

from seedrl.envs.household import oracle
from seedrl.envs.household.env import HouseholdEnv, play_searcher
from seedrl.envs.household.world import OPENABLE, generate_game, rclass, training_prior
from seedrl.envs.oracle import norm
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import make_env
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from tests.envs.helpers import check_skill, play_scripted

ENV = "household"


def ids(split: str = "valid_seen") -> list[str]:
    return list(build_panel(ENV, split).task_ids)


def played(tid: str, actions: list[str | None]):
    env = make_env(ENV)
    return play_scripted(env, actions, lambda: env.reset(tid), tid)


def a_miss() -> tuple[str, list[str]]:
    """A game the prior-order searcher loses at 4 steps after checking two wrong receptacles, never
    going to the right one."""
    for tid in ids("valid_unseen"):
        actions, won = play_searcher(tid, "prior", 4)
        visits = [a.removeprefix("go to ") for a in actions if a.startswith("go to ")]
        if not won and len(visits) >= 2 and generate_game(tid).location not in visits:
            return tid, actions
    raise AssertionError("no such game")


# -- hindsight ------------------------------------------------------------------------------------
def test_a_won_episode_names_the_place_alone() -> None:
    tid = ids()[0]
    g = generate_game(tid)
    traj = played(tid, play_searcher(tid, "oracle")[0])
    [r] = OracleAnalyzer(env_name=ENV).analyze([traj])
    skill = check_skill(r)
    assert skill == f"The {g.object_class} was in {g.location}. Look for a {g.object_class} in the {rclass(g.location)} first."
    assert r.summary.startswith("Succeeded after")
    assert oracle.fact_agreement(skill, traj.privileged_state) is True


def test_a_lost_episode_also_names_where_it_was_not() -> None:
    tid, actions = a_miss()
    g = generate_game(tid)
    traj = played(tid, actions + ["look"])
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    checked = traj.privileged_state["checked"]
    assert len(checked) >= 2 and g.location not in checked
    names = ", ".join(checked[:-1]) + " or " + checked[-1]
    assert skill == (f"The {g.object_class} was in {g.location} (not in {names}, which you checked). "
                     f"Look for a {g.object_class} in the {rclass(g.location)} first.")
    assert "never checked" in summary and summary.startswith("Failed after 5 steps")
    assert oracle.parse_facts(skill) == ([(g.object_class, g.location)], checked)
    assert oracle.fact_agreement(skill, traj.privileged_state) is True
    check_skill(OracleAnalyzer(env_name=ENV).analyze([traj])[0])


def test_every_hindsight_skill_of_a_panel_agrees_with_its_state() -> None:
    for policy in ("prior", "random"):
        for tid in ids("valid_unseen")[:40]:
            traj = played(tid, play_searcher(tid, policy, 4)[0])
            _, skill = oracle.hindsight(traj, traj.privileged_state)
            assert oracle.fact_agreement(skill, traj.privileged_state) is True, skill


def test_empty_or_foreign_states_fall_back() -> None:
    traj = played(ids()[0], ["look"])
    assert oracle.hindsight(traj, {}) == (None, None)
    assert oracle.hindsight(traj, {"env": "sokoban"}) == (None, None)
    assert oracle.fact_agreement("The apple was in fridge 1.", {}) is None


# -- fact_agreement -------------------------------------------------------------------------------
def test_fact_agreement_hand_cases() -> None:
    tid = next(t for t in ids() if generate_game(t).object_class == "apple")
    g = generate_game(tid)
    ps = played(tid, ["look"]).privileged_state
    other, third = [r for r in g.receptacles if r != g.location][:2]
    true = f"The apple was in {g.location}. Look for a apple in the {rclass(g.location)} first."
    assert oracle.fact_agreement(true, ps) is True
    assert oracle.fact_agreement(true.upper(), ps) is True  # case does not matter
    assert oracle.fact_agreement(f"The apple was in {g.location} (not in {other} or {third}, which you checked).",
                                 ps) is True
    assert oracle.fact_agreement(f"The apple was in {other}. Look for a apple in the {rclass(other)} first.",
                                 ps) is False  # wrong place
    assert oracle.fact_agreement(f"The apple was in {other} (not in {g.location}, which you checked).",
                                 ps) is False
    assert oracle.fact_agreement(f"The apple was in {g.location} (not in {other} or {g.location}, which you "
                                 "checked).", ps) is False  # a wrong "not in"
    assert oracle.fact_agreement(f"The mug was in {g.location}.", ps) is False  # another object
    assert oracle.fact_agreement(f"Look for a apple in the {rclass(g.location)} first.", ps) is None  # advice only
    assert oracle.fact_agreement("When the goal is not reached after a few actions, stop and re-read the task.",
                                 ps) is None  # a generic skill


# -- counterfactual -------------------------------------------------------------------------------
def _snapshot(env: HouseholdEnv):
    return env.privileged_state(), env.admissible_actions(), {r: list(v) for r, v in env.contents.items()}


def _check(env: HouseholdEnv, default: str, seed: int = 0) -> tuple[str, str]:
    before = _snapshot(env)
    made = oracle.counterfactual(env, default, random.Random(seed))
    assert made is not None
    skill, named = made
    assert _snapshot(env) == before  # the env is untouched
    assert named in env.admissible_actions() and norm(named) != norm(default)
    obj = env.game.object_class
    where = named.removeprefix("go to ")
    assert skill == f"The {obj} was in {where}. Look for a {obj} in the {rclass(where)} first."
    assert training_prior(0)[obj].get(rclass(where), 0) > 0  # a plausible place
    assert where not in env.checked and where != env.location
    assert oracle.counterfactual(env, default, random.Random(seed)) == made  # rng-determined
    return skill, named


def test_counterfactual_names_another_plausible_receptacle_than_the_default() -> None:
    env = make_env(ENV)
    for tid in ids()[:20]:
        env.reset(tid)
        g = env.game
        for r in g.receptacles:  # at the start, whichever receptacle the policy would go to
            _, named = _check(env, f"go to {r}")
            assert named != f"go to {r}"
        _check(env, "look")
        _check(env, "  GO TO   " + g.receptacles[0].upper())  # normalised
        assert oracle.counterfactual(env, "go to " + g.receptacles[0], random.Random(0))[1] != "go to " + g.receptacles[0]


def test_counterfactual_at_a_reached_receptacle_goes_elsewhere_until_the_object_is_seen() -> None:
    tid = next(t for t in ids() if rclass(generate_game(t).location) in OPENABLE)
    g = generate_game(tid)
    env = make_env(ENV)
    env.reset(tid)
    env.step(f"go to {g.location}")
    _, named = _check(env, f"open {g.location}")
    assert named != f"go to {g.location}"
    env.step(f"open {g.location}")  # the object is in sight: a skill placing it elsewhere would contradict it
    assert oracle.counterfactual(env, f"take {g.target} from {g.location}", random.Random(0)) is None
    env.step(f"go to {next(r for r in g.receptacles if r != g.location)}")
    assert oracle.counterfactual(env, f"go to {g.location}", random.Random(0)) is None


def test_counterfactual_is_none_when_every_other_receptacle_is_checked_or_the_game_is_won() -> None:
    tid = ids()[3]
    g = generate_game(tid)
    env = make_env(ENV)
    env.reset(tid)
    last = g.location  # every other receptacle checked: the object is still unseen
    for r in g.receptacles:
        if r == last:
            continue
        env.step(f"go to {r}")
        if rclass(r) in OPENABLE:
            env.step(f"open {r}")
    assert set(env.checked) == set(g.receptacles) - {last}
    assert oracle.counterfactual(env, f"go to {last}", random.Random(0)) is None
    assert oracle.counterfactual(env, "look", random.Random(0)) == (
        f"The {g.object_class} was in {last}. Look for a {g.object_class} in the {rclass(last)} first.", f"go to {last}")
    env.reset(tid)
    for a in play_searcher(tid, "oracle")[0]:
        env.step(a)
    assert env.won and oracle.counterfactual(env, "look", random.Random(0)) is None


def test_a_counterfactual_skill_is_worded_as_a_hindsight_skill() -> None:
    """The same words when they say the same: the hindsight skill of a won episode at a receptacle equals the
    counterfactual skill naming that receptacle."""
    env = make_env(ENV)
    for tid in ids()[:30]:
        env.reset(tid)
        skill, named = oracle.counterfactual(env, "look", random.Random(1))
        if named == f"go to {env.game.location}":
            traj = played(tid, play_searcher(tid, "oracle")[0])
            assert oracle.hindsight(traj, traj.privileged_state)[1] == skill
            return
    raise AssertionError("no counterfactual named the true receptacle in 30 games")


# -- the observed view: Stage-1 labels ---------------------------------------------------------------
def test_observed_view_states_only_what_the_episode_saw() -> None:
    import pytest

    from seedrl.errors import SeedRLError

    tid, actions = a_miss()
    g = generate_game(tid)
    traj = played(tid, actions + ["look"])
    checked = traj.privileged_state["checked"]
    summary, skill = oracle.observed_hindsight(traj, traj.privileged_state)
    names = ", ".join(checked[:-1]) + " or " + checked[-1]
    assert skill == (f"The {g.object_class} was not in {names}, which you checked. "
                     f"Look for a {g.object_class} elsewhere first.")
    assert g.location not in skill and oracle.parse_facts(skill) == ([], [norm(c) for c in checked])
    assert oracle.fact_agreement(skill, traj.privileged_state) is True
    wrong = skill.replace(checked[0], g.location, 1)  # "not in <where it was>": contradicts the state
    assert oracle.fact_agreement(wrong, traj.privileged_state) is False
    # a found object: the observed view is the privileged one
    won = played(ids()[0], play_searcher(ids()[0], "oracle")[0])
    assert oracle.observed_hindsight(won, won.privileged_state) == oracle.hindsight(won, won.privileged_state)
    # nothing checked: nothing observed, the generic skill
    none = played(tid, ["look"])
    assert oracle.observed_hindsight(none, none.privileged_state) == (None, None)
    [r] = OracleAnalyzer(env_name=ENV, view="observed").analyze([traj])
    assert r.skill == skill
    [r] = OracleAnalyzer(env_name=ENV).analyze([traj])
    assert g.location in r.skill  # the privileged view names the unseen place
    with pytest.raises(SeedRLError, match="no observed view"):
        OracleAnalyzer(env_name="sokoban", view="observed")
