"""Supervised fine-tuning: a warm start on expert demonstrations, or on any (prompt, response) JSONL.

Expert demonstrations are played with the same step prompts as RL. With ``demo_noise`` > 0 the
player sometimes executes a random admissible action, while the label stays the expert's action
for the state it is in: the demonstrations then cover the recoveries a learner needs after its
own mistakes (DAgger-style), not only the expert's narrow path.

Skill-conditioned demonstrations (``skill_demo_tasks``, :func:`skill_demonstrations`) teach a policy
to *read* a hindsight skill: the expert's action under a step prompt that carries a skill about the
same task exactly where SEED's teacher prompt puts it. A pretrained LLM follows an instruction in its
prompt for free; a tiny model trained only on plain prompts does not, and then SEED's teacher (the
policy with the skill in context) is no wiser than the student. These examples stand in for that
in-context skill following; evaluation and deployment prompts still never carry a skill.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from seedrl.agent.parsing import decision_mask
from seedrl.agent.prompts import HistoryItem, build_step_prompt, step_messages
from seedrl.algos import smoothed_nll, token_mean
from seedrl.config import SFTConfig, save_config
from seedrl.envs.oracle import norm
from seedrl.envs.panels import Panel, build_panel
from seedrl.envs.registry import env_class, make_env
from seedrl.errors import SeedRLError
from seedrl.fileio import atomic_write, writing
from seedrl.models.loading import save_model
from seedrl.models.prefix import train_forward
from seedrl.models.scoring import forward_logprobs, pack, response_logits
from seedrl.rollout.runner import encode_step
from seedrl.train.policy import adamw, build_policy
from seedrl.train.stage1 import select_tasks
from seedrl.train.threads import apply_threads

if TYPE_CHECKING:
    from seedrl.rollout.types import Trajectory

log = logging.getLogger(__name__)


def expert_demonstrations(env_name: str, env_kwargs: dict[str, Any], task_ids: list[str], *, max_steps: int,
                          history_length: int, noise: float, seed: int, env=None,
                          random_prefix: int = 0,
                          prefix_policy: Callable[[list[dict[str, str]], list], str] | None = None
                          ) -> list[dict[str, Any]]:
    """(messages, response) pairs from expert play; the label is always the expert's action.
    ``env``: play on this env instance (left open) instead of a new one. ``random_prefix``: each task
    first plays k random admissible actions, k uniform in 0..random_prefix (labels stay the expert's);
    with ``prefix_policy`` (the step's messages and images -> a model's response) those k actions are its answers,
    parsed by the env (a random admissible action where it answers nothing parsable). An env that shows
    its observation as images (``returns_images``, e.g. sokoban's ``mode: rgb_array``) gives each row the
    step's ``images`` too, the frames a rollout's prompt carries."""
    rng = random.Random(seed)
    own = env is None
    env = make_env(env_name, **env_kwargs) if own else env
    title = env_class(env_name).title or env_name
    rows: list[dict[str, Any]] = []
    try:
        for task_id in task_ids:
            obs = env.reset(task_id)
            history: list[HistoryItem] = []
            prefix = rng.randint(0, random_prefix) if random_prefix else 0
            for step in range(max_steps):
                expert = env.expert_action()
                if expert is None:
                    break
                text = build_step_prompt(title, env.task_description, obs, history, step, history_length,
                                         env.admissible_actions(), env.instruction, env.prompt_style)
                frames = list(env.observation_images())  # [] for a text observation
                rows.append({"messages": step_messages(text), "response": env.format_response(expert),
                             "task_id": task_id, "step": step} | ({"images": frames} if frames else {}))
                action = expert
                admissible = env.admissible_actions()
                own = (env.parse_action(prefix_policy(step_messages(text), frames)) if prefix_policy and step < prefix
                       else None)
                if own is not None:
                    action = own
                elif admissible and (step < prefix or (noise > 0 and rng.random() < noise)):
                    action = rng.choice(admissible)
                history.append(HistoryItem(obs, action))
                obs, _, done, _ = env.step(action)
                if done:
                    break
    finally:
        if own:
            env.close()
    return rows


def skill_demonstrations(env_name: str, env_kwargs: dict[str, Any], task_ids: list[str], *, max_steps: int,
                         history_length: int, noise: float, attempt_noise: float, seed: int,
                         min_words: int = 5, random_prefix: int = 0,
                         prefix_policy: Callable[[list[dict[str, str]], list], str] | None = None
                         ) -> list[dict[str, Any]]:
    """Expert actions under step prompts that carry a hindsight skill about the same task.

    Per task: (1) an *attempt*: the expert, but a random admissible action with probability
    ``attempt_noise`` (so attempts also fail), played and kept as a trajectory; (2) the env's oracle
    writes the hindsight skill of that attempt (where the object really was, which push deadlocked,
    the plan that won); (3) an expert demonstration of the same task (``noise`` as for plain demos)
    whose every step prompt carries that skill after the task line (``inject_into_messages``, the
    teacher prompt's placement), labelled with the expert's action, starting with up to
    ``random_prefix`` random actions, or ``prefix_policy``'s (:func:`expert_demonstrations`). Rows carry ``skill`` and
    ``attempt_won``; a task whose attempt gets no skill gives no rows."""
    from seedrl.rollout.types import StepSample, Trajectory
    from seedrl.skills.analyzers.oracle import OracleAnalyzer
    from seedrl.skills.injection import inject_into_messages

    rng = random.Random(seed * 1_000_003 + 17)
    oracle = OracleAnalyzer(env_name=env_name, min_words=min_words)
    env = make_env(env_name, **env_kwargs)
    rows: list[dict[str, Any]] = []
    try:
        for task_id in task_ids:
            obs = env.reset(task_id)
            traj = Trajectory(traj_id=0, group_id=0, task_id=task_id, task_description=env.task_description)
            done = False
            for step in range(max_steps):
                action = env.expert_action()
                admissible = env.admissible_actions()
                if action is None or (admissible and rng.random() < attempt_noise):
                    if not admissible:
                        break
                    action = rng.choice(admissible)
                sample = StepSample([], [], [], traj_id=0, group_id=0, step=step, reward=0.0, action_valid=False,
                                    response_text=env.format_response(action), observation=obs, action=action)
                obs, reward, done, info = env.step(action)
                sample.reward, sample.action_valid = float(reward), bool(info.get("action_valid", True))
                traj.steps.append(sample)
                traj.won = traj.won or bool(info.get("won"))
                if done:
                    break
            if not traj.steps:
                continue
            traj.truncated = not done
            traj.privileged_state = env.privileged_state()
            skill = oracle.analyze([traj])[0].skill
            if not skill:
                continue
            demo = expert_demonstrations(env_name, env_kwargs, [task_id], max_steps=max_steps,
                                         history_length=history_length, noise=noise,
                                         seed=rng.randrange(2**31), env=env, random_prefix=random_prefix,
                                         prefix_policy=prefix_policy)
            rows += [r | {"messages": inject_into_messages(r["messages"], skill), "skill": skill,
                          "attempt_won": traj.won} for r in demo]
    finally:
        env.close()
    return rows


def policy_demonstrations(backend, tokenizer, env_name: str, env_kwargs: dict[str, Any], task_ids: list[str], *,
                          max_steps: int, history_length: int, seed: int,
                          batch_size: int = 64) -> list[dict[str, Any]]:
    """(messages, response) rows of a model's own greedy episodes (:func:`seedrl.eval.evaluate.play_once`,
    the plain step prompts of RL and evaluation, never a skill), one per step it took, labelled with what it
    answered (its mistakes included): training on them keeps that model's skill-free policy
    (``demo_source: start``), with the frames it saw where the env shows images. ``backend`` generates with
    the model."""
    from seedrl.eval.evaluate import play_once

    trajs = play_once(backend, tokenizer, env_name, env_kwargs, task_ids, max_steps=max_steps,
                      history_length=history_length, max_new_tokens=64, batch_size=batch_size, seed=seed)
    return [{"messages": s.messages, "response": s.response_text, "task_id": t.task_id, "step": s.step}
            | ({"images": list(s.images.raw)} if s.images is not None else {})
            for t in trajs for s in t.steps]


def demo_task_ids(panel: Panel, n: int, sampling: str, seed: int) -> tuple[list[str], dict[str, int] | None]:
    """The tasks of ``panel`` that give ``n`` demonstrations (``SFTConfig.demo_sampling``): ``first``, the
    first ``n`` in panel order (no counts); ``per_type``, as even over the env's task types as their sizes
    allow (:func:`seedrl.train.stage1.select_tasks`, seeded by ``seed``), with how many of each type."""
    if sampling == "first":
        return list(panel.task_ids[:n]), None
    return select_tasks(panel.task_ids, n, env_class(panel.env).task_type, seed=f"sft-demos/{seed}")


def shows_images(env_name: str, env_kwargs: dict[str, Any]) -> bool:
    """Whether ``env_name`` with ``env_kwargs`` shows its observations as images (``returns_images`` is
    per instance where an option such as sokoban's ``mode`` decides it)."""
    env = make_env(env_name, **env_kwargs)
    try:
        return bool(getattr(env, "returns_images", False))
    finally:
        env.close()


def require_counterfactual(env_name: str) -> None:
    """SeedRLError naming the envs that can, unless ``env_name``'s oracle writes counterfactual skills."""
    from seedrl.envs.registry import env_names
    from seedrl.eval.skill_follow import has_counterfactual

    if not has_counterfactual(env_name):
        can = ", ".join(n for n in env_names() if has_counterfactual(n))
        raise SeedRLError(f"counterfactual skill demonstrations need an env whose oracle writes counterfactual "
                          f"skills; {env_name!r} has none (these do: {can})")


def counterfactual_skill_demonstrations(env_name: str, env_kwargs: dict[str, Any], trajs: list[Trajectory], *,
                                        decisions: int, per_state: int, seed: int) -> list[dict[str, Any]]:
    """Counterfactual pairs: the same state under several skills, each with its own target.

    At each of the first ``decisions`` states of every trajectory in ``trajs`` (a start model's own
    skill-free episodes: the states where a follow-rate probe asks), the env oracle's ``counterfactual``
    hook writes ``per_state`` skills (draws ``seed * 1000 + k``; repeats of a target dropped), each saying
    the object lay in another plausible place the episode has not yet ruled out, in the words of its
    hindsight skills, and names the action that goes there. Each gives a row whose step prompt carries
    that skill (SEED's teacher placement) and whose label is that action: the object could lie there in a
    world consistent with everything observed so far, so only the skill decides the target, and it is never
    what the start did there without a skill. Rows carry ``skill``, ``task_id``, ``step`` and ``default``
    (the start's own action)."""
    from seedrl.eval.skill_follow import counterfactual_decisions
    from seedrl.skills.injection import inject_into_messages

    require_counterfactual(env_name)
    env = make_env(env_name, **env_kwargs)
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, int, str]] = set()
    try:
        for k in range(per_state):
            for d in counterfactual_decisions(env_name, env_kwargs, trajs, max_decisions=decisions,
                                              seed=seed * 1000 + k):
                key = (d["task_id"], d["step"], norm(d["named"]))
                if key in seen:
                    continue
                seen.add(key)
                rows.append({"messages": inject_into_messages(d["messages"], d["skill"]),
                             "response": env.format_response(d["named"]), "task_id": d["task_id"],
                             "step": d["step"], "skill": d["skill"], "default": d["default"]})
    finally:
        env.close()
    return sorted(rows, key=lambda r: (r["task_id"], r["step"]))


def greedy_responder(backend, tokenizer, max_new_tokens: int = 64,
                     stop: tuple[str, ...] = ()) -> Callable[[list[dict[str, str]], list], str]:
    """A model's greedy answer to one step's chat messages and the observation's images (none for a text
    env), as evaluation generates it (``stop``: the env's stop strings, as evaluation passes them)."""
    from seedrl.rollout.backends import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens, greedy=True, stop=list(stop))

    def respond(messages: list[dict[str, str]], images: Sequence = ()) -> str:
        ids, mm = encode_step(tokenizer, messages, images)
        if mm is None:
            return backend.generate([ids], params, seed=0)[0].text
        return backend.generate([ids], params, seed=0, images=[mm])[0].text

    return respond


