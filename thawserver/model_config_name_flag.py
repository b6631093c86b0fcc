"""tritonserver's `--model-config-name`, for both CLIs (tritonconfig.config_name)."""

from __future__ import annotations

import argparse

from tritonconfig.config_name import check_config_name
from tritonconfig.errors import ModelConfigError

__all__ = ["add_model_config_name_argument"]


def _config_name(text: str) -> str:
    try:
        return check_config_name(text)
    except ModelConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_model_config_name_argument(parser: argparse._ActionsContainer, *, replicas: bool) -> None:
    """The flag on `parser` (into `model_config_name`; not given: None, config.pbtxt; a
    default of "" would pass through the check argparse gives string defaults)."""
    also = " (given to every replica)" if replicas else ""
    parser.add_argument(
        "--model-config-name", type=_config_name, default=None, metavar="NAME",
        help="read each model's configs/NAME.pbtxt instead of its config.pbtxt where it has "
        f"one, as tritonserver{also}",
    )  # fmt: skip
