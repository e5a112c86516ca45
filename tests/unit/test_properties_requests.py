"""Properties of request and config parsing: any input is accepted or refused with a 4xx error.

The `/ocr` property follows `serving.http.routes.paddlex_ocr` without HTTP or model weights: an
accepted body runs through the server's own OCR path (`OcrService`, its CPU stages and the device
worker's output handling, in process: `tests/fakes/service.py`) with random model outputs, and its
answer is valid JSON. Hypothesis runs each property on a fixed, bounded set of inputs
(`tests/properties.py`).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import typing
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.bundle import ModelBundle
from models.spec import ModelSpec
from pipelines.det_postprocess import postprocess_det
from pipelines.det_preprocess import preprocess_det
from pipelines.types import ClsParams, DetParams, RecParams
from serving.config import AppConfig, PaddlexConfig, PipelineConfig, build, describe, load_config
from serving.decode.readers import DecodeLimits, FileKind, frames_type
from serving.errors import ConfigError, OcrError, ValidationFailed
from serving.http import paddlex_api
from serving.jobs.options import parse_options
from serving.options import OPTIONS
from serving.request_options import (
    OcrOptions,
    ocr_options,
    request_options,
)
from serving.scheduling.priorities import BACKGROUND
from serving.service.ocr import PageOutput
from tests.fakes.service import Model, run_inline
from tests.images import encode_png
from tests.properties import counted, outcome, prob_map


def _spec(kind: Literal["det", "rec", "cls"], **params: Any) -> ModelSpec:
    where = Path(kind)
    return ModelSpec(
        kind=kind,
        model_name=kind,
        directory=where,
        program_file=where / "inference.json",
        params_file=where / "inference.pdiparams",
        **params,
    )


BUNDLE = ModelBundle(
    det=_spec("det", det_params=DetParams()),
    rec=_spec("rec", rec_params=RecParams(), character_dict=("a", "b")),
    cls=_spec("cls", cls_params=ClsParams()),
)
LIMITS = DecodeLimits(max_pdf_pages=2, pdf_render_scale=1.0, max_image_pixels=10**6)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
# Numbers at the edges: zero, negatives, NaN, infinities, past float range (JSON allows them).
numbers = st.one_of(
    st.integers(),
    st.floats(),
    st.sampled_from([0, -1, -2.5, 0.5, 2**63, 10**400, 1e308, math.nan, math.inf, 1e14]),
)
_PNGS = [
    base64.b64encode(encode_png(np.full((h, w, 3), 255, np.uint8))).decode()
    for h, w in [(1, 1), (20, 90), (70, 33)]
]
ints = st.integers() | st.sampled_from([0, -1, 1, 32, 100_000, 100_001, 2**63, 10**400])
_NUMBER_FIELDS = ("textDetThresh", "textDetBoxThresh", "textDetUnclipRatio", "textRecScoreThresh")
# Well-typed bodies with a decodable image get past parsing into the pipeline.
good_bodies = st.fixed_dictionaries(
    {"file": st.sampled_from(_PNGS), "fileType": st.just(1)},
    optional={
        **dict.fromkeys(_NUMBER_FIELDS, numbers),
        "textDetLimitSideLen": ints,
        "textDetLimitType": st.sampled_from(["min", "max", "resize_long"]),
        "useTextlineOrientation": st.booleans(),
        "visualize": st.booleans(),
        "logId": st.text(max_size=10),
    },
)
# Anything else, often close to a request.
_FIELDS = (
    *_NUMBER_FIELDS,
    "textDetLimitSideLen",
    "textDetLimitType",
    "useTextlineOrientation",
    "useDocOrientationClassify",
    "useDocUnwarping",
    "returnWordBox",
    "visualize",
    "logId",
)
any_bodies = json_values | st.fixed_dictionaries(
    {
        "file": st.sampled_from(_PNGS) | st.text(max_size=40) | json_values,
        "fileType": st.sampled_from([1, 0, None, True, "1"]),
    },
    optional={name: st.booleans() | numbers | st.text(max_size=5) for name in _FIELDS},
)
ocr_bodies = st.one_of(good_bodies, good_bodies, any_bodies)


def fake_models(seed: int) -> dict[str, Model]:
    """Raw model outputs: a detection map with a few blobs, random class probabilities."""
    rng = np.random.default_rng(seed)

    def det(batch: np.ndarray) -> np.ndarray:
        return prob_map(seed, batch.shape[2], batch.shape[3], blobs=4)[np.newaxis, np.newaxis]

    def rec(batch: np.ndarray) -> np.ndarray:
        probs = rng.random((batch.shape[0], max(1, batch.shape[3] // 8), 4), dtype=np.float32)
        result: np.ndarray = probs / probs.sum(axis=-1, keepdims=True)
        return result

    def cls(batch: np.ndarray) -> np.ndarray:
        return rng.random((batch.shape[0], 2), dtype=np.float32)

    return {"det": det, "rec": rec, "cls": cls}


def ocr_document(
    data: bytes, kind: FileKind, options: OcrOptions, visualize: bool, seed: int
) -> list[PageOutput]:
    """`OcrService.ocr`, the server's path for a request's document, with `fake_models`."""
    return run_inline(
        lambda service: service.ocr(data, kind, options, visualize=visualize, timeout_s=60.0),
        models=fake_models(seed),
        charset=BUNDLE.charset,
        limits=LIMITS,
    )


def answer_ocr(body: Any, seed: int) -> str:
    """`/ocr`'s steps from the parsed body to the response text; raises what the route would."""
    parsed = paddlex_api.parse_request(body)
    if paddlex_api.is_url(parsed.file) or parsed.file_type is None:
        return ""  # refused by the route (URLs are off by default), or fetched: not ours here
    data = paddlex_api.decode_base64_file(parsed.file)
    overrides_ = paddlex_api.effective_overrides(parsed.overrides)
    options = request_options(
        BUNDLE, PipelineConfig(), overrides_, no_classifier=paddlex_api.NO_CLASSIFIER
    )
    visualize = PaddlexConfig().visualize if parsed.visualize is None else parsed.visualize
    pages = ocr_document(data, parsed.file_type, options, visualize, seed)
    result = paddlex_api.infer_result(
        pages, parsed.file_type, options, parsed.overrides, frames_type=frames_type(data)
    )
    # Starlette's JSONResponse refuses NaN and infinities.
    return json.dumps(paddlex_api.envelope(parsed.log_id, result), allow_nan=False)


