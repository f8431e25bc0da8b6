"""Probes behind benchmarks/results/visual_tiny/notes.md (issue 45): can a tiny vision-language policy learn
pixel Sokoban from rendered demonstrations?

    python benchmarks/visual_probe.py overfit                 # 8 step-0 states, four different actions, 300 steps
    python benchmarks/visual_probe.py sft --size 3m --set run_dir=runs/visual_tiny/sft3m
    python benchmarks/visual_probe.py sft --vision-init width --set run_dir=runs/visual_tiny/sft_init
    python benchmarks/visual_probe.py pairs runs/ez/eval_seen.json     # EZPoints success per card pair
    python benchmarks/visual_probe.py read --threads 2                 # can it read EZPoints' left card?
    python benchmarks/visual_probe.py teacher runs/compare/ezpoints_tiny    # the teacher at EZPoints' operator

``overfit`` trains the built-in tiny-qwen2.5-vl on the first step of 8 train rooms (the pixel prompt's text is
the same in every state, so only the frame tells the actions apart) and prints the loss every 30 steps: the
frames reach the loss if it falls near 0. ``sft`` runs ``seedrl sft`` with configs/sokoban_visual_tiny_sft.yaml
and the overrides given, with ``--size 3m`` on a larger tiny model registered for this process only (the
language model of tiny-3m, 6 layers x 160, under a 4-block, 64-wide vision tower; not a built-in: it did not
learn either). ``pairs`` reads a ``seedrl eval`` result on EZPoints and prints the wins per pair of card
values: a policy that writes one formula whatever the cards wins every game of one pair and none of the others.
``read`` trains the built-in on the first step of 64 EZPoints train games, evened over the pairs of card
values (the answer is the left card's value, only in the image), for 200 steps of 32, and prints the mean
probability of the right value and the share above one half on those games and on 128 valid_seen games it
never saw (a model blind to the image does best with a third on 6, the left card of 21 of the 64 train
games). ``teacher`` reads the traces of a compare runs folder's ``seed*`` cells and prints, per pair of card
values, operator written and operator the episode's skill names (``*`` for "multiply to 12", ``+`` for "add
up to 12", ``-`` for a skill that names none), the teacher's log-probability minus the student's at the
operator token (traces keep a few episodes an iteration). ``--vision-init width`` initialises the vision tower and merger with std = the tower's
width^-1/2 (the built-in keeps transformers' 0.02 there; its language model already uses width^-1/2, the
fix ``tiny_config`` documents for text models), for this process only.
"""

from __future__ import annotations

import argparse

import torch

LARGER = ("qwen2_5_vl", dict(hidden_size=160, num_hidden_layers=6, num_attention_heads=5, intermediate_size=640),
          dict(depth=4, hidden_size=64, intermediate_size=256, num_heads=2, window_size=56, fullatt_block_indexes=[1, 3]))


def overfit(steps: int = 300) -> list[float]:
    from seedrl.models.loading import load_model, load_tokenizer
    from seedrl.train.sft import encode_rows, expert_demonstrations, sft_train

    tok = load_tokenizer("tiny-qwen2.5-vl")
    rows = expert_demonstrations("sokoban", {"dim": [5, 5], "mode": "rgb_array"}, [f"5x5-b1-s{i}" for i in range(8)],
                                 max_steps=1, history_length=0, noise=0.0, seed=0)
    pairs, images = encode_rows(tok, rows, 4096)
    print("actions:", [r["response"].split("<action>")[1].split("<")[0] for r in rows])
    model = load_model("tiny-qwen2.5-vl", tokenizer=tok)
    return sft_train(model, tok, pairs, epochs=steps, lr=1e-3, batch_size=len(pairs), micro_batch_size=len(pairs),
                     seed=0, images=images)


def first_step_games(split: str, n: int) -> list[str]:
    """``n`` EZPoints games of ``split`` for the read probe: train from its first 4,096 tasks, evened over the
    pairs of card values; valid_seen from its 128-game panel."""
    from seedrl.envs.panels import build_panel
    from seedrl.train.sft import demo_task_ids

    return demo_task_ids(build_panel("ezpoints", split, 4096 if split == "train" else 128), n, "per_type", 0)[0]


def first_steps(tok, split: str, n: int) -> tuple[list, list]:
    """The encoded first step of :func:`first_step_games`, each labelled with the solver's first token (the
    left card's value), and their images."""
    from seedrl.train.sft import encode_rows, expert_demonstrations

    return encode_rows(tok, expert_demonstrations("ezpoints", {"mode": "rgb_array"}, first_step_games(split, n),
                                                  max_steps=1, history_length=0, noise=0.0, seed=0), 4096)


def read(games: int = 64, steps: int = 200, lr: float = 1e-3) -> dict[str, tuple[float, float]]:
    """{"train" | "valid_seen": (mean probability of the expert's first token, share of games above 1/2)}."""
    from seedrl.models.loading import load_model, load_tokenizer
    from seedrl.train.sft import sft_train

    tok = load_tokenizer("tiny-qwen2.5-vl")
    model = load_model("tiny-qwen2.5-vl", tokenizer=tok)
    pairs, images = first_steps(tok, "train", games)
    sft_train(model, tok, pairs, epochs=steps * 32 // games, lr=lr, batch_size=32, micro_batch_size=32, seed=0,
              images=images)
    return {"train": _action_probability(model, tok, pairs, images),
            "valid_seen": _action_probability(model, tok, *first_steps(tok, "valid_seen", 128))}


