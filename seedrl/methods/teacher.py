"""Teacher prompts: where a method puts the skill when the sampled response is re-scored.

The response token ids are never touched; only the prompt changes. Every teacher prompt is
left-truncated to the rollout prompt limit (SEED and SDAR both re-tokenize it under the data's
``max_prompt_length`` with left truncation), so an overlong prompt loses its beginning first.

- a **critical step** (OPID, ``step_skill`` given): the ``**Critical-Step Skill**`` block right before
  the turn line of the user message, and no episode skill, whatever the placement;
- ``after_task`` (SEED, OPID): the ``**Episode-Level Skill**`` block right after the task line of the
  user message, then the chat template;
- ``prefix`` (SDAR and its baselines): ``[Privileged Skill Information]`` + skill prepended to the
  templated prompt text, i.e. before the template's own first token (SDAR decodes the templated
  prompt, prepends the string, re-tokenizes), so it sits outside every message.

A step with images (a vision-language policy) keeps them: its teacher prompt is encoded by the policy's
processor with the sample's own images (:class:`~seedrl.models.vision.ImageInputs`), whose placeholders
sit where the student's do, and is never left-truncated (a cut through the placeholders would not match
the pixels).
"""

from __future__ import annotations

from seedrl.rollout.runner import encode_messages
from seedrl.skills.injection import inject_into_messages, prefix_skill


def _encode(tokenizer, messages: list[dict], images) -> list[int]:
    if images is None:
        return encode_messages(tokenizer, messages)
    from seedrl.models.vision import encode_chat

    return encode_chat(tokenizer, messages, images.raw)[0]


def _after_task(tokenizer, messages: list[dict], skill: str, images=None) -> list[int]:
    return _encode(tokenizer, inject_into_messages(messages, skill), images)


def _prefix(tokenizer, messages: list[dict], skill: str, images=None) -> list[int]:
    if images is None:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(prefix_skill(text, skill), add_special_tokens=False)["input_ids"]
    from seedrl.models.vision import encode_text_with_images, require_processor, with_images

    text = require_processor(tokenizer).apply_chat_template(with_images(messages, len(images.raw)), tokenize=False,
                                                            add_generation_prompt=True)
    return encode_text_with_images(tokenizer, prefix_skill(text, skill), images.raw)[0]


#: placement name (``MethodSpec.placement``) -> (tokenizer, step messages, skill) -> prompt ids
PLACEMENTS = {"after_task": _after_task, "prefix": _prefix}


def teacher_prompt_ids(placement: str, tokenizer, messages: list[dict], skill: str | None,
                       max_tokens: int, step_skill: str | None = None, images=None) -> list[int]:
    """The teacher prompt of one step (its chat ``messages``), left-truncated to ``max_tokens``;
    ``images``: the step's image inputs (kept, never truncated), ``None`` for a text step."""
    if step_skill:
        ids = _encode(tokenizer, inject_into_messages(messages, step_skill, step=True), images)
    else:
        ids = PLACEMENTS[placement](tokenizer, messages, skill, images)
    return ids if images is not None else ids[-max_tokens:]
