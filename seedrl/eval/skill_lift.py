"""The skill-lift probe (``seedrl eval --with-skills oracle|self``): can the policy use a skill at all?

**A diagnostic, never a headline number.** The second attempt at every task is played with a hindsight
skill about that very task in its prompts: information no deployed agent has. What it measures is the
cheapest question behind SEED: is there anything for on-policy distillation to distil?

For each task of a panel:

1. the policy plays it once with plain prompts, exactly as ``seedrl eval`` does;
2. the analyzer writes a skill about that attempt (``oracle``: from the env's privileged state;
   ``self``: the policy reading its own trajectory, as SEED's Stage 2 does);
3. the policy plays the same task again with the skill in every step prompt, where SEED's teacher
   prompt puts it (the ``**Episode-Level Skill**`` block after the task line);
4. on the first attempt's own responses, the teacher (prompt + skill) is compared with the student
   (plain prompt): the share of response tokens whose log-prob the skill raises, and the mean shift,
   i.e. what OPD's gate would see; and, over the whole next-token distribution at those positions,
   how often the teacher's most likely token differs from the student's and the mean total-variation
   distance between the two. A skill can change the distribution where the student did not sample
   (the right object, the right ``go to``) while the sampled tokens' log-probs barely move: on-policy
   distillation of the sampled tokens then sees almost nothing.

Reported: success without and with the skill on the tasks that got one (paired on the same tasks),
the lift and how many tasks were won only with / only without it, the parse rate, and the teacher
shift. The plain first attempt over all tasks equals ``seedrl eval``'s result on the panel.

Where the env's oracle writes counterfactual skills, the same first attempts also feed the skill-following
probe (:mod:`seedrl.eval.skill_follow`): at each of their first ``follow_decisions`` steps, a skill that
names another sensible action than the one the policy took; ``follow_rate`` is how often it switches.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from seedrl.envs.panels import Panel
from seedrl.envs.registry import env_class
from seedrl.eval.skill_follow import counterfactual_decisions, follow_probe, follow_summary
from seedrl.models.scoring import pack, response_logits, unalign
from seedrl.rollout.backends import GenerationBackend, SamplingParams
from seedrl.rollout.executors import EnvFactory
from seedrl.rollout.runner import RolloutSettings, encode_messages, rollout
from seedrl.skills.facts import agreement, check_facts
from seedrl.skills.injection import inject_into_messages

DIAGNOSTIC = "skill_lift"


def skill_lift(backend: GenerationBackend, tokenizer, model, panel: Panel, analyzer, *, max_steps: int,
               history_length: int, max_new_tokens: int, max_prompt_tokens: int = 2048, greedy: bool = True,
               temperature: float = 0.4, batch_size: int = 32, seed: int = 0, num_tasks: int | None = None,
               step_timeout_s: float = 60.0, env_workers: int = 8, executor: str = "thread",
               ray_address: str | None = None, bf16: bool = False,
               micro_batch_size: int = 16, follow_decisions: int = 3) -> dict[str, Any]:
    """Run the probe on ``panel`` (see the module docstring); ``model`` scores the teacher/student
    log-probs, ``analyzer`` has ``analyze(trajectories) -> [AnalysisResult]``; ``follow_decisions``:
    the steps of each first attempt the skill-following probe asks about (0: none)."""
    played = panel.subset(num_tasks)  # the same seeded, type-stratified subset `seedrl eval` plays
    task_ids = list(played.task_ids)
    cls = env_class(panel.env)
    settings = RolloutSettings(
        env_title=cls.title or panel.env, max_steps=max_steps, history_length=history_length,
        max_prompt_tokens=max_prompt_tokens,
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy,
                                stop=list(cls.stop)),
        step_timeout_s=step_timeout_s, env_workers=env_workers, executor=executor,
        ray_address=ray_address)
    rows: list[dict[str, Any]] = []
    follows: list[dict[str, Any]] = []
    deltas: list[torch.Tensor] = []
    disagreement: dict[str, float] = {}
    t0 = time.perf_counter()
    for start in range(0, len(task_ids), batch_size):
        chunk = task_ids[start:start + batch_size]
        first = rollout(backend, tokenizer, EnvFactory(panel.env, panel.env_kwargs), chunk, 1, settings,
                        seed=seed + start, traj_offset=start)
        playable = [t for t in first if t.error is None and t.steps]
        if follow_decisions > 0:
            decisions = counterfactual_decisions(panel.env, dict(panel.env_kwargs), playable,
                                                 max_decisions=follow_decisions, seed=seed)
            follows += follow_probe(backend, tokenizer, panel.env, dict(panel.env_kwargs), decisions,
                                    sampling=settings.sampling, max_prompt_tokens=max_prompt_tokens,
                                    seed=seed + start, batch_size=batch_size)
        analysed = analyzer.analyze(playable)
        check_facts(panel.env, playable, analysed)  # the analyzer's facts against each attempt's own state
        results = {t.task_id: r for t, r in zip(playable, analysed)}
        skills = {tid: r.skill for tid, r in results.items() if r.skill}

        def with_skill(task_id: str, messages: list[dict[str, str]], skills=skills) -> list[dict[str, str]]:
            return inject_into_messages(messages, skills[task_id]) if task_id in skills else messages

        again = {}
        if skills:
            redo = [tid for tid in chunk if tid in skills]
            again = {t.task_id: t for t in rollout(backend, tokenizer, EnvFactory(panel.env, panel.env_kwargs),
                                                   redo, 1, settings, seed=seed + start, traj_offset=start,
                                                   prompt_hook=with_skill)}
        shift, dis = _teacher_shift(model, tokenizer, [t for t in playable if t.task_id in skills], skills,
                                    max_prompt_tokens, micro_batch_size, bf16)
        deltas += shift
        for k, v in dis.items():
            disagreement[k] = disagreement.get(k, 0.0) + v
        for t in first:
            r = results.get(t.task_id)
            second = again.get(t.task_id)
            rows.append({"task_id": t.task_id, "type": cls.task_type(t.task_id), "won": t.won,
                         "skill": r.skill if r else None, "analysis_error": (r.error if r else t.error),
                         "fact_agrees": r.fact_agrees if r else None,
                         "won_with_skill": None if second is None else second.won,
                         "steps": len(t.steps), "steps_with_skill": None if second is None else len(second.steps)})
    return _summary(panel, played, rows, deltas, disagreement, analyzer) | {
        "follow": follow_summary(follows) if follow_decisions > 0 else None, "follow_decisions": follows,
        "greedy": greedy, "temperature": None if greedy else temperature, "seed": seed,
        "time_s": time.perf_counter() - t0, "tasks": rows}


def _teacher_shift(model, tokenizer, trajs, skills: dict[str, str], max_prompt_tokens: int, micro: int,
                   bf16: bool) -> tuple[list[torch.Tensor], dict[str, float]]:
    """teacher - student log-prob of every response token of ``trajs`` (the skill of its task in the
    teacher prompt, SEED's placement; the student prompt as generated), and the sums behind the
    whole-distribution comparison (:func:`distribution_disagreement`)."""
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    if not samples:
        return [], {}
    skill_of = {t.traj_id: skills[t.task_id] for t in trajs}
    teacher_prompts = [encode_messages(tokenizer, inject_into_messages(s.messages, skill_of[s.traj_id]))
                       [-max_prompt_tokens:] for s in samples]
    responses = [s.response_ids for s in samples]
    return distribution_disagreement(model, [s.prompt_ids for s in samples], teacher_prompts, responses,
                                     tokenizer.pad_token_id, micro, bf16)


@torch.no_grad()
def distribution_disagreement(model, student_prompts, teacher_prompts, responses, pad_id: int, micro: int,
                              bf16: bool = False) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Each of ``responses`` scored after its student and its teacher prompt, in one pass each:
    per-sample ``teacher - student`` log-probs of the response tokens, and sums over the response
    positions: ``tokens``; ``argmax_differs`` (teacher's most likely token != student's);
    ``teacher_argmax_not_sampled`` (teacher's most likely token != the token the student sampled);
    ``tv`` (total-variation distance between the two next-token distributions, in [0, 1])."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = {"tokens": 0.0, "argmax_differs": 0.0, "teacher_argmax_not_sampled": 0.0, "tv": 0.0}
    deltas: list[torch.Tensor] = []
    for s in range(0, len(responses), micro):
        resp = responses[s:s + micro]
        bs = pack(student_prompts[s:s + micro], resp, pad_id, device)
        bt = pack(teacher_prompts[s:s + micro], resp, pad_id, device)
        ls = response_logits(model, bs, bf16).float().log_softmax(-1)  # [B, R, V]
        lt = response_logits(model, bt, bf16).float().log_softmax(-1)
        ps, pt = ls.exp(), lt.exp()
        mask = bs.response_mask.bool()  # the same responses: the same [B, R] mask in both packs
        sampled = bs.input_ids[:, -bs.width:]
        shift = (lt - ls).gather(-1, sampled.unsqueeze(-1)).squeeze(-1) * bs.response_mask
        deltas += unalign(shift, bs.resp_len)
        am_t = pt.argmax(-1)
        out["tokens"] += float(mask.sum())
        out["argmax_differs"] += float(((ps.argmax(-1) != am_t) & mask).sum())
        out["teacher_argmax_not_sampled"] += float(((am_t != sampled) & mask).sum())
        out["tv"] += float((0.5 * (ps - pt).abs().sum(-1))[mask].sum())
    if was_training:
        model.train()
    return deltas, out


def _summary(panel: Panel, played: Panel, rows: list[dict[str, Any]], deltas: list[torch.Tensor],
             disagreement: dict[str, float], analyzer) -> dict[str, Any]:
    skilled = [r for r in rows if r["won_with_skill"] is not None]
    n, k = len(rows), len(skilled)
    plain = sum(r["won"] for r in skilled)
    helped = sum(r["won_with_skill"] for r in skilled)
    flat = torch.cat(deltas) if deltas else torch.zeros(0)
    return {
        "diagnostic": DIAGNOSTIC,
        "note": "second attempts carry a hindsight skill about the same task: not a success rate of the policy",
        "env": panel.env, "split": panel.split, "panel_hash": played.hash, "full_panel_hash": panel.hash,
        "panel_size": len(panel),
        "analyzer": getattr(analyzer, "name", "?"),
        "num_tasks": n, "success_plain_all": sum(r["won"] for r in rows) / max(1, n),
        "with_skill": k, "parse_rate": k / max(1, n),
        "success_without_skill": plain / max(1, k), "success_with_skill": helped / max(1, k),
        "lift": (helped - plain) / max(1, k),
        "won_only_with_skill": sum(r["won_with_skill"] and not r["won"] for r in skilled),
        "won_only_without_skill": sum(r["won"] and not r["won_with_skill"] for r in skilled),
        # the analyzer's facts against the oracle's (envs with fact_agreement), first attempts won / lost
        **{f"fact_agreement{tag}": agreement(r["fact_agrees"] for r in rows if want is None or r["won"] is want)[0]
           for tag, want in (("", None), ("_success", True), ("_failure", False))},
        "facts_checked": agreement(r["fact_agrees"] for r in rows)[1],
        "teacher_tokens": int(len(flat)),
        "teacher_above_student_frac": float((flat > 0).float().mean()) if len(flat) else None,
        "teacher_delta_mean": float(flat.mean()) if len(flat) else None,
        **{name: (disagreement[k] / disagreement["tokens"] if disagreement.get("tokens") else None)
           for name, k in (("teacher_argmax_differs_frac", "argmax_differs"),
                           ("teacher_argmax_not_sampled_frac", "teacher_argmax_not_sampled"),
                           ("teacher_tv_mean", "tv"))},
    }
