"""`fastload doctor`: what the machine gives fastload, one line of advice per gap, and --json."""

from __future__ import annotations

import email.message
import json
import os
import subprocess
import sys

import pytest

_XEON_WITH_AMX = {"model name": "Intel Xeon",
                  "flags": "avx2 avx512f avx512_bf16 amx_tile amx_bf16"}


def _probe(tmp_path):
    from fastload.utils.machine import machine_report

    return machine_report(tmp_path, import_torch=False)


def test_doctor_prints_every_section_and_exits_0(capsys):
    from fastload.tools.cli import main

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    keys = [line.split("  ")[0] for line in out.splitlines() if not line.startswith((" ", "advice"))]
    for key in ("fastload", "torch", "torchvision", "DALI", "timm", "kernel _normalize",
                "kernel _augment", "kernel _affine", "kernel _jpegroi", "kernel _jpegcheck",
                "CPU", "CPU flags",
                "cores", "cache"):
        assert key in keys, out
    assert "GPU" in out and "native bf16" in out
    assert out.splitlines()[-1].startswith(("  - ", "advice: none"))


def test_doctor_json_is_one_object_naming_kernels_cpu_and_cache(capsys):
    from fastload.tools.cli import main
    from fastload.utils.machine import KERNELS

    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in report["kernels"]] == list(KERNELS)
    assert set(report["cpu"]["flags"]) == {"avx2", "avx512f", "avx512_bf16", "amx_tile",
                                           "amx_bf16"}
    assert report["cpu"]["usable_cores"] >= 1 and report["cache_free_bytes"] > 0
    assert report["versions"]["torch"] and isinstance(report["advice"], list)


