"""The lake table's snapshot history: the offsets walflow committed with its data, and commits that carry them.

Exactly once rests on two facts: every commit of the job puts the Kafka offsets it applied into the summary of
the very snapshot that holds the data (:func:`commit`), and the next run reads them back through the current
snapshot's ancestry (:func:`stored_position`), refusing a history it cannot trust.
"""

from __future__ import annotations

from typing import Any

import orjson
from pyspark.sql import SparkSession

from walflow.errors import LakeHistoryError
from walflow.lake import columns as C
from walflow.lake.naming import sql_quote, sql_string
from walflow.lake.positions import parse_offsets


def table_exists(spark: SparkSession, ident: str) -> bool:
    return bool(spark.catalog.tableExists(ident))


def table_properties(spark: SparkSession, ident: str) -> dict[str, str]:
    """The table's properties; empty for a table that does not exist."""
    if not table_exists(spark, ident):
        return {}
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}


def holds_no_rows(spark: SparkSession, ident: str) -> bool:
    """True when the table's current snapshot has no data file (a new table, or one whose files were all deleted)."""
    return int(spark.sql(f"SELECT count(*) FROM {ident}.data_files").collect()[0][0]) == 0


def stored_position(
    spark: SparkSession, ident: str, topic: str, rollback: tuple[str, str, str]
) -> tuple[dict[int, int], dict[int, str]]:
    """The offsets committed with the newest walflow snapshot that has them, and the fingerprints of the last
    record applied from each partition (committed alongside). See :func:`offsets_snapshot`."""
    found = offsets_snapshot(spark, ident, rollback)
    if found is None:
        return {}, {}
    summary = found[1]
    prints = orjson.loads(summary.get(C.FINGERPRINTS_PROPERTY) or "{}").get(topic, {})
    return parse_offsets(summary[C.OFFSETS_PROPERTY]).get(topic, {}), {int(p): v for p, v in prints.items()}


def offsets_snapshot(
    spark: SparkSession, ident: str, rollback: tuple[str, str, str]
) -> tuple[int, dict[str, str]] | None:
    """How many snapshots back from the current one the newest that carries walflow's offsets is (0: the current
    one), and its summary; None for a table that has none (or does not exist).

    The walk follows the current snapshot's ancestry (a rollback leaves the rolled-back snapshots out). Every
    snapshot on the way must be walflow's (it carries ``walflow.commit`` or offsets) or a compaction
    (operation ``replace``, data unchanged): a snapshot written by anyone else means the table may no longer
    equal the source, and applying on top of it would hide that, so the job stops. ``rollback`` is (catalog,
    namespace, table name) for the message's advice.
    """
    if not table_exists(spark, ident):
        return None
    snapshots = {
        r["snapshot_id"]: r
        for r in spark.sql(
            f"SELECT snapshot_id, parent_id, operation, committed_at, summary FROM {ident}.snapshots"
        ).collect()
    }
    refs = spark.sql(f"SELECT snapshot_id FROM {ident}.refs WHERE name = 'main'").collect()
    current = refs[0]["snapshot_id"] if refs else None
    distance = 0
    while current is not None and current in snapshots:
        row = snapshots[current]
        summary = row["summary"] or {}
        if row["operation"] != "replace" and C.COMMIT_PROPERTY not in summary and not summary.get(C.OFFSETS_PROPERTY):
            catalog, namespace, name = rollback
            qualified = sql_string(sql_quote(namespace) + "." + sql_quote(name))
            raise LakeHistoryError(
                f"lake table {ident} was changed by another writer: its snapshot {current} ({row['operation']}, "
                f"committed at {row['committed_at']}) was not written by walflow, so the table may no longer equal the "
                "source, and walflow will not apply changes on top of it. Undo that change with CALL "
                f"{sql_quote(catalog)}.system.rollback_to_snapshot({qualified}, {row['parent_id']}) (the snapshot "
                "before it), or drop the lake table and re-snapshot the source; only compaction (rewrite_data_files, "
                "operation 'replace', or walflow's own <name>__maintain DAG) may run on walflow's tables."
            )
        if summary.get(C.OFFSETS_PROPERTY):
            return distance, dict(summary)
        current = row["parent_id"]
        distance += 1
    if current is not None:
        # The ancestry ends at an expired snapshot before any that carries offsets: starting again from offset
        # 0 would apply every event twice (and duplicate the rows of keyless tables), so stop instead.
        raise LakeHistoryError(
            f"lake table {ident}: the snapshots since walflow last committed offsets do not reach back to one that "
            f"has them (snapshot {current} was expired), so the job cannot tell which Kafka records it already "
            "applied. Expire snapshots with walflow's <name>__maintain DAG, which keeps the ones the next run needs "
            "(or keep the newest one walflow committed, summary 'walflow.offsets', when expiring by hand); now drop "
            "the lake table and re-snapshot the source, or apply into a new walflow.lake.namespace."
        )
    return None


def commit(spark: SparkSession, statement: str, properties: dict[str, str], kind: str) -> None:
    """Run one SQL commit with ``properties`` and walflow's mark (``walflow.commit`` = ``kind``) in its snapshot
    summary.

    Iceberg's CommitMetadata keeps commit properties in a thread-local; PySpark pins each Python thread to
    one JVM thread, so setting it here and running the statement on the same thread attaches them to the
    statement's own snapshot: the data and its Kafka offsets commit together or not at all.
    """
    jvm: Any = spark._jvm
    cls = jvm.org.apache.spark.util.Utils.classForName("org.apache.iceberg.spark.CommitMetadata", True, False)
    field = cls.getDeclaredField("COMMIT_PROPERTIES")
    field.setAccessible(True)
    local = field.get(None)
    props = jvm.java.util.HashMap()
    for key, value in {**properties, C.COMMIT_PROPERTY: kind}.items():
        props.put(key, value)
    local.set(props)
    try:
        spark.sql(statement)
    finally:
        local.remove()
