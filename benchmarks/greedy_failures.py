"""Why a policy's greedy episodes fail, and whether sampling hides it (the GRPO ladder).

    python benchmarks/greedy_failures.py --model runs/demo/sft/model --config configs/demo_sokoban.yaml \\
        --split valid_seen --num-tasks 32 --samples 8

For each of the first ``--num-tasks`` rooms of a sokoban panel, plays the policy greedily and, at
every state, scores the four move responses to read its distribution over moves. A greedy failure is
a *loop* (it revisits a state: a deterministic Markov policy then repeats forever), a *deadlock* (no
plan left) or other; the script prints the first state where the greedy move is not optimal, with the
probability of the optimal moves there and of the greedy one. Then it plays ``--samples`` episodes of
each room at the run's rollout temperature, as RL does, and prints their win rate and length on the
rooms greedy wins and on those it loses: if sampled play mostly wins the rooms greedy loses, the
outcome reward says little about the move greedy gets wrong.
"""

from __future__ import annotations

import argparse
import collections

import torch

from seedrl.agent.prompts import build_step_prompt, step_messages
from seedrl.config import TrainConfig, load_config
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class, make_env
from seedrl.envs.sokoban.env import MOVES
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.scoring import batched_logprobs
from seedrl.rollout.backends import HFBackend
from seedrl.rollout.executors import EnvFactory
from seedrl.rollout.runner import encode_messages, rollout
from seedrl.train.collect import rollout_settings


def move_distribution(model, tok, env, obs: str, title: str) -> dict[str, float]:
    """The policy's probability of each move's canonical response, renormalised over the moves."""
    text = build_step_prompt(title, env.task_description, obs, [], 0, 0, env.admissible_actions(), env.instruction,
                             env.prompt_style)
    prompt = encode_messages(tok, step_messages(text))
    resp = [tok(env.format_response(a), add_special_tokens=False)["input_ids"] for a in MOVES]
    with torch.no_grad():
        lp = batched_logprobs(model, [prompt] * len(resp), resp, tok.pad_token_id, len(resp))
    return dict(zip(MOVES, torch.tensor([float(x.sum()) for x in lp]).softmax(0).tolist()))


def optimal_moves(env, kwargs) -> list[str]:
    """The moves from the env's current state that keep an optimal plan (or win at once)."""
    state = env._state
    best = len(env._plan(state) or ())
    out = []
    for a in MOVES:
        probe = make_env("sokoban", **kwargs)
        probe.reset_to_state(state)
        _, _, done, info = probe.step(a)
        plan = probe._plan(probe._state)
        if (done and info.get("won")) or (plan is not None and len(plan) == best - 1):
            out.append(a)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--config", default="configs/demo_sokoban.yaml", help="env and rollout settings")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--num-tasks", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8, help="sampled episodes per room (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(TrainConfig, a.config, [f"model.name={a.model}"])
    kw, max_steps = cfg.env.kwargs, cfg.env.max_steps
    tok = load_tokenizer(a.model)
    model = load_model(a.model, "float32", "cpu", None, 0, tokenizer=tok).eval()
    ids = build_panel("sokoban", a.split, None, **kw).task_ids[:a.num_tasks]
    env, title = make_env("sokoban", **kw), env_class("sokoban").title or "sokoban"
    modes: collections.Counter[str] = collections.Counter()
    greedy_won: dict[str, bool] = {}
    p_opt = []
    for tid in ids:
        obs, seen, wrong = env.reset(tid), set(), None
        for step in range(max_steps):
            dist = move_distribution(model, tok, env, obs, title)
            move = max(dist, key=dist.get)
            good = optimal_moves(env, kw)
            if move not in good and wrong is None:
                wrong = (step, sum(dist[g] for g in good), dist[move])
            seen.add(env._state.key())
            obs, _, done, _ = env.step(move)
            if done:
                break
        greedy_won[tid] = env._won
        if not env._won:
            mode = ("loop" if env._state.key() in seen or len(seen) < max_steps
                    else "deadlock" if env._plan(env._state) is None else "other")
            modes[mode] += 1
            p_opt.append(wrong[1] if wrong else float("nan"))
            print(f"{tid}: {mode}; first non-optimal greedy move at step {wrong[0]}: p(optimal moves) "
                  f"{wrong[1]:.2f}, p(greedy move) {wrong[2]:.2f}" if wrong else f"{tid}: {mode}")
    lost = [t for t in ids if not greedy_won[t]]
    print(f"\ngreedy wins {len(ids) - len(lost)} of {len(ids)}; failures: {dict(modes)}; p(optimal moves) at the "
          f"first wrong greedy move: median {sorted(p_opt)[len(p_opt) // 2]:.2f}" if p_opt else "")
    if a.samples:
        backend = HFBackend(model, tok)
        trajs = rollout(backend, tok, EnvFactory("sokoban", kw), ids, a.samples, rollout_settings(cfg), seed=a.seed)
        for name, rooms in (("greedy-won rooms", set(ids) - set(lost)), ("greedy-lost rooms", set(lost))):
            ts = [t for t in trajs if t.task_id in rooms]
            if ts:
                wins = [t for t in ts if t.won]
                print(f"sampled at temperature {cfg.rollout.temperature}, {a.samples} per room, {name}: win rate "
                      f"{len(wins) / len(ts):.3f}, mean steps of a win "
                      f"{sum(len(t.steps) for t in wins) / max(1, len(wins)):.2f}")


if __name__ == "__main__":
    main()
