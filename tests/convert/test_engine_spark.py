"""`convert --engine spark` on a real local SparkSession (local[2,3], loopback, this Python
on the workers; started once for this module): the set equals the serial one."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("pyspark", reason="the [spark] extra is not installed")

from fastload.data.convert.folder import convert_folder  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark_session():
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    session = (SparkSession.builder.master("local[2,3]").appName("fastload tests")
               .config("spark.ui.enabled", "false").getOrCreate())
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.mark.slow
def test_spark_gives_the_serial_set_on_the_active_session(
        spark_session, engine_source, serial_engine_set, same_set, tmp_path):
    dst = tmp_path / "set"
    report = convert_folder(engine_source, dst, shards=4, progress=False, engine="spark")
    assert report.summary() == "stored 24 + skipped 0 = seen 24"
    same_set(dst, serial_engine_set)
    from pyspark.sql import SparkSession

    assert SparkSession.getActiveSession() is spark_session  # used, not stopped
