"""The server's secrets, read once from the environment at start and taken out of it.

`OCR_API_KEYS` (or whatever `auth.api_keys_env` names) and the `OCR_<SECTION>__<KEY>` overrides
(`OCR_JOBS__STORE` holds the PostgreSQL URL with its password) are read into the config and the
keys once, in the main process. Left in `os.environ`, every process it spawned afterwards
inherited them: the device workers and multiprocessing's resource tracker, whose
`/proc/<pid>/environ` any process of the server's uid reads, a hijacked CPU worker included
(issue 49). `take_secrets` removes them and hands them back for the key reloader; libpq's own
variables (`PGPASSWORD`, ...) stay, as libpq reads them at each connect, and reach no worker
(`serving.workers.sandbox`'s allow-lists).
"""

from __future__ import annotations

from collections.abc import MutableMapping

from serving.config import AuthConfig

OVERRIDE_PREFIX = "OCR_"


def take_secrets(environ: MutableMapping[str, str], auth: AuthConfig) -> dict[str, str]:
    """Remove from `environ` (`os.environ`) the API keys' variable and every config override
    (`OCR_<SECTION>__<KEY>`), already read; returns what was removed."""
    taken = {}
    for name in list(environ):
        override = name.startswith(OVERRIDE_PREFIX) and "__" in name
        if name == auth.api_keys_env or override:
            taken[name] = environ.pop(name)
    return taken
