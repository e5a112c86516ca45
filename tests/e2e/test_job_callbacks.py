"""Signed webhooks from `ocr-serve` (issue 50, item 1) to a real receiver
(tests/webhook_receiver.py, which checks every signature with the Standard Webhooks reference
library): a job's end and its documents' are called back signed with the key's secret; a
receiver that is down, then slow, is retried until it answers, each attempt on the job; a
delivery pending when the server stops is sent after its restart. One server on the model-free
fake, retries a fraction of a second apart."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from serving.http.keys import hash_key
from tests import images
from tests.e2e.conftest import SLOW_FAKE, Server, free_port, fresh_server, stop_server, wait_ready

KEYS = {"alice": "alice-0c1d2e3f4a5b6c7d", "bob": "bob-7d6c5b4a3f2e1d0c"}
ALICE_SECRET = "whsec_" + base64.b64encode(b"alice's own signing secret!!").decode()
DEPLOYMENT_SECRET = "whsec_" + base64.b64encode(b"the deployment-wide signing key").decode()
PNG = images.encode_png(images.latin_lines().image)
REPO = Path(__file__).parents[2]


class Receiver:
    """`tests.webhook_receiver` on one port, started and killed at will."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.events = tmp / "events.jsonl"
        self.events.touch()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.webhook_receiver",
                f"--port={self.port}",
                f"--out={self.events}",
                f"--secret=/alice={ALICE_SECRET}",
                f"--secret=/bob={DEPLOYMENT_SECRET}",
                "--slow-s=4",
            ],
            cwd=REPO,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url("/"), timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError("the receiver did not start")

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
            self.process = None

    def received(self, match: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        lines = self.events.read_text().splitlines()
        return [entry for entry in map(json.loads, lines) if match(entry)]

    def wait_for(
        self, match: Callable[[dict[str, Any]], bool], count: int = 1, timeout_s: float = 60
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.received(match)
            if len(found) >= count:
                return found
            time.sleep(0.1)
        raise TimeoutError(f"{len(self.received(match))} of {count} calls came")


@dataclass
class Deployment:
    """The server under test, restarted in place by the last test."""

    tmp: Path
    server: Server

    def restart(self) -> None:
        stop_server(self.server)
        self.server = fresh_server(
            self.tmp, self.tmp.joinpath("config.toml").read_text(), backend=SLOW_FAKE
        )
        wait_ready(self.server)


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    receiver = Receiver(tmp_path_factory.mktemp("receiver"))
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.kill()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("webhooks")
    keys = tmp / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "alice"\nsha256 = "{hash_key(KEYS["alice"])}"\n'
        f'webhook_secret = "{ALICE_SECRET}"\n'
        f'[[keys]]\nid = "bob"\nsha256 = "{hash_key(KEYS["bob"])}"\n'
    )
    (tmp / "whsec").write_text(DEPLOYMENT_SECRET + "\n")
    os.chmod(tmp / "whsec", 0o600)
    config = f"""
[server]
max_body_bytes = 8000000
[paddlex]
visualize = false
[auth]
keys_file = "{keys}"
[workers]
devices = ["cpu"]
cpu_workers = 1
cpu_instances = 1
[jobs]
data_dir = "{tmp / "data"}"
[webhooks]
allowed_hosts = ["127.0.0.1"]
allow_private_addresses = true
secret_file = "{tmp / "whsec"}"
timeout_s = 2.0
retry_first_s = 0.3
retry_max_interval_s = 1.0
"""
    server = fresh_server(tmp, config, backend=SLOW_FAKE)
    deployment = Deployment(tmp, server)
    try:
        wait_ready(server)
        yield deployment
    finally:
        stop_server(deployment.server)


def _submit(server: Server, key: str, files: int = 1, **fields: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/jobs",
        files=[("file", (f"page{i}.png", PNG, "image/png")) for i in range(files)],
        data=fields,
        headers={"X-API-Key": KEYS[key]},
        timeout=60,
    )


def _job(server: Server, key: str, job_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers={"X-API-Key": KEYS[key]})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _wait_job(
    server: Server, key: str, job_id: str, until: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = _job(server, key, job_id)
        if until(body):
            return body
        time.sleep(0.1)
    raise TimeoutError(json.dumps(body))


def _about(job_id: str) -> Callable[[dict[str, Any]], bool]:
    def match(entry: dict[str, Any]) -> bool:
        data = (entry.get("body") or {}).get("data", {})
        return job_id in (data.get("id"), data.get("job_id"))

    return match


def test_a_job_and_its_documents_are_called_back_signed_with_the_keys_secret(
    deployment: Deployment, receiver: Receiver
) -> None:
    server = deployment.server
    answer = _submit(
        server,
        "alice",
        files=2,
        callback_url=receiver.url("/alice"),
        callback_events="job,document",
    )
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    calls = receiver.wait_for(_about(job_id), count=3)
    assert all(call["verified"] for call in calls), calls
    types = sorted(call["body"]["type"] for call in calls)
    assert types == ["document.completed", "document.completed", "job.succeeded"]
    end = next(call["body"] for call in calls if call["body"]["type"] == "job.succeeded")
    assert end["data"]["pages_done"] == 2
    assert end["data"]["href"] == f"/v1/jobs/{job_id}"
    documents = sorted(
        c["body"]["data"]["index"] for c in calls if c["body"]["type"] != end["type"]
    )
    assert documents == [0, 1]
    assert len({call["id"] for call in calls}) == 3  # one webhook-id per event
    job = _wait_job(
        server, "alice", job_id, lambda b: all(d["status"] == "delivered" for d in b["deliveries"])
    )
    assert job["callback"] == {"url": receiver.url("/alice"), "events": ["job", "document"]}
    assert sorted(d["id"] for d in job["deliveries"]) == sorted(c["id"] for c in calls)
    assert {d["attempts"] for d in job["deliveries"]} == {1}
    assert all(d["log"][0]["status_code"] == 204 for d in job["deliveries"])


def test_a_receiver_down_then_slow_is_retried_until_it_answers(
    deployment: Deployment, receiver: Receiver
) -> None:
    server = deployment.server
    receiver.kill()
    answer = _submit(server, "bob", callback_url=receiver.url("/bob"))
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    failing = _wait_job(
        server,
        "bob",
        job_id,
        lambda b: bool(b["deliveries"]) and b["deliveries"][0]["attempts"] >= 3,
    )
    assert failing["status"] == "succeeded"  # the job is over whatever its receiver does
    delivery = failing["deliveries"][0]
    assert delivery["status"] == "pending"
    assert "cannot reach the receiver" in delivery["last_error"]
    assert delivery["next_attempt_at"] is not None
    assert httpx.get(f"{server.url}/livez").status_code == 200

    receiver.start()
    (call,) = receiver.wait_for(_about(job_id))
    assert call["verified"]  # bob has no secret of his own: the deployment's signs
    assert call["id"] == delivery["id"]
    done = _wait_job(server, "bob", job_id, lambda b: b["deliveries"][0]["status"] == "delivered")
    log = done["deliveries"][0]["log"]
    assert [entry["ok"] for entry in log][-1] is True
    assert not any(entry["ok"] for entry in log[:-1])

    slow = _submit(server, "bob", callback_url=receiver.url("/slow/bob"))
    slow_id = slow.json()["id"]
    timed_out = _wait_job(
        server, "bob", slow_id, lambda b: bool(b["deliveries"] and b["deliveries"][0]["log"])
    )
    assert "no answer within 2 s" in timed_out["deliveries"][0]["last_error"]
    assert httpx.delete(f"{server.url}/v1/jobs/{slow_id}", headers={"X-API-Key": KEYS["bob"]})
    metrics = httpx.get(f"{server.url}/metrics").text
    assert _value(metrics, 'ocr_deliveries_total{kind="webhook",outcome="retried"}') >= 3
    assert _value(metrics, 'ocr_deliveries_total{kind="webhook",outcome="delivered"}') >= 4


def test_callbacks_the_deployment_does_not_allow_are_refused_at_submit(
    deployment: Deployment,
) -> None:
    server = deployment.server
    for fields, says in (
        ({"callback_url": "http://example.com/hook"}, "webhooks.allowed_hosts"),
        ({"callback_url": "ftp://127.0.0.1/hook"}, "only http and https"),
        ({"callback_url": "http://127.0.0.1:1/x", "callback_events": "page"}, "callback_events"),
        ({"callback_events": "job"}, "needs a callback_url"),
    ):
        answer = _submit(server, "alice", **fields)
        assert answer.status_code == 422, answer.text
        assert says in answer.json()["error"]["message"]


def test_a_delivery_pending_when_the_server_stops_is_sent_after_its_restart(
    deployment: Deployment, receiver: Receiver
) -> None:
    receiver.kill()
    answer = _submit(deployment.server, "alice", callback_url=receiver.url("/alice"))
    job_id = answer.json()["id"]
    pending = _wait_job(
        deployment.server,
        "alice",
        job_id,
        lambda b: bool(b["deliveries"] and b["deliveries"][0]["log"]),
    )
    delivery_id = pending["deliveries"][0]["id"]
    deployment.restart()  # SIGTERM, then a new process on the same store
    receiver.start()
    (call,) = receiver.wait_for(_about(job_id))
    assert call["verified"]
    assert call["id"] == delivery_id
    done = _wait_job(
        deployment.server, "alice", job_id, lambda b: b["deliveries"][0]["status"] == "delivered"
    )
    assert done["deliveries"][0]["attempts"] >= 2


def _value(metrics: str, series: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")
