"""Debezium's outbox event router (``io.debezium.transforms.outbox.EventRouter``): each row inserted into an
outbox table becomes an event on its aggregate's topic.

A created (or snapshot-read) row of the outbox table gives one record: its topic is the ``route.by.field`` column
(``aggregatetype``) put through ``route.topic.regex``/``route.topic.replacement`` (``outbox.event.<type>``), its key
the ``table.field.event.key`` column (``aggregateid``) with that column's schema, its value the ``payload`` column
alone, or a struct of the payload and the columns ``table.fields.additional.placement`` puts in the ``envelope``;
the event id goes to header ``id``, and columns placed in the ``header`` to headers of their alias. Deletes and
tombstones are dropped, updates dropped with a warning (``table.op.invalid.behavior``: ``error`` logs an error,
``fatal`` stops the batch), and a null or empty payload is a tombstone with ``route.tombstone.on.empty.payload``.
Records that are not change events pass unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson

from walflow.errors import TransformError
from walflow.transforms.connect import Transform
from walflow.transforms.debezium import is_envelope
from walflow.transforms.javaregex import JavaPattern
from walflow.transforms.json_payload import ExpansionFailed, ExpansionRefused, expand
from walflow.transforms.record import Codec, Record, Schema, as_field, field_of, get, struct, top_level

log = logging.getLogger(__name__)


class EventRouter(Transform):
    def __init__(self, alias: str, settings: Mapping[str, Any], codec: Codec) -> None:
        self.name = alias
        self.codec = codec
        self.event_id = settings["table.field.event.id"]
        self.event_key = settings["table.field.event.key"] or None
        self.payload = settings["table.field.event.payload"]
        self.timestamp = settings["table.field.event.timestamp"] or None
        self.version = settings["table.field.event.schema.version"] or None
        self.route_by = settings["route.by.field"]
        self.pattern = JavaPattern(settings["route.topic.regex"], f"transform {alias!r}")
        self.replacement = settings["route.topic.replacement"]
        self.tombstone_on_empty = bool(settings["route.tombstone.on.empty.payload"])
        self.invalid_op = settings["table.op.invalid.behavior"]
        self.ignore_missing = settings["table.field.additional.missing"] == "ignore"
        self.expand = bool(settings["table.expand.json.payload"])
        self.null_as_bytes = settings["table.json.payload.null.behavior"] == "optional_bytes"
        self.additional: list[tuple[str, str, str]] = []
        for item in settings["table.fields.additional.placement"]:
            parts = [p.strip() for p in item.split(":")]
            self.additional.append((parts[0], parts[1], parts[2] if len(parts) == 3 else parts[0]))
        self.only_headers = not any(placement == "envelope" for _, placement, _ in self.additional)
        self._topics: dict[str, str] = {}
        self._schemas: dict[tuple[int, str, str], tuple[Schema, Schema]] = {}
        #: the value schemas by the row's schema version (the version column's value, whatever its type)
        self._versioned: dict[Any, Schema] = {}

    def apply(self, record: Record) -> Record | None:
        if record.value is None:
            return None  # tombstones
        if not is_envelope(record.value_schema):
            return record
        op = record.value.get("op")
        if op == "d":
            return None
        if op == "u":
            if self.invalid_op == "fatal":
                raise TransformError(
                    f"transform {self.name!r}: an update of outbox table row {record.key!r} (topic {record.topic!r}); "
                    "outbox rows are only inserted. Set table.op.invalid.behavior to warn or error to skip such "
                    "updates"
                )
            (log.error if self.invalid_op == "error" else log.warning)(
                "Unexpected update message received %s and ignored", record.key
            )
            return None
        schema = field_of(record.value_schema, "after")
        row = record.value.get("after")
        if schema is None or not isinstance(row, dict):
            return None
        fields = {f["field"]: f for f in schema["fields"]}
        payload_field = self._field(fields, self.payload, "payload", record)
        id_field = self._field(fields, self.event_id, "event-id", record)
        if self.timestamp is not None:
            self._check_timestamp(self.timestamp, fields, record)
        payload = get(row, payload_field, True)
        if self.expand:
            payload_field, payload = self._expanded(payload_field, payload, record)
        routed = get(row, self._field(fields, self.route_by, "route-by", record), True)
        headers = [*record.headers, ("id", self.codec.header(top_level(id_field), get(row, id_field, True)))]
        value_schema: Schema | None
        if self.only_headers:
            value_schema, value = top_level(payload_field), payload
        else:
            value_schema = self._value_schema(schema, fields, payload_field, str(routed), row, record)
            value = {"payload": payload}
        for name, placement, alias in self.additional:
            field = fields.get(name)
            if field is None:
                if self.ignore_missing:
                    continue
                raise TransformError(
                    f"transform {self.name!r}: unable to find field {name!r} in the outbox event of topic "
                    f"{record.topic!r}"
                )
            if placement == "envelope":
                value[alias] = get(row, field, True)
            else:
                headers.append((alias, self.codec.header(top_level(field), get(row, field, True))))
        if self.tombstone_on_empty and (payload is None or not str(payload).strip()):
            value_schema, value = None, None
        key_field = fields.get(self.event_key) if self.event_key else None
        key_schema = top_level(key_field) if key_field is not None else {"type": "string", "optional": False}
        if self.event_key and key_field is None:
            raise TransformError(
                f"transform {self.name!r}: {self.event_key!r} is not a valid field name of the outbox event of topic "
                f"{record.topic!r}"
            )
        key = get(row, key_field, True) if key_field is not None else None
        topic = self._topic(routed, record)
        return Record(topic, key_schema, key, value_schema, value, headers)

    def _expanded(self, field: Schema, payload: Any, record: Record) -> tuple[Schema, Any]:
        """The payload and its field's schema, a JSON text expanded into a struct (``table.expand.json.payload``);
        as they were when the text is not an object Debezium would expand (logged, as Debezium logs it)."""
        if isinstance(payload, str):
            try:
                schema, value = expand(payload, self.payload, self.null_as_bytes)
            except ExpansionFailed as exc:
                log.warning("JSON expansion failed: %s", exc)
                return field, payload
            except ExpansionRefused as exc:
                raise TransformError(
                    f"transform {self.name!r}: the JSON payload of outbox event {record.key!r} (topic "
                    f"{record.topic!r}) cannot be expanded: {exc}. Debezium's connector stops on it too; turn "
                    "table.expand.json.payload off, or write that event's payload as a JSON object whose numbers fit "
                    "64 bits"
                ) from None
            return {**schema, "field": field["field"]}, value
        if payload is not None:
            log.warning("Expand JSON payload is turned on but payload is not a string in %s", record.key)
        return field, payload

    def _field(self, fields: dict[str, Schema], name: str, what: str, record: Record) -> Schema:
        field = fields.get(name)
        if field is None:
            raise TransformError(
                f"transform {self.name!r}: unable to find {what} field {name!r} in the event of topic "
                f"{record.topic!r}; limit the router to the outbox table (table.include.list, or a TopicNameMatches "
                "predicate)"
            )
        return field

    def _check_timestamp(self, name: str, fields: dict[str, Schema], record: Record) -> None:
        field = fields.get(name)
        if field is None:
            raise TransformError(
                f"transform {self.name!r}: unable to find timestamp field {name!r} in the event of topic "
                f"{record.topic!r}"
            )
        if field.get("name") not in (
            "io.debezium.time.Timestamp",
            "io.debezium.time.MicroTimestamp",
            "io.debezium.time.NanoTimestamp",
        ):
            raise TransformError(
                f"transform {self.name!r}: timestamp field {name!r} has type "
                f"{field.get('name') or field['type']!r}; Debezium reads an event timestamp from a timestamp column "
                "only"
            )

    def _topic(self, routed: Any, record: Record) -> str:
        if not isinstance(routed, str):
            raise TransformError(
                f"transform {self.name!r}: route-by field {self.route_by!r} is {routed!r} in the event of topic "
                f"{record.topic!r}, not text"
            )
        topic = self._topics.get(routed)
        if topic is None:
            topic = self._topics[routed] = self.pattern.replace_first(routed, self.replacement) or routed
        return topic

    def _value_schema(
        self,
        schema: Schema,
        fields: dict[str, Schema],
        payload_field: Schema,
        routed: str,
        row: dict[str, Any],
        record: Record,
    ) -> Schema:
        if self.version is not None:
            version = row.get(self.version)
            known = self._versioned.get(version)
            if known is None:
                known = self._versioned[version] = {
                    **self._build(schema, fields, payload_field, routed, record),
                    "version": version,
                }
            return known
        # an expanded payload's schema is the payload's own: the cache is keyed by it (Debezium keys by the payload's
        # schema too)
        payload_key = orjson.dumps(payload_field).decode() if self.expand else ""
        cached = self._schemas.get((id(schema), routed, payload_key))
        if cached is None:
            cached = self._schemas[(id(schema), routed, payload_key)] = (
                schema,
                self._build(schema, fields, payload_field, routed, record),
            )
        return cached[1]

    def _build(
        self, schema: Schema, fields: dict[str, Schema], payload_field: Schema, routed: str, record: Record
    ) -> Schema:
        parts = [as_field(payload_field, "payload")]
        for name, placement, alias in self.additional:
            if placement != "envelope":
                continue
            field = fields.get(name)
            if field is None:
                if self.ignore_missing:
                    continue
                raise TransformError(
                    f"transform {self.name!r}: unable to find field {name!r} in the outbox event of topic "
                    f"{record.topic!r}"
                )
            parts.append(as_field(field, alias))
        original = schema.get("name")
        if original:
            head, dot, tail = original.rpartition(".")
            name = f"{head}.{routed}.{tail}" if dot else f"{routed}.{original}"
        else:
            name = routed
        return struct(parts, optional=False, basics={"name": name})
