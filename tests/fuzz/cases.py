"""The fuzz harness's cases: how one is made from a seed, and how one is run.

A case is a JSON-able dict (and, for a JPEG, its bytes) that :func:`run` executes against
the C extensions (``mods``: name -> module, the sanitizer build in the harness):

* ``{"kind": "jpeg", "m", "region", "modes", "mutations", "source"}`` with the file's
  bytes: ``decode_region`` at scale m/8 over the region (a spec resolved against the
  canvas libjpeg reads from the header: whole, a corner pixel, random, an edge strip, or
  outside / negative / near INT_MAX), once per mode. Where every mode returns, their pixels
  must be equal byte for byte (fastload's Huffman decoder, mode 2, is libjpeg-turbo's, mode
  1, and mode 0 is libjpeg-turbo's own crop); where one returns, all must. The same bytes go
  to ``_jpegcheck.check`` (the data layer's entropy-only check): None or a str, and where it
  finds the file intact libjpeg's decoder (mode 1, every row) decodes it.
* ``{"kind": "kernel", "fn", "args"}``: one call of a kernel of ``_augment``, ``_affine``
  or ``_normalize`` with arrays described by ``{"array": dtype, "shape", "seed", ...}``
  and numbers that may be NaN, inf, huge or negative.
* ``{"kind": "selftest", "do": "crash" | "hang" | "finding"}``: the harness's own check.

A call may return or raise ValueError / TypeError / OverflowError / BufferError /
MemoryError; any other exception, a sanitizer report or a hang is a finding. Only the
standard library and numpy are imported here (the sanitized worker loads nothing else).
"""

from __future__ import annotations

import random
import re
import struct

import numpy as np

ALLOWED = (ValueError, TypeError, OverflowError, BufferError, MemoryError)
MAX_PIXELS = 16_000_000  # a header may claim more: such a file is only probed, not decoded
INT_MAX = 2**31 - 1


class Finding(Exception):
    """A case broke a promise: modes that disagree, an exception of an unexpected type."""


# --------------------------------------------------------------------------- JPEG mutations

def segments(data: bytes) -> list[tuple[int, int, int]]:
    """``(marker, start, end)`` of each marker segment before the first SOS's data (start:
    the 0xFF; end: past the segment), as far as the bytes parse."""
    out = []
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            out.append((marker, i, i + 2))
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        out.append((marker, i, min(i + 2 + length, len(data))))
        if marker == 0xDA:
            break
        i += 2 + length
    return out


def _rewrite_field(rng: random.Random, data: bytearray, start: int, end: int,
                   values: list[int]) -> str:
    if end - start <= 4:
        return "none"
    at = rng.randrange(start + 4, end)
    data[at] = rng.choice(values) & 0xFF
    return f"@{at}={data[at]}"


