"""The CLI's exit status: 0 success, 1 a valid command failed on its input, 2 a wrong option;
library errors name fields and the CLI maps them to flags."""

from __future__ import annotations

import pytest


def test_cli_help_documents_the_exit_status_rule(capsys):
    from fastload.tools.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "exit status: 0 success; 1 the command ran and failed" in capsys.readouterr().out


def test_cli_exits_2_for_a_wrong_option_value_and_names_the_flag(capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    assert main(["finetune", "DATA", "--epochs", "0"]) == EXIT_USAGE
    assert "epochs should be a positive integer, but got --epochs 0" in capsys.readouterr().err


def test_cli_exits_1_when_a_valid_command_fails_on_its_input(tmp_path, capsys):
    from fastload.tools.cli import EXIT_FAILURE, main

    assert main(["finetune", str(tmp_path / "nowhere"), "--device", "cpu"]) == EXIT_FAILURE
    assert "does not exist" in capsys.readouterr().err


def test_library_errors_name_fields_and_the_cli_maps_them_to_flags():
    from fastload.tools.cli import shell_words
    from fastload.train.config import FinetuneConfig, validate_config

    with pytest.raises(ValueError) as caught:
        validate_config(FinetuneConfig(amp="x"))
    assert "but got amp='x'" in str(caught.value) and "--" not in str(caught.value)
    assert shell_words(str(caught.value), {"amp": "--amp"}).endswith("but got --amp 'x'")
    assert shell_words("pass overwrite=True", {"overwrite": "--overwrite"}) == "pass --overwrite"
