"""A keyed permutation of ``[0, n)``, computed position by position: the epoch order of
large sets.

``torch.randperm(n)`` makes every rank draw and hold the whole order (4 bytes per record
and ``n`` swaps in each rank at each epoch: 400 MB and about 2 s per rank at 100 M records).
Here the order is a bijection ``position -> index`` that a key picks (``mix_seed(seed,
epoch)``), so a rank computes the indices at its own positions only (``n / world_size``
of them) and never holds the rest. The bijection is a Feistel network of :data:`ROUNDS`
rounds on the smallest domain of ``2**bits >= n`` values, split into a high and a low half
(of ``bits // 2`` and ``bits - bits // 2`` bits): each round adds (xor) to one half, in
turn, a splitmix64 finaliser of the other half and a round key, which any split undoes.
An output at or past ``n`` is fed through the network again until it falls inside (cycle
walking; fewer than two passes on average, since the domain is under ``2 * n``), which
keeps it a permutation of ``[0, n)``. The order is a pure function of ``(n, key)``: the
same in every rank, run, world size and resumed run.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KEYED_ORDER_MIN_ITEMS", "ROUNDS", "keyed_indices", "rank_indices", "round_keys"]

# Sets of at least this many records draw their epoch order with the keyed permutation
# (fastload.loader.sampling.EpochSampler); smaller sets keep torch.randperm's order, which
# is cheaper there and which their saved states name.
KEYED_ORDER_MIN_ITEMS = 10_000_000
ROUNDS = 4
_CHUNK = 1 << 16  # positions per pass: the temporaries stay in the CPU's caches
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S1, _S2 = np.uint64(27), np.uint64(31)


def round_keys(key: int) -> np.ndarray:
    """The :data:`ROUNDS` 64-bit round keys of ``key`` (a 64-bit integer)."""
    seq = np.random.SeedSequence([int(key) & ((1 << 64) - 1), 0x6B657965])  # "keye"
    return seq.generate_state(ROUNDS, dtype=np.uint64)


def _split(n: int) -> tuple[int, int]:
    """Bits of the high and the low half of the smallest domain holding ``[0, n)``."""
    bits = max(2, int(n - 1).bit_length())
    return bits // 2, bits - bits // 2


def _feistel(x: np.ndarray, keys: np.ndarray, split: tuple[int, int]) -> np.ndarray:
    """One pass of the network over ``x`` (uint64 values below ``2**sum(split)``): each
    round xors into one half, in turn, splitmix64's finaliser of the other half xor the
    round key (wrapping uint64 arithmetic, in place)."""
    high_bits, low_bits = split
    shift = np.uint64(low_bits)
    masks = (np.uint64((1 << high_bits) - 1), np.uint64((1 << low_bits) - 1))
    halves = [x >> shift, x & masks[1]]
    z, t = np.empty_like(x), np.empty_like(x)
    with np.errstate(over="ignore"):
        for r, key in enumerate(keys):
            target = r % 2  # 0: the high half takes the low half's mix; 1: the reverse
            np.bitwise_xor(halves[1 - target], key, out=z)
            np.multiply(z, _M1, out=z)
            np.right_shift(z, _S1, out=t)
            np.bitwise_xor(z, t, out=z)
            np.multiply(z, _M2, out=z)
            np.right_shift(z, _S2, out=t)
            np.bitwise_xor(z, t, out=z)
            np.bitwise_and(z, masks[target], out=z)
            np.bitwise_xor(halves[target], z, out=halves[target])
    np.left_shift(halves[0], shift, out=z)
    return np.bitwise_or(z, halves[1], out=z)


def _walk(x: np.ndarray, keys: np.ndarray, split: tuple[int, int], n: int) -> np.ndarray:
    """The network's images of ``x`` (uint64 positions below ``n``), walked into ``[0, n)``:
    an image at or past ``n`` goes through the network again (every cycle through
    ``[0, n)`` comes back inside)."""
    limit = np.uint64(n)
    x = _feistel(x, keys, split)
    outside = np.flatnonzero(x >= limit)
    while outside.size:
        walked = _feistel(x[outside], keys, split)
        x[outside] = walked
        outside = outside[walked >= limit]
    return x


def keyed_indices(positions: np.ndarray, n: int, key: int,
                  dtype: np.dtype | type = np.int64) -> np.ndarray:
    """The indices at ``positions`` (integers in ``[0, n)``) of the permutation of
    ``[0, n)`` that ``key`` picks, as ``dtype``; ``keyed_indices(np.arange(n), n, key)`` is
    the whole order."""
    positions = np.asarray(positions)
    if n < 1:
        if positions.size:
            raise ValueError(f"positions should be in [0, n), but n={n}")
        return np.empty(0, dtype=dtype)
    flat = positions.reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n):
        raise ValueError(f"positions should be in [0, {n}), but got values in "
                         f"[{int(flat.min())}, {int(flat.max())}]")
    keys, split = round_keys(key), _split(n)
    out = np.empty(flat.size, dtype=dtype)
    for begin in range(0, flat.size, _CHUNK):
        chunk = flat[begin:begin + _CHUNK].astype(np.uint64)
        out[begin:begin + chunk.size] = _walk(chunk, keys, split, n)
    return out.reshape(positions.shape)


def rank_indices(n: int, key: int, offset: int, rank: int, world_size: int, count: int,
                 dtype: np.dtype | type = np.int64) -> np.ndarray:
    """Rank ``rank``'s first ``count`` indices of the suffix from position ``offset`` of
    ``key``'s permutation of ``[0, n)``, sharded as ``DistributedSampler`` shards: its
    ``j``-th sits at suffix position ``rank + world_size * j``, which wraps round to the
    suffix's start past its end (the padding). Holds ``count`` indices, 4 or 8 bytes each,
    and a bounded working set besides."""
    out = np.empty(count, dtype=dtype)
    if count == 0:
        return out
    keys, split, length = round_keys(key), _split(n), n - offset
    for begin in range(0, count, _CHUNK):
        local = np.arange(begin, min(begin + _CHUNK, count), dtype=np.uint64)
        local *= np.uint64(world_size)
        local += np.uint64(rank)
        if int(local[-1]) >= length:  # the padding: positions wrap round to the start
            local %= np.uint64(length)
        local += np.uint64(offset)
        out[begin:begin + local.size] = _walk(local, keys, split, n)
    return out
