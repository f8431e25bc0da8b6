"""Vision-language policies (Qwen2.5-VL, Qwen2-VL): the processor, encoding a chat with images, the
multimodal inputs a forward needs, and the tiny models built from config.

A step prompt with images is encoded once, by transformers' own processor and chat template: the
template writes one ``<|vision_start|><|image_pad|><|vision_end|>`` per image and the processor expands
each ``<|image_pad|>`` to the number of merged patches of its image, so ``prompt_ids`` hold the exact
placeholder tokens and :class:`ImageInputs` the exact ``pixel_values`` / ``image_grid_thw`` the
generator saw; scoring and the update reuse both, never re-processing the images.

Built-in names (``tiny-qwen2.5-vl``, ``tiny-qwen2-vl``) are random-init models of the real classes,
with a processor built from files shipped in the package (``assets/vl``: the image processor's config
and a chat template) over the built-in tokenizer plus Qwen's vision special tokens: nothing is
downloaded. A real model (``Qwen/Qwen2.5-VL-3B-Instruct`` or a folder) loads its own processor through
``AutoProcessor`` (falling back to an image-only processor where the video processor cannot load, e.g.
without torchvision) and its generation class by model type (:func:`model_class`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seedrl.errors import SeedRLError

ASSET_DIR = Path(__file__).parent / "assets" / "vl"
#: Qwen's vision special tokens, added to the built-in tokenizer (in this order, after its vocabulary)
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
IMAGE_TOKEN = "<|image_pad|>"
#: the model types this module handles
VL_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl")

#: built-in vision-language models: (model_type, text config, vision config)
TINY_VL_CONFIGS: dict[str, tuple[str, dict[str, int], dict[str, Any]]] = {
    "tiny-qwen2.5-vl": ("qwen2_5_vl",
                        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
                        dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, window_size=56,
                             fullatt_block_indexes=[1])),
    "tiny-qwen2-vl": ("qwen2_vl",
                      dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
                      dict(depth=2, embed_dim=32, mlp_ratio=2, num_heads=2)),
}


@dataclass
class ImageInputs:
    """The processor's image tensors of one prompt: ``pixel_values`` ``[patches, C*T*P*P]`` (float32) and
    ``image_grid_thw`` ``[images, 3]`` (long); ``raw``: the images themselves (uint8 ``H x W x 3``, for a
    prompt re-encoded around them: the teacher's); ``digest``: a hash of the tensors, so two prompts whose
    token ids agree (the placeholders of same-sized images do) are never taken for the same prompt."""

    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    raw: list = field(default_factory=list)
    digest: str = ""

    def __post_init__(self) -> None:
        if not self.digest:
            h = hashlib.sha256(self.pixel_values.detach().float().cpu().numpy().tobytes())
            h.update(self.image_grid_thw.cpu().numpy().tobytes())
            self.digest = h.hexdigest()[:16]


def concat_images(items: Sequence[ImageInputs | None], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The forward's keyword arguments for a batch whose rows carry ``items`` (in row order; ``None``: a
    row without images): the rows' ``pixel_values`` and ``image_grid_thw`` concatenated, ``{}`` when no
    row has an image."""
    present = [x for x in items if x is not None]
    if not present:
        return {}
    return {"pixel_values": torch.cat([x.pixel_values for x in present]).to(device),
            "image_grid_thw": torch.cat([x.image_grid_thw for x in present]).to(device)}


# -- which names are vision-language models ----------------------------------------------------------------
def _config_of(name_or_path: str) -> dict[str, Any] | None:
    path = Path(name_or_path).expanduser()
    cfg = path / "config.json" if path.is_dir() else None
    if cfg is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(name_or_path, "config.json")
            cfg = Path(found) if isinstance(found, str) else None
        except Exception:
            cfg = None
    if cfg is None or not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_vision_model(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a vision-language policy: a built-in VL name, a folder (or cached hub
    model) whose config's ``model_type`` is Qwen2-VL's or Qwen2.5-VL's, or, for a hub name not cached
    here, a Qwen VL repo name (``Qwen/Qwen2.5-VL-3B-Instruct``)."""
    if name_or_path in TINY_VL_CONFIGS:
        return True
    cfg = _config_of(name_or_path)
    if cfg is not None:
        return cfg.get("model_type") in VL_MODEL_TYPES
    return bool(re.search(r"qwen2(\.5)?-vl", str(name_or_path), re.IGNORECASE))


def vl_model_type(name_or_path: str) -> str:
    """The model type of a vision-language name: its config's (a folder, a cached hub model), a built-in
    name's, else read from a Qwen VL repo name (``Qwen2.5-VL`` -> ``qwen2_5_vl``, ``Qwen2-VL`` ->
    ``qwen2_vl``); anything else is an error that lists the valid types."""
    if name_or_path in TINY_VL_CONFIGS:
        return TINY_VL_CONFIGS[name_or_path][0]
    cfg = _config_of(name_or_path)
    kind = cfg.get("model_type") if cfg is not None else None
    if kind is None:
        found = re.search(r"qwen2(\.5)?-vl", str(name_or_path), re.IGNORECASE)
        kind = None if found is None else ("qwen2_5_vl" if found.group(1) else "qwen2_vl")
    if kind not in VL_MODEL_TYPES:
        raise SeedRLError(f"{name_or_path!r} is not a vision-language model seedrl knows (model type {kind!r}); "
                          f"valid: {', '.join(VL_MODEL_TYPES)}")
    return kind


# -- the processor -------------------------------------------------------------------------------------------
def _image_only_class(model_type: str):
    """The model's processor class without its video processor (whose class needs torchvision): images
    and text are processed by the same code as the full processor's."""
    from transformers.processing_utils import ProcessorMixin

    if model_type == "qwen2_vl":
        from transformers import Qwen2VLProcessor as Base
    else:
        from transformers import Qwen2_5_VLProcessor as Base

    class ImageOnlyProcessor(Base):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token, self.video_token = IMAGE_TOKEN, "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    ImageOnlyProcessor.__name__ = ImageOnlyProcessor.__qualname__ = f"{Base.__name__}ImageOnly"
    return ImageOnlyProcessor


def tiny_vl_tokenizer():
    """The built-in tokenizer (``assets/tokenizer``, read verbatim as the text models read it) with Qwen's
    vision special tokens added after its vocabulary."""
    from transformers import PreTrainedTokenizerFast

    from seedrl.models.tokenizer import ASSET_DIR as TEXT_ASSETS
    from seedrl.models.tokenizer import CHATML_TEMPLATE

    tok = PreTrainedTokenizerFast.from_pretrained(str(TEXT_ASSETS))
    tok.chat_template = tok.chat_template or CHATML_TEMPLATE
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    return tok


_IMAGE_KEYS = ("do_resize", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std",
               "do_convert_rgb", "min_pixels", "max_pixels", "size", "patch_size", "temporal_patch_size", "merge_size")


def image_processor_from(path: Path):
    """Qwen2-VL's PIL image processor (no torchvision) from a folder's ``preprocessor_config.json``, or the
    ``image_processor`` entry of its ``processor_config.json`` (what ``save_pretrained`` writes)."""
    from transformers import Qwen2VLImageProcessorPil

    if (path / "preprocessor_config.json").is_file():
        cfg = json.loads((path / "preprocessor_config.json").read_text())
    elif (path / "processor_config.json").is_file():
        cfg = json.loads((path / "processor_config.json").read_text()).get("image_processor", {})
    else:
        raise SeedRLError(f"model folder {str(path)!r} has no image processor config (preprocessor_config.json "
                          f"or processor_config.json)")
    return Qwen2VLImageProcessorPil(**{k: cfg[k] for k in _IMAGE_KEYS if k in cfg})


def _folder_tokenizer(path: str, trust_remote_code: bool):
    """A folder's or hub model's tokenizer; a generic ``tokenizer.json`` (the built-in one, saved) verbatim."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg = Path(path) / "tokenizer_config.json"
    declared = json.loads(cfg.read_text()).get("tokenizer_class") if cfg.is_file() else None
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def load_processor(name_or_path: str, trust_remote_code: bool = False):
    """The processor of a vision-language policy: the shipped one for built-in names, else the model's own
    through ``AutoProcessor``, or, where that cannot load it (its video processor needs torchvision; a
    folder seedrl saved), the same processor class without video over the folder's tokenizer and image
    processor config. Its tokenizer pads on the left, as the text path's does."""
    if name_or_path in TINY_VL_CONFIGS:
        model_type = TINY_VL_CONFIGS[name_or_path][0]
        proc = _image_only_class(model_type)(image_processor=image_processor_from(ASSET_DIR),
                                             tokenizer=tiny_vl_tokenizer(),
                                             chat_template=(ASSET_DIR / "chat_template.jinja").read_text())
    else:
        from transformers import AutoProcessor

        path = str(Path(name_or_path).expanduser()) if Path(name_or_path).expanduser().exists() else name_or_path
        first: Exception | None = None
        try:
            proc = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (ImportError, AttributeError, ValueError, TypeError, KeyError, OSError) as exc:
            proc, first = None, exc  # e.g. "Can't load video processor": no torchvision
        if proc is None or not hasattr(proc, "image_processor"):
            try:
                local = Path(path)
                if not local.is_dir():
                    from huggingface_hub import hf_hub_download

                    local = Path(hf_hub_download(path, "preprocessor_config.json")).parent
                tok = _folder_tokenizer(str(local), trust_remote_code)
                template = tok.chat_template
                if (local / "chat_template.jinja").is_file():
                    template = (local / "chat_template.jinja").read_text()
                proc = _image_only_class(vl_model_type(path))(image_processor=image_processor_from(local),
                                                              tokenizer=tok, chat_template=template)
            except (OSError, ValueError) as exc:
                why = str(first or exc).splitlines()[0]
                raise SeedRLError(f"cannot load the processor of {name_or_path!r}: {why}") from exc
    tok = proc.tokenizer
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return proc


def save_processor(processor, path: str | Path) -> None:
    """``processor.save_pretrained`` under the model's own processor class name (an image-only one is saved
    as the full class, so ``AutoProcessor`` loads it where torchvision is installed)."""
    processor.save_pretrained(str(path))
    for name in ("processor_config.json", "tokenizer_config.json"):
        f = Path(path) / name
        if f.is_file():
            cfg = json.loads(f.read_text())
            if str(cfg.get("processor_class", "")).endswith("ImageOnly"):
                cfg["processor_class"] = cfg["processor_class"][:-len("ImageOnly")]
                f.write_text(json.dumps(cfg, indent=2) + "\n")


def attach_processor(tokenizer, processor) -> None:
    """Let the loop's tokenizer carry its processor: every function that encodes a prompt with images
    finds it through :func:`processor_of` (text prompts never need it)."""
    tokenizer.seedrl_processor = processor


def processor_of(tokenizer):
    """The processor attached to ``tokenizer`` (a vision-language policy's), else ``None``."""
    return getattr(tokenizer, "seedrl_processor", None)


def require_processor(tokenizer):
    proc = processor_of(tokenizer)
    if proc is None:
        raise SeedRLError("this prompt has images but the policy is a text model; use a vision-language model "
                          f"(a built-in one: {', '.join(TINY_VL_CONFIGS)}, or e.g. Qwen/Qwen2.5-VL-3B-Instruct)")
    return proc


# -- encoding ------------------------------------------------------------------------------------------------
def with_images(messages: list[dict], n_images: int) -> list[dict]:
    """The chat ``messages`` (text contents) with ``n_images`` image items at the start of the last user
    message, in the content-list form processors' chat templates read."""
    out = [dict(m) for m in messages]
    last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
    if last is None:
        raise SeedRLError("a prompt with images needs a user message to carry them")
    text = out[last]["content"]
    out[last]["content"] = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    return out


def with_image_marks(messages: list[dict], mark: str) -> list[dict]:
    """The chat ``messages`` with every ``mark`` in a user message's text replaced by an image item (the
    content-list form), the text around it kept in order: for prompts that show images between lines
    (SEED's visual analysis prompt, one image per step)."""
    out = []
    for m in messages:
        text = m.get("content")
        if m.get("role") != "user" or not isinstance(text, str) or mark not in text:
            out.append(dict(m))
            continue
        parts: list[dict] = []
        for k, piece in enumerate(text.split(mark)):
            if k:
                parts.append({"type": "image"})
            if piece:
                parts.append({"type": "text", "text": piece})
        out.append({**m, "content": parts})
    return out


def encode_text_with_images(tokenizer, text: str, images: Sequence[np.ndarray]) -> tuple[list[int], ImageInputs]:
    """A templated prompt ``text`` (one ``<|vision_start|><|image_pad|><|vision_end|>`` per image) and its
    images through the processor: the token ids with each image's placeholders expanded, and the images'
    tensors."""
    proc = require_processor(tokenizer)
    n = text.count(IMAGE_TOKEN)
    if n != len(images):
        raise SeedRLError(f"the prompt has {n} image placeholders for {len(images)} images")
    enc = proc(text=[text], images=[np.asarray(im) for im in images], return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    return ids, ImageInputs(enc["pixel_values"].float(), enc["image_grid_thw"].long(),
                            raw=[np.asarray(im) for im in images])


def encode_chat(tokenizer, messages: list[dict], images: Sequence[np.ndarray]) -> tuple[list[int], ImageInputs]:
    """Step ``messages`` (text contents) and their images through the processor's chat template (generation
    prompt appended) and the processor: ``(prompt ids, image inputs)``."""
    proc = require_processor(tokenizer)
    text = proc.apply_chat_template(with_images(messages, len(images)), tokenize=False, add_generation_prompt=True)
    return encode_text_with_images(tokenizer, text, images)


def image_token_id(tokenizer) -> int:
    return require_processor(tokenizer).image_token_id


# -- another engine's view (vLLM) ----------------------------------------------------------------------------
def collapse_image_placeholders(ids: Sequence[int], image_token: int) -> list[int]:
    """``ids`` with each run of ``image_token`` (one image's expanded placeholders) cut to one token: the
    prompt as the chat template wrote it, before the processor expanded it; an engine that runs the
    processor itself (vLLM) expands it again from the images."""
    return [t for k, t in enumerate(ids) if t != image_token or k == 0 or ids[k - 1] != image_token]


def resized_like(processor, image: np.ndarray) -> np.ndarray:
    """``image`` (uint8 ``H x W x 3``) resized as a Qwen2-VL PIL image processor resizes it before rescaling:
    Qwen's ``smart_resize`` to a multiple of ``patch_size * merge_size`` inside its pixel bounds, with PIL
    and the processor's ``resample``. An engine whose processor resizes otherwise (torchvision) then has
    nothing left to resize and computes the same pixels."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    ip = processor.image_processor
    size = ip.size
    lo = getattr(size, "shortest_edge", None) or getattr(ip, "min_pixels", None)
    hi = getattr(size, "longest_edge", None) or getattr(ip, "max_pixels", None)
    im = np.asarray(image)
    h, w = smart_resize(im.shape[0], im.shape[1], factor=ip.patch_size * ip.merge_size, min_pixels=lo, max_pixels=hi)
    if (h, w) == im.shape[:2]:
        return im
    resample = Image.Resampling(ip.resample if ip.resample is not None else Image.Resampling.BICUBIC)
    return np.asarray(Image.fromarray(im).resize((w, h), resample=resample))


def write_engine_processor(processor, path: str | Path) -> None:
    """``processor`` saved into an engine's model folder (:func:`save_processor`), with a video processor
    config beside it where the processor has no video processor (an image-only one): the full processor
    class, which another engine loads through ``AutoProcessor``, reads all its parts. Its video settings are
    the image processor's (patches, merge, normalisation); seedrl sends no video."""
    save_processor(processor, path)
    video = Path(path) / "video_preprocessor_config.json"
    if getattr(processor, "video_processor", None) is None and not video.is_file():
        ip = processor.image_processor
        video.write_text(json.dumps({
            "video_processor_type": "Qwen2VLVideoProcessor", "patch_size": ip.patch_size,
            "merge_size": ip.merge_size, "temporal_patch_size": ip.temporal_patch_size,
            "image_mean": list(ip.image_mean), "image_std": list(ip.image_std),
            "do_rescale": ip.do_rescale, "rescale_factor": ip.rescale_factor, "do_normalize": ip.do_normalize,
        }, indent=2) + "\n")


# -- the forward ---------------------------------------------------------------------------------------------
def _core(model):
    """The module holding ``get_rope_index`` (through peft, DDP and FSDP wrappers), or None."""
    for m in model.modules():
        if hasattr(m, "get_rope_index") and hasattr(m, "visual"):
            return m
    return None


def is_vision_policy(model) -> bool:
    return getattr(getattr(model, "config", None), "vision_config", None) is not None


def vision_token_ids(model) -> list[int]:
    """A VL model's image/video placeholders and vision brackets: tokens a response never holds."""
    cfg = model.config
    return [int(v) for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
            if (v := getattr(cfg, k, None)) is not None]


def mrope_positions(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    image_grid_thw: torch.Tensor | None) -> torch.Tensor:
    """``[3, B, L]`` multimodal rotary positions of a left-padded batch, as the model computes them for
    generation (``get_rope_index``; pads at 0, real tokens counted from the first one)."""
    core = _core(model)
    if core is None:
        raise SeedRLError("multimodal positions need a Qwen2-VL / Qwen2.5-VL model")
    image_id = core.config.image_token_id
    mm_types = (input_ids == image_id).long()
    pos, _ = core.get_rope_index(input_ids, image_grid_thw=image_grid_thw, video_grid_thw=None,
                                 attention_mask=attention_mask, mm_token_type_ids=mm_types)
    return pos


def saved_to_model_keys(sd: dict[str, Any], model) -> dict[str, Any]:
    """The weights of a VL model folder, as ``save_pretrained`` writes them (the hub layout: ``visual.*``,
    ``model.layers.*``), under the model's own module names (``model.visual.*``,
    ``model.language_model.layers.*``); names the model already has are kept, so a state dict taken from
    the model passes through unchanged."""
    own = set(model.state_dict())
    out = {}
    for k, v in sd.items():
        name = k
        if name not in own:
            if name.startswith("visual."):
                name = "model." + name
            elif name.startswith("model.") and not name.startswith(("model.visual.", "model.language_model.")):
                name = "model.language_model." + name[len("model."):]
        out[name if name in own else k] = v
    return out


# -- the models ----------------------------------------------------------------------------------------------
def tiny_vl_config(name: str, tokenizer) -> Any:
    """The config of a built-in VL model: its class's own config with small widths, the built-in
    tokenizer's vocabulary and its vision token ids."""
    from transformers import AutoConfig

    model_type, text, vision = TINY_VL_CONFIGS[name]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    section = [head_dim // 8, (head_dim // 2 - head_dim // 8) // 2]
    section.append(head_dim // 2 - sum(section))
    text_cfg = dict(vocab_size=((len(tokenizer) + 63) // 64) * 64, num_key_value_heads=text["num_attention_heads"],
                    max_position_embeddings=4096, tie_word_embeddings=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                    attention_dropout=0.0, initializer_range=text["hidden_size"] ** -0.5, **text)
    vis = dict(vision, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    vis["out_hidden_size" if model_type == "qwen2_5_vl" else "hidden_size"] = text["hidden_size"]
    return AutoConfig.for_model(model_type, text_config=text_cfg, vision_config=vis,
                                image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                                vision_start_token_id=ids["<|vision_start|>"],
                                vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True,
                                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                bos_token_id=None)


def model_class(model_type: str):
    """The generation class of a VL model type (unknown types list the valid ones)."""
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2VLForConditionalGeneration

    classes = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen2_vl": Qwen2VLForConditionalGeneration}
    if model_type not in classes:
        raise SeedRLError(f"unknown vision-language model type {model_type!r}; valid: {', '.join(classes)}")
    return classes[model_type]


def build_tiny_vl(name: str, tokenizer, init_seed: int = 0):
    cfg = tiny_vl_config(name, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = model_class(cfg.model_type)(cfg)
    return model


def load_pretrained_vl(name_or_path: str, dtype: torch.dtype, trust_remote_code: bool = False):
    """A real VL model by hub name or folder, through its own generation class (:func:`model_class`)."""
    try:
        return model_class(vl_model_type(name_or_path)).from_pretrained(name_or_path, dtype=dtype,
                                                                        trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise SeedRLError(f"cannot load model {name_or_path!r}: {str(exc).splitlines()[0]}") from exc


#: LoRA on the language model only: its attention and MLP projections (the vision tower and the merger
#: stay frozen under LoRA; a full fine-tune, SEED's, trains them all)
LANGUAGE_LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
