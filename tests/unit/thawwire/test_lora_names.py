"""The LoRA name grammar and the adapters a model offers, the rule both servers share: Triton's
frontend's split (exactly two parts, else the whole name), vllm_backend's `enable_lora` switch,
multi_lora.json's names in file order, every malformed file offering none; a TensorRT-LLM
model's adapters only where their folder is inside the repository and holds both tensors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thawwire.openai_lora import (
    MAX_LORA_LIST_BYTES,
    TRTLLM_LORA_FILES,
    lora_model_id,
    parse_vllm_lora_names,
    read_lora_names,
    read_trtllm_adapters,
    split_lora,
    unknown_lora_message,
)

ON = b'{"model": "x", "enable_lora": true}'
LIST = b'{"doll": "m/1/GemmaDoll", "sheep": "m/1/GemmaSheep"}'


@pytest.mark.parametrize(
    ("name", "separator", "split"),
    [
        ("gemma_lora_doll", "_lora_", ("gemma", "doll")),
        ("gemma", "_lora_", ("gemma", None)),
        ("gemma_lora_doll", None, ("gemma_lora_doll", None)),
        ("gemma_lora_doll", "", ("gemma_lora_doll", None)),
        ("a_lora_b_lora_c", "_lora_", ("a_lora_b_lora_c", None)),  # three parts: no LoRA
        ("gemma_lora_", "_lora_", ("gemma", "")),  # an empty adapter name: refused later
        ("gemma/doll", "/", ("gemma", "doll")),
    ],
)
def test_a_name_splits_in_exactly_two_or_not_at_all(
    name: str, separator: str | None, split: tuple[str, str | None]
) -> None:
    assert split_lora(name, separator) == split


def test_the_listed_id_and_the_refusal_read_as_tritons() -> None:
    assert lora_model_id("gemma", "doll", "_lora_") == "gemma_lora_doll"
    assert unknown_lora_message("x", "gemma_lora_x") == "Unknown LoRA: x; for model: gemma_lora_x"


@pytest.mark.parametrize(
    ("engine", "listed", "names"),
    [
        (ON, LIST, ("doll", "sheep")),
        (b'{"enable_lora": "True"}', LIST, ("doll", "sheep")),  # a string, as vllm_backend
        (b'{"enable_lora": false}', LIST, ()),
        (b'{"model": "x"}', LIST, ()),  # vllm_backend loads no adapters
        (None, LIST, ()),  # no engine arguments: Triton's frontend would accept any name
        (ON, None, ()),
        (b"{not json", LIST, ()),
        (ON, b"[1, 2]", ()),
        (ON, b'{"": "p", "ok": "p"}', ("ok",)),
        (ON, b"x" * (MAX_LORA_LIST_BYTES + 1), ()),
    ],
)
def test_a_vllm_style_model_offers_its_list_when_lora_is_enabled(
    engine: bytes | None, listed: bytes | None, names: tuple[str, ...]
) -> None:
    assert parse_vllm_lora_names(engine, listed) == names


def test_the_files_are_read_from_the_version_folder(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_bytes(ON)
    (tmp_path / "multi_lora.json").write_text(json.dumps({"b": "p", "a": "p"}))
    assert read_lora_names(tmp_path, vllm=True) == ("b", "a")  # file order
    assert read_lora_names(tmp_path / "absent", vllm=True) == ()


def test_a_trtllm_model_offers_the_adapters_whose_tensors_are_in_the_repository(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    version = repo / "llm" / "1"
    for folder in ("llm/1/doll", "llm/1/sheep", "llm/1/half"):
        (repo / folder).mkdir(parents=True)
    for folder in ("llm/1/doll", "llm/1/sheep"):
        for name in TRTLLM_LORA_FILES:
            (repo / folder / name).write_bytes(b"")
    (repo / "llm" / "1" / "half" / TRTLLM_LORA_FILES[0]).write_bytes(b"")
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in TRTLLM_LORA_FILES:
        (outside / name).write_bytes(b"")
    (version / "link").symlink_to(outside)
    listed = {
        "abs": str(repo / "llm/1/doll"),  # absolute: never
        "up": "../outside",  # outside the repository
        "link": "llm/1/link",  # inside by name, outside once resolved
        "half": "llm/1/half",  # one tensor missing
        "doll": "llm/1/doll",
        "gone": "llm/1/none",
        "sheep": "llm/1//../1/sheep",
    }
    (version / "multi_lora.json").write_text(json.dumps(listed))
    adapters = read_trtllm_adapters(version, repo)
    assert [(a.name, a.task_id) for a in adapters.values()] == [("doll", 1), ("sheep", 2)]
    assert adapters["sheep"].folder == (repo / "llm/1/sheep").resolve()
    assert read_lora_names(version, vllm=False) == ("doll", "sheep")
