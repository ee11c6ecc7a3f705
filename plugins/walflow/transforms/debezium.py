"""Debezium's transforms (``io.debezium.transforms``) on :class:`~walflow.transforms.record.Record` s:
``ExtractNewRecordState`` (the row state instead of the envelope) and ``ByLogicalTableRouter`` (several tables on one
topic). Both leave records that are not change events (transaction metadata, heartbeats, logical messages) as they
are, as Debezium's do: a change event is a record whose value schema's name ends with ``.Envelope``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from walflow.errors import ConfigError
from walflow.records.column_rules import adjust_name
from walflow.transforms.connect import Transform
from walflow.transforms.javaregex import JavaPattern
from walflow.transforms.record import Codec, Record, Schema, as_field, copy_basics, field_of, get, struct, top_level


def is_envelope(schema: Schema | None) -> TypeGuard[Schema]:
    return schema is not None and str(schema.get("name") or "").endswith(".Envelope")


#: the envelope's fields outside ``source`` and ``transaction``, and the transaction block's, by which an unqualified
#: name in ``add.fields`` is found
_TOP_LEVEL = {"op", "ts_ms", "ts_us", "ts_ns"}
_TRANSACTION = {"id", "total_order", "data_collection_order"}


class _FieldReference:
    """One item of ``add.fields``/``add.headers``: ``[struct.]field[:new_name]``; an unqualified field belongs to
    ``transaction`` (``id``, ``total_order``, ``data_collection_order``), to the envelope (``op``, ``ts_ms``...) or
    else to ``source``; the new name is the prefix and ``[struct_]field``, or the prefix and ``new_name``."""

    def __init__(self, prefix: str, text: str) -> None:
        parts = text.split(":")
        if len(parts) > 2:
            raise ConfigError(f"unexpected field name {text!r} in add.fields/add.headers (one ':' at most)")
        path = parts[0].split(".")
        self.field = path[0] if len(path) == 1 else path[1]
        if len(path) == 1:
            self.struct: str | None = (
                "transaction" if self.field in _TRANSACTION else None if self.field in _TOP_LEVEL else "source"
            )
        else:
            self.struct = path[0]
        if len(parts) == 2:
            self.new_name = prefix + parts[1]
        else:
            self.new_name = prefix + (self.field if len(path) == 1 else f"{self.struct}_{self.field}")

    def schema(self, envelope_schema: Schema | None) -> Schema | None:
        """The added field's schema (the original's type, name and parameters, optional), or ``None`` when the
        envelope has no such field (or no schema)."""
        parent = field_of(envelope_schema, self.struct) if self.struct else envelope_schema
        found = field_of(parent, self.field) if parent is not None else None
        if found is None:
            found = field_of(envelope_schema, self.field)
        return None if found is None else copy_basics(found, optional=True)

    def value(self, envelope_schema: Schema | None, envelope: dict[str, Any]) -> Any:
        """The field's value as Debezium reads it (``getWithoutDefault``): a value the record holds only as its
        field's default (``source.snapshot`` of a streamed change, ``"false"``) is null there."""
        parent = envelope.get(self.struct) if self.struct else envelope
        if parent is None:
            return None
        parent_schema = field_of(envelope_schema, self.struct) if self.struct else envelope_schema
        field = field_of(parent_schema, self.field)
        if field is None:
            field, parent = field_of(envelope_schema, self.field), envelope
        data = parent.get(self.field)
        if field is not None and data is not None and data == field.get("default"):
            return None
        return data


