"""Print uv's options for the package sources pip is configured with, one per line.

`make install` installs with uv (several times faster than pip: it unpacks wheels in
parallel), but uv does not read pip's configuration files or PIP_* variables. A machine
that points pip at a local mirror (index, extra indexes, find-links, a global constraint)
must give uv the same sources, or uv goes to pypi.org for gigabytes of wheels.
Run with the interpreter whose pip configuration counts; prints nothing without one.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's option -> uv's; the values of the list options are separated by whitespace.
_OPTIONS = {
    "index-url": "--default-index",
    "extra-index-url": "--index",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_config() -> dict[str, list[str]]:
    """Option -> values from `pip config list`, the environment's PIP_* included."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True, text=True, check=False,
    ).stdout
    options: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        option = key.rsplit(".", 1)[-1]
        if option in _OPTIONS:
            options.setdefault(option, []).extend(
                v for word in shlex.split(value) for v in word.split())
    return options


def main() -> None:
    for option, values in pip_config().items():
        for value in dict.fromkeys(values):
            print(f"{_OPTIONS[option]}={value}")


if __name__ == "__main__":
    main()
