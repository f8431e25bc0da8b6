"""Bad input to the real `seedrl` command: one line on stderr that names the fix, exit code 2, never a
traceback, and nothing built or played first. Each row runs ``python -m seedrl.cli`` in a subprocess;
every case fails before a model is built (except the `analyze` row, which plays one tiny episode)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from seedrl.cli import app, user_error_message
from seedrl.config import EvalConfig, OptimConfig, SFTConfig, TrainConfig, load_config
from seedrl.errors import SeedRLError, describe_os_error
from seedrl.methods import METHODS

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[1]
CFG = "configs/demo_sokoban.yaml"
NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    (d / "bad.yaml").write_text("model: {name: tiny-micro\nrun_dir: x\n")
    (d / "list.yaml").write_text("- 1\n- 2\n")
    (d / "dup.yaml").write_text("run_dir: x\nrollout:\n  group_size: 4\nalgo: {name: grpo}\nrollout:\n  tasks_per_batch: 2\n")
    (d / "folder.yaml").mkdir()
    (d / "bad.jsonl").write_text('{"prompt": "p", "response": "r"}\n\nnot json\n')
    (d / "empty.jsonl").write_text("\n\n")
    (d / "afile").write_text("")
    _bad_models(d)
    return {k: str(d / k) for k in ("bad.yaml", "list.yaml", "dup.yaml", "folder.yaml", "bad.jsonl", "empty.jsonl",
                                     "afile")} | {
        "tmp": str(d)}


class _Evil:
    def __reduce__(self):  # a global no test process patches (ray replaces builtins.print)
        return (os.getcwd, ())


def _bad_models(d: Path) -> None:
    """Model and run folders damaged as users' are: truncated weights, pickled weights holding code, no
    tokenizer, an empty folder, a truncated checkpoint, a run that saved no checkpoint."""
    import shutil

    from seedrl.models.loading import load_model, load_tokenizer, save_model
    from seedrl.train.checkpoint import save_checkpoint

    tok = load_tokenizer("tiny-micro")
    model = load_model("tiny-micro", tokenizer=tok)
    save_model(model, tok, d / "good")
    for name in ("trunc", "pickled", "rawpickle", "notok", "loop"):
        shutil.copytree(d / "good", d / name)
    (d / "loop" / "model.safetensors").unlink()
    (d / "loop" / "model.safetensors").symlink_to("model.safetensors")  # a link to itself
    w = d / "trunc" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    (d / "pickled" / "model.safetensors").unlink()
    torch.save({"w": _Evil()}, d / "pickled" / "pytorch_model.bin")
    (d / "rawpickle" / "model.safetensors").unlink()
    with open(d / "rawpickle" / "pytorch_model.bin", "wb") as f:  # pickle.dump: not torch's zip format
        import pickle

        pickle.dump({"w": _Evil()}, f, protocol=4)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / "notok" / f).unlink()
    (d / "emptydir").mkdir()
    ck = save_checkpoint(d / "ckrun" / "checkpoints", 1, model, tok, torch.optim.AdamW(model.parameters()), {})
    w = ck / "model" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    (d / "nosave").mkdir()
    shutil.copy(ROOT / CFG, d / "nosave" / "config.yaml")
    with torch.no_grad():  # a diverged run's weights
        next(model.parameters()).fill_(float("nan"))
    save_model(model, tok, d / "nanw")
    (d / "nosave" / "metrics.jsonl").write_text('{"iteration": 1}\n')


_runs = iter(range(10**6))


def _train(*sets: str) -> list[str]:
    """Each case its own run folder: the rows run at once, and a live run locks its folder."""
    return ["train", "-c", CFG, "--set", "model.name=tiny-micro", "--set", f"run_dir={{tmp}}/run{next(_runs)}",
            *[a for s in sets for a in ("--set", s)]]


# (id, argv with {file} placeholders, fragment the one line must contain)
CASES = [
    # config files and --set
    ("yaml-syntax", ["train", "-c", "{bad.yaml}"], "is not valid YAML: line 2"),
    ("config-is-folder", ["train", "-c", "{folder.yaml}"], "is a folder; give a YAML file"),
    ("config-not-mapping", ["train", "-c", "{list.yaml}"], "must be a mapping of keys"),
    ("config-missing", ["train", "-c", "{tmp}/none.yaml"], "not found; presets in configs/"),
    ("config-duplicate-section", ["train", "-c", "{dup.yaml}"], "key 'rollout' appears twice (lines 2 and 5); keep one"),
    ("set-duplicate-key", _train("optim={lr: 1e-5, lr: 1e-3}"), "key 'lr' appears twice (line 1, columns 2 and 12)"),
    ("set-no-equals", _train("optim.lr"), "--set expects key=value"),
    ("set-empty-key", _train("=3"), "--set expects key=value"),
    ("set-unknown-key", _train("optim.lrate=1"), "unknown config key 'optim.lrate'; valid keys here: lr"),
    ("set-bad-yaml", _train("optim.lr=[1"), "--set optim.lr: '[1' is not valid YAML"),
    ("set-not-a-section", _train("optim=3", "optim.lr=1"), "'optim' is not a section"),
    # ranges, checked when the config is built
    ("max-new-tokens-0", _train("rollout.max_new_tokens=0"), "'rollout.max_new_tokens': Input should be greater than 0"),
    ("group-size-0", _train("rollout.group_size=0"), "'rollout.group_size': Input should be greater than 0"),
    ("micro-batch-0", _train("optim.micro_batch_size=0"), "'optim.micro_batch_size': Input should be greater than 0"),
    ("mini-batch-negative", _train("optim.mini_batch_size=-4"), "'optim.mini_batch_size': Input should be greater"),
    ("eval-num-tasks-negative", _train("eval.num_tasks=-1"), "'eval.num_tasks': Input should be greater than or"),
    ("eval-panel-size-zero", _train("eval.panel_size=0"), "'eval.panel_size': Input should be greater than 0"),
    ("iterations-negative", _train("iterations=-1"), "'iterations': Input should be greater than or equal to 0"),
    ("save-every-negative", _train("save_every=-5"), "'save_every': Input should be greater than or equal to 0"),
    ("rollout-temperature-0", _train("rollout.temperature=0"), "'rollout.temperature'"),
    ("top-p-over-1", _train("rollout.top_p=1.5"), "'rollout.top_p': Input should be less than or equal to 1"),
    ("lr-inf", _train("optim.lr=inf"), "'optim.lr': Input should be a finite number (got 'inf')"),
    ("lr-yaml-inf", _train("optim.lr=.inf"), "'optim.lr': Input should be a finite number (got inf)"),
    ("lr-absurd", _train("optim.lr=1e30"), "'optim.lr': Input should be less than or equal to 1 (got '1e30')"),
    ("rollout-temperature-inf", _train("rollout.temperature=.inf"), "'rollout.temperature': Input should be a finite"),
    ("eval-cli-temperature-inf", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--sample",
                                  "--temperature", "inf"], "--temperature must be a number from 0 to 10, got inf"),
    ("eval-sampling-at-0", _train("eval.greedy=false", "eval.temperature=0"), "eval.temperature must be > 0"),
    ("device-typo", _train("model.device=gpu"), "'model.device': must be cpu, cuda"),
    # models and checkpoints
    ("model-path-missing", _train("model.name=./no/such/dir"), "model path './no/such/dir' does not exist"),
    ("model-run-path-missing", _train("model.name=runs/no-such-run-xyz/model"),
     "model path 'runs/no-such-run-xyz/model' does not exist"),
    ("model-offline-not-cached", _train("model.name=nobody-xyz/no-such-model"), "HF_HUB_OFFLINE=1 forbids"),
    ("eval-checkpoint-missing", ["eval", "--checkpoint", "no/such"], "checkpoint 'no/such' does not exist"),
    ("eval-checkpoint-path-missing", ["eval", "--checkpoint", "./no/such", "--env", "sokoban"],
     "checkpoint './no/such' does not exist"),
    ("env-kwargs-bad-yaml", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--env-kwargs", "{dim: [5"],
     "--env-kwargs: '{dim: [5' is not valid YAML"),
    ("env-kwargs-not-mapping", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--env-kwargs", "[5, 5]"],
     "--env-kwargs must be a YAML mapping"),
    ("eval-cli-num-tasks-negative", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--num-tasks", "-1"],
     "--num-tasks must be at least 1"),
    ("model-weights-truncated", ["eval", "--checkpoint", "{tmp}/trunc", "--env", "sokoban"],
     "(truncated or padded); the model folder is damaged"),
    ("model-pickled-code", ["eval", "--checkpoint", "{tmp}/pickled", "--env", "sokoban"],
     "pickled weights hold more than tensors (it references posix.getcwd); refused"),
    # a raw pickle: torch warns about its protocol (two lines) before refusing it; one line is left
    ("model-raw-pickle", ["eval", "--checkpoint", "{tmp}/rawpickle", "--env", "sokoban"],
     "its pickled weights hold more than tensors (it references posix.getcwd)"),
    ("model-without-tokenizer", _train("model.name={tmp}/notok"), "has no tokenizer"),
    ("model-symlink-loop", ["eval", "--checkpoint", "{tmp}/loop", "--env", "sokoban"],
     "loop/model.safetensors: Too many levels of symbolic links (ELOOP); a symbolic link points back into itself"),
    ("train-model-symlink-loop", _train("model.name={tmp}/loop"), "Too many levels of symbolic links (ELOOP)"),
    ("model-empty-folder", _train("model.name={tmp}/emptydir"), "has no config.json"),
    ("eval-checkpoint-truncated", ["eval", "--checkpoint", "{tmp}/ckrun/checkpoints/iter_000001"],
     "cannot be trusted"),
    ("eval-run-truncated", ["eval", "--checkpoint", "{tmp}/ckrun"], "no intact checkpoint"),
    ("eval-run-without-checkpoint", ["eval", "--checkpoint", "{tmp}/nosave"], "saved no checkpoint"),
    ("eval-nan-weights", ["eval", "--checkpoint", "{tmp}/nanw", "--env", "sokoban"],
     "holds non-finite weights (NaN/inf in 1 tensor(s), first model.embed_tokens.weight)"),
    ("eval-out-device", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--out", "/dev/full"],
     "--out '/dev/full' is not a regular file"),
    ("eval-out-folder", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--out", "{tmp}"], "is a folder"),
    # run folders and the disk
    ("run-dir-is-file", _train("run_dir={afile}"), "is a file, not a folder"),
    ("run-dir-under-file", _train("run_dir={afile}/sub"), "is a file, not a folder"),
    # SFT data
    ("sft-data-bad-line", ["sft", "--data", "{bad.jsonl}", "--set", "model.name=tiny-micro", "--set",
                           "run_dir={tmp}/sft"], "bad.jsonl:3: not a JSON line"),
    ("sft-data-empty", ["sft", "--data", "{empty.jsonl}", "--set", "model.name=tiny-micro", "--set",
                        "run_dir={tmp}/sft"], "empty.jsonl' holds no example (the file is empty or only blank lines)"),
    ("sft-data-missing", ["sft", "--data", "{tmp}/none.jsonl", "--set", "model.name=tiny-micro", "--set",
                          "run_dir={tmp}/sft"], "none.jsonl' not found"),
    ("sft-epochs-0", ["sft", "--set", "epochs=0", "--set", "run_dir={tmp}/sft"], "'epochs': Input should be greater"),
    ("sft-noise-over-1", ["sft", "--set", "demo_noise=2", "--set", "run_dir={tmp}/sft"],
     "'demo_noise': Input should be less than or equal to 1"),
    # analyze
    ("analyze-tasks-0", ["analyze", "--out", "{tmp}/a.jsonl", "--tasks", "0"], "--tasks must be at least 1"),
    ("analyze-failure-cap-below-floor", ["analyze", "--out", "{tmp}/a.jsonl", "--min-failure-frac", "0.5",
                                         "--max-failure-frac", "0.4", "--set", "model.name=tiny-micro"],
     "--max-failure-frac must be between --min-failure-frac (0.5) and 1, got 0.4"),
]
if Path("/sys").is_dir() and sys.platform.startswith("linux"):  # sysfs refuses mkdir, even to root
    CASES.append(("eval-out-not-writable", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--out",
                                            "/sys/seedrl-test/eval.json"], "cannot be written: Operation not permitted"))
    CASES.append(("run-dir-not-writable", _train("run_dir=/sys/seedrl-test-run"),
                  "/sys/seedrl-test-run: Operation not permitted (EPERM)"))
if NO_CUDA:
    CASES += [("device-cuda-without-cuda", _train("model.device=cuda"), "use model.device=cpu"),
              ("eval-device-cuda-without-cuda", ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--device",
                                                 "cuda"], "use --device cpu")]


def run_cli(argv: list[str], cwd: Path = ROOT, extra_env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "seedrl.cli", *argv], cwd=cwd, env=env | (extra_env or {}),
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(r: subprocess.CompletedProcess, fragment: str) -> str:
    both = r.stdout + r.stderr
    assert r.returncode == 2, both
    assert "Traceback" not in both, both
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), both
    assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def results(files) -> dict[str, subprocess.CompletedProcess]:
    """Every row's run, a few at a time (each is a fresh interpreter; most never import torch)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {case_id: pool.submit(run_cli, [_fill(a, files) for a in argv]) for case_id, argv, _ in CASES}
        return {case_id: f.result() for case_id, f in futures.items()}


