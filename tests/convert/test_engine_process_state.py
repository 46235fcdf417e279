"""An engine fastload starts for a conversion (a local Spark session, Ray, a Dask cluster)
leaves the caller's process as it found it: signal handlers, environment, ``sys.path``,
hooks, ``faulthandler``, loggers and child processes. Each engine runs in a fresh Python
(the engine imported first: what its import does is the engine's own); Spark converts twice,
the second time launching a JVM again after the first was ended."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from fastload.utils.process_state import process_state_restored

_SCRIPT = textwrap.dedent("""
    import faulthandler, importlib, logging, os, signal, sys, threading
    engine, module, src, dst, runs = sys.argv[1:]
    importlib.import_module(module)  # the engine's import-time effects are its own
    from fastload.data.convert.folder import convert_folder

    def children():
        pids = set()
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if pid.isdigit() and int(fields[1]) == os.getpid() and fields[0] != "Z":
                with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    line = cmd.read().replace(b"\\0", b" ").decode()
                if "resource_tracker" not in line:  # multiprocessing's, kept by design
                    pids.add(line[:80])
        return sorted(pids)

    def state():
        return {
            "signals": {int(s): repr(signal.getsignal(s)) for s in
                        (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)},
            "environ": dict(os.environ), "path": list(sys.path),
            "hooks": [repr(getattr(sys, h)) for h in ("excepthook", "breakpointhook")]
                     + [repr(threading.excepthook)],
            "faulthandler": faulthandler.is_enabled(),
            "user_logger": list(logging.getLogger(module.split(".")[0]).handlers),
            "children": children(),
        }

    logging.getLogger(module.split(".")[0]).addHandler(logging.NullHandler())
    before = state()
    for run in range(int(runs)):  # a second: the engine starts again after being stopped
        report = convert_folder(src, f"{dst}-{run}", shards=2, progress=False, engine=engine)
        assert report.summary() == "stored 24 + skipped 0 = seen 24", report.summary()
        after = state()
        changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        assert not changed, changed
    print("unchanged")
""")


@pytest.mark.slow
@pytest.mark.parametrize("engine, module", [("spark", "pyspark.sql"), ("ray", "ray"),
                                            ("dask", "distributed")])
def test_an_engine_fastload_starts_leaves_the_process_as_it_found_it(
        engine, module, engine_source, tmp_path):
    pytest.importorskip(module, reason=f"the [{engine}] extra is not installed")
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, engine, module, str(engine_source),
         str(tmp_path / "set"), "2" if engine == "spark" else "1"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert result.returncode == 0 and "unchanged" in result.stdout, result.stderr[-3000:]


def test_process_state_restored_puts_back_what_was_changed_inside():
    logger = logging.getLogger("fastload.tests.process_state")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    term, hook, path = signal.getsignal(signal.SIGTERM), sys.excepthook, list(sys.path)
    thread_hook = threading.excepthook
    faults = faulthandler.is_enabled()
    os.environ.pop("FASTLOAD_TEST_ADDED", None)
    with pytest.raises(RuntimeError, match="inside"), process_state_restored():
        os.environ["FASTLOAD_TEST_ADDED"] = "1"
        sys.path.insert(0, "/nowhere")
        signal.signal(signal.SIGTERM, lambda *_: None)
        sys.excepthook = threading.excepthook = lambda *_: None
        faulthandler.enable()
        logger.handlers.clear()
        logger.setLevel(logging.ERROR)
        logger.propagate = False
        raise RuntimeError("inside")
    assert "FASTLOAD_TEST_ADDED" not in os.environ and sys.path == path
    assert signal.getsignal(signal.SIGTERM) is term and sys.excepthook is hook
    assert threading.excepthook is thread_hook
    assert faulthandler.is_enabled() == faults
    assert logger.handlers == [handler] and logger.level == logging.NOTSET and logger.propagate
