"""File names that are not UTF-8 are printed, escaped, in the CLI's messages instead of
crashing it after the work is done."""

from __future__ import annotations

import os
import subprocess
import sys

from PIL import Image

from fastload.tools.cli import printable


def test_a_skipped_file_with_a_non_utf8_name_is_listed_escaped_in_the_summary(tmp_path):
    folder = os.path.join(os.fsencode(tmp_path), b"src", b"cls")
    os.makedirs(folder)
    with open(os.path.join(folder, b"bad\xff.jpg"), "wb") as handle:
        handle.write(b"not an image")
    Image.new("RGB", (8, 8)).save(os.path.join(os.fsdecode(folder), "good.jpg"))
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # strict: a raw surrogate cannot print
    done = subprocess.run([sys.executable, "-m", "fastload.tools.cli", "convert",
                           str(tmp_path / "src"), str(tmp_path / "db"), "--workers", "1",
                           "--no-progress"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stored 1 + skipped 1 = seen 2" in done.stdout
    assert "bad\\xff.jpg: " in done.stdout


def test_printable_escapes_undecodable_bytes_and_keeps_unicode():
    assert printable(os.fsdecode(b"caf\xc3\xa9-\xff")) == "café-\\xff"
    assert printable(b"a\xfeb") == "a\\xfeb"
    assert printable("lone \ud800 surrogate") == "lone \\ud800 surrogate"
