"""What a connector captures, checked against what it set up: drift is an error (or a repair), never silence.

- **Ownership.** A replication slot has one consumer, and a topic prefix one writer. Setup records in the state
  table which connector owns its slot and prefix, and refuses a second connector naming either, saying which
  connector has it; the stream task checks the same before reading the slot.
- **Topic names.** Debezium replaces every character Kafka rejects with ``_``, so ``a"b`` and ``a_b`` (or ``αβ`` and
  ``γδ``) share one topic, where their keys collide. Setup refuses such tables, and the stream refuses a table that
  comes to share a topic with another captured one.
- **Publication.** A table removed from a ``filtered`` publication (``ALTER PUBLICATION ... DROP TABLE``) is simply
  not decoded any more. Each batch compares the publication with the tables it should hold and puts missing ones
  back when ``publication.autocreate.mode`` lets walflow manage it (saying which changes were missed), or fails with
  the fix when it does not.
- **Keys.** A table dropped and recreated with another key type would go on writing to the same topic with keys of
  another shape. The keys' schemas are recorded per table; a widening (int32 to int64) is a warning, any other
  change stops the batch until the setup DAG accepts it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, cast

import psycopg
from psycopg import sql

from walflow.config.connector import ConnectorConfig
from walflow.errors import DriftError, SlotError
from walflow.names import prefixes_nest, topic_name
from walflow.records.events import TableSchema, now_ms
from walflow.source.connection import quote_table
from walflow.source.publication import check_publication_privileges, publication_tables
from walflow.source.state import StateStore

log = logging.getLogger(__name__)

#: State-table key of the connector's claim on its slot and topic prefix.
OWNER_KEY = "owner"
#: State-table key of the tables the publication held when setup last ran (modes that walflow does not manage).
PUBLICATION_KEY = "publication"
#: State-table key of the accepted key schemas per table.
KEYS_KEY = "keys"
#: Accepted key schemas kept per table (older ones may still be in the WAL, so a few are kept).
KEY_HISTORY = 8


# -- ownership ----------------------------------------------------------------------------------------------------
def check_claims(store: StateStore, config: ConnectorConfig) -> None:
    """Refuse when another connector recorded in this state table owns ``slot.name`` or ``topic.prefix``.

    Reads only (the table may not exist yet), so setup calls it before any DDL.
    """
    for other, claim in store.others(OWNER_KEY):
        if not isinstance(claim, dict):
            continue
        table = ".".join(store.table)
        release = f"DELETE FROM {table} WHERE connector = '{other}' AND key = '{OWNER_KEY}'"
        if claim.get("slot") == config.slot_name:
            raise DriftError(
                f"replication slot {config.slot_name!r} belongs to connector {other!r} (recorded in {table}); two "
                f"connectors on one slot would each get part of the changes. Give {config.name!r} its own 'slot.name'. "
                f"If {other!r} was renamed to {config.name!r} or is gone for good, release its claim: {release}"
            )
        prefix = claim.get("topic_prefix")
        if (
            isinstance(prefix, str)
            and prefix != config.topic_prefix
            and prefixes_nest(
                config.topic_prefix, config.topic_delimiter, prefix, str(claim.get("topic_delimiter") or ".")
            )
        ):
            raise DriftError(
                f"topic prefix {config.topic_prefix!r} nests with {prefix!r} of connector {other!r} "
                f"(recorded in {table}): the topics of one start with the other's prefix and delimiter, so each would "
                f"take the other's topics for its own tables. Give {config.name!r} a 'topic.prefix' that neither "
                f"starts nor is started by {prefix!r}. If {other!r} is gone for good, release its claim: {release}"
            )
        if claim.get("topic_prefix") == config.topic_prefix:
            raise DriftError(
                f"topic prefix {config.topic_prefix!r} belongs to connector {other!r} (recorded in {table}); two "
                f"connectors writing one prefix would mix their tables' events in the same topics. Give "
                f"{config.name!r} its own 'topic.prefix'. If {other!r} was renamed to {config.name!r} or is gone for "
                f"good, release its claim: {release}"
            )
        if config.walflow_lake_enabled and claim.get("lake") == lake_claim(config):
            raise DriftError(
                f"lake namespace {lake_claim(config)!r} belongs to connector {other!r} (recorded in {table}); "
                "two connectors writing one namespace would read and reset each other's tables. Give "
                f"{config.name!r} its own 'walflow.lake.namespace'. If {other!r} is gone for good, "
                f"release its claim: {release}"
            )


def lake_claim(config: ConnectorConfig) -> str:
    """The lake namespace a connector writes, as its claim records it: catalog (or its Connection), warehouse (as
    configured: "default" for the embedded one) and namespace."""
    catalog = config.walflow_lake_catalog_conn_id or config.walflow_lake_catalog
    return (
        f"{catalog}|{config.walflow_lake_warehouse or 'default'}|{config.walflow_lake_namespace or config.topic_prefix}"
    )


def record_claim(store: StateStore, config: ConnectorConfig) -> None:
    """Record (or update) this connector's claim on its slot and topic prefix."""
    claim = {
        "slot": config.slot_name,
        "topic_prefix": config.topic_prefix,
        "topic_delimiter": config.topic_delimiter,
        "publication": config.publication_name,
        "lake": lake_claim(config) if config.walflow_lake_enabled else None,
    }
    current = store.get(OWNER_KEY)
    if not isinstance(current, dict) or any(current.get(k) != v for k, v in claim.items()):
        store.put(OWNER_KEY, {**claim, "at_ms": now_ms()})


