"""Updates and deletes of a source table without a key (REPLICA IDENTITY FULL), applied as a multiset.

Such a table is a multiset of rows: an insert adds one copy of its row, a delete removes one copy of its old
row, an update does both. The net change per distinct row value does not depend on the order of the events
(truncates aside, applied before), so the job sums them, reads how many copies of each affected value the lake
holds, and in one MERGE deletes those copies and inserts the number that must remain plus the new rows.
"""

from __future__ import annotations

import logging
import uuid
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from walflow.errors import LakeSchemaError
from walflow.lake import columns as C
from walflow.lake import sql
from walflow.lake.history import commit
from walflow.lake.naming import sql_quote as q

log = logging.getLogger("walflow.apply")
#: the row value's ``_walflow_overflow`` as text: part of a row's identity (maps cannot be grouped or joined)
_OVK = "_walflow_ovk"


def merge_keyless(
    spark: SparkSession,
    ident: str,
    frame: DataFrame,
    names: list[str],
    types: dict[str, str],
    properties: dict[str, str],
    soft: bool,
    history: tuple[tuple[str, str], ...] = (),
) -> int:
    """Apply the events of ``frame`` to the keyless table ``ident`` in one MERGE committed with ``properties``.

    Returns how many before images the lake did not hold (a redelivered delete, or a lake that diverged).
    """
    maps = [n for n in names if types[n].startswith("map")]
    if maps:
        raise LakeSchemaError(
            f"lake table {ident}: the source table has no key, and rows of it are matched by their whole value, which "
            f"map columns ({', '.join(maps)}) cannot take part in: give the table a primary key or set "
            "message.key.columns"
        )
    frame = frame.withColumn(_OVK, F.to_json(C.OVERFLOW))
    cols = [F.col(q(n)) for n in names] + [F.col(_OVK)]
    meta = F.struct(C.OP, C.LSN, C.SOURCE_TS, C.POSITION, C.OVERFLOW)
    changes = frame.groupBy(*cols).agg(
        F.sum(C.SIGN).alias("_walflow_delta"),
        # copies removed (deletes and updates' old rows): with soft deletes each stays, flagged, even when the run
        # also added the value (a row inserted and deleted in one run nets to nothing, yet was deleted)
        F.sum(F.when(F.col(C.SIGN) < 0, 1).otherwise(0)).alias("_walflow_removed"),
        F.max_by(meta, C.POSITION).alias("_walflow_meta"),
    )
    changes = changes.filter("_walflow_delta <> 0" + (" OR _walflow_removed > 0" if soft else "")).persist()
    target = spark.table(ident)
    if soft:
        target = target.filter(f"NOT coalesce({C.DELETED}, false)")
    target = target.withColumn(_OVK, F.to_json(C.OVERFLOW))

    def same(left: str, right: str) -> Column:
        return reduce(
            lambda a, b: a & b, [F.col(f"{left}.{q(n)}").eqNullSafe(F.col(f"{right}.{q(n)}")) for n in [*names, _OVK]]
        )

    gone = changes.filter("_walflow_delta < 0")
    held = (
        target.alias("t")
        .join(gone.alias("g"), same("t", "g"), "left_semi")
        .groupBy(*cols)
        .agg(F.count(F.lit(1)).alias("_walflow_n"), F.max_by(meta, C.POSITION).alias("_walflow_kept"))
    )
    gone = (
        gone.alias("g")
        .join(held.alias("h"), same("g", "h"), "left")
        .select(
            *[F.col(f"g.{q(n)}").alias(n) for n in names],
            "g._walflow_delta",
            "g._walflow_removed",
            "g._walflow_meta",
            F.coalesce("h._walflow_n", F.lit(0)).alias("_walflow_n"),
            # the copies that stay keep their metadata (rows written before positions were stored have none)
            F.coalesce("h._walflow_kept", "g._walflow_meta").alias("_walflow_kept"),
        )
    )

    def rows(source: DataFrame, kind: str, copies: Column, meta_col: str, deleted: bool) -> DataFrame:
        out = source.withColumn("_walflow_copies", copies).filter("_walflow_copies > 0")
        out = out.withColumn("_walflow_copy", F.explode(F.sequence(F.lit(1), F.col("_walflow_copies"))))
        return out.select(
            F.lit(kind).alias("_walflow_kind"),
            *[F.col(q(n)) for n in names],
            *[F.col(f"{meta_col}.{m}").alias(m) for m in (C.OP, C.LSN, C.SOURCE_TS, C.POSITION, C.OVERFLOW)],
            F.lit(deleted).alias("_walflow_is_deleted"),
        )

    remaining = F.col("_walflow_n") + F.col("_walflow_delta")
    parts = [
        rows(gone, "del", F.lit(1), "_walflow_meta", False),  # matches every copy of the value
        rows(gone, "ins", F.greatest(remaining, F.lit(0)), "_walflow_kept", False),  # the copies that stay
        rows(changes.filter("_walflow_delta > 0"), "ins", F.col("_walflow_delta"), "_walflow_meta", False),
    ]
    if soft:
        # one flagged copy per copy removed, of those there were (the lake's and the run's own)
        removed = F.col("_walflow_removed")
        parts.append(
            rows(
                gone,
                "ins",
                F.least(removed, F.col("_walflow_n") + removed + F.col("_walflow_delta")),
                "_walflow_meta",
                True,
            )
        )
        parts.append(
            rows(changes.filter("_walflow_delta >= 0 AND _walflow_removed > 0"), "ins", removed, "_walflow_meta", True)
        )
    source = reduce(lambda a, b: a.unionByName(b), parts).persist()
    unmatched = gone.select(F.sum(F.greatest(-remaining, F.lit(0)))).collect()[0][0] or 0
    if unmatched:
        log.warning(
            "%s: %d before image(s) of updates/deletes are not in the lake table (a redelivered change, or a table "
            "without key whose REPLICA IDENTITY is not FULL); those changes removed nothing",
            ident,
            unmatched,
        )
    view = f"walflow_src_{uuid.uuid4().hex[:8]}"
    source.createOrReplaceTempView(view)
    try:
        commit(spark, sql.keyless_merge(ident, view, names, soft, history), properties, "merge")
    finally:
        spark.catalog.dropTempView(view)
        source.unpersist()
        changes.unpersist()
    return int(unmatched)
