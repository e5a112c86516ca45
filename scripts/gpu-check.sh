#!/usr/bin/env bash
# The GPU check: one prepared run on a machine with an NVIDIA GPU and PyTorch, but no network and
# no Paddle. Run from the repository root, after `make gpu-bundle` here made .gpu-bundle/:
#
#   bash scripts/gpu-check.sh [--bundle DIR] [--out DIR] [--python PY] [--dry-run] [-- BENCH_ARGS]
#
# 1. installs the bundle's wheels (--no-index) into a folder put first on PYTHONPATH;
# 2. checks the imports and that torch sees a GPU (env.json);
# 3. runs tests/gpu on the bundle's converted models and pages (gpu-tests.log);
# 4. runs the short benchmark, loadtest/gpu_check.py (gpu-check.json, gpu-check.md, rewritten
#    after each of its runs, so a command cut short still reports what it measured).
# Everything lands in --out (default: $OUT where set, else gpu-check-out), at most 8 files.
# --dry-run, for a machine without a GPU: the same steps, the benchmark on the CPU with tiny
# settings (tests/gpu then skip); its figures mean nothing.
set -uo pipefail

BUNDLE=.gpu-bundle
OUT_DIR=${OUT:-gpu-check-out}
PY=python3
SITE=${GPU_CHECK_SITE:-/tmp/ocr-gpu-site}
DRY_RUN=0
BENCH_ARGS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --bundle) BUNDLE=$2; shift 2 ;;
        --out) OUT_DIR=$2; shift 2 ;;
        --python) PY=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --) shift; BENCH_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

fail() { echo "gpu-check: $*" >&2; exit 1; }
[[ -f serving/cli.py ]] || fail "run from the repository root"
for need in models/det models/rec pages/expected.json wheels manifest.json; do
    [[ -e $BUNDLE/$need ]] || fail "$BUNDLE/$need missing: run 'make gpu-bundle' first"
done
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUNDLE=$(cd "$BUNDLE" && pwd)
started=$(date +%s)

echo "== install the bundle's wheels into $SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$BUNDLE"/wheels/*.whl || fail "installing the bundle's wheels failed"
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

echo "== imports and devices"
"$PY" - "$OUT_DIR/env.json" <<'EOF' || fail "imports failed (see above)"
import importlib.metadata, json, platform, sys
import torch
from models.registry import BACKENDS
from models.torch_backend import import_onnx2torch
from serving.app import build_app  # noqa: F401  the server's own imports
import_onnx2torch()
info = {
    "python": platform.python_version(),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "cuda_available": torch.cuda.is_available(),
    "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    "onnx2torch": importlib.metadata.version("onnx2torch"),
    "backends": sorted(BACKENDS),
}
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(json.dumps(info))
EOF

if [[ $DRY_RUN == 0 ]]; then
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
        || fail "torch sees no CUDA GPU (use --dry-run on a machine without one)"
    DEFAULTS=()
else
    DEFAULTS=(--device cpu --concurrency 1,2 --requests 4 --rounds 1 --cpu-workers 2
        --cpu-threads 2 --skip mixed --request-timeout-s 600)
fi

echo "== tests/gpu"
# A hung test must not take the whole command's 10 minutes: each has GPU_TEST_TIMEOUT_S.
OCR_GPU_MODELS="$BUNDLE/models" OCR_GPU_PAGES="$BUNDLE/pages" \
    "$PY" -m pytest tests/gpu -q -p no:cacheprovider -o addopts="-ra" \
    -o timeout="${GPU_TEST_TIMEOUT_S:-180}" 2>&1 \
    | tee "$OUT_DIR/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}

echo "== benchmark"
"$PY" -m loadtest.gpu_check --models "$BUNDLE/models" --pages "$BUNDLE/pages" \
    --out "$OUT_DIR/bench" "${DEFAULTS[@]}" "${BENCH_ARGS[@]}" 2>&1 | tee "$OUT_DIR/bench.log"
bench_rc=${PIPESTATUS[0]}
cp "$OUT_DIR/bench/gpu-check.json" "$OUT_DIR/bench/gpu-check.md" "$OUT_DIR/" 2>/dev/null
# The server logs, one file (the device tool returns files at most two folders down).
for log in "$OUT_DIR"/bench/*/server.log; do
    [[ -f $log ]] && { echo "== $log"; tail -n 200 "$log"; }
done >"$OUT_DIR/server-logs.txt"

echo "gpu-check: tests exit $tests_rc, benchmark exit $bench_rc, $(($(date +%s) - started)) s"
[[ $tests_rc == 0 || $tests_rc == 5 ]] && [[ $bench_rc == 0 ]]
