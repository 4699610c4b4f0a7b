"""Reading what a gateway process exposes: a metric from its `/metrics` text, and its access-log lines
(JSON objects, one a line, amid the rest of its log)."""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`; 0 when none is exported."""
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def access_lines(log: str) -> list[dict[str, Any]]:
    """The access-log lines in a gateway's log."""
    lines = []
    for line in log.splitlines():
        if line.startswith("{") and '"request_id"' in line:
            try:
                lines.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return lines
