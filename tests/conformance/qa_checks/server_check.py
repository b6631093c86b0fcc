"""test.sh's checks of a started server, as one script row of tests.conformance.triton_qa.

    python thaw_server_check.py [--ready MODEL ...] [--log FILE] [--grep TEXT ...]
                                [--absent TEXT ...] [--count TEXT N]... [--after CLIENT]

`--ready`: each model is ready (HTTP, localhost:8000), as test.sh's `run_server` succeeding
with `--load-model=MODEL` shows in Triton. `--grep` / `--absent`: the server's log (`--log`,
test.sh's SERVER_LOG, linked into the test's directory by the runner) holds / lacks each text,
as test.sh's `grep TEXT $SERVER_LOG`; `--count TEXT N`: N of its lines hold TEXT (`grep -c`).
`--after`: run test.sh's client script first (`python CLIENT`, which must exit 0), as test.sh
greps the log of the start its client ran on (through `thaw up` the model loads at its wake).
Exit status 0 when every check holds, else 1 with the first that did not on stderr. The runner
copies this file beside Triton's tests at run time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import tritonclient.http as httpclient


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready", nargs="*", default=[])
    parser.add_argument("--log", type=Path)
    parser.add_argument("--grep", nargs="*", default=[])
    parser.add_argument("--absent", nargs="*", default=[])
    parser.add_argument("--count", nargs=2, action="append", default=[])
    parser.add_argument("--after", type=Path)
    args = parser.parse_args()
    if args.after is not None:
        client = subprocess.run([sys.executable, str(args.after)], check=False)
        if client.returncode != 0:
            print(f"{args.after} exited {client.returncode}", file=sys.stderr)
            return 1
    client = httpclient.InferenceServerClient("localhost:8000")
    for model in args.ready:
        if not client.is_model_ready(model):
            print(f"model {model!r} is not ready", file=sys.stderr)
            return 1
    if args.grep or args.absent or args.count:
        time.sleep(0.5)  # lines written while the server became ready are flushed
        log = args.log.read_text(errors="replace") if args.log else ""
        for text in args.grep:
            if text not in log:
                print(f"the server's log lacks {text!r}", file=sys.stderr)
                return 1
        for text in args.absent:
            if text in log:
                print(f"the server's log holds {text!r}", file=sys.stderr)
                return 1
        for text, expected in args.count:
            lines = sum(text in line for line in log.splitlines())
            if lines != int(expected):
                print(f"{lines} lines of the server's log hold {text!r}, not {expected}",
                      file=sys.stderr)  # fmt: skip
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
