"""A sentence-transformers model run on onnxruntime (`memory.embedding_runtime = "onnx"`).

The model's transformer is exported once with `torch.onnx` (the `onnx` package must be
installed: `pip install 'complementary-rl[onnx]'`) into `memory.embedding_onnx_dir`, keyed by
the model folder and the torch version, and checked against the torch model on probe texts
when it is written: an export whose vectors differ (cosine below `MIN_COSINE`) is refused. It
then runs the same tokenizer, mean pooling and normalisation as the torch model, so the vectors
match the ones already stored (the bank's embedding identity does not change). Only models
whose pipeline is transformer, mean pooling and (optionally) normalisation are supported.

sentence-transformers' own `backend="onnx"` needs `optimum`, which does not support
transformers 5; this exports with torch instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from crl.cache_dirs import machine_cache_dir
from crl.memory.errors import BankError

MIN_COSINE = 0.99999
"""Least cosine between an export's vector and the torch model's for every probe text."""

PROBES = (
    "open the door",
    "Goal: take the brass key and unlock the chest.\nYou are in the hall. A brass key lies here.",
    "You are in the kitchen. In one part of the room you see a stove. There is also an oven.",
)
OPSET = 17


class OnnxExportError(BankError, RuntimeError):
    """The model cannot run on onnxruntime here (no `onnx` package, an unsupported pipeline, or an
    export whose vectors differ from the torch model's)."""


def default_onnx_dir() -> Path:
    """Where exports go unless `memory.embedding_onnx_dir` says otherwise."""
    return machine_cache_dir("onnx")


def pooling_mode(pooling: Any) -> str:
    """A sentence-transformers `Pooling` module's mode ('mean', 'cls', ...; 'mixed' for several)."""
    config = pooling.get_config_dict()
    if isinstance(config.get("pooling_mode"), str):
        return config["pooling_mode"]
    modes = [
        re.sub(r"_tokens?$", "", k[len("pooling_mode_") :])
        for k, v in config.items()
        if k.startswith("pooling_mode_") and v
    ]
    return modes[0] if len(modes) == 1 else "mixed"


def _check_pipeline(st_model: Any) -> None:
    names = [type(m).__name__ for m in st_model]
    ok = names[:2] == ["Transformer", "Pooling"] and all(n == "Normalize" for n in names[2:])
    mode = pooling_mode(st_model[1]) if ok else "?"
    if mode != "mean":
        raise OnnxExportError(
            f"embedding_runtime = 'onnx' runs transformer + mean pooling models only; this one is {names} "
            f"({mode} pooling). Use embedding_runtime = 'torch'"
        )


class OnnxSentenceEncoder:
    """`encode(texts)` as the torch sentence-transformers model would give it, on onnxruntime.

    Args:
        st_model: the loaded `SentenceTransformer` (its tokenizer and weights are used).
        model_path: the model's local folder (part of the export's key).
        folder: where exports are kept.
        threads: onnxruntime intra-op threads (0: its default).
    """

    def __init__(self, st_model: Any, model_path: str, folder: Path, threads: int = 1):
        _check_pipeline(st_model)
        self.tokenizer = st_model.tokenizer
        self.max_length = int(st_model.max_seq_length)
        self.file = self._exported(st_model, model_path, Path(folder))
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = options.inter_op_num_threads = threads
        self.session = ort.InferenceSession(str(self.file), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Unit vectors of `texts`, batched."""
        out = []
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
            feeds = {name: np.asarray(enc[name], dtype=np.int64) for name in self.inputs}
            hidden = self.session.run(None, feeds)[0]
            mask = np.asarray(enc["attention_mask"], dtype=np.float32)[..., None]
            pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            out.append(pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12))
        return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), dtype=np.float32)

    def _exported(self, st_model: Any, model_path: str, folder: Path) -> Path:
        import torch

        key = hashlib.sha1(f"{Path(model_path).resolve()}|{torch.__version__}|{OPSET}".encode()).hexdigest()[:16]
        target = folder / key / "model.onnx"
        if target.exists() and (target.parent / "check.json").exists():
            return target
        try:
            import onnx  # noqa: F401  (torch.onnx needs it to write the file)
        except ImportError as e:
            raise OnnxExportError(
                "embedding_runtime = 'onnx' needs the onnx package to export the model once: "
                "pip install onnx (or the [onnx] extra)"
            ) from e
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.partial")
        sample = self.tokenizer(list(PROBES[:2]), padding=True, return_tensors="pt")
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
        encoder = _last_hidden_module(st_model[0].auto_model, names).eval()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                encoder,
                tuple(sample[n] for n in names),
                str(partial),
                input_names=names,
                output_names=["hidden"],
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "hidden"]},
                opset_version=OPSET,
                dynamo=False,
            )
        cosine = self._check(partial, st_model)
        if cosine < MIN_COSINE:
            partial.unlink(missing_ok=True)
            raise OnnxExportError(
                f"the ONNX export of {model_path} gives other vectors than the torch model (cosine {cosine:.6f} "
                f"< {MIN_COSINE}); use embedding_runtime = 'torch'"
            )
        os.replace(partial, target)
        (target.parent / "check.json").write_text(
            json.dumps({"model": str(model_path), "torch": torch.__version__, "min_cosine": cosine})
        )
        return target

    def _check(self, file: Path, st_model: Any) -> float:
        import onnxruntime as ort

        session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        self.session, self.inputs = session, [i.name for i in session.get_inputs()]
        mine = self.encode(list(PROBES))
        theirs = st_model.encode(list(PROBES), normalize_embeddings=True, convert_to_numpy=True)
        return float(np.min((mine * theirs).sum(1)))


def _last_hidden_module(model: Any, names: list[str]) -> Any:
    """The transformer as a module from token tensors (in `names` order) to its last hidden state."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(**dict(zip(names, tensors))).last_hidden_state

    return LastHidden()