# A finite threshold past float32 range (1e308) is compared with the float32 map as infinity, and
# numpy warns that it overflowed; the answer is right.
_FLOAT32_OVERFLOW = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


@_FLOAT32_OVERFLOW
@given(body=ocr_bodies, seed=st.integers(0, 2**32 - 1))
@counted(max_examples=300)
def test_ocr_body_answers_or_refuses_with_4xx(body: Any, seed: int) -> None:
    outcome(lambda: answer_ocr(body, seed))


raw_bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(4000, 6000).map(lambda n: b'{"file": ' + b"7" * n + b"}"),
    st.integers(1, 30_000).map(lambda n: b"[" * n + b"]" * n),
)


@given(raw=raw_bodies)
@counted(max_examples=100)
def test_json_body_loads_or_refuses_with_4xx(raw: bytes) -> None:
    body = outcome(lambda: paddlex_api.load_body(raw))
    if isinstance(body, OcrError):
        assert isinstance(body, ValidationFailed)
        assert json.loads(body.message)[0]["type"] == "json_invalid"


@given(data=st.binary(max_size=300), text=st.text(max_size=60), use_text=st.booleans())
@counted(max_examples=100)
def test_base64_file_round_trips_or_refuses(data: bytes, text: str, use_text: bool) -> None:
    if not use_text:
        assert paddlex_api.decode_base64_file(base64.b64encode(data).decode()) == data
        return
    outcome(lambda: paddlex_api.decode_base64_file(text))


_JOB_VALUES: dict[type, st.SearchStrategy[Any]] = {
    int: ints | ints.map(str),
    float: numbers | numbers.map(str),
    str: st.sampled_from(["min", "max", "resize_long", "x"]),
    bool: st.booleans() | st.sampled_from(["1", "true", "no"]),
}
good_job_options = st.fixed_dictionaries(
    {}, optional={name: _JOB_VALUES[option.kind] for name, option in OPTIONS.items()}
)
any_job_options = st.dictionaries(
    st.sampled_from([*OPTIONS, "det_limit"]), st.one_of(numbers, st.text(max_size=8), json_values)
)
job_options = st.one_of(good_job_options, good_job_options, any_job_options)


@_FLOAT32_OVERFLOW
@given(raw=job_options, seed=st.integers(0, 2**32 - 1))
@counted(max_examples=200)
def test_job_options_run_or_refuse_with_4xx(raw: dict[str, Any], seed: int) -> None:
    pipeline = PipelineConfig()
    options = outcome(lambda: ocr_options(BUNDLE, pipeline, **parse_options(raw)))
    if isinstance(options, OcrError):
        return
    image = np.random.default_rng(seed).integers(0, 256, (40, 120, 3), dtype=np.uint8)
    run_inline(
        lambda service: service.ocr_page_of(
            encode_png(image), "image", 0, options, priority=BACKGROUND, timeout_s=60.0
        ),
        models=fake_models(seed),
        charset=BUNDLE.charset,
        limits=LIMITS,
    )