class ExtractNewRecordState(Transform):
    """The ``after`` state as the record's value (``before`` for a rewritten delete), with ``add.fields`` from the
    envelope, ``add.headers`` as headers, deletes and tombstones as ``delete.tombstone.handling.mode`` says, and
    truncates dropped."""

    def __init__(self, alias: str, settings: Mapping[str, Any], codec: Codec) -> None:
        self.name = alias
        self.codec = codec
        self.mode = settings["delete.tombstone.handling.mode"]
        self.route = settings["route.by.field"] or None
        self.fields = [_FieldReference(settings["add.fields.prefix"], f) for f in settings["add.fields"]]
        self.headers = [_FieldReference(settings["add.headers.prefix"], f) for f in settings["add.headers"]]
        self.replace_null = bool(settings["replace.null.with.default"])
        self.drop_header = settings["drop.fields.header.name"] or None
        self.drop_from_key = bool(settings["drop.fields.from.key"])
        self.keep_compatible = bool(settings["drop.fields.keep.schema.compatible"])
        self._schemas: dict[tuple[int, int, str], tuple[Schema, Schema, Schema]] = {}

    def apply(self, record: Record) -> Record | None:
        tombstone = record.value is None
        envelope = is_envelope(record.value_schema)
        if (envelope or tombstone) and self.headers:
            record = record.replace(headers=record.headers + self._headers(record))
        if tombstone:
            return record if self.mode == "rewrite-with-tombstone" else None
        if not envelope:
            return record
        schema = record.value_schema
        assert schema is not None
        value = record.value
        after = value.get("after")
        if after is None and value.get("before") is None:
            return None  # a truncate
        if after is None:
            if self.mode == "drop":
                return None
            if self.mode == "tombstone":
                after_schema = field_of(schema, "after")
                assert after_schema is not None  # an envelope has its after field
                new = record.replace(value_schema=top_level(after_schema), value=None)
            elif self.mode == "delete-to-tombstone":
                new = record.replace(value_schema=None, value=None)
            else:
                new = self._deleted(record, "before", "true")
            if self.route and new.value is not None:
                new = self._routed(new, value["before"])
            new = self._drop_fields(new)
            if new.value is not None:
                new = self._add_fields(record, new)
            return new
        if self.mode in ("rewrite", "rewrite-with-tombstone"):
            new = self._deleted(record, "after", "false")
        else:
            new = self._extracted(record)
        if self.route:
            new = self._routed(new, new.value)
        new = self._add_fields(record, new)
        return self._drop_fields(new)

    def _extracted(self, record: Record) -> Record:
        """``after`` as Kafka's ExtractField gives it (seen from Debezium 3.6.3): a required struct of the same name.
        (Its nulls were written as their fields' defaults already, where the converter does so:
        :attr:`ConnectorConfig.replace_null_with_default`.)"""
        envelope_schema = record.value_schema
        assert envelope_schema is not None
        key = (id(envelope_schema), 0, "after")
        cached = self._schemas.get(key)
        if cached is None:
            after_schema = field_of(envelope_schema, "after")
            assert after_schema is not None
            cached = self._schemas[key] = (
                envelope_schema,
                after_schema,
                struct(after_schema["fields"], optional=False, basics=after_schema),
            )
        return record.replace(value_schema=cached[2], value=record.value["after"])

    def _deleted(self, record: Record, state: str, deleted: str) -> Record:
        """``before``/``after`` with Kafka's InsertField of ``__deleted`` (its struct required, nulls read as
        defaults)."""
        envelope_schema = record.value_schema
        assert envelope_schema is not None
        state_schema = field_of(envelope_schema, state)
        assert state_schema is not None
        key = (id(envelope_schema), id(state_schema), "__deleted")
        cached = self._schemas.get(key)
        if cached is None:
            new_schema = struct(
                [*state_schema["fields"], {"type": "string", "optional": True, "field": "__deleted"}],
                optional=False,
                basics=state_schema,
            )
            cached = self._schemas[key] = (envelope_schema, state_schema, new_schema)
        row = record.value[state]
        out = {f["field"]: get(row, f, self.replace_null) for f in state_schema["fields"]}
        out["__deleted"] = deleted
        return record.replace(value_schema=cached[2], value=out)

    def _routed(self, record: Record, row: dict[str, Any]) -> Record:
        topic = row.get(self.route) if self.route is not None and isinstance(row, dict) else None
        return record.replace(topic=topic) if isinstance(topic, str) and topic.strip() else record

    def _add_fields(self, original: Record, new: Record) -> Record:
        if not self.fields or not isinstance(new.value, dict) or new.value_schema is None:
            return new
        envelope_schema = original.value_schema
        assert envelope_schema is not None
        key = (id(envelope_schema), id(new.value_schema), "add")
        cached = self._schemas.get(key)
        if cached is None:
            added = [(ref, ref.schema(envelope_schema)) for ref in self.fields]
            fields = list(new.value_schema["fields"]) + [as_field(s, ref.new_name) for ref, s in added if s is not None]
            cached = self._schemas[key] = (
                envelope_schema,
                new.value_schema,
                struct(fields, optional=False, basics=new.value_schema),
            )
        out = dict(new.value)
        for ref in self.fields:
            if ref.schema(envelope_schema) is not None:
                out[ref.new_name] = ref.value(envelope_schema, original.value)
        return new.replace(value_schema=cached[2], value=out)

    def _headers(self, record: Record) -> list[tuple[str, bytes | None]]:
        headers: list[tuple[str, bytes | None]] = []
        for ref in self.headers:
            if record.value is None:
                if ref.field == "op":
                    headers.append((ref.new_name, self.codec.header({"type": "string", "optional": False}, "d")))
                continue
            schema = ref.schema(record.value_schema)
            if schema is not None:
                headers.append((ref.new_name, self.codec.header(schema, ref.value(record.value_schema, record.value))))
        return headers

    def _drop_fields(self, record: Record) -> Record:
        if not self.drop_header:
            return record
        raw = next((data for name, data in record.headers if name == self.drop_header), None)
        names = self.codec.header_value(raw)
        if not names or not isinstance(names, list):
            return record
        if self.drop_from_key and record.key is not None:
            record = self._drop(record, "key", names)
        return self._drop(record, "value", names)

    def _drop(self, record: Record, part: str, names: list[str]) -> Record:
        schema, data = record.part(part)
        if schema is None or not isinstance(data, dict):
            return record
        drop = {
            f["field"]
            for f in schema["fields"]
            if f["field"] in names and (f.get("optional") or not self.keep_compatible)
        }
        if not drop:
            return record
        fields = [f for f in schema["fields"] if f["field"] not in drop]
        kept = struct(fields, optional=False, basics=schema)
        return record.with_part(part, kept, {f["field"]: get(data, f, True) for f in fields})