def _mutate_segment(rng: random.Random, data: bytearray) -> str:
    segs = segments(bytes(data))
    if not segs:
        return "no segments"
    marker, start, end = rng.choice(segs)
    name = f"{marker:02X}"
    if end - start <= 4:
        return name
    body = start + 4
    choice = rng.randrange(6)
    if choice == 0:  # its length field
        new = rng.choice([0, 1, 2, 3, end - start - 3, end - start - 1, end - start + 1,
                          end - start + 64, 0xFFFF])
        data[start + 2:start + 4] = struct.pack(">H", new & 0xFFFF)
        return f"{name} length {new}"
    if marker == 0xC4 and choice <= 3 and end - body > 17:  # DHT: class/id, counts, symbols
        table = body  # the segment's first table
        where = rng.choice(["class", "count", "count", "symbol"])
        if where == "class":
            data[table] = rng.choice([0x00, 0x01, 0x10, 0x11, 0x02, 0x13, 0x04, 0x20, 0xFF])
        elif where == "count":
            data[table + 1 + rng.randrange(16)] = rng.choice([0, 1, 2, 16, 128, 255])
        else:
            at = rng.randrange(table + 17, end)
            data[at] = rng.choice([0, 11, 12, 15, 16, 17, 0xF0, 0xFF, rng.randrange(256)])
        return f"DHT {where}"
    if marker == 0xDB and choice <= 3:  # DQT: precision/id, a value
        if rng.random() < 0.5:
            data[body] = rng.choice([0x00, 0x01, 0x03, 0x04, 0x10, 0x11, 0x20, 0xFF])
            return "DQT pq/tq"
        return "DQT " + _rewrite_field(rng, data, start, end, [0, 1, 255, rng.randrange(256)])
    if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA) and choice <= 3:  # SOF
        field = rng.choice(["type", "precision", "height", "width", "components", "sampling",
                            "sampling", "quant", "id"])
        if field == "type":
            data[start + 1] = rng.choice([0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC9, 0xCA, 0xCB])
        elif field == "precision":
            data[body] = rng.choice([0, 1, 7, 9, 12, 16, 255])
        elif field in ("height", "width"):
            at = body + (1 if field == "height" else 3)
            old = struct.unpack(">H", data[at:at + 2])[0]
            new = rng.choice([0, 1, 2, 7, 9, old - 1, old + 1, old * 2, old + 8, 4000, 65535])
            data[at:at + 2] = struct.pack(">H", max(0, min(new, 0xFFFF)))
        elif field == "components" and end - body > 5:
            data[body + 5] = rng.choice([0, 1, 2, 3, 4, 5, 255])
        elif end - body > 8:
            comp = rng.randrange(max(1, (end - body - 6) // 3))
            at = body + 6 + 3 * comp + {"id": 0, "sampling": 1, "quant": 2}.get(field, 1)
            if at < end:
                data[at] = rng.choice({"sampling": [0x00, 0x11, 0x12, 0x21, 0x22, 0x41, 0x14,
                                                    0x44, 0x13, 0x31, 0x50, 0x05, 0xFF],
                                       "quant": [0, 1, 2, 3, 4, 255],
                                       "id": [0, 1, 2, 3, 4, 82, 255]}.get(field, [0]))
        return f"SOF {field}"
    if marker == 0xDA and choice <= 3:  # SOS: components, selectors, spectral selection
        field = rng.choice(["count", "selector", "tables", "ss", "se", "ahal"])
        n = data[body] if body < end else 0
        if field == "count":
            data[body] = rng.choice([0, 1, 2, 3, 4, 5])
        elif field in ("selector", "tables") and n and body + 2 * n < end:
            at = body + 1 + 2 * rng.randrange(n) + (0 if field == "selector" else 1)
            data[at] = rng.choice([0, 1, 2, 3, 4, 82, 0x01, 0x10, 0x11, 0x22, 0x33, 0x44, 0xFF])
        elif end - 3 > body:
            at = {"ss": end - 3, "se": end - 2, "ahal": end - 1}.get(field, end - 1)
            data[at] = rng.choice([0, 1, 5, 63, 64, 0x10, 0x01, 0x11, 0xFF])
        return f"SOS {field}"
    if marker == 0xDD and choice <= 3:  # DRI
        data[body:body + 2] = struct.pack(">H", rng.choice([0, 1, 2, 3, 7, 255, 65535]))
        return "DRI"
    return name + " " + _rewrite_field(rng, data, start, end,
                                       [0, 1, 0xFF, 0x80, rng.randrange(256)])


def _scan_start(data: bytes) -> int:
    segs = segments(data)
    return segs[-1][2] if segs and segs[-1][0] == 0xDA else min(len(data), 2)


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, list[str]]:
    """1 to 4 mutations: bit flips, bytes set, truncations, cuts, insertions, rewritten
    DHT/DQT/SOF/SOS/DRI fields and lengths, inserted DRI, moved or changed RST markers,
    fill bytes."""
    out = bytearray(data)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        kind = rng.choice(["flip", "flip", "byte", "truncate", "cut", "insert", "segment",
                           "segment", "segment", "dri", "rst", "marker", "fill"])
        n = len(out)
        if n < 4:
            break
        scan = _scan_start(bytes(out))
        if kind == "flip":
            for _ in range(rng.choice([1, 1, 2, 8])):
                at = rng.randrange(scan, n) if rng.random() < 0.7 and scan < n else rng.randrange(n)
                out[at] ^= 1 << rng.randrange(8)
            done.append("flip")
        elif kind == "byte":
            at = rng.randrange(n)
            out[at] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
            done.append(f"byte@{at}")
        elif kind == "truncate":
            at = rng.randrange(2, n)
            del out[at:]
            done.append(f"truncate@{at}")
        elif kind == "cut":
            at = rng.randrange(2, n)
            del out[at:at + rng.choice([1, 2, 7, 64, 1000])]
            done.append(f"cut@{at}")
        elif kind == "insert":
            at = rng.randrange(2, n)
            piece = rng.choice([b"\x00", b"\xff", b"\xff\x00", b"\xff\xff\xff",
                                bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))),
                                bytes(out[rng.randrange(n):][:rng.randrange(1, 300)])])
            out[at:at] = piece
            done.append(f"insert@{at}")
        elif kind == "segment":
            try:
                done.append(_mutate_segment(rng, out))
            except (IndexError, ValueError, struct.error):  # a field past the bytes' end
                done.append("segment past the end")
        elif kind == "dri":  # a restart interval the scan does not have, or a changed one
            interval = rng.choice([1, 2, 3, 5, 64, 65535])
            segs = segments(bytes(out))
            sos = [s for s in segs if s[0] == 0xDA]
            if sos:
                at = sos[0][1]
                out[at:at] = b"\xff\xdd\x00\x04" + struct.pack(">H", interval)
            done.append(f"dri {interval}")
        elif kind == "rst":  # an RST marker removed, renumbered or added
            positions = [m.start() for m in re.finditer(rb"\xff[\xd0-\xd7]", bytes(out[scan:]))]
            if positions and rng.random() < 0.7:
                at = scan + rng.choice(positions)
                if rng.random() < 0.5:
                    del out[at:at + 2]
                else:
                    out[at + 1] = 0xD0 + rng.randrange(8)
            elif scan < n:
                at = rng.randrange(scan, n)
                out[at:at] = bytes([0xFF, 0xD0 + rng.randrange(8)])
            done.append("rst")
        elif kind == "fill":  # fill bytes: 0xFF before a stuffed 0xFF 0x00 or a marker
            places = [m.start() for m in re.finditer(rb"\xff", bytes(out[scan:]))]
            if places:
                at = scan + rng.choice(places)
                out[at:at] = b"\xff" * rng.choice([1, 1, 2, 7])
            done.append("fill")
        else:  # a marker inside the entropy-coded data
            if scan < n:
                at = rng.randrange(scan, n)
                out[at:at] = bytes([0xFF, rng.choice([0xD9, 0xC4, 0xDA, 0xDB, 0xDD, 0xE0,
                                                      0xFE, 0xC0, 0x01, 0xD8])])
            done.append("marker")
    return bytes(out), done


