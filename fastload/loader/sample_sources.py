"""Sample sources: what the DataLoader reads for sample ``i`` of a dataset.

A source turns a dataset into encoded image bytes, the image's ``(height, width)``, a label
and a name for error messages (the file path or the LMDB key), without decoding anything in
Python: ``FileSource`` (an image folder's files), ``LMDBSource`` (a fastload LMDB set's
records), ``SubsetSource`` (a ``Subset`` of either). Which dataset gets which source is
``fastload.loader.datasets.make_source``'s decision.

What the dataset's own ``__getitem__`` would do, a source does too: ``len(source)`` is
``len(dataset)`` (a subclass's ``__len__`` included), :meth:`index` takes and refuses
sample indices as the dataset's indexing does, Pillow's ``Image.MAX_IMAGE_PIXELS`` is
checked at each read as ``Image.open`` checks it, and a file DALI would not decode to
Pillow's pixels (a GIF, a 16-bit PNG, ... whatever its name) is decoded by Pillow,
``.convert("RGB")`` as torchvision's loader does, and handed on losslessly.
"""

from __future__ import annotations

import io
import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fastload.loader.image_headers import check_pixel_limit, jpeg_frame, jpeg_size
from fastload.loader.read_buffers import DEFAULT_READ_BUFFER_BYTES, ReadBuffers

__all__ = ["FileSource", "LMDBSource", "SampleError", "SubsetSource", "call_set_hook"]


def call_set_hook(source: Any, hook: str) -> None:
    """Call the optional method ``hook`` of the set reader behind ``source`` (a subset's
    base included), when it has one: a sharded set's ``forget_refusals`` at a new epoch,
    a URL set's ``cancel_prefetch`` when an epoch is abandoned."""
    reader = getattr(getattr(source, "base", source), "reader", None)
    method = getattr(reader, hook, None)
    if method is not None:
        method()