def empty_data_message(path: str | Path) -> str:
    """The one line for an SFT data file without a single example."""
    return (f"SFT data {str(path)!r} holds no example (the file is empty or only blank lines); give a JSONL file "
            f"with one {{\"prompt\" or \"messages\", \"response\"}} object per line")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise SeedRLError(f"SFT data {str(path)!r} not found")
    rows = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SeedRLError(f"{path}:{n}: not a JSON line ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict) or "response" not in row or not ("messages" in row or "prompt" in row):
            raise SeedRLError(f"{path}:{n}: each line needs 'response' and 'messages' or 'prompt'")
        if "messages" not in row:
            row["messages"] = step_messages(row["prompt"])
        rows.append(row)
    return rows


def encode_rows(tokenizer, rows: list[dict[str, Any]], max_tokens: int
                ) -> tuple[list[tuple[list[int], list[int]]], list[Any] | None]:
    """(prompt ids, response ids) per row, and per row its image inputs (None for a text row), or None in
    place of that list when no row has images. A row's ``images`` (its observation's frames) go through
    the policy's processor and chat template as a rollout's do (:func:`~seedrl.rollout.runner.encode_step`);
    a text prompt longer than ``max_tokens`` with its response keeps its tail, a prompt with images is
    never cut (the cut could split an image's placeholders) and raises instead."""
    pairs, images = [], []
    for n, r in enumerate(rows):
        p, mm = encode_step(tokenizer, r["messages"], r.get("images") or ())
        resp = tokenizer(r["response"], add_special_tokens=False)["input_ids"]
        if len(p) + len(resp) > max_tokens:
            if mm is not None:
                raise SeedRLError(f"example {n} has {len(p) + len(resp)} tokens with its images, more than "
                                  f"max_seq_tokens={max_tokens}; a prompt with images is never cut: raise it")
            p = p[-(max_tokens - len(resp)):]
        pairs.append((p, resp))
        images.append(mm)
    return pairs, (images if any(x is not None for x in images) else None)


def tokenize_pairs(tokenizer, rows: list[dict[str, Any]], max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """:func:`encode_rows` of text rows: the (prompt ids, response ids) pairs."""
    pairs, images = encode_rows(tokenizer, rows, max_tokens)
    if images is not None:
        raise SeedRLError("these examples carry images; encode them with encode_rows, which keeps them")
    return pairs


def micro_batches(idx: list[int], lengths: list[int], micro_batch_size: int,
                  group_by_length: bool = False) -> list[list[int]]:
    """Cut one batch (example indices ``idx``) into micro-batches of at most ``micro_batch_size``.
    ``group_by_length``: longest first, so each micro-batch pads only to its own longest (a batch
    mixing 2,000-token analysis prompts with 300-token action prompts otherwise pads most examples to
    2,000). The batch, and so the token-mean loss over it, is the same either way."""
    order = sorted(idx, key=lambda i: -lengths[i]) if group_by_length else idx
    return [order[m:m + micro_batch_size] for m in range(0, len(order), micro_batch_size)]


def sft_lr_factor(step: int, total: int, warmup: int, floor: float = 0.1) -> float:
    """The learning-rate multiplier of optimizer step ``step`` (from 0) of ``total``: a linear rise
    ``(step + 1) / warmup`` over ``warmup`` steps, then a cosine from 1 down to ``floor`` at the last
    step's end (verl's ``get_cosine_schedule_with_warmup`` is this with floor 0, its warm-up ``step / warmup``)."""
    if step < warmup:
        return (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))


def sft_train(model, tokenizer, pairs: list[tuple[list[int], list[int]]], *, epochs: int, lr: float,
              batch_size: int, micro_batch_size: int, weight_decay: float = 0.0, grad_clip: float = 1.0,
              warmup_steps: int = 0, seed: int = 0, bf16: bool = False, group_by_length: bool = False,
              label_smoothing: float = 0.0, on_step=None, warmup_ratio: float = 0.0, lr_floor: float = 0.1,
              betas: tuple[float, float] = (0.9, 0.999), shared_prefix: bool = False,
              images: list[Any] | None = None) -> list[float]:
    """Token-mean NLL of the response tokens (label-smoothed by ``label_smoothing``,
    :func:`seedrl.algos.smoothed_nll`); returns the loss of every optimizer step. ``images``: per pair,
    its image inputs or None (:func:`encode_rows`); a micro-batch with images takes the plain forward.
    ``bf16``: forward/backward under bf16 autocast (the weights stay fp32); ``group_by_length``: see
    :func:`micro_batches`; ``shared_prefix``: each micro-batch's shared prompt prefixes run once
    (:func:`~seedrl.models.prefix.shared_prefix_forward`, the same gradient up to float rounding)."""
    if shared_prefix and label_smoothing:
        raise SeedRLError("SFT shared_prefix computes the plain NLL; set label_smoothing=0 or shared_prefix=false")
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(model, lr, weight_decay, betas)
    total = epochs * math.ceil(len(pairs) / batch_size)
    warm = warmup_steps or int(warmup_ratio * total)

    def schedule(s: int) -> float:  # linear warmup, cosine decay to lr_floor
        return sft_lr_factor(s, total, warm, lr_floor)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    g = torch.Generator().manual_seed(seed)
    lengths = [len(p) + len(r) for p, r in pairs]
    losses = []
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(pairs), generator=g).tolist()
        for s in range(0, len(perm), batch_size):
            idx = perm[s:s + batch_size]
            denom = float(sum(len(pairs[i][1]) for i in idx))
            opt.zero_grad(set_to_none=True)
            total_loss = 0.0
            for mi in micro_batches(idx, lengths, micro_batch_size, group_by_length):
                prompts, responses = [pairs[i][0] for i in mi], [pairs[i][1] for i in mi]
                mm = None if images is None else [images[i] for i in mi]
                if label_smoothing:
                    b = pack(prompts, responses, tokenizer.pad_token_id, device, mm)
                    nll = smoothed_nll(response_logits(model, b, bf16), b.input_ids[:, -b.width:], label_smoothing)
                else:
                    b, logp, _ = train_forward(model, prompts, responses, tokenizer.pad_token_id, device, shared_prefix,
                                               bf16=bf16, images=mm)
                    nll = -logp
                loss = token_mean(nll, b.response_mask, denom)
                loss.backward()
                total_loss += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            sched.step()
            losses.append(total_loss)
            if on_step is not None:
                on_step(len(losses), total, total_loss)
    return losses


