"""``fastload`` command dispatcher, and the one exit-code rule every subcommand follows.

Each subcommand is a module in this package exporting ``add_parser(subparsers)`` and
``run(args) -> int``; this file wires them together. The library's messages name API
arguments and fields (``amp='x'``); :func:`shell_words` turns those into the flags a shell
user typed (``--amp 'x'``) before a subcommand prints them.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Mapping, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1  # the command ran on its inputs and failed (or found them bad)
EXIT_USAGE = 2  # the command line is wrong: nothing was done

EXIT_CODES_HELP = (
    "exit status: 0 success; 1 the command ran and failed (a path missing, unreadable, "
    "damaged or already there, data that does not verify, a run that stopped); 2 the "
    "command line is wrong (an unknown option, a value out of range, a missing optional "
    "extra), nothing was done"
)

# Optional modules -> the extra that installs them (pyproject.toml [project.optional-dependencies]).
EXTRAS: dict[str, str] = {
    "timm": "train", "safetensors": "train", "torchao": "train",
    "matplotlib": "bench", "psutil": "bench", "pytest_benchmark": "bench",
}

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


def shell_words(message: str, flags: Mapping[str, str]) -> str:
    """``message`` with each ``field=value`` of ``flags`` written as the shell's flag:
    ``amp='x'`` -> ``--amp 'x'``, ``overwrite=True`` -> ``--overwrite``."""
    for field_name, flag in flags.items():
        message = re.sub(rf"\b{re.escape(field_name)}=True\b", flag, message)
        message = re.sub(rf"\b{re.escape(field_name)}=(?=\S)", f"{flag} ", message)
    return message


def parser_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``{dest: '--long-flag'}`` of ``parser``'s options (positionals map to their metavar)."""
    flags = {}
    for action in parser._actions:  # argparse keeps no public list of its actions
        if action.option_strings:
            longs = [o for o in action.option_strings if o.startswith("--")]
            flags[action.dest] = (longs or action.option_strings)[0]
        elif action.dest != "command":
            flags[action.dest] = action.metavar or action.dest.upper()
    return flags


def printable(name: object) -> str:
    """``name`` (a path or text, any bytes a file system allows) as text any terminal can
    print: bytes that are not UTF-8 appear as ``\\xff`` escapes instead of crashing print()."""
    import os

    if isinstance(name, bytes | os.PathLike):
        name = os.fsdecode(name)
    text = str(name)
    try:
        raw = text.encode("utf-8", "surrogateescape")  # os.fsdecode's escapes: the bytes back
    except UnicodeEncodeError:  # another lone surrogate
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def report_error(command: str, error: BaseException, flags: Mapping[str, str] | None = None,
                 code: int = EXIT_FAILURE) -> int:
    """Print ``fastload COMMAND: error: ...`` (fields as flags) on stderr; return ``code``."""
    message = printable(shell_words(str(error), flags or {}))
    print(f"fastload {command}: error: {message}", file=sys.stderr)
    return code


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """One sentence naming the extra that provides the missing module, or None."""
    top = (error.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return (f"this command needs {top}, which the [{extra}] extra installs: "
            f"pip install 'fastload[{extra}]'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastload", description="Fast image training input for PyTorch.",
        epilog=EXIT_CODES_HELP,
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMANDS.values():
        module = importlib.import_module(f"fastload.tools.{module_name}")
        sub = module.add_parser(subparsers)
        if isinstance(sub, argparse.ArgumentParser) and sub.epilog is None:
            sub.epilog = EXIT_CODES_HELP
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; the exit status follows :data:`EXIT_CODES_HELP`
    (argparse itself exits 2 on a usage error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or EXIT_OK)
    except ModuleNotFoundError as error:
        sentence = missing_extra(error)
        if sentence is None:
            raise
        print(f"fastload {args.command}: error: {sentence}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
