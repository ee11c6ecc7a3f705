"""Every name the lake job gives a column or a table property, defined once.

Lake tables hold the source columns plus :data:`TABLE_META` (and :data:`DELETED` with soft deletes); changelog
tables hold :data:`CHANGELOG_META`. The job's in-flight frames carry more columns (:data:`FRAME_META`,
:data:`STATS`), all starting with :data:`PREFIX`, which source columns therefore cannot use.
"""

from __future__ import annotations

PREFIX = "_walflow_"

# -- columns of the lake tables -----------------------------------------------------------------------
OP = "_walflow_op"
LSN = "_walflow_lsn"
SOURCE_TS = "_walflow_source_ts_ms"
APPLIED_AT = "_walflow_applied_at"
#: the event's source position, ``<commit>/<change>`` in fixed-width hex (text order is position order)
POSITION = "_walflow_position"
#: soft deletes only: the row was deleted (or truncated) in the source
DELETED = "_walflow_deleted"
#: column name -> the exact source value, for each value the lake type cannot hold (see docs/lake.md, "value
#: representations"); null when every value of the row fitted
OVERFLOW = "_walflow_overflow"
# -- changelog tables also have -------------------------------------------------------------------------
PARTITION = "_walflow_partition"
OFFSET = "_walflow_offset"
#: the columns whose value PostgreSQL did not send (unchanged TOAST)
TOAST = "_walflow_toast"

OVERFLOW_TYPE = "map<string,string>"
TABLE_META: tuple[tuple[str, str], ...] = (
    (OP, "string"),
    (LSN, "bigint"),
    (SOURCE_TS, "bigint"),
    (APPLIED_AT, "timestamp"),
    (POSITION, "string"),
    (OVERFLOW, OVERFLOW_TYPE),
)
CHANGELOG_META: tuple[tuple[str, str], ...] = (
    (OP, "string"),
    (LSN, "bigint"),
    (SOURCE_TS, "bigint"),
    (PARTITION, "int"),
    (OFFSET, "bigint"),
    (TOAST, "array<string>"),
    (APPLIED_AT, "timestamp"),
    (POSITION, "string"),
    (OVERFLOW, OVERFLOW_TYPE),
)
#: what the apply job writes from an event into a lake table (``_walflow_applied_at`` is the commit's time)
EVENT_META = (OP, LSN, SOURCE_TS, POSITION, OVERFLOW)

# -- columns of the job's frames only ----------------------------------------------------------------
POS_A = "_walflow_pos_a"  # commit position
POS_B = "_walflow_pos_b"  # change LSN
POS_C = "_walflow_pos_c"  # order inside one WAL record (transaction.total_order)
#: +1 for the row an event brings, -1 for the old row an update of a keyless table takes away
SIGN = "_walflow_sign"
#: the order of events: source position, then the Kafka position (redeliveries of one event sit in one partition)
ORDER = (POS_A, POS_B, POS_C, PARTITION, OFFSET)

#: the decoder's columns ahead of the table's own columns, as Spark DDL types
FRAME_META: tuple[tuple[str, str], ...] = (
    (OP, "string"),
    (PARTITION, "int"),
    (OFFSET, "bigint"),
    (LSN, "bigint"),
    (SOURCE_TS, "bigint"),
    (TOAST, "array<string>"),
    (POS_A, "bigint"),
    (POS_B, "bigint"),
    (POS_C, "bigint"),
    (SIGN, "int"),
    (OVERFLOW, OVERFLOW_TYPE),
)
HASH = "_walflow_hash"  # the sha1 of the record's schema part ("" without one)
SCHEMA = "_walflow_schema"  # the schema's text, on the first record of each schema in a slice
KEYED = "_walflow_keyed"  # the record has a non-null key
KEY = "_walflow_key"  # the raw key, on the first keyed record of a slice
SRC_SCHEMA = "_walflow_src_schema"  # the source names, when they change from the previous record
SRC_TABLE = "_walflow_src_table"
PROBLEM = (
    "_walflow_problem"  # JSON: a record or value the decoder could not take (topic, partition, offset, column, value)
)
KINDS = "_walflow_kinds"  # JSON: the JSON kinds of schemaless columns being typed, once per slice
#: the decoder's columns after the table's columns: what the driver learns about the run
STATS: tuple[tuple[str, str], ...] = (
    (HASH, "string"),
    (SCHEMA, "string"),
    (KEYED, "boolean"),
    (KEY, "binary"),
    (SRC_SCHEMA, "string"),
    (SRC_TABLE, "string"),
    (PROBLEM, "string"),
    (KINDS, "string"),
)

# -- table and snapshot properties ---------------------------------------------------------------------
#: snapshot summary: the Kafka offsets this commit applied, ``{topic: {partition: next offset}}``
OFFSETS_PROPERTY = "walflow.offsets"
#: snapshot summary: a short hash of the last record applied from each partition (recreated-topic detection)
FINGERPRINTS_PROPERTY = "walflow.fingerprints"
#: snapshot summary: every snapshot walflow commits carries it (its value names the step); a snapshot without it
#: was written by someone else
COMMIT_PROPERTY = "walflow.commit"
#: snapshot summary: records accepted with ``walflow.lake.accept.records`` that could not be read at all
SKIPPED_PROPERTY = "walflow.skipped"
#: table property: the position of the last truncate applied (events older than it are obsolete)
TRUNCATED_AT = "walflow.truncated-at"
#: table property: the position of the last sweep applied (a re-read's end: rows older than it were removed;
#: :mod:`walflow.capture.rereads`)
SWEPT_AT = "walflow.swept-at"
#: table property prefix: a column added with a default whose existing rows still need it (crash-safe DDL)
PENDING_DEFAULT = "walflow.pending-default."
#: table properties: the connector and the topic that own a lake table, and whether it is the table itself or its
#: changelog (:mod:`walflow.lake.claims`)
CONNECTOR_PROPERTY = "walflow.connector"
TOPIC_PROPERTY = "walflow.topic"
KIND_PROPERTY = "walflow.table-kind"
#: snapshot summary: the records of the topic not yet applied when this commit was made, ``{partition: count}``
BACKLOG_PROPERTY = "walflow.backlog"
