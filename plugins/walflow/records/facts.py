"""The schema topic's facts as both sides read them: the writer (:mod:`walflow.capture.schema_facts`) and the lake
job, whose executors import this module (plain Python only).
"""

from __future__ import annotations

import time
from typing import Any

import orjson


def field_type(schema: dict[str, Any]) -> str:
    """A field's type as its events' schema says it, without its default and name: the form of a fact's ``types``
    (written by :mod:`walflow.capture.schema_facts`, compared by :mod:`walflow.lake.evolution`)."""
    return orjson.dumps(
        {k: v for k, v in schema.items() if k not in ("default", "field")}, option=orjson.OPT_SORT_KEYS
    ).decode()


#: the version of the facts' format: the ``format`` field of every fact; the lake reads only the facts of its version
FORMAT = 1
#: the kind of a start fact: where a lake table with no offsets of its own starts reading its topic
#: (:func:`walflow.capture.schema_facts.start_record`)
START_KIND = "start"
#: the kind of a sweep fact: the lake removes a table's rows older than its position once a re-read of the table is
#: applied (:func:`walflow.capture.rereads.sweep_record`)
SWEEP_KIND = "sweep"
#: the kind of a stale fact: a table without key whose rows changed without events; the lake stops at it
#: (:func:`walflow.capture.rereads.stale_record`)
STALE_KIND = "stale"
#: the kind of a left-out fact: an event of a table that the connector left out under
#: ``event.processing.failure.handling.mode`` warn or skip; the lake marks the table incomplete
#: (:func:`walflow.capture.failures.left_out_record`)
LEFT_OUT_KIND = "left_out"
#: the lake table property that counts the events of its source table the connector left out, and says where the last
#: ones were (JSON): the table is incomplete
INCOMPLETE_PROPERTY = "walflow.incomplete"
#: the kinds of facts besides table definitions (which have ``fields`` and no kind)
FACT_KINDS = (START_KIND, SWEEP_KIND, STALE_KIND, LEFT_OUT_KIND)
#: the header of a change event whose row holds unchanged TOASTed values that Debezium writes as null (arrays of most
#: element types, bytea in base64 modes), where the lake could not tell them from real nulls: the JSON list of those
#: fields. Written only with the lake on (Debezium's records have no such header; consumers ignore unknown headers).
UNAVAILABLE_HEADER = "__walflow.unavailable"


def fact_record(kind: str, schema: str, table: str, **fields: Any) -> tuple[bytes, bytes]:
    """The schema topic's record (key, value) of one fact of ``kind`` about ``schema.table``: keyed by the table, in
    the facts' format, with ``fields`` and the time it was written (``at_ms``)."""
    key = orjson.dumps({"schema": schema, "table": table})
    value = {
        "format": FORMAT,
        "kind": kind,
        "schema": schema,
        "table": table,
        **fields,
        "at_ms": int(time.time() * 1000),
    }
    return key, orjson.dumps(value)
