"""The figure experiments 005 and 008 print: each kind of commit's median time and its
share of the commit probe's rate (the ceiling for `bench queue`'s enqueue-one)."""

from __future__ import annotations

import statistics


def print_shares(results: dict[str, list[float]], probe: str = "probe") -> None:
    """`results`: µs per commit, one sample per round, for each kind (`probe` among them)."""
    base = statistics.median(results[probe])
    width = max(map(len, results))
    for name, samples in results.items():
        median = statistics.median(samples)
        print(
            f"{name:{width}s} {median:6.0f} µs per commit  {base / median:5.2f} of the probe's rate"
        )