# -- topics -------------------------------------------------------------------------------------------------------
def topic_collisions(config: ConnectorConfig, tables: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Topics that more than one of ``tables`` would write to, with those tables' names."""
    by_topic: dict[str, list[str]] = defaultdict(list)
    for schema, table in tables:
        by_topic[topic_name(config.topic_prefix, schema, table, delimiter=config.topic_delimiter)].append(
            f"{schema}.{table}"
        )
    return {topic: sorted(names) for topic, names in by_topic.items() if len(names) > 1}


def check_topics(config: ConnectorConfig, tables: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Refuse tables whose topic names collide; return each topic's table (``schema.table``)."""
    tables = list(tables)
    collisions = topic_collisions(config, tables)
    if collisions:
        listed = "; ".join(
            f"{' and '.join(repr(n) for n in names)} -> topic {topic!r}" for topic, names in sorted(collisions.items())
        )
        raise DriftError(
            f"captured tables would share a topic, since Kafka topic names replace every character other than "
            f"letters, digits, '.', '_' and '-' with '_': {listed}. Their keys would collide in one topic. Rename one "
            "of each pair, or leave it out with 'table.exclude.list'"
        )
    return {topic_name(config.topic_prefix, s, t, delimiter=config.topic_delimiter): f"{s}.{t}" for s, t in tables}


def check_topic_owner(owners: dict[str, str], table: TableSchema) -> None:
    """Refuse a table whose topic another captured table already writes (the stream calls this per new table)."""
    owner = owners.setdefault(table.topic, table.data_collection)
    if owner != table.data_collection:
        raise DriftError(
            f"table {table.data_collection!r} would write to topic {table.topic!r}, which table {owner!r} already "
            "writes (topic names replace characters Kafka rejects with '_'): their keys would collide. Rename one of "
            "them, or leave one out with 'table.exclude.list'; nothing of this batch past that point was confirmed"
        )


# -- publication --------------------------------------------------------------------------------------------------
def record_publication(store: StateStore, conn: psycopg.Connection, config: ConnectorConfig) -> None:
    """Remember which tables the publication holds after setup, for modes walflow does not manage."""
    published = publication_tables(conn, config.publication_name)
    tables = sorted([s, t] for s, t in published[2]) if published and not published[0] else None
    store.put(PUBLICATION_KEY, {"all_tables": bool(published and published[0]), "tables": tables, "at_ms": now_ms()})


def check_publication(
    conn: psycopg.Connection, config: ConnectorConfig, store: StateStore | None, captured: set[tuple[str, str]]
) -> tuple[list[str], set[tuple[str, str]]]:
    """Check the publication still holds the tables it should; repair a managed one. Returns warnings, and the
    tables put into the publication (whose changes before were never decoded).

    :param captured: the tables the filters capture now (:func:`walflow.source.publication.list_tables`).

    ``filtered`` (walflow manages the publication): every table the filters capture must be in it; missing ones
    are added back, with a warning naming them, since their changes while out of it were never decoded. Other
    modes: the tables the publication held when setup ran must still be in it, else :class:`DriftError` with the
    fix (walflow may not change a publication it does not manage).
    """
    name = config.publication_name
    existing = publication_tables(conn, name)
    if existing is None:
        raise SlotError(f"publication {name!r} does not exist; run the setup DAG ({config.name}__setup) or create it")
    all_tables, _ops, published = existing
    if all_tables:
        return [], set()
    if config.publication_autocreate_mode == "filtered" and not config.read_only:
        wanted = captured | ({config.signal_table} if config.signal_table else set())
        missing = wanted - published
        if not missing:
            return [], set()
        check_publication_privileges(conn, name, "filtered", missing, creating=False)
        conn.execute(
            sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                sql.Identifier(name), sql.SQL(", ").join(quote_table(s, t) for s, t in sorted(missing))
            )
        )
        names = ", ".join(f"{s}.{t}" for s, t in sorted(missing))
        warning = (
            f"publication {name!r} lacked table(s) {names}, which the filters capture (removed with ALTER PUBLICATION "
            "... DROP TABLE, or created since setup): added them back. Their changes made while they were not in the "
            "publication were never decoded and are missing from their topics: "
            + (
                "walflow re-reads them for the lake (an incremental snapshot)"
                if config.walflow_lake_enabled
                else "re-read them with an incremental snapshot "
                f"(an execute-snapshot signal, or the {config.name}__snapshot DAG)"
            )
        )
        log.warning("connector %s: %s", config.name, warning)
        return [warning], missing & captured
    recorded = (store.get(PUBLICATION_KEY) if store is not None else None) or {}
    if recorded.get("all_tables"):
        raise DriftError(
            f"publication {name!r} was FOR ALL TABLES when {config.name}__setup ran and no longer is: tables missing "
            f"from it are not streamed. Recreate it (CREATE PUBLICATION {name} FOR ALL TABLES, as a superuser) and "
            "snapshot the tables whose changes were missed, or run the setup DAG again to accept its new tables"
        )
    gone = sorted(
        (s, t)
        for s, t in (tuple(pair) for pair in recorded.get("tables") or [])
        if (s, t) in captured and (s, t) not in published
    )
    if gone:
        raise DriftError(
            f"table(s) {', '.join(f'{s}.{t}' for s, t in gone)} left publication {name!r} "
            f"since {config.name}__setup ran, so their changes are "
            f"no longer streamed; with publication.autocreate.mode={config.publication_autocreate_mode!r} walflow does "
            f"not change the publication itself. Add them back (ALTER PUBLICATION {name} ADD TABLE ...) and re-read "
            "them with an incremental snapshot, or, if they left on purpose, run the setup DAG again to accept it"
        )
    return [], set()


# -- keys ---------------------------------------------------------------------------------------------------------
#: Kafka Connect integer and floating types, each a widening of the ones before it.
_WIDER = {"int8": 0, "int16": 1, "int32": 2, "int64": 3, "float": 10, "float32": 10, "float64": 11, "double": 11}


def key_signature(table: TableSchema) -> list[list[str]]:
    """The shape of a table's event key: (field, Kafka Connect type, semantic name) per key field."""
    # TableSchema builds the key's struct schema with a list of field schemas (dicts)
    fields = cast(list[dict[str, Any]], table.key_struct_schema["fields"])
    return [[str(f.get("field")), str(f.get("type")), str(f.get("name") or "")] for f in fields]


def _widening(old: list[list[str]], new: list[list[str]]) -> bool:
    if [f[0] for f in old] != [f[0] for f in new]:
        return False
    for (_, old_type, old_name), (_, new_type, new_name) in zip(old, new):
        if old_type == new_type and old_name == new_name:
            continue
        a, b = _WIDER.get(old_type), _WIDER.get(new_type)
        if a is None or b is None or old_name or new_name or b < a or (a < 10) != (b < 10):
            return False
    return True


class KeyRegistry:
    """The accepted key schemas of the captured tables, read once per batch and extended as tables appear."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        raw = store.get(KEYS_KEY) or {}
        self._keys: dict[str, list[Any]] = raw if isinstance(raw, dict) else {}
        self._checked: set[tuple[str, str]] = set()

    def check(self, table: TableSchema, connector: str) -> None:
        """Accept a new table's key, warn about a widening, refuse any other change of a known table's key."""
        signature = key_signature(table)
        marker = (table.data_collection, repr(signature))
        if marker in self._checked:
            return
        accepted = self._keys.get(table.data_collection)
        if not accepted:
            self._accept(table.data_collection, signature)
        elif signature not in accepted:
            latest = accepted[-1]
            if not (latest and signature) or _widening(latest, signature):
                log.warning(
                    "connector %s: the key of table %s changed from %s to %s (widened, or gained or lost its key); its "
                    "topic %s now holds both shapes",
                    connector,
                    table.data_collection,
                    _show(latest),
                    _show(signature),
                    table.topic,
                )
                self._accept(table.data_collection, signature)
            else:
                raise DriftError(
                    f"the key of table {table.data_collection} changed from {_show(latest)} to {_show(signature)} (the "
                    f"table was recreated, or its key columns altered): topic {table.topic!r} would hold keys of both "
                    "shapes, and consumers keyed on the old one (the lake among them) would break. Nothing of this "
                    f"batch from that table's first changed event on was confirmed. If the new key is intended, run "
                    f"{connector}__setup, which records the tables' current keys, and tell the topic's consumers; "
                    "otherwise restore the old key"
                )
        self._checked.add(marker)

    def accept_all(self, tables: Iterable[TableSchema]) -> None:
        """Setup: the current keys of every captured table become accepted (older ones stay, for the WAL before)."""
        for table in tables:
            signature = key_signature(table)
            accepted = self._keys.get(table.data_collection) or []
            if not accepted or accepted[-1] != signature:
                self._accept(table.data_collection, signature)

    def _accept(self, name: str, signature: list[list[str]]) -> None:
        accepted = [s for s in self._keys.get(name) or [] if s != signature]
        self._keys[name] = [*accepted, signature][-KEY_HISTORY:]
        self._store.put(KEYS_KEY, self._keys)


def _show(signature: list[list[str]]) -> str:
    if not signature:
        return "(no key)"
    return "(" + ", ".join(f"{field} {kind}{f' {name}' if name else ''}" for field, kind, name in signature) + ")"