# --- config ---------------------------------------------------------------------------------

toml_values = st.recursive(
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["auto", "cpu", "gpu:0", "gpu:x", "*", "http://a", "json", "min", "fp16"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=5,
)


_STRINGS = ["auto", "cpu", "gpu:0", "*", "http://a", "json", "min", "fp16", "det", "x"]


def _typed(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a config key's own type: mostly plausible, often edges (NaN, infinities, huge,
    negative), now and then anything of that type."""
    plausible: st.SearchStrategy[Any]
    other: st.SearchStrategy[Any]
    if hint is bool:
        return st.booleans()
    if hint is int:
        plausible, other = st.integers(1, 100), st.sampled_from([0, -1, 2**63 - 1]) | st.integers()
    elif hint is float:  # TOML integers are floats' too
        edges = st.sampled_from([math.nan, math.inf, -math.inf, 10**400, 1e14, -2.5, 0.0])
        plausible, other = st.floats(0.5, 100.0), edges | st.floats() | st.integers()
        return st.integers(0, 2).flatmap(lambda pick: edges if pick == 0 else plausible | other)
    elif hint is str:
        plausible, other = st.sampled_from(_STRINGS), st.text(max_size=8)
    else:  # tuple[str, ...]
        plausible = st.lists(st.sampled_from(_STRINGS), max_size=3)
        other = st.lists(st.text(max_size=8), max_size=3)
    return st.integers(0, 3).flatmap(lambda pick: other if pick == 0 else plausible)


def _keys(cls: type, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every key of the config file (not the tables), as its path of table names, with its type."""
    keys: dict[tuple[str, ...], Any] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(hint):
            keys.update(_keys(hint, (*prefix, name)))  # type: ignore[arg-type]
        else:
            keys[(*prefix, name)] = hint
    return keys


KEYS = _keys(AppConfig)
KEY_PATHS = sorted(KEYS)


@st.composite
def config_tables(draw: st.DrawFn) -> dict[str, Any]:
    """A few keys set to values of their type, nested as in the file; now and then a value of
    any type, or an unknown key."""
    raw: dict[str, Any] = {}
    paths = draw(st.lists(st.sampled_from(KEY_PATHS), max_size=4))
    entries = [(path, _typed(KEYS[path])) for path in paths]
    if draw(st.integers(0, 4)) == 0:
        junk_path = st.sampled_from(KEY_PATHS) | st.lists(st.text(max_size=5), min_size=1).map(
            tuple
        )
        entries.append((draw(junk_path), toml_values))
    for path, values in entries:
        table = raw
        for key in path[:-1]:
            inner = table.setdefault(key, {})
            if not isinstance(inner, dict):
                break
            table = inner
        else:
            table[path[-1]] = draw(values)
    return raw


def _check_config(config: AppConfig) -> None:
    json.dumps(describe(config), allow_nan=False)  # no NaN nor infinity anywhere
    # Accepted settings run: the pipeline gets them when a request overrides nothing.
    options = ocr_options(BUNDLE, config.pipeline)
    preprocess_det(np.zeros((40, 70, 3), np.uint8), options.det)
    prob = np.zeros((64, 64), np.float32)
    prob[10:30, 5:60] = 0.95
    postprocess_det(prob, (40, 70), options.det)


@_FLOAT32_OVERFLOW
@given(raw=config_tables())
@counted(max_examples=300)
def test_config_tables_build_or_raise_config_error(raw: dict[str, Any]) -> None:
    try:
        config = build(AppConfig, raw)
    except ConfigError:
        return
    _check_config(config)


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_text(v) for v in value) + "]"
    return repr(value)  # numbers: nan, inf, 1e+14 and -5 are TOML


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    """`OCR_<SECTION>__<KEY>` variables holding values of the key's type, or any text."""
    environ = {}
    for path in draw(st.lists(st.sampled_from(KEY_PATHS), max_size=4)):
        text = _typed(KEYS[path]).map(_toml_text) | st.text(max_size=12)
        environ["OCR_" + "__".join(path).upper()] = draw(text)
    return environ


@_FLOAT32_OVERFLOW
@given(environ=environments())
@counted(max_examples=200)
def test_env_overrides_build_or_raise_config_error(environ: dict[str, str]) -> None:
    try:
        config = load_config(None, environ)
    except ConfigError:
        return
    _check_config(config)
