"""What embedding an image upload in a searchable PDF holds, per pixel of the image as sent
(issue 49, item 6: `serving.outputs.service.EMBED_BYTES_PER_PX`).

`python -m loadtest.bench.embed_memory --side 4000` writes a PNG and a JPEG of that side (noise
in 8-pixel runs, which compresses about as a scan does), then, in a fresh process for each, has
`serving.outputs.pdf` render a one-page searchable PDF of it and prints one JSON line: the
format, the upload's bytes, the output's, and the process's peak RSS growth over its size before
the render, in bytes a pixel.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

FORMATS = {
    "png": ("PNG", "image/png", {"compress_level": 1}),
    "jpeg": ("JPEG", "image/jpeg", {"quality": 90}),
}


def _write(path: Path, side: int, fmt: str) -> None:
    rng = np.random.default_rng(0)
    runs = rng.integers(0, 256, (side, side // 8, 3), dtype=np.uint8).repeat(8, axis=1)
    name, _, options = FORMATS[fmt]
    Image.fromarray(runs).save(path, format=name, **options)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure(path: Path, fmt: str, side: int) -> dict[str, object]:
    """Render `path` (an image of `side` x `side`) as a searchable PDF in this process."""
    from serving.outputs.document import Document, Page, Source
    from serving.outputs.formats import render_bytes

    data = path.read_bytes()
    document = Document(
        name=path.name,
        pages=(Page(width=side, height=side, blocks=()),),
        source=Source(FORMATS[fmt][1], data),
    )
    before = _rss_bytes()
    output = render_bytes(document, "pdf")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "format": fmt,
        "side": side,
        "upload_bytes": len(data),
        "output_bytes": len(output),
        "peak_bytes_per_px": round((peak - before) / side / side, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure each format in a process of its own (peak RSS is the process's)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", type=int, default=4000)
    parser.add_argument("--one", choices=sorted(FORMATS), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(Path(args.path), args.one, args.side)))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        for fmt in sorted(FORMATS):
            path = Path(folder) / f"upload.{fmt}"
            _write(path, args.side, fmt)
            command = [sys.executable, "-m", "loadtest.bench.embed_memory"]
            command += ["--side", str(args.side), "--one", fmt, "--path", str(path)]
            subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
