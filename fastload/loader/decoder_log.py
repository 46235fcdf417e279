"""The JPEG decoder's own reports of corrupt data, read from stderr and turned into errors.

libjpeg-turbo (inside DALI's CPU decoder) meets scrambled entropy-coded data, decodes the
image anyway and only prints ``Corrupt JPEG data: ...`` to the process's stderr; a failed
decode also prints coloured ``[ERROR] [libjpeg_turbo_decoder] ...`` lines before DALI
raises. Detecting that damage otherwise costs a second decode: a strict simplejpeg decode,
even at 1/8 scale, is most of a full decode (the Huffman decoding dominates;
``benchmarks/test_read_checks_cost.py`` measures it beside the fence below), and Pillow
ignores the damage. So the loader listens to the decoder instead: one fence per batch.

While an epoch iterator is alive, file descriptor 2 is a pipe read by one thread: decoder
lines are kept (never shown); every other byte goes on to the original stderr at once.
:meth:`StderrWatch.fence` writes a marker through the pipe and waits until the thread has
read it, so every line a decode wrote before the caller's ``fetch()`` returned is counted.
Decoder lines printed by other code of the same process while a loader iterates are
swallowed too. The lines carry no sample name, and two iterators (two decoders) may run in
one process, so every handle gets its own copy of every line: each iterator that sees a
report traces it to its own batch by decoding it again one image at a time (where the
report came from the other decoder, it finds nothing and goes on); a report is never
claimed by one iterator and lost to the one that caused it.
Fork: a child does not inherit the watch (it starts its own if needed).
"""

from __future__ import annotations

import atexit
import os
import threading

__all__ = ["StderrWatch", "watch"]

# Lines libjpeg prints for damaged data it decodes anyway (JWRN_* of jerror.h that mean
# damage; not the harmless JFIF-revision or Adobe-transform notes).
CORRUPT_PREFIXES = (
    b"Corrupt JPEG data",
    b"Premature end of JPEG file",
    b"Invalid SOS parameters for sequential JPEG",
    b"Inconsistent progression sequence",
)
# Lines that accompany a decode DALI reports as an error itself: kept as its reason.
ERROR_PREFIXES = (
    b"\x1b[0;31m[ERROR] \x1b[0m[",
    b"[ERROR] [",
)
# Harmless notes: dropped.
NOTE_PREFIXES = (
    b"Warning: unknown JFIF revision number",
    b"Unknown Adobe color transform code",
)
NOISE_PREFIXES = ERROR_PREFIXES + NOTE_PREFIXES
_PREFIXES = CORRUPT_PREFIXES + NOISE_PREFIXES
_FENCE = b"\x00fastload-stderr-fence "
_FENCE_TIMEOUT = 5.0  # seconds; a stuck pipe must never hang the loader


