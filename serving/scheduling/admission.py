"""Admission: which requests the server takes on, from a hard cap and the measured capacity.

A fixed count of pages in flight is not the host's capacity: with 64 admitted on 2 cores the last
pages waited past their deadline and were answered 504 after the work was done. So admission also
measures how long the server takes per page while busy (smoothed), and sheds a request whose pages
would, at that pace, finish after its deadline: the client hears 503 + Retry-After at once instead
of a 504 minutes later, and the pages already admitted keep their pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from serving.errors import Overloaded


def admission_pages(max_inflight_pages: int, per_gpu: int, gpus: int) -> tuple[int, str]:
    """The admission cap of a server with `gpus` GPU devices, and why, for `/readyz`:
    `server.max_inflight_pages`, and `server.inflight_pages_per_gpu` more for each GPU.

    >>> admission_pages(64, 256, 0)
    (64, 'server.max_inflight_pages')
    >>> admission_pages(64, 256, 2)[0]
    576
    """
    if gpus == 0 or per_gpu == 0:
        return max_inflight_pages, "server.max_inflight_pages"
    pages = max_inflight_pages + per_gpu * gpus
    why = (
        f"server.max_inflight_pages ({max_inflight_pages}) + server.inflight_pages_per_gpu "
        f"({per_gpu}) x {gpus} GPU{'s' if gpus > 1 else ''}: a GPU's batches fill only with "
        "hundreds of pages in flight"
    )
    return pages, why


@dataclass(slots=True, kw_only=True)
class Admission:
    """Pages in flight; sheds beyond `max_pages`, or past the deadline at the measured pace."""

    max_pages: int
    max_pages_why: str = "server.max_inflight_pages"
    """Where `max_pages` comes from (`admission_pages`)."""
    smoothing: float = 0.2
    """Weight of the newest sample in the pace (exponential moving average)."""
    clock: Callable[[], float] = field(default=time.monotonic)
    inflight: int = 0
    page_s: float | None = None
    """Seconds between page completions while busy: the server's pace; None until measured."""
    _last_done: float = 0.0

    def expected_s(self, pages: int) -> float | None:
        """When `pages` more would be done at the measured pace, behind those in flight."""
        if self.page_s is None:
            return None
        return (self.inflight + pages) * self.page_s

    def admit(self, pages: int, *, deadline_s: float | None = None, held: int = 0) -> None:
        """Reserve `pages` more for a request that holds `held` already, to be done within
        `deadline_s` from now.

        A request alone on the server is taken whatever its size (that is also how the pace is
        learnt): there is nobody to wait for.

        Raises:
            Overloaded: over `max_pages`, or they would finish past `deadline_s`.
        """
        if self.inflight > held:
            if self.inflight + pages > self.max_pages:
                excess = self.inflight + pages - self.max_pages
                raise Overloaded(
                    f"{self.inflight} pages in flight; limit {self.max_pages}",
                    retry_after_s=None if self.page_s is None else excess * self.page_s,
                )
            expected = self.expected_s(pages)
            if deadline_s is not None and expected is not None and expected > deadline_s:
                raise Overloaded(
                    f"{self.inflight} pages in flight: at {self.page_s:.2f} s a page these would "
                    f"be done in about {expected:.0f} s, past the {deadline_s:.0f} s deadline",
                    retry_after_s=expected - deadline_s,
                )
        elif self.inflight == 0:
            self._last_done = self.clock()  # busy from now: the first page's time is a sample
        self.inflight += pages

    def release(self, pages: int) -> None:
        """Return `pages` reserved with `admit`."""
        self.inflight -= pages

    def page_done(self) -> None:
        """A page was finished: one more sample of the pace."""
        now = self.clock()
        sample = max(0.0, now - self._last_done)
        self._last_done = now
        if self.page_s is None:
            self.page_s = sample
        else:
            self.page_s += self.smoothing * (sample - self.page_s)

    def describe(self) -> dict[str, float | int | str | None]:
        """For `/readyz`."""
        return {
            "inflight_pages": self.inflight,
            "page_s": self.page_s,
            "max_pages": self.max_pages,
            "max_pages_why": self.max_pages_why,
        }
