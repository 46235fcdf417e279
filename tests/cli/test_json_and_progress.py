"""`--json` for convert and verify (a file, or `-` for stdout with the text on stderr),
progress for `verify --full`, and progress that suits a redirected log: plain lines, never a
tqdm redraw per `\\r` (issue 39, item 6). Real folders, real LMDB files, the real command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest


def fastload(*args: str, cwd=None) -> subprocess.CompletedProcess:
    # stdout and stderr are pipes: what a redirected log gets
    return subprocess.run([sys.executable, "-m", "fastload", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def source(synth_root, tmp_path_factory):
    """16 small JPEGs in 4 classes, and one file that is not an image."""
    src = tmp_path_factory.mktemp("json_src") / "src"
    shutil.copytree(synth_root / "val", src)
    first = sorted(p for p in src.iterdir() if p.is_dir())[0]
    (first / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg at all")
    return src


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    dst = tmp_path_factory.mktemp("json_dst") / "db"
    done = fastload("convert", source, dst, "--workers", "1", "--json", "-")
    assert done.returncode == 0, done.stderr
    return dst, done


def test_convert_json_dash_prints_only_the_report_on_stdout(converted):
    dst, done = converted
    report = json.loads(done.stdout)  # nothing else on stdout
    assert report["format"] == 1 and report["command"] == "convert"
    assert report["path"] == str(dst) and report["sharded"] is False
    assert (report["stored"], report["skipped"], report["seen"]) == (16, 1, 17)
    assert report["errors"] == 1 and report["skipped_files"][0]["path"].endswith("broken.jpg")
    assert report["kept"] + report["reencoded"] == 16 and report["seconds"] > 0
    assert report["resumed"] is False and len(report["classes"]) == 4
    assert "stored 16 + skipped 1 = seen 17" in done.stderr  # the text moved to stderr
    assert "\r" not in done.stderr  # a redirected log gets lines, not bar redraws


def test_convert_json_file_and_a_sharded_set(source, tmp_path):
    out = tmp_path / "reports" / "convert.json"
    done = fastload("convert", source, tmp_path / "set", "--workers", "1", "--shards", "2",
                    "--json", out)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout and "stored 16" in done.stdout
    report = json.loads(out.read_text())
    assert report["sharded"] is True and report["shards"] == 2
    assert report["manifest"]["count"] == 16 and report["stored"] == 16
    assert not (tmp_path / "-").exists()

    done = fastload("verify", tmp_path / "set", "--full", "--json", "-")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["command"] == "verify" and report["sharded"] is True
    assert (report["ok"], report["errors"], report["shards"]) == (True, 0, 2)
    assert report["found"] == report["decoded"] == report["expected"] == 16
    assert "verify: 16/16 records (100%)" in done.stderr and "\r" not in done.stderr


def test_verify_full_json_and_progress_lines_in_a_log(converted, tmp_path):
    dst, _ = converted
    done = fastload("verify", dst, "--full", "--json", "-")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["path"] == str(dst) and report["sharded"] is False
    assert report["found"] == report["checksums_checked"] == report["decoded"] == 16
    assert report["bad"] == [] and report["seconds"] > 0
    lines = done.stderr.splitlines()
    # a plain progress line (count, share, elapsed), then the summary; no \r redraws
    assert any(line.startswith("verify: 16/16 records (100%)") and "elapsed" in line
               for line in lines), done.stderr
    assert f"{dst}: OK: 16/16 records" in done.stderr and "\r" not in done.stderr

    # without --full: no progress line; a JSON file and a "wrote" line instead
    out = tmp_path / "verify.json"
    done = fastload("verify", dst, "--json", out)
    assert done.returncode == 0 and "verify:" not in done.stderr
    assert f"wrote {out}" in done.stdout
    assert json.loads(out.read_text())["decoded"] == 16


def test_verify_json_reports_bad_records_with_exit_status_1(converted, tmp_path):
    dst, _ = converted
    copy = tmp_path / "damaged"
    shutil.copytree(dst, copy)
    labels = copy / "labels.i32"
    data = bytearray(labels.read_bytes())
    data[0] ^= 0x01  # label of record 0 no longer matches its Datum
    labels.write_bytes(bytes(data))
    done = fastload("verify", copy, "--json", "-")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["errors"] == len(report["bad"]) >= 1
    assert {"key", "reason"} <= set(report["bad"][0])


def test_synth_progress_in_a_log_is_plain_lines(tmp_path):
    done = fastload("synth", tmp_path / "pics", "--train", "4", "--val", "2", "--classes", "2",
                    "--workers", "1", "--min-side", "48", "--max-side", "64")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    assert "synth: 6/6 img (100%)" in done.stderr
