"""SFT micro-batching: grouping a batch by length pads less and leaves the update unchanged."""

from __future__ import annotations

import pytest
import torch

from seedrl.models.loading import load_model, load_tokenizer
from seedrl.train.sft import micro_batches, sft_train


def test_grouped_micro_batches_hold_the_same_examples_and_pad_less():
    lengths = [300, 2000, 310, 290, 1900, 305, 320, 295]
    idx = list(range(8))
    plain = micro_batches(idx, lengths, 4)
    grouped = micro_batches(idx, lengths, 4, group_by_length=True)
    assert plain == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sorted(i for mb in grouped for i in mb) == idx
    assert all(len(mb) <= 4 for mb in grouped)

    def padded(mbs):  # tokens a forward pass computes: every row padded to its micro-batch's longest
        return sum(len(mb) * max(lengths[i] for i in mb) for mb in mbs)

    assert padded(plain) == 4 * 2000 + 4 * 1900
    assert padded(grouped) == 4 * 2000 + 4 * 305  # the two long ones share a micro-batch
    assert micro_batches(idx, lengths, 8, group_by_length=True) == [sorted(idx, key=lambda i: -lengths[i])]


def _pairs(tok, n: int = 8):
    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    out = []
    for k in range(n):
        plen = 40 if k % 3 else 200  # mixed lengths, as analysis prompts among action prompts
        p = torch.randint(5, vocab, (plen,), generator=g).tolist()
        r = torch.randint(5, vocab, (3 + k % 4,), generator=g).tolist()
        out.append((p, r))
    return out


def test_group_by_length_takes_the_same_step():
    """One optimizer step over one batch: the same loss and the same (clipped) gradient, which the
    parameters keep after sft_train returns. (Compared on gradients: Adam's first step is about
    lr * sign(g), so float noise in a near-zero gradient entry would flip a whole lr-sized update.)"""
    tok = load_tokenizer("tiny-micro")
    pairs = _pairs(tok)
    runs = []
    for group in (False, True):
        m = load_model("tiny-micro", tokenizer=tok)
        losses = sft_train(m, tok, pairs, epochs=1, lr=1e-2, batch_size=8, micro_batch_size=3, seed=0,
                           group_by_length=group)
        runs.append((losses, [p.grad.clone() for p in m.parameters()]))
    (loss_a, grad_a), (loss_b, grad_b) = runs
    assert len(loss_a) == len(loss_b) == 1
    assert abs(loss_a[0] - loss_b[0]) < 1e-5 * abs(loss_a[0])
    scale = max(g.abs().max().item() for g in grad_a)
    assert scale > 0
    assert max((a - b).abs().max().item() for a, b in zip(grad_a, grad_b)) < 1e-5 * scale


def test_shared_prefix_takes_the_same_step(tmp_path):
    """SFT with shared_prefix (each micro-batch's shared instruction prefix run once, its cache in the
    graph): over two optimizer steps the same losses and, after each run, the same gradient within
    1e-5 (fp32), with micro-batches whose examples share a 60-token head and one that shares none; the
    grouped path really runs (a spy); and the config refuses it beside label smoothing."""
    import seedrl.models.prefix as prefix_mod
    from seedrl.config import SFTConfig, load_config
    from seedrl.errors import SeedRLError

    tok = load_tokenizer("tiny-micro")
    g = torch.Generator().manual_seed(1)
    head = torch.randint(5, len(tok), (60,), generator=g).tolist()
    pairs = [(head + p if k % 4 else p, r) for k, (p, r) in enumerate(_pairs(tok, 12))]
    planned: list[int] = []
    real = prefix_mod.prompt_tree

    def spy(*a, **k):
        tree = real(*a, **k)
        planned.append(tree is not None and tree[0] > 0)
        return tree

    runs = []
    for shared in (False, True):
        m = load_model("tiny-micro", tokenizer=tok)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(prefix_mod, "prompt_tree", spy)
            losses = sft_train(m, tok, pairs, epochs=1, lr=1e-2, batch_size=6, micro_batch_size=3, seed=0,
                               shared_prefix=shared)
        runs.append((losses, [p.grad.clone() for p in m.parameters()]))
    assert sum(planned) > 0  # the tree ran, with a shared head
    (loss_a, grad_a), (loss_b, grad_b) = runs
    assert len(loss_a) == len(loss_b) == 2
    assert all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(loss_a, loss_b))
    scale = max(x.abs().max().item() for x in grad_a)
    assert scale > 0 and max((a - b).abs().max().item() for a, b in zip(grad_a, grad_b)) < 1e-5 * scale
    with pytest.raises(SeedRLError, match="label_smoothing=0"):
        load_config(SFTConfig, None, [f"run_dir={tmp_path}", "shared_prefix=true", "label_smoothing=0.1"])