@torch.no_grad()
def decision_entropy(model, tokenizer, pairs: list[tuple[list[int], list[int]]], *, bf16: bool = False,
                     limit: int = 256, micro_batch_size: int = 32, images: list[Any] | None = None) -> float | None:
    """Mean entropy (nats) of the model's next-token distribution at the response tokens that carry
    the action (:func:`seedrl.agent.parsing.decision_mask`), over the first ``limit`` examples. A warm
    start near 0 here samples the same action every time: RL's groups then come out uniform and carry
    no advantage. None when no example has an action block. ``images``: per pair, its image inputs or None."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    rows = pairs[:limit]
    for m in range(0, len(rows), micro_batch_size):
        chunk = rows[m:m + micro_batch_size]
        b = pack([p for p, _ in chunk], [r for _, r in chunk], tokenizer.pad_token_id, device,
                 None if images is None else images[m:m + micro_batch_size])
        _, ent = forward_logprobs(model, b, with_entropy=True, bf16=bf16)
        for k, (_, r) in enumerate(chunk):
            dm = torch.tensor(decision_mask(tokenizer, r), dtype=torch.bool)
            if dm.any():
                e = ent[k, b.width - len(r):]  # responses are right-aligned in [B, width]
                total += float(e[dm].sum())
                count += int(dm.sum())
    model.train(was_training)
    return total / count if count else None


def run_sft(cfg: SFTConfig) -> dict[str, Any]:
    """Build the data, fine-tune, save ``run_dir/model``; evaluate on the eval panel unless
    ``eval.num_tasks`` is 0."""
    from rich.progress import Progress

    from seedrl.eval.evaluate import evaluate
    from seedrl.rollout.backends import HFBackend

    threads = apply_threads(cfg.torch_threads)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    torch.manual_seed(cfg.seed)
    m, e = cfg.model, cfg.env
    policy = build_policy(m, what="SFT model")
    tok, model, bf16 = policy.tokenizer, policy.model, policy.precision.bf16
    t0 = time.perf_counter()
    def demos(n: int) -> tuple[list[dict[str, Any]], str]:
        panel = build_panel(e.name, e.train_split, e.train_size, **e.kwargs)
        ids, counts = demo_task_ids(panel, n, cfg.demo_sampling, seed=cfg.seed)
        where = f"{e.name}/{e.train_split} (panel {panel.hash}" + (f", tasks per type {counts}" if counts else "")
        if cfg.demo_source == "start":  # before any step: the model is still the start
            rows = policy_demonstrations(HFBackend(model, tok, bf16=bf16), tok, e.name, e.kwargs, ids,
                                         max_steps=e.max_steps, history_length=e.history_length, seed=cfg.seed)
            return rows, f"the start's ({m.name}) own greedy episodes on {where})"
        rows = expert_demonstrations(e.name, e.kwargs | cfg.demo_env_kwargs, ids, max_steps=e.max_steps,
                                     history_length=e.history_length, noise=cfg.demo_noise, seed=cfg.seed)
        over = f", env kwargs {cfg.demo_env_kwargs}" if cfg.demo_env_kwargs else ""
        return rows, f"expert demonstrations on {where}{over})"

    if cfg.data:
        rows, source = read_jsonl(cfg.data), cfg.data
        if not rows:  # not the expert's fault: the file holds nothing
            raise SeedRLError(empty_data_message(cfg.data))
        if cfg.mix_demo_tasks:
            extra, src = demos(cfg.mix_demo_tasks)
            rows, source = rows + extra, f"{source} + {len(extra)} {src}"
    else:
        rows, source = demos(cfg.demo_tasks)
    if cfg.skill_demo_tasks:
        panel = build_panel(e.name, e.train_split, e.train_size, **e.kwargs)
        extra = skill_demonstrations(e.name, e.kwargs | cfg.skill_demo_env_kwargs,
                                     list(panel.task_ids[:cfg.skill_demo_tasks]),
                                     max_steps=e.max_steps, history_length=e.history_length,
                                     noise=cfg.demo_noise if cfg.skill_demo_noise is None else cfg.skill_demo_noise,
                                     attempt_noise=cfg.skill_attempt_noise, seed=cfg.seed,
                                     random_prefix=cfg.skill_demo_random_prefix,
                                     prefix_policy=greedy_responder(HFBackend(model, tok, bf16=bf16), tok,
                                                                    stop=tuple(env_class(e.name).stop))
                                     if cfg.skill_demo_prefix_source == "start" else None)
        rows = rows + extra
        source += (f" + {len(extra)} skill-conditioned demonstrations from {cfg.skill_demo_tasks} tasks "
                   f"(oracle skills of attempts at noise {cfg.skill_attempt_noise}"
                   + (f", up to {cfg.skill_demo_random_prefix} "
                      + ("of the start's own greedy actions" if cfg.skill_demo_prefix_source == "start"
                         else "random actions") + " first" if cfg.skill_demo_random_prefix else "")
                   + (f", env kwargs {cfg.skill_demo_env_kwargs})" if cfg.skill_demo_env_kwargs else ")"))
    if cfg.counterfactual_demo_tasks:
        from seedrl.eval.evaluate import play_once

        require_counterfactual(e.name)  # before the start plays
        panel = build_panel(e.name, e.train_split, e.train_size, **e.kwargs)
        own = play_once(HFBackend(model, tok, bf16=bf16), tok, e.name, e.kwargs,  # still the start model
                        list(panel.task_ids[:cfg.counterfactual_demo_tasks]), max_steps=e.max_steps,
                        history_length=e.history_length, max_new_tokens=64, batch_size=64, seed=cfg.seed)
        extra = counterfactual_skill_demonstrations(e.name, e.kwargs, own, decisions=cfg.counterfactual_decisions,
                                                    per_state=cfg.counterfactual_per_state, seed=cfg.seed)
        rows = rows + extra
        source += (f" + {len(extra)} counterfactual skill rows at the first {cfg.counterfactual_decisions} states "
                   f"of the start's own greedy episodes on {cfg.counterfactual_demo_tasks} tasks "
                   f"(up to {cfg.counterfactual_per_state} skills per state)")
    if not rows:
        raise SeedRLError(f"no SFT examples: the expert of {e.name} produced no demonstration on {cfg.demo_tasks} "
                          f"{e.train_split} tasks (check env.max_steps and the env's expert, or give --data)")
    from seedrl.models.vision import processor_of

    # (a text policy on an env that shows images fails in one line where its first prompt is encoded)
    if processor_of(tok) is not None and not all(r.get("images") for r in rows) and shows_images(e.name, e.kwargs):
        raise SeedRLError(f"{e.name} with {e.kwargs} shows its observations as images, but some SFT examples carry "
                          f"none (a --data file's rows carry text only); the expert's demonstrations and the "
                          f"start's own episodes carry their frames")
    pairs, images = encode_rows(tok, rows, cfg.max_seq_tokens)
    summary: dict[str, Any] = {"examples": len(pairs), "source": source, "data_seconds": time.perf_counter() - t0,
                               "examples_with_images": 0 if images is None else sum(x is not None for x in images)}

    def run_eval(tag: str) -> dict[str, Any]:
        panel = build_panel(e.name, cfg.eval.split, cfg.eval.panel_size, **e.kwargs)
        res = evaluate(HFBackend(model, tok, bf16=bf16), tok, panel, max_steps=cfg.eval.max_steps or e.max_steps,
                       history_length=e.history_length, max_new_tokens=64, greedy=cfg.eval.greedy,
                       temperature=cfg.eval.temperature, batch_size=cfg.eval.batch_size, seed=cfg.seed,
                       num_tasks=cfg.eval.num_tasks)
        atomic_write(run_dir / f"eval_{tag}.json", json.dumps(res, indent=1))
        return res

    t0 = time.perf_counter()
    with Progress() as prog:
        task = prog.add_task("sft", total=None)

        def on_step(i: int, total: int, loss: float) -> None:
            if threads is not None:
                threads.step()
            prog.update(task, completed=i, total=total, description=f"sft loss={loss:.3f}")
            if not prog.console.is_terminal and (i % max(1, total // 20) == 0 or i == total):
                # a log file gets no progress bar: a plain line every 5 % of the steps
                print(f"sft step {i}/{total} loss {loss:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)

        losses = sft_train(model, tok, pairs, epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size,
                           micro_batch_size=cfg.micro_batch_size, weight_decay=cfg.weight_decay,
                           grad_clip=cfg.grad_clip, warmup_steps=cfg.warmup_steps, seed=cfg.seed,
                           bf16=bf16, group_by_length=cfg.group_by_length,
                           label_smoothing=cfg.label_smoothing, on_step=on_step, warmup_ratio=cfg.warmup_ratio,
                           lr_floor=cfg.lr_floor, betas=tuple(cfg.betas), shared_prefix=cfg.shared_prefix,
                           images=images)
    summary |= {"steps": len(losses), "loss_first": losses[0], "loss_last": losses[-1],
                "train_seconds": time.perf_counter() - t0,
                # how much the start still explores where it decides (RL needs mixed groups)
                "decision_entropy": decision_entropy(model, tok, pairs, bf16=bf16, images=images)}
    with writing(run_dir / "model"):  # a full disk in safetensors or the tokenizer's writer: one line
        save_model(model, tok, run_dir / "model")
    if cfg.eval.num_tasks != 0:
        summary["eval_after"] = run_eval("after")
    atomic_write(run_dir / "sft_losses.jsonl", "".join(json.dumps({"step": i, "loss": loss}) + "\n"
                                                       for i, loss in enumerate(losses, 1)))
    atomic_write(run_dir / "summary.json", json.dumps({k: v for k, v in summary.items()}, indent=1, default=str))
    return summary
