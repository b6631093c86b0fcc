"""An output's `label_filename` is repository input: read as hostile (a regular file in the
model's directory, bounded), and a bad one fails the model's load with a clear error instead
of hanging it or reading outside the model."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from runtime.errors import RepositoryError
from runtime.models.output_labels import read_output_labels
from tritonconfig.schema import mc


def _config(label_filename: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    config.output.add(name="Y", label_filename=label_filename)
    config.output.add(name="Z")  # no label file: no entry
    return config


def test_the_labels_are_the_files_lines(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\n\nbird")
    assert read_output_labels(_config("labels.txt"), tmp_path) == {"Y": ("cat", "dog", "", "bird")}


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/hostname", "sub/../../outside.txt"])
def test_a_label_file_outside_the_model_is_refused(tmp_path: Path, name: str) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (tmp_path / "outside.txt").write_text("secret\n")
    with pytest.raises(RepositoryError, match="outside the model directory"):
        read_output_labels(_config(name), model)


def test_a_symlink_out_of_the_model_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (tmp_path / "outside.txt").write_text("secret\n")
    (model / "labels.txt").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(RepositoryError, match="outside the model directory"):
        read_output_labels(_config("labels.txt"), model)


def test_a_missing_label_file_is_tritons_words(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match=r"failed to open text file for read .*No such file"):
        read_output_labels(_config("nope.txt"), tmp_path)


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "labels.txt")
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_output_labels(_config("labels.txt"), tmp_path)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # the read waits for a writer: unblock it, then fail
        with open(tmp_path / "labels.txt", "w"):
            pass
        pytest.fail("reading a FIFO label file hung")
    assert isinstance(outcome[0], RepositoryError)
    assert "not a regular file" in str(outcome[0])


@pytest.mark.parametrize("kind", ["directory", "device"])
def test_a_directory_or_a_device_is_refused(tmp_path: Path, kind: str) -> None:
    if kind == "directory":
        (tmp_path / "labels.txt").mkdir()
        config = _config("labels.txt")
    else:
        (tmp_path / "labels.txt").symlink_to("/dev/zero")  # outside, and endless
        config = _config("labels.txt")
    with pytest.raises(RepositoryError):
        read_output_labels(config, tmp_path)


def test_an_oversized_label_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runtime.models.output_labels._MAX_LABEL_FILE_BYTES", 10)
    (tmp_path / "labels.txt").write_text("a\n" * 100)
    with pytest.raises(RepositoryError, match="over the 10 byte limit"):
        read_output_labels(_config("labels.txt"), tmp_path)


def test_an_ensemble_output_takes_the_labels_of_the_step_that_writes_it(tmp_path: Path) -> None:
    # Triton's core completes an ensemble's labels from its steps (qa/L0_infer_variable's
    # simple_* ensembles classify with their composing model's labels).
    from runtime.models.output_labels import ensemble_output_labels
    from tritonconfig import parse_config

    step = parse_config(
        'name: "s" platform: "onnxruntime_onnx" output [ { name: "OUTPUT0" '
        'data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]',
        "s",
    )
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "labels.txt").write_text("a\nb\nc\n")
    ensemble = parse_config(
        'name: "e" platform: "ensemble" '
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ] '
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] }, '
        '{ name: "OTHER" data_type: TYPE_FP32 dims: [ 3 ] } ] '
        'ensemble_scheduling { step [ { model_name: "s" model_version: -1 '
        'input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } '
        'output_map { key: "OUTPUT1" value: "OTHER" } } ] }',
        "e",
    )
    (tmp_path / "e").mkdir()
    labels = ensemble_output_labels(ensemble, tmp_path / "e", {"s": step}.get)
    assert labels == {"OUT": ("a", "b", "c")}  # OTHER: its step output has no labels
    assert ensemble_output_labels(ensemble, tmp_path / "e", lambda _name: None) == {}
