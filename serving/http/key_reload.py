"""API keys read again when their files change, without a restart.

Keys were read once at start: a key revoked or rotated in its file (or in the Kubernetes Secret
mounted as one, which the kubelet swaps in place) stayed valid until the pod restarted. Here the
key files' identity (inode, size, modification time) is looked at on requests, at most every
`CHECK_S`; when it changed, every key is read again as at start. A file that no longer reads, or
that would leave no key at all (turning authentication off), keeps the previous keys and is
logged. Keys from the environment change only with a restart; so does turning keys on or off.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

from serving.errors import ConfigError
from serving.http.keys import ApiKey

logger = logging.getLogger(__name__)

CHECK_S = 5.0
"""Key files are looked at no more often than this."""

Stamp = tuple[tuple[int, int, int] | None, ...]


class KeyReloader:
    """Keys, read again by `load` once one of `paths` has changed."""

    def __init__(
        self,
        load: Callable[[], tuple[ApiKey, ...]],
        paths: Sequence[str],
        *,
        check_s: float = CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._paths = tuple(paths)
        self._check_s = check_s
        self._clock = clock
        self._stamp = _stamp(self._paths)
        self._next_check = clock() + check_s

    def refresh(self, keys: tuple[ApiKey, ...]) -> tuple[ApiKey, ...]:
        """`keys`, or the keys read again if a key file changed since they were read."""
        now = self._clock()
        if now < self._next_check:
            return keys
        self._next_check = now + self._check_s
        stamp = _stamp(self._paths)
        if stamp == self._stamp:
            return keys
        self._stamp = stamp
        try:
            fresh = self._load()
        except ConfigError as err:
            logger.error("API keys not reloaded, the previous ones stay: %s", err)
            return keys
        if not fresh:
            logger.error("API keys not reloaded: the files now hold none (auth would be off)")
            return keys
        logger.info("API keys reloaded: %d (were %d)", len(fresh), len(keys))
        return fresh


def _stamp(paths: Sequence[str]) -> Stamp:
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(stamps)
