"""`stream_text`: stream a text word by word at a given rate (the streaming demo)."""

from __future__ import annotations

import re
from typing import Any

from tasklab.errors import InvalidPayload

_TOKEN = re.compile(r"\s*\S+|\s+")


def tokens(text: str) -> list[str]:
    """Word tokens with their leading whitespace; joined they give `text` back."""
    return _TOKEN.findall(text)


def check(payload: dict[str, Any], data_dir: Any) -> None:
    rate = payload.get("tokens_per_second", 20.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 100_000:
        raise InvalidPayload("'tokens_per_second' must be a number in (0, 100000]")


def stream_text(ctx: Any, text: str, tokens_per_second: float = 20.0) -> str:
    pause = 1.0 / tokens_per_second
    for token in tokens(text):
        ctx.checkpoint()
        ctx.stream(token)
        ctx.sleep(pause)
    return text


async def stream_text_async(ctx: Any, text: str, tokens_per_second: float = 20.0) -> str:
    pause = 1.0 / tokens_per_second
    for token in tokens(text):
        await ctx.checkpoint()
        await ctx.stream(token)
        await ctx.sleep(pause)
    return text
