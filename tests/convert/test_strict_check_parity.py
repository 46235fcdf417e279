"""The entropy-only JPEG check gives the strict decode's verdicts (issue 41).

``strict_decode_error`` (convert's ``check="decode"``, the loader's first-read check,
``verify``) asks the C check (``fastload.data.format._jpegcheck``) first and the strict
1/8-scale decode (``decoded_error``, simplejpeg) only where the C check does not find the
file intact. Over every damaged JPEG the tests and the fuzz corpus make (scrambled scans,
truncations, bit flips, fuzz mutations of markers, tables, restart markers and fill bytes,
the fuzz regressions) and the valid corpus, the verdicts of both are compared, message for
message, and the C check's "intact" must be the strict decode's: none let through.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fastload.data.format import jpeg_damage
from fastload.data.format.jpeg_damage import decoded_error, strict_decode_error
from fastload.data.format.jpeg_damage import jpeg_damage as damage

_jpegcheck = pytest.importorskip("fastload.data.format._jpegcheck")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fuzz"))
sys.path.insert(0, str(HERE.parent))
import cases  # noqa: E402
import corpus  # noqa: E402
from damage import scramble_scan  # noqa: E402

# the layouts the C check decodes itself: every valid file of them must be found intact
# there (a fallback to the strict decode would cost its time, not a wrong verdict)
_OWN = ("baseline", "optimised", "restart", "grey-1", "grey-8", "grey-13", "grey-16",
        "grey-48", "grey-75", "grey-130", "grey-240", "grey-500", "grey-restart", "quality",
        "sj-411", "sj-440", "sj-444", "sj-grey", "dc-overflow", "no-end-of-block")


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("strict_check_corpus")
    files = {p.name: p.read_bytes() for p in corpus.build(folder)}
    try:
        from fastload.data.pictures.photos import photo_tree

        root = photo_tree(folder / "photos", train=7, val=0, workers=1,
                          megapixels=(0.05, 0.1))
        files.update({f"photo-{p.name}": p.read_bytes() for p in sorted(root.rglob("*.jpg"))})
    except ImportError:  # scikit-image's photos not installed: the generated corpus alone
        pass
    return files


def _compare(files: dict[str, bytes]) -> Counter:
    """Verdicts of both checks; raises on any difference. Counts, by what the C check said:
    intact (both), damaged (both), and fallbacks to the strict decode on a file that
    decodes (the C check's false alarms, resolved by the strict decode)."""
    counts: Counter = Counter()
    let_through, differ = [], []
    for name, data in files.items():
        old = decoded_error(data)
        quick = _jpegcheck.check(data) if jpeg_damage._is_jpeg(data) else None
        # again: the AC tables' look-ups are built the second time a table is met, so a
        # second call takes the skip decoder where the first may have taken the pair one
        again = _jpegcheck.check(data) if jpeg_damage._is_jpeg(data) else None
        if (quick is None or again is None) and old is not None:
            let_through.append((name, old))
        if (quick is None) != (again is None):
            differ.append((name, quick, again))
        new = strict_decode_error(data)
        if new != old or damage(data) != (old if old and old.startswith(
                jpeg_damage.CORRUPT_PREFIXES) else None):
            differ.append((name, old, new))
        counts["intact" if old is None and quick is None else "refused" if old is not None
               else "false alarm"] += 1
    assert not let_through, let_through[:10]
    assert not differ, differ[:10]
    _compare_together(files)
    return counts


def _compare_together(files: dict[str, bytes]) -> None:
    """Files checked together (in a shuffled order: by each wide pass this CPU runs, 32 at
    once with AVX-512, 16 with AVX2, and two at a time with wide=False) get the verdicts
    each gets alone: the C check's "intact" or not, and the strict decode's message."""
    names = sorted(files)
    random.Random(len(names)).shuffle(names)
    jpegs = [n for n in names if jpeg_damage._is_jpeg(files[n])]
    alone = [(n, _jpegcheck.check(files[n]) is None) for n in jpegs]
    for wide in (True, False, *_jpegcheck.WIDE_PASSES):
        together = _jpegcheck.check_many([files[n] for n in jpegs], wide=wide)
        assert [(n, v is None) for n, v in zip(jpegs, together, strict=True)] == alone
    messages = jpeg_damage.strict_decode_errors([files[n] for n in names])
    assert messages == [strict_decode_error(files[n]) for n in names]
    assert jpeg_damage.jpeg_damages([files[n] for n in names]) == [damage(files[n]) for n in names]


def test_valid_files_get_the_same_verdict_and_own_layouts_are_never_left_to_the_decode(valid):
    counts = _compare(valid)
    assert counts["refused"] == 0
    own = {n: d for n, d in valid.items() if n.startswith(_OWN) or n.startswith("photo-")}
    assert len(own) > 40
    assert [n for n, d in own.items() if _jpegcheck.check(d) is not None] == []


def test_restart_markers_out_of_place_get_the_strict_decodes_verdicts(valid):
    """The entropy pass decodes a restart interval's data up to its marker: markers swapped,
    dropped, renumbered, moved, or after a stray data byte or a fill byte get the strict
    decode's verdicts (the C check never finds intact what the strict decode refuses)."""
    rng = random.Random(7)
    damaged: dict[str, bytes] = {}
    for name, data in valid.items():
        sos = data.find(b"\xff\xda")
        at = [i for i in range(sos, len(data) - 1)
              if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]
        if len(at) < 3:
            continue
        for round_ in range(3):
            i, j = sorted(rng.sample(at, 2))
            swapped = bytearray(data)
            swapped[i + 1], swapped[j + 1] = data[j + 1], data[i + 1]
            renumbered = bytearray(data)
            renumbered[i + 1] = 0xD0 + (data[i + 1] - 0xD0 + 3) % 8
            damaged.update({
                f"{name} {round_} swapped": bytes(swapped),
                f"{name} {round_} renumbered": bytes(renumbered),
                f"{name} {round_} dropped": data[:i] + data[i + 2:],
                f"{name} {round_} moved": data[:i] + data[i + 2:i + 12] + data[i:i + 2]
                + data[i + 12:],
                f"{name} {round_} byte before": data[:i] + b"\x55" + data[i:],
                f"{name} {round_} fill byte before": data[:i] + b"\xff" + data[i:],
            })
    assert len(damaged) >= 30
    counts = _compare(damaged)
    assert counts["refused"] > len(damaged) // 2


def test_scrambled_scans_truncations_and_bit_flips_get_the_strict_decodes_verdicts(valid):
    rng = random.Random(41)
    damaged: dict[str, bytes] = {}
    for name, data in valid.items():
        if len(data) > 400:
            try:
                damaged[f"{name} scrambled"] = scramble_scan(data, count=min(40, len(data) // 20))
            except (AssertionError, ValueError):
                pass
        sos = data.find(b"\xff\xda")
        for cut in sorted({2, 3, sos, sos + 5, len(data) - 1, len(data) - 2, len(data) - 3,
                           *(rng.randrange(2, len(data)) for _ in range(6))}):
            if 2 <= cut < len(data):
                damaged[f"{name} cut at {cut}"] = data[:cut]
        for i in range(8):
            flipped = bytearray(data)
            at = rng.randrange(max(2, sos), len(data)) if i < 6 else rng.randrange(2, len(data))
            flipped[at] ^= 1 << rng.randrange(8)
            damaged[f"{name} flip {i}"] = bytes(flipped)
        # bytes after the scan, a missing end of image, fill bytes before it
        body = data[:-2] if data.endswith(b"\xff\xd9") else data
        damaged[f"{name} extra byte"] = body + b"\x00\xff\xd9"
        damaged[f"{name} extra bytes"] = body + bytes(range(1, 20)) + b"\xff\xd9"
        damaged[f"{name} no EOI"] = body
        damaged[f"{name} fill before EOI"] = body + b"\xff\xff\xff\xd9"
        damaged[f"{name} data after EOI"] = data + b"garbage"
        # markers between the scan and the end of image (libjpeg's marker reader reads them)
        sos_end = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
        for what, segment in (("COM", b"\xff\xfe\x00\x05abc"), ("APP1", b"\xff\xe1\x00\x02"),
                              ("SOS again", data[sos:sos_end] + bytes(10)),
                              ("RST", b"\xff\xd0"), ("SOI", b"\xff\xd8"),
                              ("bogus length", b"\xff\xfe\x00\x01"),
                              ("DNL", b"\xff\xdc\x00\x04\x00\x10"),
                              ("marker 01", b"\xff\x01"),
                              ("SOF", b"\xff\xc0\x00\x0b\x08\x00\x10\x00\x10\x01\x01\x11\x00")):
            damaged[f"{name} {what} before EOI"] = body + segment + b"\xff\xd9"
    counts = _compare(damaged)
    assert counts["refused"] > len(valid) * 8


def test_fuzz_mutations_get_the_strict_decodes_verdicts(valid):
    rng = random.Random(35)
    names = sorted(valid)
    mutated = {}
    for i in range(4000):
        name = rng.choice(names)
        data, mutations = cases.mutate(rng, valid[name])
        mutated[f"{i} {name} {mutations}"] = data
    counts = _compare(mutated)
    assert counts["refused"] > 2000 and counts["intact"] > 100


def test_calls_of_any_size_get_each_files_verdict_alone(valid):
    """A call's size sets how a pass runs (a wide pass with some lanes empty from the start
    or as files end, two at a time below 10 files in flight): every size gives each file's
    verdict."""
    names = sorted(valid)
    files = [valid[n] for n in names] + [valid[n][: len(valid[n]) * 2 // 3] for n in names]
    random.Random(17).shuffle(files)
    alone = [_jpegcheck.check(data) is None for data in files]
    for wide in (False, *_jpegcheck.WIDE_PASSES):
        for size in range(1, 19):
            together = []
            for i in range(0, len(files), size):
                together += _jpegcheck.check_many(files[i:i + size], wide=wide)
            assert [v is None for v in together] == alone, (wide, size)


def test_the_fuzz_regressions_and_hand_made_scans_get_the_strict_decodes_verdicts():
    files = {"dc overflow": corpus.dc_overflow_jpeg(), "no end of block":
             corpus.no_end_of_block_jpeg(), "small": corpus.small_jpeg()}
    for folder in sorted((HERE.parent / "fuzz" / "regressions").iterdir()):
        if (folder / "data.jpg").exists():
            files[folder.name] = (folder / "data.jpg").read_bytes()
    _compare(files)


def test_a_damaged_file_is_refused_with_the_strict_decoders_own_message(valid):
    data = max((d for n, d in valid.items() if n.startswith("baseline-420")), key=len)
    bad = scramble_scan(data)
    assert _jpegcheck.check(bad) is not None  # the C check's reason ...
    message = strict_decode_error(bad)  # ... and the strict decode's words for it
    assert message == decoded_error(bad) and message.startswith("Corrupt JPEG data")


def test_not_a_jpeg_and_odd_buffers_are_answered_without_a_crash():
    for data in (b"", b"\xff", b"\xff\xd8", b"\xff\xd8\xff\xd9", b"\x00" * 100,
                 bytearray(b"\xff\xd8\xff"), memoryview(b"\xff\xd8\xff\xc0\x00")):
        assert _jpegcheck.check(data) is not None
    with pytest.raises(TypeError):
        _jpegcheck.check("not bytes")


def test_verdicts_do_not_depend_on_the_tables_earlier_files_left_in_the_cache():
    """Each thread keeps the Huffman look-ups of the last 8 tables it met: files with their
    own optimised tables (more of them than the cache holds), intact and cut, checked in
    one order and then in another, get the verdicts each gets in a fresh thread."""
    import io
    import threading

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(5)
    files = []
    for k in range(12):  # each optimised: tables of its own
        pixels = rng.integers(0, 256, (40 + 8 * k, 56, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=30 + 5 * k, optimize=True)
        data = out.getvalue()
        files += [data, data[: len(data) * 2 // 3] + b"\xff\xd9"]

    def fresh(data: bytes) -> str | None:
        verdict = []
        thread = threading.Thread(target=lambda: verdict.append(_jpegcheck.check(data)))
        thread.start()
        thread.join()
        return verdict[0]

    alone = [fresh(data) for data in files]
    assert alone[0::2] == [None] * 12 and all(v is not None for v in alone[1::2])
    order = list(range(len(files))) * 2
    random.Random(3).shuffle(order)
    assert [_jpegcheck.check(files[i]) for i in order] == [alone[i] for i in order]


def test_files_checked_together_keep_their_tables_apart():
    """Two files in flight at once in one thread hold their tables in its cache together:
    checked together in one call, files with tables of their own (more than the cache
    holds), intact and cut, get the verdicts each gets alone in a fresh thread."""
    import io
    import threading

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    files = []
    for k in range(12):
        pixels = rng.integers(0, 256, (48 + 8 * k, 64, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=35 + 5 * k, optimize=True)
        data = out.getvalue()
        files += [data, data[: len(data) * 3 // 4] + b"\xff\xd9"]
    alone = []
    for data in files:
        thread = threading.Thread(target=lambda d=data: alone.append(_jpegcheck.check(d)))
        thread.start()
        thread.join()
    assert alone[0::2] == [None] * 12 and all(v is not None for v in alone[1::2])
    order = list(range(len(files))) * 3  # tables met a second and third time: built
    random.Random(11).shuffle(order)
    together = _jpegcheck.check_many([files[i] for i in order])
    assert [v is None for v in together] == [alone[i] is None for i in order]


def test_large_files_with_tables_of_their_own_get_the_strict_decodes_verdicts():
    """A file of 32 KB or more of scan data gets its tables' look-ups at once (its own
    optimised tables are not met again): such files, intact, cut and with scrambled scans,
    together and alone, more of them than the cache holds, get the strict decode's
    verdicts."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(13)
    files: dict[str, bytes] = {}
    for k in range(10):
        pixels = rng.integers(0, 256, (320 + 8 * k, 320, 3), dtype=np.uint8)
        pixels[:, : 40 + 16 * k] //= 3  # tables differ from file to file
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=80 + k, optimize=True)
        data = out.getvalue()
        assert len(data) > 50_000
        files[f"own tables {k}"] = data
        files[f"own tables {k} cut"] = data[: len(data) * 3 // 4] + b"\xff\xd9"
        files[f"own tables {k} scrambled"] = scramble_scan(data)
    counts = _compare(files)
    assert counts["intact"] == 10 and counts["refused"] == 20


def _cpu_info(field: str) -> str:
    """The first CPU's ``field`` in /proc/cpuinfo ("" where it has none)."""
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
        return next((line.split(":", 1)[1].strip() for line in handle
                     if line.split(":", 1)[0].strip() == field), "")


def _cpu_flags() -> set[str]:
    return set(_cpu_info("flags").split())


def _passes_in_a_process(capability: str | None) -> tuple:
    """(WIDE_PASSES, WIDE_PASS, WIDE_LANES, stderr) of the module imported in a fresh
    process with FASTLOAD_CPU_CAPABILITY set to ``capability`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "FASTLOAD_CPU_CAPABILITY"}
    if capability is not None:
        env["FASTLOAD_CPU_CAPABILITY"] = capability
    done = subprocess.run(
        [sys.executable, "-c", "from fastload.data.format import _jpegcheck as j; "
         "print(list(j.WIDE_PASSES), repr(j.WIDE_PASS), j.WIDE_LANES)"],
        env=env, capture_output=True, text=True, check=True)
    passes, name, lanes = done.stdout.rsplit(" ", 2)
    return eval(passes), eval(name), int(lanes), done.stderr  # noqa: S307 - our own print


def test_the_wide_passes_are_those_the_cpu_runs_and_the_fastest_widest_is_taken():
    flags = _cpu_flags()
    expected = ([("avx512", 32)] if {"avx512f", "avx512bw", "avx512dq"} <= flags else []) + (
        [("avx2", 16), ("avx2-loads", 16)] if "avx2" in flags else [])
    passes, name, lanes, _ = _passes_in_a_process(None)
    assert passes == [n for n, _ in expected]
    zen4 = _cpu_info("vendor_id") == "AuthenticAMD" and _cpu_info("cpu family") == "25"
    if zen4 and expected[:2] == [("avx512", 32), ("avx2", 16)]:
        expected = expected[1:]  # AMD's Zen 4: the AVX2 pass outruns the AVX-512 one
    assert (name, lanes) == (expected[0] if expected else ("", 0))


def test_fastload_cpu_capability_caps_the_default_pass():
    passes, name, lanes, _ = _passes_in_a_process("default")
    assert (name, lanes) == ("", 0)
    if "avx512" in passes:  # named, taken even where the AVX2 pass is the faster
        assert _passes_in_a_process("avx512")[1:3] == ("avx512", 32)
    if "avx2" in passes:
        assert _passes_in_a_process("avx2")[1:3] == ("avx2", 16)
    *_, stderr = _passes_in_a_process("sse9")
    assert "FASTLOAD_CPU_CAPABILITY=sse9 is not one of avx512, avx2, avx2-loads, default" in stderr


def test_a_pass_is_chosen_by_name_and_one_the_cpu_lacks_is_refused(valid):
    files = sorted(valid.values(), key=len)[-12:]
    for name in _jpegcheck.WIDE_PASSES:
        assert _jpegcheck.check_many(files, wide=name) == [_jpegcheck.check(d) for d in files]
    with pytest.raises(ValueError, match="not a pass this CPU runs"):
        _jpegcheck.check_many([], wide="sse9")
    with pytest.raises(TypeError, match="bool or a pass name"):
        _jpegcheck.check_many([], wide=1)


def test_checking_together_takes_any_sequence_of_buffers_and_refuses_others():
    assert _jpegcheck.check_many([]) == []
    assert _jpegcheck.check_many((b"", bytearray(b"\xff\xd8"), memoryview(b"\x00" * 9))) == [
        _jpegcheck.check(b""), _jpegcheck.check(b"\xff\xd8"), _jpegcheck.check(b"\x00" * 9)]
    with pytest.raises(TypeError):
        _jpegcheck.check_many([b"\xff\xd8", "not bytes"])
    with pytest.raises(TypeError):
        _jpegcheck.check_many(5)
    with pytest.raises(TypeError):
        _jpegcheck.check_many([], True)  # wide is a keyword


def test_without_a_wide_pass_the_scan_is_unstuffed_the_scalar_way_with_the_same_verdicts(
        valid, tmp_path):
    """FASTLOAD_CPU_CAPABILITY=default (as a CPU without AVX2) unstuffs the scan's data with
    memchr and memcpy where the wide passes' CPUs take 32 bytes at a time: the same verdicts
    on stuffed bytes, restart markers, cuts and flips at every offset of a few files."""
    rng = random.Random(3)
    files = []
    for data in sorted(valid.values(), key=len)[-6:]:
        files.append(data)
        for _ in range(12):
            flipped = bytearray(data)
            flipped[rng.randrange(2, len(data))] ^= 1 << rng.randrange(8)
            files += [bytes(flipped), data[:rng.randrange(2, len(data))]]
    for i, data in enumerate(files):
        (tmp_path / f"{i:04d}.jpg").write_bytes(data)
    here = [v is None for v in _jpegcheck.check_many(files)]
    assert 0 < sum(here) < len(files)
    env = {**os.environ, "FASTLOAD_CPU_CAPABILITY": "default"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys, pathlib; from fastload.data.format import "
         "_jpegcheck as j; files = [p.read_bytes() for p in sorted(pathlib.Path(sys.argv[1])"
         ".glob('*.jpg'))]; print(repr(j.WIDE_PASS), ''.join('1' if v is None else '0' for v in "
         "j.check_many(files)))", str(tmp_path)],
        env=env, capture_output=True, text=True, check=True)
    wide_pass, verdicts = done.stdout.split()
    assert wide_pass == "''"  # no wide pass: the scalar unstuffing
    assert [v == "1" for v in verdicts] == here
