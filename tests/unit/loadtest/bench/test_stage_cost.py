"""`loadtest.bench.stage_cost`: a pass's core-seconds a page, in all and by stage, from CPU-time
deltas; texts held to the warm-up's answers; the Markdown row. A fake target stands in for a
server (its CPU time and `/metrics` given), which the e2e server runs of the module measure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.bench.stage_cost import (
    DEVICE_CPU,
    PROCESS_CPU,
    Target,
    accuracy,
    markdown,
    page_group,
    run_pass,
)

PAGES = [Path("a.png"), Path("b.png")]


@dataclass
class FakeTarget(Target):
    """Each read adds `cpu_per_page_s` to pid 1 and each stage's seconds to its counters."""

    answers: list[dict[str, list[str]]] = field(default_factory=list)
    cpu_s: float = 0.0
    counters: dict[tuple[str, str], float] = field(default_factory=dict)

    def tree_cpu_s(self) -> dict[int, float]:
        return {1: self.cpu_s}

    def metrics(self) -> dict[tuple[str, str], float]:
        return dict(self.counters)

    def read(self, pages: Sequence[Path], concurrency: int) -> tuple[float, dict[str, list[str]]]:
        self.cpu_s += 3.0 * len(pages)
        for key, per_page in ((DEVICE_CPU, "rec"), 2.0), ((DEVICE_CPU, "det"), 0.5):
            self.counters[key] = self.counters.get(key, 0.0) + per_page * len(pages)
        self.counters[(PROCESS_CPU, "main")] = 0.1 * len(pages)  # a gauge, since start
        return 4.0, self.answers.pop(0)

    def stop(self) -> None:
        return None


def test_a_pass_reports_core_seconds_a_page_in_all_and_by_stage() -> None:
    target = FakeTarget("ours", answers=[{"a.png": ["x"], "b.png": ["y"]}] * 2)
    run_pass(target, PAGES, 1)  # the warm-up: its answers are the reference
    result = run_pass(target, PAGES, 4)
    assert result["tree_core_s_per_page"] == 3.0
    assert result["parts_core_s_per_page"]["device_cpu_seconds:rec"] == 2.0
    assert result["parts_core_s_per_page"]["device_cpu_seconds:det"] == 0.5
    assert result["pages_per_s"] == 0.5
    assert (result["failures"], result["changed_pages"]) == (0, 0)


def test_failed_and_changed_pages_are_counted_apart_and_not_correct() -> None:
    answers = [{"a.png": ["x"], "b.png": ["y"]}, {"a.png": ["z"]}]
    target = FakeTarget("rapidocr", answers=answers)
    run_pass(target, PAGES, 1)
    result = run_pass(target, PAGES, 4)
    assert (result["failures"], result["changed_pages"]) == (1, 1)
    assert result["correct_pages_per_s"] == 0.0
    target.passes.append(result)
    (header, _, row) = markdown([target], 4)
    assert header.startswith("| server | pages/s c=4 | correct pages/s | core-s a page (tree)")
    assert row.endswith("| 1 | 1 |")


def test_accuracy_is_given_per_language_and_for_the_degraded_scans() -> None:
    assert page_group("maint-guide.zh-cn-p14.png") == "zh"
    assert page_group("maint-guide.fr-p15.png") == "fr"
    assert page_group("libtasn1-p23-degraded.png") == "degraded"
    assert page_group("shared-mime-info-spec-p3.png") == "en"
    truths = {"libtasn1-p1.png": "Total amount", "maint-guide.de-p2.png": "gut"}
    target = FakeTarget("ours", texts={"libtasn1-p1.png": ["Totalamount"]})
    found = accuracy(target, truths)
    assert found["groups"]["en"] == {"cer": 0.0, "merged_words": 1}  # CER counts no spaces
    assert found["groups"]["de"] == {"cer": 1.0, "merged_words": 0}  # not answered: all missing
    assert found["merged_words"] == 1
