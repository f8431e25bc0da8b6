"""FSDP's pieces that need no process group: what the launcher asks for, the checkpoint's optimizer
form, and what :func:`seedrl.train.fsdp.shard` refuses. The 2-process runs against one process are
in ``tests/train/test_distributed.py``."""

from __future__ import annotations

import pytest
import torch

from seedrl.errors import SeedRLError
from seedrl.train import fsdp
from seedrl.train.fsdp import FsdpPlan, requested_plan

ACC = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}


def test_plan_is_read_from_the_accelerate_launch_variables():
    assert requested_plan({}) is None
    assert requested_plan({"ACCELERATE_USE_FSDP": "false", "FSDP_VERSION": "2"}) is None
    assert requested_plan(ACC) == FsdpPlan()
    plan = requested_plan(ACC | {"FSDP_RESHARD_AFTER_FORWARD": "false", "FSDP_ACTIVATION_CHECKPOINTING": "true",
                                 "FSDP_TRANSFORMER_CLS_TO_WRAP": "Qwen2DecoderLayer, LlamaDecoderLayer"})
    assert plan == FsdpPlan(reshard_after_forward=False, layer_classes=("Qwen2DecoderLayer", "LlamaDecoderLayer"),
                            activation_checkpointing=True)
    assert requested_plan(ACC | {"FSDP_AUTO_WRAP_POLICY": "NO_WRAP"}).wrap_layers is False


@pytest.mark.parametrize("env, message", [
    ({"FSDP_VERSION": "1"}, "--fsdp_version 2"),
    ({"FSDP_OFFLOAD_PARAMS": "true"}, "CPU offload"),
    ({"FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP"}, "valid: TRANSFORMER_BASED_WRAP, NO_WRAP"),
    ({"FSDP_RESHARD_AFTER_FORWARD": "SHARD_GRAD_OP"}, "valid: true, false"),
])
def test_options_seedrl_does_not_run_as_asked_are_refused_in_one_line(env, message):
    with pytest.raises(SeedRLError, match=message):
        requested_plan(ACC | env)


def _adam_state(model: torch.nn.Module) -> dict:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    return opt.state_dict()


def test_optimizer_state_round_trips_between_the_one_process_and_the_named_form():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    model[0].bias.requires_grad_(False)  # a frozen parameter is not in the optimizer's list
    plain = _adam_state(model)
    names = fsdp.trainable_names(model)
    assert names == ["0.weight", "1.weight", "1.bias"]
    named = fsdp.named_optimizer_state(plain, names)
    assert named["param_groups"][0]["params"] == names
    assert torch.equal(named["state"]["1.weight"]["exp_avg"], plain["state"][1]["exp_avg"])
    back = fsdp.plain_optimizer_state(named, names)
    assert back["param_groups"] == plain["param_groups"]
    assert sorted(back["state"]) == sorted(plain["state"])
    for i, st in plain["state"].items():
        assert all(torch.equal(st[k], back["state"][i][k]) for k in st)
    with pytest.raises(SeedRLError, match="does not train"):
        fsdp.plain_optimizer_state(named, names[:2])
    with pytest.raises(SeedRLError, match="trains 2 parameters"):
        fsdp.named_optimizer_state(plain, names[:2])


def test_shard_refuses_lora_and_layer_classes_the_model_does_not_have():
    from seedrl.models.loading import load_model, load_tokenizer

    tok = load_tokenizer("tiny-micro")
    model = load_model("tiny-micro", "float32", "cpu", None, 0, tokenizer=tok)
    with pytest.raises(SeedRLError, match="names GPT2Block, which this model does not have; its layer classes: "
                                          ".*Qwen2DecoderLayer"):
        fsdp.shard(model, FsdpPlan(layer_classes=("GPT2Block",)))
    model.peft_config = {}  # what a peft model carries
    with pytest.raises(SeedRLError, match="model.lora with FSDP is not supported"):
        fsdp.shard(model, FsdpPlan())
    assert not fsdp.is_sharded(model)
