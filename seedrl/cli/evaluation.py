"""`seedrl eval`: fixed-panel evaluation, or with --with-skills the skill-lift diagnostic."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from seedrl.cli.common import _check_out, _check_temperature, _fail, _setup_logging, _write_out, app, console
from seedrl.errors import SeedRLError


@app.command("eval")
def eval_(checkpoint: str = typer.Option(..., "--checkpoint", help="a run folder, a checkpoint folder, a model "
                                         "folder, a hub name or a built-in model (tiny-3m)"),
          env: Optional[str] = typer.Option(None, "--env", help="environment (default: the run's)"),
          env_kwargs: Optional[str] = typer.Option(None, "--env-kwargs", help="env options as YAML, e.g. "
                                                   "'{dim: [5, 5], coords: true}' (default: the run's)"),
          splits: Optional[list[str]] = typer.Option(None, "--split", "--panel",
                                                     help="panel: train | valid_seen | valid_unseen (repeatable; "
                                                     "default valid_unseen)"),
          num_tasks: Optional[int] = typer.Option(None, "--num-tasks", help="N tasks of each panel, seeded and stratified by task type"),
          panel_size: Optional[int] = typer.Option(None, "--panel-size", help="build each panel with N tasks "
                                                   "instead of the split's default size, where the env generates "
                                                   "its tasks (household: the default panel is its first tasks); "
                                                   "the panel hash changes with it"),
          max_steps: Optional[int] = typer.Option(None, "--max-steps"),
          history_length: Optional[int] = typer.Option(None, "--history-length"),
          greedy: bool = typer.Option(True, "--greedy/--sample", help="greedy decoding, or sampling at "
                                      "--temperature (0.4 as in the SEED paper)"),
          temperature: float = typer.Option(0.4, "--temperature"),
          seeds: str = typer.Option("0", "--seeds", "--seed", help="evaluation seeds, e.g. 0,1,2 (sampled "
                                    "evaluation; greedy takes one)"),
          batch_size: Optional[int] = typer.Option(None, "--batch-size", help="episodes per batched rollout"),
          workers: Optional[int] = typer.Option(None, "--workers", help="env worker threads (never changes a result)"),
          device: str = typer.Option("cpu", "--device"),
          dtype: str = typer.Option("float32", "--dtype"),
          precision: str = typer.Option("auto", "--precision", help="compute precision: auto (bf16 where the "
                                        "device computes it natively) | fp32 | bf16"),
          backend_name: str = typer.Option("hf", "--backend", help="generation backend: hf | vllm (the run's "
                                           "rollout.vllm_* settings, or their defaults)"),
          out: Optional[Path] = typer.Option(None, "--out", help="write the full result JSON here"),
          set_: Optional[list[str]] = typer.Option(None, "--set", help="override a key of the run's config (or "
                                                  "of the defaults), e.g. --set skills.max_obs_chars=400 for "
                                                  "the --with-skills analyzer (repeatable)"),
          with_skills: Optional[str] = typer.Option(None, "--with-skills", help="DIAGNOSTIC instead of the "
                                                    "evaluation: play each task, let the analyzer (oracle | self) "
                                                    "write a skill about it, play it again with the skill in the "
                                                    "prompt; reports the skill lift, never a success rate"),
          against: Optional[str] = typer.Option(None, "--against", help="with --with-skills: the plain start "
                                                "(a checkpoint) whose skill-free success the model's is compared "
                                                "with on the same tasks (the 'harm' of a literacy recipe)"),
          follow_decisions: int = typer.Option(3, "--follow-decisions", help="with --with-skills: the steps of "
                                               "each plain attempt where a counterfactual skill (another sensible "
                                               "action) is offered, where the env's oracle writes them; 0: none"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Evaluate a model on fixed panels (plain prompts, never a skill): success, score, episode
    length, invalid-action rate, per task type; JSON with panel hashes, config and commit.
    With --with-skills, the skill-lift diagnostic instead (seedrl/eval/skill_lift.py)."""
    _setup_logging(verbose)
    try:
        from seedrl.config import RolloutConfig, TrainConfig
        from seedrl.envs.panels import build_panel
        from seedrl.eval.evaluate import combine_seeds, evaluate
        from seedrl.models.loading import load_model, load_tokenizer
        from seedrl.models.precision import resolve_precision
        from seedrl.provenance import git_commit
        from seedrl.rollout.backends import backend_options, make_backend
        from seedrl.train.checkpoint import check_finite_model, resolve_checkpoint

        try:
            seed_list = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise SeedRLError(f"--seeds expects integers like 0,1,2, got {seeds!r}") from None
        if not seed_list:
            raise SeedRLError("--seeds names no seed")
        if greedy and len(seed_list) > 1:
            raise SeedRLError("greedy evaluation does not depend on the seed: give one --seeds value, or pass "
                              "--sample for sampled evaluation under several seeds")
        _check_out(out)
        for flag, value, lo in (("--num-tasks", num_tasks, 1), ("--panel-size", panel_size, 1),
                                ("--max-steps", max_steps, 1),
                                ("--history-length", history_length, 0), ("--batch-size", batch_size, 1),
                                ("--workers", workers, 1)):
            if value is not None and value < lo:
                raise SeedRLError(f"{flag} must be at least {lo}, got {value}")
        if temperature < 0 or (not greedy and temperature == 0):
            raise SeedRLError(f"--temperature must be > 0 when sampling (--sample), got {temperature}")
        _check_temperature(temperature)
        from seedrl.config import check_device, parse_yaml_value

        device = check_device(device, "--device")
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise SeedRLError(f"--device {device} but CUDA is not available here; use --device cpu")
        split_list = list(dict.fromkeys(splits or ["valid_unseen"]))
        model_path, run_cfg = resolve_checkpoint(checkpoint)
        if run_cfg is None and env is None and not Path(checkpoint).expanduser().exists():
            from seedrl.models.loading import builtin_names

            if checkpoint not in builtin_names():
                raise SeedRLError(f"checkpoint {checkpoint!r} does not exist (no such folder from {Path.cwd()}); give "
                                  f"a run folder, a checkpoint folder or a model folder (a hub name also needs --env)")
        if set_:
            from seedrl.config import with_overrides

            run_cfg = with_overrides(run_cfg or TrainConfig(), set_)
        env_name = env or (run_cfg.env.name if run_cfg else None)
        if env_name is None:
            raise SeedRLError("--env is required when the checkpoint is not inside a run folder")
        if env_kwargs is not None:
            kwargs = parse_yaml_value(env_kwargs, "--env-kwargs") or {}
            if not isinstance(kwargs, dict):
                raise SeedRLError(f"--env-kwargs must be a YAML mapping, got {env_kwargs!r}")
        else:
            kwargs = run_cfg.env.kwargs if run_cfg and run_cfg.env.name == env_name else {}
        panels = [build_panel(env_name, sp, panel_size, **kwargs) for sp in split_list]
        for p in panels:
            if num_tasks is not None and num_tasks > len(p.task_ids):  # Panel.subset plays the whole panel
                typer.echo(f"warning: --num-tasks {num_tasks} is more than the {len(p.task_ids)} tasks of "
                           f"{env_name}/{p.split}; playing all {len(p.task_ids)}", err=True)
        settings = {
            "max_steps": max_steps or (run_cfg.env.max_steps if run_cfg else 15),
            "history_length": history_length if history_length is not None else (
                run_cfg.env.history_length if run_cfg else 2),
            "max_new_tokens": run_cfg.rollout.max_new_tokens if run_cfg else 64,
            "max_prompt_tokens": run_cfg.rollout.max_prompt_tokens if run_cfg else 2048,
            "greedy": greedy, "temperature": temperature,
            "batch_size": batch_size or (run_cfg.eval.batch_size if run_cfg else 32), "num_tasks": num_tasks,
            "step_timeout_s": run_cfg.env.step_timeout_s if run_cfg else 60.0,
            "env_workers": workers or (run_cfg.env.workers if run_cfg else 8),
            "executor": run_cfg.env.executor if run_cfg else "thread",
            "ray_address": run_cfg.env.ray_address if run_cfg else None,
        }
        prec = resolve_precision(precision, device)
        trust = bool(run_cfg and run_cfg.model.trust_remote_code)  # a run that chose to trust its model's code
        tok = load_tokenizer(model_path, trust)
        model = load_model(model_path, dtype, device, tokenizer=tok, trust_remote_code=trust)
        check_finite_model(model, f"checkpoint {checkpoint!r} ({model_path})")
        rollout_cfg = (run_cfg.rollout if run_cfg else RolloutConfig()).model_copy(update={"backend": backend_name})
        backend = make_backend(backend_name, model, tok, bf16=prec.bf16, seed=seed_list[0],
                               **backend_options(rollout_cfg))
        if against is not None and with_skills is None:
            raise SeedRLError("--against compares skill-free success under --with-skills; add --with-skills oracle")
        if with_skills is not None:
            _skill_lift(with_skills, backend, tok, model, panels, settings, seed_list, run_cfg, env_name, prec,
                        model_path, out, against=against, follow_decisions=follow_decisions, dtype=dtype,
                        device=device)
            return
        results = {p.split: combine_seeds([evaluate(backend, tok, p, seed=sd, **settings) for sd in seed_list])
                   for p in panels}
    except SeedRLError as exc:
        _fail(exc)
        return
    res = {"model": model_path, "env": env_name, "env_kwargs": kwargs, "commit": git_commit(),
           "greedy": greedy, "temperature": None if greedy else temperature, "seeds": seed_list,
           "precision": prec.describe(),
           "panel_hashes": {sp: r["panel_hash"] for sp, r in results.items()},
           "config": {"eval": settings, "run": run_cfg.model_dump(mode="json") if run_cfg else None},
           "panels": results}
    if out:
        _write_out(out, res)
    for sp, r in results.items():
        console.print(f"{env_name}/{sp} [panel {r['panel_hash']}]: success {r['success_rate']:.3f} "
                      f"(95% CI {r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}) over {r['num_tasks']} episodes, score "
                      f"{r['score']:.2f}, {r['mean_steps']:.1f} steps, invalid-action rate {r['invalid_rate']:.3f} "
                      f"(format {r['invalid_format_rate']:.3f})",
                      markup=False)


