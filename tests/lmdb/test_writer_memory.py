"""A database file holds its records and LMDB's own structures, never other memory of the
process that wrote it: LMDB writes the unused room of each page it allocates as it found it
unless asked to zero it (``meminit``), and that room was the process's freed heap."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
from PIL import Image

# Frees many blocks holding a secret, of the sizes LMDB's pages take, then converts in the
# same process (a fresh one: the heap as a user's process leaves it after such work).
_CONVERT_AFTER_SECRETS = """
import sys
from fastload.data.convert.folder import convert_folder
secret = b"not-for-the-dataset-0123456789"
blocks = [secret * (size // len(secret)) for size in (4096, 4200, 8192) for _ in range(2000)]
del blocks
convert_folder(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]), check="markers",
               progress=False)
"""


def test_a_database_holds_none_of_the_writing_process_freed_memory(tmp_path):
    src = tmp_path / "src" / "only"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(300):  # small records: many pages part-filled
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(out, "JPEG")
        (src / f"{i:04d}.jpg").write_bytes(out.getvalue())
    for workers in (1, 2):
        dst = tmp_path / f"db{workers}"
        subprocess.run([sys.executable, "-c", _CONVERT_AFTER_SECRETS, str(src.parent), str(dst),
                        str(workers)], check=True)
        # 1,901-2,145 copies when the pages' room was not zeroed
        assert b"not-for-the-dataset" not in (dst / "data.mdb").read_bytes(), workers
