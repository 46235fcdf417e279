"""The fuzz harness of fastload's C extensions: ``make fuzz`` (README, "Fuzzing").

    python tests/fuzz/run.py --seconds 60 --seed 0          # fuzz (make fuzz / fuzz-short)
    python tests/fuzz/run.py --replay tests/fuzz/regressions  # replay saved cases

The extensions come from a sanitizer build (``FASTLOAD_SANITIZE=1 python setup.py build_ext
--build-lib build/fuzz``: AddressSanitizer + UndefinedBehaviorSanitizer, any report aborts)
and are loaded from their files, so neither the installed fastload nor torch is imported
where they run. This process (Pillow, the corpus, the mutations) starts a worker process
with libasan preloaded and hands it one case at a time (tests/fuzz/cases.py says what a case
is and what it must do); the worker answers each within ``--timeout`` seconds or is a hang.
A sanitizer report (the worker dies), a hang or a broken promise is saved under ``--out``
as a folder (case.json, data.jpg, report.txt) and shrunk into ``<folder>-min`` (the region
decoder's bytes cut to the shortest prefix, then chunks removed, while the same report
comes back); each prints its replay command. The cases come from ``--seed`` alone: a run is
the same run again. Exit status 1 if anything was found, 2 if the build is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# extension -> its folder under fastload/ in the build (_jpegcheck is the data layer's)
MODULES = {"_jpegroi": "pipelines", "_augment": "pipelines", "_affine": "pipelines",
           "_normalize": "pipelines", "_jpegcheck": "data/format"}

sys.path.insert(0, str(HERE))
import cases  # noqa: E402

# --------------------------------------------------------------------------- the worker

def _load(build: Path) -> dict:
    import importlib.machinery
    import importlib.util
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    mods = {}
    for name, folder in MODULES.items():
        path = build / "fastload" / folder / f"{name}{suffix}"
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        mods[name] = module
    return mods


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def worker(build: Path, fd_in: int, fd_out: int) -> None:
    """Runs cases read from fd_in, one answer line each on fd_out, until EOF."""
    mods = _load(build)
    os.write(fd_out, b'{"ready": true}\n')
    while True:
        try:
            header_len, data_len = struct.unpack(">II", _read_exact(fd_in, 8))
        except EOFError:
            return
        case = json.loads(_read_exact(fd_in, header_len))
        if data_len:
            case["data"] = _read_exact(fd_in, data_len)
        try:
            answer = {"outcome": cases.run(mods, case)}
        except cases.Finding as e:
            answer = {"finding": str(e)}
        os.write(fd_out, json.dumps(answer).encode() + b"\n")


# --------------------------------------------------------------------------- the parent side

def sanitizer_env() -> dict:
    """The environment of a process that loads the sanitizer build."""
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    env = dict(os.environ)
    env["LD_PRELOAD"] = libasan
    env["ASAN_OPTIONS"] = ("detect_leaks=0:allocator_may_return_null=1:"
                           "max_allocation_size_mb=4096:handle_abort=1")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


class Worker:
    """A sanitized worker process; :meth:`send` gives its answer, or why there is none."""

    def __init__(self, build: Path, log: Path) -> None:
        self.log = log
        parent_in, child_out = os.pipe()
        child_in, parent_out = os.pipe()
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(build),
                 str(child_in), str(child_out)], pass_fds=(child_in, child_out),
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=sanitizer_env(),
                cwd=ROOT)
        os.close(child_in)
        os.close(child_out)
        self.fd_in, self.fd_out = parent_in, parent_out
        self.buffer = b""
        ready = self._answer(120.0)
        if not isinstance(ready, dict) or not ready.get("ready"):
            raise RuntimeError(f"the sanitized worker did not start: {self.report()[-2000:]}")

    def _answer(self, timeout: float):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return "hang"
            ready, _, _ = select.select([self.fd_in], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.fd_in, 65536)
            if not chunk:
                self.proc.wait()
                return "died"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, case: dict, timeout: float):
        """The worker's answer (a dict), "hang" or "died"."""
        header = {k: v for k, v in case.items() if k != "data"}
        blob = json.dumps(header).encode()
        data = case.get("data", b"")
        try:
            os.write(self.fd_out, struct.pack(">II", len(blob), len(data)) + blob)
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd_out, view):]
        except BrokenPipeError:
            self.proc.wait()
            return "died"
        return self._answer(timeout)

    def report(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        for fd in (self.fd_in, self.fd_out):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def signature(answer, report: str) -> str:
    """What went wrong, in a line that a shrunk case must reproduce."""
    if isinstance(answer, dict):
        return "finding: " + answer["finding"].split(":")[0]
    if answer == "hang":
        return "hang"
    found = re.search(r"ERROR: AddressSanitizer: ([\w-]+)", report)
    if found:
        return "asan: " + found.group(1)
    found = re.search(r"runtime error: ([^\n]*?)(?: of type|$| \d)", report, re.M)
    if found:
        return "ubsan: " + found.group(1).strip()
    return "died: " + (report.strip().splitlines() or ["no report"])[-1][:200]


def save(case: dict, folder: Path, note: str, report: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    header = {k: v for k, v in case.items() if k != "data"}
    (folder / "case.json").write_text(json.dumps(header, indent=1) + "\n")
    if "data" in case:
        (folder / "data.jpg").write_bytes(case["data"])
    (folder / "report.txt").write_text(note + "\n\n" + report)


def load_case(folder: Path) -> dict:
    case = json.loads((folder / "case.json").read_text())
    if (folder / "data.jpg").exists():
        case["data"] = (folder / "data.jpg").read_bytes()
    elif "generate" in case:  # a corpus maker (tests/fuzz/corpus.py), not stored bytes
        import corpus

        case["data"] = getattr(corpus, case["generate"])()
    return case


def case_folders(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if (path / "case.json").exists():
            found.append(path)
        else:
            found.extend(sorted(p.parent for p in path.glob("*/case.json")))
    return found


class Session:
    """A worker that is restarted after each crash or hang; counts what it saw."""

    def __init__(self, build: Path, scratch: Path, timeout: float) -> None:
        self.build, self.scratch, self.timeout = build, scratch, timeout
        scratch.mkdir(parents=True, exist_ok=True)
        self.starts = 0
        self.worker = None

    def run(self, case: dict) -> tuple[object, str]:
        """(answer, sanitizer report or "")."""
        if self.worker is None:
            self.starts += 1
            self.worker = Worker(self.build, self.scratch / f"worker-{self.starts % 4}.log")
        answer = self.worker.send(case, self.timeout)
        if isinstance(answer, dict):
            return answer, ""
        report = self.worker.report() if answer == "died" else ""
        self.worker.close()
        if answer == "hang":
            report = f"no answer within {self.timeout} s"
        self.worker = None
        return answer, report

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def _candidates(case: dict):
    """Smaller versions of a case: fewer modes, then shorter bytes, then chunks cut out."""
    if case["kind"] != "jpeg":
        return
    for mode in case["modes"]:
        if len(case["modes"]) > 1:
            yield {**case, "modes": [mode]}


def shrink(session: Session, case: dict, want: str, budget: float) -> dict:
    """The smallest case found within ``budget`` seconds that gives the same signature."""
    deadline = time.monotonic() + budget

    def same(candidate: dict) -> bool:
        if time.monotonic() > deadline:
            return False
        answer, report = session.run(candidate)
        if isinstance(answer, dict) and "outcome" in answer:
            return False
        return signature(answer, report) == want

    best = case
    for candidate in _candidates(case):
        if same(candidate):
            best = candidate
            break
    if best["kind"] != "jpeg":
        return best
    data = best["data"]
    low, high = 2, len(data)  # the shortest prefix that still fails (binary search)
    while low < high and time.monotonic() < deadline:
        mid = (low + high) // 2
        if same({**best, "data": data[:mid]}):
            high = mid
        else:
            low = mid + 1
    data = data[:high]
    chunk = max(1, len(data) // 8)
    while chunk >= 1 and time.monotonic() < deadline:  # chunks cut out, largest first
        at = 2
        while at < len(data) and time.monotonic() < deadline:
            candidate = data[:at] + data[at + chunk:]
            if same({**best, "data": candidate}):
                data = candidate
            else:
                at += chunk
        chunk //= 2
    return {**best, "data": data}


def _corpus(folder: Path) -> list[tuple[str, bytes]]:
    import corpus

    return [(p.name, p.read_bytes()) for p in corpus.build(folder)]


def fuzz(args: argparse.Namespace) -> int:
    files = _corpus(args.corpus)
    session = Session(args.build, args.out / "scratch", args.timeout)
    counts: dict[str, int] = {}
    found = []
    start = time.monotonic()
    next_progress = start + args.progress
    i = 0
    try:
        while time.monotonic() - start < args.seconds and (args.cases is None
                                                           or i < args.cases):
            if time.monotonic() >= next_progress:
                next_progress += args.progress
                print(f"  {time.monotonic() - start:.0f} s: {i} cases, {len(found)} found",
                      flush=True)
            rng = random.Random(f"{args.seed}:{i}")
            if rng.random() < 0.75:
                name, data = rng.choice(files)
                case = cases.jpeg_case(rng, name, data)
            else:
                case = cases.kernel_case(rng)
            case["id"] = f"{args.seed}:{i}"
            answer, report = session.run(case)
            i += 1
            if isinstance(answer, dict) and "outcome" in answer:
                key = f"{case['kind']} {answer['outcome']}"
                counts[key] = counts.get(key, 0) + 1
                continue
            sig = signature(answer, report)
            if isinstance(answer, dict):
                report = answer["finding"]
            folder = args.out / f"{len(found):03d}-{case['id'].replace(':', '-')}"
            save(case, folder, sig, report)
            small = shrink(session, case, sig, args.shrink_seconds)
            save(small, folder.with_name(folder.name + "-min"), sig, report)
            found.append((sig, folder))
            print(f"FOUND {sig}\n  saved {folder} (shrunk: {folder.name}-min)\n  replay: "
                  f"python tests/fuzz/run.py --replay {folder}-min", flush=True)
            if len(found) >= args.max_findings:
                break
    finally:
        session.close()
    elapsed = time.monotonic() - start
    hangs = sum(1 for sig, _ in found if sig == "hang")
    reports = sum(1 for sig, _ in found if sig.startswith(("asan", "ubsan", "died")))
    print(f"fuzz: seed {args.seed}, {i} cases in {elapsed:.0f} s ({i / max(elapsed, 1e-9):.0f}/s), "
          f"{reports} sanitizer reports, {hangs} hangs, "
          f"{len(found) - reports - hangs} broken promises, {session.starts} worker starts")
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    return 1 if found else 0


def replay(args: argparse.Namespace) -> int:
    session = Session(args.build, args.out / "scratch", args.timeout)
    bad = 0
    folders = case_folders(args.replay)
    try:
        for folder in folders:
            answer, report = session.run(load_case(folder))
            if isinstance(answer, dict) and "outcome" in answer:
                print(f"ok    {folder}: {answer['outcome']}")
            else:
                bad += 1
                print(f"FAIL  {folder}: {signature(answer, report)}\n{report[-4000:]}")
    finally:
        session.close()
    print(f"replay: {len(folders)} cases, {bad} failed")
    return 1 if bad or not folders else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(Path(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build" / "fuzz",
                        help="the sanitizer build (setup.py build_ext --build-lib)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz")
    parser.add_argument("--seed", type=int, default=0, help="the cases' seed")
    parser.add_argument("--cases", type=int, default=None,
                        help="stop after this many cases (within --seconds)")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="seconds a case may take before it counts as a hang")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz-findings",
                        help="where findings are saved")
    parser.add_argument("--corpus", type=Path, default=ROOT / "build" / "fuzz-corpus",
                        help="where the generated seed corpus is kept")
    parser.add_argument("--shrink-seconds", type=float, default=60.0,
                        help="time spent shrinking each finding")
    parser.add_argument("--max-findings", type=int, default=20,
                        help="stop after this many findings")
    parser.add_argument("--progress", type=float, default=300.0,
                        help="seconds between progress lines")
    parser.add_argument("--replay", type=Path, nargs="+",
                        help="replay saved case folders (or folders of them) instead")
    args = parser.parse_args(argv)
    missing = [m for m, folder in MODULES.items()
               if not list((args.build / "fastload" / folder).glob(f"{m}.*.so"))]
    if missing:
        print(f"{args.build} holds no sanitizer build of {', '.join(missing)}: run make fuzz "
              "(FASTLOAD_SANITIZE=1 python setup.py build_ext --build-lib build/fuzz)",
              file=sys.stderr)
        return 2
    return replay(args) if args.replay else fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
