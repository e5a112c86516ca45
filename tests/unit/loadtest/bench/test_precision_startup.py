"""The start-up cost bench's tables (`loadtest.bench.precision_startup`), from made-up starts and
a `/readyz` check as `ModelCheck.describe` writes it."""

from __future__ import annotations

import pytest

from loadtest.bench.precision_startup import checks_table, starts_table
from models.openvino_precision import shortfalls
from models.precision_verdict import ModelCheck, TextScore, Trial

pytestmark = pytest.mark.unit


def test_the_tables_say_each_start_and_what_the_check_found() -> None:
    starts = [{"label": "auto, cold", "ready_s": 95.0, "cpu_s": 120.5, "precision": {"cpu": "f32"}}]
    assert starts_table(starts)[2] == "| auto, cold | 95.0 | 120.5 | cpu: f32 |"
    f32 = {"synthetic": TextScore(0, 5603, 0), "ch": TextScore(10, 608, 0)}
    merged = {"synthetic": TextScore(0, 5603, 1), "ch": TextScore(10, 608, 0)}
    trial = Trial(
        precision="bf16",
        scores=merged,
        shortfalls=shortfalls(merged, f32, "bf16"),
        partner="PP-OCRv5_mobile_det at f32",
    )
    check = ModelCheck(model="PP-OCRv5_mobile_rec", f32=f32, trials=(trial,), languages=("ch",))
    noted = ModelCheck(model="PP-OCRv5_mobile_det", note="no check set")
    rows = checks_table({"rec": check.describe(), "det": noted.describe()})
    assert rows[2] == (
        "| PP-OCRv5_mobile_rec (rec) | 0.16%, 0 | bf16 (with PP-OCRv5_mobile_det at f32) | "
        "0.16%, 1 | synthetic 0->0, 0->1 | failed: synthetic: 1 merged words against f32's 0 |"
    )
    assert rows[3] == "| PP-OCRv5_mobile_det (det) | | | | | not checked: no check set |"
