"""Counters and histograms rendered in the Prometheus text exposition format (version 0.0.4).

Deliberately tiny instead of depending on prometheus_client (see REPORT.md): three metrics, no global
registry (each app owns one, so tests can build many apps), no multiprocess mode (one process per
container is the deployment we recommend). All updates happen on the event-loop thread, so no locks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)] + ([extra] if extra else [])
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(value: float) -> str:
    return "+Inf" if value == math.inf else repr(float(value))


class Counter:
    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        self.name, self.help, self.labelnames = name, help, tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        lines += [f"{self.name}{_labels(self.labelnames, k)} {_num(v)}" for k, v in sorted(self._values.items())]
        return lines


class Histogram:
    def __init__(self, name: str, help: str, buckets: Sequence[float], labelnames: Sequence[str] = ()) -> None:
        self.name, self.help, self.labelnames = name, help, tuple(labelnames)
        self.bounds = tuple(sorted(buckets)) + (math.inf,)
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}  # labels -> (counts, [sum])

    def observe(self, value: float, *labels: str) -> None:
        counts, total = self._series.setdefault(labels, ([0] * len(self.bounds), [0.0]))
        counts[next(i for i, b in enumerate(self.bounds) if value <= b)] += 1
        total[0] += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, (counts, total) in sorted(self._series.items()):
            cumulative = 0
            for bound, count in zip(self.bounds, counts):
                cumulative += count
                le = 'le="' + _num(bound) + '"'
                lines.append(f"{self.name}_bucket{_labels(self.labelnames, key, le)} {cumulative}")
            lines.append(f"{self.name}_sum{_labels(self.labelnames, key)} {_num(total[0])}")
            lines.append(f"{self.name}_count{_labels(self.labelnames, key)} {cumulative}")
        return lines


class ServerMetrics:
    """The server's metrics; `render()` is the body of GET /metrics."""

    def __init__(self, max_batch: int) -> None:
        self.requests = Counter(
            "redkit_http_requests_total", "HTTP requests by route, method and status.", ("route", "method", "status")
        )
        self.latency = Histogram(
            "redkit_http_request_duration_seconds",
            "Time from request to last response byte.",
            (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            ("route",),
        )
        sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, max_batch})
        self.batch_size = Histogram(
            "redkit_batch_size_texts", "Texts per model call (dynamic batching).", [s for s in sizes if s <= max_batch]
        )

    def render(self) -> str:
        return "\n".join(self.requests.render() + self.latency.render() + self.batch_size.render()) + "\n"
