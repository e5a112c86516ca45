#!/usr/bin/env bash
# The GPU check: one prepared run on a machine with an NVIDIA GPU and PyTorch, but no network and
# no Paddle. Run from the repository root, after `make gpu-bundle` here made .gpu-bundle/:
#
#   bash scripts/gpu-check.sh [--bundle DIR] [--out DIR] [--python PY] [--dry-run] [-- BENCH_ARGS]
#
# 1. installs the bundle's wheels (--no-index) into a folder put first on PYTHONPATH;
# 2. checks the imports and that torch sees a GPU (env.json);
# 3. runs the benchmark, loadtest/gpu/check.py, what matters first, in --budget-s: syncs per
#    forward and per uint8 launch, compute stream overlap, GPU engine limit (server-sized
#    batches), server at 32/64/128 (within admission), CPU-side limit, gpu:0+cpu, texts,
#    launch times, load and warm-up times (gpu-check.json, gpu-check.md, logs.txt, rewritten
#    after each part, so a command cut short still reports what it measured);
# 4. runs tests/gpu on the bundle's converted models and pages in the time left
#    (gpu-tests.log), and adds their outcomes to the report (skipped tests as skipped, the
#    Paddle ones as not applicable). bench.log and gpu-tests.log are copied to --out every few
#    seconds while their step runs, so a cut run returns them too. Needs bash and Python only.
# The whole command stays within GPU_CHECK_BUDGET_S (default 450 s: under 8 minutes). --out
# (default: $OUT where set, else gpu-check-out) gets 6 files, none in a folder: env.json,
# gpu-check.json, gpu-check.md, logs.txt, gpu-tests.log and bench.log, logs cut to their last
# 256 KiB; configs, server logs, maps and the jobs' databases stay in GPU_CHECK_WORK.
# --dry-run, for a machine without a GPU: the same steps, the benchmark on the CPU with tiny
# settings (tests/gpu then skip); its figures mean nothing. GPU_CHECK_WHEELS=0 skips step 1
# where PY has the server's packages already (a dry run in the project's own environment).
set -uo pipefail

BUNDLE=.gpu-bundle
OUT_DIR=${OUT:-gpu-check-out}
PY=python3
SITE=${GPU_CHECK_SITE:-/tmp/ocr-gpu-site}
WORK=${GPU_CHECK_WORK:-/tmp/ocr-gpu-check-work}
BUDGET_S=${GPU_CHECK_BUDGET_S:-450}
LOG_TAIL_BYTES=262144
DRY_RUN=0
BENCH_ARGS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --bundle) BUNDLE=$2; shift 2 ;;
        --out) OUT_DIR=$2; shift 2 ;;
        --python) PY=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --) shift; BENCH_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

fail() { echo "gpu-check: $*" >&2; exit 1; }
[[ -f serving/cli.py ]] || fail "run from the repository root"
for need in models/det models/rec pages/expected.json wheels manifest.json; do
    [[ -e $BUNDLE/$need ]] || fail "$BUNDLE/$need missing: run 'make gpu-bundle' first"
done
mkdir -p "$OUT_DIR" "$WORK"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(cd "$WORK" && pwd)
rm -f "$WORK/junit.xml"
BUNDLE=$(cd "$BUNDLE" && pwd)
started=$(date +%s)

if [[ ${GPU_CHECK_WHEELS:-1} == 1 ]]; then  # 0: PY has the server's packages already
    # One folder per Python (its compiled wheels import in no other): a site filled by another
    # Python broke the imports of the next run.
    SITE=$SITE-$("$PY" -c 'import sys; print(sys.implementation.cache_tag)') \
        || fail "$PY does not run"
    echo "== install the bundle's wheels into $SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$BUNDLE"/wheels/*.whl || fail "installing the bundle's wheels failed"
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else  # nothing of an earlier run's site: only what PY has
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
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
        --cpu-threads 2 --min-seconds 1 --level-seconds 1 --request-timeout-s 300 --max-pages 3)
fi
left() { echo $((BUDGET_S - ($(date +%s) - started))); }
# Copies the end of log $1 to $2 every 5 s until killed: a run cut short still returns it.
mirror() {
    while sleep 5; do
        tail -c $LOG_TAIL_BYTES "$1" >"$WORK/.mirror.tmp" 2>/dev/null \
            && mv -f "$WORK/.mirror.tmp" "$2"
    done
}
mirror_pid=
stop_mirror() {
    if [[ -n $mirror_pid ]]; then
        kill "$mirror_pid" 2>/dev/null
        wait "$mirror_pid" 2>/dev/null
    fi
    mirror_pid=
}
trap stop_mirror EXIT

echo "== benchmark ($(( $(left) * 2 / 3 )) s of $(left) s left)"
: >"$WORK/bench.log"
mirror "$WORK/bench.log" "$OUT_DIR/bench.log" & mirror_pid=$!
"$PY" -m loadtest.gpu --models "$BUNDLE/models" --pages "$BUNDLE/pages" \
    --out "$OUT_DIR" --work "$WORK/bench" --budget-s $(( $(left) * 2 / 3 )) \
    "${DEFAULTS[@]}" "${BENCH_ARGS[@]}" >"$WORK/bench.log" 2>&1
bench_rc=$?
stop_mirror
tail -n 40 "$WORK/bench.log"
tail -c $LOG_TAIL_BYTES "$WORK/bench.log" >"$OUT_DIR/bench.log"

tests_s=$(( $(left) - 15 ))
echo "== tests/gpu (${tests_s} s left for them)"
if (( tests_s > 30 )); then
    : >"$WORK/gpu-tests.log"
    mirror "$WORK/gpu-tests.log" "$OUT_DIR/gpu-tests.log" & mirror_pid=$!
    # Interrupted at the budget's end, pytest still writes what ran to junit.xml.
    OCR_GPU_MODELS="$BUNDLE/models" OCR_GPU_PAGES="$BUNDLE/pages" \
        timeout -s INT -k 10 "$tests_s" "$PY" -m pytest tests/gpu -q -p no:cacheprovider \
        -o addopts="-ra" -o timeout="${GPU_TEST_TIMEOUT_S:-180}" \
        --junitxml "$WORK/junit.xml" >"$WORK/gpu-tests.log" 2>&1
    tests_rc=$?
    stop_mirror
else
    echo "no time left for tests/gpu" >"$WORK/gpu-tests.log"
    tests_rc=124
fi
tail -n 30 "$WORK/gpu-tests.log"
tail -c $LOG_TAIL_BYTES "$WORK/gpu-tests.log" >"$OUT_DIR/gpu-tests.log"
"$PY" -m loadtest.gpu --out "$OUT_DIR" --merge-tests "$WORK/junit.xml"

echo "gpu-check: tests exit $tests_rc, benchmark exit $bench_rc, $(($(date +%s) - started)) s"
ls -l "$OUT_DIR"
[[ $tests_rc == 0 || $tests_rc == 5 ]] && [[ $bench_rc == 0 ]]
