"""The CLI's exit status: 0 success, 1 a valid command failed on its input, 2 a wrong option;
library errors name fields and the CLI maps them to flags."""

from __future__ import annotations

import subprocess
import sys

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


@pytest.mark.parametrize("flags, message", [
    (["--checkpoint-every", "-1"], "checkpoint_every should be an integer >= 0 (0: only at epoch "
                                   "ends), but got --checkpoint-every -1"),
    (["--warmup-steps", "-5"], "warmup_steps should be an integer >= 0, but got --warmup-steps -5"),
    (["--warmup-epochs", "-1"], "warmup_epochs should be a finite number >= 0, but got "
                                "--warmup-epochs -1.0"),
    (["--lr", "-1"], "lr should be a finite number > 0, but got --lr -1.0"),
    (["--lr", "nan"], "lr should be a finite number > 0, but got --lr nan"),
    (["--max-skips", "0"], "max_skips should be a positive integer, but got --max-skips 0"),
    (["--device", "bogus"], "device should be None, 'cpu', 'cuda' or 'cuda:N', but got "
                            "--device 'bogus'"),
])
def test_finetune_refuses_a_number_out_of_range_before_any_work(tmp_path, capsys, flags, message):
    from fastload.tools.cli import EXIT_USAGE, main

    assert main(["finetune", str(tmp_path / "nowhere"), *flags]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_finetune_refuses_a_cuda_device_where_torch_has_none(tmp_path, capsys, monkeypatch):
    import torch

    from fastload.tools.cli import EXIT_USAGE, main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without
    assert main(["finetune", str(tmp_path / "nowhere"), "--device", "cuda:0"]) == EXIT_USAGE
    assert "--device 'cuda:0' needs CUDA, but torch.cuda.is_available() is False; use " \
           "--device 'cpu'" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--checkpoint", "--log"])
def test_finetune_refuses_an_output_file_that_is_a_folder_before_training(tmp_path, capsys, flag):
    from fastload.tools.cli import EXIT_USAGE, main

    folder = tmp_path / "runs"
    folder.mkdir()
    assert main(["finetune", str(tmp_path / "nowhere"), flag, str(folder)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"should be a file path, but {flag.removeprefix('--')}=" not in err
    assert f"is a folder; pass a file in it, such as '{folder}" in err
    assert flag in err or "--log-file" in err


def test_finetune_refuses_a_checkpoint_path_holding_a_file_of_another_kind(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    notes = tmp_path / "notes.txt"
    notes.write_text("mine", encoding="utf-8")
    assert main(["finetune", str(tmp_path / "nowhere"), "--checkpoint", str(notes)]) == EXIT_USAGE
    assert (f"--checkpoint '{notes}' is an existing file that is not a torch checkpoint, and "
            "writing would replace it" in capsys.readouterr().err)
    assert notes.read_text(encoding="utf-8") == "mine"


def test_export_writes_over_a_torch_file_but_not_over_a_file_of_another_kind(tmp_path):
    import torch

    from fastload.utils.checks import check_output_file, is_torch_file

    notes, saved = tmp_path / "notes.txt", tmp_path / "int8.pt"
    notes.write_text("mine", encoding="utf-8")
    torch.save({"w": torch.ones(1)}, saved)
    check_output_file("output", saved, replaces=is_torch_file, what="a torch file")
    with pytest.raises(ValueError, match=r"output='.*notes.txt' is an existing file that is "
                                         r"not a torch file"):
        check_output_file("output", notes, replaces=is_torch_file, what="a torch file")
    assert notes.read_text(encoding="utf-8") == "mine"


def test_finetune_names_resume_and_weights_when_they_are_folders(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    folder = tmp_path / "runs"
    folder.mkdir()
    assert main(["finetune", str(tmp_path / "nowhere"), "--resume", str(folder)]) == EXIT_USAGE
    assert (f"--resume '{folder}' is a folder; pass the checkpoint file in it, such as "
            f"'{folder / 'run.pt'}'" in capsys.readouterr().err)


def test_weights_that_are_a_folder_are_named_as_a_folder(tmp_path):
    from fastload.train.model import create_model, load_weights

    model = create_model("vit_tiny_patch16_224", num_classes=2, img_size=32)
    with pytest.raises(IsADirectoryError, match=r"weights='.*' is a folder; pass a local "
                                                r"weight file in it"):
        load_weights(model, tmp_path)


def test_export_refuses_to_write_over_the_checkpoint_it_reads(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    checkpoint = tmp_path / "run.pt"
    checkpoint.write_bytes(b"a checkpoint's bytes")
    assert main(["export", str(checkpoint), "--quantize", "dynamic", "--output",
                 str(checkpoint)]) == EXIT_USAGE
    assert "is the checkpoint being exported" in capsys.readouterr().err
    assert checkpoint.read_bytes() == b"a checkpoint's bytes"
    assert main(["export", str(checkpoint), "--quantize", "dynamic",
                 "--latency-batches", "0"]) == EXIT_USAGE
    assert ("latency_batches should be positive batch sizes, but got --latency-batches [0]"
            in capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]


@pytest.mark.parametrize("command", ["convert", "verify"])
def test_json_report_to_a_folder_is_a_usage_error_before_any_work(tmp_path, capsys, command):
    from fastload.tools.cli import EXIT_USAGE, main

    args = [str(tmp_path / "src"), str(tmp_path / "dst")] if command == "convert" else [
        str(tmp_path / "db")]
    with pytest.raises(SystemExit) as exit_:
        main([command, *args, "--json", str(tmp_path)])
    assert exit_.value.code == EXIT_USAGE
    assert f"'{tmp_path}' is a folder" in capsys.readouterr().err
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--shard-size", "inf", "shard_size_mb should be a positive finite number of megabytes"),
    ("--workers", "30000", "workers should be at most 1024 (a thread or process each; this "
                           "machine has "),
])
def test_convert_refuses_an_option_out_of_range_before_any_work(tmp_path, capsys, flag, value,
                                                                message):
    from fastload.tools.cli import EXIT_USAGE, main

    (tmp_path / "src" / "a").mkdir(parents=True)
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), flag, value]) == \
        EXIT_USAGE
    field = message.split()[0]
    assert message in capsys.readouterr().err.replace(flag, field)
    assert not (tmp_path / "dst").exists()


def test_convert_refuses_an_empty_destination_instead_of_the_current_folder(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    (tmp_path / "src" / "a").mkdir(parents=True)
    assert main(["convert", str(tmp_path / "src"), ""]) == EXIT_USAGE
    assert "DST is empty; pass the folder to write the database into" in capsys.readouterr().err


def test_verify_refuses_a_negative_sample_as_a_usage_error(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    assert main(["verify", str(tmp_path), "--sample", "-1"]) == EXIT_USAGE
    assert "sample should be a non-negative integer, but got --sample -1" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["convert", "verify"])
def test_json_report_onto_a_file_that_is_not_a_report_is_refused_and_kept(tmp_path, capsys,
                                                                          command):
    from fastload.tools.cli import EXIT_USAGE, main

    args = [str(tmp_path / "src"), str(tmp_path / "dst")] if command == "convert" else [
        str(tmp_path / "db")]
    source = tmp_path / "list.csv"
    source.write_text("path,label\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        main([command, *args, "--json", str(source)])
    assert exit_.value.code == EXIT_USAGE
    assert (f"'{source}' is an existing file that is not a JSON report, and writing would "
            "replace it; pass a new path" in capsys.readouterr().err)
    assert source.read_text(encoding="utf-8") == "path,label\n"


def test_bench_refuses_a_plot_or_json_path_holding_a_file_of_another_kind(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    notes = tmp_path / "notes.txt"
    notes.write_text("mine", encoding="utf-8")
    for flag, what in (("--plot", "a PNG chart"), ("--json", "a JSON report")):
        with pytest.raises(SystemExit) as exit_:
            main(["bench", str(tmp_path), flag, str(notes)])
        assert exit_.value.code == EXIT_USAGE
        assert f"'{notes}' is an existing file that is not {what}" in capsys.readouterr().err
    assert notes.read_text(encoding="utf-8") == "mine"


def test_convert_and_synth_name_a_file_on_the_path_they_would_make(tmp_path, capsys):
    from fastload.tools.cli import EXIT_FAILURE, main

    (tmp_path / "src" / "a").mkdir(parents=True)
    blocking = tmp_path / "notes.txt"
    blocking.write_text("mine")
    assert main(["convert", str(tmp_path / "src"), str(blocking / "db")]) == EXIT_FAILURE
    assert (f"destination '{blocking / 'db'}' cannot be made: '{blocking}' on its path is a "
            "file, not a folder" in capsys.readouterr().err)
    assert main(["synth", str(blocking / "data"), "--train", "2", "--val", "0",
                 "--classes", "1"]) == EXIT_FAILURE
    assert f"OUT '{blocking / 'data'}' cannot be made: '{blocking}'" in capsys.readouterr().err
    assert blocking.read_text() == "mine"


def test_convert_refuses_an_empty_source_instead_of_the_current_folder(tmp_path, capsys):
    from fastload.tools.cli import EXIT_USAGE, main

    assert main(["convert", "", str(tmp_path / "dst")]) == EXIT_USAGE
    assert "SRC is empty; pass the folder or list of images" in capsys.readouterr().err
    assert not (tmp_path / "dst").exists()


def test_output_read_by_a_reader_that_goes_away_ends_quietly_with_1(tmp_path):
    # `fastload doctor | head -1`: the pipe's reader closes before the report is written
    done = subprocess.Popen([sys.executable, "-m", "fastload.tools.cli", "doctor"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    done.stdout.close()
    err = done.stderr.read().decode()
    done.stderr.close()
    assert done.wait(timeout=120) == 1
    assert err == ""
