"""Which file a model's config is read from: tritonserver's `--model-config-name`.

config_file(model_dir, name)   `configs/NAME.pbtxt` when NAME is given and the model has it,
                               else `config.pbtxt` (Triton's choice, made at each load)
check_config_name(name)        the name, or ModelConfigError: empty (Triton's words), or
                               not a plain file name (a path would reach outside the model)
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonconfig.errors import ModelConfigError

__all__ = ["CONFIGS_FOLDER", "CONFIG_FILE", "check_config_name", "config_file"]

CONFIG_FILE = "config.pbtxt"
CONFIGS_FOLDER = "configs"  # Triton's kModelConfigFolder: never a version directory


def check_config_name(name: str) -> str:
    """`name` if a config file can be named by it; ModelConfigError saying why not."""
    if not name:
        raise ModelConfigError("Error: empty argument for --model-config-name")
    if "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise ModelConfigError(
            f"--model-config-name {name!r}: must name a file in a model's configs/ folder "
            "(no path separators)"
        )
    return name


def config_file(model_dir: Path, config_name: str = "") -> Path:
    """The config a model is read from. A custom config is present when anything is at its
    path (a FIFO or a directory there is then refused by the read, not passed over for
    config.pbtxt); one that cannot be looked at counts as absent, as Triton logs and goes on."""
    if config_name:
        custom = model_dir / CONFIGS_FOLDER / f"{config_name}.pbtxt"
        try:
            os.stat(custom)
        except OSError:
            pass
        else:
            return custom
    return model_dir / CONFIG_FILE
