"""A folder seedrl saves loads the same tokenizer everywhere: plain ``AutoTokenizer`` (and so vLLM,
which calls it), with or without trust_remote_code, and seedrl's own loader. transformers >= 5 would
otherwise give a qwen2 folder Qwen2's pre-tokenizer (" 1 2 3 up down": 8 tokens instead of 5).
vLLM's own loader on such a folder: tests/rollout/test_vllm_backend.py (in .venv-vllm)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from seedrl.models.loading import load_model, load_tokenizer, save_model
from seedrl.rollout.runner import encode_messages

TEXTS = [" 1 2 3 up down", "<|im_start|>user\nPush box 12 left, 3 up.<|im_end|>\n", "ünïcode ☃  x\n\n  y",
         "<think>the box is at (2, 3)</think><action>down</action>"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_tokenizer):
    d = tmp_path_factory.mktemp("saved") / "model"
    save_model(load_model("tiny-micro", tokenizer=tiny_tokenizer), tiny_tokenizer, d)
    return d


@pytest.mark.parametrize("trust", [None, False, True])
def test_auto_tokenizer_on_a_saved_folder_encodes_as_seedrl(saved, tiny_tokenizer, trust):
    kw = {} if trust is None else {"trust_remote_code": trust}
    auto = AutoTokenizer.from_pretrained(str(saved), **kw)
    ours = load_tokenizer(str(saved))
    assert auto(TEXTS[0], add_special_tokens=False)["input_ids"] == \
        tiny_tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"] and len(auto(TEXTS[0])["input_ids"]) == 5
    for t in TEXTS:
        ids = tiny_tokenizer(t, add_special_tokens=False)["input_ids"]
        assert auto(t, add_special_tokens=False)["input_ids"] == ours(t, add_special_tokens=False)["input_ids"] == ids
        assert auto.decode(ids) == t
    msgs = [{"role": "system", "content": "You analyse 12 moves."}, {"role": "user", "content": "1 2 3 up down"}]
    assert encode_messages(auto, msgs) == encode_messages(ours, msgs) == encode_messages(tiny_tokenizer, msgs)
    assert auto.eos_token_id == tiny_tokenizer.eos_token_id and auto.pad_token_id == tiny_tokenizer.pad_token_id


def test_saved_tokenizer_config_declares_the_generic_class(saved):
    cfg = json.loads((saved / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert cfg["auto_map"]["AutoTokenizer"][1] == "tokenization_seedrl.SeedRLTokenizer"
    assert (saved / "tokenization_seedrl.py").is_file()
    assert json.loads((saved / "config.json").read_text())["model_type"] == "qwen2"  # still a plain qwen2 folder