# --------------------------------------------------------------------------- JPEG cases

def jpeg_case(rng: random.Random, name: str, data: bytes, valid_share: float = 0.2) -> dict:
    """A JPEG case of a corpus file: mutated (or not, ``valid_share`` of the time)."""
    mutations: list[str] = []
    if rng.random() >= valid_share:
        data, mutations = mutate(rng, data)
    m = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 8, 8]) if rng.random() > 0.02 else rng.choice(
        [0, 9, -1, INT_MAX])
    region = rng.choice(["whole", "corner", "random", "random", "random", "strip", "outside"])
    modes = [2, 1] + ([0] if rng.random() < 0.3 else [])
    return {"kind": "jpeg", "source": name, "mutations": mutations, "m": m,
            "region": region, "region_seed": rng.randrange(2**32), "modes": modes,
            "data": data}


_CANVAS = re.compile(r"the (\d+)x(\d+) canvas")


def _canvas(mod, data: bytes, m: int) -> tuple[int, int] | None:
    """The canvas (height, width) libjpeg reads from the header at scale m/8, or None where
    it raises first (the probe region is one pixel: inside any image)."""
    try:
        mod.decode_region(data, m, 0, 0, 1, 1, bytearray(0))
    except ValueError as e:
        found = _CANVAS.search(str(e))
        return (int(found.group(1)), int(found.group(2))) if found else None
    raise Finding("decode_region wrote into an empty canvas")