@pytest.mark.parametrize("case_id,fragment", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_naming_the_fix(case_id, fragment, files, results):
    assert_one_line_error(results[case_id], _fill(fragment, files))


def _fill(text: str, files: dict[str, str]) -> str:
    for k, v in files.items():
        text = text.replace("{" + k + "}", v)
    return text


def test_analyze_that_keeps_nothing_fails_and_says_why(tmp_path):
    """Every answer over --max-target-tokens: exit 2, not 0 with an empty file."""
    r = run_cli(["analyze", "--env", "sokoban", "--model", "tiny-micro", "--analyzer", "oracle", "--tasks", "1",
                 "--rollouts", "1", "--max-target-tokens", "1", "--out", str(tmp_path / "a.jsonl"),
                 "--set", "env.max_steps=1", "--set", "rollout.max_new_tokens=4"])
    assert_one_line_error(r, "0 of 1 trajectories kept")
    assert "raise --max-target-tokens" in r.stderr


# -- the CLI boundary, in-process ---------------------------------------------------------------
runner = CliRunner()


@pytest.mark.parametrize("code,fragment", [(errno.ENOSPC, "No space left on device (ENOSPC); "),
                                           (errno.EROFS, "Read-only file system (EROFS); the file system is read")])
def test_full_or_read_only_disk_is_one_line(code, fragment, tmp_path, monkeypatch):
    def refuse(self, *a, **k):
        raise OSError(code, os.strerror(code), str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    r = runner.invoke(app, ["sft", "--set", "model.name=tiny-micro", "--set", f"run_dir={tmp_path}/sft"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path}/sft: ") and fragment in lines[0], r.output


def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    import seedrl.train.sft as sft

    def boom(cfg):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sft, "run_sft", boom)
    r = runner.invoke(app, ["sft", "--set", "model.name=tiny-micro", "--set", f"run_dir={tmp_path}/sft"])
    assert isinstance(r.exception, ZeroDivisionError)  # not turned into an "error:" line


def test_verbose_shows_the_traceback_of_a_user_error(files):
    r = run_cli(["train", "-c", CFG, "--set", "model.name=./no/such", "--set", f"run_dir={files['tmp']}/v", "-v"])
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: model path './no/such' does not exist")


@pytest.mark.parametrize("code", [errno.ELOOP, errno.EIO, errno.EFBIG, errno.ENXIO, errno.ENODEV, errno.EBUSY,
                                  errno.ETXTBSY, errno.ESTALE, errno.ENOTEMPTY, errno.ENFILE])
def test_other_os_faults_are_one_line_naming_the_path(code):
    line = user_error_message(OSError(code, os.strerror(code), "/data/model.safetensors"))
    assert line is not None and line.startswith(f"/data/model.safetensors: {os.strerror(code)} ("), line
    assert "\n" not in line


def test_user_error_message_classes():
    from pydantic import ValidationError

    assert user_error_message(SeedRLError("x")) == "x"
    try:
        OptimConfig(lr=-1)
    except ValidationError as exc:
        assert "lr" in user_error_message(exc)
    import yaml

    try:
        yaml.safe_load("a: [1")
    except yaml.YAMLError as exc:
        assert user_error_message(exc).startswith("not valid YAML: line 1")
    assert user_error_message(OSError(errno.ENOSPC, "No space left on device", "/x")).startswith("/x: No space")
    assert user_error_message(OSError(errno.ECONNRESET, "reset")) is None  # not a user fault: traceback
    assert user_error_message(RuntimeError("bug")) is None
    assert describe_os_error(FileExistsError(errno.EEXIST, "File exists", "/r")) == \
        "/r: File exists (EEXIST); a file is in the way: remove it or choose another path"


# -- every config field's range, with the field named -------------------------------------------
BAD_VALUES = [
    ("seed", -1), ("iterations", -1), ("save_every", -1), ("keep_checkpoints", -1), ("torch_threads", 0),
    ("run_dir", ""), ("model.name", ""), ("model.device", "gpu"), ("model.init_seed", -1),
    ("env.max_steps", 0), ("env.history_length", -1), ("env.step_timeout_s", 0), ("env.workers", 0),
    ("env.train_size", 0), ("rollout.tasks_per_batch", 0), ("rollout.group_size", 0), ("rollout.temperature", 0),
    ("rollout.top_p", 0), ("rollout.top_p", 1.01), ("rollout.max_new_tokens", 0), ("rollout.max_prompt_tokens", 0),
    ("algo.opd_coef", -0.1), ("algo.opd_beta", -1), ("algo.opid_coef", -1), ("algo.skill_sd_coef", -1),
    ("algo.pg_coef", -1), ("algo.rlsd_lambda", -0.1), ("algo.rlsd_lambda", 1.1), ("algo.rlsd_warmdown", 0),
    ("algo.rlsd_clip_eps", -0.1), ("algo.rlsd_clip_eps", 1), ("algo.step_advantage_w", -1), ("algo.step_gamma", 1.1),
    ("algo.step_similarity", 0), ("algo.step_similarity", 1),
    ("algo.invalid_penalty", -0.1), ("algo.clip_ratio", 0), ("algo.clip_ratio", 1), ("algo.dual_clip_c", 1),
    ("algo.kl_coef", -0.01), ("algo.entropy_coef", -0.01),
    ("skills.max_new_tokens", 0), ("skills.max_prompt_tokens", 0), ("skills.max_obs_chars", 0),
    ("skills.min_words", -1), ("skills.batch_size", 0), ("skills.max_step_skills", -1),
    ("skills.api.temperature", -0.5), ("skills.api.max_tokens", 0), ("skills.api.timeout_s", 0),
    ("skills.api.concurrency", 0), ("skills.api.parse_retries", -1), ("skills.api.base_url", ""),
    ("optim.lr", 0), ("optim.weight_decay", -0.1), ("optim.grad_clip", 0), ("optim.ppo_epochs", 0),
    ("optim.mini_batch_size", -1), ("optim.mini_batch_size", 0), ("optim.micro_batch_size", 0),
    ("optim.warmup_steps", -1), ("eval.num_tasks", -1), ("eval.every", -1), ("eval.temperature", -0.1),
    ("eval.batch_size", 0), ("eval.max_steps", 0), ("eval.split", ""),
    # non-finite and absurd numbers
    ("optim.lr", "inf"), ("optim.lr", ".inf"), ("optim.lr", "nan"), ("optim.lr", "1e30"), ("optim.lr", 2),
    ("rollout.temperature", ".inf"), ("rollout.temperature", 11), ("eval.temperature", ".inf"),
    ("eval.temperature", 100), ("skills.api.temperature", ".inf"), ("algo.dual_clip_c", ".inf"),
    ("algo.clip_ratio_high", "inf"), ("algo.kl_coef", ".inf"), ("algo.opd_coef", ".nan"), ("algo.entropy_coef", "inf"),
    ("algo.replay_coef", ".inf"), ("optim.grad_clip", ".inf"), ("env.step_timeout_s", ".inf"),
]


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_train_config_range_names_the_field(key, value):
    with pytest.raises(SeedRLError, match=f"'{key}'"):
        load_config(TrainConfig, None, [f"{key}={value}"])


SFT_BAD = [("epochs", 0), ("lr", 0), ("batch_size", 0), ("micro_batch_size", 0), ("grad_clip", 0),
           ("warmup_steps", -1), ("max_seq_tokens", 0), ("demo_tasks", -1), ("mix_demo_tasks", -1),
           ("skill_demo_tasks", -1), ("demo_noise", -0.1), ("demo_noise", 1.1), ("skill_attempt_noise", 2),
           ("weight_decay", -1), ("data", ""), ("eval.num_tasks", -3), ("lr", "inf"), ("lr", 5),
           ("grad_clip", ".inf"), ("label_smoothing", ".nan")]


@pytest.mark.parametrize("key,value", SFT_BAD, ids=[f"{k}={v}" for k, v in SFT_BAD])
def test_sft_config_range_names_the_field(key, value):
    with pytest.raises(SeedRLError, match=f"'{key}'"):
        load_config(SFTConfig, None, [f"{key}={value}"])


@pytest.mark.parametrize("key,value,bound", [("optim.lr", 1.5, "less than or equal to 1"),
                                             ("rollout.temperature", 11, "less than or equal to 10"),
                                             ("optim.lr", "inf", "a finite number")])
def test_absurd_numbers_name_the_bound(key, value, bound):
    with pytest.raises(SeedRLError) as e:
        load_config(TrainConfig, None, [f"{key}={value}"])
    assert f"'{key}': Input should be {bound}" in str(e.value)


def test_edges_stay_valid():
    """The documented edges: 0 = off/never/all, None = default."""
    cfg = load_config(TrainConfig, None, ["iterations=0", "save_every=0", "keep_checkpoints=0", "eval.num_tasks=0",
                                          "eval.every=0", "optim.mini_batch_size=null", "algo.opd_beta=0",
                                          "algo.kl_coef=0", "rollout.top_p=1", "model.device=cuda:1",
                                          "eval.temperature=0", "skills.api.temperature=0", "optim.lr=1",
                                          "rollout.temperature=10"])
    assert cfg.optim.mini_batch_size is None and cfg.model.device == "cuda:1"
    with pytest.raises(ValueError, match="eval.temperature must be > 0"):
        EvalConfig(greedy=False, temperature=0)
    for name in METHODS:  # methods' own defaults are valid
        load_config(TrainConfig, None, [f"algo.name={name}"])


def test_every_shipped_preset_is_in_range():
    for p in sorted((ROOT / "configs").glob("*.yaml")):
        data = p.read_text()
        cls = TrainConfig if "\nrollout:" in data or "\nalgo:" in data or "\niterations:" in data else SFTConfig
        load_config(cls, p)


def test_results_that_cannot_be_written_at_the_end_are_kept_elsewhere(tmp_path):
    from seedrl.cli import _write_out

    res = {"panels": {"valid_seen": {"success_rate": 0.5}}}
    with pytest.raises(SeedRLError) as e:
        _write_out(tmp_path, res)  # a folder where the file should go: the write fails after the work
    msg = str(e.value)
    spare = Path(msg.rsplit("the results are in ", 1)[1])
    try:
        assert "\n" not in msg and str(tmp_path) in msg and json.loads(spare.read_text()) == res
    finally:
        spare.unlink()


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch):
    import seedrl.train.checkpoint as ck

    def interrupt(spec):
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "resolve_checkpoint", interrupt)
    r = CliRunner().invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban"])
    assert r.exit_code == 130 and "interrupted (Ctrl-C)" in r.output and "Traceback" not in r.output
