"""Fuzz `config.pbtxt`: text → parse → defaults → auto-complete → validate, as `thaw serve`
reads a model (`runtime.models.repository.read_model`).

Property: a model whose config.pbtxt holds anything either reads into a ModelSpec or is
refused with the runtime's `ServingError` (a `RepositoryError` naming the file), which the
server shows as that model's UNAVAILABLE reason; never another exception, never a hang.
Model files beside the config (a Python model, an ONNX file of junk bytes) are drawn too, so
auto-complete runs on what it finds.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st

from runtime.errors import ServingError
from runtime.models.repository import read_model
from tests.fuzz.targets import fuzz_target

_NAME = "fuzzed"
_WORDS = st.sampled_from(
    ["TYPE_FP32", "TYPE_STRING", "TYPE_BF16", "TYPE_INT8", "KIND_CPU", "KIND_GPU", "KIND_MODEL",
     "-1", "0", "1", "3", "-5", "99999999999999999999", "true", "\"python\"", "\"onnxruntime\"",
     "\"pytorch\"", "\"onnxruntime_onnx\"", "\"ensemble\"", "\"x\"", "\"INPUT0\"", "[ ]", "{ }"]
)  # fmt: skip
_FIELDS = st.sampled_from(
    ["name", "platform", "backend", "max_batch_size", "default_model_filename", "data_type",
     "dims", "reshape", "count", "kind", "gpus", "preferred_batch_size",
     "max_queue_delay_microseconds", "num_versions", "versions", "key", "string_value",
     "model_name", "model_version", "input_map", "output_map", "control_input",
     "max_sequence_idle_microseconds", "optional", "is_shape_tensor", "label_filename"]
)  # fmt: skip
_BLOCKS = st.sampled_from(
    ["input", "output", "instance_group", "dynamic_batching", "sequence_batching",
     "version_policy", "latest", "specific", "parameters", "value", "ensemble_scheduling",
     "step", "optimization", "model_warmup", "response_cache", "model_transaction_policy"]
)  # fmt: skip


def _text(depth: int) -> st.SearchStrategy[str]:
    """A config.pbtxt-shaped text: fields and blocks, nested `depth` levels, often invalid."""
    field = st.builds(lambda f, v: f"{f}: {v}", _FIELDS, _WORDS)
    if depth == 0:
        return st.lists(field, max_size=4).map(" ".join)
    block = st.builds(
        lambda name, body, many: f"{name} [ {{ {body} }} ]" if many else f"{name} {{ {body} }}",
        _BLOCKS, _text(depth - 1), st.booleans(),
    )  # fmt: skip
    return st.lists(field | block, max_size=5).map("\n".join)


_DTYPES = st.sampled_from(["TYPE_FP32", "TYPE_STRING", "TYPE_BF16", "TYPE_INT64", "TYPE_BOOL"])
_DIMS = st.lists(st.integers(-3, 1 << 40), max_size=3).map(lambda d: ", ".join(map(str, d)))


def _tensor(kind: str) -> st.SearchStrategy[str]:
    return st.builds(
        lambda n, t, d, extra: f'{kind} [ {{ name: "{n}" data_type: {t} dims: [ {d} ] {extra} }} ]',
        st.sampled_from(["INPUT0", "OUTPUT0", "a b", ""]), _DTYPES, _DIMS,
        st.sampled_from(["", "reshape { shape: [ ] }", "optional: true", "is_shape_tensor: true"]),
    )  # fmt: skip


_PLAUSIBLE = st.builds(
    lambda backend, mbs, i, o, extra: f"{backend}\nmax_batch_size: {mbs}\n{i}\n{o}\n{extra}",
    st.sampled_from(['backend: "python"', 'backend: "onnxruntime"', 'platform: "pytorch_libtorch"',
                     'platform: "ensemble"', 'backend: "nope"', ""]),
    st.integers(-2, 1 << 33), _tensor("input"), _tensor("output"),
    st.sampled_from(
        ["", "dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 0 ] }",
         "instance_group [ { count: 0 kind: KIND_GPU gpus: [ 7 ] } ]",
         "version_policy { specific { versions: [ -1 ] } }", "version_policy: { latest { } }",
         "sequence_batching { control_input [ { name: \"S\" } ] }",
         'ensemble_scheduling { step [ { model_name: "fuzzed" model_version: -1 } ] }',
         'parameters { key: "thaw.min_replicas" value { string_value: "-1" } }',
         'model_warmup [ { name: "w" batch_size: 9 inputs { key: "INPUT0" value { } } } ]']
    ),
)  # fmt: skip


@st.composite
def _model(draw: st.DrawFn) -> tuple[bytes, dict[str, bytes]]:
    text = draw(_PLAUSIBLE | _text(3) | st.text(max_size=200))
    if draw(st.integers(0, 4)) == 0:  # damaged: cut short, or a byte changed
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(["", "{", "}", '"', "\\", "\x00", "ÿ"]))
    raw = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        raw = draw(st.binary(max_size=64))  # not UTF-8 at all
    files = draw(
        st.dictionaries(
            st.sampled_from(["1/model.py", "1/model.onnx", "1/model.pt", "2/model.onnx", "x/y"]),
            st.binary(max_size=32) | st.just(b"class TritonPythonModel: pass\n"),
            max_size=2,
        )
    )
    return raw, files


@fuzz_target(_model(), st.booleans())
def _read(model: tuple[bytes, dict[str, bytes]], auto_complete: bool) -> None:
    config, files = model
    repo = Path(tempfile.mkdtemp(prefix="thaw-fuzz-config-"))
    try:
        model_dir = repo / _NAME
        model_dir.mkdir()
        (model_dir / "config.pbtxt").write_bytes(config)
        for rel, content in files.items():
            (model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (model_dir / rel).write_bytes(content)
        try:
            read_model(repo, _NAME, auto_complete=auto_complete)
        except ServingError:
            return
    finally:
        shutil.rmtree(repo, ignore_errors=True)


test_config_pbtxt, test_config_pbtxt_long = _read
