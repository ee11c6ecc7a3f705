"""Lake maintenance between apply runs: compaction, delete-file rewriting, snapshot expiry and orphan removal keep
the lake equal to the source and every Kafka record applied exactly once (the job's modules in the tests' own Spark
session; the ``<name>__maintain`` DAG through spark-submit is in ``tests/e2e/test_lake.py``)."""

from __future__ import annotations

import os
import random
from typing import Any

import psycopg
import pytest

from tests.support import apply_lake, connector, lake_job, lake_rows, read_topic, setup, stream, unique
from walflow.lake.maintain import MAINTAIN_COMMIT, LakeMaintenance

pytestmark = [pytest.mark.timeout(900), pytest.mark.spark]

#: apply rounds before the maintenance: ``make test`` runs 4, ``make test-lake-rounds`` 20
ROUNDS = int(os.environ.get("WALFLOW_LAKE_ROUNDS", "4"))


def _source(dsn: str) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: r for r in conn.execute("SELECT id, v, n FROM items").fetchall()}


def _assert_equal(dsn: str, name: str) -> None:
    lake = {r["id"]: (r["id"], r["v"], r["n"]) for r in lake_rows(name, "public__items")}
    assert lake == _source(dsn)


def _assert_applied_once(name: str, runs: list[dict[str, Any]]) -> None:
    """Every change event of the topic was applied by exactly one run: the runs' record counts add up to the
    topic's events, and the last run's offsets are the topic's end (nothing applied twice, nothing skipped)."""
    records = read_topic(f"{name}.public.items")
    events = sum(1 for r in records if r.value is not None)
    assert sum(run["records"] for run in runs) == events, (sum(run["records"] for run in runs), events)
    assert runs[-1]["offsets"] == {0: max(r.offset for r in records) + 1}


def _round(dsn: str, rng: random.Random, next_id: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM items").fetchall()]
        for key in rng.sample(ids, min(len(ids), 15)):
            conn.execute("UPDATE items SET v = v || '+', n = n + 1 WHERE id = %s", (key,))
        for key in rng.sample(ids, min(len(ids), 3)):
            conn.execute("DELETE FROM items WHERE id = %s", (key,))
        conn.execute(
            "INSERT INTO items SELECT g, 'new' || g, g FROM generate_series(%s::int, %s::int) g",
            (next_id[0], next_id[0] + 4),
        )
        next_id[0] += 5


@pytest.mark.long
def test_rounds_then_maintenance_then_rounds_keep_the_lake_exact(spark: Any, database: str) -> None:
    """ROUNDS stream + apply rounds, then maintenance, then 3 more rounds: the lake equals the source after each step,
    maintenance leaves fewer data and delete files (the rewrites carry the offsets, expiry keeps what the next apply
    needs), and every event is applied by exactly one run."""
    dsn = database
    config = connector(unique("maint"))
    name = config.topic_prefix
    rng = random.Random(14)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, n int)")
        conn.execute("INSERT INTO items SELECT g, 'r' || g, g FROM generate_series(1, 300) g")
    setup(config, dsn)
    next_id = [1000]
    runs = [r for r in apply_lake(spark, config) if r["committed"]]
    for _ in range(ROUNDS):
        _round(dsn, rng, next_id)
        stream(config, dsn)
        runs += [r for r in apply_lake(spark, config) if r["committed"]]
        _assert_equal(dsn, name)
    assert len(runs) == ROUNDS + 1
    _assert_applied_once(name, runs)

    job = lake_job(spark, config)
    maintenance = LakeMaintenance(
        spark, job.settings.model_copy(update={"snapshot_retention_hours": 0, "orphan_retention_hours": 0})
    )
    ident = job.settings.ident("public__items")
    before = maintenance.footprint(ident)
    assert before.delete_files >= ROUNDS // 2 and before.data_files >= ROUNDS and before.snapshots > ROUNDS, before
    (result,) = maintenance.run()
    after = maintenance.footprint(ident)
    assert after.data_files < before.data_files and after.delete_files < before.delete_files, (before, after)
    assert after.delete_files == 0 and after.snapshots <= 2, after
    assert result["before"] == before.__dict__ and result["after"] == after.__dict__
    # the current snapshot is maintenance's and carries the offsets of the last apply
    summary = spark.sql(f"SELECT summary FROM {ident}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()[0][0]
    assert summary["walflow.commit"] == MAINTAIN_COMMIT and "walflow.offsets" in summary
    _assert_equal(dsn, name)
    # nothing new: the job commits nothing (the offsets it reads are the maintenance snapshot's)
    assert not any(r["committed"] for r in apply_lake(spark, config))

    for _ in range(3):
        _round(dsn, rng, next_id)
        stream(config, dsn)
        runs += [r for r in apply_lake(spark, config) if r["committed"]]
        _assert_equal(dsn, name)
    _assert_applied_once(name, runs)


def test_maintenance_before_any_apply_has_nothing_to_do(spark: Any) -> None:
    """A connector's maintain DAG may run before its first apply: the namespace does not exist yet, which is not
    an error (the Hadoop catalog says "Namespace does not exist", which the maintenance once failed on)."""
    from walflow.lake.settings import LakeSettings

    settings = LakeSettings.from_config(connector(unique("nomaint")))
    assert not spark.catalog.databaseExists(settings.namespace_ident())
    assert LakeMaintenance(spark, settings).run() == []


def test_apply_and_maintenance_never_overlap(database: str) -> None:
    """The connector's lake lock: a second holder waits, then is told no (and gets it once the first lets go); the
    Airflow tasks skip the apply or fail the maintenance on that answer, with the reason."""
    import time

    import airflow.sdk.exceptions as exceptions

    from tests.privileges import as_connector
    from walflow.airflow.lake import WalflowApplyOperator, WalflowMaintainOperator
    from walflow.source.locks import lake_lock

    conninfo = as_connector(database)
    with lake_lock(conninfo, "c1", wait_seconds=0) as held:
        assert held
        started = time.monotonic()
        with lake_lock(conninfo, "c1", wait_seconds=1.0, poll_seconds=0.2) as second:
            assert not second and time.monotonic() - started >= 1.0
        with lake_lock(conninfo, "other", wait_seconds=0) as other:  # another connector's lock is its own
            assert other
    with lake_lock(conninfo, "c1", wait_seconds=0) as again:
        assert again
    config = connector(unique("lock"))
    apply = WalflowApplyOperator(task_id="apply_to_lake", connector=config.name, application="x.py")
    with pytest.raises(exceptions.AirflowSkipException, match="maintenance"):
        apply._lock_busy(config)
    maintain = WalflowMaintainOperator(task_id="maintain_lake", connector=config.name, application="x.py")
    with pytest.raises(exceptions.AirflowException, match="held the lake lock"):
        maintain._lock_busy(config)
