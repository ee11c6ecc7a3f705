"""Spark frames of the job (driver side): the decoded events of a topic and what Spark learns about them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, cast

import orjson
from pyspark.rdd import PythonEvalType
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.udf import UserDefinedFunction

from walflow.lake import columns as C
from walflow.lake.decoder import EVENT_OPS, DecodePlan, Decoder
from walflow.lake.naming import sql_quote
from walflow.lake.reader import key_names


def map_in_arrow(frame: DataFrame, function: Any, ddl: str) -> DataFrame:
    """``frame.mapInArrow(function, ddl)``: Arrow batches in and out of the Python workers, no row pickling.

    PySpark 3.5's public ``mapInArrow`` insists on pandas although it does not use it; without pandas the same
    plan (a SQL_MAP_ARROW_ITER_UDF over every column) is built directly.
    """
    try:
        import pandas  # noqa: F401  (only whether it is installed matters)
    except ImportError:
        udf = UserDefinedFunction(
            function, returnType=ddl, name="walflow_arrow", evalType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF
        )
        column = udf(*[frame[sql_quote(c)] for c in frame.columns])
        return DataFrame(frame._jdf.pythonMapInArrow(column._jc.expr(), False), frame.sparkSession)
    return frame.mapInArrow(function, ddl)


def task_frame(spark: SparkSession, topic: str, tasks: list[tuple[int, int, int]]) -> DataFrame:
    """One row (topic, partition, start, end) per offset slice, one Spark partition each."""
    rows = spark.sparkContext.parallelize([(topic, *t) for t in tasks], len(tasks))
    return spark.createDataFrame(rows, "topic string, partition int, start bigint, end bigint")


def decode(tasks: DataFrame, plan: DecodePlan) -> DataFrame:
    """The decoded events of the slices of ``tasks`` (every column of :meth:`DecodePlan.columns`)."""
    return map_in_arrow(tasks, Decoder(plan), plan.ddl())


@dataclass(frozen=True, slots=True)
class RunStats:
    """What one run read of a topic, as :func:`run_stats` computes it over the decoded frame (on the driver: never
    pickled to the executors). Events are the rows with an op, the before image of a keyless update not counted."""

    #: the number of events per op ("c", "r", "u", "d", "t", and any other op such as "m" messages: counted, never
    #: applied); an op without events is left out, so an empty dict means the records held no event
    counts: dict[str, int]
    #: the schema parts read, ``{schema hash: schema text}``; records without a schema part under "" (text "")
    schemas: dict[str, str]
    #: the hash of the newest event's schema (by source position) among those with a schema part; None without one
    newest: str | None
    #: the field names of the oldest key read (by source position); empty for a table without key
    key_names: list[str]
    #: when a later key has other fields than ``key_names``: per partition, the offset of its first record of another
    #: key, where to cut the run (:func:`key_cut`); empty when the run has one key
    key_cut: dict[int, int]
    #: (the oldest key's names, the first other key's names) when ``key_cut`` is not empty, else None
    key_change: tuple[list[str], list[str]] | None
    #: the field names of the newest key read
    newest_key_names: list[str]
    #: the number of events holding unchanged-TOAST placeholders
    toasted: int
    #: the number of updates and deletes whose record has no key
    keyless: int
    #: the source tables (schema, table) the events name: more than one means colliding topic names
    sources: set[tuple[str, str]]
    #: the problem records not accepted by ``walflow.lake.accept.records`` (parsed problem documents: topic,
    #: partition, offset, column, error and maybe value, schemaless), at most 1,000
    problems: list[dict[str, Any]]
    #: the number of problem rows, accepted or not
    problem_count: int
    #: the problem records accepted by ``walflow.lake.accept.records`` (skipped, or with values set to null), at most
    #: 1,000
    skipped: list[dict[str, Any]]
    #: the JSON kinds seen per schemaless column being typed, or column the target lacks
    kinds: dict[str, set[str]]
    #: the number of rows with a value the lake type cannot hold (its text in ``_walflow_overflow``)
    overflowed: int


def run_stats(frame: DataFrame) -> RunStats:
    """What the run holds, computed by Spark over the decoded (cached) frame: op counts, schemas and the newest,
    a key, TOAST placeholders, changes without key, source tables, problems and schemaless JSON kinds.

    Two passes over the cache rather than one: the counts over every row are sums, which Spark runs as generated
    code, while collecting sets and lists makes an aggregate run row by row through its interpreted path (in one
    aggregate with them, the sums ran that way too: the most sampled frame of a cold apply). The collected values
    sit on a few rows only (the decoder writes each once per slice, or where it changes), which the second pass
    selects before collecting.
    """
    is_event = F.col(C.OP).isNotNull() & ~((F.col(C.OP) == "u") & (F.col(C.SIGN) < 0))
    other = is_event & ~F.col(C.OP).isin(*EVENT_OPS)

    def count_if(condition: Column, name: str) -> Column:
        return F.sum(F.when(condition, 1).otherwise(0)).alias(name)

    sums = frame.agg(
        *[count_if(is_event & (F.col(C.OP) == op), f"n_{op}") for op in EVENT_OPS],
        count_if(other, "n_other"),
        count_if((F.size(C.TOAST) > 0) & is_event, "toasted"),
        count_if(~F.col(C.KEYED) & F.col(C.OP).isin("u", "d") & is_event, "keyless"),
        F.count(C.PROBLEM).alias("problems"),
        count_if(F.col(C.OVERFLOW).isNotNull(), "overflowed"),
    ).collect()[0]
    sparse = [F.col(c).isNotNull() for c in (C.SCHEMA, C.KEY, C.SRC_TABLE, C.PROBLEM, C.KINDS)]
    rare = sparse[0]
    for condition in sparse[1:]:
        rare = rare | condition
    if sums["n_other"]:
        rare = rare | other
    accepted = F.coalesce(F.get_json_object(C.PROBLEM, "$.accepted") == "true", F.lit(False))
    collected = (
        frame.filter(rare)
        .agg(
            F.map_from_entries(F.collect_set(F.when(other, F.struct(F.col(C.OP), F.lit(1))))).alias("other_ops"),
            F.collect_set(
                F.when(F.col(C.SCHEMA).isNotNull(), F.struct(F.col(C.HASH).alias("h"), F.col(C.SCHEMA).alias("s")))
            ).alias("schemas"),
            F.collect_list(
                F.when(F.col(C.KEY).isNotNull(), F.struct(C.KEY, C.PARTITION, C.OFFSET, C.POS_A, C.POS_B))
            ).alias("keys"),
            F.collect_set(
                F.when(
                    F.col(C.SRC_TABLE).isNotNull(),
                    F.struct(F.col(C.SRC_SCHEMA).alias("s"), F.col(C.SRC_TABLE).alias("t")),
                )
            ).alias("sources"),
            # apart, so that problems accepted by walflow.lake.accept.records never crowd out one that is not
            F.slice(F.collect_list(F.when(~accepted, F.col(C.PROBLEM))), 1, 1000).alias("problem_list"),
            F.slice(F.collect_list(F.when(accepted, F.col(C.PROBLEM))), 1, 1000).alias("accepted_list"),
            F.collect_list(C.KINDS).alias("kinds"),
        )
        .collect()[0]
    )
    schemas = {r["h"]: r["s"] for r in collected["schemas"] or []}
    kinds: dict[str, set[str]] = {}
    for text in collected["kinds"] or []:
        for column, seen in orjson.loads(text).items():
            kinds.setdefault(column, set()).update(seen)
    problems = [orjson.loads(p) for p in collected["problem_list"] or []]
    accepted_problems = [orjson.loads(p) for p in collected["accepted_list"] or []]
    counts = {op: int(sums[f"n_{op}"] or 0) for op in EVENT_OPS}
    counts = {op: n for op, n in counts.items() if n}
    for op in collected["other_ops"] or {}:  # events of another kind ("m" messages...): counted, never applied
        counts[op] = int(frame.filter(is_event & (F.col(C.OP) == op)).count())
    keys = key_cut(collected["keys"] or [])
    return RunStats(
        counts=counts,
        schemas=schemas,
        newest=_newest(frame, [h for h in schemas if h]),
        key_names=keys["key_names"],
        key_cut=keys["key_cut"],
        key_change=keys["key_change"],
        newest_key_names=keys["newest_key_names"],
        toasted=sums["toasted"] or 0,
        keyless=sums["keyless"] or 0,
        sources={(r["s"], r["t"]) for r in collected["sources"] or []},
        problems=problems,
        problem_count=int(sums["problems"] or 0),
        skipped=accepted_problems,
        kinds=kinds,
        overflowed=int(sums["overflowed"] or 0),
    )


def _newest(frame: DataFrame, hashes: list[str]) -> str | None:
    """The schema hash of the newest event (by source position) among those with a schema part.

    Each schema's text rides on an event of that schema in every slice holding one, so ``hashes`` (the schemas
    read) are those of the events: with one, it is the newest; only a run that read several asks Spark which.
    """
    if len(hashes) <= 1:
        return hashes[0] if hashes else None
    order = F.struct(*[F.col(c) for c in C.ORDER])
    row = frame.agg(
        F.max_by(C.HASH, F.when((F.col(C.HASH) != "") & F.col(C.OP).isNotNull(), order)).alias("newest")
    ).collect()[0]
    return row["newest"] or None


def events_only(frame: DataFrame, names: list[str]) -> DataFrame:
    """The decoded frame without its statistics columns and without problem rows."""
    keep = [n for n, _t in C.FRAME_META] + names
    return frame.filter(F.col(C.OP).isin(*EVENT_OPS)).select(*[sql_quote(n) for n in keep])


def position_column() -> Column:
    """``_walflow_position``: the commit and change positions as fixed-width hex, so text order is position order;
    null for an event without a position (a lone tombstone's delete)."""
    return F.when(F.col(C.POS_A).isNotNull(), F.format_string("%016X/%016X", C.POS_A, C.POS_B))


def after(cut: Any) -> Column:
    """A filter keeping the events after position ``cut`` (a row with _walflow_pos_a/b/c)."""
    a, b, c = (F.col(x) for x in (C.POS_A, C.POS_B, C.POS_C))
    ca, cb, cc = cut[C.POS_A], cut[C.POS_B], cut[C.POS_C]
    # pyspark carries no type information here, so mypy sees Any where Spark builds a Column
    return cast(Column, (a > ca) | ((a == ca) & ((b > cb) | ((b == cb) & (c > cc)))))


def partner_cut(frame: DataFrame, partial: set[int]) -> dict[int, int]:
    """Where to end a run whose read of some partitions (``partial``) stopped before their end, so that no key change
    is applied by halves: per partition, the offset of its first create or delete at or after the *frontier*, the
    earliest of the partial partitions' last read positions (empty: nothing to cut, or no way to tell).

    A primary-key change is a delete of the old key and a create of the new one at one source position, in the
    partitions of their keys; under REPLICA IDENTITY DEFAULT the create holds placeholders for the TOASTed values the
    update left unchanged, which only the old key's row can give. A run that applied the delete and left the create to
    the next run would lose them (and one that applied the create first would find no old row in its events). Within a
    partition, positions grow with offsets, so whatever a partial partition did not read lies at or after its last read
    position: a pair whose position is before the frontier was read whole.
    """
    if not partial:
        return {}
    place = (C.POS_A, C.POS_B, C.POS_C)
    events = frame.filter(F.col(C.OP).isin("c", "u", "d", "r") & F.col(C.POS_A).isNotNull())
    last = {
        r[C.PARTITION]: r["f"] for r in events.groupBy(C.PARTITION).agg(F.max(F.struct(*place)).alias("f")).collect()
    }
    if any(p not in last for p in partial):
        return {}  # a partial partition without a positioned event: its frontier is unknown
    frontier = min(tuple(last[p]) for p in partial)
    halves = events.filter(F.col(C.OP).isin("c", "d") & ~before(frontier))
    return {
        int(r[C.PARTITION]): int(r["o"]) for r in halves.groupBy(C.PARTITION).agg(F.min(C.OFFSET).alias("o")).collect()
    }


def before(place: tuple[int, int, int]) -> Column:
    """A filter keeping the events positioned before ``place`` (commit, change, total order)."""
    a, b, c = (F.col(x) for x in (C.POS_A, C.POS_B, C.POS_C))
    pa_, pb, pc = (F.lit(v) for v in place)
    return (a < pa_) | ((a == pa_) & ((b < pb) | ((b == pb) & (c < pc))))


def before_offsets(ends: dict[int, int]) -> Column:
    """A filter keeping the rows before each partition's end offset (partitions not named: all)."""
    keep = F.lit(True)
    for partition, end in ends.items():
        keep = keep & ((F.col(C.PARTITION) != partition) | (F.col(C.OFFSET) < end))
    return keep


def from_offsets(starts: dict[int, int]) -> Column:
    """A filter keeping the events at or after each partition's start offset."""
    keep = F.lit(True)
    for partition, start in starts.items():
        keep = keep & ((F.col(C.PARTITION) != partition) | (F.col(C.OFFSET) >= start))
    return keep


def latest_per_key(frame: DataFrame, keys: list[Column]) -> DataFrame:
    """The last event (by source position, then Kafka position) of each key."""
    latest = Window.partitionBy(*keys).orderBy(*[F.col(c).desc() for c in C.ORDER])
    return (
        frame.withColumn("_walflow_rank", F.row_number().over(latest)).filter("_walflow_rank = 1").drop("_walflow_rank")
    )


#: a delete that holds the values of the event before it (:func:`carry_into_deletes`): the MERGE writes them
CARRIED = "_walflow_carried"


def carry_into_deletes(frame: DataFrame, keys: list[Column], columns: list[str]) -> DataFrame:
    """A delete takes the values of the event before it of the same key in the batch (soft deletes keep the deleted
    row: under REPLICA IDENTITY DEFAULT its before image holds the key alone, and a row inserted and deleted in one
    run would otherwise be kept with its other columns empty)."""
    if not columns:
        return frame
    previous = Window.partitionBy(*keys).orderBy(*C.ORDER)
    before = F.lag(
        F.struct(
            F.col(C.OP).alias("op"),
            F.col(C.OVERFLOW).alias("o"),
            *[F.col(sql_quote(n)).alias(f"v{i}") for i, n in enumerate(columns)],
        ),
        1,
    ).over(previous)
    frame = frame.withColumn("_walflow_before", before)
    carry = (F.col(C.OP) == "d") & F.col("_walflow_before").isNotNull() & (F.col("_walflow_before.op") != "d")
    for i, name in enumerate(columns):
        frame = frame.withColumn(
            name, F.when(carry, F.col("_walflow_before").getField(f"v{i}")).otherwise(F.col(sql_quote(name)))
        )
    frame = frame.withColumn(
        C.OVERFLOW, F.when(carry, F.col("_walflow_before").getField("o")).otherwise(F.col(C.OVERFLOW))
    )
    return frame.withColumn(CARRIED, carry).drop("_walflow_before")


def toasted_columns(frame: DataFrame) -> set[str]:
    """The columns some event of ``frame`` holds a TOAST placeholder in: the only ones whose placeholders need
    resolving (each resolved column adds a window over the batch to the plan)."""
    rows = frame.filter(F.size(C.TOAST) > 0).select(F.explode(C.TOAST).alias("c")).distinct().collect()
    return {row["c"] for row in rows}


def resolve_toast(frame: DataFrame, keys: list[Column], columns: list[str]) -> DataFrame:
    """An unchanged TOASTed value takes the latest value an earlier event of the same batch carried, and with it
    that event's ``_walflow_overflow`` entry for the column.

    Only when no earlier event of the key has it does the placeholder stay, and the MERGE then keeps the
    lake's current value.
    """
    if not columns:
        return frame
    history = Window.partitionBy(*keys).orderBy(*C.ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    still_toasted = []
    carried = []
    for i, name in enumerate(columns):
        toasted = F.array_contains(C.TOAST, name)
        known = f"_walflow_known_{i}"
        # a struct, so that a real NULL value counts as a value
        frame = frame.withColumn(
            known,
            F.last(
                F.when(~toasted, F.struct(F.col(sql_quote(name)).alias("v"), F.col(C.OVERFLOW)[name].alias("o"))),
                ignorenulls=True,
            ).over(history),
        )
        resolved = toasted & F.col(known).isNotNull()
        frame = frame.withColumn(name, F.when(resolved, F.col(known).getField("v")).otherwise(F.col(sql_quote(name))))
        carried.append(
            F.when(
                resolved & F.col(known).getField("o").isNotNull(),
                F.struct(F.lit(name).alias("k"), F.col(known).getField("o").alias("v")),
            )
        )
        still_toasted.append(F.when(toasted & F.col(known).isNull(), F.lit(name)))
    frame = _resolved(frame, carried, still_toasted)
    return frame.drop(*[f"_walflow_known_{i}" for i in range(len(columns))])


def resolve_toast_by_identity(
    frame: DataFrame, identity: list[str], columns: list[str], target: DataFrame
) -> DataFrame:
    """Unchanged TOASTed values under an identity index without the key (REPLICA IDENTITY USING INDEX): a key change
    that leaves the index's columns as they were is an update of the new key alone, with placeholders, and the old
    key's row holds the values. The index is unique, so the row that held the same identity values before is the
    same row: a placeholder takes the latest value an earlier event of the batch with those identity values carried
    (:func:`resolve_toast` over the identity), else the value of the ``target`` row holding them (read for those
    values only). Deletes must be out of ``frame`` (their old rows hold the index's columns alone)."""
    if not columns:
        return frame
    frame = resolve_toast(frame, [F.col(sql_quote(c)) for c in identity], columns)
    waiting = F.size(C.TOAST) > 0
    lookups = [f"_walflow_id_{i}" for i in range(len(identity))]
    found = target.select(
        *[F.col(sql_quote(c)).alias(n) for c, n in zip(identity, lookups)],
        *[F.col(sql_quote(c)).alias(f"_walflow_was_{i}") for i, c in enumerate(columns)],
        F.col(C.OVERFLOW).alias("_walflow_was_overflow"),
    ).join(
        F.broadcast(frame.filter(waiting).select(*[sql_quote(c) for c in identity]).distinct()),
        _all([F.col(n).eqNullSafe(F.col(sql_quote(c))) for n, c in zip(lookups, identity)]),
        "left_semi",
    )
    frame = frame.join(
        found, _all([F.col(sql_quote(c)).eqNullSafe(F.col(n)) for c, n in zip(identity, lookups)]) & waiting, "left"
    )
    carried, still = [], []
    for i, name in enumerate(columns):
        toasted = F.array_contains(C.TOAST, name)
        stored = F.struct(F.col(f"_walflow_was_{i}").alias("v"), F.col("_walflow_was_overflow")[name].alias("o"))
        resolved = toasted & F.col(lookups[0]).isNotNull()
        frame = frame.withColumn(name, F.when(resolved, stored.getField("v")).otherwise(F.col(sql_quote(name))))
        carried.append(
            F.when(
                resolved & stored.getField("o").isNotNull(),
                F.struct(F.lit(name).alias("k"), stored.getField("o").alias("v")),
            )
        )
        still.append(F.when(toasted & ~resolved, F.lit(name)))
    frame = _resolved(frame, carried, still, waiting)
    return frame.drop(*lookups, *[f"_walflow_was_{i}" for i in range(len(columns))], "_walflow_was_overflow")


class KeyCut(TypedDict):
    """:func:`key_cut`'s answer (the fields of the same names in :class:`RunStats`)."""

    key_names: list[str]
    key_cut: dict[int, int]
    key_change: tuple[list[str], list[str]] | None
    newest_key_names: list[str]


def key_cut(keys: list[Any]) -> KeyCut:
    """The run's key, from the keys the decoder wrote out where their shape changed (rows of key, partition, offset
    and position), and where to cut the run when the key was redefined within it.

    ``key_names``: the field names of the oldest key (by source position). ``key_cut``: when a later key has other
    fields (``ALTER TABLE ... ADD PRIMARY KEY`` on other columns, ``message.key.columns`` changed), per partition the
    offset of its first record of another key: the run applies what lies before, merged by the old key, and the next
    run the rest, merged by the new one, so that no MERGE ever matches rows by a key their events were not keyed by.
    Empty when the run has one key.
    """
    if not keys:
        return {"key_names": [], "key_cut": {}, "key_change": None, "newest_key_names": []}
    ordered = sorted(
        keys,
        key=lambda r: (
            r[C.POS_A] if r[C.POS_A] is not None else -1,
            r[C.POS_B] if r[C.POS_B] is not None else -1,
            r[C.PARTITION],
            r[C.OFFSET],
        ),
    )
    first = key_names(ordered[0][C.KEY])
    cut: dict[int, int] = {}
    other: list[str] | None = None
    for row in ordered:
        names = key_names(row[C.KEY])
        if names != first:
            other = other or names
            partition, offset = int(row[C.PARTITION]), int(row[C.OFFSET])
            cut[partition] = min(cut.get(partition, offset), offset)
    return {
        "key_names": first,
        "key_cut": cut,
        "key_change": (first, other) if other is not None else None,  # (other is set exactly when cut is)
        "newest_key_names": key_names(ordered[-1][C.KEY]),
    }


def resolve_moved_toast(frame: DataFrame, key_names: list[str], columns: list[str], target: DataFrame) -> DataFrame:
    """The unchanged TOASTed values of rows whose primary key changed, taken from the row's old key.

    A key change arrives as a delete of the old key and a create of the new one, both at the change's source
    position (Debezium's form; the create names the old key in a header). Under REPLICA IDENTITY DEFAULT the
    create holds a placeholder for each TOASTed column the update left unchanged, and no event of the new key
    has its value: it is the old key's. So a create with placeholders is linked to the delete at its position,
    and each placeholder takes the old key's latest value from an earlier event of the batch (not a delete, whose
    old row holds the key alone), else from the old key's row in ``target`` (read for those keys only, with its
    ``_walflow_overflow`` entry). Run before :func:`resolve_toast`, so later events of the new key chain from it.
    """
    if not columns:
        return frame
    keys = [sql_quote(k) for k in key_names]
    olds = [f"_walflow_old_{i}" for i in range(len(keys))]
    deletes = frame.filter(F.col(C.OP) == "d").select(
        C.POS_A, C.POS_B, *[F.col(k).alias(o) for k, o in zip(keys, olds)]
    )
    frame = frame.join(deletes.dropDuplicates([C.POS_A, C.POS_B]), [C.POS_A, C.POS_B], "left")
    moved = (F.col(C.OP) == "c") & (F.size(C.TOAST) > 0) & F.col(olds[0]).isNotNull()
    # the old key's events and the creates moved from it share one window
    chain = [F.when(moved, F.col(o)).otherwise(F.col(k)) for k, o in zip(keys, olds)]
    history = Window.partitionBy(*chain).orderBy(*C.ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    lookups = [f"_walflow_row_{i}" for i in range(len(keys))]
    found = target.select(
        *[F.col(k).alias(n) for k, n in zip(keys, lookups)],
        *[F.col(sql_quote(c)).alias(f"_walflow_was_{i}") for i, c in enumerate(columns)],
        F.col(C.OVERFLOW).alias("_walflow_was_overflow"),
    ).join(
        F.broadcast(frame.filter(moved).select(*olds).distinct()),
        [F.col(n).eqNullSafe(F.col(o)) for n, o in zip(lookups, olds)],
        "left_semi",
    )
    frame = frame.join(found, _all([F.col(o).eqNullSafe(F.col(n)) for o, n in zip(olds, lookups)]) & moved, "left")
    carried, still = [], []
    for i, name in enumerate(columns):
        toasted = F.array_contains(C.TOAST, name)
        known = f"_walflow_known_{i}"
        value = F.struct(F.col(sql_quote(name)).alias("v"), F.col(C.OVERFLOW)[name].alias("o"))
        frame = frame.withColumn(
            known, F.last(F.when(~toasted & (F.col(C.OP) != "d") & ~moved, value), ignorenulls=True).over(history)
        )
        stored = F.struct(F.col(f"_walflow_was_{i}").alias("v"), F.col("_walflow_was_overflow")[name].alias("o"))
        source = F.when(F.col(known).isNotNull(), F.col(known)).when(F.col(lookups[0]).isNotNull(), stored)
        resolved = moved & toasted & source.isNotNull()
        frame = frame.withColumn(name, F.when(resolved, source.getField("v")).otherwise(F.col(sql_quote(name))))
        carried.append(
            F.when(
                resolved & source.getField("o").isNotNull(),
                F.struct(F.lit(name).alias("k"), source.getField("o").alias("v")),
            )
        )
        still.append(F.when(toasted & ~resolved, F.lit(name)))
    frame = _resolved(frame, carried, still, moved)
    helpers = [
        *olds,
        *lookups,
        *[f"_walflow_known_{i}" for i in range(len(columns))],
        *[f"_walflow_was_{i}" for i in range(len(columns))],
        "_walflow_was_overflow",
    ]
    return frame.drop(*helpers)


def _resolved(frame: DataFrame, carried: list[Column], still: list[Column], where: Column | None = None) -> DataFrame:
    """The end of a placeholder resolution: the values taken bring their ``_walflow_overflow`` entries (``carried``:
    per column, a (column, entry) struct or null), and ``_walflow_toast`` keeps the columns still unresolved
    (``still``: per column, its name or null), on the rows ``where`` selects (every row when None)."""
    extra = F.filter(F.array(*carried), lambda x: x.isNotNull())
    merged = F.map_concat(
        F.coalesce(F.col(C.OVERFLOW), F.create_map().cast(C.OVERFLOW_TYPE)), F.map_from_entries(extra)
    )
    frame = frame.withColumn(C.OVERFLOW, F.when(F.size(extra) > 0, merged).otherwise(F.col(C.OVERFLOW)))
    left = F.filter(F.array(*still), lambda x: x.isNotNull())
    return frame.withColumn(C.TOAST, left if where is None else F.when(where, left).otherwise(F.col(C.TOAST)))


def _all(conditions: list[Column]) -> Column:
    out = conditions[0]
    for more in conditions[1:]:
        out = out & more
    return out
