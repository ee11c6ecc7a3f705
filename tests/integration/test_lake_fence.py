"""Issue 29, point 6: the apply that publishes is the newest one. An older run of the lake job (an orphaned
spark-submit whose Airflow task died, while a retry started) that a newer run overtakes publishes nothing, so no
row reaches the lake twice, not even in the tables that take plain appends (a new keyed table, a keyless one with
inserts only). Real PostgreSQL, broker, Spark and Iceberg; the lake is compared with the source row by row."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.lakecheck import differences
from tests.support import apply_lake, connector, lake_job, setup, stream, unique
from walflow.errors import LakeError
from walflow.lake.apply import CHANGELOG_SUFFIX
from walflow.lake.fence import BRANCH_PREFIX
from walflow.lake.hooks import ApplyHooks
from walflow.lake.naming import table_name
from walflow.lake.settings import LakeSettings

#: in make test's lane alone, whose Spark session it shares with the fault suite's disruptive tests (Makefile)
pytestmark = [pytest.mark.timeout(600), pytest.mark.spark, pytest.mark.alone, pytest.mark.long]


class Overtaken(ApplyHooks):
    """At ``point`` of each table, a newer run of the job applies everything to the end (as a retry of the task
    would, while the older spark-submit goes on)."""

    def __init__(self, spark: Any, config: Any, point: str) -> None:
        self.spark, self.config, self.point = spark, config, point
        self.newer: list[list[dict[str, Any]]] = []
        self._seen: set[str] = set()

    def reached(self, point: str, table: str) -> None:
        if point == self.point and table not in self._seen:
            self._seen.add(table)
            self.newer.append(apply_lake(self.spark, self.config))


def _branches(spark: Any, ident: str) -> list[str]:
    return sorted(
        r["name"] for r in spark.sql(f"SELECT name FROM {ident}.refs").collect() if r["name"].startswith(BRANCH_PREFIX)
    )


@pytest.mark.parametrize("point", ["after_read", "after_ddl", "after_changelog"])
def test_a_run_overtaken_by_a_newer_one_publishes_nothing(spark: Any, database: str, point: str) -> None:
    """The newer run starts after the older one read its offsets (``after_read``), after it opened its branches
    (``after_ddl``), or after it published its changelog (``after_changelog``): the older run fails, retryable, having
    published nothing of what the newer one applied; the lake equals the source, and no run's branch is left."""
    dsn = database
    config = connector(unique("fence"), **{"walflow.lake.changelog": True})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE k (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE appended (n int, v text)")
        conn.execute("INSERT INTO k SELECT g, 'v' || g FROM generate_series(1, 5) g")
        conn.execute("INSERT INTO appended SELECT g, 'a' || g FROM generate_series(1, 5) g")
    setup(config, dsn)
    hooks = Overtaken(spark, config, point)
    with pytest.raises(LakeError) as refused:
        apply_lake(spark, config, hooks=hooks)
    assert refused.value.retryable, refused.value
    message = str(refused.value)
    assert "another run of the apply job" in message, message
    assert hooks.newer and sum(r["records"] for r in hooks.newer[0]) == 10, hooks.newer

    settings = LakeSettings.from_config(config)
    for source in ("k", "appended"):
        found = differences(dsn, config.topic_prefix, table_name("public", source), "public", source)
        assert not found, "\n".join(found)
        ident = settings.ident(table_name("public", source))
        assert (
            _branches(spark, ident) == []
            and _branches(spark, settings.ident(table_name("public", source) + CHANGELOG_SUFFIX)) == []
        )

    # the changelog holds each event once as well
    log = spark.table(settings.ident(table_name("public", "appended") + CHANGELOG_SUFFIX)).count()
    assert log == 5, log

    # later changes apply as usual on top of what the newer run published
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE k SET v = 'changed' WHERE id = 2")
        conn.execute("INSERT INTO appended VALUES (6, 'a6')")
    stream(config, dsn)
    apply_lake(spark, config)
    for source in ("k", "appended"):
        found = differences(dsn, config.topic_prefix, table_name("public", source), "public", source)
        assert not found, "\n".join(found)


def test_a_branch_left_by_a_run_that_died_is_removed_by_the_next(spark: Any, database: str) -> None:
    """A run killed between its branch's commit and the publish leaves a branch: the table is unchanged (nothing
    published), and the next run removes the branch, applies the records, and equals the source."""

    class Dies(ApplyHooks):
        def reached(self, point: str, table: str) -> None:
            if point == "after_ddl":
                raise RuntimeError("the driver dies")

    dsn = database
    config = connector(unique("left"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3) g")
    setup(config, dsn)
    apply_lake(spark, config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE t SET v = 'new' WHERE id = 1")
    stream(config, dsn)
    dying = lake_job(spark, config, None, Dies())
    dying.fence.discard = lambda ident: None  # a killed driver cleans nothing up
    with pytest.raises(RuntimeError):
        dying.run()
    ident = LakeSettings.from_config(config).ident(table_name("public", "t"))
    assert len(_branches(spark, ident)) == 1
    assert differences(dsn, config.topic_prefix, table_name("public", "t"), "public", "t"), (
        "the dead run published its change"
    )
    apply_lake(spark, config)
    assert _branches(spark, ident) == []
    found = differences(dsn, config.topic_prefix, table_name("public", "t"), "public", "t")
    assert not found, "\n".join(found)
