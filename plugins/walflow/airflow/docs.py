"""The ``doc_md`` of each connector DAG: what it does, what it reads and writes, and how to recover.

Airflow shows it on the DAG's page, so it is written for whoever is looking at a failed run: the names of the slot,
publication, topics and lake tables of this connector, and the one thing to do for each failure that needs a
person (errors that retries can fix are retried; the others fail at once with the fix in the task log).
"""

from __future__ import annotations

from walflow.config.connector import ConnectorConfig


def _captured(config: ConnectorConfig) -> str:
    if config.table_include_list:
        return "tables matching `table.include.list`: " + ", ".join(f"`{t}`" for t in config.table_include_list)
    if config.schema_include_list:
        return "every table of schemas matching " + ", ".join(f"`{s}`" for s in config.schema_include_list)
    if config.table_exclude_list:
        return "every table except those matching " + ", ".join(f"`{t}`" for t in config.table_exclude_list)
    return "every table of the source database"


def _topics(config: ConnectorConfig) -> str:
    d = config.topic_delimiter
    topics = f"`{config.topic_prefix}{d}<schema>{d}<table>`"
    if config.provide_transaction_metadata:
        topics += f", `{config.transaction_topic}`"
    if config.heartbeat_interval_ms:
        topics += f", `{config.heartbeat_topic}`"
    return topics


def _lake(config: ConnectorConfig) -> str:
    namespace = config.walflow_lake_namespace or config.topic_prefix
    return f"`{config.walflow_lake_catalog}.{namespace}.<schema>__<table>`"


def _where(config: ConnectorConfig) -> str:
    reader = config.walflow_postgres_reader_conn_id
    conditions = f"Signals' conditions are evaluated as Connection `{reader}`. " if reader else ""
    return (
        f"Source: Airflow Connection `{config.walflow_postgres_conn_id}`, replication slot `{config.slot_name}`, "
        f"publication `{config.publication_name}` ({config.publication_autocreate_mode}), state table "
        f"`{config.walflow_state_table}`. {conditions}Kafka: Connection `{config.walflow_kafka_conn_id}`."
    )


def setup_doc(config: ConnectorConfig) -> str:
    signal = f", the signal table `{config.signal_data_collection}`" if config.signal_data_collection else ""
    return f"""\
### Set up connector `{config.name}`

Checks the source server (version, `wal_level=logical`, privileges, encoding) before changing anything, then creates
or checks the publication, the replication slot and the state table{signal}, and takes the initial snapshot as
`snapshot.mode={config.snapshot_mode}` says. Idempotent: run it again after changing the connector's filters, or to
accept a table whose key changed.

- **Reads**: {_captured(config)}.
- **Writes**: snapshot records (`op: r`) to {_topics(config)}; the slot, publication and state table.
- {_where(config)}

**When it fails**, the task log's error names the cause and the fix; errors that need a fix are not retried. A
snapshot that died half-way is taken again from the start by the next run; until one completes, `{config.name}__stream`
refuses to start.
"""


def stream_doc(config: ConnectorConfig) -> str:
    if config.walflow_stream_trigger_wal_bytes:
        when = (
            "Runs continuously: each run waits (deferred) until the slot has "
            f"{config.walflow_stream_trigger_wal_bytes} bytes of WAL pending, or "
            f"{config.walflow_stream_trigger_max_wait_seconds:g} s passed."
        )
    else:
        when = f"Scheduled `{config.walflow_schedule}`, one run at a time."
    lake = ""
    if config.walflow_lake_enabled:
        lake = f"""
- **Then** `apply_to_lake` (Spark, Connection `{config.walflow_spark_conn_id}`) applies the new records to the
  Iceberg tables {_lake(config)}, exactly once: the Kafka offsets are committed with the data."""
    recover_lake = ""
    if config.walflow_lake_enabled:
        recover_lake = f"""
- `apply_to_lake` failing with *topic ... ends below the offsets already applied*: the topics were lost or
  recreated (the embedded broker keeps them in memory, so a restart loses them). Run
  `walflow reset {config.name} --lake`, then `{config.name}__setup`: a fresh snapshot refills the topics and the lake.
  The task is not retried: nothing changes until then."""
    return f"""\
### Stream connector `{config.name}`

One bounded batch of changes from the slot to Kafka per run: read, convert, produce, wait for every
acknowledgement, and only then advance the slot (at-least-once; a failed run repeats its batch).
{when}

- **Reads**: the replication slot `{config.slot_name}`: changes of {_captured(config)}.
- **Writes**: {_topics(config)}.{lake}
- {_where(config)}

**When it fails** (the task log's last error names the cause and the fix):
- a broker or server that was away for a moment: retried automatically, nothing is lost;
- *the key of table ... changed*, or a table left the publication: fix or accept it (`{config.name}__setup`);
- *a record ... is larger than message.max.bytes*: raise the Kafka limits (docs/operations.md, "Oversized records");
- *replication slot ... does not exist*: run `{config.name}__setup` with `snapshot.mode: when_needed`.{recover_lake}
"""


