"""benchmarks/scale_curve.py at a tiny size: it runs, and its JSON holds every figure, sane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale_curve.py"


@pytest.mark.slow
def test_scale_curve_script_writes_every_figure(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "FASTLOAD_KEY_DIR": str(tmp_path / "key")}
    subprocess.run(
        [sys.executable, str(SCRIPT), "--records", "200", "--shards", "20", "--per-shard", "10",
         "--worlds", "8", "--max-ranks", "8", "--steady", "0", "--jpegs", "16", "--in-process",
         "--no-chart", "--workdir", str(tmp_path), "--out", str(out)],
        check=True, cwd=ROOT, env=env, timeout=300)
    result = json.loads(out.read_text())
    assert [(p["kind"], p["records"]) for p in result["points"]] == [("records", 200),
                                                                     ("shards", 200)]
    for point in result["points"]:
        loader = point["loader"]
        assert loader["records"] == 200
        assert 0 < point["open_only"]["open_s"] < 60
        assert 0 < loader["first_batch_s"] < 120
        assert loader["index_epoch_samples"] == 200
        assert 0 < loader["state_dict_bytes"] < 1 << 20
        assert {"seed", "epoch", "batches_yielded"} <= set(loader["state_dict_fields"])
        for stage in ("base", "open", "loader", "iter", "first_batch", "steady"):
            assert loader["memory"][stage]["rss"] > 0
        order = point["rank_orders"]["global/8"]
        assert order["ranks_computed"] == 8 and order["every_index_once_plus_padding"]
        assert point["verify"]["ok"] and point["verify"]["records"] == 200
    shards = result["points"][1]
    assert shards["rank_orders"]["shards/8"]["every_index_once_plus_padding"]
    assert shards["shard_opens"]["opened"] == 20 and shards["shard_opens"]["error"] is None
    assert shards["manifest_bytes"] > 0
    growth = result["summary"]["records"]["growth"]["open_s"]
    assert growth["growth"] == "n/a"  # one point: no slope
    assert not any(tmp_path.glob("fastload-scale-*"))  # the sets are deleted
