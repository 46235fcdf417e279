"""WebDataset tar shards as a conversion source, read with the standard ``tarfile`` module.

Members are grouped into samples as WebDataset groups them (``webdataset.tariterators``):
the key is the member's path up to the first dot of its base name, the rest (lower-cased)
its suffix, and consecutive members with the same key form one sample (``a/x.jpg``,
``a/x.cls`` -> key ``a/x``). Names without a dot and ``__...__`` metadata members are
skipped, as WebDataset skips them, and so are non-regular members (folders, devices)
other than symbolic and hard links: a sample whose image or label is a link member is
reported as such (the link's target is not in the member's byte range), and a link member
alone is a bad record of its own. Shards are read in the order
given (a folder's or a glob's ``*.tar`` sorted by name), members in tar order.

Each sample needs exactly one image member, one whose whole suffix is an image extension
(``jpg``, ``jpeg``, ``png``, ``webp``, ...; so ``x.seg.png`` is not x's image), and a
label: the text of its ``.cls`` member or, with ``label_field``, that field of its
``.json`` member. Labels follow :mod:`fastload.data.convert.sources.labels` (integers, ``.cls``
text or JSON, are class indices, a ``-1`` among them a bad record; a set of other labels
is one of class names).

Listing reads every member header and the small label members; the images are read at
conversion time as byte ranges of their shard (``os.preadv``), one at a time. A sample
without an image or a usable label, a shard cut short (truncated inside a member: that
sample and the rest of the shard are lost), or a file that is no tar at all is a bad
record, skipped and reported like an unreadable image file. Compressed shards
(``.tar.gz``...) are refused: members of a compressed stream have no byte range to read.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
import warnings
from array import array
from collections.abc import Generator, Iterator
from pathlib import Path

from fastload.data.convert.sources.base import (
    IMG_EXTENSIONS,
    Record,
    RecordTable,
    SourceList,
    files_digest,
)
from fastload.data.convert.sources.labels import Label, assign_labels

TAR_SUFFIXES = (".tar",)
COMPRESSED_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")
IMAGE_SUFFIXES = frozenset(ext[1:] for ext in IMG_EXTENSIONS)
_KEY_SUFFIX = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")  # webdataset's skip_meta
_MAGIC = {b"\x1f\x8b": ("gzip", "gunzip"), b"BZh": ("bzip2", "bunzip2"),
          b"\xfd7zXZ\x00": ("xz", "unxz"), b"\x28\xb5\x2f\xfd": ("zstd", "zstd -d")}
_LABEL_MEMBER_MAX = 1 << 20  # a .cls or .json member larger than 1 MiB is not a label
# Below this many bytes of shards, one process lists them: a pool costs about 0.1 s to start,
# about what listing 1,200 ImageNet-sized samples (100 MB) takes on a loaded 2-core machine.
PARALLEL_LISTING_BYTES = 1 << 30  # 1 GiB


def check_uncompressed(shard: Path) -> None:
    """Refuse a compressed shard in one sentence (its members have no byte range)."""
    with open(shard, "rb") as handle:
        head = handle.read(6)
    for magic, (name, tool) in _MAGIC.items():
        if head.startswith(magic):
            raise ValueError(
                f"shard {str(shard)!r} is {name}-compressed; fastload reads uncompressed tar "
                "shards (each image is a byte range of its shard): decompress it first, e.g. "
                f"`{tool} -k {shard.name}`")


class _Sample:
    __slots__ = ("key", "members", "links", "problem", "cut")

    def __init__(self, key: str) -> None:
        self.key = key
        self.members: dict[str, tuple[int, int, str]] = {}  # suffix -> (offset, size, name)
        self.links: dict[str, tuple[str, str]] | None = None  # suffix -> (name, why unusable)
        self.problem: str | None = None
        self.cut: tuple[str, str] | None = None  # (where, why) the shard ends after it


# One listed sample: (image member name or key, image offset, image size, label, problem).
Entry = tuple[str, int, int, Label, str | None]


def scan_shard(shard: str, label_field: str | None) -> tuple[list[Entry], str | None]:
    """The samples of one shard in tar order, and a warning about its end (or None)."""
    entries: list[Entry] = []
    with open(shard, "rb") as handle:
        groups = _group(handle)
        while True:
            try:
                sample = next(groups)
            except StopIteration as end:
                return entries, end.value
            entries += _entries(sample, handle.fileno(), label_field)


def _scan_task(task: tuple[str, str | None]) -> tuple[list[Entry], str | None]:
    return scan_shard(*task)


def _group(handle) -> Generator[_Sample, None, str | None]:
    """Group a shard's members into samples; a cut-short shard ends in a bad sample. Returns
    a warning for a shard that may have been cut between two members (or None)."""
    size = os.fstat(handle.fileno()).st_size
    try:
        tar = tarfile.open(fileobj=handle, mode="r:")
    except tarfile.ReadError as exc:
        yield _bad("@0", f"not a readable tar archive ({exc})")
        return
    current: _Sample | None = None
    while True:
        try:
            member = tar.next()
        except (tarfile.TarError, OSError) as exc:
            yield from _cut(current, f"@{tar.offset}", f"the tar is unreadable from byte "
                            f"{tar.offset} ({exc}; truncated?); the rest of the shard is lost")
            return
        if member is None:
            break
        tar.members = []  # tarfile keeps every TarInfo otherwise: memory per member
        link = member.issym() or member.islnk()
        if not (member.isreg() or link) or _META.match(member.name):
            continue
        match = _KEY_SUFFIX.match(member.name)
        if match is None:
            continue
        key, suffix = match.group(1), match.group(2).lower()
        if current is None or key != current.key:
            if current is not None:
                yield current
            current = _Sample(key)
        if link:
            if current.links is None:
                current.links = {}
            current.links.setdefault(suffix, (member.name, _link_problem(member)))
            continue
        if suffix in current.members and current.problem is None:
            current.problem = f"two members with suffix .{suffix} ({member.name!r})"
        current.members[suffix] = (member.offset_data, member.size, member.name)
        if member.offset_data + member.size > size:
            current.problem = (f"truncated: member {member.name!r} declares {member.size} "
                               f"bytes but the tar ends after "
                               f"{max(0, size - member.offset_data)}; the rest of the "
                               "shard is lost")
            yield current
            return
    tail = _cut_header(handle, tar.offset, size)
    if tail is not None:
        yield from _cut(current, f"@{tar.offset}", tail)
        return None
    if current is not None:
        yield current
    return _missing_end(handle.name, tar.offset, size)


def _entries(sample: _Sample, fd: int, label_field: str | None) -> list[Entry]:
    """``sample`` as one entry (plus one for the cut, when the shard ends after it whole)."""
    images = sorted(s for s in sample.members if s in IMAGE_SUFFIXES)
    linked = sorted(s for s in sample.links or () if s in IMAGE_SUFFIXES)
    problem = sample.problem
    if problem is None and not images:
        problem = sample.links[linked[0]][1] if linked else (
            f"no image member (a suffix among {', '.join(sorted(IMAGE_SUFFIXES))}); "
            f"members: {', '.join(n for *_, n in sample.members.values()) or 'none'}")
    elif problem is None and len(images) > 1:
        problem = f"several image members ({', '.join('.' + s for s in images)})"
    offset, size, name = (sample.members[images[0]] if images else
                          (0, 0, sample.links[linked[0]][0] if linked else sample.key))
    label: Label = None
    if problem is None:
        label, problem = _read_label(fd, sample, label_field)
    if sample.cut is None:
        return [(name, offset, size, label, problem)]
    if problem is not None:  # it lost members to the cut
        return [(name, offset, size, None, f"{sample.cut[1]} (this sample: {problem})")]
    return [(name, offset, size, label, None), (sample.cut[0], 0, 0, None, sample.cut[1])]


def _read_label(fd: int, sample: _Sample, label_field: str | None) -> tuple[Label, str | None]:
    suffix = "json" if label_field is not None else "cls"
    if suffix not in sample.members and sample.links and suffix in sample.links:
        return None, sample.links[suffix][1]
    if suffix not in sample.members:
        return None, (f"no .{suffix} member to read the label from" +
                      (f" (label_field={label_field!r})" if label_field else ""))
    offset, size, name = sample.members[suffix]
    if size > _LABEL_MEMBER_MAX:
        return None, f"label member {name!r} is {size} bytes, too large for a label"
    raw = os.pread(fd, size, offset)
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None, f"label member {name!r} is not UTF-8 text"
    if suffix == "cls":
        return (text, None) if text else (None, f"label member {name!r} is empty")
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"{name!r} is not JSON ({exc})"
    if not isinstance(value, dict) or label_field not in value:
        return None, f"{name!r} has no field {label_field!r} (label_field)"
    label = value[label_field]
    if isinstance(label, bool) or not isinstance(label, int | str) or label == "":
        return None, (f"field {label_field!r} of {name!r} is {label!r}; expected an integer "
                      "class index or a class name")
    return label, None


class TarRecords(RecordTable):
    """The samples of WebDataset tar shards: per sample its shard, image byte range and label.

    Shards are listed by ``workers`` processes when there are several holding at least
    ``PARALLEL_LISTING_BYTES`` (the header parsing of ``tarfile``, 25-80 us a member, is
    the cost); the order is the shards' whatever ``workers``.
    """

    def __init__(self, shards: list[Path], root: Path, label_field: str | None,
                 workers: int = 1) -> None:
        self.shards = shards
        self.root = root
        self.label_field = label_field
        self._shard = array("i")
        self._offset = array("q")
        self._size = array("q")
        self._names: list[str] = []  # image member name, or the key of a sample without one
        self._problems: dict[int, str] = {}
        for shard in shards:
            check_uncompressed(shard)
        values: list[Label] = []
        for k, (entries, warning) in enumerate(_scan_all(shards, label_field, workers)):
            if warning is not None:
                warnings.warn(warning, UserWarning, stacklevel=4)
            for name, offset, size, label, problem in entries:
                if problem is not None:
                    self._problems[len(self._names)] = problem
                self._shard.append(k)
                self._offset.append(offset)
                self._size.append(size)
                self._names.append(name)
                values.append(label if problem is None else None)
        self.classes, labels, problems = assign_labels(values)
        self._problems.update(problems)
        self._labels = array("i", labels)
        super().__init__(len(self._names))

    # ----- reading ------------------------------------------------------------------------

    def _name(self, index: int) -> str:
        return f"{self.shards[self._shard[index]]}:{self._names[index]}"

    def _label(self, index: int) -> int:
        return self._labels[index]

    def _read(self, start: int, stop: int) -> Iterator[Record]:
        for index in range(start, stop):
            name = self._name(index)
            problem = self._problems.get(index)
            if problem is not None:
                yield Record(name, -1, problem=problem)
            else:
                yield Record(name, self._labels[index], str(self.shards[self._shard[index]]),
                             span=(self._offset[index], self._size[index]))

    def fingerprint(self) -> tuple[str, int]:
        digest = files_digest("webdataset", self.classes, self.shards, self.root)
        for index in range(len(self._names)):
            digest.update(f"{self._shard[index]}\0{self._names[index]}\0{self._offset[index]}\0"
                          f"{self._labels[index]}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest(), sum(self._size)


def _scan_all(shards: list[Path], label_field: str | None, workers: int) -> Iterator:
    tasks = [(str(shard), label_field) for shard in shards]
    if workers <= 1 or len(shards) <= 1 or \
            sum(os.path.getsize(s) for s in shards) < PARALLEL_LISTING_BYTES:
        yield from map(_scan_task, tasks)
        return
    from fastload.utils.process import default_context

    with default_context().Pool(min(workers, len(shards))) as pool:
        yield from pool.imap(_scan_task, tasks)  # in order


def _link_problem(member: tarfile.TarInfo) -> str:
    """Why the link member ``member`` gives a sample nothing (one phrase naming it)."""
    kind, fix = (("a symlink", "--dereference") if member.issym()
                 else ("a hard link", "--hard-dereference"))
    return (f"{member.name!r} is {kind} member (to {member.linkname!r}), not stored: its "
            "target's bytes are not in the shard at that member; write the shard with the "
            f"files themselves (GNU tar {fix})")


def _bad(key: str, problem: str) -> _Sample:
    sample = _Sample(key)
    sample.problem = problem
    return sample


def _cut(current: _Sample | None, where: str, why: str) -> Iterator[_Sample]:
    """The shard ends at ``where``: the open sample (which may have lost members) carries
    the cut, or with none open the cut is a bad record of its own."""
    if current is None:
        yield _bad(where, why)
    else:
        current.cut = (where, why)
        yield current


def _cut_header(handle, offset: int, size: int) -> str | None:
    """Why the bytes after a shard's last member are not a tar's end: a member header cut
    short (or None)."""
    handle.seek(offset)
    tail = handle.read(512)
    if len(tail) < 512 and tail.strip(b"\0"):
        return (f"truncated: a member header at byte {offset} is cut short (the tar ends "
                f"after {size - offset} of its 512 bytes); the rest of the shard is lost")
    return None


def _missing_end(name: str, offset: int, size: int) -> str | None:
    """A warning for a shard that ends without the two zero blocks every tar writer adds:
    it may have been cut at a member boundary (no sample can be named as lost)."""
    if size - offset >= 1024:
        return None
    return (f"tar shard {name!r} ends without the end-of-archive blocks (at byte {size}); "
            "it may have been cut short between two members, whose later samples would be "
            "missing")


def list_tar_shards(shards: list[Path], root: Path, label_field: str | None = None,
                    workers: int = 1) -> SourceList:
    """The samples of WebDataset ``shards`` (uncompressed tars) as a :class:`SourceList`."""
    table = TarRecords(shards, root, label_field, workers)
    if len(table) == 0:
        raise ValueError(
            f"the tar shards under {str(root)!r} ({_preview(shards)}) hold no samples; a "
            "WebDataset shard holds members like key.jpg and key.cls")
    options = {"label_field": label_field} if label_field is not None else {}
    return SourceList(root=root, kind="webdataset", classes=table.classes, samples=table,
                      options=options)


def _preview(paths: list[Path]) -> str:
    names = ", ".join(p.name for p in paths[:3])
    return names + (f", ... ({len(paths)} files)" if len(paths) > 3 else "")