def _region(spec, seed: int, height: int, width: int) -> tuple[int, int, int, int]:
    if isinstance(spec, list):  # (top, left, height, width) as given (a saved regression)
        return tuple(spec)
    rng = random.Random(seed)
    if spec == "whole":
        return 0, 0, height, width
    if spec == "corner":
        return rng.choice([(0, 0), (height - 1, 0), (0, width - 1), (height - 1, width - 1)]) \
            + (1, 1)
    if spec == "strip":
        if rng.random() < 0.5:
            return rng.randrange(height), 0, 1, width
        return 0, rng.randrange(width), height, 1
    if spec == "outside":
        return rng.choice([(-1, 0, 1, 1), (0, -1, 1, 1), (0, 0, 0, 1), (0, 0, 1, -5),
                           (height, 0, 1, 1), (0, width, 1, 1), (0, 0, height + 1, width),
                           (INT_MAX, 0, 2, 1), (0, INT_MAX, 1, 2), (1, 1, INT_MAX, INT_MAX),
                           (INT_MAX, INT_MAX, INT_MAX, INT_MAX), (-INT_MAX - 1, 0, 1, 1)])
    top, left = rng.randrange(height), rng.randrange(width)
    return top, left, rng.randint(1, height - top), rng.randint(1, width - left)


