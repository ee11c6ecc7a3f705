"""walflow's Spark job: apply a connector's Debezium change events from Kafka to Iceberg tables, exactly once.

Submitted by the stream DAG's SparkSubmitOperator after each stream batch (``local[*]`` on the embedded
runtime, any Spark 3.5 cluster in production):

    spark-submit --jars iceberg-spark-runtime-3.5_2.12-1.10.2.jar \\
        --conf spark.sql.catalog.lake=org.apache.iceberg.spark.SparkCatalog ... \\
        include/spark/apply_changes.py --topic-prefix inventory --bootstrap kafka:9092 --catalog lake

Per topic (one source table): read the partitions from the offsets stored in the lake table's last snapshot
summary to their end (found by consuming to EOF), one Spark task per partition slice, reading with
confluent-kafka on the executors; keep the last event per key (Kafka offset order, which is the stream's order
for a key); one MERGE INTO the Iceberg table, committing the consumed offsets in the same snapshot's summary.
A rerun after a crash anywhere therefore applies exactly what was not committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

log = logging.getLogger("walflow.apply")

INTERNAL_SUFFIXES = (".transaction", ".message")


def _consumer(bootstrap: str, extra: dict[str, Any]) -> Any:
    from confluent_kafka import Consumer

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"walflow-apply-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 * 1024 * 1024,
    }
    settings.update({k: v for k, v in extra.items() if not k.startswith("walflow.")})
    return Consumer(settings)


def list_topics(bootstrap: str, extra: dict[str, Any], prefix: str) -> dict[str, list[int]]:
    consumer = _consumer(bootstrap, extra)
    try:
        metadata = consumer.list_topics(timeout=30)
    finally:
        consumer.close()
    topics = {}
    for name, meta in metadata.topics.items():
        if name.startswith(prefix + ".") and not name.endswith(INTERNAL_SUFFIXES) and meta.error is None:
            topics[name] = sorted(meta.partitions)
    return topics


def partition_end(bootstrap: str, extra: dict[str, Any], topic: str, partition: int, start: int) -> int:
    """The partition's end, found by consuming to EOF (ListOffsets can be short)."""
    from walflow.lake import partition_end as find_end

    consumer = _consumer(bootstrap, extra)
    try:
        return find_end(consumer, topic, partition, start)
    finally:
        consumer.close()


def read_slice(bootstrap: str, extra: dict[str, Any], topic: str, partition: int, start: int, end: int) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """Yield (partition, offset, key, value) for offsets [start, end) of one partition (runs on executors)."""
    from confluent_kafka import KafkaError, TopicPartition

    if end <= start:
        return
    consumer = _consumer(bootstrap, extra)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        idle_since = time.monotonic()
        while True:
            # consume() returns when it has the batch or the timeout passed: keep the timeout short
            messages = consumer.consume(5000, 0.5)
            if not messages:
                if time.monotonic() - idle_since > 60:
                    raise RuntimeError(f"{topic}[{partition}]: nothing to read before offset {end} for 60 s")
                continue
            idle_since = time.monotonic()
            for msg in messages:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{topic}[{partition}] ended at {msg.offset()} before {end}: was the topic recreated?")
                    raise RuntimeError(f"{topic}[{partition}]: {msg.error().str()}")
                if msg.offset() >= end:
                    return
                yield partition, msg.offset(), msg.key(), msg.value()
                if msg.offset() + 1 >= end:
                    return
    finally:
        consumer.close()


_SCHEMA_PREFIX = b'{"schema":'
_PAYLOAD_SEPARATOR = b',"payload":'


