"""The lake: walflow's change events applied to Apache Iceberg tables by a Spark job, exactly once.

The job's modules, by where they run and what they do:

==================  ========================================================================================
module              responsibility
==================  ========================================================================================
``settings``        :class:`LakeSettings`, built once from the connector config and handed to the job
``columns``         every lake metadata column and table/snapshot property name
``naming``          lake table names, SQL quoting, which topics carry table changes
``types``           Debezium schemas to lake types, payload values to lake values, evolution rules
``values``          what the lake stores for values Spark cannot hold (``_walflow_overflow``)
``loose``           records without a schema part: types from JSON values
``positions``       source positions (event order), offsets and offset slices
``reader``          Kafka for the job: fingerprints, offset bounds, the slices the executors read
``decoder``         the one decoder: records to Arrow batches of converted events (executors)
``frames``          Spark frames over the decoded events: statistics, ordering, TOAST carry-forward
``sql``             the statements (MERGE, INSERT, truncate, DDL) as text
``ddl``             creating and evolving lake tables
``history``         offsets in the snapshot history, commits that carry them
``keyless``         tables without a key, applied as multisets
``claims``          which connector and topic own a lake table; two topics mapped to one table refused
``evolution``       the stream's schema facts applied: renames, fills of new columns, history columns
``fence``           a run's branches: its commits reach a table only if no other run wrote it meanwhile
``apply``           :class:`~walflow.lake.apply.LakeJob`: one run over a connector's topics
``hooks``           observing the job's steps (the fault tests kill it there)
``job``             the spark-submit entry point
``tables``          the catalog (Hadoop folder or JDBC), reading lake tables with pyiceberg (no Spark)
``maintain``        compaction, delete files, snapshot expiry, orphan files (keeping exactly once)
==================  ========================================================================================

The executors import only ``columns``, ``naming``, ``types``, ``values``, ``loose``, ``positions``, ``reader``,
``decoder`` and ``evolution``, with :mod:`walflow.names`, :mod:`walflow.kafka` and three modules of
:mod:`walflow.records` (plain Python, pyarrow, orjson, confluent-kafka), so this package's root imports nothing else
eagerly: :class:`LakeSettings` (pydantic) and the readers of :mod:`walflow.lake.tables` (pyiceberg) load on first use.
"""

from __future__ import annotations

from typing import Any

from walflow.errors import LakeError
from walflow.kafka import partition_end
from walflow.lake.columns import (
    BACKLOG_PROPERTY,
    COMMIT_PROPERTY,
    DELETED,
    FINGERPRINTS_PROPERTY,
    OFFSETS_PROPERTY,
    OVERFLOW,
    POSITION,
    TABLE_META,
)
from walflow.lake.naming import sql_quote, sql_string, table_name
from walflow.lake.positions import format_offsets, parse_offsets
from walflow.lake.reader import record_fingerprint

__all__ = [
    "BACKLOG_PROPERTY",
    "COMMIT_PROPERTY",
    "DELETED",
    "FINGERPRINTS_PROPERTY",
    "OFFSETS_PROPERTY",
    "OVERFLOW",
    "POSITION",
    "TABLE_META",
    "JdbcCatalog",
    "LakeError",
    "LakeSettings",
    "PropertiesCatalog",
    "format_offsets",
    "lake_table_names",
    "parse_offsets",
    "partition_end",
    "read_hadoop_table",
    "read_lake_table",
    "record_fingerprint",
    "sql_quote",
    "sql_string",
    "table_name",
]


def __getattr__(name: str) -> Any:
    # PEP 562: the two names whose modules need libraries the executors do not have
    if name == "LakeSettings":
        from walflow.lake.settings import LakeSettings

        return LakeSettings
    if name in ("read_hadoop_table", "read_lake_table", "lake_table_names", "JdbcCatalog", "PropertiesCatalog"):
        from walflow.lake import tables

        return getattr(tables, name)
    raise AttributeError(f"module 'walflow.lake' has no attribute {name!r}")
