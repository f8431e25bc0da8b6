"""Does the board-last layout lose the demo's start because the board is read at the last positions?

``configs/demo_sokoban_obslast_sft.yaml`` (the board after the instructions) gave a start that wins 0.188 of
128 ``valid_seen`` rooms against the default layout's 0.523 (benchmarks/RESULTS.md, issue 44, eighth session).
The default layout has ~86 constant instruction tokens *after* the board, so a 6-layer model gets that many
more positions of computation before it answers. This probe trains the same SFT with ``--pause N`` constant
dots (" ." repeated: 2N - 1 tokens of the built-in tokenizer) appended on a line after the board of every board-last prompt (demonstrations and evaluation
alike) and prints the start's greedy success; ``--pause 0`` is the plain board-last recipe. An experiment,
not a layout: the filler is patched into ``build_step_prompt`` for this process only.

    python benchmarks/pause_probe.py --pause 16 --out runs/pause16
"""

from __future__ import annotations

import argparse
import inspect
import json

import seedrl.agent.prompts as prompts
import seedrl.rollout.runner as runner
import seedrl.train.sft as sft
from seedrl.config import SFTConfig, load_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pause", type=int, required=True, help="dots after the board (0: none)")
    ap.add_argument("--out", required=True, help="the SFT's run folder")
    ap.add_argument("--config", default="configs/demo_sokoban_obslast_sft.yaml")
    ap.add_argument("--num-tasks", type=int, default=128, help="valid_seen rooms evaluated greedily")
    args = ap.parse_args()
    plain = prompts.build_step_prompt
    filler = "\n" + " ".join(["."] * args.pause) if args.pause else ""

    def with_pause(*a, **kw):
        text = plain(*a, **kw)
        style = inspect.signature(plain).bind(*a, **kw).arguments.get("style", "seedrl")
        return text + filler if style == "seedrl_observation_last" else text

    sft.build_step_prompt = runner.build_step_prompt = with_pause
    cfg = load_config(SFTConfig, args.config, [f"run_dir={args.out}", f"eval.num_tasks={args.num_tasks}",
                                               "eval.split=valid_seen", "eval.greedy=true"])
    summary = sft.run_sft(cfg)
    after = json.load(open(f"{args.out}/eval_after.json"))
    print(json.dumps({"pause": args.pause, "loss_last": summary["loss_last"], "success": after["success_rate"],
                      "ci95": after["ci95"], "num_tasks": after["num_tasks"]}))


if __name__ == "__main__":
    main()
