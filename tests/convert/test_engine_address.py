"""An engine address where no cluster answers is said at once, naming it, before the engine
starts (Ray retried a refused address for ever, Spark's JVM for over a minute, Dask for 30 s,
with no word of fastload's), and the destination is left as it was; an address without an
engine is a usage error naming both."""

from __future__ import annotations

import socket
import time

import pytest

from fastload.data.convert.engines.reach import host_ports
from fastload.tools.cli import main as cli


def _refused_address() -> str:
    """host:port on this machine where nothing listens (a port just let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_the_host_and_port_of_an_address_are_read_where_the_engine_names_them():
    assert host_ports("10.0.0.1:6379", ("ray",)) == [("10.0.0.1", 6379)]
    assert host_ports("ray://head:10001", ("ray",)) == [("head", 10001)]
    assert host_ports("spark://a:7077,b:7078", ("spark",)) == [("a", 7077), ("b", 7078)]
    assert host_ports("tcp://10.0.0.2:8786", ("tcp", "tls")) == [("10.0.0.2", 8786)]
    for resolved_by_the_engine in ("auto", "local", "local[4]", "yarn", "k8s://https://x:443"):
        assert host_ports(resolved_by_the_engine, ("ray", "spark")) == []


@pytest.mark.parametrize("engine, scheme", [("ray", ""), ("spark", "spark://"),
                                            ("dask", "tcp://")])
def test_an_address_where_no_cluster_answers_fails_at_once_naming_it(synth_root, tmp_path,
                                                                    capsys, engine, scheme):
    pytest.importorskip({"ray": "ray", "spark": "pyspark", "dask": "distributed"}[engine])
    address = scheme + _refused_address()
    started = time.monotonic()
    code = cli(["convert", str(synth_root / "val"), str(tmp_path / "set"), "--shards", "2",
                "--engine", engine, "--engine-address", address, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 30
    assert f"cluster answers at --engine-address '{address}'" in err
    assert "Connection refused" in err and "Traceback" not in err


def test_an_address_without_an_engine_is_a_usage_error_naming_both(synth_root, tmp_path, capsys):
    code = cli(["convert", str(synth_root / "val"), str(tmp_path / "set"), "--shards", "2",
                "--engine-address", "head:6379", "--no-progress"])
    assert code == 2
    assert ("--engine-address 'head:6379' applies with an engine (--engine 'ray', 'dask' or "
            "'spark'); pass one too" in capsys.readouterr().err)


@pytest.mark.parametrize("existed", [False, True])
def test_a_refused_engine_start_leaves_the_destination_as_it_found_it(synth_root, tmp_path,
                                                                       existed):
    pytest.importorskip("ray")
    dst = tmp_path / "set"
    if existed:
        dst.mkdir()
    code = cli(["convert", str(synth_root / "val"), str(dst), "--shards", "2",
                "--engine", "ray", "--engine-address", _refused_address(), "--no-progress"])
    assert code == 1
    assert dst.exists() == existed
    if existed:
        assert list(dst.iterdir()) == []
