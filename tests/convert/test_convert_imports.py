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


def _jpeg_folder(root, count: int):
    """An ImageFolder of ``count`` small JPEGs in three classes."""
    for k in range(count):
        folder = root / f"class_{k % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.radial_gradient("L").convert("RGB").resize((64 + k, 48)).save(
            folder / f"{k}.jpg", quality=90)
    return root


def test_a_folder_converts_into_one_database_without_importing_numpy(tmp_path):
    _jpeg_folder(tmp_path / "src", 12)
    for check in ("decode", "markers"):
        dst = tmp_path / f"db-{check}"
        run = subprocess.run(
            [sys.executable, "-c", CONVERT_AND_LIST_MODULES, str(tmp_path / "src"), str(dst),
             check],
            capture_output=True, text=True, timeout=120, check=True)
        out = json.loads(run.stdout.splitlines()[-1])
        assert out == {"status": 0, "numpy": False}, (check, run.stderr)
        assert json.loads((dst / "fastload.json").read_text())["count"] == 12


SHARDS_AND_LIST_MODULES = """
import json, sys
from fastload.data.convert import shards
from fastload.tools.cli import main
seen = {}
complete = shards.complete_manifest
def complete_and_note(*args, **kwargs):
    seen["numpy before the manifest"] = "numpy" in sys.modules
    return complete(*args, **kwargs)
shards.complete_manifest = complete_and_note
status = main(["convert", sys.argv[1], sys.argv[2], "--shards", "3", "--no-progress",
               "--workers", "2"])
print(json.dumps({"status": status, **seen}))
"""


def test_a_sharded_conversion_imports_numpy_only_for_its_manifest(tmp_path):
    _jpeg_folder(tmp_path / "src", 9)
    run = subprocess.run(
        [sys.executable, "-c", SHARDS_AND_LIST_MODULES, str(tmp_path / "src"),
         str(tmp_path / "set")],
        capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(run.stdout.splitlines()[-1])
    assert out == {"status": 0, "numpy before the manifest": False}, run.stderr
    assert json.loads((tmp_path / "set" / "fastload-set.json").read_text())["count"] == 9