class SampleError(ValueError, OSError):
    """A sample cannot be read or decoded; the message names its file path or LMDB key and
    ``names`` lists them.

    A ``ValueError``, and an ``OSError`` as Pillow's errors are (what torch's DataLoader
    raises for such a file), so code written for either catches it.
    :class:`~fastload.DataLoader` raises it with ``on_error="raise"``; with
    ``on_error="skip"`` the names go to the loader's ``skipped`` instead.

    Args:
        message: the error message (names the samples, says what failed and the fix).
        names: the file paths or LMDB keys of the samples that failed.

    Attributes:
        names (list[str]): ``names``, as a list.
    """

    def __init__(self, message: str, names: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.names = list(names)


def list_index(index: Any, count: int) -> int:
    """``index`` as a Python list of ``count`` items takes it (an int, a bool, a NumPy integer,
    an integer tensor of one element; negative counts from the end), in ``[0, count)``;
    TypeError or IndexError, as the list would raise, with the value and the fix."""
    try:
        number = operator.index(index)
    except TypeError:
        raise TypeError(f"sample index should be an integer, but the sampler gave {index!r} "
                        f"({type(index).__name__}); make the sampler or batch_sampler yield "
                        "ints, as the dataset's indexing needs") from None
    if not -count <= number < count:
        raise IndexError(f"sample index {number} from the sampler is out of range for a "
                         f"dataset of {count} samples")
    return number + count if number < 0 else number


class _Source:
    """Common part: length, labels (after ``target_transform``), the transform to translate."""

    transform: Any
    target_transform: Callable[[Any], Any] | None
    targets: np.ndarray  # integer labels (an LMDB set's: its memory-mapped int32 labels.i32)
    length: int | None = None  # len(dataset), set by make_source; None: one per target

    def __len__(self) -> int:
        return len(self.targets) if self.length is None else self.length

    def index(self, index: Any) -> int:
        """Sample ``index`` from a sampler as a plain int, checked as the dataset checks it."""
        return list_index(index, len(self.targets))

    def recycle(self, encoded: Sequence[Any]) -> None:
        """``encoded``, what :meth:`read` returned for a batch, is decoded and no longer
        referenced by the caller: a source that lends read memory may lend it again."""

    def sample_labels(self, indices: Sequence[int]) -> list[Any]:
        """Each sample's label as the dataset yields it (after ``target_transform``)."""
        targets = self.targets[np.asarray(indices, dtype=np.int64)].tolist()
        if self.target_transform is None:
            return targets
        return [self.target_transform(t) for t in targets]

    def labels(self, indices: Sequence[int]) -> Any:
        """The label batch torch's ``default_collate`` would build for these samples."""
        if self.target_transform is None:  # int64, as default_collate makes of Python ints
            return torch.from_numpy(
                self.targets[np.asarray(indices, dtype=np.int64)].astype(np.int64))
        from torch.utils.data import default_collate

        # a tuple, as torch's default_collate sees the labels of its (image, label) pairs
        return default_collate(tuple(self.sample_labels(indices)))


# 8-bit PNGs in these modes DALI decodes to exactly Pillow's convert("RGB") (measured: RGB,
# RGBA, L, P); every other format, mode or bit depth goes through Pillow (see FileSource.read).
_DALI_PNG_MODES = frozenset({"RGB", "RGBA", "L", "P"})
_PNG_BIT_DEPTH = 24  # offset of the IHDR bit depth: signature 8, length 4, type 4, w 4, h 4


class FileSource(_Source):
    """Image files on disk (a torchvision ``DatasetFolder``'s ``samples``).

    JPEGs, and 8-bit PNGs in a mode DALI decodes as Pillow does, go to DALI as they are;
    any other file Pillow reads (GIF, 16-bit PNG, TIFF, WebP, ...) is decoded here with
    Pillow, ``.convert("RGB")`` as torchvision's loader does, and passed on as an
    uncompressed PPM. Image sizes (and that choice) are parsed from the file headers on first
    read and cached per source, with the file's length and modification time: a file whose
    length or time changed since (replaced by another image) is parsed again. Each file's JPEG
    data is checked for damage (:func:`unchecked`) once per source, remembered the same way,
    so later epochs pay a ``fstat`` per file.
    """

    def __init__(self, paths: Sequence[str], targets: Sequence[int], transform: Any,
                 target_transform: Callable[[Any], Any] | None = None, *,
                 read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self.targets = np.asarray(targets, dtype=np.int64)
        self.transform = transform
        self.target_transform = target_transform
        self._sizes = np.full((len(self.paths), 2), -1, dtype=np.int32)
        # (length, st_mtime_ns) of each file as last read, as its header was last parsed (its
        # size and the Pillow choice), and as last found undamaged
        self._stamps = np.full((len(self.paths), 2), -1, dtype=np.int64)
        self._parsed = np.full((len(self.paths), 2), -1, dtype=np.int64)
        self._checked = np.full((len(self.paths), 2), -2, dtype=np.int64)
        self._pillow = np.zeros(len(self.paths), dtype=bool)  # decoded here, not by DALI
        # what files are read into, up to read_buffer_bytes kept (see loader/read_buffers)
        self._buffers = ReadBuffers(read_buffer_bytes)

    def name(self, i: int) -> str:
        """How error messages refer to sample ``i``."""
        return f"file '{self.paths[i]}'"

    def read(self, i: int) -> tuple[np.ndarray, tuple[int, int]]:
        """The encoded bytes of sample ``i`` (DALI decodes them) and its ``(height, width)``.

        Raises FileNotFoundError/OSError naming the path when the file cannot be read,
        SampleError when it is not an image Pillow or the JPEG header parser recognises, and
        Pillow's DecompressionBombError over its pixel limit (see check_pixel_limit).
        """
        path = self.paths[i]
        try:
            data, mtime_ns = _read_file(path, self._buffers.take)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"sample {i}: file '{path}' does not exist; rebuild the dataset's file list "
                "or restore the file"
            ) from None
        except OSError as err:
            raise OSError(f"sample {i}: cannot read file '{path}': {err}") from err
        self._stamps[i] = (data.size, mtime_ns)
        if self._parsed[i, 0] != data.size or self._parsed[i, 1] != mtime_ns:
            # first read, or the file was replaced (by one of another length or time)
            frame = jpeg_frame(data)
            if frame is None or frame[2] == 4:
                # not a JPEG: Pillow reads the header (and checks its limit); a CMYK or YCCK
                # JPEG: Pillow reads its inversion as the Adobe marker says, DALI's decoder
                # takes every one for Adobe's (one without the marker came out black)
                return self._through_pillow(i, data)
            self._remember(i, frame[:2], pillow=False)
        if self._pillow[i]:
            return self._through_pillow(i, data)
        size = (int(self._sizes[i, 0]), int(self._sizes[i, 1]))
        check_pixel_limit(size, f"sample {i}: {self.name(i)}")
        return data, size

    def _remember(self, i: int, size: tuple[int, int], pillow: bool) -> None:
        """The header of sample ``i`` as last read: its size, and whether Pillow decodes it."""
        self._sizes[i] = size
        self._parsed[i] = self._stamps[i]
        self._pillow[i] = pillow

    def _through_pillow(self, i: int, data: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """A file that is not a JPEG, or a CMYK/YCCK one: as it is when DALI decodes it as
        Pillow does, else Pillow's ``convert("RGB")`` of it as a PPM (exact, and DALI reads
        it)."""
        from PIL import Image

        where = f"sample {i}: {self.name(i)}"
        try:
            image = Image.open(io.BytesIO(data))  # Pillow's own pixel-limit check, as torch's
        except Image.DecompressionBombError as err:
            raise Image.DecompressionBombError(f"{where}: {err}") from None
        except Exception:  # noqa: BLE001 - any parse failure means "unreadable"
            raise SampleError(f"{where} is not a readable image (empty, truncated or unknown "
                              "format); remove or replace it", [self.name(i)]) from None
        with image:
            size = (image.height, image.width)
            as_is = (image.format == "PNG" and image.mode in _DALI_PNG_MODES
                     and data.size > _PNG_BIT_DEPTH and data[_PNG_BIT_DEPTH] == 8)
            self._remember(i, size, pillow=not as_is)
            if as_is:
                return data, size
            try:
                rgb = image.convert("RGB")
            except Exception as err:  # noqa: BLE001 - Pillow's decode errors vary by format
                raise SampleError(f"{where} cannot be decoded ({err}); remove or replace it",
                                  [self.name(i)]) from None
        header = f"P6\n{size[1]} {size[0]}\n255\n".encode()
        return np.frombuffer(header + rgb.tobytes(), dtype=np.uint8), size

    def recycle(self, encoded: Sequence[Any]) -> None:
        self._buffers.give_back(encoded)

    def unchecked(self, i: int) -> tuple[int, int] | None:
        """The stamp to pass to :meth:`mark_checked` when sample ``i`` as last read has not
        been checked for damaged JPEG data yet; None when it has."""
        stamp = (int(self._stamps[i, 0]), int(self._stamps[i, 1]))
        return None if stamp == tuple(self._checked[i]) else stamp

    def mark_checked(self, i: int, stamp: tuple[int, int]) -> None:
        self._checked[i] = stamp


class LMDBSource(_Source):
    """Records of a fastload LMDB database, read from the memory map without copying.

    Each record's CRC-32 is checked at every read (:meth:`read`). Records of a set whose
    claim that conversion decoded every JPEG strictly (``"jpeg_check": "strict"``) cannot
    be trusted here (:func:`fastload.data.sets.attest.trusted_jpeg_check`: no claim, as for
    ``check="markers"`` or an older fastload, or no attestation that verifies with this
    user's key: a set made elsewhere, edited, or read from a URL someone else wrote) are
    checked for damaged JPEG data (:meth:`unchecked`) at their first read through this
    source, and remembered; a trusted set's records need nothing more.
    """

    def __init__(self, reader: Any, transform: Any,
                 target_transform: Callable[[Any], Any] | None = None) -> None:
        from fastload.data.format.targets import as_label_array

        self.reader = reader
        self.targets = as_label_array(reader.targets)  # the mapped int32 labels: no copy
        self.transform = transform
        self.target_transform = target_transform
        # None: every record passed the strict check at a conversion made here
        self._checked = (None if _trusted(reader) else np.zeros(len(self.targets), dtype=bool))

    def name(self, i: int) -> str:
        key = self.reader.key(i)
        key = key.decode("ascii", "replace") if isinstance(key, bytes) else str(key)
        where = getattr(self.reader, "path", None)
        return f"LMDB key '{key}'" + (f" in '{where}'" if where is not None else "")

    def index(self, index: Any) -> int:
        """Sample ``index`` as a record number, checked as ``LMDBDataset`` indexing checks it."""
        from fastload.data.format.reader import record_index

        return record_index(index, len(self.targets), getattr(self.reader, "path", ""))

    def read(self, i: int) -> tuple[Any, tuple[int, int]]:
        """The record's image bytes and size; SampleError naming the key when its checksum
        or framing is wrong, or (a record not checked yet) its Datum's size is not its JPEG's
        (checked before any decoder sees the bytes), Pillow's DecompressionBombError over its
        pixel limit (see check_pixel_limit)."""
        from fastload.data.format.reader import CorruptRecord

        try:
            data, _label, size = self.reader.image_bytes(i)
        except CorruptRecord as err:
            raise SampleError(f"sample {i}: {err}", [self.name(i)]) from err
        size = (int(size[0]), int(size[1]))
        if self.unchecked(i):  # a set made elsewhere: its Datum's size is only a claim
            self._check_size(i, data, size)
        check_pixel_limit(size, f"sample {i}: {self.name(i)}")
        return data, size

    def _check_size(self, i: int, data: Any, size: tuple[int, int]) -> None:
        """SampleError naming the key where the JPEG's own header gives another size than
        the Datum (or gives none and the Datum's is not positive): the graph would crop and
        scale the image by the Datum's, and the pixel limit would be checked on it."""
        header = jpeg_size(data)
        if header == size or (header is None and min(size) > 0):
            return  # no size in the header: the decoder and the damage check judge it
        what = f"a {header[0]}x{header[1]} JPEG" if header else "no JPEG size"
        raise SampleError(
            f"sample {i}: {self.name(i)} holds {what}, but its Datum says {size[0]}x{size[1]}; "
            "run `fastload verify --full` on the set and reconvert it from its source",
            [self.name(i)])

    def unchecked(self, i: int) -> bool | None:
        """``True`` (the stamp for :meth:`mark_checked`) when record ``i`` has not been found
        free of damaged JPEG data yet; None when it has, or its set was checked at conversion.
        A record cannot change under its CRC-32, so one check is enough."""
        checked = self._checked
        return None if checked is None or checked[i] else True

    def mark_checked(self, i: int, stamp: bool) -> None:
        self._checked[i] = stamp


def _trusted(reader: Any) -> bool:
    """Whether ``reader``'s set (a database, a sharded set, either at a URL) has a strict
    JPEG check this user's key attests (once per source: a SHA-256 of its CRC-32s)."""
    from fastload.data.sets.attest import trusted_jpeg_check
    from fastload.data.sets.schema import MANIFEST_FORMAT

    meta = getattr(reader, "meta", None)
    if not isinstance(meta, dict):
        return False
    if meta.get("format") == MANIFEST_FORMAT:  # a set: its reader's meta has no shard list
        return trusted_jpeg_check(meta, shards=getattr(reader, "entries", None))
    checksums = getattr(reader, "checksums", None)
    if checksums is None and getattr(reader, "path", None):
        from fastload.data.format.reader import load_checksums

        checksums = load_checksums(reader.path, meta)  # a reader opened with checksums=False
    return trusted_jpeg_check(meta, checksums)


class SubsetSource(_Source):
    """``torch.utils.data.Subset`` of a supported dataset: sample ``i`` is ``base[indices[i]]``."""

    def __init__(self, base: _Source, indices: Sequence[int]) -> None:
        self.base = base
        self.index_map = np.asarray(indices, dtype=np.int64)
        self.targets = base.targets[self.index_map]
        self.transform = base.transform
        self.target_transform = base.target_transform

    def index(self, index: Any) -> int:
        """Sample ``index`` of the subset (a list index), its base index checked by the base."""
        i = list_index(index, len(self.index_map))
        self.base.index(int(self.index_map[i]))
        return i

    def name(self, i: int) -> str:
        return self.base.name(int(self.index_map[i]))

    def read(self, i: int) -> tuple[Any, tuple[int, int]]:
        return self.base.read(int(self.index_map[i]))

    def recycle(self, encoded: Sequence[Any]) -> None:
        self.base.recycle(encoded)

    def unchecked(self, i: int) -> Any:
        return self.base.unchecked(int(self.index_map[i]))

    def mark_checked(self, i: int, stamp: Any) -> None:
        self.base.mark_checked(int(self.index_map[i]), stamp)


def _read_file(path: str, allocate: Callable[[int], np.ndarray]) -> tuple[np.ndarray, int]:
    """A file's bytes (in a uint8 array from ``allocate(nbytes)``) and its ``st_mtime_ns``,
    from one open (so they belong together)."""
    fd = os.open(path, os.O_RDONLY)  # not inherited by children (PEP 446)
    try:
        st = os.fstat(fd)
        data = allocate(st.st_size)
        got = os.readv(fd, [data]) if st.st_size else 0
    finally:
        os.close(fd)
    return (data if got == st.st_size else data[:got]), st.st_mtime_ns
