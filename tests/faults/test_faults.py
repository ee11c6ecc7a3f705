"""Fault injection: the stream killed, the server restarted, two runs at once, the Spark job killed, the broker
stopped, each against a concurrent writer; then (a) the topic replays to the source, (b) the lake equals the
source, (c) duplicates only repeat records exactly.

``make test`` runs a short form (``WALFLOW_FAULT_ITERATIONS`` defaults to 2); ``make test-faults`` runs 20
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
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.faults.harness import (
    ITERATIONS,
    ROOT,
    Writer,
    all_records,
    check_lake,
    check_topic,
    record,
    scenario,
    seed_table,
)
from tests.privileges import ConnectorRole, connector_role
from tests.support import apply_lake, run_apply, stream, unique
from walflow.admin.reset import reset_connector
from walflow.capture.setup import ConnectorSetup
from walflow.config.connector import parse_config
from walflow.errors import ConcurrentRunError, TopicMismatchError, WalflowError

pytestmark = [pytest.mark.timeout(1800), pytest.mark.faults]

#: where the stream task is killed: at a transaction's BEGIN before anything of the batch was produced, after a
#: block of records was handed to the producer (mid-produce), before and after the flush (Kafka acknowledged, slot
#: not advanced yet), and as an incremental-snapshot chunk starts. ``make test-faults`` (20 iterations) kills it at
#: each in turn; the short form of ``make test`` at three of them (produced, flushed, incremental_chunk), the two
#: left out lying between those.
ALL_STAGES = ("before_produce", "produced", "before_flush", "flushed", "incremental_chunk")
STAGES = ALL_STAGES if ITERATIONS >= 4 else ("produced", "flushed", "incremental_chunk")


def make_connector(role: ConnectorRole, **extra: Any) -> tuple[dict[str, Any], Any]:
    """Set up a connector for table ``t`` as the least-privilege role (filtered publication, signal table)."""
    from tests.support import producer

    name = unique("fault")
    raw = {
        "name": name,
        "topic.prefix": name,
        "slot.name": name,
        "publication.name": name,
        "publication.autocreate.mode": "filtered",
        "table.include.list": "public.t",
        "signal.data.collection": "public.walflow_signal",
        "incremental.snapshot.chunk.size": 200,
        "walflow.batch.max.events": 3000,
        **extra,
    }
    config = parse_config(raw)
    ConnectorSetup(config, role.dsn, producer).run()
    return raw, config


def drain(config: Any, dsn: str) -> None:
    for _ in range(300):
        summary = stream(config, dsn)
        if summary.events == 0 and summary.snapshot_rows == 0 and summary.signals == 0:
            return
    raise AssertionError("the stream never drained")


def confirmed(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()[0]


def signal_snapshot(dsn: str, signal_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO walflow_signal VALUES (%s, 'execute-snapshot', %s)",
            (signal_id, json.dumps({"data-collections": ["public.t"], "type": "incremental"})),
        )


@pytest.mark.long
def test_stream_killed_at_random_points(spark: Any, database: str, tmp_path: Path) -> None:
    """SIGKILL at each stage in turn (random delays and writer timing per seed); every stage must be hit."""
    iterations = max(ITERATIONS, len(STAGES))
    with scenario("stream SIGKILL", iterations):
        seed_table(database, 3000)
        with connector_role(database, "public.t") as role:
            raw, config = make_connector(role)
            writer = Writer(database, seed=1, pause=0.02)  # 50 transactions a second: every batch has some to cut
            writer.start()
            kills: Counter[str] = Counter()
            env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
            try:
                for i in range(iterations):
                    rng = random.Random(i)
                    stage = STAGES[i % len(STAGES)]
                    if stage == "incremental_chunk":  # a snapshot must be running for its chunk to start
                        signal_snapshot(database, f"inc-{i}")
                    time.sleep(rng.uniform(0.1, 0.6))
                    for _attempt in range(5):  # a stage that did not come up in a batch (nothing to send) is retried
                        child = subprocess.run(
                            [
                                sys.executable,
                                "-m",
                                "tests.integration.crash_child",
                                json.dumps(raw),
                                role.dsn,
                                stage,
                                "1",
                            ],
                            cwd=ROOT,
                            env=env,
                            capture_output=True,
                            text=True,
                            timeout=300,
                        )
                        assert child.returncode in (0, -signal.SIGKILL), child.stderr[-2000:]
                        if child.returncode == -signal.SIGKILL:
                            kills[stage] += 1
                            break
                        time.sleep(0.3)
            finally:
                writer.stop()
            assert all(kills[s] for s in STAGES), f"stages never reached: {[s for s in STAGES if not kills[s]]}"
            drain(config, role.dsn)
            found, duplicates = check_topic(all_records(config), database)
            check_lake(spark, config, database, str(tmp_path / "lake"))
        stages = ", ".join(f"{s} {kills[s]}" for s in STAGES)
        record(f"stream SIGKILL ({stages})", iterations, writer.written, found, duplicates)


@pytest.mark.long
@pytest.mark.disruptive
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restarted_mid_batch(spark: Any, database: str, tmp_path: Path, mode: str) -> None:
    """The server restarts while a batch runs: from inside the batch (after its first block of records went to
    the producer, or at a transaction's BEGIN), so every iteration really cuts a batch; then the task's retries."""
    from sandbox.embedded import restart_pg

    iterations = max(2, ITERATIONS // 2 + 1)
    with scenario(f"PostgreSQL restart -m {mode}", iterations):
        seed_table(database, 1000)
        with connector_role(database, "public.t") as role:
            _raw, config = make_connector(role)
            writer = Writer(database, seed=2)
            writer.start()
            cut = 0
            try:
                for i in range(iterations):
                    time.sleep(1.0)
                    point = ("produced", "before_produce")[i % 2]
                    restarted: list[str] = []

                    def hook(stage: str, point: str = point, restarted: list[str] = restarted) -> None:
                        if stage == point and not restarted:
                            restarted.append(stage)
                            restart_pg(mode)

                    try:
                        stream(config, role.dsn, fault_hook=hook)
                    except (WalflowError, psycopg.Error):
                        cut += 1  # what Airflow sees as a failed try
                    for _attempt in range(20):  # the task's retries
                        try:
                            stream(config, role.dsn)
                            break
                        except (WalflowError, psycopg.OperationalError):
                            time.sleep(1.0)
            finally:
                writer.stop()
            assert cut == iterations, f"only {cut} of {iterations} batches were cut by the restart"
            drain(config, role.dsn)
            found, duplicates = check_topic(all_records(config), database)
            check_lake(spark, config, database, str(tmp_path / "lake"))
        record(f"PostgreSQL restart -m {mode} ({cut} batches cut)", iterations, writer.written, found, duplicates)


def lsn(text: str) -> int:
    """A ``pg_lsn``'s text as a number, so that positions compare as PostgreSQL compares them."""
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def slot_on_disk_marks(database: str, slot: str) -> tuple[str, str, str]:
    """What moves when PostgreSQL writes a slot to disk at once or soon: its restart_lsn and catalog_xmin (changed
    together with a save) and the last checkpoint (which saves every slot)."""
    with psycopg.connect(database) as conn:
        restart, xmin = conn.execute(
            "SELECT restart_lsn::text, catalog_xmin::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        checkpoint = conn.execute("SELECT checkpoint_lsn::text FROM pg_control_checkpoint()").fetchone()[0]
    return restart, xmin, checkpoint


#: how many batches the crash test tries before it gives up finding one whose advance PostgreSQL kept in memory only
CRASH_ATTEMPTS = 5


@pytest.mark.disruptive
def test_slot_rolled_back_by_a_crash(database: str) -> None:
    """A crash rolls the slot back to its last saved position, behind where the last batch advanced it: the next
    batch reads past what Kafka holds already (no duplicate, no newer source.sequence on an old change) and streams
    what follows with the sequence the earlier batch left."""
    from sandbox.embedded import restart_pg

    seed_table(database, 10)
    with connector_role(database, "public.t") as role:
        _raw, config = make_connector(role)
        written: list[int] = []
        rolled_back = False
        for attempt in range(CRASH_ATTEMPTS):
            # PostgreSQL writes a slot's advance to disk at once only when the batch decoded a running-transactions
            # record (the background writer logs one every 15 s while the server writes), which moves restart_lsn
            # and catalog_xmin; otherwise at the next checkpoint. Such a batch cannot show the rollback: the marks
            # tell it apart, and the test takes another batch. The transaction held open keeps the changes' own
            # commits from moving the restart point.
            holder = psycopg.connect(database)
            holder.execute("SELECT txid_current()")
            before = slot_on_disk_marks(database, config.slot_name)
            values = [attempt * 20 + i for i in range(20)]
            with psycopg.connect(database, autocommit=True) as conn:
                for value in values:
                    conn.execute("UPDATE t SET v = %s WHERE id = 1", (value,))
            written += values
            batch = stream(config, role.dsn)
            assert batch.events == 20
            advanced = confirmed(role.dsn, config.slot_name)
            saved = slot_on_disk_marks(database, config.slot_name) != before
            restart_pg("immediate")
            holder.close()
            after = confirmed(role.dsn, config.slot_name)
            if after != advanced:
                assert lsn(after) < lsn(advanced), f"the crash moved the slot forward, from {advanced} to {after}"
                rolled_back = True
                break
            assert saved, (
                f"the crash did not roll the slot back from {advanced}, though neither its restart_lsn and "
                "catalog_xmin nor the last checkpoint moved during the batch"
            )
        assert rolled_back, f"PostgreSQL saved the slot's advance in each of {CRASH_ATTEMPTS} batches"
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("UPDATE t SET v = 100 WHERE id = 1")
        second = stream(config, role.dsn)
        assert second.events == 1, (
            f"the batch after the crash streamed {second.events} event(s), not only the new change"
        )
        changes = [r.payload for r in all_records(config) if r.value is not None and r.payload["op"] == "u"]
        assert [p["after"]["v"] for p in changes] == [*written, 100]
        # the new change's sequence starts at the end of the last commit the first batch read
        last_commit = orjson.loads(changes[-1]["source"]["sequence"])[0]
        assert last_commit is not None and int(last_commit) > changes[-2]["source"]["lsn"]
        assert lsn(confirmed(role.dsn, config.slot_name)) >= lsn(advanced)


@pytest.mark.long
def test_two_runs_at_once(spark: Any, database: str, tmp_path: Path) -> None:
    """Two stream runs start together: one streams, the other is refused at once; nothing is consumed twice."""
    with scenario("two stream runs at once", ITERATIONS):
        seed_table(database, 1000)
        with connector_role(database, "public.t") as role:
            _raw, config = make_connector(role, **{"walflow.batch.max.events": 1_000_000})
            writer = Writer(database, seed=3)
            writer.start()
            refused = 0
            slowest_refusal = 0.0
            try:
                for _ in range(ITERATIONS):
                    time.sleep(0.5)
                    outcomes: list[Any] = []
                    barrier = threading.Barrier(2)

                    def batch(barrier: threading.Barrier, outcomes: list[Any]) -> None:
                        barrier.wait()
                        began = time.monotonic()
                        try:
                            outcomes.append(stream(config, role.dsn))
                        except ConcurrentRunError as exc:
                            outcomes.append((exc, time.monotonic() - began))

                    threads = [threading.Thread(target=batch, args=(barrier, outcomes)) for _ in range(2)]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join(timeout=120)
                    errors = [o for o in outcomes if isinstance(o, tuple)]
                    refused += len(errors)
                    slowest_refusal = max([slowest_refusal, *(t for _e, t in errors)])
                    assert len(outcomes) == 2 and len(errors) <= 1
            finally:
                writer.stop()
            assert refused >= 1, "the two runs never overlapped: nothing shows that the second one is refused"
            assert slowest_refusal < 10.0, (
                f"a concurrent run took {slowest_refusal:.1f} s to be refused (must fail fast)"
            )
            drain(config, role.dsn)
            found, duplicates = check_topic(all_records(config), database)
            assert duplicates == 0, "two runs at once must never consume the same changes twice"
            check_lake(spark, config, database, str(tmp_path / "lake"))
        record(f"two stream runs at once ({refused} refused)", ITERATIONS, writer.written, found, duplicates)


#: Where the Spark job is killed: at its points (after the read, after the table DDL, after the data commit),
#: SIGKILLed by the test-only hooks of tests/faults/apply_kill.py, then a kill from outside at a random moment,
#: which lands wherever the job happens to be.
#: where the apply job is killed: ``make test-faults`` (20 iterations) cycles through all; the short form of
#: ``make test`` kills it once, after a table's commit (the lake half-way: one table's data and offsets committed, the
#: next table's not), a spark-submit of its own. Every point is also reached in the tests' own Spark session, where
#: the job stops by an exception
#: (tests/integration/test_lake.py::test_job_stopped_at_each_point_leaves_the_lake_consistent).
SPARK_KILLS = ("after_read", "after_ddl", "after_commit", "timer") if ITERATIONS >= 4 else ("after_commit",)


@pytest.mark.long
def test_spark_apply_killed(spark: Any, database: str, tmp_path: Path) -> None:
    iterations = max(ITERATIONS, len(SPARK_KILLS)) if ITERATIONS >= 4 else len(SPARK_KILLS)
    with scenario("Spark apply SIGKILL", iterations):
        from tests.support import run_apply_fault

        seed_table(database, 2000)
        with connector_role(database, "public.t") as role:
            _raw, config = make_connector(role)
            warehouse = str(tmp_path / "lake")
            # a transaction every 50 ms: every batch still has changes to apply, without thousands per batch
            writer = Writer(database, seed=4, pause=0.05)
            writer.start()
            kills: Counter[str] = Counter()
            try:
                for i in range(iterations):
                    time.sleep(0.5)
                    stream(config, role.dsn)  # the writer never stops, so every batch has changes to apply
                    point = SPARK_KILLS[i % len(SPARK_KILLS)]
                    if point == "timer":
                        if run_apply(config, warehouse, kill_after=random.Random(i).uniform(5.0, 14.0)) is None:
                            kills[point] += 1
                        continue
                    proc, fired = run_apply_fault(config, point, warehouse)
                    assert fired, (
                        f"the job was not killed at {point} (exit {proc.returncode}):"
                        f" {(proc.stdout + proc.stderr)[-3000:]}"
                    )
                    kills[point] += 1
            finally:
                writer.stop()
            assert all(kills[p] for p in SPARK_KILLS if p != "timer"), kills
            drain(config, role.dsn)
            found, duplicates = check_topic(all_records(config), database)
            check_lake(spark, config, database, warehouse)
        points = ", ".join(f"{p} {kills[p]}" for p in SPARK_KILLS)
        record(f"Spark apply SIGKILL ({points})", iterations, writer.written, found, duplicates)


@pytest.mark.long
@pytest.mark.disruptive
def test_broker_stopped_mid_batch(spark: Any, database: str, tmp_path: Path) -> None:
    """Last on purpose: the embedded broker keeps topics in memory, so its restart loses every topic."""
    from sandbox.embedded import _ports, broker_down, broker_up
    from tests.support import producer

    with scenario("broker stopped mid-batch", 1):
        seed_table(database, 1000)
        with connector_role(database, "public.t") as role:
            warehouse = str(tmp_path / "lake")
            _raw, config = make_connector(
                role,
                **{
                    "walflow.kafka.flush.timeout.seconds": 5,
                    "walflow.batch.max.events": 1_000_000,
                    "walflow.lake.warehouse": warehouse,
                },
            )
            writer = Writer(database, seed=5)
            writer.start()
            time.sleep(1.0)
            stream(config, role.dsn)
            apply_lake(spark, config, warehouse)
            before_loss = all_records(config)  # what the broker acknowledged so far
            checkpoint = confirmed(database, config.slot_name)
            time.sleep(1.0)
            errors: list[BaseException] = []

            def batch() -> None:
                try:
                    stream(config, role.dsn)
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=batch)
            thread.start()
            broker_down()
            thread.join(timeout=180)
            writer.stop()
            assert errors, "the batch succeeded although the broker was down"
            assert confirmed(database, config.slot_name) == checkpoint, (
                "the slot moved past changes Kafka never acknowledged"
            )
            broker_up(_ports()["kafka"])
            drain(config, role.dsn)
            after = all_records(config)
            assert after and after[0].offset == 0
            found, duplicates = check_topic(before_loss + after, database)
            # the apply job must refuse the recreated topic instead of skipping what was lost
            with pytest.raises(TopicMismatchError, match="the topic was recreated or the broker lost its data"):
                apply_lake(spark, config, warehouse)
            assert not TopicMismatchError.retryable  # the apply task fails at once (tests/e2e/test_lake.py)
            # the documented recovery (walflow reset <name> --lake, then the setup DAG): a new snapshot into the same
            # topics and lake namespace, and the lake equals the source again
            report = reset_connector(config, role.dsn, lake=True)
            assert report.slot_dropped and "snapshot" in report.state_keys and report.lake_tables
            ConnectorSetup(config, role.dsn, producer).run()
            drain(config, role.dsn)
            check_lake(spark, config, database, warehouse)
        record(
            f"broker stopped mid-batch ({type(errors[0]).__name__}); lost topics detected;"
            " walflow reset --lake and a new snapshot: the lake equals the source",
            1,
            writer.written,
            found,
            duplicates,
        )
