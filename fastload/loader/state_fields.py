"""The checks of a ``DataLoader.state_dict()`` given to ``load_state_dict``: each field's
type and range, one sentence naming the field and its value (TypeError or ValueError),
before anything is resumed (fastload.loader.sampling.BatchOrder runs them)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_state_fields"]


def check_state_fields(state: dict[str, Any]) -> None:
    """One sentence for a state_dict field of the wrong type (TypeError) or out of range
    (ValueError), naming the field and its value; ``remaining`` lists become tensors."""
    for key in ("epoch", "batches_yielded", "seed", "num_items"):
        if key not in state:
            raise ValueError(f"state has no {key!r}; pass what DataLoader.state_dict() returned")
        if key == "seed" and state[key] is None:  # saved before the first iter()
            continue
        _integer(state, key, low=None if key == "seed" else 0)
    num_items = state["num_items"]
    if state.get("batch_size") is not None:
        _integer(state, "batch_size", low=1)
    if state.get("world_size") is not None:
        _integer(state, "world_size", low=1)
    if state.get("rank") is not None:
        _integer(state, "rank", low=0)
    for key, optional in (("drop_last", False), ("shuffle", True)):
        value = state.get(key)
        if key in state and not (isinstance(value, bool) or (optional and value is None)):
            allowed = "True, False or None" if optional else "True or False"
            raise TypeError(f"state field {key} should be {allowed}, but got {key}={value!r}")
    for key in ("epoch_offset", "samples_consumed"):
        if state.get(key) is not None:
            _integer(state, key, low=0, high=num_items)
    if state.get("remaining") is not None:
        state["remaining"] = _check_remaining(state["remaining"], num_items)
    check_order_fields(state)


def _integer(state: dict[str, Any], key: str, low: int | None = 0,
             high: int | None = None) -> None:
    import numbers

    value = state[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"state field {key} should be an integer, but got {key}={value!r}")
    if low is not None and value < low or high is not None and value > high:
        span = ("a non-negative integer" if low == 0 and high is None
                else f"an integer >= {low}" if high is None
                else f"an integer in [{low}, {high}] (the dataset has {high} samples)")
        raise ValueError(f"state field {key} should be {span}, but got {key}={value!r}")


def _check_remaining(remaining: Any, num_items: int) -> dict[str, torch.Tensor]:
    """``remaining`` as two int64 tensors, checked: batch sizes >= 0 summing to the number of
    indices, every index in ``[0, num_items)``."""
    shape = ("None or {'indices': a 1-D integer tensor, 'batch_sizes': a 1-D integer tensor "
             "of the sizes of the remaining batches}")
    if not isinstance(remaining, dict) or set(remaining) != {"indices", "batch_sizes"}:
        raise TypeError(f"state field remaining should be {shape}, but got "
                        f"remaining={_short(remaining)}")
    tensors = {}
    for key in ("indices", "batch_sizes"):
        value = _int64_vector(remaining[key])
        if value is None:
            raise TypeError(f"state field remaining[{key!r}] should be a 1-D integer tensor, "
                            f"but got {_short(remaining[key])}")
        tensors[key] = value
    sizes, indices = tensors["batch_sizes"], tensors["indices"]
    if len(sizes) and int(sizes.min()) < 0:
        raise ValueError(f"state field remaining['batch_sizes'] holds a negative batch size "
                         f"({int(sizes.min())})")
    if int(sizes.sum()) != len(indices):
        raise ValueError(f"state field remaining['batch_sizes'] sums to {int(sizes.sum())}, but "
                         f"remaining['indices'] holds {len(indices)} indices")
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= num_items):
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise ValueError(f"state field remaining['indices'] holds index {bad}, outside the "
                         f"dataset's [0, {num_items})")
    return tensors


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_order_fields(state: dict[str, Any]) -> None:
    """Type and range of the shard-aware order's fields (``fastload.loader.shard_order``),
    when present; ``shard_order`` becomes an int64 tensor."""
    order = state.get("order")
    if order is not None and order not in ("global", "shards"):
        raise ValueError(f"state field order should be 'global' or 'shards', but got "
                         f"order={_short(order)}")
    permutation = state.get("permutation")
    if permutation is not None and permutation not in ("keyed", "randperm"):
        raise ValueError(f"state field permutation should be 'keyed', 'randperm' or None, but "
                         f"got permutation={_short(permutation)}")
    if state.get("shard_window") is not None:
        _integer(state, "shard_window", low=1)
    stored = state.get("shard_order")
    if stored is not None:
        value = _int64_vector(stored)
        if value is None:
            raise TypeError(f"state field shard_order should be None or a 1-D integer tensor, "
                            f"but got {_short(stored)}")
        state["shard_order"] = value


def _int64_vector(value: object) -> torch.Tensor | None:
    """``value`` (a tensor, or what ``torch.as_tensor`` takes) as a 1-D int64 tensor; None
    when it is not a 1-D tensor of integers (floats, complex and bools are not)."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            return None
    if (value.dim() != 1 or value.is_floating_point() or value.is_complex()
            or value.dtype == torch.bool):
        return None
    return value.to(torch.int64)
