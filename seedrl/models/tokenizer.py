"""The built-in tokenizer: a byte-level BPE trained on environment and prompt text.

The trained file ships inside the package (``assets/tokenizer``), so nothing is downloaded at
run time. ``python -m seedrl.models.tokenizer`` rebuilds it deterministically from text the
project's own environments and prompt builder produce; byte-level BPE still encodes any text.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ASSET_DIR = Path(__file__).parent / "assets" / "tokenizer"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_end|>"
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCAB_SIZE = 1024


def corpus(episodes_per_env: int = 40) -> Iterator[str]:
    """Prompt and response text from expert play of the built-in environments."""
    from seedrl.agent.prompts import HistoryItem, build_step_prompt, format_response
    from seedrl.envs.panels import build_panel
    from seedrl.envs.registry import TOKENIZER_CORPUS, make_env

    for env_name, title in TOKENIZER_CORPUS.items():
        try:
            env = make_env(env_name)
            ids = [t for split in ("train", "valid_unseen")
                   for t in build_panel(env_name, split).task_ids[: episodes_per_env // 2]]
        except Exception as exc:  # textworld may be absent; the sokoban text still trains the BPE
            print(f"skipping {env_name}: {exc}", file=sys.stderr)
            continue
        for task_id in ids:
            obs = env.reset(task_id)
            history: list[HistoryItem] = []
            for step in range(30):
                action = env.expert_action()
                if action is None:
                    break
                yield build_step_prompt(title, env.task_description, obs, history, step, 2,
                                        env.admissible_actions(), style=env.prompt_style)
                yield format_response(action)
                history.append(HistoryItem(obs, action))
                obs, _, done, _ = env.step(action)
                if done:
                    break
        env.close()
    for action in ("up", "down", "left", "right", "look", "inventory", "go north", "take"):
        yield format_response(action)
    # Hindsight-analysis vocabulary (SEED), so skills are not spelled byte by byte.
    yield ('{"episode_summary": "The agent pushed the box into a corner and failed.", '
           '"episode_skill": "When a box is next to a wall, never push it into a corner that is not a target; '
           'first move around the box, then push it toward the target. success failure workflow rule warning"}')


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE):
    """Train a byte-level BPE and wrap it as a transformers fast tokenizer with a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=PAD_TOKEN, eos_token=EOS_TOKEN,
                                  bos_token=None, unk_token=None)
    tok.chat_template = CHATML_TEMPLATE
    tok.padding_side = "left"
    return tok


def main() -> None:
    tok = train_tokenizer(corpus())
    ASSET_DIR.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(ASSET_DIR))
    print(f"wrote {ASSET_DIR} (vocab {len(tok)})")


if __name__ == "__main__":
    main()
