"""A throwaway PostgreSQL server for tests: Debian's binaries, initdb'd and started in a temp dir.

It listens on a unix socket in its own directory only (no TCP port to collide on). PostgreSQL
refuses to run as root, so under root (CI, containers) it runs as the `postgres` user the Debian
package creates (else `nobody`). Durability is off (`fsync=off`): the tests kill servers, not the
machine.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

MISSING = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` "
    "package (scripts/system-deps.sh, which `make test` runs, does)"
)


def find_binaries() -> Path | None:
    """The directory holding `initdb` and `pg_ctl`: on PATH, else Debian's newest version."""
    initdb = shutil.which("initdb")
    if initdb is not None and shutil.which("pg_ctl") is not None:
        return Path(initdb).resolve().parent
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


class PostgresServer:
    """One `postgres` on a unix socket in `root`; `database()` gives each test its own."""

    user = "ocr"

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="ocr-pg-"))
        self.data = self.root / "data"
        self._run_as: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._run_as = pwd.getpwnam("postgres" if _has_user("postgres") else "nobody")
            os.chown(self.root, self._run_as.pw_uid, self._run_as.pw_gid)
            self.root.chmod(0o755)

    def start(self) -> None:
        """initdb and start; raises with the server's log when it does not come up."""
        self._ctl(
            self.bindir / "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        options = (
            f"-k {self.root} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
            " -c full_page_writes=off -c max_connections=100"
        )
        self._ctl(
            self.bindir / "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (immediately) and remove its directory."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ctl(self.bindir / "pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        """A libpq URL of `database` over the server's socket."""
        return f"postgresql://{self.user}@/{database}?host={self.root}"

    def database(self) -> str:
        """A URL whose tables are new and empty: a schema of its own, first on the search path
        (milliseconds, where CREATE DATABASE takes half a second)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}".encode())
        return f"{self.url()}&options=-csearch_path%3D{name}"

    def _ctl(self, *command: str | Path) -> None:
        result = subprocess.run(
            [str(c) for c in command],
            user=None if self._run_as is None else self._run_as.pw_uid,
            group=None if self._run_as is None else self._run_as.pw_gid,
            extra_groups=None if self._run_as is None else [],
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-3000:] if log.exists() else ""
            raise RuntimeError(f"{command[0]} failed:\n{result.stdout}{result.stderr}{tail}")


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
