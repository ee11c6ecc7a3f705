"""Failover: the primary crashes in the middle of a stream batch, its standby is promoted, and the connector's
Connection points at the new primary.

With ``slot.failover: true`` the next batches go on from the standby's synchronized copy of the slot: the topic
replays to the new primary's table, nothing committed is missing, and the only duplicates are exact repeats of
what the synchronized slot had not yet confirmed. Without it, the stream stops with an error that names the lost
slot and the way back, and a setup with ``snapshot.mode: when_needed`` re-reads the table into a new slot.

Each iteration runs on a new PostgreSQL 18 pair (:mod:`sandbox.replicas`); ``make test`` runs 3 iterations,
``make test-faults`` 20. The state table is in the source, so it fails over with the data.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import psycopg
import pytest

from sandbox import replicas as pair
from tests.faults.harness import ITERATIONS, Writer, all_records, check_topic, record, scenario, seed_table
from tests.support import producer, unique
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import ConnectorConfig, parse_config
from walflow.errors import SlotError, SourceUnavailableError, WalflowError

pytestmark = [pytest.mark.timeout(1800), pytest.mark.replicas]

#: where the primary dies inside the batch: at the BEGIN of its n-th transaction (some of its records handed to the
#: producer already), before the flush, and after Kafka acknowledged them but before the slot moved (every record of
#: the batch is then produced again from the new primary)
KILL_STAGES = ("mid-batch", "before_flush", "flushed")
ROLE, PASSWORD = "walflow_fo", f"pw-{uuid.uuid4().hex}"


class Primary:
    """Kills the primary (``pg_ctl stop -m immediate``) when the batch reaches ``stage`` (``mid-batch``: the BEGIN of
    its ``nth`` transaction)."""

    def __init__(self, replicas: pair.Replicas, stage: str, nth: int) -> None:
        self.replicas, self.stage, self.nth, self.killed = replicas, stage, nth, False
        self._begins = 0

    def __call__(self, stage: str) -> None:
        if self.killed:
            return
        if stage == "before_produce":
            self._begins += 1
        if (
            self.stage == "mid-batch" and stage == "before_produce" and self._begins == self.nth
        ) or stage == self.stage:
            self.killed = True
            pair.stop(self.replicas, "primary", "immediate")


def _prepare(replicas: pair.Replicas, failover: bool) -> ConnectorConfig:
    """Table ``t`` (1000 rows) on the primary, a publication a DBA made, a REPLICATION role that reads ``t`` and may
    create the state table; the connector set up with its initial snapshot."""
    superuser = replicas.dsn("primary")
    seed_table(superuser)
    name = unique("failover")
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN REPLICATION PASSWORD '{PASSWORD}'")
        conn.execute(f"GRANT SELECT ON t TO {ROLE}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {ROLE}")
        conn.execute(f'CREATE PUBLICATION "{name}" FOR TABLE t')
    config = parse_config({
        "name": name, "topic.prefix": name, "slot.name": name, "publication.name": name,
        "publication.autocreate.mode": "disabled", "table.include.list": "public.t", "slot.failover": failover,
        "walflow.batch.max.events": 400,
    })  # fmt: skip
    ConnectorSetup(config, replicas.dsn("primary", user=ROLE, password=PASSWORD), producer).run()
    return config


def _batch(config: ConnectorConfig, dsn: str, **kwargs: Any) -> Any:
    return StreamBatch(config, dsn, producer(), **kwargs).run()


def _synchronized(replicas: pair.Replicas, slot: str, config: ConnectorConfig, dsn: str, timeout: float = 90.0) -> None:
    """Stream until the standby's copy of the slot is persistent and has caught up with a position the primary's
    slot confirmed (the slot synchronization worker runs every 0.2 to 30 s)."""
    deadline = time.monotonic() + timeout
    with (
        psycopg.connect(replicas.dsn("primary"), autocommit=True) as primary,
        psycopg.connect(replicas.dsn("standby"), autocommit=True) as standby,
    ):
        target = primary.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()[0]
        while time.monotonic() < deadline:
            row = standby.execute(
                "SELECT NOT temporary AND synced AND confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE"
                " slot_name = %s",
                (target, slot),
            ).fetchone()
            if row and row[0]:
                return
            # the primary's running transactions in the WAL (as its background writer logs them every 15 s): the
            # next batch moves the slot's restart point past them, and the standby's copy is then safe to keep
            primary.execute("SELECT pg_log_standby_snapshot()")
            _batch(config, dsn)
            time.sleep(0.2)
    raise AssertionError(f"the standby's copy of slot {slot} did not catch up with {target} within {timeout:.0f} s")


def _drain(config: ConnectorConfig, dsn: str) -> None:
    for _ in range(200):
        summary = _batch(config, dsn)
        if summary.events == 0:
            return
    raise AssertionError("the stream never drained")


def _iteration(rng: random.Random, failover: bool) -> tuple[int, int, int, str]:
    """One failover; returns (changes written, changes found, duplicates, where the primary died)."""
    replicas = pair.create()
    try:
        config = _prepare(replicas, failover)
        old = replicas.dsn("primary", user=ROLE, password=PASSWORD)
        new = replicas.dsn("standby", user=ROLE, password=PASSWORD)
        writer = Writer(replicas.dsn("primary"), rng.randrange(1 << 30), pause=0.002)
        writer.start()
        try:
            for _ in range(3):
                _batch(config, old)
                time.sleep(0.3)
            if failover:
                _synchronized(replicas, config.slot_name, config, old)
            time.sleep(rng.uniform(0.2, 1.0))  # changes the next batch reads, then dies in the middle of
            stage = rng.choice(KILL_STAGES)
            kill = Primary(replicas, stage, rng.randint(2, 40))
            for _ in range(10):  # a batch with fewer transactions than nth ends before the kill: the next one has more
                try:
                    summary = _batch(config, old, fault_hook=kill)
                except (WalflowError, psycopg.Error):
                    summary = None
                if kill.killed:
                    break
                time.sleep(0.3)
            assert kill.killed, f"no batch reached {stage}"
            assert summary is None, f"the batch went on after the primary died at {stage}: {summary}"
        finally:
            writer.stop()
        pair.promote(replicas)
        # the Connection now names the promoted standby; the old primary stays down
        after = Writer(replicas.dsn("standby"), rng.randrange(1 << 30), first_id=5_000_000, pause=0.002)
        before = 0
        if not failover:
            with pytest.raises(
                SlotError,
                match=rf"replication slot '{config.slot_name}' does not exist.*after a failover"
                r".*'when_needed'.*slot\.failover: true",
            ):
                _batch(config, new)
            # The way back: a new snapshot into a new slot. What the topic held before it may include transactions
            # the old primary decoded and the standby never received (a slot without failover is not held back by
            # synchronized_standby_slots): the checks below start at the new snapshot (docs/operations.md).
            before = len(all_records(config))
            ConnectorSetup(config.model_copy(update={"snapshot_mode": "when_needed"}), new, producer).run()
        after.start()
        try:
            for _ in range(3):
                _batch(config, new)
        finally:
            after.stop()
        _drain(config, new)
        found, duplicates = check_topic(all_records(config)[before:], replicas.dsn("standby"))
        return (writer.written if failover else 0) + after.written, found, duplicates, stage
    finally:
        pair.remove(replicas)


@pytest.mark.long
def test_failover_to_a_standby_with_a_failover_slot() -> None:
    """The failover scenario with ``slot.failover: true``: 3 iterations in ``make test``, 20 in ``make test-faults``."""
    iterations = max(3, ITERATIONS)
    rng = random.Random(32)
    with scenario("failover to the standby (slot.failover)", iterations):
        written = found = duplicates = 0
        stages: set[str] = set()
        for _ in range(iterations):
            w, f, d, stage = _iteration(rng, failover=True)
            written, found, duplicates, stages = written + w, found + f, duplicates + d, stages | {stage}
        record(
            f"failover to the standby, slot.failover ({', '.join(sorted(stages))})",
            iterations,
            written,
            found,
            duplicates,
        )


@pytest.mark.long
def test_failover_without_a_failover_slot_stops_and_the_way_back_rereads() -> None:
    """Without ``slot.failover`` the promoted standby has no slot: the stream stops naming it and the way back, and a
    setup with ``when_needed`` re-reads the table (the topic then replays to the new primary, with snapshot rows)."""
    with scenario("failover without a failover slot", 1):
        written, found, duplicates, stage = _iteration(random.Random(33), failover=False)
        record(f"failover, no failover slot: stops, then when_needed re-reads ({stage})", 1, written, found, duplicates)


@pytest.mark.long
def test_a_failover_slot_whose_standby_is_away_fails_the_batch_instead_of_waiting() -> None:
    """PostgreSQL decodes a failover slot only up to what the standbys in synchronized_standby_slots confirmed, and
    waits for them without end: with the standby down, the batch stops at once with a retried error naming its slot
    and the fix, and streams again once the standby is back."""
    replicas = pair.create()
    try:
        config = _prepare(replicas, failover=True)
        dsn = replicas.dsn("primary", user=ROLE, password=PASSWORD)
        # committed while the standby is up (the pair commits synchronously: with it away, a commit would wait too)
        with psycopg.connect(replicas.dsn("primary"), autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (2000000, 1, 'before the standby went away')")
        pair.stop(replicas, "standby")
        started = time.monotonic()
        with pytest.raises(
            SourceUnavailableError, match=r"'walflow_standby' in synchronized_standby_slots.*not streaming now"
        ):
            _batch(config, dsn)
        assert time.monotonic() - started < 10
        pair.start(replicas, "standby")
        deadline = time.monotonic() + 30
        while True:
            try:
                summary = _batch(config, dsn)
                break
            except SourceUnavailableError:
                assert time.monotonic() < deadline, "the standby did not stream again"
                time.sleep(0.2)
        assert summary.events == 1
    finally:
        pair.remove(replicas)
