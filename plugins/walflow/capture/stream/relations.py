"""The captured tables' schemas during a stream batch, one per relation, built when its first change arrives.

PostgreSQL sends a Relation message before a table's first change in a decoding session and again after its
definition changes: each one drops the cached schema, and the next change builds it again from the message and the
catalog (with the keys as DDL left them, :mod:`walflow.source.ddl_facts`). Building a schema is also where a table's
topic and key are checked against what the connector claimed (:mod:`walflow.capture.drift`), where a changed
definition becomes a schema fact for the lake (:mod:`walflow.capture.schema_facts`), and where a renamed table that
left the filters is reported.
"""

from __future__ import annotations

import logging

from walflow.capture.context import CaptureContext
from walflow.capture.drift import KeyRegistry, check_topic_owner
from walflow.capture.rereads import Rereads
from walflow.capture.schema_facts import SchemaFacts, build_fact
from walflow.records.events import TableSchema
from walflow.source.catalog import Catalog
from walflow.source.ddl_facts import DdlFacts
from walflow.source.pgoutput import Relation

log = logging.getLogger("walflow.capture.stream")


class RelationSchemas:
    """The schema of each relation a batch reads (see the module's docstring).

    :param topic_owners: each captured table's topic, as the drift check found them (two tables on one topic fail).
    :param keys: the keys the connector recorded per table, checked when a schema is built (``None``: no state).
    :param facts: the schema facts for the lake, when the connector has one.
    :param rereads: the re-reads walflow starts for the lake, when the connector has one.
    """

    def __init__(
        self,
        context: CaptureContext,
        catalog: Catalog,
        ddl: DdlFacts,
        *,
        topic_owners: dict[str, str],
        keys: KeyRegistry | None,
        facts: SchemaFacts | None,
        rereads: Rereads | None,
    ) -> None:
        self.context = context
        self.catalog = catalog
        self.ddl = ddl
        self._topic_owners = topic_owners
        self._keys = keys
        self._facts = facts
        self._rereads = rereads
        self._schemas: dict[int, TableSchema | None] = {}
        #: relation OID -> LSN of its latest Relation message (where a new definition starts)
        self._relation_lsn: dict[int, int] = {}
        #: relation OID -> whether this batch captured it before its latest Relation message (renames)
        self._captured_before: dict[int, bool] = {}
        self._uncaptured_warned: set[int] = set()

    def on_relation(self, relation: Relation, lsn: int) -> None:
        """A Relation message at ``lsn``: the table's definition may have changed from here on."""
        rid = relation.relation_id
        self._relation_lsn[rid] = lsn
        previous = self._schemas.pop(rid, None)
        self._captured_before[rid] = previous is not None
        self.catalog.forget(rid)

    def schema(self, relation: Relation) -> TableSchema | None:
        """The captured table's schema for ``relation``, ``None`` when the filters leave the table out."""
        rid = relation.relation_id
        try:
            return self._schemas[rid]
        except KeyError:
            pass
        context = self.context
        config = context.config
        schema: TableSchema | None
        if self._rereads is not None:
            self._rereads.other_name(relation, self._relation_lsn.get(rid, 0))
        if not context.filters.table_included(relation.namespace, relation.name):
            schema = None
            self._warn_uncaptured(relation)
        else:
            schema = TableSchema.from_relation(
                config,
                context.filters,
                context.serializer,
                relation,
                self.ddl.apply(self.catalog.table(rid)),
                context.rules,
                types=self.catalog.types,
            )
            check_topic_owner(self._topic_owners, schema)
            if self._keys is not None:
                self._keys.check(schema, config.name)
            context.producer.ensure_topic(schema.topic)
            if self._facts is not None:
                self._observe_definition(self._facts, relation, schema)
        self._schemas[rid] = schema
        return schema

    def _observe_definition(self, facts: SchemaFacts, relation: Relation, schema: TableSchema) -> None:
        """Write the table's schema fact when its definition changed, and re-read a keyed table whose new column
        holds values walflow cannot know in the rows that existed before it (a per-row default, or a table
        rewritten since): an incremental snapshot of the table, so that the lake converges without anyone acting."""
        rid = relation.relation_id
        fact = build_fact(
            schema,
            relation,
            self.ddl.apply(self.catalog.table(rid)),
            self._relation_lsn.get(rid, 0),
            facts.previous(rid),
            facts.previous_storage(rid),
        )
        produced, before = facts.observe(rid, fact)
        if produced is None or before is None:
            return
        older = {attnum for _n, attnum, _f, _k in before.fields}
        # a whole read of the table (its snapshot, or a re-read) since the column was added gives its rows' values
        older |= self._rereads.covered(schema.schema, schema.table) if self._rereads is not None else set()
        unknown = [name for name, attnum, _f, known in produced.fields if not known and attnum not in older]
        if not unknown:
            return
        name = self.context.config.name
        if not produced.key:
            log.warning(
                "connector %s: table %s gained column(s) %s whose values in the rows that existed before walflow "
                "cannot know (a default evaluated per row, or a table rewritten since), and it has no key to re-read "
                "it by; the lake job stops at this table with the fix",
                name,
                schema.data_collection,
                unknown,
            )
            return
        if self._rereads is None:
            log.warning(
                "connector %s: table %s is not re-read (column(s) %s added with values walflow cannot know in the "
                "existing rows): the connector has no state table (its setup never ran)",
                name,
                schema.data_collection,
                unknown,
            )
            return
        self._rereads.start(
            schema.schema,
            schema.table,
            f"column(s) {unknown} added with values walflow cannot know in the existing rows",
            True,
            produced.lsn,
        )

    def _warn_uncaptured(self, relation: Relation) -> None:
        """Say so when a table that was captured no longer is: renamed or moved out of the filters.

        pgoutput sends only the publication's tables, and a ``filtered`` publication holds exactly the tables
        the filters captured when setup ran, so one of them failing the filters now was renamed (the publication
        follows the table's OID, the filters its name). Its changes are skipped, as Debezium skips a table that
        leaves the include list; the warning is what tells the operator before a consumer notices the silence.
        """
        config = self.context.config
        rid = relation.relation_id
        if config.signal_table == (relation.namespace, relation.name):
            return  # published for its signals, never captured
        was_captured = self._captured_before.get(rid, False)
        if not (was_captured or config.publication_autocreate_mode == "filtered") or rid in self._uncaptured_warned:
            return
        self._uncaptured_warned.add(rid)
        log.warning(
            "connector %s: table %s.%s (OID %d) is in publication %s but no longer captured by the table/schema "
            "include and exclude lists (renamed or moved?); its changes are skipped. Add the new name to "
            "table.include.list to capture it, or re-run %s__setup so the publication matches the filters.",
            config.name,
            relation.namespace,
            relation.name,
            rid,
            config.publication_name,
            config.name,
        )
