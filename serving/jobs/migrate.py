"""`python -m serving.jobs.migrate`: bring the PostgreSQL job store's schema up to date with a
role that may change it, so the server's own role needs no DDL (issue 37, item 13).

    python -m serving.jobs.migrate --url postgresql://admin@db/ocr --grant ocr_app

migrates the schema named by `--url` (else `jobs.store` from `--config` and `OCR_*` variables)
and, with `--grant ROLE`, lets ROLE read and write the tables (no DDL). The server then runs with
ROLE's URL and migrates nothing: a schema behind its version makes it refuse to start with a
message naming this command. SQLite stores are migrated by the server itself.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from serving.config import load_config, redact_url
from serving.errors import ConfigError
from serving.jobs.store.postgres_schema import SCHEMA_VERSION, grant, migrate, schema_version
from serving.jobs.store.types import JobStoreUnavailable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.jobs.migrate",
        description="Migrate the PostgreSQL job store's schema (needs a role with DDL).",
    )
    parser.add_argument("--url", help="postgresql:// URL of an admin role (default: jobs.store)")
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("OCR_CONFIG"),
        help="config.toml whose jobs.store to migrate, when --url is not given",
    )
    parser.add_argument(
        "--grant", metavar="ROLE", help="let ROLE read and write the tables (the server's role)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Migrate; 0 when the schema is at this server's version, 2 when it cannot be."""
    args = parse_args(argv)
    try:
        url = args.url or load_config(args.config, os.environ).jobs.store
    except ConfigError as err:
        print(f"configuration error: {err}")  # noqa: T201
        return 2
    if not url.startswith(("postgresql://", "postgres://")):
        print(f"{redact_url(url)} is not a PostgreSQL store: the server migrates SQLite itself")  # noqa: T201
        return 2
    try:
        with (
            psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn,
            conn.transaction(),
        ):
            before = schema_version(conn)
            migrate(conn)
            if args.grant:
                grant(conn, args.grant)
    except (psycopg.Error, JobStoreUnavailable) as err:
        print(f"cannot migrate {redact_url(url)}: {err}")  # noqa: T201
        return 2
    granted = f"; {args.grant} may read and write it" if args.grant else ""
    print(  # noqa: T201
        f"{redact_url(url)}: schema version {SCHEMA_VERSION} (was {before or 0}){granted}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