@torch.no_grad()
def _action_probability(model, tok, pairs, images) -> tuple[float, float]:
    from seedrl.agent.parsing import decision_mask
    from seedrl.models.scoring import forward_logprobs, pack

    model.eval()
    probs = []
    for m in range(0, len(pairs), 32):
        chunk = pairs[m:m + 32]
        b = pack([p for p, _ in chunk], [r for _, r in chunk], tok.pad_token_id, "cpu", images[m:m + 32])
        logp, _ = forward_logprobs(model, b)
        for k, (_, r) in enumerate(chunk):
            mask = torch.tensor(decision_mask(tok, r), dtype=torch.bool)
            probs.append(float(logp[k, b.width - len(r):][mask].sum().exp()))
    return sum(probs) / len(probs), sum(p > 0.5 for p in probs) / len(probs)


def teacher(runs: str) -> dict[tuple[str, str, str], list[float]]:
    """{(task type, operator written, operator the skill names): [teacher - student log-probability at the
    operator token]} over the traced EZPoints episodes of ``runs``' SEED cells."""
    import glob
    import json

    out: dict[tuple[str, str, str], list[float]] = {}
    for f in sorted(glob.glob(f"{runs}/seed*/traces/iter_*.json")):
        for t in json.loads(open(f).read())["trajectories"]:
            skill = t.get("skill") or ""
            says = "*" if "multiply to 12" in skill else "+" if "add up to 12" in skill else "-"
            for s in t["steps"]:
                if s["action"] in ("+", "*") and s.get("teacher_logp") and s["action"] in s["tokens"]:
                    k = s["tokens"].index(s["action"])
                    out.setdefault((t["task_type"], s["action"], says), []).append(s["teacher_logp"][k] - s["old_logp"][k])
    return dict(sorted(out.items()))


def width_init(built_in):
    """``built_in`` (:func:`seedrl.models.vision.tiny_vl_config`) with the vision tower and merger initialised
    at std = the tower's width^-1/2, the language model's rule, instead of transformers' 0.02."""

    def config(name, tokenizer):
        cfg = built_in(name, tokenizer)
        cfg.vision_config.initializer_range = cfg.vision_config.hidden_size ** -0.5
        cfg.initializer_range = cfg.text_config.initializer_range
        return cfg

    return config


def pairs(result: str) -> dict[str, tuple[int, int]]:
    """{task type (``EZPointsEnv.task_type``, the pair of card values, e.g. ``cards-2-10``): (won, games)} over
    every panel of an EZPoints ``seedrl eval`` result, also one written before results carried ``by_type``."""
    import json

    from seedrl.envs.ezpoints.env import EZPointsEnv

    out: dict[str, list[int]] = {}
    for panel in json.loads(open(result).read())["panels"].values():
        for t in panel["tasks"]:
            row = out.setdefault(EZPointsEnv.task_type(t["task_id"]), [0, 0])
            row[0] += bool(t["won"])
            row[1] += 1
    return {k: (w, n) for k, (w, n) in sorted(out.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("probe", choices=["overfit", "sft", "pairs", "read", "teacher"])
    ap.add_argument("result", nargs="?", help="pairs: a seedrl eval result on EZPoints; teacher: a compare runs folder")
    ap.add_argument("--size", choices=["tiny", "3m"], default="tiny")
    ap.add_argument("--set", action="append", default=[], help="an SFT config override (sft)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vision-init", choices=["hf", "width"], default="hf",
                    help="the vision tower's init std: transformers' 0.02 (the built-in's) or its width^-1/2")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.probe == "pairs":
        for kind, (won, n) in pairs(args.result).items():
            print(f"{kind}: won {won} of {n}")
        return
    if args.probe == "teacher":
        for (kind, op, says), deltas in teacher(args.result).items():
            print(f"{kind} wrote {op} skill names {says}: {len(deltas)} steps, teacher - student mean "
                  f"{sum(deltas) / len(deltas):+.3f} nats")
        return
    if args.probe == "read":
        for split, (p, share) in read().items():
            print(f"{split}: the left card's value has mean probability {p:.3f}; above 1/2 in {share:.3f} of games")
        return
    if args.probe == "overfit":
        losses = overfit()
        print("loss every 30 steps:", " ".join(f"{x:.3f}" for x in losses[::30]), f"last {losses[-1]:.4f}")
        return
    import seedrl.models.vision as vision
    from seedrl.config import SFTConfig, load_config
    from seedrl.train.sft import run_sft

    sets = list(args.set)
    if args.vision_init == "width":
        vision.tiny_vl_config = width_init(vision.tiny_vl_config)
    if args.size == "3m":
        vision.TINY_VL_CONFIGS["tiny-qwen2.5-vl-3m"] = LARGER
        sets.append("model.name=tiny-qwen2.5-vl-3m")
    print(run_sft(load_config(SFTConfig, "configs/sokoban_visual_tiny_sft.yaml", [f"torch_threads={args.threads}", *sets])))


if __name__ == "__main__":
    main()
