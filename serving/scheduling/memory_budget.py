"""The memory budget: bytes the whole process tree holds for requests in flight, charged before
any pixel is decoded.

A page's size is known from the PDF's page tree or the image's headers (`documents.page_plans`),
so its cost, everything it makes any process hold (`page_memory.PageCosts`), is charged before
it is rendered, and released when its result is assembled. Pages wait for room first come, first
served; a page that could never fit, even scaled down, is refused with 413. Memory then follows
the budget, not the page count or the page size of whatever clients send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil

from serving.errors import OcrError, Overloaded, PayloadTooLarge

logger = logging.getLogger(__name__)

HOST_SHARE = 0.25
"""Share of the memory this process may use that the default budget takes: what the whole
process tree may use for requests beyond its idle footprint (~0.8 GiB with two CPU device
workers and two CPU workers), which leaves room for that footprint, the page cache and
whatever else shares the host or the container."""

BODY_SHARE = 0.5
"""Share of the budget that request bodies may hold, all together: the rest is kept for pages,
so that pages never wait only for bodies (whose requests wait for those pages)."""

_MIB = 1 << 20


def host_memory_bytes() -> int:
    """Memory this process may use: the host's, or its cgroup's limit when lower (containers)."""
    total = int(psutil.virtual_memory().total)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            text = Path(path).read_text().strip()
            if text.isdigit():
                total = min(total, int(text))
    return total


def default_budget_bytes() -> int:
    """`HOST_SHARE` of `host_memory_bytes()`; warns when /dev/shm cannot hold that much."""
    budget = int(host_memory_bytes() * HOST_SHARE)
    with contextlib.suppress(OSError):
        stat = os.statvfs("/dev/shm")
        shm_bytes = stat.f_blocks * stat.f_frsize
        if shm_bytes < budget // 2:
            logger.warning(
                "/dev/shm holds %d MiB, less than half the memory budget of %d MiB: pages in "
                "flight may not fit (docker run --shm-size, or an emptyDir with medium Memory)",
                shm_bytes // _MIB,
                budget // _MIB,
            )
    return budget


class MemoryBudget:
    """Bytes of decoded pixels in flight, handed out first come, first served."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.used_bytes = 0
        self.body_bytes = 0
        """Of `used_bytes`, what request bodies hold (`BodyCharge`)."""
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._answers: deque[tuple[int, asyncio.Future[None]]] = deque()
        """Answers waiting for room (`acquire_answer`): served before `_waiters`."""
        self._aborted: OcrError | None = None

    @property
    def waiting(self) -> int:
        """Pages (and answers) waiting for room."""
        return len(self._waiters) + len(self._answers)

    def gauge(self, state: str) -> float:
        """ "used" or "total" bytes, or pages "waiting" (for `/metrics`)."""
        return float({"used": self.used_bytes, "total": self.total_bytes}.get(state, self.waiting))

    def describe(self) -> dict[str, int]:
        """For `/readyz`."""
        return {
            "total_bytes": self.total_bytes,
            "used_bytes": self.used_bytes,
            "body_bytes": self.body_bytes,
            "waiting": self.waiting,
        }

    def check(self, nbytes: int) -> None:
        """Refuse a page that could never fit.

        Raises:
            PayloadTooLarge: `nbytes` is over the whole budget.
        """
        if nbytes > self.total_bytes:
            raise PayloadTooLarge(
                f"A page of this size needs about {nbytes // _MIB} MiB while in flight, even "
                f"scaled down; pages may take {self.total_bytes // _MIB} MiB of this server's "
                "memory budget (server.memory_budget_bytes): send it smaller, or at a lower "
                "resolution"
            )

    @contextlib.asynccontextmanager
    async def hold(self, nbytes: int) -> AsyncIterator[Held]:
        """Hold `nbytes` of the budget for the work inside, waiting for room first; given back
        on the way out unless the work kept it (`Held.keep`: a CPU call left running).

        Raises:
            PayloadTooLarge: `nbytes` could never fit.
        """
        await self.acquire(nbytes)
        held = Held(self, nbytes)
        try:
            yield held
        finally:
            held.release()

    async def acquire(self, nbytes: int) -> None:
        """Take `nbytes`, waiting behind earlier pages until they fit (see `hold`)."""
        await self._take(nbytes, first=False)

    async def _take(self, nbytes: int, *, first: bool) -> None:
        """Take `nbytes`, waiting for room: behind every waiter, or (`first`: answers) behind
        the other answers only."""
        if self._aborted is not None:
            raise self._aborted
        self.check(nbytes)
        waiters = self._answers if first else self._waiters
        ahead = self._answers if first else (self._answers or self._waiters)
        if not ahead and self.used_bytes + nbytes <= self.total_bytes:
            self.used_bytes += nbytes
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, granted)
        waiters.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled() and granted.exception() is None:
                self.release(nbytes)  # room was granted as the waiter went away
            else:
                with contextlib.suppress(ValueError):  # `_grant` may have dropped it already
                    waiters.remove(entry)
                self._grant()  # the head may have left: those behind it may fit now
            raise

    async def acquire_answer(self, nbytes: int) -> Held:
        """Take `nbytes` for an answer already made, to hold until it is sent (`Held`), within the
        total: ahead of the pages waiting (an answer gives its bytes back once the client took
        them, a page only after all its work), else waiting for room like them.

        Raises:
            PayloadTooLarge: `nbytes` is over the whole budget.
        """
        await self._take(nbytes, first=True)
        return Held(self, nbytes)

    async def answer_from(self, held_bytes: int, nbytes: int) -> Held:
        """Turn `held_bytes` taken with `acquire` (the work that made an answer) into the
        answer's `nbytes`: the rest is given back, or the difference taken as
        `acquire_answer` does; the answer never takes the budget past its total.

        Raises:
            PayloadTooLarge: `nbytes` is over the whole budget (`held_bytes` given back).
        """
        if nbytes <= held_bytes:
            self.release(held_bytes - nbytes)
            return Held(self, nbytes)
        try:
            self.check(nbytes)
            await self._take(nbytes - held_bytes, first=True)
        except BaseException:
            self.release(held_bytes)
            raise
        return Held(self, nbytes)

    def abort(self, error: OcrError) -> int:
        """Fail every page waiting for room with `error`, and refuse new ones (shutdown).
        Returns how many."""
        self._aborted = error
        failed = 0
        for waiters in (self._answers, self._waiters):
            while waiters:
                _, granted = waiters.popleft()
                if not granted.done():
                    granted.set_exception(error)
                    failed += 1
        return failed

    def release(self, nbytes: int) -> None:
        """Give back `nbytes` taken with `acquire`."""
        self.used_bytes -= nbytes
        self._grant()

    def _grant(self) -> None:
        for waiters in (self._answers, self._waiters):
            while waiters and self.used_bytes + waiters[0][0] <= self.total_bytes:
                nbytes, granted = waiters.popleft()
                if granted.done():
                    continue
                self.used_bytes += nbytes
                granted.set_result(None)
            if waiters:
                return  # the head waits: nothing behind it goes first

    # --- request bodies (`BodyCharge`) ------------------------------------------------------

    @property
    def body_limit_bytes(self) -> int:
        """What request bodies may hold, all together (`BODY_SHARE` of the budget)."""
        return int(self.total_bytes * BODY_SHARE)

    def take_body(self, nbytes: int) -> bool:
        """Take `nbytes` for request bodies at once if they fit, else take nothing.

        Bodies never wait for room: the pages their requests wait for may be the ones they would
        wait behind.
        """
        if self._aborted is not None:
            raise self._aborted
        fits = self.used_bytes + nbytes <= self.total_bytes
        if not fits or self.body_bytes + nbytes > self.body_limit_bytes:
            return False
        self.used_bytes += nbytes
        self.body_bytes += nbytes
        return True

    def release_body(self, nbytes: int) -> None:
        """Give back `nbytes` taken with `take_body`."""
        self.body_bytes -= nbytes
        self.release(nbytes)