def _skill_lift(source: str, backend, tok, model, panels, settings, seed_list, run_cfg, env_name, prec,
                model_path, out, *, against: str | None = None, follow_decisions: int = 3, dtype: str = "float32",
                device: str = "cpu") -> None:
    """``seedrl eval --with-skills``: the skill-lift diagnostic on every panel (one seed), with the
    skill-following probe where the env writes counterfactual skills, and with ``against``, the harm:
    the model's skill-free success minus the plain start's on the same tasks."""
    from seedrl.config import TrainConfig
    from seedrl.eval.evaluate import evaluate
    from seedrl.eval.skill_follow import has_counterfactual
    from seedrl.eval.skill_lift import skill_lift
    from seedrl.experiments.stats import mcnemar_exact, paired_outcomes
    from seedrl.methods.sources import make_analyzer
    from seedrl.models.loading import load_model, load_tokenizer
    from seedrl.provenance import git_commit
    from seedrl.rollout.backends import HFBackend
    from seedrl.train.checkpoint import resolve_checkpoint

    if source not in ("oracle", "self"):
        raise SeedRLError(f"--with-skills takes oracle or self, got {source!r}")
    if len(seed_list) > 1:
        raise SeedRLError("--with-skills runs one seed; give one --seeds value")
    base = run_cfg or TrainConfig()
    cfg = base.model_copy(update={"env": base.env.model_copy(update={"name": env_name}),
                                  "skills": base.skills.model_copy(update={"analyzer": source})})
    analyzer = make_analyzer(cfg, backend, tok, bf16=prec.bf16, source="hindsight")
    if follow_decisions < 0:
        raise SeedRLError(f"--follow-decisions must be at least 0, got {follow_decisions}")
    results = {p.split: skill_lift(backend, tok, model, p, analyzer, seed=seed_list[0], bf16=prec.bf16,
                                   follow_decisions=follow_decisions, **settings)
               for p in panels}
    for r in results.values():  # the headline keys of a skill-following result
        r["oracle_lift"] = r["lift"]
        r["mcnemar_p"] = mcnemar_exact(r["won_only_without_skill"], r["won_only_with_skill"])
        r["follow_rate"] = r["follow"]["follow_rate"] if r.get("follow") else None
        r["harm"] = None
    baseline_path = None
    if against is not None:
        baseline_path, base_cfg = resolve_checkpoint(against)
        trust = bool(base_cfg and base_cfg.model.trust_remote_code)
        btok = load_tokenizer(baseline_path, trust)
        bmodel = load_model(baseline_path, dtype, device, tokenizer=btok, trust_remote_code=trust)
        for p in panels:
            r = results[p.split]
            plain = evaluate(HFBackend(bmodel, btok, bf16=prec.bf16), btok, p, seed=seed_list[0], **settings)
            base_won = {t["task_id"]: bool(t["won"]) for t in plain["tasks"]}
            won = {t["task_id"]: bool(t["won"]) for t in r["tasks"]}
            try:
                h = paired_outcomes(base_won, won)
            except ValueError:
                raise SeedRLError(f"--against played other tasks on {p.split} than the model; this is a bug") from None
            r["against"] = {"model": baseline_path, "success": plain["success_rate"],
                            "won_only_by_start": h["only_before"], "won_only_by_model": h["only_after"],
                            "mcnemar_p": h["p"]}
            r["harm"] = h["diff"]
    res = {"diagnostic": "skill_lift", "model": model_path, "env": env_name, "analyzer": source,
           "commit": git_commit(), "precision": prec.describe(), "against": baseline_path,
           "config": {"eval": settings, "skills": cfg.skills.model_dump(mode="json"),
                      "follow_decisions": follow_decisions}, "panels": results}
    if out:
        _write_out(out, res)
    for sp, r in results.items():
        shift = ("n/a" if r["teacher_above_student_frac"] is None else
                 f"{r['teacher_above_student_frac']:.3f} of {r['teacher_tokens']} tokens, mean {r['teacher_delta_mean']:+.3f}; "
                 f"whole distribution: most likely token differs at {r['teacher_argmax_differs_frac']:.3f}, "
                 f"mean total variation {r['teacher_tv_mean']:.3f}")
        console.print(f"DIAGNOSTIC skill lift ({source} skills; not a success rate) {env_name}/{sp} "
                      f"[panel {r['panel_hash']}]: {r['with_skill']}/{r['num_tasks']} tasks got a skill; on them "
                      f"success {r['success_without_skill']:.3f} without -> {r['success_with_skill']:.3f} with the skill "
                      f"(won only with {r['won_only_with_skill']}, only without {r['won_only_without_skill']}, "
                      f"McNemar p {r['mcnemar_p']:.2g}); teacher above student: {shift}", markup=False)
        if r.get("facts_checked"):
            pct = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
            console.print(f"  {source} skills' facts agree with the env's oracle: {pct(r['fact_agreement'])} of "
                          f"{r['facts_checked']} checkable (first attempts won {pct(r['fact_agreement_success'])}, "
                          f"lost {pct(r['fact_agreement_failure'])})", markup=False)
        f = r.get("follow")
        if f is not None and f["decisions"]:
            console.print(f"  skill following: {f['follow_rate']:.3f} of {f['decisions']} decisions switch to the "
                          f"action a counterfactual skill names (kept their own {f['kept_rate']:.3f})", markup=False)
        elif f is not None:
            why = ("no plain step had a parsable action to disagree with" if has_counterfactual(env_name)
                   else "this env's oracle writes no counterfactual skills")
            console.print(f"  skill following: n/a ({why})", markup=False)
        if r["harm"] is not None:
            console.print(f"  skill-free success {r['success_plain_all']:.3f} vs the plain start's "
                          f"{r['against']['success']:.3f}: harm {r['harm']:+.3f} (McNemar p "
                          f"{r['against']['mcnemar_p']:.2g})", markup=False)

