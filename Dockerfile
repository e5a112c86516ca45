# syntax=docker/dockerfile:1
# ocr-serving images. One stage, `server`, writes once what every variant runs with (user,
# directories, environment, volumes, port, health check, command); VARIANT picks the engine that
# scripts/image-install.sh puts in /opt/ocr, and BASE_IMAGE what it stands on:
#   docker build -t ocr-serving:cpu .                                       # CPU (the default)
#   docker build --build-arg VARIANT=gpu --build-arg CPU_BACKEND=paddle \
#     --build-arg BASE_IMAGE=paddlepaddle/paddle:3.2.2-gpu-cuda12.6-cudnn9.5 -t ocr-serving:gpu .
#   docker build --build-arg VARIANT=gpu-torch -t ocr-serving:gpu-torch .   # NVIDIA GPUs, PyTorch
# GPU_BACKEND (default auto: torch where its CUDA build sees a GPU, else Paddle's GPU build, else
# the CPU; issue 39) may name one engine instead.
# Every variant serves on 0.0.0.0:8000 as a non-root user (uid 10001); with no API keys its jobs
# API answers 403 there (anyone on the network could read the stored documents) unless
# OCR_AUTH__OPEN=true, so give it keys (OCR_API_KEYS, OCR_AUTH__KEYS_FILE), or publish the port on
# 127.0.0.1 and set OCR_AUTH__OPEN=true. It reads /etc/ocr/config.toml
# (mount your own over it) plus OCR_<SECTION>__<KEY> environment overrides, keeps job data and the
# precision check's verdicts (measured on the first start on a CPU, read on the next) in the
# /var/lib/ocr volume and carries the packaged models (PP-OCRv6 small, the default set, and
# PP-OCRv5 mobile); other model directories go under the /models volume.
#
# Where the package index is reached through a proxy that re-signs TLS, hand the build its CA
# bundle as a secret; it is mounted into the pip steps only, never stored in the image:
#   docker build --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt ...

# Python >= 3.11 (tomllib) for building the project's wheel, whatever the variant.
ARG PYTHON_IMAGE=python:3.11-slim
# What the server stands on. python:3.11-slim for cpu and gpu-torch (PyTorch's CUDA wheels from
# PyPI bring their CUDA libraries: only the host's driver is needed). For gpu, the official
# PaddlePaddle 3.2.2 GPU image (Docker Hub paddlepaddle/paddle, CUDA 12.6, cuDNN 9.5): the release
# this project pins (paddlepaddle==3.2.2), with its GPU build and the CUDA, cuDNN and TensorRT
# libraries it was built against.
ARG BASE_IMAGE=python:3.11-slim

# ---- the project's wheel and its pinned runtime requirements, built once for every variant ----
FROM ${PYTHON_IMAGE} AS wheel
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
COPY pyproject.toml ./
COPY serving serving
COPY pipelines pipelines
COPY models models
COPY loadtest loadtest
# requirements-gpu.txt leaves paddlepaddle out: the gpu variant keeps its base image's GPU build.
# Both carry the `postgres` extra (psycopg), so replicas can share a job store (OCR_JOBS__STORE),
# and the `s3` extra (boto3), so jobs read and write object storage.
# (No heredoc: buildah before 1.33 does not read them.)
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && python3 -c 'import tomllib; \
project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
deps = project["dependencies"] + project["optional-dependencies"]["postgres"] \
    + project["optional-dependencies"]["s3"]; \
open("/wheels/requirements-cpu.txt", "w").write("\n".join(deps) + "\n"); \
gpu = [d for d in deps if not d.startswith("paddlepaddle")]; \
open("/wheels/requirements-gpu.txt", "w").write("\n".join(gpu) + "\n")'

# ---- server: every variant, one stage: the engine installed for VARIANT, then what runs it ----
FROM ${BASE_IMAGE} AS server
ARG VARIANT=cpu
ARG GPU_BACKEND=auto
# The engine of CPU devices (config.toml's default, OpenVINO, unless told otherwise): openvino and
# onnxruntime bring their extra and PP-OCRv5 mobile's ONNX conversions, made at build time; paddle
# (and the gpu variant) the default set's Paddle conversion (X2Paddle).
ARG CPU_BACKEND=openvino
ARG PADDLE_GPU_INDEX=https://www.paddlepaddle.org.cn/packages/stable/cu126/
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=wheel /wheels /tmp/wheels
# scripts/image-install.sh: what each variant installs into /opt/ocr (read it for the details).
# hadolint ignore=DL3008
RUN --mount=type=bind,source=scripts/image-install.sh,target=/tmp/image-install.sh \
    --mount=type=secret,id=ca \
    PADDLE_GPU_INDEX="$PADDLE_GPU_INDEX" CPU_BACKEND="$CPU_BACKEND" bash /tmp/image-install.sh "$VARIANT" /tmp/wheels \
    && rm -rf /tmp/wheels \
    && groupadd --gid 10001 ocr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin ocr \
    && mkdir -p /models /var/lib/ocr/jobs /var/lib/ocr/precision /etc/ocr \
    && chown ocr:ocr /models /var/lib/ocr /var/lib/ocr/jobs /var/lib/ocr/precision
COPY config.toml /etc/ocr/config.toml
ENV PATH=/opt/ocr/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    OCR_CONFIG=/etc/ocr/config.toml \
    OCR_SERVER__HOST=0.0.0.0 \
    OCR_SERVER__HEALTH_PORT=8001 \
    OCR_JOBS__DATA_DIR=/var/lib/ocr/jobs \
    OCR_ENGINE__ONNX_DIR=/opt/ocr-models/onnx \
    OCR_ENGINE__PRECISION_CHECK_DIR=/var/lib/ocr/precision \
    OCR_ENGINE__PADDLE_DIR=/opt/ocr-models/paddle \
    OCR_ENGINE__GPU_BACKEND=${GPU_BACKEND} \
    OCR_ENGINE__CPU_BACKEND=${CPU_BACKEND}
USER 10001:10001
WORKDIR /home/ocr
VOLUME ["/models", "/var/lib/ocr"]
EXPOSE 8000
# Ready only after every device worker has loaded its models and run a warm-up page. Asked on
# the probes' own port (server.health_port), which answers however busy the API's port is.
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
    CMD ["python", "-m", "serving.healthcheck"]
CMD ["ocr-serve"]