def test_a_missing_kernel_is_named_with_what_runs_instead_and_how_to_build_it(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setitem(sys.modules, "fastload.pipelines._jpegroi", None)  # import fails
    report = _probe(tmp_path)
    jpegroi = next(k for k in report.kernels if k.name == "_jpegroi")
    assert not jpegroi.loaded and "halted" in jpegroi.detail
    assert report.libjpeg is None
    advice = [line for line in report.advice if "_jpegroi" in line]
    assert len(advice) == 1
    assert "decoded whole at their DCT scale" in advice[0]
    assert "libjpeg62-turbo-dev" in advice[0] and "--no-binary fastload-dali" in advice[0]


def test_the_strict_checks_kernel_says_how_many_files_it_decodes_at_once(capsys, tmp_path):
    from fastload.data.format import _jpegcheck
    from fastload.tools.cli import main

    at_once = _jpegcheck.WIDE_LANES or 2
    report = _probe(tmp_path)
    assert (report.check_files_at_once, report.check_pass) == (at_once, _jpegcheck.WIDE_PASS)
    assert main(["doctor"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("kernel _jpegcheck"))
    assert f"decodes {at_once} files at once" in line
    isa = {"avx512": "(AVX-512)", "avx2": "(AVX2)", "avx2-loads": "(AVX2)",
           "": "(without AVX2 or AVX-512)"}
    assert isa[_jpegcheck.WIDE_PASS] in line


def test_the_strict_checks_pass_without_avx512_is_named(tmp_path):
    from fastload.data.format import _jpegcheck

    if "avx2" not in _jpegcheck.WIDE_PASSES:
        pytest.skip("this CPU has no AVX2")
    out = subprocess.run([sys.executable, "-m", "fastload", "doctor"], capture_output=True,
                         text=True, check=True, cwd=tmp_path,
                         env={**os.environ, "FASTLOAD_CPU_CAPABILITY": "avx2"}).stdout
    line = next(line for line in out.splitlines() if line.startswith("kernel _jpegcheck"))
    assert "decodes 16 files at once (AVX2)" in line


def test_a_missing_strict_check_kernel_is_named_with_its_fallback(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "fastload.data.format._jpegcheck", None)  # import fails
    report = _probe(tmp_path)
    check = next(k for k in report.kernels if k.name == "_jpegcheck")
    assert not check.loaded and report.check_files_at_once is None
    (advice,) = [line for line in report.advice if "_jpegcheck" in line]
    assert "decodes every file at 1/8 scale" in advice and "libjpeg62-turbo-dev" in advice


def test_cpu_without_native_bf16_gets_the_amp_advice(monkeypatch, tmp_path):
    from fastload.utils import machine

    epyc = {"model name": "AMD EPYC 7B13", "flags": "fpu sse2 avx avx2 fma"}
    monkeypatch.setattr(machine, "_cpuinfo", lambda: epyc)
    report = _probe(tmp_path)
    assert report.cpu.model == "AMD EPYC 7B13"
    assert report.cpu.flags == {"avx2": True, "avx512f": False, "avx512_bf16": False,
                                "amx_tile": False, "amx_bf16": False}
    assert not report.cpu.native_bf16
    assert any("bf16 autocast is emulated" in line and "amp='off'" in line
               for line in report.advice)


def test_cpu_with_amx_has_native_bf16_and_no_amp_advice(monkeypatch, tmp_path):
    from fastload.utils import machine

    monkeypatch.setattr(machine, "_cpuinfo", lambda: _XEON_WITH_AMX)
    for variable in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(variable, raising=False)
    report = _probe(tmp_path)
    assert report.cpu.native_bf16
    assert not any("bf16" in line for line in report.advice)


@pytest.mark.parametrize("variable", ["ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"])
def test_onednn_capped_below_its_bf16_isas_makes_bf16_emulated_and_says_why(monkeypatch,
                                                                            tmp_path, variable):
    from fastload.utils import machine

    monkeypatch.setattr(machine, "_cpuinfo", lambda: _XEON_WITH_AMX)
    monkeypatch.setattr(machine.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv(variable, "avx2")
    report = _probe(tmp_path)
    assert not report.cpu.native_bf16
    assert report.cpu.bf16_capped_by == f"{variable}=avx2"
    assert any(line.startswith(f"{variable}=avx2 keeps torch's matmuls") and "amp='off'" in line
               for line in report.advice)


def test_onednn_capped_at_a_bf16_isa_keeps_native_bf16(monkeypatch, tmp_path):
    from fastload.utils import machine

    monkeypatch.setattr(machine, "_cpuinfo", lambda: _XEON_WITH_AMX)
    monkeypatch.setattr(machine.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    report = _probe(tmp_path)
    assert report.cpu.native_bf16 and report.cpu.bf16_capped_by is None
    assert not any("bf16" in line for line in report.advice)


def test_the_cli_prints_advice_in_flags(monkeypatch, capsys):
    from fastload.tools.cli import main
    from fastload.utils import machine

    monkeypatch.setattr(machine, "_cpuinfo", lambda: {"model name": "x", "flags": "avx2"})
    monkeypatch.setattr(machine, "_gpus", lambda torch_module: (False, []))
    assert main(["doctor"]) == 0
    assert "train with --amp 'off'" in capsys.readouterr().out


def test_two_dali_flavours_installed_are_named_with_the_commands_that_fix_it(monkeypatch,
                                                                             tmp_path):
    from fastload.utils import machine

    real = machine._version
    both = {"nvidia-dali-cuda120": "2.4.0", "nvidia-dali-cuda130": "2.4.0"}
    monkeypatch.setattr(machine, "_version", lambda name: both.get(name) or real(name))
    report = _probe(tmp_path)
    assert report.dali_distributions == ["nvidia-dali-cuda120", "nvidia-dali-cuda130"]
    line = next(line for line in report.advice if "two DALI flavours" in line)
    assert "pip uninstall -y nvidia-dali-cuda120" in line  # torch's CUDA unknown: keep 13
    assert "--no-deps nvidia-dali-cuda130" in line


def test_free_disk_is_that_of_the_nearest_existing_folder(tmp_path):
    from fastload.utils.machine import machine_report

    report = machine_report(tmp_path / "not" / "yet", import_torch=False)
    assert report.cache_dir == str(tmp_path / "not" / "yet")
    assert report.cache_free_bytes is not None and report.cache_free_bytes > 0


def _metadata(*requires: str, extras=("train", "bench", "test")) -> email.message.Message:
    meta = email.message.Message()
    meta["Name"] = "fastload-dali"
    for extra in extras:
        meta["Provides-Extra"] = extra
    for line in requires:
        meta["Requires-Dist"] = line
    return meta


def test_extras_are_present_when_all_their_requirements_are_installed():
    from fastload.utils.machine import extras_present

    meta = _metadata("numpy>=1", "pytest>=8; extra == 'bench'",
                     "surely-not-installed-fastload-probe>=1; extra == 'train'",
                     "fastload-dali[bench]; extra == 'test'")
    assert extras_present(meta) == {"train": False, "bench": True, "test": True}
    meta = _metadata("fastload-dali[train,bench]; extra == 'test'",
                     "surely-not-installed-fastload-probe; extra == 'train'")
    assert extras_present(meta)["test"] is False


@pytest.mark.parametrize("code, cuda", [(12986, "12.9"), (13000, "13.0"), (12080, "12.0")])
def test_dali_cuda_version_is_major_dot_minor(monkeypatch, code, cuda):
    import nvidia.dali

    from fastload.utils.machine import dali_flavours

    monkeypatch.setattr(nvidia.dali, "__cuda_version__", code, raising=False)
    assert dali_flavours()[2] == cuda