def test_decision_entropy_is_the_entropy_at_the_action_tokens(tiny_model, tiny_tokenizer):
    """decision_entropy averages the full next-token entropy over the action tokens only: checked
    against a direct forward on each example, with prompts and responses of different lengths (so
    padding and right-alignment are exercised)."""
    from seedrl.agent.parsing import decision_mask
    from seedrl.algos import entropy_from_logits
    from seedrl.train.sft import decision_entropy

    tok = tiny_tokenizer
    texts = [("room one, go", "<think></think><action>up</action>"),
             ("a longer prompt about the second room", "<think>push it</think><action>left</action>"),
             ("no action here", "<think>hm</think>")]
    pairs = [(tok(p, add_special_tokens=False)["input_ids"], tok(r, add_special_tokens=False)["input_ids"])
             for p, r in texts]
    total, count = 0.0, 0
    with torch.no_grad():
        for p, r in pairs:
            logits = tiny_model(torch.tensor([p + r])).logits[0, len(p) - 1:-1]  # predicting each response token
            ent = entropy_from_logits(logits)
            dm = torch.tensor(decision_mask(tok, r), dtype=torch.bool)
            total += float(ent[dm].sum())
            count += int(dm.sum())
    assert count > 0
    got = decision_entropy(tiny_model, tok, pairs, micro_batch_size=2)
    assert abs(got - total / count) < 1e-4
    assert decision_entropy(tiny_model, tok, pairs[2:]) is None  # no action block anywhere


def test_label_smoothing_keeps_entropy_at_the_trained_tokens():
    """The same data and steps: plain NLL drives the response tokens towards certainty, label smoothing
    keeps probability on the others (the warm start RL still samples from). eps = 0 is the plain loss."""
    from seedrl.algos import entropy_from_logits
    from seedrl.models.scoring import pack, response_logits

    tok = load_tokenizer("tiny-micro")
    pairs = _pairs(tok, 4)
    ent = {}
    for eps in (0.0, 0.3):
        m = load_model("tiny-micro", tokenizer=tok)
        losses = sft_train(m, tok, pairs, epochs=30, lr=1e-2, batch_size=4, micro_batch_size=4, seed=0,
                           label_smoothing=eps)
        assert losses[-1] < losses[0]
        m.eval()
        with torch.no_grad():
            b = pack([p for p, _ in pairs], [r for _, r in pairs], tok.pad_token_id, torch.device("cpu"))
            e = entropy_from_logits(response_logits(m, b, False))
        ent[eps] = float((e * b.response_mask).sum() / b.response_mask.sum())
    assert ent[0.0] < 0.5 * ent[0.3], ent


