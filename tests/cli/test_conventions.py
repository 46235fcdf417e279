"""What pip, torch and timm users expect of a command line: --version, `python -m fastload`,
-q/-v on a silent-by-default `fastload` logger, `--json -` on stdout, and each --help naming
the extra its command needs (by the distribution's name, fastload-dali)."""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]


def test_version_has_one_source_that_pyproject_reads():
    import tomllib
    from setuptools.config.expand import read_attr

    import fastload

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "fastload.__version__"
    assert read_attr(attr, {"": str(ROOT)}, str(ROOT)) == fastload.__version__
    assert project["project"]["name"] == "fastload-dali"


def test_version_flag_prints_the_version_and_the_distribution(capsys):
    import fastload
    from fastload.tools.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fastload {fastload.__version__} (fastload-dali) from ")


def test_python_dash_m_fastload_runs_the_command_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fastload", "--version"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fastload ")
    done = subprocess.run([sys.executable, "-m", "fastload", "doctor", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernels"]


def test_the_fastload_logger_is_silent_by_default():
    code = ("import logging, fastload; logging.getLogger('fastload.loader').warning('w'); "
            "print(any(isinstance(h, logging.NullHandler) "
            "for h in logging.getLogger('fastload').handlers))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True" and done.stderr == ""


@pytest.fixture
def fastload_logger():
    logger = logging.getLogger("fastload")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_verbose_logs_debug_records_on_stderr(fastload_logger, capsys):
    from fastload.tools.cli import build_parser, set_verbosity

    args = build_parser().parse_args(["-v", "doctor"])
    assert args.verbose == 1 and not args.quiet
    set_verbosity(1)
    set_verbosity(1)  # once per process: no second handler
    assert fastload_logger.level == logging.DEBUG
    assert sum(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.NullHandler)
               for h in fastload_logger.handlers) == 1
    logging.getLogger("fastload.loader.plan").debug("plan: decode on cpu")
    assert "DEBUG fastload.loader.plan: plan: decode on cpu" in capsys.readouterr().err


def test_quiet_keeps_only_errors_and_excludes_verbose(fastload_logger, capsys):
    from fastload.tools.cli import build_parser, set_verbosity

    assert build_parser().parse_args(["-q", "doctor"]).quiet
    set_verbosity(-1)
    assert fastload_logger.level == logging.ERROR
    logging.getLogger("fastload.data").warning("a warning")
    logging.getLogger("fastload.data").error("an error")
    err = capsys.readouterr().err
    assert "an error" in err and "a warning" not in err
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["-q", "-v", "doctor"])
    assert done.value.code == 2


def _help(command: str, monkeypatch, capsys) -> str:
    from fastload.tools.cli import main

    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens: one line per paragraph
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command, extra", [
    ("finetune", "train"), ("export", "train"), ("bench", "bench"), ("synth", "photos"),
    ("convert", "sources"), ("convert", "datasets"), ("convert", "remote"),
    ("verify", "remote"), ("demo", "train,bench,photos"),
])
def test_each_help_names_the_extra_its_command_needs(command, extra, monkeypatch, capsys):
    assert f"pip install 'fastload-dali[{extra}]'" in _help(command, monkeypatch, capsys)


def test_a_missing_module_names_the_extra_by_the_distribution_name():
    from fastload.tools.cli import missing_extra

    sentence = missing_extra(ModuleNotFoundError("No module named 'timm'", name="timm"))
    assert sentence == ("this command needs timm, which the [train] extra installs: "
                        "pip install 'fastload-dali[train]'")


@dataclasses.dataclass
class _Report:
    rows: list
    config: dict


def test_bench_json_dash_writes_the_json_on_stdout_and_the_table_on_stderr(
        tmp_path, monkeypatch, capsys):
    import fastload.bench.harness as harness
    from fastload.tools.cli import main

    (tmp_path / "data").mkdir()
    monkeypatch.setattr(harness, "run_bench", lambda config, log: _Report([], {"seed": 0}))
    monkeypatch.setattr(harness, "format_table", lambda report: "THE TABLE")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", str(tmp_path / "data"), "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["config"] == {"seed": 0}
    assert "THE TABLE" in err and not (tmp_path / "-").exists()
    assert main(["bench", str(tmp_path / "data"), "--json", "out.json"]) == 0
    assert "THE TABLE" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["rows"] == []
