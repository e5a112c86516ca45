"""The bench's RapidOCR baseline: its request shape, its answers, our models as its inputs.

The multipart body is checked by a Starlette app parsing it with python-multipart, the parser
FastAPI (and so `rapidocr_api`) uses; the settings by the keys RapidOCR 3.10's config.yaml has.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from loadtest.client import count_pages, prepare_request, response_texts
from loadtest.documents import Document
from loadtest.onnx_export import OnnxModels, paddle2onnx_argv, write_keys
from loadtest.servers import RAPIDOCR_APP, rapidocr_params
from models.bundle import load_bundle
from models.embedded import embedded_model_dir
from models.spec import load_model_spec
from pipelines.rec_postprocess import build_charset
from serving.config import AppConfig
from serving.request_options import ocr_options
from tests import images


async def _rapidocr_like(request: Request) -> JSONResponse:
    form = await request.form()
    upload = form["image_file"]
    assert isinstance(upload, UploadFile)
    data = await upload.read()
    return JSONResponse({"filename": upload.filename, "size": len(data), "head": data[:8].hex()})


def test_the_image_goes_as_the_multipart_file_rapidocr_api_reads() -> None:
    png = images.encode_png(images.latin_lines().image)
    request = prepare_request("rapidocr", Document("dir/page.png", png, "image", "image/png"))
    assert request.path == "/ocr"
    assert request.headers["content-type"].startswith("multipart/form-data; boundary=")
    app = Starlette(routes=[Route("/ocr", _rapidocr_like, methods=["POST"])])
    with TestClient(app) as client:
        answer = client.post(request.path, content=request.body, headers=request.headers)
    assert answer.json() == {"filename": "dir/page.png", "size": len(png), "head": png[:8].hex()}


def test_pdfs_are_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="images only"):
        prepare_request("rapidocr", Document("a.pdf", b"%PDF-1.4", "pdf", "application/pdf"))


def test_answers_count_one_page_and_give_lines_in_the_servers_order() -> None:
    body = {
        "10": {"rec_txt": "eleventh", "dt_boxes": [], "score": 0.9},
        "2": {"rec_txt": "third", "dt_boxes": [], "score": 0.9},
        "0": {"rec_txt": "first", "dt_boxes": [], "score": 0.9},
    }
    assert count_pages("rapidocr", 200, body) == (1, None)
    assert count_pages("rapidocr", 200, {}) == (1, None)  # a page without text
    assert count_pages("rapidocr", 200, None) == (0, "invalid_body")
    assert count_pages("rapidocr", 500, None) == (0, "http_500")
    assert response_texts("rapidocr", body) == ["first", "third", "eleventh"]
    assert response_texts("rapidocr", {}) == []
    v1 = {"pages": [{"lines": [{"text": "a"}, {"text": "b"}]}]}
    assert response_texts("v1", v1) == ["a", "b"]
    paddlex = {"result": {"ocrResults": [{"prunedResult": {"rec_texts": ["x"]}}]}}
    assert response_texts("paddlex", paddlex) == ["x"]


def test_the_keys_file_rebuilds_our_charset_the_way_rapidocr_reads_it(tmp_path: Path) -> None:
    rec = load_model_spec(embedded_model_dir("PP-OCRv5_mobile_rec"), "rec")
    keys = write_keys(rec, tmp_path / "keys.txt")
    # RapidOCR's read_character_file, then its blank in front and space at the end.
    lines = [raw.decode("utf-8").strip("\n").strip("\r\n") for raw in keys.open("rb")]
    assert ["blank", *lines, " "] == list(build_charset(rec.character_dict))


def test_the_converter_reads_the_models_own_files(tmp_path: Path) -> None:
    det = load_model_spec(embedded_model_dir("PP-OCRv5_mobile_det"), "det")
    argv = paddle2onnx_argv(Path("venv/bin/paddle2onnx"), det, tmp_path / "det.onnx")
    assert argv[0] == "venv/bin/paddle2onnx"
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert Path(options["--model_dir"]) / options["--model_filename"] == det.program_file
    assert Path(options["--model_dir"]) / options["--params_filename"] == det.params_file
    assert options["--save_file"] == str(tmp_path / "det.onnx")


def test_rapidocr_runs_with_our_settings_and_thread_count() -> None:
    config = AppConfig()
    bundle = load_bundle(config.models.det, config.models.rec, config.models.cls)
    options = ocr_options(bundle, config.pipeline)
    models = OnnxModels(Path("d.onnx"), Path("r.onnx"), Path("k.txt"))
    params = rapidocr_params(options, models, cpu_threads=2)
    assert (params["Det.thresh"], params["Det.box_thresh"]) == (0.3, 0.6)
    assert (params["Det.unclip_ratio"], params["Det.max_candidates"]) == (1.5, 1000)
    assert (params["Det.limit_side_len"], params["Det.limit_type"]) == (64, "min")
    assert params["Global.max_side_len"] == 4000
    assert params["Rec.rec_img_shape"] == [3, 48, 320]
    assert params["Rec.rec_batch_num"] == 6
    assert params["Global.text_score"] == 0.0
    assert params["Global.use_cls"] is False
    assert params["EngineConfig.onnxruntime.intra_op_num_threads"] == 2
    assert (params["Det.engine_type"], params["Rec.engine_type"]) == ("onnxruntime",) * 2
    # PaddleOCR's detector normalisation (the models' inference.yml), not RapidOCR's 0.5s.
    assert (params["Det.mean"], params["Det.std"]) == (
        [0.485, 0.456, 0.406],
        [0.229, 0.224, 0.225],
    )
    assert (params["Det.model_path"], params["Rec.rec_keys_path"]) == ("d.onnx", "k.txt")
    assert json.loads(json.dumps(params)) == params  # it travels as JSON in the environment
    compile(RAPIDOCR_APP, "<rapidocr app>", "exec")


def test_rapidocr_on_openvino_gets_its_threads_and_the_same_models() -> None:
    config = AppConfig()
    bundle = load_bundle(config.models.det, config.models.rec, config.models.cls)
    options = ocr_options(bundle, config.pipeline)
    models = OnnxModels(Path("d.onnx"), Path("r.onnx"), Path("k.txt"))
    params = rapidocr_params(options, models, cpu_threads=2, engine="openvino")
    assert (params["Det.engine_type"], params["Rec.engine_type"]) == ("openvino",) * 2
    assert params["EngineConfig.openvino.inference_num_threads"] == 2
    assert params["EngineConfig.openvino.num_streams"] == 1
    assert not any(key.startswith("EngineConfig.onnxruntime") for key in params)
    assert (params["Det.model_path"], params["Rec.model_path"]) == ("d.onnx", "r.onnx")
    # OpenVINO's own choice unless a precision is given.
    assert 'os.environ.get("RAPIDOCR_OPENVINO_PRECISION")' in RAPIDOCR_APP
    with pytest.raises(ValueError, match="unknown RapidOCR engine"):
        rapidocr_params(options, models, cpu_threads=2, engine="tensorrt")
