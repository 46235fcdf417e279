#!/usr/bin/env bash
# Pack the wheels a bare GPU machine lacks into parts small enough to travel one per call.
#
# The GPU machine's Python (3.12, with torch/torchvision CUDA, numpy, pillow, matplotlib,
# psutil, pytest, pytest-benchmark, pyyaml, six, packaging, typing-extensions, timm ...)
# has no DALI and cannot reach a package index. This script downloads, with
# `pip download --no-deps`, every wheel fastload needs there and does not find there,
# for CPython 3.12 on manylinux x86-64, at the versions installed in this checkout's .venv,
# then tars them (no compression: wheels are zips) and splits the tar into parts of at
# most 60 MiB under benchmarks/.gpu-wheels/ (git-ignored), with a MANIFEST of sha256 sums.
#
# Usage:  bash benchmarks/gpu_pack.sh        (then see benchmarks/gpu_check.sh)
# Env:    PYTHON (default .venv/bin/python), PART_MIB (default 60), GPU_PYTHON_VERSION (3.12)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
PART_MIB=${PART_MIB:-60}
PYVER=${GPU_PYTHON_VERSION:-3.12}
OUTDIR=benchmarks/.gpu-wheels
WHEELS=$OUTDIR/wheels
PARTS=$OUTDIR/parts

# DALI 2.4.0 and what it needs beyond the GPU image (check: pip show nvidia-dali-cuda120),
# nvImageCodec's decoder libraries, and fastload's own missing dependency (lmdb).
PACKAGES=(
  nvidia-dali-cuda120
  nvidia-nvimgcodec-cu12
  nvidia-libnvcomp-cu12
  nvidia-nvjpeg-cu12
  nvidia-nvjpeg2k-cu12
  nvidia-nvtiff-cu12
  astunparse
  gast
  makefun
  libcst
  nvtx
  optree
  lmdb
)

version_of() {  # the version installed here, so the GPU run uses what the tests used
  "$PYTHON" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'
}

mkdir -p "$WHEELS" "$PARTS"
rm -f "$PARTS"/*
for name in "${PACKAGES[@]}"; do
  version=$(version_of "$name")
  if [[ -z "$version" ]]; then
    echo "gpu_pack: $name is not installed in $PYTHON's environment; run 'make install' first" >&2
    exit 1
  fi
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    -d "$WHEELS" "$name==$version"
  echo "gpu_pack: $name==$version"
done

# Keep exactly one wheel per package: drop wheels of versions not pinned above.
"$PYTHON" - "$WHEELS" "${PACKAGES[@]}" <<'EOF'
import pathlib, re, subprocess, sys
folder, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
def norm(n): return re.sub(r"[-_.]+", "_", n).lower()
wanted = {}
for name in names:
    out = subprocess.run([sys.executable, "-m", "pip", "show", name], capture_output=True, text=True).stdout
    wanted[norm(name)] = re.search(r"^Version: (.+)$", out, re.M).group(1)
for wheel in folder.glob("*.whl"):
    dist, version = wheel.name.split("-")[:2]
    if wanted.get(norm(dist)) != version:
        print(f"gpu_pack: removing stale {wheel.name}")
        wheel.unlink()
EOF

tar -C "$OUTDIR" -cf "$OUTDIR/wheels.tar" wheels
split -b "${PART_MIB}m" -d -a 2 "$OUTDIR/wheels.tar" "$PARTS/wheels.tar.part-"
rm -f "$OUTDIR/wheels.tar"
(cd "$PARTS" && sha256sum wheels.tar.part-* > ../MANIFEST)
(cd "$WHEELS" && ls *.whl) | sed 's/^/# wheel /' >> "$OUTDIR/MANIFEST"

count=$(ls "$PARTS" | wc -l)
echo "gpu_pack: $(du -sh "$WHEELS" | cut -f1) of wheels in $count parts of <= ${PART_MIB} MiB:"
ls -l "$PARTS"
echo "Send them with one device call per part, back to back, each with"
echo "  carry: [\"$PARTS/<part>\", \"$OUTDIR/MANIFEST\"]"
echo "  command: bash benchmarks/gpu_check.sh"
echo "The call that brings the last missing part runs the GPU checks."
