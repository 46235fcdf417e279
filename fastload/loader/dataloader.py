"""``fastload.DataLoader``: torch's DataLoader contract, batches decoded by a DALI graph.

The loader decides *which* samples form each batch (order, sampling, sharding, resume,
labels, errors); ``fastload.pipelines`` turns the encoded images of a batch into a tensor.
Whatever cannot run on that path falls back to a real ``torch.utils.data.DataLoader``.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import warnings
import weakref
from typing import Any

import torch
from torch.utils.data import BatchSampler, Dataset
from torch.utils.data import DataLoader as TorchDataLoader

from fastload.loader.batch_order import BatchOrder
from fastload.loader.context import EpochContext, SkipLog
from fastload.loader.damage import DamageCheck
from fastload.loader.datasets import (
    NotASource,
    dataset_signature,
    make_source,
    resolve_dataset,
)
from fastload.loader.devices import resolve_device
from fastload.loader.epoch import EpochIterator, EpochRecord
from fastload.loader.kernel_check import missing_kernel_messages
from fastload.loader.plan import make_plan
from fastload.loader.read_buffers import DEFAULT_READ_BUFFER_BYTES
from fastload.loader.sample_sources import SampleError, call_set_hook
from fastload.loader.sampling import EpochSampler, distributed_settings
from fastload.loader.shard_order import (
    DEFAULT_SHARD_WINDOW,
    ShardShuffleSampler,
    resolve_order,
    warn_if_class_sorted,
)
from fastload.loader.stage import SampleStage, collate_with_mix
from fastload.utils.checks import check_share
from fastload.utils.fallback import FallbackWarning

__all__ = ["DataLoader", "FallbackWarning", "SampleError"]

log = logging.getLogger(__name__)  # the plan of each loader: a debug record

_FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers",
           "order", "shard_window")
_COPIED = ("num_workers", "prefetch_factor", "pin_memory", "pin_memory_device", "timeout",
           "worker_init_fn", "multiprocessing_context", "in_order", "generator", "collate_fn",
           "persistent_workers", "batch_size", "drop_last", "sampler", "batch_sampler")


_COLLECTED = False  # see _collect_before_forks


def _collect_before_forks() -> None:
    """One full garbage collection, the first time a fallback with worker processes is
    made in this process. Deciding to fall back imports the DALI graph package and builds
    its op tables (about 3,000 long-lived objects over the imports'); until the parent's
    next full collection, every worker torch forks runs that collection itself, over every
    object of the parent (copying their pages): measured 0.25 s to the first batch of each
    epoch against torch's 0.09 s in a process without the attempt, and 0.09 s after this
    collection (docs/benchmarks/results/first-batch.md)."""
    global _COLLECTED
    if not _COLLECTED:
        _COLLECTED = True
        gc.collect()


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


class DataLoader:
    """Drop-in for ``torch.utils.data.DataLoader`` over image datasets, decoded by DALI.

    Takes torch's arguments with torch's meaning and validation (torch's own constructor
    checks them, with torch's messages), plus the keyword-only ones from ``device`` on.

    Datasets: torchvision ``ImageFolder``/``DatasetFolder`` with the default PIL loader,
    ``fastload.LMDBDataset``, a ``Subset`` of either, or a path. Batches are
    ``[images, labels]`` as torch's ``default_collate`` makes them: fresh tensors (``labels``
    int64 after ``target_transform``), on ``device``, pinned when ``pin_memory`` and the
    images are on the CPU of a CUDA machine.

    Order: ``shuffle=True`` gives a full permutation per epoch drawn from ``(seed, epoch)``;
    the seed is ``seed``, else the base seed the first ``iter()`` draws from ``generator``
    (torch's default generator when None). ``iter()`` takes from the global generators
    exactly what torch's loader takes (``fastload.loader.iter_draws``); ``seed=`` stands for
    a generator of the loader's own. Each ``iter()`` is the next epoch; ``set_epoch(e)``
    picks one (and is forwarded to a sampler that has ``set_epoch``). ``sampler``/
    ``batch_sampler`` are iterated exactly as torch does. Under ``torch.distributed`` with
    neither given, each rank reads its shard as with DistributedSampler: padded by wrapping
    to a multiple of the world size (``drop_last=False``) or cut to one
    (``drop_last=True``), rank ``r`` taking ``order[r::world_size]``. Each batch's
    augmentation draws from a generator seeded by ``(seed, epoch, rank, batch position)``,
    so a resumed run makes the same crops.

    Transforms: the longest prefix DALI can run becomes the graph; the rest runs per sample
    with torch on the decoded tensors (``fastload.pipelines.split``); a custom ``collate_fn``
    receives the list of per-sample ``(image, label)`` torch would give it. ``plan`` prints
    what runs where.

    Fallback: a real ``torch.utils.data.DataLoader`` with the same arguments (one
    :class:`FallbackWarning` naming the reason; same batches, no speed-up) runs instead for
    other datasets, a transform that needs a PIL image before anything DALI can run,
    ``batch_size=None``, and ``worker_init_fn``/``multiprocessing_context`` with workers.
    ``fallback_reason`` says why.

    Args:
        dataset: the data set, or a path: an image folder (read with ImageFolder
            semantics), a fastload LMDB directory or sharded set, or a URL of a set
            (``s3://bucket/train.set``).
        batch_size: samples per batch, as torch's; None (no automatic batching, single
            samples) runs the torch fallback.
        shuffle: a new permutation every epoch (see Order above); None or False keeps the
            dataset's order.
        sampler: torch's ``sampler``, iterated exactly as torch does (mutually exclusive
            with ``shuffle`` and with ``order``).
        batch_sampler: torch's ``batch_sampler``, iterated exactly as torch does (mutually
            exclusive with ``batch_size``, ``shuffle``, ``sampler``, ``drop_last``, ``order``).
        num_workers: the DALI CPU threads (0 -> 1); on the fallback, torch's worker
            processes.
        collate_fn: receives the list of per-sample ``(image, label)`` torch would give it;
            None: ``default_collate``. Mutually exclusive with ``batch_mix``.
        pin_memory: pin batches made on the CPU of a CUDA machine.
        drop_last: drop the last incomplete batch (and, under ``torch.distributed``, cut
            the samples to a multiple of the world size instead of padding).
        timeout: torch's; nothing to control on the DALI path (no worker processes).
        worker_init_fn: torch's; with ``num_workers > 0`` it needs worker processes, so the
            torch fallback runs.
        multiprocessing_context: torch's; with ``num_workers > 0`` the torch fallback runs.
        generator: the generator the first ``iter()`` draws the base seed from (torch's
            default generator when None). Mutually exclusive with ``seed``.
        prefetch_factor: batches decoded ahead (default 2).
        persistent_workers: torch's; nothing to control on the DALI path.
        pin_memory_device: torch's; nothing to control on the DALI path.
        in_order: torch's; nothing to control on the DALI path (batches always in order).
        device: where batches are made: None -> the GPU this process trains on when CUDA
            is available (nvJPEG decode, batches on the GPU: the current device if the script
            set one, else ``LOCAL_RANK``'s under torchrun; ``fastload.loader.devices``) else
            ``"cpu"`` (CPU-only DALI graph); or ``"cpu"``, ``"cuda"`` (the current device),
            ``"cuda:N"``, a ``torch.device``.
        seed: base seed of the shuffle order and the augmentation (instead of
            ``generator``); None: drawn at the first ``iter()``.
        strict: raise instead of falling back to torch's DataLoader.
        on_error: ``"raise"`` (an unreadable sample raises :class:`SampleError` naming its
            path or LMDB key) or ``"skip"`` (drop it from its batch, warn once; names in
            ``skipped``).
        transform: when ``dataset`` is a path (an image folder, read with ImageFolder
            semantics, or a fastload LMDB directory): the sample transform; with a dataset
            object, set it on the dataset instead.
        target_transform: when ``dataset`` is a path: the label transform, as ``transform``.
        hw_decoder_load: share of JPEG decoding given to the GPU's hardware decoder, in
            [0, 1] (``device="cuda"`` only).
        storage_options: when ``dataset`` is a URL (``s3://bucket/train.set``): fsspec's
            options (credentials, ``endpoint_url``; see ``fastload.LMDBDataset``).
        cache_dir: when ``dataset`` is a URL: the local shard cache's folder (default
            ``$FASTLOAD_CACHE`` or ``~/.cache/fastload``).
        cache_bytes: when ``dataset`` is a URL: the shard cache's bound in bytes (default
            ``$FASTLOAD_CACHE_BYTES`` or half the free disk).
        order: ``"global"`` (a permutation of the whole set per epoch, as torch's
            RandomSampler) or ``"shards"`` (a sharded set only: the shards shuffled per
            epoch, then the samples within windows of ``shard_window`` consecutive shards,
            so a rank reads a few shards at a time; ``fastload.loader.shard_order``). None:
            ``"shards"`` for a set streamed from object storage, ``"global"`` for a local
            one. Mutually exclusive with ``sampler`` and ``batch_sampler``.
        shard_window: shards per window of ``order="shards"``, a positive int (larger: a
            better shuffle, more shards resident and cached at once).
        scaled_decode: ``"auto"`` (CPU: large JPEGs decoded at a reduced DCT scale, fixed
            crops within 0.01 of torchvision's values, random crops with its crop boxes and
            flips; ``fastload.pipelines.decode.scaled``) or ``"off"`` (full-size decodes:
            torchvision's values for random crops too, slower on large photos).
        read_buffer_bytes: memory an image folder's file reads keep for reuse (files of
            256 KiB to 32 MiB are read into blocks lent again once their batch is decoded;
            ``fastload.loader.read_buffers``): at most this many bytes of free blocks per
            loader, 256 MiB by default; 0 keeps none (each read gets fresh memory).
        batch_mix: a torchvision v2 ``MixUp``, ``CutMix`` or ``RandomChoice`` of them (as
            torchvision's reference script builds ``mixup_cutmix``), applied to each batch
            after ``default_collate``: the same as
            ``collate_fn=lambda b: mix(*default_collate(b))``, run in place on the batch
            tensor on the CPU (``fastload.pipelines.replays.batch_mix``); ``collate_fn``
            becomes that collate (``fastload.pipelines.MixCollate``). Any callable
            ``(images, labels) -> (images, labels)`` works (run as is). Mutually exclusive
            with ``collate_fn``. The reference script's collate itself is recognised too,
            on CPython 3.10 to 3.13 (``fastload.pipelines.suffix.collate``).

    Attributes:
        dataset (Dataset): the dataset read (the one a path resolved to).
        batch_size (int | None): as given; read-only after construction, as torch's.
        drop_last (bool): as given; read-only after construction.
        sampler (Any): the sampler in use (the loader's own epoch sampler when none was
            given); read-only after construction.
        batch_sampler (Any): the batch sampler in use; read-only after construction.
        device (torch.device): where batches are made, resolved from ``device``.
        plan (LoaderPlan): what runs where (the DALI graph, the torch suffix, the collate,
            or the fallback and its reason); ``print(loader.plan)``.
        fallback_reason (str | None): why torch's DataLoader runs instead, None on the
            DALI path.
        skipped (list[str]): the paths or LMDB keys of the samples ``on_error="skip"``
            dropped so far.
        order (str): the order in use, ``"global"`` or ``"shards"``.

    Raises:
        ValueError: an argument out of range (``on_error``, ``scaled_decode``, ``order``,
            ``hw_decoder_load`` outside [0, 1], a negative ``read_buffer_bytes``,
            ``shard_window`` not a positive int), ``seed`` with ``generator``, ``order`` with
            a ``sampler``/``batch_sampler`` or ``order="shards"`` without a sharded set,
            ``transform``/``storage_options``... with a dataset object, a ``device`` this
            machine lacks, torch's own checks, or ``strict=True`` where the torch fallback
            would run.
        TypeError: ``seed`` not an int.
        FileNotFoundError: ``dataset`` a path that is not a directory, a set or a URL.
    """

    def __init__(self, dataset: Dataset | str, batch_size: int | None = 1,
                 shuffle: bool | None = None, sampler: Any = None, batch_sampler: Any = None,
                 num_workers: int = 0, collate_fn: Any = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Any = None,
                 multiprocessing_context: Any = None, generator: torch.Generator | None = None,
                 *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True, device: Any = None,
                 seed: int | None = None, strict: bool = False, on_error: str = "raise",
                 transform: Any = None, target_transform: Any = None,
                 hw_decoder_load: float = 0.65, storage_options: dict | None = None,
                 cache_dir: str | os.PathLike | None = None,
                 cache_bytes: int | None = None, order: str | None = None,
                 shard_window: int = DEFAULT_SHARD_WINDOW, scaled_decode: str = "auto",
                 read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES,
                 batch_mix: Any = None) -> None:
        arguments = dict(locals())  # what a pickled copy is made again from (__reduce__)
        del arguments["self"]
        self._arguments = arguments
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error should be 'raise' or 'skip', but got on_error={on_error!r}")
        if (not isinstance(read_buffer_bytes, int) or isinstance(read_buffer_bytes, bool)
                or read_buffer_bytes < 0):
            raise ValueError("read_buffer_bytes should be a non-negative integer, but got "
                             f"read_buffer_bytes={read_buffer_bytes!r}")
        self.read_buffer_bytes = read_buffer_bytes
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed should be an int or None, but got seed={seed!r}")
        if seed is not None and not -(1 << 63) <= seed < 1 << 64:  # torch.Generator's range
            raise ValueError(f"seed should be in [-2**63, 2**64), as torch.Generator.manual_seed "
                             f"takes it, but got seed={seed!r}")
        if seed is not None and generator is not None:
            raise ValueError("seed option is mutually exclusive with generator; pass one of them")
        collate_fn = collate_with_mix(collate_fn, batch_mix)  # batch_mix=: a MixCollate
        self.batch_mix = batch_mix
        dataset = resolve_dataset(dataset, transform, target_transform, {
            "storage_options": storage_options, "cache_dir": cache_dir,
            "cache_bytes": cache_bytes})
        self.order = resolve_order(order, shard_window, dataset, sampler=sampler,
                                   batch_sampler=batch_sampler)
        self.shard_window = shard_window
        torch_generator = generator
        if seed is not None:
            torch_generator = torch.Generator()
            torch_generator.manual_seed(seed)

        def torch_loader_with(shuffle: Any, sampler: Any) -> TorchDataLoader:
            # torch's own constructor validates the arguments, with torch's messages.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="This DataLoader will create")
                return TorchDataLoader(
                    dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
                    collate_fn, pin_memory, drop_last, timeout, worker_init_fn,
                    multiprocessing_context, torch_generator, prefetch_factor=prefetch_factor,
                    persistent_workers=persistent_workers, pin_memory_device=pin_memory_device,
                    in_order=in_order)

        torch_loader = torch_loader_with(shuffle, sampler)
        if num_workers > 0 and prefetch_factor is not None and prefetch_factor < 1:
            # torch's constructor takes 0 and its first iter() fails an assert; here at once
            raise ValueError("prefetch_factor should be a positive integer (batches decoded "
                             f"ahead), but got prefetch_factor={prefetch_factor!r}")
        self.device = resolve_device(device)
        check_share("hw_decoder_load", hw_decoder_load)
        self.hw_decoder_load = hw_decoder_load
        if scaled_decode not in ("auto", "off"):
            raise ValueError(f"scaled_decode should be 'auto' or 'off', but got {scaled_decode=!r}")
        self.scaled_decode = scaled_decode
        self.on_error = on_error
        self.strict = strict
        self.dataset = dataset
        for name in _COPIED:
            setattr(self, name, getattr(torch_loader, name))
        self.skipped: list[str] = []
        self._skips = SkipLog(self.skipped)  # its epochs note their skips in loader.skipped
        self._records: list[EpochRecord] = []  # its epochs' records: see last_batch_indices
        self._decoder: Any = None
        self._decoder_size = 0
        self._decoder_dirty = False  # a reset of it was interrupted: build a new one
        self._live: weakref.ref | None = None
        self._last_maker: weakref.WeakMethod | None = None  # see __iter__
        self._iterators: weakref.WeakSet = weakref.WeakSet()  # close() ends them all
        self._pid = os.getpid()  # a forked child starts afresh: see _after_fork
        self._iter_lock = threading.Lock()  # see __iter__
        self._collate_arg = collate_fn
        self._signature = dataset_signature(dataset)  # see _follow_dataset
        reason, self._source, split = self._fast_path(dataset, worker_init_fn,
                                                      multiprocessing_context)
        self.fallback_reason = reason
        self._use_split(split, reason, stacklevel=3)  # the caller's line
        if reason is not None:
            if strict:
                raise ValueError(f"fastload.DataLoader cannot run this on DALI: {reason} "
                                 "(strict=True forbids the torch fallback)")
            warnings.warn(f"fastload.DataLoader: {reason}; running torch.utils.data.DataLoader "
                          "instead (same batches, no speed-up; strict=True makes this an error)",
                          FallbackWarning, stacklevel=2)
            own = self._fallback_sampler(shuffle, seed, sampler is None and batch_sampler is None)
            if own is not None:  # torch's loader reads fastload's order (shard-aware, by rank)
                torch_loader = torch_loader_with(None, own)
                self.sampler, self.batch_sampler = torch_loader.sampler, torch_loader.batch_sampler
            self._fallback_epoch = 0  # the next iter()'s epoch of that order
            torch_loader.check_worker_number_rationality()
            if self.num_workers > 0:
                _collect_before_forks()
            self._torch = torch_loader
            self._order = None
        else:
            self._torch = None
            self._fast_init(shuffle, sampler, batch_sampler, generator, seed)
        self._initialized = True

    def _use_split(self, split: Any, reason: str | None, stacklevel: int) -> None:
        """Take ``split`` (the dataset's transform as DALI graph and torch suffix) as the plan
        of the next epochs; warn once per missing kernel it would run (``stacklevel``: the
        caller's frame, counted from here)."""
        self._plan = split.prefix if split is not None else None
        self._stage = SampleStage(split.suffix if split is not None else None,
                                  self.collate_fn, self.num_workers)
        self.plan = make_plan(split, self._collate_arg, self.device.type,
                              max(1, self.num_workers), reason, self._stage)
        log.debug("plan of a DataLoader over %s: %s", _name(self.dataset), self.plan)
        if reason is None:
            for message in missing_kernel_messages(split, self.device.type,
                                                   scaled_decode=self.scaled_decode,
                                                   batch_mix=self.batch_mix is not None):
                warnings.warn(message, FallbackWarning, stacklevel=stacklevel)

    def _follow_dataset(self) -> None:
        """At ``iter()``: where the dataset's transform, target_transform, samples or Subset
        indices changed since the plan was made (progressive resizing, say), make it again,
        as torch's loader, which reads them at each sample, would use the new ones."""
        signature = dataset_signature(self.dataset)
        if signature == self._signature:
            return
        reason, source, split = self._fast_path(self.dataset, self.worker_init_fn,
                                                self.multiprocessing_context)
        if reason is not None:
            raise ValueError(
                "the dataset changed since this fastload.DataLoader was made, and DALI cannot "
                f"run it now: {reason}; make a new fastload.DataLoader for it (it runs torch's "
                "loader where DALI cannot)")
        if len(source) != len(self._source):
            raise ValueError(
                f"the dataset holds {len(source)} samples now, {len(self._source)} when this "
                "fastload.DataLoader was made (its sampler is of that length); make a new "
                "fastload.DataLoader for it")
        old = self._live() if self._live is not None else None
        if old is None or not old.running:  # else the running epoch keeps its stage
            self._stage.close()
        self._source = source
        self._use_split(split, None, stacklevel=4)  # the line calling iter()
        self._decoder_dirty = True  # the shared graph is the old plan's: made again
        self._signature = signature

    def _fast_path(self, dataset: Any, worker_init_fn: Any,
                   mp_context: Any) -> tuple[str | None, Any, Any]:
        """``(None, source, split plan)`` when DALI can make the batches, else
        ``(reason, None, None)``."""
        if self.batch_sampler is None:
            return "batch_size=None (no automatic batching) yields single samples", None, None
        if self.num_workers > 0 and worker_init_fn is not None:
            return f"worker_init_fn={_name(worker_init_fn)} needs worker processes", None, None
        if self.num_workers > 0 and mp_context is not None:
            return "multiprocessing_context= needs worker processes", None, None
        try:
            source = make_source(dataset, self.read_buffer_bytes)
        except NotASource as err:
            return str(err), None, None
        try:
            from fastload.pipelines import split_transform as split
        except ImportError as err:  # DALI or the graph package unavailable
            return f"the DALI graph package cannot be imported ({err})", None, None
        try:
            plan = split(source.transform, "gpu" if self.device.type == "cuda" else "cpu")
        except ValueError as err:  # UnsupportedTransform is a ValueError
            return str(err), None, None
        return None, source, plan

    def _fast_init(self, shuffle: Any, sampler: Any, batch_sampler: Any,
                   generator: torch.Generator | None, seed: int | None) -> None:
        # The base seed is seed=, else drawn at the first iter() (fastload.loader.iter_draws):
        # the constructor takes nothing from the global generators, as torch's does not.
        base_seed = seed
        self.generator = generator
        self._seed_given = seed is not None
        self._iterated = False
        own = None
        if sampler is None and batch_sampler is None:
            world_size, rank = distributed_settings()
            if self.order == "shards":
                own = ShardShuffleSampler(self.dataset, world_size, rank, bool(shuffle),
                                          base_seed, self.drop_last,
                                          shard_window=self.shard_window)
                if own.num_items != len(self._source):
                    raise ValueError(f"order='shards' needs len(dataset) to be the set's "
                                     f"{own.num_items} records, but it is {len(self._source)}")
                if shuffle:
                    warn_if_class_sorted(self.dataset, self.shard_window, stacklevel=4)
            else:
                own = EpochSampler(len(self._source), shuffle=bool(shuffle), seed=base_seed,
                                   num_replicas=world_size, rank=rank, drop_last=self.drop_last)
            self.sampler = own
            self.batch_sampler = BatchSampler(own, self.batch_size, self.drop_last)
        self._rank = distributed_settings()[1]
        self._order = BatchOrder(self.batch_sampler, own, self.batch_size, self.drop_last,
                                 base_seed, len(self._source))

    def _fallback_sampler(self, shuffle: Any, seed: int | None,
                          no_sampler: bool) -> EpochSampler | None:
        """fastload's order as a sampler of torch's loader, where the fast path would have
        drawn it: the shard-aware order (``order="shards"``), or under torch.distributed with
        no ``sampler``/``batch_sampler`` this rank's share, as the fast path (and
        DistributedSampler) shards; None otherwise (torch's own sampler). Seeded by ``seed``,
        else (one process) a seed drawn per epoch from torch's default generator, as
        RandomSampler draws, or (torch.distributed) 0, as DistributedSampler's; each ``iter()``
        takes the next epoch, ``set_epoch`` chooses it."""
        world_size, rank = distributed_settings()
        if seed is None and world_size > 1:
            seed = 0
        if self.order == "shards":
            return ShardShuffleSampler(self.dataset, shuffle=bool(shuffle), seed=seed,
                                       drop_last=self.drop_last, shard_window=self.shard_window)
        if no_sampler and world_size > 1:
            return EpochSampler(len(self.dataset), shuffle=bool(shuffle), seed=seed,
                                num_replicas=world_size, rank=rank, drop_last=self.drop_last)
        return None

    def __reduce__(self) -> tuple:
        """Pickled (and ``copy.deepcopy``'d) as the arguments it was made with: the copy is a
        new loader over them, its graph built at its first ``iter()`` (torch's loader pickles;
        a decoder and its threads do not)."""
        return _made_again, (type(self), self._arguments)

    def __setattr__(self, attr: str, val: Any) -> None:
        if self.__dict__.get("_initialized") and attr in _FROZEN:
            raise ValueError(
                f"{attr} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(attr, val)

    def __len__(self) -> int:
        if self._torch is not None:
            return len(self._torch)
        return len(self.batch_sampler)

    def __iter__(self) -> Any:
        if self._torch is not None:
            if isinstance(self.sampler, EpochSampler):  # fastload's order: the next epoch
                self.sampler.set_epoch(self._fallback_epoch)
                self._fallback_epoch += 1
            return iter(self._torch)
        if self._pid != os.getpid():
            self._after_fork()
        self._follow_dataset()
        # the shards a sharded set refused last epoch are read again: they may be put right
        call_set_hook(self._source, "forget_refusals")
        # one iter() at a time chooses and resets the loader's graph: two threads' iter()
        # at once would both take it, and one reset it under the other's epoch
        with self._iter_lock:
            old = self._live() if self._live is not None else None
            if old is not None and old.running:
                # An unfinished iterator holds the loader's graph: as torch does, both iterate
                # (each its own epoch); this one gets a graph of its own, released when it ends.
                iterator = EpochIterator(self._epoch_context(private=True))
            else:
                # The last epoch on the loader's graph may still make batches though its handle
                # is gone (an interrupt inside iter(), say): it ends before the graph is reset.
                stop = self._last_maker() if self._last_maker is not None else None
                if stop is not None:
                    stop()
                iterator = EpochIterator(self._epoch_context(private=False))
                self._live = weakref.ref(iterator)
                self._last_maker = iterator.maker_stopper()
            self._iterators.add(iterator)
            latest = EpochRecord.latest(self._records)  # last_batch_indices after its iterator
            self._records = [it.record for it in self._iterators] + ([latest] if latest else [])
        iterator.start()  # last: an interrupt before it leaves no thread (see start())
        return iterator

    def _epoch_context(self, private: bool) -> EpochContext:
        """Start the next epoch (with torch's draws from the global generators, no more, no
        less) and gather what its iterator needs: a decoder of its own when ``private``."""
        from fastload.loader.iter_draws import begin_epoch

        reused = self.persistent_workers and self._iterated
        self._iterated = True
        epoch, at_first_next = begin_epoch(
            self._order, generator=self.generator, seed_given=self._seed_given,
            num_workers=self.num_workers, prefetch_factor=self.prefetch_factor,
            reused_workers=reused, num_items=len(self.dataset))
        if self.batch_size is not None:  # always so with the loader's own sampler
            max_batch = self.batch_size
        else:  # a user's batch_sampler: batch sizes are known only after running it
            max_batch = max((len(b) for b in epoch.remaining()), default=1)
        damage = DamageCheck(self.num_workers)
        decoder = self._decoder_for(max(1, max_batch), shared=not private)
        if not private:
            self._decoder_dirty = True  # until the reset is over (an interrupt may stop it)
            decoder.reset()
            self._decoder_dirty = False
        return EpochContext(
            source=self._source, order=self._order, epoch=epoch, at_first_next=at_first_next,
            decoder=decoder, owns_decoder=private, stage=self._stage, damage=damage,
            rank=self._rank, device=self.device, pin_memory=self.pin_memory,
            on_error=self.on_error, collate_fn=self.collate_fn,
            prefetch=self.prefetch_factor or 2, skips=self._skips, length=self.__len__,
            eager_batches=(self.prefetch_factor or 2) * self.num_workers)

    @property
    def last_batch_indices(self) -> list[int]:
        """The dataset indices of the batch this loader's iterators handed out last ([]
        before the first), read back from its epochs' records (``EpochIterator.record``)."""
        latest = EpochRecord.latest(self._records)
        return latest.last_indices if latest is not None else []

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` epoch ``epoch`` (shuffle order and augmentation seeds).

        Forwarded to a sampler that has ``set_epoch`` (e.g. DistributedSampler).

        Args:
            epoch: the epoch number (0 for the first) the next ``iter()`` makes.
        """
        if self._order is not None:
            self._order.set_epoch(epoch)
        elif isinstance(self.sampler, EpochSampler):  # the fallback's order: the next iter()
            self._fallback_epoch = epoch
            self.sampler.set_epoch(epoch)
        if not isinstance(self.sampler, EpochSampler) and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Position to resume from, for :meth:`load_state_dict`.

        Returns:
            The epoch, the batches yielded, the seed (and, for a user's sampler or
                batch_sampler, the remaining batches' indices and the rank they belong to):
                tensors and plain values only, so ``torch.save`` keeps it with a checkpoint.

        Raises:
            ValueError: the loader runs torch's DataLoader (the fallback).
        """
        if self._order is None:
            raise ValueError(f"state_dict() needs the DALI path, but this loader runs torch's "
                             f"DataLoader because {self.fallback_reason}")
        return self._order.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``.

        The next ``iter()`` yields exactly the batches the saved run had not yet yielded,
        with the same samples in the same order. Under torch.distributed with no
        ``sampler=``, a state saved by any rank of a job of another world size finishes that
        epoch from the samples no rank had yet consumed, re-sharded over this job's ranks
        (elastic resume).

        Args:
            state: what :meth:`state_dict` returned, for the same dataset.

        Raises:
            ValueError: the loader runs torch's DataLoader (the fallback), or ``state`` does
                not fit this loader (a field missing or out of range, another data set, with
                a user's sampler another world size or rank).
            TypeError: a field of ``state`` has the wrong type.
        """
        if self._order is None:
            raise ValueError(f"load_state_dict() needs the DALI path, but this loader runs "
                             f"torch's DataLoader because {self.fallback_reason}")
        self._order.load_state_dict(state)

    def close(self) -> None:
        """Release the DALI graph now and end every iterator of this loader.

        Idempotent. The ended iterators' ``next()`` then says so; a later ``iter()`` builds
        the graph again.
        """
        if self._torch is None and self._pid != os.getpid():
            self._after_fork()  # the parent's iterators and graph are not this process's
        for old in list(self._iterators):
            old.close("loader.close()")
        decoder, self._decoder, self._decoder_size = self._decoder, None, 0
        if decoder is not None:
            decoder.close()
        self._stage.close()

    def _after_fork(self) -> None:
        """In a forked child: the parent's decoder, threads and iterator are not usable here
        (their threads did not come along), so the next iterator builds its own."""
        self._pid = os.getpid()
        self._iter_lock = threading.Lock()  # another thread's iter() may have held it
        decoder, self._decoder, self._decoder_size = self._decoder, None, 0
        if decoder is not None:
            decoder.close()  # in a child this only keeps DALI's pipeline alive, untouched
        self._live = self._last_maker = None
        self._iterators = weakref.WeakSet()
        self._stage.after_fork()

    def _decoder_for(self, max_batch: int, shared: bool = True) -> Any:
        """The loader's decoder for batches up to ``max_batch`` (or, not ``shared``, a new
        one for an iterator that runs beside the one holding the loader's)."""
        if (shared and self._decoder is not None and self._decoder_size >= max_batch
                and not self._decoder_dirty):
            return self._decoder
        from fastload.pipelines import BatchDecoder

        if shared and self._decoder is not None:
            self._decoder.close()
            self._decoder, self._decoder_dirty = None, False
        cuda = self.device.type == "cuda"
        decoder = BatchDecoder(
            self._plan, max_batch_size=max_batch, num_threads=max(1, self.num_workers),
            device="gpu" if cuda else "cpu", device_id=self.device.index if cuda else None,
            queue_depth=max(1, self.prefetch_factor or 2), hw_decoder_load=self.hw_decoder_load,
            scaled_decode=self.scaled_decode)
        if shared:
            self._decoder, self._decoder_size = decoder, max_batch
        return decoder

    def __del__(self) -> None:
        decoder = self.__dict__.get("_decoder")
        if decoder is None:
            return
        try:
            decoder.close()  # in a forked child this keeps DALI's pipeline (see BatchDecoder.close)
        except Exception:  # noqa: BLE001 - at interpreter exit, modules are torn down first
            pass


def _made_again(cls: type, arguments: dict) -> DataLoader:
    """A loader made from the arguments of a pickled one (see ``DataLoader.__reduce__``)."""
    return cls(**arguments)
