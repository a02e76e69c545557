"""`wordfreq`: count words in pure Python, chunk by chunk, with a checkpoint and a
progress event per chunk. The counting core is a generator so that every runner —
thread, process, asyncio — drives the same code and gets the identical result."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

from tasklab.errors import InvalidPayload

CHUNK_BYTES = 64 * 1024
MAX_PATH = 4096  # PATH_MAX on Linux
_WORD = re.compile(r"\w+")


def chunks(text: str, size: int = CHUNK_BYTES) -> Generator[str, None, None]:
    """Split at whitespace so that no word is cut in two."""
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            cut = _last_space(text, start, end)
            end = cut if cut > start else end
        yield text[start:end]
        start = end


def _last_space(text: str, start: int, end: int) -> int:
    for i in range(end, start, -1):
        if text[i - 1].isspace():
            return i
    return -1


def count(text: str, top: int) -> Generator[dict[str, int], None, dict[str, Any]]:
    """Yields `{"done", "total"}` (bytes) after each chunk; returns the result."""
    total = len(text.encode())
    done = 0
    counts: Counter[str] = Counter()
    for chunk in chunks(text):
        counts.update(_WORD.findall(chunk.casefold()))
        done += len(chunk.encode())
        yield {"done": done, "total": total}
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "top": [[w, c] for w, c in ranked[:top]],
        "total_words": sum(counts.values()),
        "distinct_words": len(counts),
    }


def resolve_path(data_dir: str | os.PathLike[str] | None, path: str) -> Path:
    """The file `path` names inside the data directory, symlinks resolved; anything
    outside it (or no data directory at all) is refused, so no client can read
    server files."""
    if data_dir is None:
        raise InvalidPayload("'path' needs a data directory (--data-dir / TASKLAB_DATA_DIR)")
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH or "\0" in path:
        raise InvalidPayload(f"'path' must be a file name of 1 to {MAX_PATH} characters")
    root = Path(data_dir).resolve()
    try:
        target = (root / path).resolve()
        inside = target.is_relative_to(root)
        is_file = inside and target.is_file()
    except (OSError, ValueError):  # a name the file system refuses (too long, bad bytes)
        raise InvalidPayload("'path' is not a usable file name") from None
    shown = path if len(path) <= 80 else path[:77] + "..."
    if not inside:
        raise InvalidPayload(f"path {shown!r} is outside the data directory")
    if not is_file:
        raise InvalidPayload(f"path {shown!r} is not a file in the data directory")
    return target


def check(payload: dict[str, Any], data_dir: Any) -> None:
    has_text, has_path = payload.get("text") is not None, payload.get("path") is not None
    if has_text == has_path:
        raise InvalidPayload("wordfreq takes exactly one of 'text' or 'path'")
    top = payload.get("top", 10)
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise InvalidPayload("'top' must be a non-negative integer")
    if has_path:
        resolve_path(data_dir, payload["path"])


def load_text(data_dir: Any, text: str | None, path: str | None) -> str:
    if path is not None:
        return resolve_path(data_dir, path).read_text(encoding="utf-8", errors="replace")
    return text or ""


def wordfreq(
    ctx: Any, text: str | None = None, path: str | None = None, top: int = 10
) -> dict[str, Any]:
    """Count words (`\\w+` of the casefolded text); top words by count, then word."""
    counting = count(load_text(ctx.data_dir, text, path), top)
    while True:
        ctx.checkpoint()
        try:
            progress = next(counting)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        ctx.emit(progress)


async def wordfreq_async(
    ctx: Any, text: str | None = None, path: str | None = None, top: int = 10
) -> dict[str, Any]:
    """The same counting generator, driven from the event loop (each chunk is a short
    burst of CPU between awaits)."""
    counting = count(load_text(ctx.data_dir, text, path), top)
    while True:
        await ctx.checkpoint()
        try:
            progress = next(counting)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await ctx.emit(progress)
