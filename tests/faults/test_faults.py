"""Fault injection: the stream killed, the server restarted, two runs at once, the Spark job killed, the broker
stopped, each against a concurrent writer; then (a) the topic replays to the source, (b) the lake equals the
source, (c) duplicates only repeat records exactly.

``make test`` runs a short form (``WALFLOW_FAULT_ITERATIONS`` defaults to 3); ``make test-faults`` runs 20
iterations per scenario and prints the table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.faults.harness import ITERATIONS, ROOT, Writer, all_records, check_lake, check_topic, record, seed_table
from tests.support import run_apply, stream, unique
from walflow.config import parse_config
from walflow.errors import ConcurrentRunError, WalflowError
from walflow.setup import ConnectorSetup

pytestmark = pytest.mark.timeout(1800)


def make_connector(dsn: str, **extra: Any) -> tuple[dict[str, Any], Any]:
    from tests.support import producer

    name = unique("fault")
    raw = {
        "name": name, "topic.prefix": name, "slot.name": name, "publication.name": name,
        "signal.data.collection": "public.walflow_signal", "incremental.snapshot.chunk.size": 200,
        "walflow.batch.max.events": 3000, **extra,
    }
    config = parse_config(raw)
    ConnectorSetup(config, dsn, producer).run()
    return raw, config


def drain(config: Any, dsn: str) -> None:
    for _ in range(300):
        summary = stream(config, dsn)
        if summary.events == 0 and summary.snapshot_rows == 0 and summary.signals == 0:
            return
    raise AssertionError("the stream never drained")


def confirmed(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()[0]


def test_stream_killed_at_random_points(database: str, tmp_path: Path) -> None:
    seed_table(database, 3000)
    raw, config = make_connector(database)
    with psycopg.connect(database, autocommit=True) as conn:  # an incremental snapshot runs through the kills
        conn.execute("""INSERT INTO walflow_signal VALUES ('inc-1', 'execute-snapshot', '{"data-collections": ["public.t"]}')""")
    writer = Writer(database, seed=1)
    writer.start()
    kills = 0
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    try:
        for i in range(ITERATIONS):
            rng = random.Random(i)
            stage = rng.choice(["before_produce", "produced", "before_flush", "flushed", "incremental_chunk"])
            nth = rng.randint(1, 3) if stage in ("before_produce", "produced") else 1
            time.sleep(rng.uniform(0.1, 0.6))
            child = subprocess.run(
                [sys.executable, "-m", "tests.integration.crash_child", json.dumps(raw), database, stage, str(nth)],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
            )
            assert child.returncode in (0, -signal.SIGKILL), child.stderr[-2000:]
            kills += child.returncode == -signal.SIGKILL
    finally:
        writer.stop()
    drain(config, database)
    found, duplicates = check_topic(all_records(config), database)
    assert kills > 0, "no iteration reached its fault point"
    check_lake(config, database, str(tmp_path / "lake"))
    record(f"stream SIGKILL ({kills} kills)", ITERATIONS, writer.written, found, duplicates)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restarted_mid_batch(database: str, tmp_path: Path, mode: str) -> None:
    from walflow.embedded import restart_pg

    seed_table(database, 1000)
    _raw, config = make_connector(database)
    writer = Writer(database, seed=2)
    writer.start()
    failures = 0
    try:
        for i in range(max(1, ITERATIONS // 2)):
            time.sleep(1.0)
            errors: list[BaseException] = []

            def batch() -> None:
                try:
                    stream(config, database)
                except BaseException as exc:  # noqa: BLE001 - recorded: the retry below is Airflow's
                    errors.append(exc)

            thread = threading.Thread(target=batch)
            thread.start()
            time.sleep(random.Random(i).uniform(0.05, 0.4))
            restart_pg(mode)
            thread.join(timeout=120)
            failures += bool(errors)
            for attempt in range(20):  # the task's retries
                try:
                    stream(config, database)
                    break
                except (WalflowError, psycopg.OperationalError):
                    time.sleep(1.0)
    finally:
        writer.stop()
    drain(config, database)
    found, duplicates = check_topic(all_records(config), database)
    check_lake(config, database, str(tmp_path / "lake"))
    record(f"PostgreSQL restart -m {mode} ({failures} batches cut)", max(1, ITERATIONS // 2), writer.written, found, duplicates)


def test_two_runs_at_once(database: str, tmp_path: Path) -> None:
    seed_table(database, 1000)
    _raw, config = make_connector(database, **{"walflow.batch.max.events": 1_000_000})
    writer = Writer(database, seed=3)
    writer.start()
    refused = 0
    try:
        for _ in range(ITERATIONS):
            time.sleep(0.5)
            outcomes: list[Any] = []
            barrier = threading.Barrier(2)

            def batch() -> None:
                barrier.wait()
                try:
                    outcomes.append(stream(config, database))
                except ConcurrentRunError as exc:
                    outcomes.append(exc)

            threads = [threading.Thread(target=batch) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            errors = [o for o in outcomes if isinstance(o, ConcurrentRunError)]
            refused += len(errors)
            assert len(outcomes) == 2 and len(errors) <= 1
    finally:
        writer.stop()
    drain(config, database)
    found, duplicates = check_topic(all_records(config), database)
    assert duplicates == 0, "two runs at once must never consume the same changes twice"
    check_lake(config, database, str(tmp_path / "lake"))
    record(f"two stream runs at once ({refused} refused)", ITERATIONS, writer.written, found, duplicates)


def test_spark_apply_killed(database: str, tmp_path: Path) -> None:
    seed_table(database, 2000)
    _raw, config = make_connector(database)
    warehouse = str(tmp_path / "lake")
    writer = Writer(database, seed=4)
    writer.start()
    try:
        for i in range(ITERATIONS):
            time.sleep(0.5)
            stream(config, database)
            run_apply(config, warehouse, kill_after=random.Random(i).uniform(5.0, 14.0))
    finally:
        writer.stop()
    drain(config, database)
    found, duplicates = check_topic(all_records(config), database)
    check_lake(config, database, warehouse)
    record("Spark apply SIGKILL", ITERATIONS, writer.written, found, duplicates)


def test_broker_stopped_mid_batch(database: str, tmp_path: Path) -> None:
    """Last on purpose: the embedded broker keeps topics in memory, so its restart loses every topic."""
    from walflow.embedded import _ports, broker_down, broker_up
    from tests.support import producer, read_topic

    seed_table(database, 1000)
    _raw, config = make_connector(database, **{"walflow.kafka.flush.timeout.seconds": 5, "walflow.batch.max.events": 1_000_000})
    warehouse = str(tmp_path / "lake")
    writer = Writer(database, seed=5)
    writer.start()
    time.sleep(1.0)
    stream(config, database)
    result = run_apply(config, warehouse)
    assert result is not None and result.returncode == 0, result.stderr[-2000:]
    before_loss = all_records(config)  # what the broker acknowledged so far
    checkpoint = confirmed(database, config.slot_name)
    time.sleep(1.0)
    errors: list[BaseException] = []

    def batch() -> None:
        try:
            stream(config, database)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=batch)
    thread.start()
    broker_down()
    thread.join(timeout=180)
    writer.stop()
    assert errors, "the batch succeeded although the broker was down"
    assert confirmed(database, config.slot_name) == checkpoint, "the slot moved past changes Kafka never acknowledged"
    broker_up(_ports()["kafka"])
    drain(config, database)
    after = all_records(config)
    assert after and after[0].offset == 0
    found, duplicates = check_topic(before_loss + after, database)
    # the apply job must refuse the recreated topic instead of skipping what was lost
    result = run_apply(config, warehouse)
    assert result is not None and result.returncode != 0
    output = result.stdout + result.stderr
    assert "the topic was recreated or the broker lost its data" in output, [line for line in output.splitlines() if " INFO " not in line][-40:]
    record(f"broker stopped mid-batch ({type(errors[0]).__name__}); lost topics detected", 1, writer.written, found, duplicates)
