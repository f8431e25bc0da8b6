"""A model folder never runs its own Python code unless the run says ``model.trust_remote_code: true``.

A planted module writes a marker file when it is imported. transformers imports it when a config's
``auto_map`` names it and ``trust_remote_code`` resolves to true, which it does on a terminal when the
user types "y" to its prompt: the tests answer "y" to every prompt, so a load that asked at all would run
the code. The last test turns trust on and sees the marker appear: the planted code is importable, so
the marker's absence elsewhere means refusal, not a broken plant.
"""

from __future__ import annotations

import builtins
import json
import shutil
import sys
from pathlib import Path

import pytest

from seedrl.errors import SeedRLError
from seedrl.models import loading
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.tokenizer import ASSET_DIR

# transformers imports a copy of the module from its modules cache: the marker's path is absolute
PLANTED = '''
from pathlib import Path
Path({marker!r}).write_text("planted code ran")
from transformers import PretrainedConfig, PreTrainedModel


class PlantedConfig(PretrainedConfig):
    model_type = "seedrl_planted"


class PlantedModel(PreTrainedModel):
    config_class = PlantedConfig
'''


def _planted_folder(tmp_path: Path, *, tokenizer_code: bool = False) -> Path:
    d = tmp_path / "planted_model"
    d.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ASSET_DIR / f, d / f)
    (d / "planted.py").write_text(PLANTED.format(marker=str(d / "RAN")))
    (d / "config.json").write_text(json.dumps({
        "model_type": "seedrl_planted", "architectures": ["PlantedModel"],
        "auto_map": {"AutoConfig": "planted.PlantedConfig", "AutoModelForCausalLM": "planted.PlantedModel"}}))
    if tokenizer_code:  # a known model type, but a tokenizer class only the folder's code defines
        (d / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        cfg["tokenizer_class"] = "PlantedTokenizer"
        cfg["auto_map"] = {"AutoTokenizer": [None, "planted.PlantedTokenizer"]}
        (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture
def answer_yes(monkeypatch):
    """A terminal whose user answers "y" to any prompt (transformers' "run the custom code? [y/N]")."""
    asked: list[str] = []

    def fake_input(prompt: str = "") -> str:
        asked.append(prompt)
        return "y"

    monkeypatch.setattr(builtins, "input", fake_input)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    yield asked
    for name in [m for m in sys.modules if "planted" in m]:  # transformers' dynamic modules
        sys.modules.pop(name, None)


def test_folder_with_auto_map_code_is_refused_in_one_line_naming_the_entry(tmp_path, answer_yes):
    d = _planted_folder(tmp_path)
    with pytest.raises(SeedRLError) as exc:
        load_model(str(d))
    msg = str(exc.value)
    assert "\n" not in msg and "AutoModelForCausalLM -> planted.PlantedModel" in msg
    assert "model.trust_remote_code" in msg
    assert not (d / "RAN").exists() and not answer_yes


def test_transformers_itself_is_told_no_when_the_folder_check_is_skipped(tmp_path, answer_yes, monkeypatch):
    """A hub repo's config is not read before loading: the refusal must then come from passing
    ``trust_remote_code=False`` to transformers, which otherwise asks (and runs the code on "y")."""
    d = _planted_folder(tmp_path)
    monkeypatch.setattr(loading, "check_model_source", lambda *a, **k: None)
    with pytest.raises(SeedRLError, match="needs its own Python code"):
        load_model(str(d))
    assert not (d / "RAN").exists() and not answer_yes


def test_tokenizer_code_in_the_folder_never_runs(tmp_path, answer_yes):
    """transformers falls back to the folder's tokenizer.json or refuses; either way it neither asks
    nor imports the folder's tokenizer class. With trust on, it imports it (the control)."""
    d = _planted_folder(tmp_path, tokenizer_code=True)
    try:
        load_tokenizer(str(d))
    except SeedRLError as exc:
        assert "its tokenizer" in str(exc) and "\n" not in str(exc)
    assert not (d / "RAN").exists() and not answer_yes
    with pytest.raises(Exception):  # noqa: B017 - the stub module defines no tokenizer class
        load_tokenizer(str(d), trust_remote_code=True)
    assert (d / "RAN").exists()


def test_cli_without_a_terminal_is_one_line_and_runs_nothing(tmp_path):
    from tests.test_bad_inputs import assert_one_line_error, run_cli

    d = _planted_folder(tmp_path)
    r = run_cli(["eval", "--checkpoint", str(d), "--env", "sokoban", "--num-tasks", "1"])
    assert_one_line_error(r, "auto_map: AutoModelForCausalLM -> planted.PlantedModel")
    assert not (d / "RAN").exists()


def test_trust_remote_code_true_does_import_the_planted_code(tmp_path, answer_yes):
    """The control: with trust on, transformers imports the folder's module (it then fails to build
    this stub model, which does not matter here)."""
    d = _planted_folder(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 - the stub is no working model; only the import matters
        load_model(str(d), trust_remote_code=True)
    assert (d / "RAN").exists()
