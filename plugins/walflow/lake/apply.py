"""Applying one connector's topics to its lake tables, exactly once (driver side).

Per topic (one source table): read the partitions from the offsets stored in the lake table's snapshot summary
to their end, one Spark task per offset slice decoding on the executors (:mod:`walflow.lake.decoder`); order the
events by source position (the order PostgreSQL committed them, whatever partition they landed in), cut at the
last truncate, keep the last event per key, and run one MERGE INTO the Iceberg table that commits the consumed
offsets in the same snapshot's summary. A rerun after a crash anywhere therefore applies exactly what was not
committed. The commits go to the run's own branch of the table and reach it only if no other run wrote it since
this one read its offsets (:mod:`walflow.lake.fence`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from walflow.errors import LakeError, LakeFenceError, LakeSchemaError, UnappliableRecordError, WalflowError
from walflow.kafka import list_topics
from walflow.lake import claims, frames, reader, sql
from walflow.lake import columns as C
from walflow.lake.ddl import clear_pending, ensure_table, fill_pending
from walflow.lake.decoder import DecodePlan, split_records
from walflow.lake.evolution import (
    Mapping,
    TableFacts,
    attnum_properties,
    plan_renames,
    read_property,
    refuse_unknown_fill,
    with_fills,
)
from walflow.lake.fence import Fence
from walflow.lake.frames import RunStats
from walflow.lake.history import (
    commit,
    holds_no_rows,
    offsets_snapshot,
    stored_position,
    table_exists,
    table_properties,
)
from walflow.lake.hooks import ApplyHooks
from walflow.lake.keyless import merge_keyless
from walflow.lake.loose import inferred_type, json_kind, loose_field, loose_schema
from walflow.lake.naming import names_from_topic, sql_quote, table_name
from walflow.lake.positions import (
    check_last_applied,
    check_offsets,
    format_offsets,
    format_position,
    offset_slices,
    parse_offsets,
    share,
    source_position,
)
from walflow.lake.settings import LakeSettings
from walflow.lake.types import RowShape, field_defaults
from walflow.records.facts import INCOMPLETE_PROPERTY, LEFT_OUT_KIND, STALE_KIND, START_KIND, SWEEP_KIND, field_type

log = logging.getLogger("walflow.apply")
#: lake types whose values may have been fitted (docs/lake.md): key columns of these types also match on their
#: ``_walflow_overflow`` text
_FITTED_KEY_TYPES = ("date", "timestamp", "timestamp_ntz")
CHANGELOG_SUFFIX = "__changelog"


@dataclass
class TopicPlan:
    """What one run reads of one topic: its lake table, the offsets its table and changelog applied, and per
    partition the offsets waiting (``bounds``: start, end) and those this run reads (``slices``)."""

    topic: str
    name: str
    stored: dict[int, int]
    log_stored: dict[int, int] | None
    bounds: dict[int, tuple[int, int]]
    slices: list[tuple[int, int, int]] = field(default_factory=list)
    #: the snapshots of the table's and the changelog's ``main`` the offsets were read from (:mod:`walflow.lake.fence`)
    head: int | None = None
    log_head: int | None = None

    def waiting(self) -> int:
        return sum(end - start for start, end in self.bounds.values())


@dataclass(frozen=True)
class Evolution:
    """What the schema facts say about a run's target (:mod:`walflow.lake.evolution`): each column's source
    attribute, the decoder's mapping, the target schema with the defaults replaced by what older rows hold, and
    the columns whose older rows' values cannot be known."""

    facts: TableFacts
    attnums: dict[str, int]
    mapping: Mapping
    defaults_schema: dict[str, Any]
    fills: dict[str, tuple[bool, Any]]
    unknown: list[str]
    identity: str = ""
    identity_fields: tuple[str, ...] = ()
    #: the source relation (OID) the target's attribute numbers belong to; None for facts of an older walflow
    relation: int | None = None

    def identity_only(self, key_names: list[str]) -> list[str]:
        """The replica identity's columns when it is an index that does not hold the whole key (REPLICA IDENTITY USING
        INDEX on another unique index): old rows then carry those columns, not the key. Else []."""
        if self.identity != "i" or not self.identity_fields or set(key_names) <= set(self.identity_fields):
            return []
        return list(self.identity_fields)


class _Widen(Exception):
    """Raised before anything is written when a run's records end inside a key change whatever the cut: the slices
    to read instead, longer in the partitions whose read stopped before their end."""

    def __init__(self, slices: list[tuple[int, int, int]]) -> None:
        super().__init__("a key change lies across the end of the records read")
        self.slices = slices


class _KeyCut(Exception):
    """Raised before anything is written when a run's records hold two keys: the slices ending where the newer
    starts."""

    def __init__(self, slices: list[tuple[int, int, int]], change: tuple[list[str], list[str]]) -> None:
        super().__init__(f"key changed from {change[0]} to {change[1]}")
        self.slices = slices
        self.change = change


@dataclass(frozen=True)
class Guess:
    """The target the decoder converts to: a value schema, the hash of the schema it came from ("" when it was
    built for schemaless records), and the schemaless columns whose types are being inferred."""

    schema: dict[str, Any]
    hash: str
    watch: tuple[str, ...] = ()


def check_column_names(topic: str, ident: str, names: list[str]) -> None:
    """Refuse source columns the lake cannot hold apart from its own or from each other: a name with walflow's
    metadata prefix, or two names equal but for case (Spark resolves names without case)."""
    reserved = [n for n in names if n.lower().startswith(C.PREFIX)]
    if reserved:
        raise LakeSchemaError(
            f"topic {topic}: the source column(s) {reserved} of lake table {ident} start with {C.PREFIX!r}, which "
            "names the lake's own metadata columns. Nothing of this topic was written. Rename the column(s) in the "
            "source, or leave them out with column.exclude.list (or rename them with a transform)."
        )
    by_case: dict[str, list[str]] = {}
    for n in names:
        by_case.setdefault(n.lower(), []).append(n)
    clashes = [group for group in by_case.values() if len(group) > 1]
    if clashes:
        raise LakeSchemaError(
            f"topic {topic}: the source columns {clashes} of lake table {ident} differ only in case, and Spark (like "
            "most lake engines) resolves column names without case, so the lake cannot keep them apart. Nothing of "
            "this topic was written. Rename one of each pair in the source, or leave it out with column.exclude.list."
        )


def _toastable(names: list[str], types: dict[str, str]) -> list[str]:
    """The columns whose values PostgreSQL can store out of line (TOAST), so that an update may carry a placeholder."""
    return [n for n in names if types[n] in ("string", "binary") or types[n].startswith(("array", "map", "struct"))]


def _with_placeholders(frame: DataFrame, names: list[str], types: dict[str, str]) -> list[str]:
    """The TOASTable columns some event of ``frame`` holds a placeholder in: the only ones worth resolving."""
    toasted = frames.toasted_columns(frame)
    return [n for n in _toastable(names, types) if n in toasted]


