"""`fastload bench` refuses, before any work and naming the flag, options it would not honour
with --recipe and a --workdir that is a file."""

from __future__ import annotations

import pytest

from fastload.tools.cli import main


@pytest.mark.parametrize("flag, value", [("--json", "r.json"), ("--plot", "r.png")])
def test_recipe_runs_refuse_outputs_they_would_not_write(synth_root, tmp_path, capsys, flag,
                                                         value):
    code = main(["bench", str(synth_root / "val"), "--recipe", "eval", flag,
                 str(tmp_path / value)])
    assert code == 2 and f"{flag} applies to the loader rows, not to --recipe" in \
        capsys.readouterr().err
    assert not (tmp_path / value).exists()


def test_a_workdir_that_is_a_file_is_a_usage_error_naming_it(synth_root, tmp_path, capsys):
    picture = tmp_path / "pic.jpg"
    picture.write_bytes(b"\xff\xd8\xff")
    code = main(["bench", str(synth_root / "val"), "--rows", "f", "--workdir", str(picture)])
    assert code == 2 and f"--workdir '{picture}' is a file" in capsys.readouterr().err
    assert picture.read_bytes() == b"\xff\xd8\xff"


def test_a_workdir_under_a_file_is_a_usage_error_naming_the_file(synth_root, tmp_path, capsys):
    picture = tmp_path / "pic.jpg"
    picture.write_bytes(b"\xff\xd8\xff")
    code = main(["bench", str(synth_root / "val"), "--rows", "f", "--workdir",
                 str(picture / "work")])
    assert code == 2
    assert f"'{picture}' on its path is a file, not a folder" in capsys.readouterr().err
