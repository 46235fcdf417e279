"""A CSV or JSONL list is streamed from its file (fastload.data.convert.sources.filelist): read back
from any record through the checkpoints, fingerprinted as the rows held in memory were,
errors naming the line wherever it is. The memory figure is benchmarks/test_listing_memory."""

from __future__ import annotations

import json
import os

import pytest

from fastload.data.convert.source_list import list_source
from fastload.data.convert.sources.base import files_fingerprint
from fastload.data.convert.sources.filelist import CHECKPOINT_EVERY

ROWS = 2 * CHECKPOINT_EVERY + 300  # three checkpoints


def expected_rows(folder) -> list[tuple[str, int]]:
    return [(os.path.join(str(folder), f"d{i % 7}", f"{i:05d}.jpg"), i % 5) for i in range(ROWS)]


@pytest.fixture(scope="module")
def long_csv(tmp_path_factory):
    """``ROWS`` rows with a header, blank lines, a BOM, quoted fields and a CRLF or two."""
    folder = tmp_path_factory.mktemp("long_csv")
    lines = ["\ufeffpath,label"]
    for i in range(ROWS):
        path = f"d{i % 7}/{i:05d}.jpg"
        lines.append(f'"{path}",{i % 5}' if i % 97 == 0 else f"{path},{i % 5}")
        if i % 500 == 0:
            lines.append("")
    text = "".join(line + ("\r\n" if k % 300 == 0 else "\n") for k, line in enumerate(lines))
    (folder / "list.csv").write_bytes(text.encode("utf-8"))
    return folder / "list.csv"


def test_rows_of_a_long_csv_read_back_from_any_record(long_csv):
    samples = list_source(long_csv).samples
    rows = expected_rows(long_csv.parent)
    assert len(samples) == ROWS and list(samples) == rows
    for i in (0, CHECKPOINT_EVERY - 1, CHECKPOINT_EVERY, 2 * CHECKPOINT_EVERY + 7, ROWS - 1):
        assert samples[i] == rows[i]
    view = samples[CHECKPOINT_EVERY - 3:CHECKPOINT_EVERY + 40]
    assert list(view) == rows[CHECKPOINT_EVERY - 3:CHECKPOINT_EVERY + 40]
    assert [r.path for r in view.records(5)] == [p for p, _ in rows[CHECKPOINT_EVERY + 2:
                                                                    CHECKPOINT_EVERY + 40]]


def test_a_streamed_listing_fingerprints_as_the_same_rows_held_in_memory(long_csv):
    source = list_source(long_csv)
    held = files_fingerprint("csv", source.classes, long_csv.parent, expected_rows(long_csv.parent))
    assert source.fingerprint() == held


def test_a_bad_row_far_into_a_csv_is_named_by_its_line(tmp_path):
    lines = ["path,label"] + [f"a{i}.jpg,{i % 3}" for i in range(ROWS)]
    lines[ROWS - 5] = "x.jpg,1,extra"
    (tmp_path / "list.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"list.csv' line {ROWS - 4} has 3 columns"):
        list_source(tmp_path / "list.csv")


def test_a_csv_row_the_csv_module_cannot_read_is_one_sentence_naming_the_line(tmp_path):
    long_field = "x" * 200_000  # over the csv module's field size limit
    (tmp_path / "list.csv").write_text(f"a.jpg,0\nb.jpg,1\n{long_field}.jpg,2\n")
    with pytest.raises(ValueError, match="list.csv' line 3 is not a readable CSV row"):
        list_source(tmp_path / "list.csv")


def test_a_negative_label_far_into_a_jsonl_list_is_a_bad_record_named_by_its_line(tmp_path):
    with open(tmp_path / "list.jsonl", "w") as out:
        for i in range(ROWS):
            out.write(json.dumps({"path": f"a{i}.jpg", "label": -1 if i == ROWS - 2 else 1}) + "\n")
    records = list(list_source(tmp_path / "list.jsonl").samples.records(ROWS - 3))
    assert [r.label for r in records] == [1, -1, 1]
    assert f"list.jsonl line {ROWS - 1}: label -1 is negative" in records[1].problem


def test_rows_of_a_long_jsonl_list_read_back_from_any_record(tmp_path):
    rows = expected_rows(tmp_path)
    with open(tmp_path / "list.jsonl", "w") as out:
        for i, (path, label) in enumerate(rows):
            out.write(json.dumps({"path": os.path.relpath(path, tmp_path), "label": label}) + "\n")
            if i % 700 == 0:
                out.write("\n")
    samples = list_source(tmp_path / "list.jsonl").samples
    assert list(samples) == rows and samples[ROWS - 1] == rows[-1]
    assert list(samples[2 * CHECKPOINT_EVERY + 1:]) == rows[2 * CHECKPOINT_EVERY + 1:]
