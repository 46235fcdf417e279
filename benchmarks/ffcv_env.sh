#!/usr/bin/env bash
# Sets up .venv-ffcv: fastload plus FFCV 1.0.2, for `fastload bench` row (h).
# FFCV compiles a C++ extension against OpenCV and libjpeg-turbo; on Debian or Ubuntu:
#   apt-get install -y --no-install-recommends pkg-config libturbojpeg0-dev libopencv-dev
# Then run the README's figures with it:
#   BIN=.venv-ffcv/bin bash benchmarks/readme_figures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-ffcv}

for package in opencv4 libturbojpeg; do
    if ! pkg-config --exists "$package" 2>/dev/null; then
        echo "ffcv_env.sh: pkg-config finds no $package; install the headers first:" \
             "apt-get install -y --no-install-recommends pkg-config libturbojpeg0-dev libopencv-dev" >&2
        exit 1
    fi
done

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# ffcv's dependencies (numba, opencv-python) must not move fastload's pins...
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" - > "$constraints" <<'PY'
import tomllib
with open("pyproject.toml", "rb") as handle:
    project = tomllib.load(handle)["project"]
print("\n".join(project["dependencies"]))
PY
# ...and ffcv's own dependencies as they were when row (h) was last measured.
printf '%s\n' numba==0.68.1 llvmlite==0.50.0 opencv-python==5.0.0.93 pytorch_pfn_extras==0.9.0 \
    fastargs==1.2.0 assertpy==1.1 terminaltables==3.1.10 >> "$constraints"
"$VENV/bin/pip" install --quiet -e '.[test]' ffcv==1.0.2 -c "$constraints"
"$VENV/bin/python" -c "import ffcv.loader; print('ffcv', __import__('importlib.metadata').metadata.version('ffcv'), 'ready in $VENV')"
