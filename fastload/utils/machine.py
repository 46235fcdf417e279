"""What this machine gives fastload: the probes behind ``fastload doctor``.

Each probe reads what is installed or what the kernel reports and never fails: a missing
package, kernel module or device is a finding, with one line of advice in
:attr:`MachineReport.advice`. The C kernels are looked up by module name (a missing one is
what is being diagnosed), so this module still imports nothing from the rest of fastload.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import platform
import re
import shutil
import sys
from pathlib import Path
from typing import Any

__all__ = ["DISTRIBUTION", "KERNELS", "CpuInfo", "GpuInfo", "KernelStatus", "MachineReport",
           "cpu_info", "dali_flavours", "extras_present", "kernel_fix", "kernel_status",
           "machine_report"]

DISTRIBUTION = "fastload-dali"  # the name on the package index; the import name is fastload

# Optional C kernel (module under fastload.pipelines, or the package _KERNEL_PACKAGES names)
# -> what runs instead when it is missing.
KERNELS: dict[str, str] = {
    "_normalize": "normalize and layout change in torch ops (same values, slower)",
    "_augment": "colour, mix and grid augmentations in torch ops (same values, slower)",
    "_affine": "PIL-exact affine warps in torch ops (same values, slower)",
    "_jpegroi": "large JPEGs decoded whole at their DCT scale, then cropped (slower)",
    "_jpegcheck": "the strict JPEG check (convert's default --check decode, a folder file's "
                  "first read, verify --full) decodes every file at 1/8 scale (the same "
                  "verdicts, 3-6x the CPU per file)",
}
_KERNEL_PACKAGES = {"_jpegcheck": "fastload.data.format"}
_NEEDS_LIBJPEG = ("_jpegroi", "_jpegcheck")  # built with libjpeg-turbo's headers too

# DALI's distributions, one per CUDA major; both install the same `nvidia.dali` package.
DALI_DISTRIBUTIONS: dict[int, str] = {12: "nvidia-dali-cuda120", 13: "nvidia-dali-cuda130"}

# /proc/cpuinfo flags that decide fastload's CPU paths (x86: "flags"; aarch64: "Features").
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # the last one is aarch64's
# oneDNN (torch's CPU matmuls) takes the ISA its variable names at most: capped below its bf16
# ISAs (AVX512_CORE_BF16 and up), bf16 matmuls are emulated whatever the CPU's flags say.
_ONEDNN_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
_ONEDNN_BELOW_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2",
                                "AVX512_CORE", "AVX512_CORE_VNNI"})

# Compute capabilities of the data-centre GPUs with a hardware JPEG decoder that DALI's
# mixed decoder uses (A100/A30, H100/H200, B200); other GPUs decode JPEGs with CUDA cores.
_HW_JPEG_CAPABILITIES = {(8, 0), (9, 0), (10, 0)}


@dataclasses.dataclass(frozen=True)
class KernelStatus:
    name: str  # module under fastload.pipelines (_jpegcheck: under fastload.data.format)
    loaded: bool
    detail: str  # the file that loaded, or why the import failed
    fallback: str  # what runs instead when it is missing


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    model: str
    machine: str  # platform.machine(): x86_64, aarch64
    cores: int  # os.cpu_count()
    usable_cores: int  # this process's affinity mask
    capability: str | None  # torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...
    flags: dict[str, bool]
    native_bf16: bool
    bf16_capped_by: str | None = None  # "ONEDNN_MAX_CPU_ISA=AVX2": flags have it, oneDNN not


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    capability: tuple[int, int]
    memory_gib: float
    hardware_jpeg_decoder: bool


@dataclasses.dataclass
class MachineReport:
    fastload: str | None  # the installed distribution's version
    python: str
    platform: str
    versions: dict[str, str | None]  # torch, torchvision, nvidia-dali, timm, ...
    torch_cuda: str | None  # torch.version.cuda: None for a CPU build
    dali_cuda: str | None  # the CUDA the loaded DALI was built for, "13.0"
    dali_distributions: list[str]  # nvidia-dali-cuda1x0 distributions installed
    kernels: list[KernelStatus]
    libjpeg: str | None  # the libjpeg that _jpegroi mapped, None when it did not load
    libjpeg_turbo: bool
    cpu: CpuInfo
    cuda_available: bool
    gpus: list[GpuInfo]
    cache_dir: str
    cache_free_bytes: int | None
    extras: dict[str, bool]  # extra -> all its requirements installed
    advice: list[str] = dataclasses.field(default_factory=list)
    # JPEGs the strict check decodes at once in a thread: 32 with AVX-512, 16 with AVX2,
    # else 2; and the pass ("avx512", "avx2", "" for two at a time); None without its kernel
    check_files_at_once: int | None = None
    check_pass: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _own_metadata() -> importlib.metadata.PackageMetadata | None:
    for name in (DISTRIBUTION, "fastload"):  # an editable install made before the rename
        try:
            meta = importlib.metadata.metadata(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if name == DISTRIBUTION or (meta.get("Summary") or "").startswith("Fast image"):
            return meta
    return None


def dali_flavours() -> tuple[list[str], str | None, str | None]:
    """(DALI distributions installed, the loaded DALI's version, the CUDA it was built for)."""
    installed = [d for d in DALI_DISTRIBUTIONS.values() if _version(d) is not None]
    try:
        import nvidia.dali as dali
    except Exception:  # noqa: BLE001 - any failure to import DALI is the finding
        return installed, None, None
    code = getattr(dali, "__cuda_version__", None)  # 12986: CUDA 12.9.86; 13000: 13.0.0
    cuda = f"{int(code) // 1000}.{int(code) % 1000 // 100}" if code else None
    return installed, str(getattr(dali, "__version__", None)), cuda


def _kernel_module(name: str) -> str:
    return f"{_KERNEL_PACKAGES.get(name, 'fastload.pipelines')}.{name}"


def kernel_fix(name: str) -> str:
    """How to get the optional C kernel ``name`` where it is missing (a sentence's end)."""
    build = ("a C compiler and libjpeg-turbo's headers (Debian/Ubuntu: apt install "
             "libjpeg62-turbo-dev or libjpeg-turbo8-dev)" if name in _NEEDS_LIBJPEG
             else "a C compiler")
    return (f"install fastload's manylinux wheel, or rebuild from source with {build}: "
            f"pip install --force-reinstall --no-binary {DISTRIBUTION} {DISTRIBUTION}")


def kernel_status(kernels: dict[str, str] = KERNELS) -> list[KernelStatus]:
    """Import each optional C kernel and say whether it loaded."""
    found = []
    for name, fallback in kernels.items():
        try:
            module = importlib.import_module(_kernel_module(name))
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken shared object
            found.append(KernelStatus(name, False, f"{type(exc).__name__}: {exc}", fallback))
        else:
            found.append(KernelStatus(name, True, str(getattr(module, "__file__", "")), fallback))
    return found


def _check_pass(kernels: list[KernelStatus]) -> tuple[int | None, str | None]:
    """(files at once, pass) of the strict check's kernel, (None, None) without it"""
    if not any(k.loaded and k.name == "_jpegcheck" for k in kernels):
        return None, None
    check = importlib.import_module(_kernel_module("_jpegcheck"))  # loaded: kernel_status
    return getattr(check, "WIDE_LANES", 0) or 2, getattr(check, "WIDE_PASS", "")


def _mapped_libjpeg() -> str | None:
    """The libjpeg shared object this process has mapped (after _jpegroi was imported)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if re.search(r"/libjpeg[^/]*\.so", path):
                    return path
    except OSError:
        pass
    return None


def _is_turbo(path: str) -> bool:
    try:
        return b"LIBJPEGTURBO" in Path(path).read_bytes()  # libjpeg-turbo's symbol versions
    except OSError:
        return False


def _cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return fields
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # the first processor's block is enough
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    return fields


def onednn_bf16_cap() -> str | None:
    """``"NAME=VALUE"`` where an oneDNN variable caps its ISA below its bf16 ones (so torch
    emulates bf16 matmuls on any CPU), else None."""
    for name in _ONEDNN_CAP_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:  # oneDNN reads the first it finds
            return f"{name}={value}" if value.upper() in _ONEDNN_BELOW_BF16 else None
    return None


def cpu_info(torch_module: Any = None) -> CpuInfo:
    fields = _cpuinfo()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    model = fields.get("model name") or fields.get("Model") or platform.processor() or "unknown"
    capability = None
    if torch_module is not None:
        try:
            capability = str(torch_module.backends.cpu.get_cpu_capability())
        except Exception:  # noqa: BLE001 - older torch
            capability = None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    has_bf16 = any(f in flags for f in _NATIVE_BF16_FLAGS)
    capped = onednn_bf16_cap() if has_bf16 and platform.machine() == "x86_64" else None
    return CpuInfo(
        model=model, machine=platform.machine(), cores=os.cpu_count() or 1, usable_cores=usable,
        capability=capability, flags={f: f in flags for f in CPU_FLAGS},
        native_bf16=has_bf16 and capped is None, bf16_capped_by=capped)


def _gpus(torch_module: Any) -> tuple[bool, list[GpuInfo]]:
    if torch_module is None:
        return False, []
    try:
        if not torch_module.cuda.is_available():
            return False, []
        found = []
        for index in range(torch_module.cuda.device_count()):
            props = torch_module.cuda.get_device_properties(index)
            capability = (int(props.major), int(props.minor))
            found.append(GpuInfo(index, str(props.name), capability,
                                 round(props.total_memory / 2**30, 1),
                                 capability in _HW_JPEG_CAPABILITIES))
        return True, found
    except Exception:  # noqa: BLE001 - a driver that fails is reported as no GPU
        return False, []


def extras_present(metadata: importlib.metadata.PackageMetadata | None = None) -> dict[str, bool]:
    """Each extra of fastload's installed metadata -> whether all its requirements are installed
    (the extras that only name other extras of fastload, such as ``test``, count theirs)."""
    meta = metadata if metadata is not None else _own_metadata()
    if meta is None:
        return {}
    try:
        from packaging.requirements import Requirement
    except ImportError:  # packaging comes with DALI; without it the extras cannot be read
        return {}
    extras = list(meta.get_all("Provides-Extra") or [])
    needs: dict[str, list[Any]] = {e: [] for e in extras}
    for line in meta.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None:
            continue
        for extra in extras:
            if requirement.marker.evaluate({"extra": extra}):
                needs[extra].append(requirement)
    own = {DISTRIBUTION, "fastload"}

    def present(extra: str, seen: frozenset[str] = frozenset()) -> bool:
        for requirement in needs.get(extra, []):
            if requirement.name in own:
                if not all(present(e, seen | {extra}) for e in requirement.extras
                           if e not in seen):
                    return False
            elif _version(requirement.name) is None:
                return False
        return True

    return {extra: present(extra) for extra in extras}


def _free_bytes(folder: Path) -> int | None:
    for candidate in (folder, *folder.parents):  # the cache folder may not exist yet
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def _advice(report: MachineReport) -> list[str]:
    pip = f"pip install '{DISTRIBUTION}"
    lines = []
    if report.versions.get("torch") is None:
        lines.append("torch is not installed: pip install torch torchvision "
                     "(for a CPU-only machine, from https://download.pytorch.org/whl/cpu)")
    if report.versions.get("nvidia-dali") is None:
        lines.append(f"DALI does not import: {pip}[cuda13]' (torch built for CUDA 13) or "
                     f"{pip}[cuda12]' (CUDA 12); see docs/install.md")
    if len(report.dali_distributions) > 1:
        keep = DALI_DISTRIBUTIONS.get(int(float(report.torch_cuda or 13)), "nvidia-dali-cuda130")
        drop = " ".join(d for d in report.dali_distributions if d != keep)
        lines.append(f"two DALI flavours are installed ({', '.join(report.dali_distributions)}) "
                     f"and share one `nvidia.dali` folder: pip uninstall -y {drop} && pip "
                     f"install --force-reinstall --no-deps {keep}")
    if report.torch_cuda and report.dali_cuda and report.cuda_available:
        if report.torch_cuda.split(".")[0] != report.dali_cuda.split(".")[0]:
            major = report.torch_cuda.split(".")[0]
            lines.append(f"torch is built for CUDA {report.torch_cuda} but DALI for CUDA "
                         f"{report.dali_cuda}: {pip}[cuda{major}]' (docs/install.md)")
    for kernel in report.kernels:
        if kernel.loaded:
            continue
        lines.append(f"C kernel {kernel.name} is missing, so {kernel.fallback}: "
                     f"{kernel_fix(kernel.name)}")
    if report.libjpeg and not report.libjpeg_turbo:
        lines.append(f"{report.libjpeg} is not libjpeg-turbo: region decoding is slower and its "
                     "results may differ from DALI's; install libjpeg-turbo")
    cpu = report.cpu
    if cpu.bf16_capped_by and not report.cuda_available:
        lines.append(f"{cpu.bf16_capped_by} keeps torch's matmuls (oneDNN) from this CPU's "
                     "bf16 instructions: bf16 autocast is emulated and slower than fp32; unset "
                     "it, or train with amp='off'")
    elif not cpu.native_bf16 and not report.cuda_available:
        lines.append("this CPU has no native bf16 (avx512_bf16/amx_bf16): bf16 autocast is "
                     "emulated and slower than fp32 here; train with amp='off'")
    if cpu.machine == "x86_64" and not cpu.flags.get("avx2"):
        lines.append("this CPU has no AVX2: torch and DALI run their slowest CPU paths")
    if cpu.usable_cores < 4:
        lines.append(f"{cpu.usable_cores} usable cores: CPU decoding is bound by them; a GPU "
                     "(DALI's mixed decoder) or pre-resized LMDB sets (convert --max-side) help")
    if report.cuda_available and report.gpus and not any(g.hardware_jpeg_decoder
                                                         for g in report.gpus):
        lines.append("no GPU here has a hardware JPEG decoder (A100, H100, H200, B200): DALI "
                     "decodes JPEGs on CUDA cores")
    if report.cache_free_bytes is not None and report.cache_free_bytes < 10 * 2**30:
        lines.append(f"{report.cache_free_bytes / 2**30:.1f} GiB free for the cache in "
                     f"{report.cache_dir}: set FASTLOAD_CACHE to a larger disk")
    missing = [e for e, ok in report.extras.items() if not ok and e in _EXTRA_USE]
    if missing:
        uses = "; ".join(f"[{e}] {_EXTRA_USE[e]}" for e in missing)
        lines.append(f"extras not installed: {uses}. Add those you use: "
                     f"{pip}[{','.join(missing)}]'")
    return lines


# Extra -> what needs it, for the advice lines (pyproject.toml says the same per extra).
_EXTRA_USE = {
    "train": "fastload finetune and export",
    "bench": "fastload bench and its chart",
    "photos": "fastload synth --photos",
    "sources": "fastload convert from parquet and WebDataset brace globs",
    "datasets": "fastload convert from a Hugging Face datasets folder",
    "remote": "sets at s3://, gs:// and other URLs",
}


def machine_report(cache_dir: str | os.PathLike, *, import_torch: bool = True) -> MachineReport:
    """Probe this machine for fastload (``cache_dir``: the shard cache's folder, whose free
    disk is reported). ``import_torch=False`` skips the probes that need torch."""
    torch_module = None
    if import_torch:
        try:
            import torch as torch_module
        except Exception:  # noqa: BLE001 - a torch that does not import is a finding
            torch_module = None
    kernels = kernel_status()
    libjpeg = _mapped_libjpeg() if any(k.loaded and k.name == "_jpegroi" for k in kernels) else None
    installed, dali_version, dali_cuda = dali_flavours()
    cuda_available, gpus = _gpus(torch_module)
    own = _own_metadata()
    versions = {
        "torch": _version("torch"),
        "torchvision": _version("torchvision"),
        "nvidia-dali": dali_version,
        "timm": _version("timm"),
        "pillow": _version("pillow"),
        "numpy": _version("numpy"),
        "lmdb": _version("lmdb"),
    }
    cache = Path(cache_dir).expanduser()
    report = MachineReport(
        fastload=own.get("Version") if own is not None else None,
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()} ({sys.platform})",
        versions=versions,
        torch_cuda=getattr(getattr(torch_module, "version", None), "cuda", None),
        dali_cuda=dali_cuda,
        dali_distributions=installed,
        kernels=kernels,
        libjpeg=libjpeg,
        libjpeg_turbo=bool(libjpeg) and _is_turbo(libjpeg),
        cpu=cpu_info(torch_module),
        cuda_available=cuda_available,
        gpus=gpus,
        cache_dir=str(cache),
        cache_free_bytes=_free_bytes(cache),
        extras=extras_present(own) if own is not None else {},
    )
    report.check_files_at_once, report.check_pass = _check_pass(kernels)
    report.advice = _advice(report)
    return report
