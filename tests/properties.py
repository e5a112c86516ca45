"""Hypothesis settings for the property tests, a count of the inputs each tried, shared inputs.

Every property is decorated, below `@given`, with `@counted()`: it applies the `properties`
profile (fixed seed, bounded, no example database written into the repository) and counts each
call. `tests/conftest.py` fails a property that tried fewer inputs than it was configured for, and
prints one line with the counts at the end of the session.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

from serving.errors import OcrError

PROFILE = "properties"
MAX_EXAMPLES = 100
"""Inputs per property unless it says otherwise."""
SCALE = float(os.environ.get("PROPERTY_EXAMPLES_SCALE", "1"))
"""Multiplies every property's inputs, for a deeper run: `PROPERTY_EXAMPLES_SCALE=20 pytest ...`."""

# Hypothesis caches constants and Unicode tables even without an example database; keep them out
# of the repository.
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "ocr-serving-hypothesis")

settings.register_profile(
    PROFILE,
    derandomize=True,  # the seed comes from the test's name: the same inputs on every run
    database=None,  # no example database: failures are reproduced from the fixed seed
    deadline=None,  # a loaded CI machine must not turn slow examples into failures
    max_examples=MAX_EXAMPLES,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TRIED: Counter[str] = Counter()
"""Property name -> inputs it was called with in this session."""
EXPECTED: dict[str, int] = {}
"""Property name -> the inputs hypothesis guarantees to try (its `max_examples`)."""

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def counted(max_examples: int = MAX_EXAMPLES, *, exhaustible: bool = False) -> Callable[[F], F]:
    """Apply the `properties` profile with `max_examples`, and count every input tried.

    Args:
        max_examples: Inputs to try. Hypothesis runs exactly this many valid inputs unless the
            strategy runs out of distinct ones first.
        exhaustible: The strategy may run out (a small finite space), so the count is recorded
            but not checked.
    """

    examples = max(1, round(max_examples * SCALE))

    def decorate(fn: F) -> F:
        name = fn.__name__

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            TRIED[name] += 1
            return fn(*args, **kwargs)

        if not exhaustible:
            EXPECTED[name] = examples
        profile = settings.get_profile(PROFILE)
        return settings(profile, max_examples=examples)(run)  # type: ignore[return-value]

    return decorate


def outcome(fn: Callable[[], T]) -> T | OcrError:
    """`fn()`'s value, or the `OcrError` it raised, which must carry a 4xx status.

    Any other exception propagates: the property fails.
    """
    try:
        return fn()
    except OcrError as err:
        refused = err
    assert 400 <= refused.http_status < 500, refused
    return refused


def summary() -> str:
    """One line: the total, then each property's count."""
    total = sum(TRIED.values())
    each = ", ".join(f"{name}={count}" for name, count in sorted(TRIED.items()))
    return f"property tests: {total} inputs tried by {len(TRIED)} properties ({each})"


def prob_map(seed: int, height: int, width: int, blobs: int) -> np.ndarray:
    """A random DB probability map: noise under a few bright rectangles, like lines of text."""
    rng = np.random.default_rng(seed)
    prob = rng.random((height, width), dtype=np.float32) * 0.4
    for _ in range(blobs):
        y, x = rng.integers(0, height), rng.integers(0, width)
        h, w = rng.integers(1, max(2, height // 3)), rng.integers(1, width + 1)
        prob[y : y + h, x : x + w] = rng.uniform(0.5, 1.0)
    return prob


def assert_bgr_image(image: np.ndarray) -> None:
    """A non-empty 8-bit, 3-channel image, as decoders and crops must give."""
    assert image.dtype == np.uint8
    assert image.ndim == 3
    assert image.shape[2] == 3
    assert image.shape[0] >= 1
    assert image.shape[1] >= 1
