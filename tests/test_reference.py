"""The README's API reference is the one the code generates (docstrings and --help)."""

from __future__ import annotations

from pathlib import Path

from fastload.tools.reference import readme_block, reference, replace_block

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_reference_matches_the_docstrings_and_help():
    assert readme_block(README.read_text(encoding="utf-8")) == reference(), (
        "README.md's API reference is stale: run "
        "`.venv/bin/python -m fastload.tools.reference --write README.md`")


def test_reference_covers_the_public_classes_and_every_command():
    from fastload.tools.cli import COMMANDS

    text = reference()
    for name in ("fastload.DataLoader", "fastload.LMDBDataset", "fastload.StallMeter"):
        assert f"### `{name}`" in text
    for command in COMMANDS:
        assert f"#### `fastload {command}`" in text


def test_replacing_the_block_keeps_the_text_around_it():
    from fastload.tools.reference import END, START

    text = f"intro\n{START}\nold\n{END}\noutro\n"
    assert replace_block(text, "new\n") == f"intro\n{START}\nnew\n{END}\noutro\n"