def test_demo_env_kwargs_choose_each_demonstrations_expert_and_never_the_tasks(monkeypatch, tmp_path):
    """Plain demonstrations are played with env.kwargs | demo_env_kwargs, skill-conditioned ones with
    env.kwargs | skill_demo_env_kwargs; the task ids come from env.kwargs alone (household: the prior
    searcher without a skill, the privileged expert under one)."""
    from seedrl.config import SFTConfig
    from seedrl.envs.panels import build_panel
    from seedrl.train import sft

    seen = {}

    def fake(kind):
        def run(env_name, env_kwargs, task_ids, **kw):
            seen[kind] = (dict(env_kwargs), list(task_ids))
            seen[kind + "_noise"] = kw["noise"]
            seen[kind + "_prefix"] = kw.get("random_prefix", 0)
            return [{"messages": [{"role": "user", "content": "x"}], "response": "<action>look</action>"}]
        return run

    monkeypatch.setattr(sft, "expert_demonstrations", fake("plain"))
    monkeypatch.setattr(sft, "skill_demonstrations", fake("skill"))
    monkeypatch.setattr(sft, "sft_train", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stop here")))
    cfg = SFTConfig.model_validate({
        "run_dir": str(tmp_path / "r"), "model": {"name": "tiny-micro"}, "demo_tasks": 3, "skill_demo_tasks": 2,
        "env": {"name": "household", "kwargs": {"prior_seed": 0}}, "eval": {"num_tasks": 0},
        "demo_env_kwargs": {"expert": "prior"}, "skill_demo_env_kwargs": {"expert": "oracle"},
        "demo_noise": 0.1, "skill_demo_noise": 0.4, "skill_demo_random_prefix": 2})
    with pytest.raises(RuntimeError, match="stop here"):
        sft.run_sft(cfg)
    ids = list(build_panel("household", "train", None, prior_seed=0).task_ids)
    assert seen["plain"] == ({"prior_seed": 0, "expert": "prior"}, ids[:3])
    assert seen["skill"] == ({"prior_seed": 0, "expert": "oracle"}, ids[:2])
    assert (seen["plain_noise"], seen["skill_noise"]) == (0.1, 0.4)
    assert (seen["plain_prefix"], seen["skill_prefix"]) == (0, 2)  # only the skill-conditioned games


def test_a_random_prefix_shows_the_experts_target_from_states_off_its_path():
    """household's oracle expert goes straight to the object, so on its own path step 1 is never a
    `go to`; after k random first actions it often stands somewhere else, and the label is then where the
    expert goes from there. The label of each step-0 row is the expert's, whatever the prefix then does."""
    from seedrl.envs.panels import build_panel
    from seedrl.train.sft import expert_demonstrations

    kwargs = {"prior_seed": 0, "expert": "oracle"}
    tasks = list(build_panel("household", "train", None, prior_seed=0).task_ids[:40])
    kw = dict(max_steps=4, history_length=3, noise=0.0, seed=5)
    plain = expert_demonstrations("household", kwargs, tasks, **kw)
    moved = expert_demonstrations("household", kwargs, tasks, random_prefix=2, **kw)

    def step1_go_to(rows):
        return sum(r["step"] == 1 and "go to" in r["response"] for r in rows)

    assert step1_go_to(plain) == 0 and step1_go_to(moved) >= 8
    first = {r["task_id"]: r for r in plain if r["step"] == 0}  # the prefix moves the agent, not the label
    assert all(r["response"] == first[r["task_id"]]["response"] and r["messages"] == first[r["task_id"]]["messages"]
               for r in moved if r["step"] == 0)


def test_a_policy_prefix_plays_the_models_own_answers_on_plain_prompts_and_keeps_the_experts_labels():
    """skill_demo_prefix_source: start: the first k actions are the model's answers to the skill-free step
    prompt (a hallucinated `take` included: the env gets exactly what it said), only at steps < k; every
    row's label stays the expert's; an unparsable answer falls back to the random prefix's action."""
    from seedrl.envs.panels import build_panel
    from seedrl.train.sft import expert_demonstrations

    kwargs = {"prior_seed": 0, "expert": "oracle"}
    tasks = list(build_panel("household", "train", None, prior_seed=0).task_ids[:30])
    kw = dict(max_steps=4, history_length=3, noise=0.0, seed=5, random_prefix=2)
    asked = []

    def hallucinate(messages, images):
        asked.append(messages)
        return "<think></think><action>take zzz 1 from nowhere 1</action>"

    rows = expert_demonstrations("household", kwargs, tasks, prefix_policy=hallucinate, **kw)
    randomly = expert_demonstrations("household", kwargs, tasks, **kw)
    assert expert_demonstrations("household", kwargs, tasks, prefix_policy=lambda m, images: "no action here", **kw) == randomly
    by = {(r["task_id"], r["step"]): r for r in rows}
    took = [t for t in tasks if (t, 1) in by and "take zzz 1 from nowhere 1" in by[(t, 1)]["messages"][-1]["content"]]
    assert len(took) >= 15 and len(asked) >= len(took)  # k >= 1 in about two thirds of the tasks
    early = {r["messages"][-1]["content"] for r in rows if r["step"] < 2}
    assert all(m[-1]["content"] in early for m in asked)  # asked on the rows' own prompts, before step k <= 2
    assert not any("skill" in m[-1]["content"].lower() for m in asked)
    first = {r["task_id"]: r["response"] for r in randomly if r["step"] == 0}
    assert all(r["response"] == first[r["task_id"]] for r in rows if r["step"] == 0)
    assert all("zzz" not in r["response"] for r in rows)  # never a label


def test_start_demonstrations_are_the_start_models_own_greedy_answers(tiny_model, tiny_tokenizer):
    """demo_source: start labels each plain step prompt the model saw with what the model itself answered
    there greedily (its invalid answers too), never the expert's action or a skill."""
    from seedrl.envs.panels import build_panel
    from seedrl.rollout.backends import HFBackend, SamplingParams
    from seedrl.rollout.runner import encode_messages
    from seedrl.train.sft import expert_demonstrations, policy_demonstrations

    tok, backend = tiny_tokenizer, HFBackend(tiny_model, tiny_tokenizer)
    tasks = list(build_panel("household", "train", None, prior_seed=0).task_ids[:3])
    rows = policy_demonstrations(backend, tok, "household", {"prior_seed": 0}, tasks, max_steps=2,
                                 history_length=3, seed=0)
    assert {r["task_id"] for r in rows} == set(tasks) and all(r["step"] in (0, 1) for r in rows)
    again = backend.generate([encode_messages(tok, r["messages"]) for r in rows],
                             SamplingParams(max_new_tokens=64, greedy=True, stop=["</action>"]), seed=1)
    assert [g.text for g in again] == [r["response"] for r in rows]
    expert = {(r["task_id"], r["step"]): r for r in expert_demonstrations(
        "household", {"prior_seed": 0}, tasks, max_steps=2, history_length=3, noise=0.0, seed=0)}
    first = [r for r in rows if r["step"] == 0]  # the same step-0 prompt as the expert's, another label
    assert all(r["messages"] == expert[(r["task_id"], 0)]["messages"] for r in first)
    assert all(r["response"] != expert[(r["task_id"], 0)]["response"] for r in first)  # an untrained model
    assert not any("skill" in m["content"].lower() for r in rows for m in r["messages"])


@pytest.mark.parametrize("source", ["expert", "start"])
def test_per_type_demo_sampling_evens_the_demonstrations_over_task_types(monkeypatch, tmp_path, source):
    """EZPoints' draw makes one pair of card values a third of the train split; ``demo_sampling: per_type``
    plays as many tasks of each pair as the split's sizes allow, for the expert and for the start model,
    ``first`` keeps the panel's order."""
    from collections import Counter

    from seedrl.config import SFTConfig
    from seedrl.envs.ezpoints.env import EZPointsEnv
    from seedrl.envs.panels import build_panel
    from seedrl.train import sft

    seen = {}

    def play(*args, **kw):
        seen["ids"] = list(args[4] if source == "start" else args[2])
        return [{"messages": [{"role": "user", "content": "x"}], "response": "<action>1</action>"}]

    monkeypatch.setattr(sft, "expert_demonstrations", play)
    monkeypatch.setattr(sft, "policy_demonstrations", play)
    monkeypatch.setattr(sft, "sft_train", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stop here")))
    base = {"run_dir": str(tmp_path / "r"), "model": {"name": "tiny-micro"}, "demo_tasks": 100,
            "demo_source": source, "env": {"name": "ezpoints", "kwargs": {"mode": "text"}, "train_size": 2048},
            "eval": {"num_tasks": 0}}
    for sampling in ("per_type", "first"):
        with pytest.raises(RuntimeError, match="stop here"):
            sft.run_sft(SFTConfig.model_validate(base | {"demo_sampling": sampling}))
        counts = Counter(EZPointsEnv.task_type(t) for t in seen["ids"])
        if sampling == "first":
            assert seen["ids"] == list(build_panel("ezpoints", "train", 2048, mode="text").task_ids[:100])
            assert counts["cards-2-10"] > 30  # the draw's common pair, for contrast
        else:
            assert len(seen["ids"]) == 100 and set(seen["ids"]) <= set(build_panel("ezpoints", "train", 2048,
                                                                                   mode="text").task_ids)
            assert sorted(counts.values()) == [20] * 5, counts


def test_demo_source_start_plays_the_start_model_instead_of_the_expert(monkeypatch, tmp_path):
    from seedrl.config import SFTConfig
    from seedrl.envs.panels import build_panel
    from seedrl.train import sft

    seen = {}
    monkeypatch.setattr(sft, "expert_demonstrations", lambda *a, **k: pytest.fail("the expert played"))

    def own(backend, tok, env_name, env_kwargs, task_ids, **kw):
        seen["args"] = (env_name, dict(env_kwargs), list(task_ids), backend.model)
        return [{"messages": [{"role": "user", "content": "x"}], "response": "<action>look</action>"}]

    monkeypatch.setattr(sft, "policy_demonstrations", own)
    monkeypatch.setattr(sft, "sft_train", lambda model, *a, **k: (_ for _ in ()).throw(RuntimeError(model)))
    cfg = SFTConfig.model_validate({
        "run_dir": str(tmp_path / "r"), "model": {"name": "tiny-micro"}, "demo_tasks": 3, "demo_source": "start",
        "env": {"name": "household", "kwargs": {"prior_seed": 0}}, "eval": {"num_tasks": 0},
        "demo_env_kwargs": {"expert": "random"}})
    with pytest.raises(RuntimeError) as trained:
        sft.run_sft(cfg)
    ids = list(build_panel("household", "train", None, prior_seed=0).task_ids)
    assert seen["args"][:3] == ("household", {"prior_seed": 0}, ids[:3])  # env.kwargs: no expert option
    assert seen["args"][3] is trained.value.args[0]  # the model that is then trained plays


def test_skill_demo_prefix_source_start_hands_the_start_model_to_the_skill_demonstrations(monkeypatch, tmp_path):
    from seedrl.config import SFTConfig
    from seedrl.train import sft

    seen = {}

    def skill_rows(*a, prefix_policy=None, **k):
        seen["policy"] = prefix_policy
        return [{"messages": [{"role": "user", "content": "x"}], "response": "<action>look</action>"}]

    monkeypatch.setattr(sft, "skill_demonstrations", skill_rows)
    monkeypatch.setattr(sft, "sft_train", lambda model, *a, **k: (_ for _ in ()).throw(RuntimeError(model)))
    base = {"run_dir": str(tmp_path / "r"), "model": {"name": "tiny-micro"}, "demo_tasks": 1, "skill_demo_tasks": 2,
            "skill_demo_random_prefix": 2, "env": {"name": "household", "kwargs": {"prior_seed": 0}},
            "eval": {"num_tasks": 0}}
    for source, expect in (("random", False), ("start", True)):
        with pytest.raises(RuntimeError):
            sft.run_sft(SFTConfig.model_validate(base | {"skill_demo_prefix_source": source}))
        assert (seen["policy"] is not None) == expect, source
    answer = seen["policy"]([{"role": "user", "content": "Your task is to: find a apple."}])
    assert isinstance(answer, str)  # the start model's greedy answer


def test_the_greedy_responder_answers_as_evaluation_plays(tiny_model, tiny_tokenizer):
    """skill_demo_prefix_source: start asks greedy_responder at each step; its answer to a step prompt is
    what the start's greedy evaluation play answered there (policy_demonstrations' rows)."""
    from seedrl.envs.panels import build_panel
    from seedrl.envs.registry import env_class
    from seedrl.rollout.backends import HFBackend
    from seedrl.train.sft import greedy_responder, policy_demonstrations

    backend = HFBackend(tiny_model, tiny_tokenizer)
    asked = []
    generate = backend.generate
    backend.generate = lambda prompts, params, seed: asked.append(params) or generate(prompts, params, seed)
    tasks = list(build_panel("household", "train", None, prior_seed=0).task_ids[:3])
    rows = policy_demonstrations(backend, tiny_tokenizer, "household", {"prior_seed": 0}, tasks, max_steps=1,
                                 history_length=3, seed=7)
    respond = greedy_responder(backend, tiny_tokenizer, stop=tuple(env_class("household").stop))
    asked.clear()
    assert [respond(r["messages"]) for r in rows] == [r["response"] for r in rows]
    assert asked and all(p.greedy and p.stop == list(env_class("household").stop) for p in asked)  # as play stops
    greedy_responder(backend, tiny_tokenizer, stop=("</search>", "</answer>"))(rows[0]["messages"])
    assert asked[-1].stop == ["</search>", "</answer>"]  # another env's stop strings, not the default


def _own_episodes(tasks: list[str], steps: int = 3):
    """Skill-free episodes on household's train tasks, as a start model's would be (the random-order
    searcher's greedy play), with their plain step prompts."""
    from seedrl.envs.registry import make_env
    from seedrl.rollout.types import StepSample, Trajectory
    from seedrl.train.sft import expert_demonstrations

    env = make_env("household", prior_seed=0)
    rows = expert_demonstrations("household", {"prior_seed": 0, "expert": "random"}, tasks, max_steps=steps,
                                 history_length=3, noise=0.0, seed=3)
    trajs = {t: Trajectory(0, 0, t) for t in tasks}
    for r in rows:
        trajs[r["task_id"]].steps.append(StepSample([1], [1], [0.0], 0, 0, r["step"], 0.0, True,
                                                    messages=r["messages"], action=env.parse_action(r["response"])))
    return list(trajs.values())


def test_counterfactual_pairs_show_one_state_under_two_skills_with_two_targets():
    """Each row is a state of the start's own episode with a counterfactual skill in SEED's teacher placement,
    labelled with the action the skill names: never the start's own action there, and two skills at one
    state name two places."""
    from seedrl.envs.oracle import norm
    from seedrl.envs.panels import build_panel
    from seedrl.envs.registry import make_env
    from seedrl.skills.injection import inject_into_messages
    from seedrl.train.sft import counterfactual_skill_demonstrations

    tasks = list(build_panel("household", "train", None, prior_seed=0).task_ids[:20])
    trajs = _own_episodes(tasks)
    own = {(t.task_id, s.step): s for t in trajs for s in t.steps}
    rows = counterfactual_skill_demonstrations("household", {"prior_seed": 0}, trajs, decisions=3, per_state=2,
                                               seed=0)
    env = make_env("household", prior_seed=0)
    assert len(rows) >= 60 and {r["step"] for r in rows} == {0, 1, 2}
    for r in rows:
        s = own[(r["task_id"], r["step"])]
        assert r["messages"] == inject_into_messages(s.messages, r["skill"])  # the start's own state, plus the skill
        named = env.parse_action(r["response"])
        assert named.startswith("go to ") and norm(named) != norm(s.action) and r["default"] == s.action
        assert f"was in {named[len('go to '):]}." in r["skill"]  # the label goes where the skill says
    targets: dict[tuple[str, int], set[str]] = {}
    for r in rows:
        targets.setdefault((r["task_id"], r["step"]), set()).add(r["response"])
    assert sum(len(v) == 2 for v in targets.values()) >= 20 and max(len(v) for v in targets.values()) == 2
    one = counterfactual_skill_demonstrations("household", {"prior_seed": 0}, trajs, decisions=1, per_state=1,
                                              seed=0)
    assert {r["step"] for r in one} == {0} and len(one) == len({r["task_id"] for r in one})


def test_counterfactual_demo_tasks_play_the_start_model_on_plain_prompts(monkeypatch, tmp_path):
    from seedrl.config import SFTConfig
    from seedrl.envs.panels import build_panel
    from seedrl.eval import evaluate
    from seedrl.train import sft

    seen = {}
    tasks = list(build_panel("household", "train", None, prior_seed=0).task_ids)

    def play(backend, tok, env_name, env_kwargs, task_ids, **kw):
        seen["play"] = (env_name, dict(env_kwargs), list(task_ids), backend.model)
        return _own_episodes(list(task_ids))

    monkeypatch.setattr(evaluate, "play_once", play)
    real = sft.counterfactual_skill_demonstrations

    def spy(env_name, env_kwargs, trajs, **kw):
        seen["cf"] = (env_name, dict(env_kwargs), [t.task_id for t in trajs], kw)
        return real(env_name, env_kwargs, trajs, **kw)

    monkeypatch.setattr(sft, "counterfactual_skill_demonstrations", spy)
    monkeypatch.setattr(sft, "sft_train", lambda model, tok, pairs, **k: (_ for _ in ()).throw(
        RuntimeError(model, len(pairs))))
    cfg = SFTConfig.model_validate({
        "run_dir": str(tmp_path / "r"), "model": {"name": "tiny-micro"}, "demo_tasks": 2,
        "env": {"name": "household", "kwargs": {"prior_seed": 0}, "max_steps": 3}, "eval": {"num_tasks": 0},
        "demo_env_kwargs": {"expert": "random"}, "counterfactual_demo_tasks": 6, "counterfactual_decisions": 2,
        "counterfactual_per_state": 1, "seed": 1})
    with pytest.raises(RuntimeError) as trained:
        sft.run_sft(cfg)
    assert seen["play"][:3] == ("household", {"prior_seed": 0}, tasks[:6])  # env.kwargs: no expert option
    assert seen["play"][3] is trained.value.args[0]  # the model then trained played, before training
    plain = len(sft.expert_demonstrations("household", {"prior_seed": 0, "expert": "random"}, tasks[:2],
                                          max_steps=3, history_length=3, noise=0.1, seed=1))
    assert seen["cf"] == ("household", {"prior_seed": 0}, tasks[:6], {"decisions": 2, "per_state": 1, "seed": 1})
    cf = {(d, k): len(real("household", {"prior_seed": 0}, _own_episodes(tasks[:6]),
                                                             decisions=d, per_state=k, seed=1))
          for d, k in ((2, 1), (3, 2), (2, 2), (3, 1))}
    assert len(set(cf.values())) == 4  # each option changes the rows, so the count shows which were used
    assert trained.value.args[1] == plain + cf[(2, 1)]


def test_an_empty_data_file_is_named_not_the_expert(tmp_path):
    """`run_sft` with a data file of blank lines (the CLI refuses it earlier, see tests/test_bad_inputs.py)."""
    from seedrl.config import SFTConfig
    from seedrl.errors import SeedRLError
    from seedrl.train.sft import run_sft

    (tmp_path / "empty.jsonl").write_text("\n")
    cfg = SFTConfig(run_dir=str(tmp_path / "sft"), data=str(tmp_path / "empty.jsonl"), model={"name": "tiny-micro"})
    with pytest.raises(SeedRLError) as e:
        run_sft(cfg)
    assert "empty.jsonl' holds no example (the file is empty" in str(e.value) and "expert" not in str(e.value)


def test_the_sft_schedule_by_hand():
    """A linear rise over ``warmup`` steps, then a cosine from 1 to ``floor`` (verl's SFT trainer: to 0);
    the default floor 0.1 is the schedule every earlier SFT run used."""
    from seedrl.train.sft import sft_lr_factor

    assert [sft_lr_factor(s, 10, 2, 0.0) for s in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert sft_lr_factor(6, 10, 2, 0.0) == pytest.approx(0.5)  # half-way through the cosine
    assert sft_lr_factor(6, 10, 2) == pytest.approx(0.1 + 0.9 * 0.5)
    assert sft_lr_factor(10, 10, 2, 0.0) == pytest.approx(0.0, abs=1e-12)
    assert sft_lr_factor(0, 10, 0) == 1.0  # no warm-up


def test_sft_takes_the_warmup_share_floor_and_betas_of_its_config(monkeypatch):
    """``warmup_ratio`` is a share of the run's optimizer steps (verl's ``warmup_steps_ratio``:
    ``int(ratio * total)``), and ``lr_floor`` and ``betas`` reach the schedule and AdamW. Kills: any of
    them dropped on the way."""
    from seedrl.train import sft

    seen, betas = set(), []
    real_factor, real_adamw = sft.sft_lr_factor, sft.adamw

    def factor(s, total, warm, floor):
        seen.add((total, warm, floor))
        return real_factor(s, total, warm, floor)

    def opt(model, lr, wd, b=(0.9, 0.999)):
        betas.append(b)
        return real_adamw(model, lr, wd, b)

    monkeypatch.setattr(sft, "sft_lr_factor", factor)
    monkeypatch.setattr(sft, "adamw", opt)
    tok = load_tokenizer("tiny-micro")
    sft_train(load_model("tiny-micro", tokenizer=tok), tok, _pairs(tok), epochs=5, lr=1e-3, batch_size=2,
              micro_batch_size=2, warmup_ratio=0.1, lr_floor=0.0, betas=(0.9, 0.95))
    assert seen == {(20, 2, 0.0)} and betas == [(0.9, 0.95)]


def test_sft_config_refuses_two_warmups_and_the_alfworld_stage1_preset_follows_verls_sft_trainer():
    from pathlib import Path

    from seedrl.config import SFTConfig, load_config
    from seedrl.errors import SeedRLError

    with pytest.raises(SeedRLError, match="warmup_ratio"):
        load_config(SFTConfig, None, ["warmup_ratio=0.1"])  # warmup_steps keeps its default 20
    c = load_config(SFTConfig, Path(__file__).parents[2] / "configs" / "alfworld_stage1_sft.yaml")
    assert (c.warmup_steps, c.warmup_ratio, c.lr_floor, c.betas, c.weight_decay) == (0, 0.1, 0.0, (0.9, 0.95), 0.01)


def test_counterfactual_pairs_on_an_env_without_counterfactual_skills_name_the_envs_that_have_them(tmp_path):
    from seedrl.config import SFTConfig
    from seedrl.errors import SeedRLError
    from seedrl.train.sft import counterfactual_skill_demonstrations, run_sft

    with pytest.raises(SeedRLError, match=r"'search' has none \(these do: .*household.*sokoban"):
        counterfactual_skill_demonstrations("search", {}, [], decisions=1, per_state=1, seed=0)
    cfg = SFTConfig.model_validate({"run_dir": str(tmp_path / "r"), "model": {"name": "tiny-micro"}, "demo_tasks": 1,
                                    "env": {"name": "search"}, "eval": {"num_tasks": 0},
                                    "counterfactual_demo_tasks": 2})
    with pytest.raises(SeedRLError, match="'search' has none"):
        run_sft(cfg)


def test_sft_evaluates_on_a_panel_of_eval_panel_size(tmp_path):
    import json

    from seedrl.config import SFTConfig, load_config
    from seedrl.envs.panels import build_panel
    from seedrl.train.sft import run_sft

    cfg = load_config(SFTConfig, None, [f"run_dir={tmp_path}", "model.name=tiny-micro", "env.name=sokoban",
                                        "env.max_steps=2", "env.history_length=0", "demo_tasks=2", "epochs=1",
                                        "torch_threads=1", "eval.num_tasks=null", "eval.panel_size=3"])
    res = run_sft(cfg)["eval_after"]
    assert (res["num_tasks"], res["panel_size"]) == (3, 3)
    saved = json.loads((tmp_path / "eval_after.json").read_text())
    assert [t["task_id"] for t in saved["tasks"]] == list(build_panel("sokoban", "valid_seen").task_ids[:3])
