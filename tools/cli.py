"""``fastload`` command dispatcher, and the one exit-code rule every subcommand follows.

Each subcommand is a module in this package exporting ``add_parser(subparsers)`` and
``run(args) -> int``; this file wires them together. The library's messages name API
arguments and fields (``amp='x'``); :func:`shell_words` turns those into the flags a shell
user typed (``--amp 'x'``) before a subcommand prints them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1  # the command ran on its inputs and failed (or found them bad)
EXIT_USAGE = 2  # the command line is wrong: nothing was done

EXIT_CODES_HELP = (
    "exit status: 0 success; 1 the command ran and failed (a path missing, unreadable, "
    "damaged or already there, data that does not verify, a run that stopped); 2 the "
    "command line is wrong (an unknown option, a value out of range, a missing optional "
    "extra), nothing was done; 130 interrupted by Ctrl-C"
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
    "doctor": "doctor",
}

# The distribution to `pip install` (the import name is fastload): fastload.utils.machine's.
DISTRIBUTION = "fastload-dali"

# Subcommand -> [(extras beyond the core install, the part that needs them; None: the whole
# command)]; build_parser appends one sentence per pair to the subcommand's --help.
COMMAND_EXTRAS: dict[str, list[tuple[str, str | None]]] = {
    "synth": [("photos", "--photos")],
    "convert": [("sources", "Reading parquet files or WebDataset brace globs"),
                ("datasets", "Reading a Hugging Face save_to_disk folder"),
                ("remote", "A URL as SRC or DST"), ("ray", "--engine ray"),
                ("dask", "--engine dask"), ("spark", "--engine spark")],
    "verify": [("remote", "A set at a URL")],
    "finetune": [("train", None)],
    "export": [("train", None)],
    "bench": [("bench", None)],
    "demo": [("train,bench,photos", None)],
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


def at_least(least: int) -> Callable[[str], int]:
    """argparse ``type``: an integer >= ``least``, refused at parse time (exit 2) otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"should be an integer, but got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"should be {least} or more, but got {value}")
        return value

    return parse


def output_file(text: str) -> str:
    """argparse ``type`` of the JSON report a command writes at its end (``-``: stdout):
    refused at once where it cannot be one (a folder, a path through a file, an existing file
    that is not such a report), not after the work."""
    from fastload.utils.checks import is_json_report

    return checked_output(text, is_json_report, "a JSON report")


def checked_output(text: str, replaces: Callable[[str], bool], what: str) -> str:
    """``text`` (``-`` passes) where :func:`fastload.utils.checks.check_output_file` takes it
    as a file of the kind ``what`` (``replaces``: what an existing file must be), else
    argparse's error."""
    from fastload.utils.checks import check_output_file

    if text != "-":
        try:
            check_output_file("FILE", text, replaces=replaces, what=what)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).replace("FILE=", "")) from None
    return text


JSON_REPORT_FORMAT = 1  # the version of convert's and verify's --json reports


def write_json_report(command: str, values: Mapping[str, object], target: str) -> str | None:
    """``--json TARGET`` of ``command``: ``{"format", "command", **values}`` as indented
    JSON on stdout when TARGET is ``-`` (returns None), else written to the file TARGET
    (returns its path, for the ``wrote ...`` line)."""
    import json
    import os

    text = json.dumps({"format": JSON_REPORT_FORMAT, "command": command, **values},
                      indent=2, default=str) + "\n"
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    folder = os.path.dirname(target)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(text)
    return target


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """One sentence naming the extra that provides the missing module, or None."""
    top = (error.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return (f"this command needs {top}, which the [{extra}] extra installs: "
            f"pip install '{DISTRIBUTION}[{extra}]'")


def needs_extra(extra: str, what: str | None = None) -> str:
    """The sentence a subcommand's --help ends with: the extras it (or ``what``) needs."""
    noun = "extras" if "," in extra else "extra"
    return (f"{what or 'This command'} needs the [{extra}] {noun}: "
            f"pip install '{DISTRIBUTION}[{extra}]'.")


def _version() -> str:
    """``pip --version``'s form: what runs, from where, on which Python."""
    import os
    import platform

    import fastload

    return (f"fastload {fastload.__version__} ({DISTRIBUTION}) from "
            f"{os.path.dirname(fastload.__file__)} (python {platform.python_version()})")


class _VersionAction(argparse.Action):
    """``--version``: :func:`_version` on one line (argparse's own action wraps it)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print fastload's version, where it runs from, and exit"):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())
        parser.exit()


def set_verbosity(level: int) -> None:
    """-q / -v: the ``fastload`` logger's level (-1 errors only, 1 debug) and one stderr
    handler; 0 leaves logging as the caller set it (silent by default: fastload's NullHandler)."""
    import logging

    if level == 0:
        return
    logger = logging.getLogger("fastload")
    logger.setLevel(logging.ERROR if level < 0 else logging.DEBUG)
    if not any(getattr(h, "_fastload_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._fastload_cli = True  # type: ignore[attr-defined]  (set once per process)
        logger.addHandler(handler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastload", description="Fast image training input for PyTorch.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action=_VersionAction)
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_const", const=1, default=0,
                           help="log fastload's decisions (plan, cache, download, retry) on "
                                "stderr, down to debug records")
    verbosity.add_argument("-q", "--quiet", action="store_true",
                           help="log only errors (progress and results still print)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, module_name in COMMANDS.items():
        module = importlib.import_module(f"fastload.tools.{module_name}")
        sub = module.add_parser(subparsers)
        if isinstance(sub, argparse.ArgumentParser):
            if command in COMMAND_EXTRAS:
                sentences = " ".join(needs_extra(*pair) for pair in COMMAND_EXTRAS[command])
                sub.description = f"{sub.description or ''} {sentences}".strip()
            if sub.epilog is None:
                sub.epilog = EXIT_CODES_HELP
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand; the exit status follows :data:`EXIT_CODES_HELP`
    (argparse itself exits 2 on a usage error). Ctrl-C ends the process here with status
    130, one line on stderr and no process left (:mod:`fastload.tools.interrupt`)."""
    from fastload.tools.interrupt import EXIT_INTERRUPTED, ctrl_c_ends, end_interrupted

    command = None
    with ctrl_c_ends(lambda: command) as pressed:
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            command = args.command
            set_verbosity(-1 if args.quiet else args.verbose)
            code = _run(args)
        except KeyboardInterrupt:
            end_interrupted(command)
        except BrokenPipeError:
            return _reader_gone()
        except BaseException:
            if pressed():  # the interrupt turned into another error on its way up
                end_interrupted(command)
            raise
        if code == EXIT_INTERRUPTED:  # the command caught Ctrl-C itself and said so (convert)
            end_interrupted(command, say=False)
        if pressed():  # a KeyboardInterrupt something caught, and the command went on
            end_interrupted(command)
        return code


def _reader_gone() -> int:
    """Stdout's reader went away (``fastload ... | head``): end quietly with status 1, as a
    filter does, stdout pointed at /dev/null so that Python's last flush raises no second
    error (the recipe of Python's ``signal`` documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_FAILURE


def _run(args: argparse.Namespace) -> int:
    """The subcommand's exit status; a missing optional extra is a usage error naming it.
    Its warnings print as ``fastload COMMAND: warning: ...`` (not Python's file and line)."""
    import warnings

    def say(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"fastload {args.command}: warning: {printable(message)}",
              file=file or sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = say
            return int(args.run(args) or EXIT_OK)
    except ModuleNotFoundError as error:
        sentence = missing_extra(error)
        if sentence is None:
            raise
        print(f"fastload {args.command}: error: {sentence}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
