"""Which of a run's self-analyses gave a skill, split by the trajectory's outcome.

Reads the ``skills.jsonl`` every SEED-family run folder writes (one row per analysed trajectory:
success, parsed skill or parse error) and prints, per run and over all runs: parse rate on
successful and on failed trajectories, and the most common parse errors, then the same over all runs
per training iteration. With ``--stage1`` it also
counts successes and failures in the Stage-1 SFT data the analyzer was trained on, to compare the
outcome mix it learnt from with the one it meets during RL.

    python benchmarks/skill_parse.py runs/compare/alfworld_gen/seed-seed* --stage1 runs/alfworld_stage1/data.jsonl

With ``--model`` it checks a self-analyzer *before* any RL: the model answers the analysis prompts of
a ``seedrl analyze`` JSONL (``--prompts``: oracle-labelled trajectories it did not train on, e.g. another
panel's, or its own Stage-1 rows) greedily, exactly as SEED's self-analyzer does, and the same counts are printed, with the mean
teacher-forced NLL per token of the oracle's answers (a high NLL on training rows too = underfitted) and,
where the oracle's skill says where an object was (alfworld: "was in drawer 3"), how often the parsed
self-skill names the same place (a parsable skill can still be wrong), and how many failed attempts
ever reached that place (if they did not, only the privileged oracle can know it):

    python benchmarks/skill_parse.py --model runs/alfworld_gen_literate_stage1b/model \
        --prompts runs/heldout/valid_seen.jsonl --config configs/alfworld_gen_literate_seed.yaml --n 60
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path


def parse_stats(rows: list[dict]) -> dict:
    """Counts of parsed skills by trajectory outcome and of parse errors (first 40 characters)."""
    out = {"trajectories": len(rows)}
    for name, won in (("success", True), ("failure", False)):
        sub = [r for r in rows if bool(r.get("success")) is won]
        out[name] = {"n": len(sub), "parsed": sum(bool(r.get("skill")) for r in sub)}
    out["errors"] = Counter((r.get("error") or "")[:40] for r in rows if not r.get("skill")).most_common(4)
    return out


def by_iteration(rows: list[dict]) -> dict[int, dict]:
    """:func:`parse_stats` of the rows of each training iteration (``skills.jsonl``'s ``iteration``), in
    order: whether the analyzer starts short of a rate or falls short of it as RL moves the policy."""
    its = sorted({int(r["iteration"]) for r in rows})
    return {it: parse_stats([r for r in rows if int(r["iteration"]) == it]) for it in its}


def stage1_mix(path: Path) -> dict:
    """Successful vs failed trajectories among Stage-1 SFT rows (``seedrl analyze`` records each row's
    ``success``)."""
    rows = _jsonl(path)
    succ = sum(bool(r.get("success")) for r in rows)
    return {"rows": len(rows), "success": succ, "failure": len(rows) - succ}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def answer_rows(model: str, data: Path, config: Path | None, n: int, threads: int,
                overrides: list[str] | tuple[str, ...] = ()) -> list[dict]:
    """skills.jsonl-like rows (success, skill, error, nll, ...) of ``model`` answering the first ``n``
    analysis prompts of ``data`` (half failures where there are enough), with the run's skills settings
    (``overrides``: ``--set`` of the run, e.g. ``skills.max_new_tokens=320``)."""
    import torch

    from seedrl.config import TrainConfig, load_config
    from seedrl.methods.sources import make_analyzer
    from seedrl.models.loading import load_model, load_tokenizer
    from seedrl.models.precision import resolve_precision
    from seedrl.models.scoring import batched_logprobs
    from seedrl.rollout.backends import make_backend
    from seedrl.skills.parsing import parse_skill
    from seedrl.train.sft import read_jsonl

    torch.set_num_threads(threads)
    cfg = load_config(TrainConfig, config, [*overrides, f"model.name={model}", "skills.analyzer=self"])
    bf16 = resolve_precision(cfg.model.precision, cfg.model.device).bf16
    tok = load_tokenizer(model)
    net = load_model(model, cfg.model.dtype, cfg.model.device, None, cfg.model.init_seed, tokenizer=tok)
    analyzer = make_analyzer(cfg, make_backend("hf", net, tok, bf16=bf16, seed=cfg.seed), tok, bf16=bf16,
                             source="hindsight")
    rows = read_jsonl(data)
    failures = [r for r in rows if not r["success"]][:n // 2]
    rows = failures + [r for r in rows if r["success"]][:n - len(failures)]
    prompts, gens = zip(*analyzer.answer([r["messages"] for r in rows]))
    targets = [tok(r["response"], add_special_tokens=False)["input_ids"] for r in rows]
    logps = batched_logprobs(net, prompts, targets, tok.pad_token_id, micro_batch_size=8, bf16=bf16)
    out = []
    for r, gen, lp in zip(rows, gens, logps):
        parsed = parse_skill(gen.text, cfg.skills.min_words)
        out.append({"success": r["success"], "skill": parsed.skill, "error": parsed.error, "raw": gen.text,
                    "oracle": parse_skill(r["response"]).skill, "reached": reached(r),
                    "nll": float(-lp.mean())})
    return out


_PLACE = re.compile(r"was in ([a-z]+ \d+)")


def reached(row: dict) -> bool | None:
    """Did the attempt reach the place the oracle's skill names (an "arrive at", "open the" or "On the"
    line for it in the analysis prompt)? None when the oracle names no place."""
    places = _PLACE.findall(row["response"])
    if not places:
        return None
    text = row["messages"][-1]["content"]
    return any(f"{w} {places[0]}" in text for w in ("arrive at", "open the", "On the"))


def same_place(rows: list[dict]) -> tuple[int, int]:
    """(parsed self-skills naming the oracle skill's place, parsed rows whose oracle skill names one)."""
    pairs = [(r["skill"], _PLACE.findall(r.get("oracle") or "")) for r in rows if r["skill"]]
    pairs = [(s, p) for s, p in pairs if p]
    return sum(p[0] in _PLACE.findall(s) for s, p in pairs), len(pairs)


def _fmt(s: dict) -> str:
    """Parse counts by outcome, each with its 95% Wilson interval (the one ``seedrl eval`` gives success)."""
    from seedrl.eval.evaluate import wilson_interval

    f = ", ".join(f"{k} {s[k]['parsed']}/{s[k]['n']} [{lo:.3f}, {hi:.3f}]" for k in ("success", "failure")
                  for lo, hi in [wilson_interval(s[k]["parsed"], s[k]["n"])])
    return f"{s['trajectories']} trajectories; parsed on {f}; errors {s['errors']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, help="run folders holding skills.jsonl")
    ap.add_argument("--stage1", type=Path, help="the Stage-1 SFT JSONL (from `seedrl analyze`)")
    ap.add_argument("--model", help="check this model's greedy self-analysis on --prompts instead of runs")
    ap.add_argument("--prompts", type=Path, help="`seedrl analyze` JSONL whose prompts the model answers")
    ap.add_argument("--config", type=Path, help="preset giving the skills.* settings (as in the SEED run)")
    ap.add_argument("--n", type=int, default=60, help="prompts to answer, half of them failures")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override as in the run (repeatable), e.g. skills.max_new_tokens=320")
    ap.add_argument("--out", type=Path, help="write the answered rows (with raw answers) here as JSONL")
    a = ap.parse_args()
    if a.model:
        if not a.prompts:
            ap.error("--model needs --prompts")
        rows = answer_rows(a.model, a.prompts, a.config, a.n, a.threads, a.set)
        if a.out:
            a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        nll = {k: sum(r["nll"] for r in rows if bool(r["success"]) is w) / max(1, sum(bool(r["success"]) is w
                                                                                       for r in rows))
               for k, w in (("success", True), ("failure", False))}
        place = "{}/{}".format(*same_place(rows))
        place_failures = "{}/{}".format(*same_place([r for r in rows if not r["success"]]))
        print(f"{a.model} on {a.prompts}: {_fmt(parse_stats(rows))}; "
              f"oracle-answer NLL/token success {nll['success']:.3f}, failure {nll['failure']:.3f}; "
              f"same place as the oracle's skill {place} (failures {place_failures}); failed attempts that "
              f"reached the oracle's place {sum(r['reached'] is True for r in rows if not r['success'])}/"
              f"{sum(r['reached'] is not None for r in rows if not r['success'])}")
        return
    if not a.runs:
        ap.error("give run folders, or --model with --prompts")
    every: list[dict] = []
    for run in a.runs:
        rows = _jsonl(run / "skills.jsonl")
        every += rows
        print(f"{run}: {_fmt(parse_stats(rows))}")
    print(f"all: {_fmt(parse_stats(every))}")
    print("by iteration (all runs): " + "; ".join(
        f"{it}: failure {st['failure']['parsed']}/{st['failure']['n']}, success {st['success']['parsed']}/"
        f"{st['success']['n']}" for it, st in by_iteration(every).items()))
    if a.stage1:
        print(f"stage-1 data {a.stage1}: {stage1_mix(a.stage1)}")


if __name__ == "__main__":
    main()
