"""Recognition postprocessing: greedy CTC decoding of the recogniser's per-step outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

_BLANK = 0


def build_charset(character_dict: Sequence[str], use_space_char: bool = True) -> tuple[str, ...]:
    """Builds the CTC label table as PaddleX's CTCLabelDecode does.

    Args:
        character_dict: `PostProcess.character_dict` from the recogniser's inference.yml (a list
            of characters, or one string of characters).
        use_space_char: Append " " as the last label, as PaddleX does by default.

    Returns:
        The labels: "blank" at index 0, then the dictionary, then " " when requested.
    """
    labels = list(character_dict)
    if use_space_char:
        labels.append(" ")
    return ("blank", *labels)


def reduce_rec_output(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reduces the recogniser's [n, T, C] softmax output to what decoding needs.

    Args:
        probs: Per-step class probabilities, shape (n, T, C).

    Returns:
        The argmax class per step (int32, shape (n, T)) and its probability (float32, (n, T)).
    """
    return probs.argmax(axis=-1).astype(np.int32), probs.max(axis=-1).astype(np.float32)


def argmax_pairs(probs: np.ndarray) -> np.ndarray:
    """What an engine that reduces on the device answers (`models.base.ArgmaxOutput`), computed
    on the host: (..., 2) float32, the argmax of the last axis, then its value."""
    return np.stack([probs.argmax(axis=-1).astype(np.float32), probs.max(axis=-1)], axis=-1)


def split_argmax_pairs(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`reduce_rec_output`'s result from an engine that reduced on the device.

    Args:
        pairs: (n, T, 2) float32: each step's argmax class (exact below 2**24), then its
            probability.

    Returns:
        The argmax class per step (int32, shape (n, T)) and its probability (float32, (n, T)).
    """
    if pairs.ndim != 3 or pairs.shape[-1] != 2:
        raise ValueError(f"expected (n, T, 2) argmax pairs, got {pairs.shape}")
    return pairs[..., 0].astype(np.int32), np.ascontiguousarray(pairs[..., 1], dtype=np.float32)


class CtcPath(NamedTuple):
    """One row's greedy CTC path decoded, with where each character was read."""

    text: str
    score: float
    columns: np.ndarray
    """int32, one per character of `text`: the step (column of the recogniser's output) that
    emitted it; word boxes are placed from these (`pipelines.words`)."""
    probs: np.ndarray
    """float32, one per character of `text`: its step's probability."""
    steps: int
    """Steps in the row (the output's width, padding included)."""


def decode_ctc(
    indices: np.ndarray, max_probs: np.ndarray, charset: Sequence[str]
) -> list[tuple[str, float]]:
    """Decodes greedy CTC paths exactly as PaddleX's CTCLabelDecode does.

    Repeated labels are merged and blanks dropped. The score is numpy's float32 mean of the kept
    steps' probabilities, converted to a Python float, or 0.0 when no step is kept.

    Args:
        indices: Argmax class per step, shape (n, T).
        max_probs: Probability of that class, float32, shape (n, T).
        charset: Labels from `build_charset`.

    Returns:
        One (text, score) pair per row.
    """
    return [(path.text, path.score) for path in decode_ctc_paths(indices, max_probs, charset)]


def decode_ctc_paths(
    indices: np.ndarray, max_probs: np.ndarray, charset: Sequence[str]
) -> list[CtcPath]:
    """`decode_ctc` (the same texts and scores), keeping the step of each character, as
    PaddleOCR's CTCLabelDecode does with `return_word_box`.

    Args:
        indices: Argmax class per step, shape (n, T).
        max_probs: Probability of that class, float32, shape (n, T).
        charset: Labels from `build_charset`.

    Returns:
        One path per row.
    """
    results: list[CtcPath] = []
    for row, probs in zip(indices, max_probs, strict=True):
        selection = np.ones(len(row), dtype=bool)
        selection[1:] = row[1:] != row[:-1]
        selection &= row != _BLANK
        labels = [charset[i] for i in row[selection]]
        text = "".join(labels)
        kept = probs[selection]
        score = float(np.mean(kept)) if len(kept) else 0.0
        # A label of several characters (none in PaddleOCR's dictionaries) gives each its step.
        repeats = [len(label) for label in labels]
        columns = np.repeat(np.flatnonzero(selection).astype(np.int32), repeats)
        results.append(
            CtcPath(
                text=text,
                score=score,
                columns=columns,
                probs=np.repeat(kept.astype(np.float32), repeats),
                steps=len(row),
            )
        )
    return results
