"""``fastload`` command dispatcher.

Each subcommand is a module in this package exporting ``add_parser(subparsers)`` and
``run(args) -> int``; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand name -> module under fastload.tools.
COMMANDS: dict[str, str] = {
    "synth": "synth",
    "convert": "convert",
    "verify": "verify",
    "finetune": "finetune",
    "export": "export",
    "bench": "bench",
    "demo": "demo",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastload", description="Fast image training input for PyTorch."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMANDS.values():
        module = importlib.import_module(f"fastload.tools.{module_name}")
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
