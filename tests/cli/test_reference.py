"""The site's command-line reference page is the one the code generates (each --help)."""

from __future__ import annotations

from pathlib import Path

from fastload.tools.reference import PAGE, reference

ROOT = Path(__file__).resolve().parents[2]


def test_cli_reference_page_matches_every_commands_help():
    page = ROOT / PAGE
    assert page.read_text(encoding="utf-8") == reference(), (
        f"{PAGE} is stale: run `.venv/bin/python -m fastload.tools.reference --write {PAGE}`")


def test_reference_covers_every_command():
    from fastload.tools.cli import COMMANDS

    text = reference()
    for command in COMMANDS:
        assert f"## `fastload {command}`" in text
        assert f"usage: fastload {command}" in text


def test_the_site_lists_the_reference_pages():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "reference/cli.md" in config and "reference/api.md" in config
