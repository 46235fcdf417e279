"""Look-up steps of the strict check's pass on baseline JPEGs, modelled in Python.

    python benchmarks/lookup_steps.py FILE.jpg [...]

The pass (``pipelines/csrc/jpegcheck``) reads a block's DC code by one look-up, then its AC
symbols 12 bits at a time: a look-up takes every whole code in its 12 bits, and the value bits
of its last symbol may run past them. This counts those steps for each file, and the steps if
the DC look-up also took the AC symbols that follow it in the same 12 bits (benchmarks/NOTES.md
C24: estimated, not built). A model: long codes and restart markers are not treated apart.
Prints, per file, its blocks, the steps now, the ratio merged / now and the bits a step.
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

WINDOW = 12  # bits a look-up reads


def _segments(data: bytes) -> tuple[dict, list, dict, int]:
    """Huffman tables {(class, id): {(length, code): symbol}}, components [(id, h, v)], the
    scan's table selectors {component: byte} and where its data starts."""
    tables, components, i = {}, [], 2
    while True:
        marker = data[i + 1]
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        segment = data[i + 4:i + 2 + length]
        if marker == 0xC4:
            j = 0
            while j < len(segment):
                counts = segment[j + 1:j + 17]
                values = segment[j + 17:j + 17 + sum(counts)]
                codes, code, k = {}, 0, 0
                for bits in range(1, 17):
                    for _ in range(counts[bits - 1]):
                        codes[(bits, code)] = values[k]
                        k, code = k + 1, code + 1
                    code <<= 1
                tables[(segment[j] >> 4, segment[j] & 15)] = codes
                j += 17 + sum(counts)
        elif marker == 0xC0:
            for c in range(segment[5]):
                factors = segment[7 + 3 * c]
                components.append((segment[6 + 3 * c], factors >> 4, factors & 15))
        elif marker == 0xDA:
            selectors = {segment[1 + 2 * c]: segment[2 + 2 * c] for c in range(segment[0])}
            return tables, components, selectors, i + 2 + length
        i += 2 + length


def _unstuffed(scan: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(scan) and not (scan[i] == 0xFF and scan[i + 1] != 0):
        out.append(scan[i])
        i += 2 if scan[i] == 0xFF else 1
    return bytes(out) + bytes(8)


def _blocks(data: bytes) -> list[list[tuple[int, int]]]:
    """Each block's symbols as (bits with value bits, code bits), its DC first."""
    tables, components, selectors, start = _segments(data)
    stream = _unstuffed(data[start:])
    sof = data.index(b"\xff\xc0")
    height, width = struct.unpack(">HH", data[sof + 5:sof + 9])
    h_max = max(h for _, h, _ in components)
    v_max = max(v for _, _, v in components)
    mcus = -(-width // (8 * h_max)) * -(-height // (8 * v_max))
    layout = [cid for cid, h, v in components for _ in range(h * v)]
    pos, blocks = 0, []

    def symbol(codes: dict) -> tuple[int, int]:
        word = int.from_bytes(stream[pos >> 3:(pos >> 3) + 4], "big") << (pos & 7)
        for bits in range(1, 17):
            found = codes.get((bits, (word >> (32 - bits)) & ((1 << bits) - 1)))
            if found is not None:
                return found, bits
        raise ValueError("a code no table holds")

    for _ in range(mcus):
        for cid in layout:
            select = selectors[cid]
            size, bits = symbol(tables[(0, select >> 4)])
            block, pos, k = [(bits + size, bits)], pos + bits + size, 1
            while k < 64:
                value, bits = symbol(tables[(1, select & 15)])
                run, size = value >> 4, value & 15
                block.append((bits + size, bits))
                pos += bits + size
                if size == 0 and run != 15:
                    break  # end of block
                k += run + 1 if size else 16
            blocks.append(block)
    return blocks


def steps(symbols: list[tuple[int, int]]) -> int:
    """Look-ups to take ``symbols``: each takes the whole codes in its bits, at least one"""
    count = i = 0
    while i < len(symbols):
        count, used = count + 1, 0
        while i < len(symbols) and (used == 0 or used + symbols[i][1] <= WINDOW):
            used += symbols[i][0]
            i += 1
            if used > WINDOW:
                break
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+")
    for path in parser.parse_args().files:
        blocks = _blocks(path.read_bytes())
        now = sum(1 + steps(block[1:]) for block in blocks)
        merged = sum(steps(block) if block[0][0] <= WINDOW else 1 + steps(block[1:])
                     for block in blocks)
        bits = sum(total for block in blocks for total, _ in block)
        print(f"{path}: {len(blocks)} blocks, {now} steps now, merged / now "
              f"{merged / now:.3f}, {bits / now:.1f} bits a step")


if __name__ == "__main__":
    main()
