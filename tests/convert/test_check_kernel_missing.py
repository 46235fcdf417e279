"""Without its C kernel (a build with no compiler) the strict JPEG check gives the same
verdicts through the strict 1/8-scale decode, and says so once per process with a
``FallbackWarning`` naming the kernel, what runs instead and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from damage import scramble_scan
from PIL import Image

from fastload.data.format.jpeg_damage import strict_decode_errors

TESTS = Path(__file__).parents[1]

WITHOUT_KERNEL = """
import json, sys, warnings
sys.modules["fastload.data.format._jpegcheck"] = None  # as a build without the extension
from fastload.data.format import jpeg_damage
files = [open(p, "rb").read() for p in sys.argv[1:]]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = jpeg_damage.strict_decode_errors(files)
    again = jpeg_damage.strict_decode_errors(files)
print(json.dumps({"verdicts": [first, again],
                  "warnings": [[w.category.__name__, str(w.message)] for w in caught]}))
"""


def test_without_the_kernel_the_check_gives_the_same_verdicts_and_warns_once(tmp_path):
    good = tmp_path / "good.jpg"
    Image.radial_gradient("L").convert("RGB").resize((200, 150)).save(good, quality=90)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(scramble_scan(good.read_bytes()))
    paths = [good, bad, good]
    want = strict_decode_errors([p.read_bytes() for p in paths])
    assert want[0] is None and want[1] is not None  # the kernel's verdicts

    run = subprocess.run([sys.executable, "-c", WITHOUT_KERNEL, *map(str, paths)],
                         capture_output=True, text=True, timeout=120, cwd=TESTS, check=True)
    out = json.loads(run.stdout)
    assert out["verdicts"] == [want, want]
    ((category, message),) = out["warnings"]  # the second call says nothing
    assert category == "FallbackWarning"
    assert "fastload.data.format._jpegcheck is missing" in message
    assert "1/8 scale" in message and "fastload doctor" in message