class StderrWatch:
    """Owns fd 2 while active; see the module docstring. Use :func:`watch`."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._saved = os.dup(2)
        self._read_fd, self._write_fd = os.pipe()
        os.dup2(self._write_fd, 2)
        self._pipe_ino = os.fstat(self._write_fd).st_ino
        self._cond = threading.Condition()
        self._fences_sent = 0
        self._fences_seen = 0
        self._boxes: list[_Box] = []  # one per handle: each gets every line
        self.users = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._pump, name="fastload-stderr", daemon=True)
        self._thread.start()

    def fence(self, box: _Box | None = None) -> tuple[list[str], list[str]]:
        """``(corrupt-data lines, error lines)`` any decoder of the process printed since
        ``box``'s last fence (possibly for a batch still in flight), once every earlier write
        to fd 2 is read. ``box`` None only waits for that."""
        with self._cond:
            if self._stopped:
                return [], []
            self._fences_sent += 1
            number = self._fences_sent
        os.write(self._write_fd, _FENCE + b"%d\n" % number)  # outside the lock: may block
        with self._cond:
            self._cond.wait_for(lambda: self._fences_seen >= number, timeout=_FENCE_TIMEOUT)
            if box is None:
                return [], []
            reports, box.reports = box.reports, []
            errors, box.errors = box.errors, []
        return reports, errors

    def attach(self, box: _Box) -> None:
        """``box`` gets a copy of every decoder line from now on."""
        with self._cond:
            self._boxes.append(box)

    def detach(self, box: _Box) -> None:
        with self._cond:
            if box in self._boxes:
                self._boxes.remove(box)

    def reclaim(self) -> None:
        """Take fd 2 again if someone replaced it since (pytest's capture, a logging
        redirect): forward to the new target from now on."""
        try:
            if os.fstat(2).st_ino == self._pipe_ino:
                return
            saved = os.dup(2)
        except OSError:
            return
        old, self._saved = self._saved, saved
        os.dup2(self._write_fd, 2)
        os.close(old)

    def stop(self) -> None:
        """Give fd 2 back (unless someone else has replaced it since) and end the thread."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if os.fstat(2).st_ino == self._pipe_ino:
                os.dup2(self._saved, 2)
        except OSError:
            pass
        os.close(self._write_fd)
        self._thread.join(timeout=_FENCE_TIMEOUT)
        os.close(self._saved)

    def _pump(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            pending = self._lines(pending + chunk)
        if pending:
            self._forward(pending)
        os.close(self._read_fd)

    def _lines(self, data: bytes) -> bytes:
        """Handle the complete lines of ``data``; return a partial line that may still turn
        out to be a decoder line (anything else is forwarded at once, e.g. progress bars)."""
        out = []
        while data:
            end = data.find(b"\n")
            if end < 0:
                if any(p.startswith(data) or data.startswith(p) for p in _PREFIXES + (_FENCE,)):
                    break
                out.append(data)
                data = b""
                break
            line, data = data[:end + 1], data[end + 1:]
            if line.startswith(_FENCE):
                self._flush(out)
                with self._cond:
                    self._fences_seen = max(self._fences_seen, int(line[len(_FENCE):]))
                    self._cond.notify_all()
            elif line.startswith(CORRUPT_PREFIXES):
                text = line.decode("utf-8", "replace").strip()
                with self._cond:
                    for box in self._boxes:
                        box.reports.append(text)
            elif line.startswith(ERROR_PREFIXES):
                text = line.decode("utf-8", "replace").replace("\x1b[0;31m", "")
                text = text.replace("\x1b[0m", "").strip()
                with self._cond:
                    for box in self._boxes:
                        box.errors.append(text)
            elif not line.startswith(NOISE_PREFIXES):
                out.append(line)
        self._flush(out)
        return data

    def _flush(self, out: list[bytes]) -> None:
        if out:
            self._forward(b"".join(out))
            out.clear()

    def _forward(self, data: bytes) -> None:
        try:
            os.write(self._saved, data)
        except OSError:
            pass


class _Box:
    """One handle's copy of the decoder lines not yet fenced."""

    __slots__ = ("errors", "reports")

    def __init__(self) -> None:
        self.reports: list[str] = []
        self.errors: list[str] = []


_LOCK = threading.Lock()
_ACTIVE: list[StderrWatch] = []


class WatchHandle:
    """One user's share of the process's :class:`StderrWatch`; :meth:`close` is idempotent."""

    def __init__(self, shared: StderrWatch) -> None:
        self._watch: StderrWatch | None = shared
        self._box = _Box()
        shared.attach(self._box)

    def fence(self) -> tuple[list[str], list[str]]:
        """See :meth:`StderrWatch.fence`; empty once closed or in a forked child."""
        shared = self._watch
        if shared is None or shared._pid != os.getpid():
            return [], []
        return shared.fence(self._box)

    def close(self) -> None:
        """Give back this share; everything written to fd 2 so far has reached the real
        stderr when it returns (the last user also stops the watch)."""
        shared, self._watch = self._watch, None
        if shared is None or shared._pid != os.getpid():
            return
        shared.detach(self._box)
        shared.fence()  # wait until what was written so far is forwarded
        with _LOCK:
            shared.users -= 1
            if shared.users > 0:
                return
            if _ACTIVE and _ACTIVE[0] is shared:
                _ACTIVE.clear()
        shared.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def watch() -> WatchHandle:
    """A handle on the process's stderr watch, started by the first user."""
    with _LOCK:
        if _ACTIVE and _ACTIVE[0]._pid != os.getpid():
            _ACTIVE.clear()  # inherited through fork: the thread is not here
        if not _ACTIVE:
            _ACTIVE.append(StderrWatch())
        shared = _ACTIVE[0]
        shared.reclaim()
        shared.users += 1
    return WatchHandle(shared)


@atexit.register
def _stop_at_exit() -> None:
    with _LOCK:
        active = list(_ACTIVE)
        _ACTIVE.clear()
    for shared in active:
        if shared._pid == os.getpid():
            shared.stop()
