"""`convert --engine dask` on a real LocalCluster (2 single-threaded worker processes on
loopback, started once for this module): the set equals the serial one."""

from __future__ import annotations

import pytest

distributed = pytest.importorskip("distributed", reason="the [dask] extra is not installed")

from fastload.data.convert.folder import convert_folder  # noqa: E402
from fastload.data.sets.verify import verify_set  # noqa: E402


@pytest.fixture(scope="module")
def dask_scheduler():
    """The scheduler address of a LocalCluster that no client of this process holds."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_dask_gives_the_serial_set(dask_scheduler, engine_source, serial_engine_set,
                                   same_set, tmp_path):
    dst = tmp_path / "set"
    report = convert_folder(engine_source, dst, shards=4, progress=False, engine="dask",
                            engine_address=dask_scheduler)
    assert report.summary() == "stored 24 + skipped 0 = seen 24"
    same_set(dst, serial_engine_set)
    assert verify_set(dst, full=True).ok


def test_a_rerun_on_dask_keeps_every_finished_shard(dask_scheduler, engine_source, tmp_path):
    dst = tmp_path / "set"
    convert_folder(engine_source, dst, shards=4, progress=False, shard_index=1)
    report = convert_folder(engine_source, dst, shards=4, progress=False, engine="dask",
                            engine_address=dask_scheduler)
    assert report.finished_shards == [1] and report.manifest["count"] == 24


def test_dask_uploads_the_serial_set_to_s3(dask_scheduler, s3_options, download_set,
                                           engine_source, serial_engine_set, same_set,
                                           tmp_path):
    from seaweed import BUCKET

    url = f"s3://{BUCKET}/dask/full.set"
    report = convert_folder(engine_source, url, shards=4, progress=False, engine="dask",
                            engine_address=dask_scheduler, storage_options=s3_options,
                            staging=tmp_path / "staging")
    assert report.summary() == "stored 24 + skipped 0 = seen 24"
    assert list((tmp_path / "staging").iterdir()) == []  # nothing left behind
    same_set(download_set(url), serial_engine_set)
