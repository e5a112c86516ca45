"""Traces across the server's processes, received over OTLP/HTTP by a real receiver
(`tests/otlp_receiver.py`) from `ocr-serve` on the model-free backend (it runs the same
processes: main, CPU workers, device worker): one trace per request, its spans a tree across the
main process and the CPU workers, the `traceparent` sent kept, each device batch linked to the
requests in it, and the server's log lines during a request carrying its trace id."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import images
from tests.e2e.conftest import ONE_WORKER, Server, fresh_serving
from tests.otlp_receiver import Receiver, Span, receiving

pytestmark = pytest.mark.e2e

PNG = images.encode_png(images.latin_lines().image)
SENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SENT_PARENT = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    tmp = tmp_path_factory.mktemp("traces")
    with receiving() as receiver:
        config = f"""
[telemetry]
otlp_endpoint = "{receiver.url}"
export_delay_ms = 100.0
{ONE_WORKER}
[workers.rec_queue]
# The two requests' line chunks wait for each other: one recognition batch serves both.
max_wait_ms = 3000.0
"""
        with fresh_serving(tmp, config, backend="fake") as srv:
            yield srv, receiver


def _ocr(server: Server, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/ocr",
        files={"file": ("page.png", PNG, "image/png")},
        headers=headers,
        timeout=60,
    )


def _roots(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.name == "POST /v1/ocr"]


def test_a_request_is_one_trace_across_the_processes(traced: tuple[Server, Receiver]) -> None:
    server, receiver = traced
    sent = {"traceparent": f"00-{SENT_TRACE}-{SENT_PARENT}-01", "X-Request-ID": "traced-1"}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda h: _ocr(server, h), [sent, {"X-Request-ID": "traced-2"}]))
    assert [a.status_code for a in answers] == [200, 200]

    def complete(spans: list[Span]) -> bool:
        roots = _roots(spans)
        traces = {root.trace_id for root in roots}
        return len(roots) == 2 and all(
            any(s.name == "outputs" and s.trace_id == t for s in spans)
            and any(s.name == "cpu_worker finish" and s.trace_id == t for s in spans)
            for t in traces
        )

    spans = receiver.wait_for(complete)
    first, second = sorted(_roots(spans), key=lambda s: s.attributes["ocr.request_id"])
    # The sent traceparent's trace goes on, under its sender's span; the other starts its own.
    assert (first.trace_id, first.parent_id) == (SENT_TRACE, SENT_PARENT)
    assert second.trace_id != first.trace_id
    assert second.parent_id == ""
    assert first.attributes["http.response.status_code"] == 200
    main_pid = first.resource["process.pid"]
    for root in (first, second):
        trace = [s for s in spans if s.trace_id == root.trace_id]
        by_id = {s.span_id: s for s in trace}
        # One tree: every span but the request's own hangs from a span of the same trace.
        assert [s for s in trace if s.parent_id not in by_id] == [root]
        names = {s.name for s in trace}
        assert {"admission", "page", "memory_budget.wait", "outputs"} <= names
        assert {"queue.wait det", "queue.wait rec", "cpu prepare_page_of"} <= names
        # The CPU stages run in the worker processes, children of the main process's calls.
        in_workers = [s for s in trace if s.name.startswith("cpu_worker ")]
        assert {s.name for s in in_workers} >= {"cpu_worker prepare_page_of", "cpu_worker finish"}
        for span in in_workers:
            assert span.resource["ocr.process"] == "cpu-0"
            assert span.resource["process.pid"] != main_pid
            caller = by_id[span.parent_id]
            assert caller.name == span.name.replace("cpu_worker ", "cpu ")
            assert caller.resource["ocr.process"] == "main"
            assert caller.resource["process.pid"] == main_pid

    # One span a device batch, a root of its own, linked to each request's wait in its queue.
    waits = {(s.trace_id, s.span_id): s for s in spans if s.name.startswith("queue.wait")}
    batches = [s for s in spans if s.name == "device.batch"]
    assert batches
    assert all(s.parent_id == "" for s in batches)
    for batch in batches:
        assert batch.links
        assert all(link in waits for link in batch.links)
        assert {waits[link].name for link in batch.links} == {
            f"queue.wait {batch.attributes['ocr.stage']}"
        }
    linked = {(b.attributes["ocr.stage"], link[0]) for b in batches for link in b.links}
    for root in (first, second):
        assert {("det", root.trace_id), ("rec", root.trace_id)} <= linked
    shared = [b for b in batches if len({link[0] for link in b.links}) == 2]
    assert any(b.attributes["ocr.stage"] == "rec" for b in shared), "a batch for both requests"


def test_log_lines_carry_the_trace_id(traced: tuple[Server, Receiver]) -> None:
    server, receiver = traced
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    answer = _ocr(server, {"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"})
    assert answer.status_code == 200
    receiver.wait_for(lambda spans: any(s.trace_id == trace_id for s in _roots(spans)))
    lines = [line for line in Path(server.log).read_text().splitlines() if trace_id in line]
    assert any("POST /v1/ocr 200" in line and f"trace={trace_id}" in line for line in lines)


def test_a_malformed_traceparent_starts_a_trace_of_its_own(
    traced: tuple[Server, Receiver],
) -> None:
    server, receiver = traced
    answer = _ocr(server, {"traceparent": "00-not-a-trace-01", "X-Request-ID": "traced-bad"})
    assert answer.status_code == 200
    spans = receiver.wait_for(
        lambda found: any(s.attributes.get("ocr.request_id") == "traced-bad" for s in found)
    )
    (root,) = [s for s in spans if s.attributes.get("ocr.request_id") == "traced-bad"]
    assert root.parent_id == ""
    assert len(root.trace_id) == 32


def test_a_job_page_is_a_trace_of_its_own(traced: tuple[Server, Receiver]) -> None:
    server, receiver = traced
    submitted = httpx.post(
        f"{server.url}/v1/jobs", files={"file": ("page.png", PNG, "image/png")}, timeout=60
    )
    assert submitted.status_code == 202
    job_id = submitted.json()["id"]

    def page_traced(spans: list[Span]) -> bool:
        pages = [s for s in spans if s.attributes.get("ocr.job_id") == job_id]
        return bool(pages) and any(
            s.name == "cpu_worker finish" and s.trace_id == pages[0].trace_id for s in spans
        )

    spans = receiver.wait_for(page_traced)
    (page,) = [s for s in spans if s.attributes.get("ocr.job_id") == job_id]
    assert page.name == "job.page"
    assert page.parent_id == ""
    trace = [s for s in spans if s.trace_id == page.trace_id]
    by_id = {s.span_id: s for s in trace}
    assert [s for s in trace if s.parent_id not in by_id] == [page]
    assert {"queue.wait det", "cpu_worker prepare_page_of"} <= {s.name for s in trace}
