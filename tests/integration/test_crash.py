"""The stream process killed with SIGKILL: the slot never moves past what Kafka did not acknowledge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support import prepare_source, read_topic, replay, stream, unique
from walflow.config.connector import parse_config

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.faults


def confirmed_lsn(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()[0]


@pytest.mark.parametrize("stage", ["before_produce", "produced", "flushed"])
def test_killed_batch_is_redelivered_in_full(database: str, stage: str) -> None:
    name = unique("crash")
    raw = {"name": name, "topic.prefix": name, "slot.name": name, "publication.name": name}
    config = parse_config(raw)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    prepare_source(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        for i in range(5):
            conn.execute(
                "INSERT INTO t SELECT g, 'v' || g FROM generate_series(%s::int, %s::int) g", (i * 1000, i * 1000 + 999)
            )
        conn.execute("UPDATE t SET v = 'changed' WHERE id % 10 = 0")
        conn.execute("DELETE FROM t WHERE id % 13 = 0")
    before = confirmed_lsn(database, config.slot_name)

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.crash_child", json.dumps(raw), database, stage],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert confirmed_lsn(database, config.slot_name) == before, "the slot moved although the batch was killed"
    delivered_before_kill = len(read_topic(f"{name}.public.t"))
    if stage == "flushed":
        assert delivered_before_kill == 5000 + 500 + 2 * 385  # everything was acknowledged, nothing confirmed

    summary = stream(config, database)
    assert summary.events == 5000 + 500 + 385
    assert confirmed_lsn(database, config.slot_name) != before
    records = read_topic(f"{name}.public.t")
    assert len(records) == delivered_before_kill + 5000 + 500 + 2 * 385
    with psycopg.connect(database) as conn:
        rows = dict(conn.execute("SELECT id, v FROM t").fetchall())
    assert {v["id"]: v["v"] for v in replay(records).values()} == rows