class Held:
    """Bytes of the budget held (for an answer made and not yet sent, a render, a staging),
    given back once (`release`), or kept past their holder by what still uses them (`keep`)."""

    def __init__(self, budget: MemoryBudget, nbytes: int) -> None:
        self.budget = budget
        self.nbytes = nbytes
        self.kept = False

    def release(self) -> None:
        """Give the bytes back (once); nothing while they are kept."""
        if not self.kept:
            self._give_back()

    def keep(self) -> Callable[[], None]:
        """Keep the bytes held after their holder lets go (a CPU call whose caller went away
        still runs in its worker, holding the memory, until it ends or the worker is killed);
        returns what gives them back, once."""
        self.kept = True
        return self._give_back

    def take(self) -> int:
        """The bytes held, handed over whole to whoever gives them back now (`answer_from`)."""
        nbytes, self.nbytes = self.nbytes, 0
        return nbytes

    def _give_back(self) -> None:
        nbytes, self.nbytes = self.nbytes, 0
        if nbytes:
            self.budget.release(nbytes)


class BodyCharge:
    """One request body in the memory budget: `copies` bytes for each body byte, charged as the
    bytes arrive and held until the request ends (`with` block).

    `copies` counts what the endpoint holds in memory for each byte: while a body is buffered, its
    chunks and their joined copy; then the body and the document's shared-memory copy.
    """

    def __init__(self, budget: MemoryBudget, *, copies: int) -> None:
        self.budget = budget
        self.copies = copies
        self.held_bytes = 0

    def check(self, body_bytes: int) -> None:
        """Refuse a body that could never be held.

        Raises:
            PayloadTooLarge: `body_bytes` would hold more than bodies may (413).
        """
        need = self.copies * body_bytes
        if need > self.budget.body_limit_bytes:
            raise PayloadTooLarge(
                f"A body of {body_bytes} bytes holds about {need // _MIB} MiB while it is "
                f"served; bodies may hold {self.budget.body_limit_bytes // _MIB} MiB of this "
                "server's memory budget (server.memory_budget_bytes)"
            )

    def add(self, body_bytes: int) -> None:
        """Charge `body_bytes` more of the body.

        Raises:
            PayloadTooLarge: the body so far could never be held (413).
            Overloaded: the budget has no room for it now (503, retry later).
            ShuttingDown: the server is stopping.
        """
        if self.copies == 0 or body_bytes == 0:
            return
        self.check(self.held_bytes // self.copies + body_bytes)
        self._take(self.copies * body_bytes)

    def add_bytes(self, nbytes: int) -> None:
        """Charge `nbytes` more that handling the body takes (its parse: `json_body`), as `add`
        charges the body's own.

        Raises:
            PayloadTooLarge: the body would hold more than bodies may (413).
            Overloaded: the budget has no room for it now (503, retry later).
        """
        if self.held_bytes + nbytes > self.budget.body_limit_bytes:
            raise PayloadTooLarge(
                f"This body takes about {(self.held_bytes + nbytes) // _MIB} MiB to read (a "
                f"text of characters above U+00FF takes 4 bytes each); bodies may hold "
                f"{self.budget.body_limit_bytes // _MIB} MiB of this server's memory budget "
                "(server.memory_budget_bytes)"
            )
        self._take(nbytes)

    def _take(self, need: int) -> None:
        if not self.budget.take_body(need):
            raise Overloaded(
                "No room in the memory budget for this request body now "
                f"({self.budget.used_bytes // _MIB} of {self.budget.total_bytes // _MIB} MiB "
                "in use); retry later"
            )
        self.held_bytes += need

    def release(self) -> None:
        """Give back everything charged."""
        held, self.held_bytes = self.held_bytes, 0
        if held:
            self.budget.release_body(held)

    def __enter__(self) -> BodyCharge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