class LakeJob:
    """One run of the lake job over a connector's table topics."""

    def __init__(
        self, spark: SparkSession, settings: LakeSettings, kafka: dict[str, Any], hooks: ApplyHooks | None = None
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.kafka = kafka
        self.hooks = hooks or ApplyHooks()
        self.placeholders = settings.placeholders()
        #: this run's branches: every data commit goes to one, then is published if no other run wrote meanwhile
        self.fence = Fence(spark)
        self._claims: dict[str, str] | None = None
        #: source (schema, table) of each topic, from its records (lake_name)
        self._sources: dict[str, tuple[str, str]] = {}
        #: the connector's schema facts by source table, read once per run
        self._facts: dict[tuple[str, str], TableFacts] | None = None
        #: where a table that applied nothing yet starts, per topic and partition: the newest initial snapshot's start
        self._starts: dict[str, dict[int, int]] = {}
        #: the newest start fact's consistent point (None: no start fact)
        self._start_lsn: int | None = None
        #: frames cached for the topic being applied beside its decoded events (passes of a placeholder resolution)
        self._passes: list[DataFrame] = []
        #: by source table: the sweeps of the re-reads walflow made (rows older than their positions are gone), and the
        #: stale facts of tables without key whose rows changed without events (:mod:`walflow.capture.rereads`)
        self._sweeps: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._stale: dict[tuple[str, str], list[dict[str, Any]]] = {}
        #: events of each source table the connector left out (event.processing.failure.handling.mode warn/skip)
        self._left_out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # The decoded events are cached between the statistics pass and the MERGE; compressing the cache cost
        # about a fifth of the read phase (a million changes: 1.5 s of 8) for memory a run frees at its end.
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")

    def table_topics(self, only: list[str] | None = None) -> dict[str, list[int]]:
        """The connector's table topics (``topic.prefix`` + ``topic.delimiter``, not the transaction topic)."""
        topics = {t: p for t, p in list_topics(self.kafka).items() if self.settings.is_table_topic(t)}
        return {t: p for t, p in topics.items() if t in set(only)} if only else topics

    def run(self, only: list[str] | None = None) -> list[dict[str, Any]]:
        """Apply every table topic (or those of ``only``); one topic's failure does not hold the others back.

        Every topic is planned first (its lake table, the offsets to read, the checks that need no write), so that
        two topics that would write one lake table are refused before either writes, and ``walflow.lake.max.records``
        is shared among the topics that have records waiting. A topic that fails is reported after the others were
        applied: the run then raises (one failure as it is, several as one :class:`LakeError` naming each).
        """
        topics = self.table_topics(only)
        self._ensure_namespace()
        self._load_facts()
        plans: dict[str, TopicPlan] = {}
        failures: dict[str, WalflowError] = {}
        for topic in sorted(topics):
            try:
                plans[topic] = self.plan_topic(topic, topics[topic])
            except WalflowError as exc:
                failures[topic] = exc
        targets = [(t, claims.TABLE, p.name) for t, p in plans.items()]
        if self.settings.changelog:
            targets += [(t, claims.CHANGELOG, p.name + CHANGELOG_SUFFIX) for t, p in plans.items()]
        for name, writers in claims.shared_tables(targets).items():
            error = claims.shared_table_error(name, writers)
            for topic, _kind in writers:
                plans.pop(topic, None)
                failures.setdefault(topic, error)
        self.share_budget(plans)
        results = []
        for topic in sorted(plans):
            try:
                result = self.apply_plan(plans[topic])
            except WalflowError as exc:
                failures[topic] = exc
                continue
            log.info(
                "%s → %s: %s record(s)%s%s",
                topic,
                result["table"],
                result["records"],
                "" if result["committed"] else " (nothing to commit)",
                f", {result['backlog']} left for the next runs" if result.get("backlog") else "",
            )
            results.append(result)
        if failures:
            raise self._failed(failures, results)
        return results

    def apply_topic(self, topic: str, partitions: list[int]) -> dict[str, Any]:
        """Plan and apply one topic alone (all of ``walflow.lake.max.records`` is its own): what :meth:`run` does for
        each topic, for callers that drive topics one by one (the apply benchmark)."""
        self._ensure_namespace()
        self._load_facts()
        plan = self.plan_topic(topic, partitions)
        self.share_budget({topic: plan})
        return self.apply_plan(plan)

    def _ensure_namespace(self) -> None:
        """Create the lake's namespace before anything reads it: a connector whose first run finds only empty topics
        (tables empty at setup) asks the catalog which tables claim them, and a Hadoop catalog answers a missing
        namespace with a Java exception rather than an empty list."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.settings.namespace_ident()}")

    def _load_facts(self) -> None:
        """Read the connector's schema facts, once per run, by source table."""
        self._facts = {}
        self._sweeps, self._stale, self._left_out = {}, {}, {}
        latest: tuple[int, int] | None = None
        for fact in reader.read_facts(self.kafka, self.settings.schema_topic):
            if fact.get("kind") == START_KIND:
                # the newest initial snapshot's start (walflow.capture.schema_facts.start_record)
                order = (int(fact.get("lsn") or 0), int(fact.get("at") or 0))
                if fact.get("connector") == self.settings.connector and (latest is None or order > latest):
                    latest = order
                    self._start_lsn = order[0] or None
                    self._starts = {
                        t: {int(p): int(o) for p, o in parts.items()}
                        for t, parts in (fact.get("offsets") or {}).items()
                    }
                continue
            if fact.get("kind") in (SWEEP_KIND, STALE_KIND, LEFT_OUT_KIND):
                kept = {SWEEP_KIND: self._sweeps, STALE_KIND: self._stale, LEFT_OUT_KIND: self._left_out}[fact["kind"]]
                kept.setdefault((str(fact.get("schema")), str(fact.get("table"))), []).append(fact)
                continue
            self._facts.setdefault((str(fact.get("schema")), str(fact.get("table"))), TableFacts([])).facts.append(fact)
        for facts in self._facts.values():
            facts.facts.sort(key=lambda f: int(f.get("lsn") or 0))

    @staticmethod
    def _failed(failures: dict[str, WalflowError], results: list[dict[str, Any]]) -> WalflowError:
        """The error a run with failed topics raises: the failure itself when there is one, else one naming each;
        it carries the results of the topics that were applied (``results``)."""
        for topic, exc in sorted(failures.items()):
            log.error("%s: not applied: %s", topic, exc)
        if len(failures) == 1:
            error = next(iter(failures.values()))
        else:
            listed = " | ".join(f"topic {topic}: {exc}" for topic, exc in sorted(failures.items()))
            # fenced everywhere is still the fence's refusal (an overtaken run), which callers tell from a failure
            kind = LakeFenceError if all(isinstance(exc, LakeFenceError) for exc in failures.values()) else LakeError
            error = kind(f"{len(failures)} topics could not be applied (the {len(results)} other(s) were): {listed}")
            error.retryable = all(exc.retryable for exc in failures.values())
        error.results = results
        return error

    # -- planning: what each topic reads ---------------------------------------------------------------
    def lake_name(self, topic: str, partitions: list[int]) -> str:
        """The lake table name of a topic: from the source names its records carry, else the table that claims the
        topic (its records expired), else from the topic name.

        Topic names replace every character Kafka rejects with ``_`` (as Debezium does), so they cannot name the
        lake table: ``café`` and ``caf_`` share a topic name but not a source name.
        """
        for split in split_records(reader.first_records(self.kafka, topic, partitions)):
            payload = split.payload
            source = payload.get("source") if isinstance(payload, dict) else None
            if isinstance(source, dict) and source.get("schema") is not None and source.get("table") is not None:
                self._sources[topic] = (str(source["schema"]), str(source["table"]))
                return table_name(str(source["schema"]), str(source["table"]))
        claimed = self._claimed().get(topic)
        if claimed is not None:
            return claimed
        return table_name(*names_from_topic(topic, self.settings.topic_prefix, self.settings.topic_delimiter))

    def _claimed(self) -> dict[str, str]:
        """The lake tables of the namespace that claim a topic (table property), ``{topic: table name}``; read once."""
        if self._claims is None:
            self._claims = {}
            s = self.settings
            rows = self.spark.sql(f"SHOW TABLES IN {s.namespace_ident()}").collect()
            for row in rows:
                props = table_properties(self.spark, s.ident(row["tableName"]))
                if (
                    props.get(C.CONNECTOR_PROPERTY) == s.connector
                    and props.get(C.KIND_PROPERTY, claims.TABLE) == claims.TABLE
                    and C.TOPIC_PROPERTY in props
                ):
                    self._claims[props[C.TOPIC_PROPERTY]] = row["tableName"]
        return self._claims

    def plan_topic(self, topic: str, partitions: list[int]) -> TopicPlan:
        """Where ``topic``'s read starts and ends in each partition, after the checks that need no write: the lake
        table's owner, its history, the topic's identity and retention."""
        s = self.settings
        name = self.lake_name(topic, partitions)
        ident = s.ident(name)
        properties = table_properties(self.spark, ident)  # empty only for a table that does not exist
        claims.check_claim(ident, properties, s.connector, topic, claims.TABLE)
        self._check_stale(topic, ident)
        # the snapshot the offsets come from (read first: a commit in between makes the fence refuse this run's)
        head = self.fence.head(ident, bool(properties))
        stored, stored_prints = stored_position(self.spark, ident, topic, (s.catalog, s.namespace, name))
        if not stored and self._starts.get(topic):
            # nothing applied yet (a new table, or one `walflow reset --lake` dropped): the newest initial snapshot
            # holds every row, so what the topic held before it is not read (a row deleted before a reset stays gone)
            stored = dict(self._starts[topic])
            log.info(
                "%s: %s has applied nothing yet; it starts at the newest initial snapshot's offsets %s",
                topic,
                ident,
                stored,
            )
        # The topic must still be the one the lake read: a recreated topic (or a broker that lost its data and
        # was refilled) can hold as many records as before, so offsets alone cannot tell.
        current = reader.fingerprints(self.kafka, topic, {p: o for p, o in stored.items() if p in stored_prints})
        for p, fingerprint in current.items():
            warning = check_last_applied(topic, p, stored[p] - 1, fingerprint, stored_prints[p], ident, s.connector)
            if warning:
                log.warning("%s", warning)
        # the changelog commits separately with its own offsets: read from the lower of the two
        log_stored = log_head = None
        if s.changelog:
            log_name = name + CHANGELOG_SUFFIX
            log_ident = s.ident(log_name)
            log_properties = table_properties(self.spark, log_ident)
            claims.check_claim(log_ident, log_properties, s.connector, topic, claims.CHANGELOG)
            log_head = self.fence.head(log_ident, bool(log_properties))
            found = offsets_snapshot(self.spark, log_ident, (s.catalog, s.namespace, log_name))
            if found is None:
                # A changelog turned on later (or dropped) starts where the table is: the events the table applied
                # before are gone from its view, and reading them again from offset 0 would hold the table back
                # (or fail on records retention deleted).
                log_stored = dict(stored)
                if stored:
                    log.info(
                        "%s: the changelog %s starts at the table's offsets %s (events applied before it was turned "
                        "on are not in it)",
                        topic,
                        log_ident,
                        stored,
                    )
            else:
                log_stored = parse_offsets(found[1][C.OFFSETS_PROPERTY]).get(topic, {})
        bounds = {}
        for p in partitions:
            start = stored.get(p, 0) if log_stored is None else min(stored.get(p, 0), log_stored.get(p, 0))
            applied = stored.get(p, 0) if log_stored is None else max(stored.get(p, 0), log_stored.get(p, 0))
            low, end = reader.offset_bounds(self.kafka, topic, p, applied)
            check_offsets(topic, p, start, applied, low, end, ident, s.connector)
            bounds[p] = (start, end)
        return TopicPlan(topic, name, stored, log_stored, bounds, head=head, log_head=log_head)

    def share_budget(self, plans: dict[str, TopicPlan]) -> None:
        """Cut each plan's read to its share of ``walflow.lake.max.records``: equal among the topics with records
        waiting, then among a topic's partitions (what one topic does not need goes to the others), so that a
        backlog on one topic never starves the rest."""
        backlogs = {t: p.waiting() for t, p in plans.items()}
        given = share(self.settings.max_records, backlogs)
        for topic, plan in plans.items():
            parts = share(given[topic], {q: end - start for q, (start, end) in plan.bounds.items()})
            plan.slices = [
                (q, start, start + parts[q]) for q, (start, _end) in sorted(plan.bounds.items()) if parts[q] > 0
            ]
            if backlogs[topic]:
                left = backlogs[topic] - given[topic]
                log.info(
                    "%s: %d record(s) waiting, %d read in this run%s",
                    topic,
                    backlogs[topic],
                    given[topic],
                    f" ({left} left for the next runs: walflow.lake.max.records {self.settings.max_records} is shared "
                    f"by {sum(1 for b in backlogs.values() if b)} topic(s))"
                    if left
                    else "",
                )

    def apply_plan(self, plan: TopicPlan) -> dict[str, Any]:
        """Read, decode and commit one topic's planned slices; then mark the lake table incomplete when the
        connector left events of its source out."""
        result = self._apply_plan(plan)
        self._mark_incomplete(plan.topic, self.settings.ident(plan.name))
        return result

    def _mark_incomplete(self, topic: str, ident: str) -> None:
        """Record on lake table ``ident`` that events of its source were left out (:data:`INCOMPLETE_PROPERTY`: how
        many, the last positions and causes), as the schema topic's facts say: the rows those events changed differ
        from the source, and nothing else in the table shows it."""
        source = self._sources.get(topic)
        facts = self._left_out.get(source) if source else None
        if not facts:
            return
        properties = table_properties(self.spark, ident)
        if not properties:
            return  # no table yet (nothing applied): the next run marks it
        value = orjson.dumps(
            {
                "events_left_out": len(facts),
                "by": sorted({f"event.processing.failure.handling.mode={f.get('mode')}" for f in facts}),
                "last": [{"position": f.get("position"), "reason": f.get("reason")} for f in facts[-5:]],
            }
        ).decode()
        if properties.get(INCOMPLETE_PROPERTY) != value:
            log.warning(
                "%s: lake table %s is incomplete: the connector left %d event(s) of its source out (table property %s)",
                topic,
                ident,
                len(facts),
                INCOMPLETE_PROPERTY,
            )
            self.spark.sql(sql.set_property(ident, INCOMPLETE_PROPERTY, value))

    def _apply_plan(self, plan: TopicPlan) -> dict[str, Any]:
        ident = self.settings.ident(plan.name)
        if not plan.slices:
            swept = self._sweep_alone(plan, ident) if not plan.waiting() else False
            return {"topic": plan.topic, "table": ident, "records": 0, "committed": swept, "backlog": plan.waiting()}
        tasks = frames.task_frame(
            self.spark, plan.topic, offset_slices(plan.slices, self.spark.sparkContext.defaultParallelism)
        )
        cached: list[DataFrame] = []
        written = (ident, self.settings.ident(plan.name + CHANGELOG_SUFFIX))
        try:
            key_cut_allowed = True
            while True:
                try:
                    return self._apply(plan, tasks, cached, cut_allowed=key_cut_allowed)
                except (_KeyCut, _Widen) as cut:
                    if isinstance(cut, _KeyCut):
                        # the key was redefined within the run: this run applies what came before the new key
                        before, after = cut.change
                        log.info(
                            "%s: the key changed from %s to %s within the records read; this run applies the records "
                            "before the new key (up to offsets %s), the next run the rest, merged by the new key",
                            plan.topic,
                            before,
                            after,
                            {p: e for p, _s, e in cut.slices},
                        )
                        key_cut_allowed = False
                    else:
                        log.info(
                            "%s: a key change lies across the end of the records read; reading up to offsets %s",
                            plan.topic,
                            {p: e for p, _s, e in cut.slices},
                        )
                    for frame in cached:
                        frame.unpersist()
                    cached.clear()
                    plan.slices = [(p, start, end) for p, start, end in cut.slices if end > start]
                    tasks = frames.task_frame(
                        self.spark, plan.topic, offset_slices(plan.slices, self.spark.sparkContext.defaultParallelism)
                    )
        except Exception as exc:
            # a write that failed because a newer run removed this run's branch is the fence's refusal
            if not isinstance(exc, LakeFenceError):
                for table in written:
                    taken = self.fence.taken_over(table)
                    if taken is not None:
                        raise taken from None
            raise
        finally:
            for table in written:
                self.fence.discard(table)  # nothing when published
            self._release_passes()
            for frame in cached:
                frame.unpersist()

    def _apply(
        self, plan: TopicPlan, tasks: DataFrame, cached: list[DataFrame], cut_allowed: bool = True
    ) -> dict[str, Any]:
        s = self.settings
        topic, name, stored, slices, log_stored = plan.topic, plan.name, plan.stored, plan.slices, plan.log_stored
        ident = s.ident(name)
        phase = time.monotonic()
        decoded, stats, value_schema, passes, evolution = self._decode(topic, ident, tasks, slices)
        cached.append(decoded)
        if cut_allowed and stats.key_names and not stats.key_cut and not stats.problems:
            ends = self._partner_cut(plan, decoded, value_schema)
            if ends:
                decoded = decoded.filter(frames.before_offsets(ends))
                stats = frames.run_stats(decoded)
                slices = plan.slices = [(p, start, min(end, ends.get(p, end))) for p, start, end in slices]
        # Each table commits its own offsets, never below what it applied before: with the changelog behind the
        # table, the read starts at the changelog's offsets and may end (walflow.lake.max.records) below the
        # table's, which must then keep its own.
        offsets = dict(stored)
        log_offsets = dict(log_stored or {})
        for p, _start, end in slices:
            offsets[p] = max(end, stored.get(p, 0))
            log_offsets[p] = max(end, log_offsets.get(p, 0))
        counts, key_names = stats.counts, stats.key_names
        if stats.problems:
            raise self._unappliable(topic, ident, stats)
        if stats.key_change is not None:  # (set exactly when stats.key_cut is not empty)
            shortened = [(p, start, min(end, stats.key_cut.get(p, end))) for p, start, end in slices]
            if cut_allowed and any(end > start for _p, start, end in shortened):
                raise _KeyCut(shortened, stats.key_change)
            # nothing before the new key (an older key's event redelivered after the new key's): merged by the newest
            key_names = stats.newest_key_names
            log.warning(
                "%s: events keyed by %s and by %s are mixed in the records read; they are merged by the newest key",
                topic,
                *stats.key_change,
            )
        if not counts:
            return self._commit_offsets_only(plan, ident, offsets, log_offsets, stats)
        if len(stats.sources) > 1:
            tables = ", ".join(sorted(f"{a}.{b}" for a, b in stats.sources))
            raise LakeError(
                f"topic {topic} carries the events of several source tables ({tables}): Kafka topic names replace "
                "every character outside [A-Za-z0-9._-] with '_', so these tables' topic names collide and their "
                "events cannot be told apart by topic. Rename one of the tables (or exclude it with "
                "table.exclude.list), then rebuild the lake table from a new snapshot."
            )
        timings: dict[str, Any] = {"read_s": round(time.monotonic() - phase, 2), "read_passes": passes}
        log.info(
            "%s: read and decoded %d record(s) in %.1f s (%d pass(es))",
            topic,
            sum(counts.values()),
            timings["read_s"],
            passes,
        )
        if stats.overflowed:
            log.info(
                "%s: %d event(s) hold values the lake types cannot (kept as text in %s)",
                topic,
                stats.overflowed,
                C.OVERFLOW,
            )
        self.hooks.reached("after_read", ident)
        phase = time.monotonic()
        row_shape = RowShape(value_schema)
        names, types = row_shape.names, row_shape.types
        meta = C.TABLE_META + (((C.DELETED, "boolean"),) if s.soft_deletes else ())
        owner = claims.claim(s.connector, topic, claims.TABLE)
        attnums = None
        if evolution is not None:
            attnums = self._follow_source(topic, ident, evolution, bool(key_names), stats)
            owner = {**owner, **attnum_properties(attnums, evolution.relation)}
        defaults = field_defaults(evolution.defaults_schema if evolution is not None else value_schema)
        properties = ensure_table(self.spark, ident, s.namespace_ident(), names, types, defaults, meta, owner)
        # from here every data commit goes to this run's branch of the table, published at the end
        target = self.fence.open(ident, plan.head)
        pending = fill_pending(self.spark, target, properties)
        self.hooks.reached("after_ddl", ident)
        timings["table_s"] = round(time.monotonic() - phase, 2)
        phase = time.monotonic()
        frame = frames.events_only(decoded, names).withColumn(C.POSITION, frames.position_column())
        # the before image of a keyless update is not an event of its own
        before_image = (F.col(C.OP) == "u") & (F.col(C.SIGN) < 0)
        keyed = bool(key_names)
        if log_stored is not None:
            self._append_changelog(
                topic, name, frame.filter(~before_image), log_stored, log_offsets, names, types, plan.log_head
            )
            self.hooks.reached("after_changelog", ident)
            frame = frame.filter(frames.from_offsets(stored))
        truncated_at = properties.get(C.TRUNCATED_AT)
        cut = None
        if counts.get("t"):
            cut = (
                frame.filter(F.col(C.OP) == "t")
                .select(F.max(F.struct(C.POS_A, C.POS_B, C.POS_C, C.POSITION, C.LSN, C.SOURCE_TS)).alias("m"))
                .collect()[0]["m"]
            )
            if cut is not None and truncated_at and cut[C.POSITION] < truncated_at:
                cut = None  # only truncates older than one the table applied: redelivered, obsolete
        sweep = self._sweep_due(plan, properties, offsets)
        if sweep is not None and truncated_at and sweep[C.POSITION] <= truncated_at:
            sweep = (
                None  # a re-read no newer than a truncate the table applied: nothing older than it is left to remove
            )
        if sweep is not None and (cut is None or sweep[C.POSITION] > cut[C.POSITION]):
            cut = sweep  # the re-read's rows are all in: what is older than it is gone from the source
        if truncated_at and not (s.soft_deletes and keyed and cut is not None):
            # Events older than a truncate the table already applied are obsolete even when redelivered later. The
            # truncate itself stays: a crash between recording it and its DELETE must still see it applied. With
            # soft deletes and this batch's own truncate (at or after the one recorded: the same one again after a
            # crash between its commit and the MERGE's), the older events are kept and flagged below instead, as
            # the run that crashed would have written them.
            frame = frame.filter(F.col(C.POSITION) >= truncated_at)
        if cut is not None:
            # A truncate removes every row older than it; later events still apply. This commit carries no
            # offsets: a crash after it repeats it, which changes nothing (it only touches older rows).
            if not truncated_at or cut[C.POSITION] > truncated_at:
                # remembered first: a redelivered event older than the truncate must not bring a truncated row back
                self.spark.sql(sql.set_property(ident, C.TRUNCATED_AT, cut[C.POSITION]))
            commit(
                self.spark,
                sql.truncate(target, cut[C.POSITION], cut[C.LSN], cut[C.SOURCE_TS], s.soft_deletes),
                {},
                "truncate",
            )
            self.hooks.reached("after_truncate", ident)
        if sweep is not None:
            log.info(
                "%s: the re-read of %s.%s is applied: rows older than %s removed%s",
                topic,
                *self._sources[topic],
                sweep[C.POSITION],
                "" if cut is sweep else " (a truncate after it removed them already)",
            )
        if cut is not None:
            if s.soft_deletes and keyed:
                # soft deletes keep every row the source had: the rows the truncate removed are written too,
                # flagged (below, once the latest event per key is known)
                frame = frame.withColumn("_walflow_truncated", ~frames.after(cut))
            else:
                frame = frame.filter(frames.after(cut))
        frame = frame.filter(F.col(C.OP) != "t")
        properties_out, backlog = self._offsets_summary(plan, offsets, stats)
        result: dict[str, Any] = {}
        # columns the source dropped stay in the lake as history: rows written from now on hold NULL there
        history = self._history(ident, names)
        written = names + [h for h, _t in history]
        if keyed:
            frame = self._with_nulls(frame, history)
            identity = evolution.identity_only(key_names) if evolution is not None else []
            if identity:
                # REPLICA IDENTITY USING INDEX on an index without the key: a delete's old row holds the index's
                # columns and the key zero-filled (Debezium's form), so deletes match by the index's columns, after
                # the other events merged by key; and a key change that leaves the index's columns as they were
                # has no old row at all (an update of the new key only), so the row that held those values under
                # another key is superseded; the offsets commit with the last of these
                deletes = frame.filter((F.col(C.OP) == "d") & ~before_image)
                frame = frame.filter(F.col(C.OP) != "d")
                if stats.toasted:
                    frame = frames.resolve_toast_by_identity(
                        frame, identity, _with_placeholders(frame, names, types), self.spark.table(target)
                    )
                self._merge_keyed(
                    topic,
                    ident,
                    target,
                    frame,
                    written,
                    {**types, **dict(history)},
                    key_names,
                    stats,
                    cut,
                    before_image,
                    {},
                )
                self._supersede_by_identity(
                    target, frame.filter(~before_image), identity, key_names, {} if counts.get("d") else properties_out
                )
                if counts.get("d"):
                    self._delete_by_identity(target, deletes, identity, properties_out)
            else:
                self._merge_keyed(
                    topic,
                    ident,
                    target,
                    frame,
                    written,
                    {**types, **dict(history)},
                    key_names,
                    stats,
                    cut,
                    before_image,
                    properties_out,
                )
        elif counts.get("u") or counts.get("d"):
            result["unmatched_before_images"] = merge_keyless(
                self.spark, target, frame, names, types, properties_out, s.soft_deletes, tuple(history)
            )
        else:
            # inserts only (a table without key, e.g. an append-only history): every event is a new row
            frame = self._with_nulls(frame, history)
            self._with_view(
                frame,
                lambda view: commit(
                    self.spark, sql.insert_only(target, view, written, s.soft_deletes), properties_out, "insert"
                ),
            )
        self.fence.publish(ident)
        if sweep is not None:
            self.spark.sql(sql.set_property(ident, C.SWEPT_AT, sweep[C.POSITION]))
        clear_pending(self.spark, ident, pending)
        self.hooks.reached("after_commit", ident)
        timings["merge_s"] = round(time.monotonic() - phase, 2)
        log.info("%s: merged into %s in %.1f s", topic, ident, timings["merge_s"])
        records = int(sum(counts.values()))
        return {
            "topic": topic,
            "table": ident,
            "records": records,
            "ops": dict(counts),
            "committed": True,
            "offsets": offsets,
            "backlog": sum(backlog.values()),
            "timings": timings,
            **result,
        }

    def _offsets_summary(
        self, plan: TopicPlan, offsets: dict[int, int], stats: RunStats
    ) -> tuple[dict[str, str], dict[int, int]]:
        """What a table's commit records beside its data: the offsets applied, the backlog left per partition, the
        fingerprints of the last records applied, and the records skipped by ``walflow.lake.accept.records``.
        Returns (the snapshot summary's properties, the backlog)."""
        topic = plan.topic
        backlog = {p: max(plan.bounds[p][1] - o, 0) for p, o in offsets.items() if p in plan.bounds}
        properties = {
            C.OFFSETS_PROPERTY: format_offsets({topic: offsets}),
            C.BACKLOG_PROPERTY: orjson.dumps(backlog, option=orjson.OPT_NON_STR_KEYS).decode(),
            C.FINGERPRINTS_PROPERTY: orjson.dumps(
                {topic: reader.fingerprints(self.kafka, topic, offsets)}, option=orjson.OPT_NON_STR_KEYS
            ).decode(),
        }
        if stats.skipped:
            skipped = [f"{topic}:{p['partition']}:{p['offset']}" for p in stats.skipped]
            log.warning(
                "%s: skipped %d record(s) listed in walflow.lake.accept.records that are not change events: %s",
                topic,
                len(skipped),
                skipped,
            )
            properties[C.SKIPPED_PROPERTY] = orjson.dumps(skipped).decode()
        return properties, backlog

    # -- re-reads: sweeps and stale tables (walflow.capture.rereads) ---------------------------------------------
    def _sweep_due(self, plan: TopicPlan, properties: dict[str, str], offsets: dict[int, int]) -> dict[str, Any] | None:
        """The newest sweep of the topic's table that this run applies, as a truncate position, or None.

        A sweep fact is written once its re-read's rows were acknowledged, and this run read the facts before it found
        where the topic ends: when its offsets reach that end, every row of the re-read is applied by this run or was
        before it, so the rows older than the sweep's position are the source's no more. A run that stops short of the
        end leaves the sweep to a later one."""
        facts = self._sweeps.get(self._sources.get(plan.topic, ("", "")))
        if not facts or any(offsets.get(p, start) < end for p, (start, end) in plan.bounds.items()):
            return None
        position = max(int(f["position"]) for f in facts)
        # (commit, 1): below every change of a later transaction, above an initial snapshot's rows at that commit
        place = (position, 1, 0)
        text = format_position(place)
        if text <= (properties.get(C.SWEPT_AT) or ""):
            return None
        return {
            C.POS_A: place[0],
            C.POS_B: place[1],
            C.POS_C: place[2],
            C.POSITION: text,
            C.LSN: None,
            C.SOURCE_TS: None,
        }

    def _sweep_alone(self, plan: TopicPlan, ident: str, properties_out: dict[str, str] | None = None) -> bool:
        """Apply a due sweep in a run that has no event of the table to apply (its re-read's rows were applied by
        earlier runs); with ``properties_out`` (the offsets) in the same commit. Returns whether it committed."""
        if not table_exists(self.spark, ident):
            return False
        properties = table_properties(self.spark, ident)
        sweep = self._sweep_due(plan, properties, {p: end for p, (_start, end) in plan.bounds.items()})
        if sweep is None:
            return False
        target = self.fence.open(ident, plan.head)
        if sweep[C.POSITION] > (properties.get(C.TRUNCATED_AT) or ""):
            self.spark.sql(sql.set_property(ident, C.TRUNCATED_AT, sweep[C.POSITION]))
        commit(
            self.spark,
            sql.truncate(target, sweep[C.POSITION], None, None, self.settings.soft_deletes),
            properties_out or {},
            "sweep",
        )
        self.fence.publish(ident)
        self.spark.sql(sql.set_property(ident, C.SWEPT_AT, sweep[C.POSITION]))
        log.info(
            "%s: the re-read of %s.%s is applied: rows older than %s removed",
            plan.topic,
            *self._sources[plan.topic],
            sweep[C.POSITION],
        )
        return True

    def _check_stale(self, topic: str, ident: str) -> None:
        """Refuse a topic whose table has no key and changed its rows without events (a stale fact newer than the newest
        initial snapshot and than the table's last re-read): the lake cannot make it equal its source."""
        source = self._sources.get(topic)
        facts = self._stale.get(source) if source else None
        if not facts or source is None:
            return
        newest = max(facts, key=lambda f: int(f.get("lsn") or 0))
        if self._start_lsn is not None and int(newest.get("lsn") or 0) <= self._start_lsn:
            return  # a new snapshot (walflow reset, then setup) rebuilt the lake after it
        if any(int(f.get("due") or 0) > int(newest.get("lsn") or 0) for f in self._sweeps.get(source, [])):
            return  # re-read since (the table gained a key)
        raise LakeSchemaError(
            f"topic {topic}: source table {source[0]}.{source[1]} has no primary key, and its rows changed without "
            f"change events ({newest.get('reason')}), so lake table {ident} cannot equal it: without a key walflow "
            "cannot re-read it. Nothing of this topic was written. Give the table a primary key (walflow then "
            "re-reads it and the lake follows), or rebuild the lake: `walflow reset <connector> --lake`, then the "
            "setup DAG."
        )

    def _commit_offsets_only(
        self, plan: TopicPlan, ident: str, offsets: dict[int, int], log_offsets: dict[int, int], stats: RunStats
    ) -> dict[str, Any]:
        """Records that hold no event (records skipped by ``walflow.lake.accept.records``, tombstones without a key, a
        tombstone right after its delete): their offsets still move on,
        in a commit without rows (through the fence), so that they are neither read again nor counted as backlog.
        A table that does not exist yet waits for its first event."""
        topic = plan.topic
        if not table_exists(self.spark, ident):
            return {"topic": topic, "table": ident, "records": 0, "committed": False, "backlog": plan.waiting()}
        properties, backlog = self._offsets_summary(plan, offsets, stats)
        log_ident = self.settings.ident(plan.name + CHANGELOG_SUFFIX)
        if plan.log_stored is not None and table_exists(self.spark, log_ident):
            target = self.fence.open(log_ident, plan.log_head)
            commit(
                self.spark,
                f"INSERT INTO {target} SELECT * FROM {log_ident} WHERE false",
                {C.OFFSETS_PROPERTY: format_offsets({topic: log_offsets})},
                "offsets",
            )
            self.fence.publish(log_ident)
        if self._sweep_due(plan, table_properties(self.spark, ident), offsets) is not None:
            self._sweep_alone(plan, ident, properties)
        else:
            target = self.fence.open(ident, plan.head)
            commit(self.spark, f"INSERT INTO {target} SELECT * FROM {ident} WHERE false", properties, "offsets")
            self.fence.publish(ident)
        log.info(
            "%s: no event in the records read (skipped records, tombstones without a key or after their delete): "
            "offsets moved to %s",
            topic,
            offsets,
        )
        return {
            "topic": topic,
            "table": ident,
            "records": 0,
            "committed": True,
            "offsets": offsets,
            "backlog": sum(backlog.values()),
        }

    def _delete_by_identity(
        self, target: str, deletes: DataFrame, identity: list[str], properties: dict[str, str]
    ) -> None:
        """Deletes matched by the replica identity's columns (:meth:`Evolution.identity_only`): the latest delete per
        identity value removes (or flags) the row holding it, if that row is older than the delete."""
        latest = frames.latest_per_key(deletes, [F.col(sql_quote(c)) for c in identity])
        self._with_view(
            latest,
            lambda view: commit(
                self.spark,
                sql.delete_by_identity(target, view, identity, self.settings.soft_deletes),
                properties,
                "merge",
            ),
        )

    def _supersede_by_identity(
        self, target: str, upserts: DataFrame, identity: list[str], key_names: list[str], properties: dict[str, str]
    ) -> None:
        """Rows superseded under an identity index without the key: the index is unique, so a row holding the
        identity values of a newer upsert under another key is gone from the source (its key changed and, the
        index's columns unchanged, the WAL gave no old row to delete it by). The latest upsert per identity value
        removes (or flags) such older rows. Upserts whose identity columns are unchanged TOAST placeholders hold
        no values to match and are left out. With ``properties`` (the offsets), the commit is made even when
        nothing matched."""
        unchanged = F.arrays_overlap(F.col(C.TOAST), F.array(*[F.lit(c) for c in identity]))
        latest = frames.latest_per_key(
            upserts.filter(~F.coalesce(unchanged, F.lit(False))), [F.col(sql_quote(c)) for c in identity]
        )
        soft = self.settings.soft_deletes
        self._with_view(
            latest,
            lambda view: commit(
                self.spark, sql.supersede_by_identity(target, view, identity, key_names, soft), properties, "merge"
            ),
        )

    def _merge_keyed(
        self,
        topic: str,
        ident: str,
        target: str,
        frame: DataFrame,
        names: list[str],
        types: dict[str, str],
        key_names: list[str],
        stats: RunStats,
        cut: Any,
        before_image: Any,
        properties: dict[str, str],
    ) -> None:
        missing = [k for k in key_names if k not in names]
        if missing:
            raise LakeSchemaError(
                f"topic {topic}: the key field(s) {missing} are not columns of the events' rows, so the lake table "
                f"{ident} cannot match rows by key"
            )
        if stats.keyless:
            log.warning(
                "%s: %d update(s)/delete(s) came without a key (written before the table had one, or under REPLICA "
                "IDENTITY USING INDEX, whose old rows lack the key): they are matched by the key columns of their "
                "row, and those whose key columns are null match nothing. Use REPLICA IDENTITY DEFAULT or FULL for "
                "tables with a key.",
                topic,
                stats.keyless,
            )
        fitted = [k for k in key_names if types[k] in _FITTED_KEY_TYPES]
        keys = [F.col(sql_quote(k)) for k in key_names] + [F.element_at(C.OVERFLOW, F.lit(k)) for k in fitted]
        frame = keyed_events = frame.filter(~before_image)
        if stats.toasted:  # the window is only worth its cost when some event holds a placeholder
            toastable = _with_placeholders(frame, names, types)
            if stats.counts.get("d") and stats.counts.get("c"):
                frame = self._resolve_moved_toast(frame, key_names, toastable, target)
            frame = frames.resolve_toast(frame, keys, toastable)
        if self.settings.soft_deletes and stats.counts.get("d"):
            frame = frames.carry_into_deletes(frame, keys, [n for n in names if n not in key_names])
        frame = frames.latest_per_key(frame, keys)
        if "_walflow_truncated" in frame.columns:
            gone = F.col("_walflow_truncated") & (F.col(C.OP) != "d")
            for column, value in (
                (C.OP, F.lit("t")),
                (C.POSITION, F.lit(cut[C.POSITION])),
                (C.LSN, F.lit(cut[C.LSN]).cast("bigint")),
                (C.SOURCE_TS, F.lit(cut[C.SOURCE_TS]).cast("bigint")),
            ):
                frame = frame.withColumn(column, F.when(gone, value).otherwise(F.col(column)))
        soft = self.settings.soft_deletes
        if holds_no_rows(self.spark, ident):
            # an initial load (or a table emptied by a truncate): nothing to match, so no join to pay for
            self._with_view(
                frame,
                lambda view: commit(self.spark, sql.insert_latest(target, view, names, soft), properties, "merge"),
            )
            self._release_passes()
            return
        count = sum(stats.counts.values())
        prefilter = self._prefilter(ident, keyed_events, key_names, count)
        toast = bool(stats.toasted)
        # a large batch joins on its key columns with '=' when it holds no null key (one shuffle less; a small one
        # reads only the rows its keys select anyway)
        null_safe = count <= sql.PREFILTER_MAX_KEYS or self._has_null_key(keyed_events, key_names)

        def merge(view: str) -> None:
            statement = sql.merge_keyed(
                target,
                view,
                names,
                key_names,
                fitted,
                soft,
                toast=toast,
                prefilter=prefilter,
                null_safe=null_safe,
                carried=frames.CARRIED in frame.columns,
            )
            commit(self.spark, statement, properties, "merge")

        self._with_view(frame, merge)
        self._release_passes()

    def _partner_cut(self, plan: TopicPlan, decoded: DataFrame, value_schema: dict[str, Any]) -> dict[int, int]:
        """Where this run ends so that no key change of a table with TOASTable columns is applied by halves, when the
        read of some partition stopped before its end (:func:`walflow.lake.frames.partner_cut`); empty: no cut.

        :raises _Widen: a cut would leave nothing to apply: the run reads further instead (``walflow.lake.max.records``
            is then exceeded by what it takes to complete the key change)."""
        read = {p: end for p, _start, end in plan.slices}
        partial = {p for p, (start, end) in plan.bounds.items() if read.get(p, start) < end}
        if not partial:
            return {}
        shape = RowShape(value_schema)
        if not _toastable(shape.names, shape.types):
            return {}
        unread = sorted(p for p in partial if p not in read)
        if unread:
            # partitions with records waiting that the budget gave none of: what they hold is unknown, so each is
            # read a little (a key change may have a half there)
            raise _Widen(
                [*plan.slices, *((p, plan.bounds[p][0], min(plan.bounds[p][1], plan.bounds[p][0] + 2)) for p in unread)]
            )
        ends = frames.partner_cut(decoded, partial)
        if not ends:
            return {}
        shortened = [(p, start, min(end, ends.get(p, end))) for p, start, end in plan.slices]
        if not any(end > start for _p, start, end in shortened):
            # every event the run read is at or after the frontier (slices of a few records each): read further in the
            # partitions that stopped early, until a key change no longer spans the end (at worst to the topic's end)
            raise _Widen(
                [
                    (p, start, min(plan.bounds[p][1], end + max(end - start, 2))) if p in partial else (p, start, end)
                    for p, start, end in plan.slices
                ]
            )
        log.info(
            "%s: the records read stop inside a partition; this run applies those before the first key change that "
            "could be cut in halves (up to offsets %s), the next run the rest",
            plan.topic,
            ends,
        )
        return ends

    def _release_passes(self) -> None:
        """Uncache the passes of a placeholder resolution, while the branch they read still exists (uncaching plans
        them again)."""
        for frame in self._passes:
            try:
                frame.unpersist()
            except Exception as exc:
                log.debug("a cached pass could not be uncached: %s", exc)
        self._passes.clear()

    def _resolve_moved_toast(
        self, frame: DataFrame, key_names: list[str], toastable: list[str], target: str
    ) -> DataFrame:
        """A primary key changed and left TOASTed values unchanged: they are the old key's
        (:func:`walflow.lake.frames.resolve_moved_toast`), one pass per key change in a row (a key changed twice in one
        run takes its values from the first change's create once that has them)."""
        moved = (F.col(C.OP) == "c") & (F.size(C.TOAST) > 0)
        waiting = frame.filter(moved).count()
        while waiting:
            # each pass is cached: the next one (and its count) then starts from it, not from the whole plan again
            frame = frames.resolve_moved_toast(frame, key_names, toastable, self.spark.table(target)).persist()
            self._passes.append(frame)
            left = frame.filter(moved).count()
            if left >= waiting:
                break  # no old key has more to give (a value in no event of the run and in no lake row)
            waiting = left
        return frame

    def _prefilter(self, ident: str, events: DataFrame, key_names: list[str], count: int) -> str:
        """The MERGE's target narrowed to the rows the batch's keys can match
        (:func:`walflow.lake.sql.target_prefilter`), or "" when the batch is too large for a literal list or the key's
        types cannot be listed."""
        if count > sql.PREFILTER_MAX_KEYS:
            return ""
        table_types = {f.name: f.dataType.simpleString() for f in self.spark.table(ident).schema.fields}
        types = [table_types[k] for k in key_names]
        kind = sql.prefilter_kind(types)
        if kind is None:
            return ""
        column = F.col(sql_quote(key_names[0])) if kind == "values" else F.expr(sql.key_hash(key_names, types))
        values = [row[0] for row in events.select(column.alias("k")).distinct().collect()]
        return sql.target_prefilter(key_names, types, values)

    @staticmethod
    def _has_null_key(events: DataFrame, key_names: list[str]) -> bool:
        """Whether any event of the batch has a null key column (read from the cached frame's key columns only)."""
        nulls = [F.col(sql_quote(k)).isNull() for k in key_names]
        condition = nulls[0]
        for more in nulls[1:]:
            condition = condition | more
        return bool(events.filter(condition).limit(1).count())

    def _history(self, ident: str, names: list[str]) -> list[tuple[str, str]]:
        """(name, type) of the table's source columns the events no longer have (dropped in the source)."""
        wanted = set(names)
        return [
            (f.name, f.dataType.simpleString())
            for f in self.spark.table(ident).schema.fields
            if not f.name.startswith(C.PREFIX) and f.name not in wanted
        ]

    @staticmethod
    def _with_nulls(frame: DataFrame, columns: list[tuple[str, str]]) -> DataFrame:
        for name, kind in columns:
            frame = frame.withColumn(name, F.lit(None).cast(kind))
        return frame

    def _with_view(self, frame: DataFrame, run: Any) -> None:
        view = f"walflow_src_{uuid.uuid4().hex[:8]}"
        frame.createOrReplaceTempView(view)
        try:
            run(view)
        finally:
            self.spark.catalog.dropTempView(view)

    def _append_changelog(
        self,
        topic: str,
        name: str,
        frame: DataFrame,
        log_stored: dict[int, int],
        offsets: dict[int, int],
        names: list[str],
        types: dict[str, str],
        head: int | None,
    ) -> None:
        """Append every event not yet in the changelog table (an audit trail: one row per event)."""
        log_ident = self.settings.ident(name + CHANGELOG_SUFFIX)
        owner = claims.claim(self.settings.connector, topic, claims.CHANGELOG)
        ensure_table(self.spark, log_ident, self.settings.namespace_ident(), names, types, {}, C.CHANGELOG_META, owner)
        history = self._history(log_ident, names)
        frame, names = self._with_nulls(frame, history), names + [h for h, _t in history]
        properties = {C.OFFSETS_PROPERTY: format_offsets({topic: offsets})}
        target = self.fence.open(log_ident, head)
        self._with_view(
            # a lone tombstone's delete (no position) is no event of the source's: the audit trail leaves it out
            frame.filter(frames.from_offsets(log_stored) & F.col(C.POS_A).isNotNull()),
            lambda view: commit(self.spark, sql.changelog_insert(target, view, names), properties, "changelog"),
        )
        self.fence.publish(log_ident)

    # -- decoding: a guessed target, checked against what was read ------------------------------------
    def _decode(
        self, topic: str, ident: str, tasks: DataFrame, slices: list[tuple[int, int, int]]
    ) -> tuple[DataFrame, RunStats, dict[str, Any], int, Evolution | None]:
        """Decode the slices once with the guessed target, again only when the records showed it was wrong.

        Returns (the decoded frame, cached; its statistics; the target value schema; the number of passes; what the
        schema facts say of the target, or None).
        """
        guess = self._guess(ident, reader.last_records(self.kafka, topic, slices))
        accept = self.settings.accepted(topic)
        for passes in (1, 2, 3):
            # before Spark sees the columns: a clash with the frame's own columns fails there without a word of why
            check_column_names(topic, ident, RowShape(guess.schema).names)
            evolution = self._evolution(topic, guess)
            defaults = field_defaults(evolution.defaults_schema if evolution else guess.schema)
            mapping = evolution.mapping if evolution else None
            first_commit = (self._start_lsn, self._starts.get(topic, {})) if self._start_lsn else None
            plan = DecodePlan(
                topic,
                self.kafka,
                guess.schema,
                defaults,
                self.placeholders,
                guess.watch,
                accept,
                mapping,
                first_commit,
                binary_placeholder_null=self.settings.binary_placeholder_null,
            )
            decoded = frames.decode(tasks, plan).persist()
            stats = frames.run_stats(decoded)
            better = self._better_guess(ident, guess, stats)
            if better is None:
                return decoded, stats, guess.schema, passes, evolution
            log.info(
                "%s: the records read do not have the columns guessed from the slices' last records; decoding again",
                topic,
            )
            decoded.unpersist()
            guess = better
        raise LakeError(f"topic {topic}: the schema of its records kept changing between passes; run the job again")

    def _evolution(self, topic: str, guess: Guess) -> Evolution | None:
        """What the schema facts say of the target ``guess``: None without facts for the topic's table, for records
        without a schema part, or when no fact describes exactly the target's fields."""
        facts = (self._facts or {}).get(self._sources.get(topic, ("", "")))
        if not facts or not guess.hash:
            return None
        shape = [(f["field"], field_type(f)) for f in RowShape(guess.schema).fields]
        target = next(
            (f for f in reversed(facts.facts) if [(g["field"], g.get("type", "")) for g in f["fields"]] == shape), None
        )
        if target is None:
            return None
        facts = facts.of_relation(target)
        fills = facts.fills(target)
        defaults_schema, unknown = with_fills(guess.schema, fills)
        return Evolution(
            facts,
            facts.attnums(target),
            facts.mapping(target),
            defaults_schema,
            fills,
            unknown,
            str(target.get("identity") or ""),
            tuple(str(f) for f in target.get("identity_fields") or ()),
            int(target["relation"]) if target.get("relation") is not None else None,
        )

    def _follow_source(
        self, topic: str, ident: str, evolution: Evolution, keyed: bool, stats: RunStats
    ) -> dict[str, int]:
        """Rename the lake columns whose source attribute was renamed, drop those whose name now belongs to another
        attribute (added again as new columns), before the columns are brought to the target (:func:`ensure_table`).
        Returns the attribute numbers to record once the table has the target's columns.

        :raises LakeSchemaError: a keyless table needs values the events cannot give (see
        :mod:`walflow.lake.evolution`).
        """
        properties = table_properties(self.spark, ident)
        existing = [f.name for f in self.spark.table(ident).schema.fields] if properties else []
        source_columns = [c for c in existing if not c.startswith(C.PREFIX)]
        recorded = read_property(properties, evolution.relation)
        lake = {
            **evolution.facts.adopt([c for c in source_columns if c not in recorded]),
            **{c: a for c, a in recorded.items() if c in source_columns},
        }
        renames, readded = plan_renames(lake, evolution.attnums, set(existing))
        # the values older rows hold cannot be known, and without a key a re-read cannot replace them
        lacking = set()
        for text in stats.schemas.values():
            if text:
                lacking |= set(evolution.attnums) - set(RowShape(orjson.loads(text)).names)
        had = set(lake.values())
        new_here = [c for c in evolution.unknown if c in readded or evolution.attnums.get(c) not in had]
        if not keyed and new_here and ((existing and not holds_no_rows(self.spark, ident)) or lacking & set(new_here)):
            raise refuse_unknown_fill(topic, ident, new_here)
        for old, new in renames:
            log.info(
                "%s: column %s was renamed %s in the source (attribute %d): renamed in the lake",
                ident,
                old,
                new,
                lake[old],
            )
            self.spark.sql(sql.rename_column(ident, old, new))
            lake[new] = lake.pop(old)
        if renames:
            self.spark.sql(sql.set_properties(ident, attnum_properties(lake, evolution.relation)))
        for column in readded:
            # the lake's column is the dropped attribute's (history), the name now another attribute's: dropped from
            # the lake (Iceberg drops by field id: no data file is rewritten) and added again below with what the
            # new attribute's older rows hold, whatever its type
            log.info(
                "%s: column %s is another source attribute now (dropped and added again in the source): made anew",
                ident,
                column,
            )
            self.spark.sql(sql.drop_column(ident, column))
            lake.pop(column, None)
        return {**lake, **evolution.attnums}

    def _guess(self, ident: str, sample: list[Any]) -> Guess:
        """The target from the newest of the slices' last records: its schema, or for records without a schema
        part the lake table's columns plus those the sampled rows suggest."""
        best: tuple[tuple[int, int, int], str, str] | None = None
        kinds: dict[str, set[str]] = {}
        for split in split_records(sample):
            schema_hash, text, payload = split.schema_hash, split.schema_text, split.payload
            if split.error is not None or not isinstance(payload, dict):
                continue
            position = source_position(payload.get("source") or {}, payload.get("transaction"), payload.get("op"))
            if schema_hash and text and (best is None or position > best[0]):
                best = (position, schema_hash, text)
            row = payload.get("after") or payload.get("before")
            if not schema_hash and isinstance(row, dict):
                for column, value in row.items():
                    seen = kinds.setdefault(column, set())
                    kind = json_kind(value)
                    if kind is not None:
                        seen.add(kind)
        if best is not None:
            return Guess(orjson.loads(best[2]), best[1])
        return self._schemaless_guess(ident, kinds)

    def _schemaless_guess(self, ident: str, kinds: dict[str, set[str]]) -> Guess:
        """Columns the lake table already has keep its types; the others take the type their JSON values suggest
        (:func:`walflow.lake.loose.inferred_type`) and are watched while decoding."""
        existing: list[tuple[str, str]] = []
        if table_exists(self.spark, ident):
            existing = [
                (f.name, f.dataType.simpleString())
                for f in self.spark.table(ident).schema.fields
                if not f.name.startswith(C.PREFIX)
            ]
        known = {n for n, _t in existing}
        fields = [loose_field(n, t) for n, t in existing]
        new = [n for n in kinds if n not in known]
        fields += [loose_field(n, inferred_type(kinds[n])) for n in new]
        return Guess(loose_schema(fields), "", tuple(new))

    def _better_guess(self, ident: str, guess: Guess, stats: RunStats) -> Guess | None:
        """None when ``guess`` fits what was read, else the target to decode with."""
        newest = stats.newest
        if newest is not None:
            if newest == guess.hash:
                return None
            return Guess(orjson.loads(stats.schemas[newest]), newest)
        if "" not in stats.schemas:
            return None  # nothing was read that has a row
        current = {
            f["field"]: f["parameters"]["spark"]
            for f in RowShape(guess.schema).fields
            if f.get("name") == "walflow.lake.Loose"
        }
        watched = set(guess.watch)
        kinds = stats.kinds
        if (
            not guess.hash
            and all(n in current for n in kinds)
            and all(inferred_type(kinds[n]) == current[n] for n in watched & set(kinds))
        ):
            return None
        return self._schemaless_guess(ident, {n: k for n, k in kinds.items() if n not in current or n in watched})

    def _unappliable(self, topic: str, ident: str, stats: RunStats) -> UnappliableRecordError:
        problems = stats.problems
        described = "; ".join(
            f"partition {p['partition']} offset {p['offset']}"
            + (f" column {p['column']!r}" if p.get("column") else "")
            + (f" value {p['value']}" if "value" in p else "")
            + f" ({p['error']})"
            for p in problems[:5]
        )
        entries = sorted({(p["partition"], p["offset"]) for p in problems})
        accept = [f"{topic}:{partition}:{offset}" for partition, offset in entries]
        # every record named at once (the statistics keep up to 1,000), so that one run of the fix gets past them all
        log.error(
            "%s: the records that cannot be applied, as walflow.lake.accept.records entries: %s",
            topic,
            orjson.dumps(accept).decode(),
        )
        schemaless = any(p.get("schemaless") for p in problems)
        count = f"{len(entries)}{' or more' if len(problems) >= 1000 else ''}"
        return UnappliableRecordError(
            f"topic {topic}: {count} record(s) cannot be applied to lake table {ident}, e.g. {described}. Nothing "
            "of this topic was committed. "
            + (
                "These records have no schema part, so walflow types their columns from the lake table or the JSON "
                "values: set value.converter.schemas.enable: true for this connector, or rebuild the lake table. "
                if schemaless
                else ""
            )
            + f"To apply them anyway, add each record ('{accept[0]}'"
            + (f" and the {len(accept) - 1} other(s) the log line before this one lists" if len(accept) > 1 else "")
            + ") to walflow.lake.accept.records and run again: each value that cannot be converted is then null in "
            f"its column with its exact text in {C.OVERFLOW}, and a record that is not a change event is skipped "
            f"and listed in the commit's summary ({C.SKIPPED_PROPERTY}); the offsets still commit with the data, "
            "so the lake stays exactly once.",
            problems,
        )
