"""The one place fastload touches a DALI pipeline's private backend handle (``Pipeline._pipe``).

Why: :class:`~fastload.pipelines.decode.batch_decoder.BatchDecoder` drives the pipeline one iteration
per fed batch (``feed_input``, the backend's ``Run``, then ``Outputs``). DALI's public
``schedule_run``/``run`` would run ``prefetch_queue_depth`` iterations on the first call and
fail when fewer batches have been fed, so the backend calls are used directly. They are not
public API: this module was written against DALI 2.4.x and refuses another major version with
one clear error instead of failing somewhere inside a batch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TESTED_DALI", "check_dali_version", "feed_and_run", "abandon_in_child", "outputs"]

TESTED_DALI = (2, 4)  # major, minor of the DALI release this module was written for


@functools.cache
def check_dali_version(version: str | None = None) -> str:
    """Return the DALI version (``nvidia.dali.__version__`` unless ``version`` is given);
    raise ``RuntimeError`` when its major version is not the tested one."""
    if version is None:
        import nvidia.dali

        version = str(nvidia.dali.__version__)
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = -1
    if major != TESTED_DALI[0]:
        tested = ".".join(map(str, TESTED_DALI))
        raise RuntimeError(
            f"nvidia-dali {version} is installed, but fastload.pipelines drives DALI's pipeline "
            f"backend as of DALI {tested}.x; install nvidia-dali {TESTED_DALI[0]}.x "
            "(see constraints.txt) or update fastload/pipelines/dali_backend.py"
        )
    return version


def _backend(pipe: Any) -> Any:
    check_dali_version()
    backend = getattr(pipe, "_pipe", None)
    if backend is None:
        raise RuntimeError(
            f"this DALI pipeline ({type(pipe).__name__}) has no built backend (Pipeline._pipe); "
            "build it first, or update fastload/pipelines/dali_backend.py for this DALI version"
        )
    return backend


def feed_and_run(pipe: Any, names: Iterable[str], feeds: Mapping[str, Any]) -> None:
    """Feed ``feeds[name]`` to each external source ``name`` of ``pipe``, then start one iteration."""
    for name in names:
        pipe.feed_input(name, feeds[name])
    _backend(pipe).Run()


def outputs(pipe: Any) -> tuple:
    """The outputs of ``pipe``'s oldest started iteration (blocks until it is done); DALI raises
    ``RuntimeError`` when that iteration failed."""
    return _backend(pipe).Outputs()


def abandon_in_child(pipe: Any) -> None:
    """In a forked child that inherited ``pipe``: make sure nothing ever shuts it down or
    destroys its backend there. Its threads did not come along: DALI's exit hook (or the
    pipeline's finalizer at interpreter teardown) shutting it down crashed or hung the
    child's normal exit. The backend handle is detached from the pipeline (whose shutdown
    then does nothing, and which leaves DALI's list of pipelines to shut down) and kept
    forever: one reference that is never given back (the child's memory, never the
    parent's pipeline)."""
    import ctypes

    backend = getattr(pipe, "_pipe", None)
    if backend is None:
        return
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(backend))
    pipe._pipe = None
    pipe._shutdown()  # the backend detached: only takes it off DALI's list
