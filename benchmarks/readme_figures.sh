#!/usr/bin/env bash
# Regenerates the benchmark figures of the loader bench and the fine-tune A/B (docs/benchmarks/) in one go, on generated data.
# Run it on a quiet machine (nothing else busy): the rows of each table are measured side
# by side, but a busy neighbour still adds noise. Writes docs/benchmarks/results/*.json, bench.png and
# a log per step under $OUT (default docs/benchmarks/results/).
#   bash benchmarks/readme_figures.sh [WORKDIR]
# Row (h) of the bench runs only where ffcv is installed: BIN=.venv-ffcv/bin (benchmarks/ffcv_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
WORK=${1:-/tmp/fastload-figures}
OUT=${OUT:-docs/benchmarks/results}
mkdir -p "$WORK" "$OUT"

# Loader throughput (README "Throughput"): 2048 train images, batch 64, train transforms.
[ -d "$WORK/bench/train" ] || "$BIN/fastload" synth "$WORK/bench" --train 2048 --val 256 --classes 10 --seed 0
"$BIN/fastload" bench "$WORK/bench" --epochs 5 --warmup-epochs 1 \
    --json "$OUT/bench.json" --plot "$OUT/bench.png" | tee "$OUT/bench.txt"

# Fine-tuning A/B table (README "The A/B table"): ViT-Tiny, 224 px, batch 32, 2 epochs.
[ -d "$WORK/ab/train" ] || "$BIN/fastload" synth "$WORK/ab" --train 320 --val 80 --classes 10 --seed 0
"$BIN/fastload" finetune "$WORK/ab" --img-size 224 --batch-size 32 --epochs 2 --no-progress \
    --compare --compare-out "$OUT/ab.json" | tee "$OUT/ab.txt"

# Gradient checkpointing at a batch where activations dominate: fp32, batch 64, 2 epochs.
"$BIN/fastload" finetune "$WORK/ab" --img-size 224 --batch-size 64 --epochs 2 \
    --no-progress --compare baseline,gc --compare-out "$OUT/gc.json" | tee "$OUT/gc.txt"

# Int8 export of a 2-epoch bf16 fine-tune.
"$BIN/fastload" finetune "$WORK/ab" --img-size 224 --batch-size 32 --epochs 2 --amp bf16 \
    --no-progress --checkpoint "$WORK/ab_ckpt.pt" > "$OUT/export_train.txt"
"$BIN/fastload" export "$WORK/ab_ckpt.pt" --quantize dynamic | tee "$OUT/export.txt"
