"""What a conversion loads into its process: a folder of JPEGs converts into one database
without numpy. Importing numpy costs a ``fastload convert`` about 0.08 s of its start and
starts OpenBLAS's threads beside the strict check's (benchmarks/NOTES.md C24)."""

from __future__ import annotations

import json
import subprocess
import sys

from PIL import Image

CONVERT_AND_LIST_MODULES = """
import json, sys
from fastload.tools.cli import main
status = main(["convert", sys.argv[1], sys.argv[2], "--check", sys.argv[3], "--no-progress",
               "--workers", "2"])
print(json.dumps({"status": status, "numpy": "numpy" in sys.modules}))
"""


def test_a_folder_converts_into_one_database_without_importing_numpy(tmp_path):
    for k in range(12):
        folder = tmp_path / "src" / f"class_{k % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.radial_gradient("L").convert("RGB").resize((64 + k, 48)).save(
            folder / f"{k}.jpg", quality=90)
    for check in ("decode", "markers"):
        dst = tmp_path / f"db-{check}"
        run = subprocess.run(
            [sys.executable, "-c", CONVERT_AND_LIST_MODULES, str(tmp_path / "src"), str(dst),
             check],
            capture_output=True, text=True, timeout=120, check=True)
        out = json.loads(run.stdout.splitlines()[-1])
        assert out == {"status": 0, "numpy": False}, (check, run.stderr)
        assert json.loads((dst / "fastload.json").read_text())["count"] == 12
