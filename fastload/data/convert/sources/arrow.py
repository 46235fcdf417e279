"""Image and label columns of Arrow tables: what parquet files and ``datasets`` folders share.

The image column is a struct of ``{"bytes": binary, "path": string}`` (the ``datasets``
``Image`` feature, the layout of the Hub's image datasets) or plain binary. A row whose
bytes are null has no image: a bad record (skipped and reported), as is a null label.
Class names come from a ``ClassLabel`` feature: ``datasets``' own features, or the
``huggingface`` JSON that ``datasets`` writes into a parquet schema's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from fastload.data.convert.sources.labels import Label

BATCH_ROWS = 64  # rows of the image column read at once: bounded memory, few calls


def check_columns(schema, image_column: str, label_column: str, where: str) -> None:
    """Raise ``ValueError`` unless ``schema`` has a usable image and label column."""
    import pyarrow as pa

    names = schema.names
    for option, column in (("image_column", image_column), ("label_column", label_column)):
        if column not in names:
            raise ValueError(f"{where} has no column {column!r} ({option}); its columns are "
                             f"{', '.join(map(repr, names))}: pass {option}=<name>")
    kind = schema.field(image_column).type
    if pa.types.is_struct(kind):
        if kind.get_field_index("bytes") < 0 or not _is_binary(kind.field("bytes").type):
            raise ValueError(f"column {image_column!r} of {where} is {kind}; an image column "
                             "is a struct with a binary 'bytes' field, or binary")
    elif not _is_binary(kind):
        raise ValueError(f"column {image_column!r} of {where} is {kind}; an image column is a "
                         "struct of {bytes, path} (the datasets Image feature) or binary "
                         "(pass image_column=<name>)")
    label = schema.field(label_column).type
    if pa.types.is_dictionary(label):
        label = label.value_type
    if not (pa.types.is_integer(label) or pa.types.is_string(label)
            or pa.types.is_large_string(label)):
        raise ValueError(f"column {label_column!r} of {where} is {label}; a label column "
                         "holds integers or class names (pass label_column=<name>)")


def _is_binary(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def label_values(column) -> list[Label]:
    """A label column (Array or ChunkedArray) as Python ints/strings, ``None`` for nulls."""
    return column.to_pylist()


def hf_class_names(metadata: dict | None, label_column: str) -> list[str] | None:
    """``ClassLabel`` names of ``label_column`` from a schema's ``huggingface`` metadata."""
    raw = (metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        features = json.loads(raw)["info"]["features"]
    except (ValueError, KeyError, TypeError):
        return None
    feature = features.get(label_column) if isinstance(features, dict) else None
    if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
        names = feature.get("names")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
    return None


def image_cells(column) -> Iterator[tuple[memoryview | None, str | None]]:
    """``(image bytes, None)`` per row of an image column (Array or ChunkedArray), or
    ``(None, the row's own path or None)`` where its bytes are null; the bytes are views of
    the column's buffers, not copies."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    for chunk in chunks:
        if pa.types.is_struct(chunk.type):
            fields = chunk.flatten()  # applies the struct's own nulls to its fields
            data = fields[chunk.type.get_field_index("bytes")]
            at = chunk.type.get_field_index("path")
            paths = fields[at] if at >= 0 else None
        else:
            data, paths = chunk, None
        for i in range(len(chunk)):
            cell = data[i]
            if cell.is_valid:
                yield memoryview(cell.as_buffer()), None
            else:
                yield None, (paths[i].as_py() if paths is not None else None)


def null_image(image_column: str, path: str | None) -> str:
    """The reason reported for a row whose image bytes are null."""
    named = f" (its path is {path!r})" if path else ""
    return f"no image: the {image_column!r} bytes of this row are null{named}"


def column_options(image_column: str | None, label_column: str | None) -> dict:
    """The column options that differ from the defaults (part of a conversion's identity)."""
    options = {}
    if image_column not in (None, "image"):
        options["image_column"] = image_column
    if label_column not in (None, "label"):
        options["label_column"] = label_column
    return options