def parse_records(records: Iterator[tuple[int, int, bytes | None, bytes | None]], markers: tuple[bytes, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Parse one partition slice's records (runs on the executors; tombstones are dropped).

    Yields (schema_hash, schema_json | None, op, partition, offset, key_json, lsn, ts_ms, row_json, may_toast),
    ``may_toast`` telling whether the row holds one of the TOAST placeholder ``markers``. The schema
    text travels only with the first record of each schema in the slice: every record repeats the same few kB
    of schema, and carrying it through Spark's cache would dominate the job's cost.
    """
    hashes: dict[bytes, str] = {}
    for partition, offset, key, value in records:
        if value is None:
            continue
        schema_bytes = None
        if value.startswith(_SCHEMA_PREFIX):
            # The envelope {"schema": ..., "payload": ...} as the JSON converter writes it: hash the schema's
            # bytes as they are and parse only the payload. A schema's own keys never include "payload".
            cut = value.find(_PAYLOAD_SEPARATOR)
            if cut > 0:
                schema_bytes = value[len(_SCHEMA_PREFIX) : cut]
                payload = orjson.loads(value[cut + len(_PAYLOAD_SEPARATOR) : -1])
        if schema_bytes is None:
            doc = orjson.loads(value)
            if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
                payload = doc["payload"]
                schema_bytes = orjson.dumps(doc["schema"], option=orjson.OPT_SORT_KEYS)
            else:
                payload, schema_bytes = doc, b""
        schema_hash = hashes.get(schema_bytes)
        schema_text = None
        if schema_hash is None:
            # "" marks records without a schema part (converter schemas disabled)
            schema_hash = hashes[schema_bytes] = hashlib.sha1(schema_bytes).hexdigest() if schema_bytes else ""
            schema_text = schema_bytes.decode()
        op = payload["op"]
        row = payload.get("after") if op != "d" else payload.get("before")
        key_doc = orjson.loads(key) if key else None
        key_payload = key_doc.get("payload") if isinstance(key_doc, dict) and "schema" in key_doc else key_doc
        source = payload.get("source") or {}
        row_json = orjson.dumps(row) if row is not None else None
        yield (
            schema_hash,
            schema_text,
            op,
            partition,
            offset,
            orjson.dumps(key_payload, option=orjson.OPT_SORT_KEYS).decode() if key_payload is not None else None,
            source.get("lsn"),
            source.get("ts_ms"),
            row_json,
            row_json is not None and any(m in row_json for m in markers),
        )


def slice_stats(records: Iterator[tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
    """One pass over a slice: its schemas, op counts, newest schema and key field names."""
    schemas: dict[str, str] = {}
    ops: dict[str, int] = {}
    newest: tuple[int, str] | None = None
    key_names: list[str] | None = None
    toasted = 0
    for r in records:
        toasted += r[9]
        if r[1] is not None:
            schemas[r[0]] = r[1]
        ops[r[2]] = ops.get(r[2], 0) + 1
        if r[0] != "" and (newest is None or r[4] > newest[0]):
            newest = (r[4], r[0])
        if key_names is None and r[5] is not None:
            key_names = list(orjson.loads(r[5]).keys())
    yield {"schemas": schemas, "ops": ops, "newest": newest, "key_names": key_names, "toasted": toasted}


class Applier:
    def __init__(self, spark: Any, args: argparse.Namespace) -> None:
        self.spark = spark
        self.args = args
        self.extra = json.loads(args.kafka_config) if args.kafka_config else {}
        self.catalog = args.catalog
        self.namespace = args.namespace or args.topic_prefix
        from walflow.lake import placeholder_values

        self.placeholders = placeholder_values(args.placeholder)
        self.remaining = args.max_records
        self.changelog = bool(getattr(args, "changelog", False))

    # -- offsets ----------------------------------------------------------------------------------
    def table_ident(self, topic: str) -> str:
        from walflow.lake import table_name

        schema, _, table = topic[len(self.args.topic_prefix) + 1 :].partition(".")
        return f"{self.catalog}.`{self.namespace}`.`{table_name(schema, table)}`"

    @staticmethod
    def changelog_ident(ident: str) -> str:
        return ident[:-1] + "__changelog`"

    def exists(self, ident: str) -> bool:
        return bool(self.spark.catalog.tableExists(ident.replace("`", "")))

    def stored_offsets(self, ident: str, topic: str) -> dict[int, int]:
        return self.stored_position(ident, topic)[0]

    def stored_position(self, ident: str, topic: str) -> tuple[dict[int, int], dict[int, str]]:
        """The offsets committed with the table's newest snapshot that has them, and the fingerprints of the
        last record applied from each partition (committed alongside)."""
        from walflow.lake import FINGERPRINTS_PROPERTY, OFFSETS_PROPERTY, parse_offsets

        if not self.exists(ident):
            return {}, {}
        rows = self.spark.sql(f"SELECT summary FROM {ident}.snapshots ORDER BY committed_at DESC").collect()
        for row in rows:
            summary = row["summary"] or {}
            text = summary.get(OFFSETS_PROPERTY)
            if text:
                prints = json.loads(summary.get(FINGERPRINTS_PROPERTY) or "{}").get(topic, {})
                return parse_offsets(text).get(topic, {}), {int(p): v for p, v in prints.items()}
        return {}, {}

    def fingerprints(self, topic: str, offsets: dict[int, int]) -> dict[int, str]:
        """Fingerprints of the records just before each partition's offset (the last ones applied)."""
        from walflow.lake import record_fingerprint

        consumer = _consumer(self.args.bootstrap, self.extra)
        try:
            return {p: record_fingerprint(consumer, topic, p, o - 1) for p, o in offsets.items() if o > 0}
        finally:
            consumer.close()

    # -- one topic --------------------------------------------------------------------------------
    def apply_topic(self, topic: str, partitions: list[int]) -> dict[str, Any]:
        from walflow.lake import LakeError

        ident = self.table_ident(topic)
        stored, stored_prints = self.stored_position(ident, topic)
        # The topic must still be the one the lake read: a recreated topic (or a broker that lost its data and
        # was refilled) can hold as many records as before, so offsets alone cannot tell.
        current = self.fingerprints(topic, {p: o for p, o in stored.items() if p in stored_prints})
        for p, fingerprint in current.items():
            if fingerprint != stored_prints[p]:
                raise LakeError(
                    f"topic {topic} partition {p}: the record at offset {stored[p] - 1} is not the one the lake table "
                    f"{ident} applied there (fingerprint {fingerprint or 'missing'}, expected {stored_prints[p]}): the "
                    "topic was recreated or the broker lost its data (the embedded broker keeps topics in memory "
                    "only), so its offsets no longer line up with the lake's. Nothing was skipped silently; re-snapshot "
                    "the source into a new lake namespace (walflow.lake.namespace), or drop the lake table."
                )
        # the changelog commits separately with its own offsets: read from the lower of the two
        log_stored = self.stored_offsets(self.changelog_ident(ident), topic) if self.changelog else None
        slices = []
        for p in partitions:
            start = stored.get(p, 0) if log_stored is None else min(stored.get(p, 0), log_stored.get(p, 0))
            applied = stored.get(p, 0) if log_stored is None else max(stored.get(p, 0), log_stored.get(p, 0))
            end = partition_end(self.args.bootstrap, self.extra, topic, p, applied)
            if end < applied:
                raise LakeError(
                    f"topic {topic} partition {p} ends at offset {end}, below the offset {applied} the lake table {ident} "
                    "already applied: the topic was recreated or the broker lost its data (the embedded broker keeps "
                    "topics in memory only). Nothing was skipped silently; re-snapshot the source (setup DAG with "
                    "snapshot.mode=always, or an ad-hoc snapshot) into a new lake namespace, or drop the lake table."
                )
            end = min(end, start + max(self.remaining, 0))
            if end > start:
                slices.append((p, start, end))
                self.remaining -= end - start
        if not slices:
            return {"topic": topic, "table": ident, "records": 0, "committed": False}
        bootstrap, extra = self.args.bootstrap, self.extra
        markers = tuple(orjson.dumps(v) for v in self.placeholders)
        # one Spark task per offset slice, so that even a single-partition topic is read by every core
        tasks = offset_slices(slices, self.spark.sparkContext.defaultParallelism)
        rdd = (
            self.spark.sparkContext.parallelize([(topic, *s) for s in tasks], len(tasks))
            .flatMap(lambda s: read_slice(bootstrap, extra, *s))
            .mapPartitions(lambda records: parse_records(records, markers))
        )
        rdd.persist()
        try:
            return self._apply(topic, ident, rdd, stored, slices, log_stored)
        finally:
            rdd.unpersist()

    def _apply(
        self, topic: str, ident: str, rdd: Any, stored: dict[int, int], slices: list[tuple[int, int, int]], log_stored: dict[int, int] | None
    ) -> dict[str, Any]:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        from walflow.lake import FINGERPRINTS_PROPERTY, OFFSETS_PROPERTY, RowShape, format_offsets

        offsets = dict(stored)
        for p, _start, end in slices:
            offsets[p] = end
        phase = time.monotonic()
        schemas: dict[str, str] = {}
        counts: dict[str, int] = {}
        newest: tuple[int, str] | None = None
        key_names: list[str] = []
        toasted = 0
        for stats in rdd.mapPartitions(slice_stats).collect():
            schemas.update(stats["schemas"])
            for op, n in stats["ops"].items():
                counts[op] = counts.get(op, 0) + n
            if stats["newest"] is not None and (newest is None or stats["newest"][0] > newest[0]):
                newest = stats["newest"]
            key_names = key_names or stats["key_names"] or []
            toasted += stats["toasted"]
        if newest is None:
            if not counts:
                return self._commit_offsets_only(ident, topic, offsets)
            from walflow.lake import LakeError

            raise LakeError(
                f"the records of {topic} carry no schema part (value.converter.schemas.enable is false), and the lake "
                "types its columns from the event schema: set value.converter.schemas.enable: true in the connector, "
                "or set walflow.lake.enabled: false"
            )
        latest_hash = newest[1]
        timings = {"read_s": round(time.monotonic() - phase, 2)}
        log.info("%s: read and parsed %d record(s) in %.1f s", topic, sum(counts.values()), timings["read_s"])
        phase = time.monotonic()
        shapes = {h: RowShape(json.loads(s)) for h, s in schemas.items() if s}
        target = shapes[latest_hash]
        self._ensure_table(ident, target, json.loads(schemas[latest_hash]))
        timings["table_s"] = round(time.monotonic() - phase, 2)
        phase = time.monotonic()
        placeholders = self.placeholders
        shapes_b = self.spark.sparkContext.broadcast({h: json.loads(s) for h, s in schemas.items() if s})
        names = target.names
        # a column added with a default holds it for every row that existed before (PostgreSQL fills them
        # without change events): events of an older shape get the default, not NULL
        from walflow.lake import field_defaults

        defaults = field_defaults(json.loads(schemas[latest_hash]))

        def to_row(r: tuple[Any, ...], local: dict[str, Any] = {}) -> tuple[Any, ...]:  # noqa: B006 - per-executor cache
            shape = local.get(r[0])
            if shape is None:
                shape = local[r[0]] = RowShape(shapes_b.value[r[0]])
            row = orjson.loads(r[8]) if r[8] else {}
            values, toasted = shape.convert(row, placeholders)
            by_name = dict(zip(shape.names, values))
            return (r[5], r[2], r[3], r[4], r[6], r[7], toasted, *[by_name[n] if n in by_name else defaults.get(n) for n in names])

        ddl = ", ".join(
            ["`_walflow_key` string", "`_walflow_op` string", "`_walflow_partition` int", "`_walflow_offset` bigint", "`_walflow_lsn` bigint", "`_walflow_source_ts_ms` bigint", "`_walflow_toast` array<string>"]
            + [f"`{n}` {target.types[n]}" for n in names]
        )
        # verifySchema=False: the rows are built from the very shapes the DDL comes from
        frame = self.spark.createDataFrame(rdd.filter(lambda r: r[2] in ("c", "r", "u", "d", "t")).map(to_row), ddl, verifySchema=False)
        if log_stored is not None or counts.get("t"):
            frame = frame.persist()  # used twice: convert the events once
        if log_stored is not None:
            self._append_changelog(topic, ident, frame, log_stored, offsets, target, json.loads(schemas[latest_hash]))
            frame = frame.filter(_from_offsets(stored))
        truncate_at = frame.filter(F.col("_walflow_op") == "t").agg(F.max("_walflow_offset")).collect()[0][0] if counts.get("t") else None
        if truncate_at is not None:
            # A truncate removes every row before it; later events still apply. The DELETE commits without
            # offsets: a crash after it repeats it, which changes nothing.
            self.spark.sql(f"DELETE FROM {ident}")
            frame = frame.filter(F.col("_walflow_offset") > truncate_at)
        frame = frame.filter(F.col("_walflow_op") != "t")
        if key_names:
            if toasted:  # the window is only worth its cost when some event holds a placeholder
                frame = self._resolve_toast(frame, [n for n in names if target.types[n] in ("string", "binary") or target.types[n].startswith("array")])
            latest = Window.partitionBy("_walflow_key").orderBy(F.col("_walflow_partition").desc(), F.col("_walflow_offset").desc())
            frame = frame.withColumn("_walflow_rank", F.row_number().over(latest)).filter("_walflow_rank = 1").drop("_walflow_rank")
        view = f"walflow_src_{uuid.uuid4().hex[:8]}"
        frame.createOrReplaceTempView(view)
        merge = self._merge_sql(ident, view, names, key_names)
        self._with_offsets(
            merge, {OFFSETS_PROPERTY: format_offsets({topic: offsets}), FINGERPRINTS_PROPERTY: json.dumps({topic: self.fingerprints(topic, offsets)})}
        )
        timings["merge_s"] = round(time.monotonic() - phase, 2)
        log.info("%s: merged into %s in %.1f s", topic, ident, timings["merge_s"])
        records = int(sum(counts.values()))
        return {"topic": topic, "table": ident, "records": records, "ops": dict(counts), "committed": True, "offsets": offsets, "timings": timings}

    @staticmethod
    def _resolve_toast(frame: Any, columns: list[str]) -> Any:
        """An unchanged TOASTed value takes the latest value an earlier event of the same batch carried.

        Only when no earlier event of the key has it does the placeholder stay, and the MERGE then keeps the
        lake's current value.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if not columns:
            return frame
        history = Window.partitionBy("_walflow_key").orderBy("_walflow_partition", "_walflow_offset").rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        still_toasted = []
        for name in columns:
            toasted = F.array_contains("_walflow_toast", name)
            # a struct, so that a real NULL value counts as a value
            known = F.last(F.when(~toasted, F.struct(F.col(f"`{name}`").alias("v"))), ignorenulls=True).over(history)
            frame = frame.withColumn(f"_walflow_known_{name}", known)
            frame = frame.withColumn(name, F.when(toasted & F.col(f"_walflow_known_{name}").isNotNull(), F.col(f"_walflow_known_{name}.v")).otherwise(F.col(f"`{name}`")))
            still_toasted.append(F.when(toasted & F.col(f"_walflow_known_{name}").isNull(), F.lit(name)))
        frame = frame.withColumn("_walflow_toast", F.filter(F.array(*still_toasted), lambda x: x.isNotNull()))
        return frame.drop(*[f"_walflow_known_{n}" for n in columns])

    def _append_changelog(
        self, topic: str, ident: str, frame: Any, log_stored: dict[int, int], offsets: dict[int, int], shape: Any, value_schema: dict[str, Any]
    ) -> None:
        """Append every event not yet in the changelog table (an audit trail: one row per event, in order)."""
        from walflow.lake import OFFSETS_PROPERTY, format_offsets

        log_ident = self.changelog_ident(ident)
        meta = (
            "`_walflow_op` string, `_walflow_lsn` bigint, `_walflow_source_ts_ms` bigint, `_walflow_partition` int, "
            "`_walflow_offset` bigint, `_walflow_toast` array<string>, `_walflow_applied_at` timestamp"
        )
        self._ensure_table(log_ident, shape, value_schema, meta=meta, fill_defaults=False)
        view = f"walflow_log_{uuid.uuid4().hex[:8]}"
        frame.filter(_from_offsets(log_stored)).createOrReplaceTempView(view)
        columns = [f"`{n}`" for n in shape.names] + ["_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_partition", "_walflow_offset", "_walflow_toast"]
        self._with_offsets(
            f"INSERT INTO {log_ident} ({', '.join(columns)}, _walflow_applied_at) SELECT {', '.join(columns)}, current_timestamp() FROM {view} "
            "ORDER BY _walflow_partition, _walflow_offset",
            {OFFSETS_PROPERTY: format_offsets({topic: offsets})},
        )

    def _commit_offsets_only(self, ident: str, topic: str, offsets: dict[int, int]) -> dict[str, Any]:
        return {"topic": topic, "table": ident, "records": 0, "committed": False}

    def _ensure_table(self, ident: str, shape: Any, value_schema: dict[str, Any], meta: str | None = None, fill_defaults: bool = True) -> None:
        from walflow.lake import DELETED_COLUMN, LakeError, check_evolution, field_defaults, sql_literal

        if meta is None:
            meta = "`_walflow_op` string, `_walflow_lsn` bigint, `_walflow_source_ts_ms` bigint, `_walflow_applied_at` timestamp"
            if self.args.delete_mode == "soft":
                meta += f", `{DELETED_COLUMN}` boolean"
        if not self.exists(ident):
            self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.catalog}.`{self.namespace}`")
            columns = ", ".join(f"`{n}` {shape.types[n]}" for n in shape.names)
            self.spark.sql(
                f"CREATE TABLE {ident} ({columns}, {meta}) USING iceberg TBLPROPERTIES ("
                "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
                "'write.merge.mode'='merge-on-read')"
            )
            return
        existing = {f.name: f.dataType.simpleString() for f in self.spark.table(ident.replace("`", "")).schema.fields}
        wanted = {n: _simple(self.spark, t) for n, t in shape.types.items()}
        add, problems = check_evolution(existing, wanted)
        if problems:
            raise LakeError(
                f"lake table {ident} cannot take the new schema: {'; '.join(problems)}. walflow only adds columns and "
                "widens int→bigint, float→double, decimal precision. Migrate the lake table (or re-snapshot into a new one)."
            )
        defaults = field_defaults(value_schema) if fill_defaults else {}
        pending = {}
        for name in add:
            if name in defaults:
                # PostgreSQL gave every existing row the default without a change event: so must the lake.
                # The intent is recorded first, so a crash between the steps is finished by the next run.
                pending[name] = sql_literal(defaults[name], shape.types[name])
                self.spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ('walflow.pending-default.{name}' = '{pending[name].replace(chr(39), chr(39) * 2)}')")
            self.spark.sql(f"ALTER TABLE {ident} ADD COLUMN `{name}` {shape.types[name]}")
        properties = {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}
        for key, literal in properties.items():
            if key.startswith("walflow.pending-default."):
                column = key[len("walflow.pending-default.") :]
                self.spark.sql(f"UPDATE {ident} SET `{column}` = {literal} WHERE `{column}` IS NULL")
                self.spark.sql(f"ALTER TABLE {ident} UNSET TBLPROPERTIES ('{key}')")

    def _merge_sql(self, ident: str, view: str, names: list[str], key_names: list[str]) -> str:
        from walflow.lake import DELETED_COLUMN

        def col(n: str) -> str:
            return f"`{n}`"

        meta_values = "s._walflow_op, s._walflow_lsn, s._walflow_source_ts_ms, current_timestamp()"
        insert_cols = ", ".join([col(n) for n in names] + ["_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms", "_walflow_applied_at"])
        insert_vals = ", ".join([f"s.{col(n)}" for n in names] + [meta_values])
        if self.args.delete_mode == "soft":
            insert_cols += f", {DELETED_COLUMN}"
            insert_vals += ", s._walflow_op = 'd'"
        if not key_names:
            # no key: only inserts can be captured (PostgreSQL refuses other changes without a replica identity)
            return f"INSERT INTO {ident} ({insert_cols}) SELECT {insert_vals} FROM {view} s WHERE s._walflow_op <> 'd'"
        on = " AND ".join(f"t.{col(k)} <=> s.{col(k)}" for k in key_names)
        sets = ", ".join(
            f"t.{col(n)} = CASE WHEN array_contains(s._walflow_toast, '{n}') THEN t.{col(n)} ELSE s.{col(n)} END" for n in names
        )
        sets += ", t._walflow_op = s._walflow_op, t._walflow_lsn = s._walflow_lsn, t._walflow_source_ts_ms = s._walflow_source_ts_ms, t._walflow_applied_at = current_timestamp()"
        if self.args.delete_mode == "soft":
            deleted = (
                f"WHEN MATCHED AND s._walflow_op = 'd' THEN UPDATE SET t.{DELETED_COLUMN} = true, t._walflow_op = 'd', "
                "t._walflow_lsn = s._walflow_lsn, t._walflow_source_ts_ms = s._walflow_source_ts_ms, t._walflow_applied_at = current_timestamp()"
            )
            sets += f", t.{DELETED_COLUMN} = false"
            not_matched = f"WHEN NOT MATCHED THEN INSERT ({insert_cols}) VALUES ({insert_vals})"
        else:
            deleted = "WHEN MATCHED AND s._walflow_op = 'd' THEN DELETE"
            not_matched = f"WHEN NOT MATCHED AND s._walflow_op <> 'd' THEN INSERT ({insert_cols}) VALUES ({insert_vals})"
        return f"MERGE INTO {ident} t USING {view} s ON {on} {deleted} WHEN MATCHED THEN UPDATE SET {sets} {not_matched}"

    def _with_offsets(self, statement: str, properties: dict[str, str]) -> None:
        """Run one SQL commit with ``properties`` in its snapshot summary.

        Iceberg's CommitMetadata keeps commit properties in a thread-local; PySpark pins each Python thread to
        one JVM thread, so setting it here and running the statement on the same thread attaches them to the
        MERGE's own snapshot: the data and its Kafka offsets commit together or not at all.
        """
        jvm = self.spark._jvm
        cls = jvm.org.apache.spark.util.Utils.classForName("org.apache.iceberg.spark.CommitMetadata", True, False)
        field = cls.getDeclaredField("COMMIT_PROPERTIES")
        field.setAccessible(True)
        local = field.get(None)
        props = jvm.java.util.HashMap()
        for key, value in properties.items():
            props.put(key, value)
        local.set(props)
        try:
            self.spark.sql(statement)
        finally:
            local.remove()


def offset_slices(slices: list[tuple[int, int, int]], parallelism: int, min_size: int = 20_000) -> list[tuple[int, int, int]]:
    """Cut (partition, start, end) ranges into about ``parallelism`` pieces of at least ``min_size`` records."""
    total = sum(end - start for _p, start, end in slices)
    size = max(min_size, -(-total // max(parallelism, 1)))
    out = []
    for partition, start, end in slices:
        for begin in range(start, end, size):
            out.append((partition, begin, min(begin + size, end)))
    return out


def ship_walflow(spark: Any) -> None:
    """Make ``walflow.lake`` importable on the executors of any cluster.

    The executors convert events with :mod:`walflow.lake`; on a cluster they do not have this repository, so the
    three pure-Python modules it needs are zipped on the driver and added with ``addPyFile``.
    """
    import tempfile
    import zipfile
    from pathlib import Path

    import walflow

    package = Path(walflow.__file__).parent
    archive = Path(tempfile.mkdtemp(prefix="walflow-pyfiles-")) / "walflow_lake.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for module in ("__init__.py", "errors.py", "lake.py"):
            zf.write(package / module, f"walflow/{module}")
    spark.sparkContext.addPyFile(str(archive))


def _from_offsets(starts: dict[int, int]) -> Any:
    """A filter keeping the events at or after each partition's start offset."""
    from pyspark.sql import functions as F

    keep = F.lit(True)
    for partition, start in starts.items():
        keep = keep & ((F.col("_walflow_partition") != partition) | (F.col("_walflow_offset") >= start))
    return keep


def _simple(spark: Any, ddl_type: str) -> str:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl_type).simpleString()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="apply a walflow connector's change events to Iceberg")
    parser.add_argument("--topic-prefix", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument(
        "--kafka-config", default=os.environ.get("WALFLOW_KAFKA_CONFIG", ""), help="JSON of extra librdkafka settings (TLS, SASL); default $WALFLOW_KAFKA_CONFIG"
    )
    parser.add_argument("--catalog", default="lake")
    parser.add_argument("--namespace", default=None, help="Iceberg namespace (default: the topic prefix)")
    parser.add_argument("--max-records", type=int, default=5_000_000)
    parser.add_argument("--delete-mode", choices=["hard", "soft"], default="hard")
    parser.add_argument("--placeholder", default="__debezium_unavailable_value")
    parser.add_argument("--changelog", action="store_true", help="also append every event to <table>__changelog")
    parser.add_argument("--topics", default="", help="comma-separated topics (default: every topic of the prefix)")
    parser.add_argument("--result", default="", help="write the JSON summary to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"walflow-apply-{args.topic_prefix}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not spark.sparkContext.master.startswith("local"):
        ship_walflow(spark)
    started = time.monotonic()
    applier = Applier(spark, args)
    topics = list_topics(args.bootstrap, applier.extra, args.topic_prefix)
    if args.topics:
        wanted = {t.strip() for t in args.topics.split(",") if t.strip()}
        topics = {t: p for t, p in topics.items() if t in wanted}
    results = []
    for topic in sorted(topics):
        result = applier.apply_topic(topic, topics[topic])
        log.info("%s → %s: %s record(s)%s", topic, result["table"], result["records"], "" if result["committed"] else " (nothing to commit)")
        results.append(result)
    summary = {"tables": results, "seconds": round(time.monotonic() - started, 2)}
    text = json.dumps(summary, default=str)
    print(f"WALFLOW_APPLY_SUMMARY {text}")
    if args.result:
        with open(args.result, "w") as fh:
            fh.write(text)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
