"""Issue 29, the lake's run as a whole: who owns a lake table, fair progress among topics, one topic's failure not
holding the others back, a changelog turned on later, a topic whose records expired. Real PostgreSQL, broker, Spark
and Iceberg (the lake job's modules in the tests' Spark session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import apply_lake, connector, lake_job, lake_rows, setup, stream, unique
from walflow.errors import ConfigError, DriftError, LakeError, LakeSchemaError
from walflow.lake import columns as C

pytestmark = [pytest.mark.timeout(900), pytest.mark.spark]


def _by_table(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["table"].rsplit(".", 1)[1].strip("`"): r for r in results}


def test_max_records_is_shared_among_topics_and_the_backlog_is_reported(spark: Any, database: str) -> None:
    """A backlog on the first topic (in name order) no longer starves the other: ``walflow.lake.max.records`` is
    shared, what the small topic leaves goes to the big one, the backlog is in the result and the commit's
    summary, and the next run finishes the big topic."""
    import os

    from walflow.lake import read_hadoop_table

    config = connector(unique("fair"), **{"walflow.lake.max.records": 30})
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE a_big (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE b_small (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO a_big SELECT g, 'a' FROM generate_series(1, 45) g")
        conn.execute("INSERT INTO b_small SELECT g, 'b' FROM generate_series(1, 5) g")
    setup(config, database)
    first = _by_table(apply_lake(spark, config))
    assert first["public__b_small"]["records"] == 5 and first["public__a_big"]["records"] == 25, first
    assert first["public__a_big"]["backlog"] == 20 and first["public__b_small"]["backlog"] == 0, first
    summary = (
        read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], config.topic_prefix, "public__a_big")
        .current_snapshot()
        .summary
    )
    assert summary.additional_properties[C.BACKLOG_PROPERTY] == '{"0":20}'
    second = _by_table(apply_lake(spark, config))
    assert second["public__a_big"]["records"] == 20 and not second["public__a_big"]["backlog"], second
    assert len(lake_rows(config.topic_prefix, "public__a_big")) == 45


def test_a_connector_whose_tables_are_empty_at_setup_gets_its_lake(spark: Any, database: str) -> None:
    """Issue 45: every captured table empty at setup, so the first apply finds only empty topics and asks the catalog
    which lake tables claim them, before any namespace exists (a Hadoop catalog answered with a Java
    NoSuchNamespaceException, on every run, and the task said its retries might get past it). The first apply
    creates the namespace and applies nothing; the rows inserted later reach the lake."""
    from tests.lakecheck import differences

    config = connector(unique("empty"))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE e (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE f (id int PRIMARY KEY)")
    setup(config, database)
    assert not [r for r in apply_lake(spark, config) if r["records"] or r["committed"]]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO e VALUES (1, 'a'), (2, 'b')")
        conn.execute("INSERT INTO f VALUES (7)")
    stream(config, database)
    apply_lake(spark, config)
    assert not differences(database, config.topic_prefix, "public__e", "public", "e") + differences(
        database, config.topic_prefix, "public__f", "public", "f"
    )


@pytest.mark.long
def test_a_tombstone_cut_from_its_delete_moves_the_offsets_on(spark: Any, database: str) -> None:
    """``walflow.lake.max.records`` ends a run between a delete and its tombstone: the next run reads the tombstone
    alone, a delete of its key (as a compacted topic's lone tombstone is) that finds nothing left to delete; it
    commits the offsets (the changelog's too, without a row for it), so the backlog is 0 and the record is not
    read again. (No TOASTable column: a run ending on a delete of such a table reads on to its create, should it be
    one half of a key change: test_lake_truth.py's cut key changes.)"""
    config = connector(unique("tomb"), **{"walflow.lake.changelog": True})
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO t SELECT g, 7 FROM generate_series(1, 3) g")
    setup(config, database)
    apply_lake(spark, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("DELETE FROM t WHERE id = 2")
    stream(config, database)
    cut = _by_table(apply_lake(spark, config, max_records=1))["public__t"]
    assert cut["records"] == 1 and cut["backlog"] == 1, cut
    tail = _by_table(apply_lake(spark, config))["public__t"]
    assert tail["committed"] and tail["ops"] == {"d": 1} and not tail["backlog"] and tail["offsets"] == {0: 5}, tail
    again = _by_table(apply_lake(spark, config))["public__t"]
    assert not again["committed"] and not again["backlog"], again
    assert sorted(r["id"] for r in lake_rows(config.topic_prefix, "public__t")) == [1, 3]


def test_a_lake_table_belongs_to_one_connector_and_one_topic(spark: Any, database: str, tmp_path: Path) -> None:
    """A second connector pointed at the first one's namespace is refused before it writes (naming the owner and
    the fix); a source table named like another's changelog is refused while the other topics are applied; reset
    --lake leaves the other connector's tables alone."""
    from tests.privileges import as_connector
    from walflow.admin.reset import reset_connector

    warehouse = str(tmp_path / "warehouse")
    owner = connector(unique("own"), **{"walflow.lake.changelog": True})
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
        conn.execute('CREATE TABLE "orders__changelog" (id int PRIMARY KEY, v text)')
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, v text)")
        for table in ("orders", "orders__changelog", "notes"):
            conn.execute(f"INSERT INTO {table} SELECT g, 'x' FROM generate_series(1, 3) g")
    setup(owner, database)
    with pytest.raises(LakeError) as refused:
        apply_lake(spark, owner, warehouse)
    message = str(refused.value)
    assert "would all write lake table 'public__orders__changelog'" in message and "exclude" in message, message
    applied = _by_table(refused.value.results)  # type: ignore[attr-defined]
    assert set(applied) == {"public__notes"} and applied["public__notes"]["records"] == 3
    from walflow.lake import read_hadoop_table

    assert read_hadoop_table(warehouse, owner.topic_prefix, "public__orders") is None  # nothing of orders was written

    intruder = connector(
        unique("intr"), **{"walflow.lake.namespace": owner.topic_prefix, "table.include.list": "public.notes"}
    )
    # in one source database, setup refuses it (the owner's claim in the state table) ...
    with pytest.raises(DriftError, match=f"lake namespace .* belongs to connector '{owner.name}'"):
        setup(intruder, database)
    # ... and when the claim is not there (connectors of two databases), the lake table's own claim refuses it
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("DELETE FROM public.walflow_state WHERE connector = %s AND key = 'owner'", (owner.name,))
    setup(intruder, database)
    with pytest.raises(
        LakeError, match=rf"lake table .*public__notes.* belongs to connector '{owner.name}'.*walflow.lake.namespace"
    ):
        apply_lake(spark, intruder, warehouse)
    assert len(lake_rows(owner.topic_prefix, "public__notes", warehouse)) == 3

    import walflow.admin.reset as reset

    report = reset_connector(
        intruder.model_copy(update={"walflow_lake_warehouse": warehouse}), as_connector(database), lake=True
    )
    assert report.lake_tables == [] and any("public__notes" in kept for kept in report.lake_kept), report
    assert reset.table_owner(Path(warehouse) / owner.topic_prefix / "public__notes") == owner.name
    assert len(lake_rows(owner.topic_prefix, "public__notes", warehouse)) == 3


def test_nested_topic_prefixes_are_refused(tmp_path: Path) -> None:
    """``shop`` and ``shop.eu``: each would take the other's topics for its own tables."""
    from walflow.config.files import load_all

    for name, prefix in (("shop", "shop"), ("shop_eu", "shop.eu")):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ntopic.prefix: {prefix}\nslot.name: {name}\n")
    with pytest.raises(ConfigError, match=r"topic prefixes 'shop' .* and 'shop\.eu' .* nest"):
        load_all(tmp_path)
    (tmp_path / "shop_eu.yaml").write_text("name: shop_eu\ntopic.prefix: shop_eu\nslot.name: shop_eu\n")
    assert len(load_all(tmp_path)) == 2


def test_one_topic_that_fails_does_not_hold_back_the_others(spark: Any, database: str) -> None:
    """A source column the lake cannot hold (walflow's metadata prefix; two names equal but for case) stops its own
    topic with the cause and the fix, and every other topic is still applied."""
    config = connector(unique("iso"))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE a_reserved (id int PRIMARY KEY, _walflow_op text)")
        conn.execute('CREATE TABLE b_cased (id int PRIMARY KEY, "Name" text, name text)')
        conn.execute("CREATE TABLE c_fine (id int PRIMARY KEY, v text)")
        for table in ("a_reserved", "b_cased", "c_fine"):
            conn.execute(f"INSERT INTO {table} (id) SELECT g FROM generate_series(1, 4) g")
    setup(config, database)
    with pytest.raises(LakeError) as refused:
        apply_lake(spark, config)
    message = str(refused.value)
    assert "2 topics could not be applied" in message
    assert "['_walflow_op']" in message and "column.exclude.list" in message
    assert "[['Name', 'name']]" in message and "differ only in case" in message
    assert [r["table"].rsplit(".", 1)[1] for r in refused.value.results] == ["`public__c_fine`"]  # type: ignore[attr-defined]
    assert len(lake_rows(config.topic_prefix, "public__c_fine")) == 4
    one = connector(unique("iso1"), **{"table.include.list": "public.a_reserved"})
    setup(one, database)
    with pytest.raises(LakeSchemaError, match="start with '_walflow_'"):  # one failure: raised as it is
        apply_lake(spark, one)


@pytest.mark.long
def test_a_changelog_turned_on_later_starts_where_the_table_is(spark: Any, database: str) -> None:
    """Turning ``walflow.lake.changelog`` on after the table was applied does not read the topic again from offset 0:
    the changelog holds the events from then on, the table takes only the new ones."""
    config = connector(unique("late"))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO items SELECT g, 'x' FROM generate_series(1, 50) g")
    setup(config, database)
    apply_lake(spark, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'y' WHERE id <= 5")
    stream(config, database)
    later = config.model_copy(update={"walflow_lake_changelog": True})
    result = _by_table(apply_lake(spark, later))["public__items"]
    assert result["records"] == 5, result
    logged = lake_rows(config.topic_prefix, "public__items__changelog")
    assert sorted(r["id"] for r in logged) == [1, 2, 3, 4, 5] and {r["_walflow_op"] for r in logged} == {"u"}


@pytest.mark.long
def test_an_idle_topic_whose_records_expired_keeps_its_table(
    spark: Any, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose name Kafka cannot carry (``"order items"``) and whose topic's records all expired: the lake
    table is found by its claim, not guessed from the topic's name (which named another table and raised a false
    RecordsDeletedError on every run). The embedded broker cannot delete records, so the expiry is what the lake
    job sees of it: no record left, the partition starting at its end."""
    from walflow.lake import reader

    config = connector(unique("idle"))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute('CREATE TABLE "order items" (id int PRIMARY KEY, v text)')
        conn.execute("INSERT INTO \"order items\" SELECT g, 'x' FROM generate_series(1, 6) g")
    setup(config, database)
    name = _by_table(apply_lake(spark, config))
    assert list(name) == [next(iter(name))] and next(iter(name)).startswith("public__order_items_")
    ends = {}
    real_bounds = reader.offset_bounds

    def expired(kafka: dict[str, Any], topic: str, partition: int, start: int) -> tuple[int, int]:
        _low, end = real_bounds(kafka, topic, partition, start)
        ends[topic] = end
        return end, end

    monkeypatch.setattr(reader, "first_records", lambda *a, **k: iter(()))
    monkeypatch.setattr(reader, "offset_bounds", expired)
    again = lake_job(spark, config).run()
    assert [r["table"] for r in again] == [r["table"] for r in name.values()] and not again[0]["committed"], again