class ByLogicalTableRouter(Transform):
    """Records of the topics ``topic.regex`` matches sent to ``topic.replacement``; their key gains the physical
    table's topic (``key.field.name``, unless ``key.enforce.uniqueness`` is off) and their schemas the new topic's
    names (``<topic>.Key``, ``<topic>.Value``, ``<topic>.Envelope``)."""

    def __init__(self, alias: str, settings: Mapping[str, Any]) -> None:
        self.name = alias
        self.topic_pattern = JavaPattern(settings["topic.regex"], f"transform {alias!r}")
        self.topic_replacement = settings["topic.replacement"]
        self.unique = bool(settings["key.enforce.uniqueness"])
        self.key_field = settings["key.field.name"]
        key_regex = (settings["key.field.regex"] or "").strip()
        self.key_pattern = JavaPattern(key_regex, f"transform {alias!r}") if key_regex else None
        self.key_replacement = settings["key.field.replacement"] or ""
        self.adjust = settings["schema.name.adjustment.mode"]
        self._topics: dict[str, str | None] = {}
        self._schemas: dict[tuple[int, str], tuple[Schema, Schema]] = {}

    def _name(self, text: str) -> str:
        return adjust_name(text, self.adjust, allow_dots=True)

    def apply(self, record: Record) -> Record | None:
        old = record.topic
        topic = self._topics.get(old, "")
        if topic == "":
            topic = self._topics[old] = self.topic_pattern.replace_first(old, self.topic_replacement)
        if not topic:
            return record
        key_schema, key = None, None
        if record.key is not None and record.key_schema is not None:
            key_schema = self._key_schema(record.key_schema, topic)
            key = dict(record.key)
            if self.unique:
                physical = old
                if self.key_pattern is not None:
                    physical = self.key_pattern.replace_first(old, self.key_replacement) or old
                key[self.key_field] = physical
        if record.value is None or not is_envelope(record.value_schema):
            return record.replace(topic=topic, key_schema=key_schema, key=key)
        envelope_schema = self._envelope_schema(record.value_schema, topic)
        return record.replace(topic=topic, key_schema=key_schema, key=key, value_schema=envelope_schema)

    def _key_schema(self, schema: Schema, topic: str) -> Schema:
        cached = self._schemas.get((id(schema), topic))
        if cached is None:
            fields = list(schema["fields"])
            if self.unique:
                fields.append({"type": "string", "optional": False, "field": self.key_field})
            new = struct(
                fields, optional=bool(schema.get("optional")), basics={**schema, "name": self._name(f"{topic}.Key")}
            )
            cached = self._schemas[(id(schema), topic)] = (schema, new)
        return cached[1]

    def _envelope_schema(self, schema: Schema, topic: str) -> Schema:
        cached = self._schemas.get((id(schema), topic))
        if cached is None:
            before = field_of(schema, "before")
            assert before is not None
            value_schema = struct(
                before["fields"],
                optional=bool(before.get("optional")),
                basics={**before, "name": self._name(f"{topic}.Value")},
            )
            fields = [
                as_field(value_schema, f["field"]) if f["field"] in ("before", "after") else f for f in schema["fields"]
            ]
            new = struct(
                fields,
                optional=bool(schema.get("optional")),
                basics={**schema, "name": self._name(f"{topic}.Envelope")},
            )
            cached = self._schemas[(id(schema), topic)] = (schema, new)
        return cached[1]
