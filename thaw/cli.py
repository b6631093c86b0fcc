"""Dispatch `thaw <command>` to the package that owns the command, importing it lazily.

Each package keeps its own argparse definition (`register(subparsers)` + `run(args)`), so
`thaw serve --help` does not import the activator and `thaw up` does not import torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> module that defines `register(subparsers)` and whose parser sets `func`.
_COMMANDS: dict[str, str] = {
    "serve": "runtime.process.cli",
    "up": "activator.process.cli",
    "status": "activator.process.status_cli",
    "snapshot": "snapshotter.cli",
    "prefetch": "activator.process.prefetch_cli",
}

_DESCRIPTION = """\
Thaw: scale-to-zero, Triton-compatible inference serving.

  thaw serve REPO        one model server over a Triton model repository (like tritonserver)
  thaw up REPO           the whole platform on this machine: activator, warm pool, snapshot cache
  thaw status            a table of every model behind a running `thaw up`
  thaw snapshot ...      build, push, pull, list, verify and garbage-collect model images
  thaw prefetch REPO     keep hot models' images in a node-local cache (Kubernetes DaemonSet)
"""


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thaw", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [command] if command in _COMMANDS else list(_COMMANDS)
    for name in names:
        module = importlib.import_module(_COMMANDS[name])
        module.register(sub)
    return parser


def _innermost(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` chose: `thaw snapshot ls`'s for `snapshot ls`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _innermost(chosen, args)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else None
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse reports a subcommand's unknown flags as the top-level parser's
        # ("usage: thaw [-h] COMMAND ..."); say it as the command whose flags they are.
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
