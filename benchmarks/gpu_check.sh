#!/usr/bin/env bash
# Set up a bare GPU machine and run fastload's GPU checks there, in a few minutes.
#
# The machine's python3 has torch/torchvision with CUDA but no DALI and no package index.
# benchmarks/gpu_pack.sh (run here first) leaves the missing wheels as a tar split into
# parts of <= 60 MiB under benchmarks/.gpu-wheels/, with a MANIFEST of sha256 sums. Each
# call to the machine may carry only 64 MiB, so the parts arrive over back-to-back calls,
# each running this same script with one part and the MANIFEST carried:
#
#   carry: ["benchmarks/.gpu-wheels/parts/wheels.tar.part-00", "benchmarks/.gpu-wheels/MANIFEST"]
#   command: bash benchmarks/gpu_check.sh
#
# Each call moves what arrived into a stash outside the checkout ($STASH, default
# /root/.fastload-gpu) and says which parts are still missing. The stash lives only as
# long as the machine (warm ~30 s after a call): send the calls back to back, and start
# again from part 00 if a call counts fewer parts than were sent. The call that completes the
# set checks every sum, joins and installs the wheels (pip --no-index --no-deps into
# $STASH/site), then:
#   1. prints the GPU (nvidia-smi) and the versions of torch and DALI;
#   2. `fastload synth` a small ImageNet-like set ($TRAIN train images, default 4096);
#   3. `fastload bench` in GPU mode (mixed nvJPEG decode, batches on cuda:0): rows a-g;
#   4. `pytest -m gpu` on tests/;
#   5. `fastload bench` in CPU mode on all the machine's cores (skipped with CPU_BENCH=0).
# Results go to $OUT (the device tool's folder; default $STASH/out): gpu_check.log,
# bench_gpu.{txt,json,png}, pytest_gpu.txt, bench_cpu.{json,png}.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SRC=$REPO/benchmarks/.gpu-wheels
STASH=${STASH:-/root/.fastload-gpu}
OUT=${OUT:-$STASH/out}
TRAIN=${TRAIN:-4096}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$STASH/parts" "$OUT"

# --- 1. receive what this call carried --------------------------------------------------
if [[ -f $SRC/MANIFEST ]]; then cp "$SRC/MANIFEST" "$STASH/MANIFEST"; fi
for part in "$SRC"/parts/wheels.tar.part-*; do
  [[ -e $part ]] || continue
  cp "$part" "$STASH/parts/"
  echo "gpu_check: received $(basename "$part") ($(du -m "$STASH/parts/$(basename "$part")" | cut -f1) MiB)"
done
if [[ ! -f $STASH/MANIFEST ]]; then
  echo "gpu_check: no MANIFEST here yet; carry benchmarks/.gpu-wheels/MANIFEST with a part" >&2
  exit 2
fi
missing=()
while read -r _ name; do
  [[ -f $STASH/parts/$name ]] || missing+=("$name")
done < <(grep -v '^#' "$STASH/MANIFEST")
total=$(grep -vc '^#' "$STASH/MANIFEST")
if (( ${#missing[@]} > 0 )); then
  echo "gpu_check: have $(( total - ${#missing[@]} )) of $total parts; carry next: ${missing[0]}"
  exit 0
fi

exec > >(tee -a "$OUT/gpu_check.log") 2>&1
echo "gpu_check: all $total parts here; $(date -u +%FT%TZ)"

# --- 2. install ---------------------------------------------------------------------------
if [[ ! -f $STASH/installed ]]; then
  (cd "$STASH/parts" && grep -v '^#' "$STASH/MANIFEST" | sha256sum -c --quiet)
  cat "$STASH"/parts/wheels.tar.part-* | tar -C "$STASH" -xf -
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$STASH/site" "$STASH"/wheels/*.whl
  touch "$STASH/installed"
fi
# fastload itself, importable without pip: fastload/, with pipelines/ and tools/ as its
# subpackages fastload.pipelines and fastload.tools (as pyproject's package-dir maps them).
rm -rf "$STASH/src" && mkdir -p "$STASH/src/fastload"
for f in "$REPO"/fastload/*; do ln -s "$f" "$STASH/src/fastload/"; done
ln -s "$REPO/pipelines" "$STASH/src/fastload/pipelines"
ln -s "$REPO/tools" "$STASH/src/fastload/tools"
export PYTHONPATH=$STASH/src:$STASH/site${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$STASH/work" && cd "$STASH/work"   # not the checkout: ./fastload would shadow src/
FASTLOAD=("$PY" -m fastload.tools.cli)

# --- 3. what we run on ----------------------------------------------------------------------
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
"$PY" - <<'EOF'
import torch, nvidia.dali as dali, fastload
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device {torch.cuda.get_device_name(0)}")
print(f"DALI {dali.__version__}; fastload {fastload.__version__} from {fastload.__file__}")
EOF

# --- 4. data, GPU bench, gpu tests, CPU bench ------------------------------------------------
status=0
DATA=$STASH/data
if [[ ! -d $DATA/train ]]; then
  timeout 180 "${FASTLOAD[@]}" synth "$DATA" --train "$TRAIN" --val 256 --classes 10 \
    --workers "$(nproc)" --no-progress
fi
echo "== fastload bench --device gpu"
timeout 300 "${FASTLOAD[@]}" bench "$DATA" --device gpu --rows abcdefg --epochs 3 \
  --warmup-epochs 1 --json "$OUT/bench_gpu.json" --plot "$OUT/bench_gpu.png" \
  | tee "$OUT/bench_gpu.txt" || status=1
echo "== pytest -m gpu"
timeout 240 "$PY" -m pytest -m gpu -q -p no:cacheprovider "$REPO/tests" \
  | tee "$OUT/pytest_gpu.txt" || status=1
if [[ ${CPU_BENCH:-1} != 0 ]]; then
  echo "== fastload bench --device cpu ($(nproc) cores)"
  timeout 240 "${FASTLOAD[@]}" bench "$DATA" --device cpu --rows abcdefg --epochs 3 \
    --warmup-epochs 1 --json "$OUT/bench_cpu.json" --plot "$OUT/bench_cpu.png" || status=1
fi
echo "gpu_check: done, status $status, $(date -u +%FT%TZ)"
exit $status
