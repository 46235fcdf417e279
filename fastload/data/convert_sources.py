"""What ``fastload convert`` reads: the ordered list of ``(path, label)`` from a folder or CSV.

Two kinds of source:

* **ImageFolder tree** ``SRC/<class>/**/<file>``: classes are the sorted sub-folder names
  and files are ordered exactly as torchvision's ``ImageFolder`` orders them (classes
  sorted, then ``os.walk`` of each class folder with directories and file names sorted,
  symlinks followed, only ImageFolder's extensions, case-insensitive). So record ``i`` of
  the database is sample ``i`` of ``ImageFolder(SRC)`` whenever no file was skipped.
* **CSV file** of ``path,label`` rows (an optional first row ``path,label`` is a header).
  Relative paths are relative to the CSV file's folder. A CSV is a list of files its author
  names, so paths may leave that folder (``..`` or absolute), but never silently: rows whose
  path resolves outside the CSV's folder are reported in one ``UserWarning`` (their count
  and the first line). The file is UTF-8 (a BOM is allowed). If every label is a non-negative
  integer, labels are used as given and ``classes`` is ``["0", "1", ..., str(max)]``;
  otherwise labels are class names, ``classes`` is their sorted set (as ImageFolder sorts
  folder names) and each label maps to its position in it. Rows keep the CSV's order.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

# torchvision.datasets.folder.IMG_EXTENSIONS, repeated here so conversion never imports torch.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class SourceList:
    """The ordered samples of a conversion source."""

    root: Path
    kind: str  # "folder" or "csv"
    classes: list[str]
    samples: list[tuple[str, int]]  # (absolute path, label) in record order

    def fingerprint(self) -> tuple[str, int]:
        """``(SHA-256 over every relative path, label, size and mtime in order, total bytes)``.

        Resuming a partial conversion requires the same fingerprint, so a source that
        changed since the partial was written is refused instead of mixed in.
        """
        total = 0
        prefix = os.path.join(str(self.root), "")
        digest = hashlib.sha256()
        digest.update(f"{self.kind}\n{len(self.classes)}\n".encode())
        for name in self.classes:
            digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
        for path, label in self.samples:
            try:
                st = os.stat(path)
                size, mtime = st.st_size, st.st_mtime_ns
                total += size
            except OSError:
                size, mtime = -1, -1
            rel = path[len(prefix):] if path.startswith(prefix) else os.path.relpath(path, self.root)
            digest.update(f"{rel}\0{label}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest(), total


def _is_image_name(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def scan_image_folder(root: Path) -> SourceList:
    """List an ImageFolder tree in torchvision ``ImageFolder`` order."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(
            f"no class folders found in {str(root)!r}; an ImageFolder source needs "
            "SRC/<class name>/<image files>"
        )
    samples: list[tuple[str, int]] = []
    empty = []
    for label, name in enumerate(classes):
        class_dir = os.path.join(root, name)
        before = len(samples)
        for dirpath, _, filenames in sorted(os.walk(class_dir, followlinks=True)):
            for filename in sorted(filenames):
                if _is_image_name(filename):
                    samples.append((os.path.join(dirpath, filename), label))
        if len(samples) == before:
            empty.append(name)
    if empty and samples:  # as torchvision's ImageFolder refuses it
        raise FileNotFoundError(
            f"class folder(s) {', '.join(repr(os.path.join(root, n)) for n in empty)} hold no "
            f"image files ({', '.join(IMG_EXTENSIONS)}), so ImageFolder would refuse {str(root)!r}; "
            "add images or remove the empty folders"
        )
    if not samples:
        raise FileNotFoundError(
            f"no image files found under {str(root)!r} (looked for {', '.join(IMG_EXTENSIONS)} "
            "inside the class folders); point SRC at a folder of class folders holding images"
        )
    return SourceList(root=root, kind="folder", classes=classes, samples=samples)


def read_csv_list(csv_path: Path) -> SourceList:
    """Read a ``path,label`` CSV (see the module docstring for the label rule)."""
    base = csv_path.parent
    rows: list[tuple[str, str]] = []
    outside: list[tuple[int, str]] = []
    raw = csv_path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{str(csv_path)!r} line {line} is not UTF-8 (byte {raw[exc.start]:#04x} at offset "
            f"{exc.start}); save the CSV as UTF-8"
        ) from None
    for line_no, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise ValueError(
                f"{str(csv_path)!r} line {line_no} has {len(row)} columns; "
                "each row must be `path,label`"
            )
        path, label = row[0].strip(), row[1].strip()
        if line_no == 1 and (path.lower(), label.lower()) == ("path", "label"):
            continue
        if not path or not label:
            raise ValueError(f"{str(csv_path)!r} line {line_no} has an empty path or label")
        resolved = os.path.normpath(os.path.join(base, path))
        if os.path.commonpath([resolved, str(base)]) != str(base):
            outside.append((line_no, path))
        rows.append((path, label))
    if not rows:
        raise ValueError(f"{str(csv_path)!r} lists no images; add rows of `path,label`")
    if outside:
        warnings.warn(
            f"{str(csv_path)!r}: {len(outside)} row(s) name files outside the CSV's folder "
            f"{str(base)!r}, the first on line {outside[0][0]} ({outside[0][1]!r}); they are "
            "converted as listed", UserWarning, stacklevel=3)
    labels = [label for _, label in rows]
    if all(label.isdigit() for label in labels):
        indices = [int(label) for label in labels]
        classes = [str(i) for i in range(max(indices) + 1)]
    else:
        classes = sorted(set(labels))
        class_to_idx = {name: i for i, name in enumerate(classes)}
        indices = [class_to_idx[label] for label in labels]
    samples = [
        (os.path.normpath(os.path.join(base, path)), label)
        for (path, _), label in zip(rows, indices, strict=True)
    ]
    return SourceList(root=base, kind="csv", classes=classes, samples=samples)


def list_source(src: str | os.PathLike) -> SourceList:
    """The samples of ``src``: an ImageFolder tree (a directory) or a ``.csv`` file."""
    path = Path(os.path.abspath(src))
    if path.is_dir():
        return scan_image_folder(path)
    if path.is_file():
        if path.suffix.lower() != ".csv":
            raise ValueError(
                f"source {str(path)!r} is a file but not a .csv; pass an ImageFolder "
                "directory or a CSV of `path,label` rows"
            )
        return read_csv_list(path)
    raise FileNotFoundError(
        f"source {str(path)!r} does not exist; pass an ImageFolder directory or a CSV of "
        "`path,label` rows"
    )
