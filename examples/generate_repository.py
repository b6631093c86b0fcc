"""Write Thaw's example Triton model repository: resnet50, bert, bert_tokenizer, bert_ensemble.

    python examples/generate_repository.py OUT_DIR [--small] [--force]

Deterministic (fixed seeds), offline, and idempotent: a repository already generated with the
same options is left as it is. Each model is built in a temporary folder and moved into place
whole, so an interrupted run never leaves a half-written model behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.model_configs import (
    ScaleSettings,
    bert_config,
    bert_ensemble_config,
    resnet50_config,
    tokenizer_config,
    validate,
)
from examples.vocab import build_vocab

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

GENERATOR_VERSION = 1
STAMP_NAME = ".thaw-examples.json"
ONNX_OPSET = 17
MAX_SEQUENCE_LENGTH = 128


@dataclass(frozen=True)
class Options:
    """How to build the repository; `small` shrinks weights but keeps every model's contract."""

    small: bool = False

    @property
    def resnet_width(self) -> int:
        return 8 if self.small else 64

    @property
    def bert_hidden(self) -> int:
        return 32 if self.small else 128


def _export_onnx(
    model: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    *,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
) -> None:
    """TorchScript-based export (`dynamo=False`): dynamic axes, one self-contained .onnx file."""
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            str(path),
            opset_version=ONNX_OPSET,
            dynamo=False,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )


def write_resnet50(model_dir: Path, opts: Options) -> None:
    """resnet50/config.pbtxt and resnet50/1/model.onnx (input `input`, output `output`)."""
    import torch

    from examples.resnet import resnet50

    (model_dir / "1").mkdir(parents=True)
    model = resnet50(base_width=opts.resnet_width, seed=0)
    sample = torch.zeros(1, 3, 224, 224)
    axes = {"input": {0: "batch"}, "output": {0: "batch"}}
    _export_onnx(
        model, (sample,), model_dir / "1" / "model.onnx",
        input_names=["input"], output_names=["output"], dynamic_axes=axes,
    )  # fmt: skip
    _write_config(model_dir, resnet50_config(ScaleSettings(target_concurrency=4)))


def write_bert(model_dir: Path, opts: Options) -> None:
    """bert/config.pbtxt and bert/1/model.onnx, sized to the tokenizer's vocabulary."""
    import torch

    from examples.bert import BertConfig, bert_encoder

    (model_dir / "1").mkdir(parents=True)
    cfg = BertConfig(
        vocab_size=len(build_vocab()),
        hidden=opts.bert_hidden,
        layers=1 if opts.small else 2,
        intermediate=4 * opts.bert_hidden,
        max_positions=MAX_SEQUENCE_LENGTH,
    )
    model = bert_encoder(cfg, seed=1)
    ids = torch.ones(2, 16, dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    seq_axes = {0: "batch", 1: "sequence"}
    axes = {
        "input_ids": seq_axes, "attention_mask": seq_axes,
        "last_hidden_state": seq_axes, "pooler_output": {0: "batch"},
    }  # fmt: skip
    _export_onnx(
        model, (ids, mask), model_dir / "1" / "model.onnx",
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "pooler_output"], dynamic_axes=axes,
    )  # fmt: skip
    _write_config(model_dir, bert_config(ScaleSettings(target_concurrency=8), hidden=cfg.hidden))


def write_bert_tokenizer(model_dir: Path, opts: Options) -> None:
    """bert_tokenizer/config.pbtxt, 1/model.py (Triton python backend) and 1/vocab.txt."""
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True)
    shutil.copyfile(Path(__file__).with_name("bert_tokenizer_model.py"), version_dir / "model.py")
    (version_dir / "vocab.txt").write_text("\n".join(build_vocab()) + "\n", encoding="utf-8")
    text = tokenizer_config(
        ScaleSettings(target_concurrency=16), max_sequence_length=MAX_SEQUENCE_LENGTH
    )
    _write_config(model_dir, text)


def write_bert_ensemble(model_dir: Path, opts: Options) -> None:
    """bert_ensemble/config.pbtxt and an empty 1/ (an ensemble has no files, Triton wants the
    version directory): text in, embeddings out, through bert_tokenizer then bert."""
    (model_dir / "1").mkdir(parents=True)
    _write_config(model_dir, bert_ensemble_config(ScaleSettings(), hidden=opts.bert_hidden))


def _write_config(model_dir: Path, text: str) -> None:
    validate(text)  # never write a config.pbtxt that real Triton would reject
    (model_dir / "config.pbtxt").write_text(text, encoding="utf-8")


MODELS: dict[str, Callable[[Path, Options], None]] = {
    "resnet50": write_resnet50,
    "bert": write_bert,
    "bert_tokenizer": write_bert_tokenizer,
    "bert_ensemble": write_bert_ensemble,
}


def _stamp(opts: Options) -> dict[str, object]:
    return {"generator_version": GENERATOR_VERSION, "small": opts.small, "models": sorted(MODELS)}


def is_up_to_date(out_dir: Path, opts: Options) -> bool:
    """True when `out_dir` holds every model, generated by this version with these options."""
    try:
        stamp = json.loads((out_dir / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    complete = all((out_dir / name / "config.pbtxt").is_file() for name in MODELS)
    return complete and stamp == _stamp(opts)


def generate(out_dir: Path, opts: Options, *, force: bool = False) -> bool:
    """Write the repository into `out_dir`; returns False when it was already up to date."""
    if not force and is_up_to_date(out_dir, opts):
        return False
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / STAMP_NAME).unlink(missing_ok=True)
    for name, write in MODELS.items():
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".tmp-{name}-") as tmp:
            staged = Path(tmp) / name
            write(staged, opts)
            _replace_dir(staged, out_dir / name)
        logger.info("wrote model=%s in %.1f s", name, time.perf_counter() - started)
    (out_dir / STAMP_NAME).write_text(json.dumps(_stamp(opts)) + "\n", encoding="utf-8")
    return True


def _replace_dir(staged: Path, target: Path) -> None:
    """Move `staged` to `target`, replacing an older copy only once the new one is complete."""
    if target.exists():
        old = target.with_name(f".old-{target.name}-{time.monotonic_ns()}")
        target.rename(old)
        staged.rename(target)
        shutil.rmtree(old)
    else:
        staged.rename(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="model repository folder to write")
    parser.add_argument(
        "--small", action="store_true", help="narrow weights (same inputs and outputs), for tests"
    )
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.perf_counter()
    if generate(args.out_dir, Options(small=args.small), force=args.force):
        logger.info("repository %s ready in %.1f s", args.out_dir, time.perf_counter() - started)
    else:
        logger.info("repository %s is up to date", args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