def _check(mods: dict, data: bytes):
    """``_jpegcheck.check`` of the bytes: None (intact) or a reason; ``check_many`` of
    them twice gives the same, and of many (cut and whole) the same wide as two at a time."""
    try:
        verdict = mods["_jpegcheck"].check(data)
    except Exception as e:  # noqa: BLE001 - the finding is the type
        raise Finding(f"check: {type(e).__name__}: {e}") from None
    if verdict is not None and not isinstance(verdict, str):
        raise Finding(f"check returned {verdict!r}")
    try:  # two at once (the lanes), beside itself: the same verdict each
        together = mods["_jpegcheck"].check_many([data, data])
    except Exception as e:  # noqa: BLE001 - the finding is the type
        raise Finding(f"check_many: {type(e).__name__}: {e}") from None
    if [v is None for v in together] != [verdict is None] * 2:
        raise Finding(f"check_many gave {together!r} where check gave {verdict!r}")
    # many at once (each wide pass this CPU runs: AVX-512, AVX2), the lanes at different
    # places: the verdicts of two at a time
    size = len(data)
    many = [data, data[: size // 2], data[: size - 1], data] * 3
    check_many = mods["_jpegcheck"].check_many
    try:
        narrow = check_many(many, wide=False)
        if size % 5 == 0:  # the thread's caches freed now and then: built again after
            mods["_jpegcheck"].release_thread_cache()
        passes = {name: check_many(many, wide=name)
                  for name in getattr(mods["_jpegcheck"], "WIDE_PASSES", ())}
    except Exception as e:  # noqa: BLE001 - the finding is the type
        raise Finding(f"check_many of many: {type(e).__name__}: {e}") from None
    if [v is None for v in narrow[0::4]] != [verdict is None] * 3:
        raise Finding(f"check_many gave {narrow!r} two at a time where check gave {verdict!r}")
    for name, wide in passes.items():
        if [v is None for v in wide] != [v is None for v in narrow]:
            raise Finding(f"check_many gave {wide!r} by {name} and {narrow!r} two at a time")
    return verdict


def _intact_decodes(mods: dict, data: bytes, verdict) -> None:
    """Where the check found the file intact, libjpeg's own decoder decodes every row."""
    if verdict is not None:
        return
    canvas = _canvas(mods["_jpegroi"], data, 1)
    if canvas is None:
        raise Finding("check: intact, but libjpeg refuses the header")
    height, width = canvas
    if height * width * 64 > MAX_PIXELS:
        return
    try:
        mods["_jpegroi"].decode_region(data, 1, 0, 0, height, width,
                                       np.zeros((height, width, 3), np.uint8), 1)
    except ALLOWED as e:
        raise Finding(f"check: intact, but libjpeg's decoder says {e}") from None


def run_jpeg(mods: dict, case: dict) -> str:
    mod = mods["_jpegroi"]
    data, m = case["data"], case["m"]
    if "_jpegcheck" in mods:
        _intact_decodes(mods, data, _check(mods, data))
    if not 1 <= m <= 8:
        try:
            mod.decode_region(data, m, 0, 0, 1, 1, bytearray(3))
        except ALLOWED:
            return "scale refused"
        raise Finding(f"scale {m} was not refused")
    canvas = _canvas(mod, data, m)
    if canvas is None:
        return "header refused"
    height, width = canvas
    full = (height * 8 // m + 8) * (width * 8 // m + 8)
    if height * width * 3 > 3 * MAX_PIXELS or full > MAX_PIXELS or height < 1 or width < 1:
        return "too large"
    top, left, h, w = _region(case["region"], case["region_seed"], height, width)
    results = {}
    fill = np.uint8(random.Random(case["region_seed"]).randrange(256))
    for mode in case["modes"]:
        out = np.full((height, width, 3), fill, np.uint8)
        try:
            first, row = mod.decode_region(data, m, top, left, h, w, out, mode)
        except ALLOWED as e:
            results[mode] = ("error", type(e).__name__, str(e))
            continue
        except Exception as e:  # noqa: BLE001 - the finding is the type
            raise Finding(f"mode {mode}: {type(e).__name__}: {e}") from None
        if not (0 <= first <= max(left, 0) and first + row <= width and row >= 1
                and first + row >= left + w):
            raise Finding(f"mode {mode}: written columns {first}+{row} do not cover the "
                          f"region {left}+{w} of a {width}-wide canvas")
        results[mode] = ("ok", first, row, out[top:top + h, left:left + w].tobytes())
    kinds = {r[0] for r in results.values()}
    if kinds == {"ok"}:
        values = {r[3] for r in results.values()}
        if len(values) > 1:
            raise Finding(f"modes {case['modes']} decode different pixels")
        return "decoded"
    if kinds == {"error", "ok"}:
        detail = {mode: r[2] if r[0] == "error" else "ok" for mode, r in results.items()}
        raise Finding(f"modes disagree on whether the file decodes: {detail}")
    return "refused"


# --------------------------------------------------------------------------- kernel cases

_FLOATS = [float("nan"), float("inf"), -float("inf"), 1e39, -1e39, 3.4e38, 1e30, -1.0, -0.0,
           0.0, 1e-45, 0.5, 1.0, 2.0, 255.0, 1e9]
_SIZES = [-(2**63), -1, 0, 1, 2, 3, 2**31, 2**32, 2**62, 2**63 - 1, 3 * 2**61 + 1]


def _number(rng: random.Random, typical: float) -> float:
    return rng.choice(_FLOATS) if rng.random() < 0.3 else typical * rng.uniform(0, 2)


def _size(rng: random.Random, typical: int) -> int:
    return rng.choice(_SIZES) if rng.random() < 0.15 else typical


def _array(rng: random.Random, dtype: str, count: int, bad_share: float = 0.1) -> dict:
    spec = {"array": dtype, "shape": [max(0, count)], "seed": rng.randrange(2**31)}
    if rng.random() < bad_share:
        spec["shape"] = [max(0, count + rng.choice([-1, 1, -count, 7]))]
    if rng.random() < bad_share / 2:
        spec["dtype_as"] = rng.choice(["uint8", "float32", "float64", "uint16"])
    if rng.random() < bad_share / 2:
        spec["strided"] = True
    if dtype == "float32" and rng.random() < 0.2:
        spec["specials"] = True  # NaN, inf and huge values among the floats
    return spec


def kernel_case(rng: random.Random) -> dict:
    """One call of a kernel with small planes, sometimes hostile sizes or numbers."""
    fn = rng.choice(["gray", "blend", "sharpen", "mix", "truncate_u8", "mixup", "interleave",
                     "grid_sample", "affine", "hwc_to_chw", "lookup_planes"])
    h, w, c = rng.randint(1, 40), rng.randint(1, 40), rng.choice([1, 3, 3, 4])
    n = h * w
    if fn == "gray":
        args = [_array(rng, "uint8", 3 * n), _array(rng, "float32", n), rng.random() < 0.5]
    elif fn == "blend":
        mode = rng.choice([0, 1, 2, 2, 3, -1]) if rng.random() < 0.1 else rng.choice([0, 1, 2])
        r = _number(rng, 1.0)
        args = [_array(rng, "uint8", c * n), _array(rng, "uint8", c * n), r,
                1.0 - r if rng.random() < 0.8 else _number(rng, 0.5), mode,
                _number(rng, 100.0), _array(rng, "float32", n) if mode == 2 else None,
                rng.random() < 0.5]
    elif fn == "sharpen":
        r = _number(rng, 1.0)
        args = [_array(rng, "uint8", c * n), _array(rng, "uint8", c * n), _size(rng, h),
                _size(rng, w), r, 1.0 - r, rng.random() < 0.5]
    elif fn == "mix":
        args = [_array(rng, "float32", c * n), _array(rng, "uint8", c * n), _number(rng, 0.3),
                rng.random() < 0.5]
    elif fn == "truncate_u8":
        args = [_array(rng, "float32", c * n), _array(rng, "uint8", c * n)]
    elif fn == "mixup":
        args = [_array(rng, "float32", c * n), _array(rng, "float32", c * n),
                _number(rng, 0.4), _number(rng, 0.6)]
    elif fn == "interleave":
        args = [_array(rng, "uint8", c * n), _array(rng, "uint8", c * n), _size(rng, c)]
    elif fn == "grid_sample":
        oh, ow = rng.randint(1, 40), rng.randint(1, 40)
        item = rng.choice(["uint8", "float32"])
        args = [_array(rng, "uint8", c * n), _array(rng, "grid", oh * ow * 2),
                _array(rng, item, c * oh * ow), _size(rng, h), _size(rng, w),
                rng.random() < 0.5]
    elif fn == "affine":
        ow, oh = rng.randint(1, 40), rng.randint(1, 40)
        matrix = [rng.uniform(-2, 2), rng.uniform(-2, 2), rng.uniform(-50, 50),
                  rng.uniform(-2, 2), rng.uniform(-2, 2), rng.uniform(-50, 50)]
        if rng.random() < 0.3:
            matrix[rng.randrange(6)] = rng.choice(_FLOATS + [32767.9, 32768.0, -1e6, 1e300])
        if rng.random() < 0.2:
            matrix[1] = matrix[3] = 0.0  # Pillow's scale engine
        fill = [rng.choice([0, 10, 255]) if rng.random() > 0.05 else rng.choice([-1, 256])
                for _ in range(3)]
        args = [_array(rng, "uint8", h * w * 3), _size(rng, w), _size(rng, h),
                _array(rng, "uint8", oh * ow * 3), _size(rng, ow), _size(rng, oh), matrix,
                rng.choice([0, 2, 3, 3, 1, -1]), fill]
    elif fn == "hwc_to_chw":
        args = [{"array": "hwc", "shape": [h, w, 3], "seed": rng.randrange(2**31),
                 "flip_rows": rng.random() < 0.2, "zero_stride": rng.random() < 0.05},
                {"array": "float32", "shape": [3, h, w], "seed": 0,
                 "strided": rng.random() < 0.05},
                [_number(rng, 120.0) for _ in range(3)], [_number(rng, 0.02) for _ in range(3)],
                rng.random() < 0.5]
    else:  # lookup_planes
        size = rng.choice([2, 4, 8, 8, 1, 3])
        dtype = {1: "uint8", 2: "uint16", 3: "uint8", 4: "float32", 8: "float64"}[size]
        args = [_array(rng, "uint8", c * n), _array(rng, dtype, c * n),
                _array(rng, dtype, c * 256), rng.random() < 0.5]
    return {"kind": "kernel", "fn": fn, "args": args}


def _make(spec):
    if not isinstance(spec, dict):
        return spec
    rng = np.random.default_rng(spec["seed"])
    kind, shape = spec["array"], spec["shape"]
    count = int(np.prod(shape))
    if kind == "hwc":
        img = rng.integers(0, 256, (shape[0], shape[1] + 2, 3), dtype=np.uint8)[:, 1:-1]
        if spec.get("flip_rows"):
            img = img[::-1]
        if spec.get("zero_stride"):
            img = np.lib.stride_tricks.as_strided(img[:1], shape=(2**40, shape[1], 3),
                                                  strides=(0, 3, 1), writeable=False)
        return img
    if kind == "grid":
        values = rng.uniform(-1.3, 1.3, count).astype(np.float32)
    elif kind.startswith("float"):
        values = (rng.random(count) * 255).astype(kind)
    else:
        values = rng.integers(0, np.iinfo(kind).max + 1, count, dtype=kind)
    if spec.get("specials") or (kind == "grid" and rng.random() < 0.2):
        where = rng.integers(0, max(1, count), max(1, count // 10))
        if count:
            values[where] = rng.choice([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e10, -1e10],
                                       len(where))
    if "dtype_as" in spec:
        values = np.frombuffer(values.tobytes()[:len(values.tobytes()) // 8 * 8],
                               dtype=spec["dtype_as"]).copy()
    values = values.reshape(shape) if values.size == count else values
    if spec.get("strided") and values.ndim >= 1 and values.shape[0] > 1:
        values = values[::2]
    return values


def run_kernel(mods: dict, case: dict) -> str:
    fn = case["fn"]
    module = mods["_affine"] if fn == "affine" else mods["_normalize"] if fn in (
        "hwc_to_chw", "lookup_planes") else mods["_augment"]
    args = [_make(a) for a in case["args"]]
    if fn == "affine":
        args[6], args[8] = tuple(args[6]), tuple(args[8])
    try:
        getattr(module, fn)(*args)
    except ALLOWED as e:
        return f"refused: {type(e).__name__}"
    except Exception as e:  # noqa: BLE001 - the finding is the type
        raise Finding(f"{fn}: {type(e).__name__}: {e}") from None
    return "ran"


def run_selftest(case: dict) -> str:
    """What the harness must catch, on purpose (tests/pipelines/test_fuzz_harness.py): a crash
    (``"crash"``, a read of address 0), a hang (``"hang"``) or a broken promise."""
    if case["do"] == "crash":
        import ctypes

        ctypes.string_at(0)
    elif case["do"] == "hang":
        import time

        time.sleep(3600)
    raise Finding("selftest: a broken promise")


def run(mods: dict, case: dict) -> str:
    """Runs a case; returns what happened in a word; raises :class:`Finding`."""
    if case["kind"] == "selftest":
        return run_selftest(case)
    return run_jpeg(mods, case) if case["kind"] == "jpeg" else run_kernel(mods, case)