def snapshot_doc(config: ConnectorConfig) -> str:
    # the signal table, or the Kafka signal topic when there is none (a read-only connector)
    where = (
        f"`{config.signal_data_collection}`"
        if config.signal_data_collection
        else f"the Kafka topic `{config.signal_topic}`"
    )
    return f"""\
### Ad-hoc incremental snapshot for connector `{config.name}`

Trigger it with the tables to re-read (at least one; schema.table or a regular expression), optionally narrowed by
one SQL condition. The run writes an `execute-snapshot` signal to {where}; the next run of
`{config.name}__stream` reads it and snapshots the tables in chunks between watermarks while it streams; this run's
sensor waits until that is done. The snapshot's records (`op: r`, `source.snapshot: incremental`) go to the
tables' topics {_topics(config)}.

It never runs on a schedule (safe to leave unpaused). Backfills get one run per
`{config.walflow_snapshot_schedule}` interval: use `{{{{ data_interval_start }}}}` and `{{{{ data_interval_end }}}}` in
the condition, for example
`updated_at >= '{{{{ data_interval_start }}}}' AND updated_at < '{{{{ data_interval_end }}}}'`.

**When it fails**: an empty table list, or a condition that is not one SQL expression, fails before anything is
written; a condition the server rejects fails the signal, and the sensor with it (streaming goes on). A run whose
sensor waits long means `{config.name}__stream` is paused or failing.
"""


def maintain_doc(config: ConnectorConfig) -> str:
    return f"""\
### Maintain the lake of connector `{config.name}`

Scheduled `{config.walflow_lake_maintain_schedule}`. For every table of {_lake(config)}: rewrites the data files that
have delete files or are small (the deletes of every merge-on-read apply are applied into new files), drops the
delete files that then apply to nothing, expires snapshots older than
{config.walflow_lake_maintain_snapshot_retention_hours:g} h and removes unreferenced files older than
{config.walflow_lake_maintain_orphan_retention_hours:g} h. The task log shows each table's data and delete files and
bytes before and after.

Exactly once is kept: the rewrites commit the Kafka offsets of the last apply with their snapshot, and the snapshots
the next apply reads are never expired. This task and `{config.name}__stream`'s `apply_to_lake` hold the connector's
lake lock while they run (an advisory lock on the source database), so they never overlap: an apply that finds the
lock held for a minute is skipped and the next run applies its records.

**When it fails**: a table changed by another writer is named with the way to undo it (the other tables are still
maintained); a lock held longer than `walflow.lake.maintain.lock.wait.seconds` means a stuck `{config.name}__stream`.
"""


def monitor_doc(config: ConnectorConfig) -> str:
    since = config.walflow_monitor_max_seconds_since_batch
    behind = config.walflow_monitor_max_lake_records_behind
    return f"""\
### Monitor connector `{config.name}`

Scheduled `{config.walflow_monitor_schedule}`, apart from `{config.name}__stream`, so it still runs when the stream
is paused, stuck or failing. It reads slot `{config.slot_name}`'s row of `pg_replication_slots` and walflow's state,
and fails (with every problem in its message, which the failure callback and Airflow's notifiers receive) when:

- the slot retains more WAL than `walflow.slot.max.retained.wal.bytes` ({config.walflow_slot_max_retained_wal_bytes})
  or `walflow.slot.fail.retained.wal.bytes`, or lags more than `walflow.slot.max.lag.bytes`;
- its `wal_status` is `lost` or `unreserved`, or the slot is gone;
- no stream batch succeeded for {f"{since:g} s" if since else "(no limit)"} (`walflow.monitor.max.seconds.since.batch`);
- a lake table is more than {behind if behind is not None else "(no limit)"} records behind its topics
  (`walflow.monitor.max.lake.records.behind`; only then does it read the lake and the broker).

**When it fails**: its message names what passed which limit. Stream now (trigger `{config.name}__stream`, or
unpause it), then look at the walflow page of Airflow's UI or `walflow status {config.name}`. A failed run is not
retried: the next scheduled run judges again.
"""
