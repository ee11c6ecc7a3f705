"""docs/operations.md's metrics recipe, checked end to end on its first half: a process initialises Airflow's metrics
as a task does (StatsD on, ``[metrics]`` from the environment), walflow sends a stream batch's and a snapshot's
gauges, and what arrives on the UDP socket, mapped by ``include/monitoring/statsd-mapping.yml`` as prom/statsd-exporter
maps it, gives Debezium's series names; every series the example alert rules and dashboard use is among them."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "include" / "monitoring"

#: a task's metrics start: Airflow's [metrics] from the environment, the stats backend built as the task runner does
SENDER = r"""
import sys
from airflow.sdk._shared.observability.metrics import stats
from airflow.sdk.configuration import conf
from airflow.sdk.observability.metrics import stats_utils
stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)

from walflow.airflow.operators import publish_metrics
from walflow.capture.batches import BatchSummary
from walflow.capture.metrics import failed_streaming_metrics, snapshot_metrics, streaming_metrics
import logging

log = logging.getLogger("sender")
summary = BatchSummary(connector="inventory", slot="inventory", events=12, transactions=3, retained_wal_bytes=4096,
                       lag_bytes=512, last_event_commit_ms=1, ops={"c": 10, "u": 1, "d": 1})
publish_metrics("inventory", "streaming", streaming_metrics(summary), log, stats.Stats, tags={"env": "prod"})
publish_metrics("inventory", "streaming", failed_streaming_metrics(RuntimeError("x")), log, stats.Stats)
report = {"snapshot": {"ran": True, "tables": ["public.a"], "rows": 5, "seconds": 1.5, "rows_per_table": {}}}
publish_metrics("inventory", "snapshot", snapshot_metrics(report), log, stats.Stats)
"""


def _glob(pattern: str) -> re.Pattern[str]:
    """prom/statsd-exporter's glob match: ``*`` is one dot-separated part."""
    return re.compile("^" + r"\.".join("([^.]+)" if p == "*" else re.escape(p) for p in pattern.split(".")) + "$")


def _map(mappings: list[dict[str, object]], metric: str) -> tuple[str, dict[str, str]] | None:
    for mapping in mappings:
        match = _glob(str(mapping["match"])).match(metric)
        if match:

            def fill(text: str, groups: tuple[str, ...] = match.groups()) -> str:
                return re.sub(r"\$\{?(\d+)\}?", lambda m: groups[int(m.group(1)) - 1], text)

            raw = mapping.get("labels") or {}
            labels = {str(k): fill(str(v)) for k, v in raw.items()} if isinstance(raw, dict) else {}
            return fill(str(mapping["name"])), labels
    return None


def _statsd_lines(**metrics: str) -> list[str]:
    """What a task's metrics send over UDP, StatsD on (``[metrics]`` settings from ``metrics``, as environment
    variables): the lines received, read after the sender has exited (its packets wait in the socket's buffer)."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(1)
    env = {
        **os.environ,
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(receiver.getsockname()[1]),
        **{f"AIRFLOW__METRICS__{key.upper()}": value for key, value in metrics.items()},
    }
    lines: list[str] = []
    try:
        done = subprocess.run([sys.executable, "-c", SENDER], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        while True:
            lines += receiver.recv(65536).decode().splitlines()
    except TimeoutError:
        pass
    finally:
        receiver.close()
    return lines


def test_walflow_gauges_reach_statsd_with_debezium_names_through_the_mapping() -> None:
    received: dict[str, float] = {}
    for line in _statsd_lines(statsd_prefix="airflow"):
        name, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        if name.startswith("airflow.walflow."):  # Airflow sends its own metrics as well
            assert kind == "g", line
            received[name] = float(value)
    assert received["airflow.walflow.inventory.streaming.TotalNumberOfEventsSeen"] == 12
    assert received["airflow.walflow.inventory.streaming.RetainedWalBytes"] == 4096
    assert received["airflow.walflow.inventory.snapshot.SnapshotCompleted"] == 1

    mappings = yaml.safe_load((MONITORING / "statsd-mapping.yml").read_text())["mappings"]
    series: dict[str, dict[str, str]] = {}
    for name in received:
        mapped = _map(mappings, name)
        assert mapped is not None, f"{name} matches no mapping"
        series.setdefault(mapped[0], mapped[1])
    assert series["debezium_metrics_MilliSecondsBehindSource"] == {
        "plugin": "postgres",
        "name": "inventory",
        "context": "streaming",
    }
    assert series["debezium_metrics_SnapshotCompleted"]["context"] == "snapshot"

    # every series the alert rules and the dashboard read is one walflow sends
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    expressions = [r["expr"] for group in rules["groups"] for r in group["rules"]]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    expressions += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    expressions += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for e in expressions for name in re.findall(r"\bdebezium_metrics_\w+", e)}
    assert used and used <= set(series), sorted(used - set(series))


def test_custom_metric_tags_reach_statsd() -> None:
    """``custom.metric.tags`` on the wire: with Airflow's ``statsd_influxdb_enabled`` the StatsD names carry them."""
    lines = _statsd_lines(statsd_influxdb_enabled="True")
    tagged = [line for line in lines if ".walflow.inventory.streaming.TotalNumberOfEventsSeen" in line]
    assert tagged and all(",env=prod:" in line for line in tagged), lines[:20]
