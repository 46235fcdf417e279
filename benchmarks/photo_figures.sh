#!/usr/bin/env bash
# The benchmark figures (docs/benchmarks/) on crops of real photographs (issue 25), in one go: the loader bench,
# the recipe table twice on both sets, high-res against the entropy-decode floor, and a
# fresh `make demo`-style run. Run it on a quiet machine. Logs and JSON go to $OUT (docs/benchmarks/results/).
#   bash benchmarks/photo_figures.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
WORK=${1:-/tmp/fastload-photo-figures}
OUT=${OUT:-docs/benchmarks/results}
mkdir -p "$WORK" "$OUT"

# The two ImageNet-sized sets: generated pictures and crops of photographs.
[ -d "$WORK/synth/train" ] || "$BIN/fastload" synth "$WORK/synth" --train 2048 --val 256 --classes 10 --seed 0
[ -d "$WORK/photos/train" ] || "$BIN/fastload" synth "$WORK/photos" --photos --train 2048 --val 256 --seed 0

# Loader throughput on the photographs (README "Throughput"), rows a-g and the floor (i).
"$BIN/fastload" bench "$WORK/photos" --rows abcdefgi --epochs 3 --warmup-epochs 1 \
    --json "$OUT/bench-photos.json" --plot "$OUT/bench-photos.png" | tee "$OUT/bench-photos.txt"

# Recipes (README "Recipes"): both sets, side by side, twice each.
for set in photos synth; do
  for run in 1 2; do
    "$BIN/fastload" bench "$WORK/$set" --recipe all --threads 2 --epochs 3 --warmup-epochs 1 \
        --limit 512 | tee "$OUT/recipes-$set-$run.txt"
  done
done

# High resolution against the floor (README "High-resolution photos").
[ -d "$WORK/hr/train" ] || "$BIN/fastload" synth "$WORK/hr" --photos --size 2100x1680 --train 96 --val 96 --seed 0
for t in train val; do
  "$BIN/fastload" bench "$WORK/hr" --transforms "$t" --rows acif --batch-size 16 --epochs 5 \
      --warmup-epochs 1 --threads 2 --json "$OUT/highres-$t.json" | tee "$OUT/highres-$t.txt"
done
"$BIN/python" benchmarks/highres_floor.py --images 24 --rounds 10 --workdir "$WORK/hr-floor" \
    | tee "$OUT/highres-floor.txt"

# The demo (its headline: the loader's end-to-end gain, stall and memory; bench on photos).
rm -rf "$WORK/demo"
/usr/bin/time -v "$BIN/fastload" demo --workdir "$WORK/demo" 2>&1 | tee "$OUT/demo.txt"
