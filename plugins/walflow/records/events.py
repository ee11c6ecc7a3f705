"""Debezium change events: table schemas, keys, envelopes and their JSON converter form.

A :class:`TableSchema` is built once per table definition (a pgoutput Relation message, or the catalog for
a snapshot). It holds the per-column converters and the pre-serialised Kafka Connect schemas of the key
and the envelope, so that serialising a change event costs one ``orjson.dumps`` of its payload.

The format is the one the reference describes for the JSON converter: ``{"schema": ..., "payload": ...}``
for key and value (or the payload alone when ``key/value.converter.schemas.enable`` is false).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.errors import ConfigError, ConversionError, UnrepresentableValueError
from walflow.names import topic_name
from walflow.records.column_rules import ColumnRules, adjust_name, null_fallback, zero_default
from walflow.records.convert import ColumnConverter, ConverterSettings, build_converter
from walflow.records.decimals import SPECIAL_DECIMAL_NAMES
from walflow.records.envelope import PRE_2_6, envelope_schema
from walflow.records.rowcode import compile_json_row, compile_row
from walflow.source.catalog import CatalogColumn, CatalogTable, ColumnType, TypeResolver
from walflow.source.pgoutput import Relation

log = logging.getLogger(__name__)


_AVRO_FIRST_INVALID = re.compile(r"[^A-Za-z_]")
_AVRO_REST_INVALID = re.compile(r"[^A-Za-z0-9_.]")


def avro_name(name: str) -> str:
    """An Avro full name as Debezium's schema name adjuster makes it.

    The first character of the whole name must be a letter or ``_``; every other character a letter, digit,
    ``_`` or ``.``. Each invalid character is replaced by ``_`` (never prefixed), so ``1db.public.t.Value``
    becomes ``_db.public.t.Value`` while ``db.1schema.t.Value`` stays as it is.
    """
    if not name:
        return name
    return _AVRO_FIRST_INVALID.sub("_", name[0]) + _AVRO_REST_INVALID.sub("_", name[1:])


def schema_full_name(*parts: str) -> str:
    return avro_name(".".join(parts))


def record_schema_name(topic: str, suffix: str, mode: str = "none") -> str:
    """A record schema's name as Debezium 3.x makes it: the data topic's name (sanitised for Kafka, with the
    connector's ``topic.delimiter``), a dot and ``Key``/``Value``/``Envelope``, adjusted per
    ``schema.name.adjustment.mode`` (none by default)."""
    return adjust_name(f"{topic}.{suffix}", mode, allow_dots=True)


class Serializer:
    """The JSON converter pair: wraps payloads with their (pre-serialised) schema when enabled.

    ``key``/``value`` take the *envelope prefix* from :meth:`prefix` (``{"schema":…,"payload":``), computed
    once per table, so each record costs one ``orjson.dumps`` and one join.
    """

    def __init__(self, key_schemas: bool, value_schemas: bool) -> None:
        self.key_schemas = key_schemas
        self.value_schemas = value_schemas

    @staticmethod
    def prefix(schema: dict[str, Any]) -> bytes:
        return b'{"schema":' + orjson.dumps(schema) + b',"payload":'

    def key(self, prefix: bytes, payload: Any) -> bytes:
        if self.key_schemas:
            return b"".join((prefix, orjson.dumps(payload), b"}"))
        return orjson.dumps(payload)

    def value(self, prefix: bytes, payload: Any) -> bytes:
        if self.value_schemas:
            return b"".join((prefix, orjson.dumps(payload), b"}"))
        return orjson.dumps(payload)


@dataclass(frozen=True)
class FieldSpec:
    index: int  # position in the tuple PostgreSQL sends
    name: str  # field name in the event
    converter: ColumnConverter
    toast_value: Any


@dataclass(frozen=True)
class ColumnSpec:
    """One source column as the table schema needs it (from the catalog, or the WAL alone)."""

    name: str
    type: ColumnType
    not_null: bool = False
    default_text: str | None = None
    default_is_function: bool = False


def _place(schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Add keys to a field schema in the JSON converter's order: type … parameters, default, field."""
    out = {k: v for k, v in schema.items() if k not in ("default", "field")}
    if "parameters" in extra:
        out["parameters"] = {**out.get("parameters", {}), **extra.pop("parameters")}
    if "default" in extra:
        out["default"] = extra.pop("default")
    elif "default" in schema:
        out["default"] = schema["default"]
    out.update(extra)
    return out


class TableSchema:
    """Everything needed to turn one table's tuples into Debezium events."""

    def __init__(
        self,
        config: ConnectorConfig,
        filters: Filters,
        serializer: Serializer,
        schema: str,
        table: str,
        columns: Sequence[ColumnSpec],
        key_columns: Sequence[str],
        rules: ColumnRules | None = None,
        old_tuple_columns: Collection[str] | None = None,
        snapshot: bool = False,
    ) -> None:
        """Build the per-column converters and the serialised key and envelope schemas, once per definition.

        :param key_columns: the event key's columns (primary key, or unique key; empty for a null key).
        :param old_tuple_columns: the columns PostgreSQL writes into old tuples (the replica identity's),
            or ``None`` when every column is there (REPLICA IDENTITY FULL) or there are no old tuples (snapshots).
        :param snapshot: the rows come from a snapshot's query (Debezium reads them through JDBC, which shows in
            a few values: see :class:`~walflow.records.convert.ConverterSettings`).
        """
        self.schema = schema
        self.table = table
        self.data_collection = f"{schema}.{table}"
        #: what a transaction's source blocks are kept under (not the object's id: a table redefined mid-transaction
        #: is freed, and a later one may get its id)
        self.source_key = (schema, table)
        self.topic = topic_name(config.topic_prefix, schema, table, delimiter=config.topic_delimiter)
        self.column_names = [c.name for c in columns]
        rules = rules or ColumnRules(config)
        settings = ConverterSettings.from_config(config)
        if snapshot:
            settings = replace(settings, snapshot=True)
        placeholder = config.toasted_value_placeholder
        key_override = filters.message_key_columns(schema, table)
        key_names = list(key_override) if key_override else list(key_columns)
        missing = [k for k in key_names if k not in self.column_names]
        if missing:
            raise ConfigError(
                f"'message.key.columns' names column(s) {missing} that table {self.data_collection} does not have "
                f"(its columns: {self.column_names})"
            )
        fields: list[FieldSpec] = []
        #: (field, mask) of masked character columns: Debezium shows the mask for NULL as well
        masks: list[tuple[str, str]] = []
        #: key fields' schemas: without the parameters column mappers add (Debezium keeps them out of keys)
        key_schemas: dict[str, dict[str, Any]] = {}
        key_only: list[FieldSpec] = []
        for index, column in enumerate(columns):
            name, ctype = column.name, column.type
            is_key = name in key_names
            included = filters.column_included(schema, table, name)
            if not is_key and not included:
                continue
            converter = build_converter(ctype, settings)
            if converter is None:
                if is_key:
                    raise ConversionError(
                        f"key column {self.data_collection}.{name} has type {ctype.name or ctype.oid} that walflow "
                        "cannot represent; set 'include.unknown.datatypes: true' or choose 'message.key.columns'"
                    )
                _warn_unknown_once(self.data_collection, name, ctype)
                continue
            if converter.schema.get("name") in _PRECISE_DECIMALS and (
                column.not_null or is_key or config.event_converting_failure_handling_mode == "fail"
            ):
                converter = replace(converter, convert=_refusing_special(converter.convert))
            mapping = rules.mapping(schema, table, name, ctype)
            mapped = mapping.convert if mapping is not None else None
            if mapped is not None:
                converter = replace(converter, convert=_chain(converter.convert, mapped))
            extra: dict[str, Any] = {"optional": not column.not_null}
            if mapping is not None and mapping.parameters:
                extra["parameters"] = dict(mapping.parameters)
            has_default, default = _default_value(column, converter, ctype)
            if has_default:
                extra["default"] = default
            field_name = rules.field_name(name)
            key_schema = _place(
                converter.schema, **{k: v for k, v in extra.items() if k != "parameters"}, field=field_name
            )
            if converter.semantic == "geometry":
                extra["optional"] = True  # Debezium's geometry and geography fields are optional even for NOT NULL
            converter = replace(
                converter, schema=_place(converter.schema, **extra, field=field_name), optional=not column.not_null
            )
            toast = _toast_value(converter, ctype, placeholder, settings.binary_handling_mode)
            if mapped is not None:
                # the mapper acts on whatever the field holds: a TOAST placeholder is truncated or masked too
                toast = mapped(toast) if toast is not None else toast
                if mapping is not None and mapping.masked and mapped(None) is not None:
                    masks.append((field_name, mapped(None)))  # a character mask replaces NULL as well
            if not included:
                # a key column the column filters leave out: Debezium keeps it in the key, where (its catalog lookup
                # filtered too) it is optional, and out of the value
                key_schemas[field_name] = {**key_schema, "optional": True}
                key_only.append(FieldSpec(index, field_name, converter, toast))
                continue
            key_schemas[field_name] = key_schema
            fields.append(FieldSpec(index, field_name, converter, toast))
        self.fields = fields
        self._masks = masks
        # Debezium gives a NOT NULL column that holds no value (an old tuple of the replica identity's columns only)
        # its default, else its type's zero value
        self._not_null_fill = [
            (
                f.name,
                f.converter.schema["default"]
                if "default" in f.converter.schema
                else null_fallback(f.converter, columns[f.index].type),
            )
            for f in fields
            if not f.converter.optional
        ]
        #: fields whose null is written as their default (Kafka's JsonConverter, replace.null.with.default)
        self._null_defaults = (
            [(f.name, f.converter.schema["default"]) for f in fields if "default" in f.converter.schema]
            if config.replace_null_with_default
            else []
        )
        # (field name, tuple index, converter, TOAST placeholder): the shape row() converts, as generated code
        self._plan = [(f.name, f.index, f.converter.convert, f.toast_value) for f in fields]
        #: each field's value for a TOASTed column pgoutput left out (``unavailable.value.placeholder`` in its form)
        self.toast_values = [(f.name, f.toast_value) for f in fields]
        #: (tuple index, field name) of the fields whose unchanged TOASTed value Debezium writes as null, where a null
        #: cannot be told from a real one (arrays of most element types, bytea in base64 modes)
        self.null_toast = [(f.index, f.name) for f in fields if f.toast_value is None]
        #: the key's columns, and each column's type as ``format_type`` writes it (post processors query by key)
        self.key_columns = list(key_columns)
        self.column_types = {c.name: c.type.name for c in columns}
        self._row = compile_row(self._plan)
        by_name = {f.name: f for f in (*fields, *key_only)}
        self.key_fields = [by_name[rules.field_name(k)] for k in key_names]
        #: key fields that are not in the value (their column filtered out): key() converts them from the tuple
        self.key_only = key_only
        self.has_key = bool(self.key_fields)
        self._key_names = [f.name for f in self.key_fields]
        #: ``json_row(values) -> (row JSON, key payload JSON)`` for snapshots (:func:`compile_json_row`); None where
        #: a row needs more than its fields converted (masks replacing NULL, key fields outside the value) or where
        #: a name repeats (two columns' field names adjusted to one, or a column named twice in message.key.columns):
        #: the dicts keep one entry under it, the JSON would hold both
        distinct = len({f.name for f in fields}) == len(fields) and len(set(self._key_names)) == len(self._key_names)
        self.json_row = (
            compile_json_row(self._plan, self._key_names)
            if distinct and not (masks or key_only or self._null_defaults)
            else None
        )
        # Key columns outside the replica identity are absent (NULL) from old tuples: under REPLICA IDENTITY USING
        # INDEX on an index without the primary key, or with message.key.columns. Debezium keys such a before image
        # as it is (NOT NULL columns hold their default or zero value, see before_row): an update of the index
        # columns then changes the key, and a delete is keyed by those values. walflow does the same.
        absent = [] if old_tuple_columns is None else [k for k in key_names if k not in old_tuple_columns]
        #: key fields an old tuple does not carry
        self.key_fields_not_in_old = [rules.field_name(k) for k in absent]
        naming = config.schema_name_adjustment_mode
        self.value_schema_name = record_schema_name(self.topic, "Value", naming)
        self.key_schema_name = record_schema_name(self.topic, "Key", naming)
        value_struct = {
            "type": "struct",
            "fields": [f.converter.schema for f in fields],
            "optional": True,
            "name": self.value_schema_name,
        }
        self.value_struct_schema = value_struct
        self.key_struct_schema = {
            "type": "struct",
            # a key field is optional only when its column is nullable (a unique key or message.key.columns)
            "fields": [key_schemas[f.name] for f in self.key_fields],
            "optional": False,
            "name": self.key_schema_name,
        }
        envelope = envelope_schema(
            value_struct, record_schema_name(self.topic, "Envelope", naming), config.walflow_event_format == PRE_2_6
        )
        self.envelope_schema = envelope
        self.key_schema_json = serializer.prefix(self.key_struct_schema)
        self.value_schema_json = serializer.prefix(envelope)

    @classmethod
    def from_relation(
        cls,
        config: ConnectorConfig,
        filters: Filters,
        serializer: Serializer,
        relation: Relation,
        catalog_table: CatalogTable | None,
        rules: ColumnRules | None = None,
        types: TypeResolver | None = None,
    ) -> TableSchema:
        """The schema of a table as a Relation message describes it, completed from the catalog.

        The catalog is read now, the Relation message was written then: a column renamed or retyped since is
        matched to its catalog attribute where that is unambiguous (see :func:`match_columns`), and its type
        is looked up by the OID the Relation message gives, so enums, arrays, domains and extension types
        keep their representation and a NOT NULL column stays required.
        """
        types = types or (catalog_table.types if catalog_table is not None else None)
        matched = (
            match_columns(relation, catalog_table) if catalog_table is not None else [None] * len(relation.columns)
        )
        specs: list[ColumnSpec] = []
        for column, info in zip(relation.columns, matched):
            if (
                info is not None
                and info.attr_type_oid == column.type_oid
                and info.attr_type_modifier == column.type_modifier
            ):
                specs.append(
                    ColumnSpec(column.name, info.type, info.not_null, info.default_text, info.default_is_function)
                )
                continue
            if types is not None:
                ctype = types.resolve(column.type_oid, column.type_modifier)
            else:
                ctype = ColumnType(oid=column.type_oid, modifier=column.type_modifier)
            # NOT NULL survives a type change; a default evaluated for another type does not apply
            # without a catalog, identity columns (primary key or identity index) are known to be NOT NULL
            not_null = (
                info.not_null
                if info is not None
                else (catalog_table is None and column.is_key and relation.replica_identity in ("d", "i"))
            )
            specs.append(ColumnSpec(column.name, ctype, not_null))
        keys: list[str] = []
        flagged = [c.name for c in relation.columns if c.is_key]
        if relation.replica_identity == "d" and flagged:
            # Under REPLICA IDENTITY DEFAULT the Relation message flags the primary key the table had when the change
            # was written, which a connector reading in real time (Debezium) finds in the catalog; the catalog of
            # now may have another one, or none, after a later DDL in the same batch. The key's order is the
            # primary key's, which the catalog has when it is still the same key.
            keys = flagged
            if catalog_table is not None:
                current = {
                    info.name: column.name for column, info in zip(relation.columns, matched) if info is not None
                }
                if sorted(current.get(k, "") for k in catalog_table.key_columns) == sorted(flagged):
                    keys = [current[k] for k in catalog_table.key_columns]
        elif catalog_table is not None:
            current = {info.name: column.name for column, info in zip(relation.columns, matched) if info is not None}
            if catalog_table.key_columns and all(k in current for k in catalog_table.key_columns):
                keys = [current[k] for k in catalog_table.key_columns]
        elif relation.replica_identity in ("d", "i"):
            # no catalog (table dropped since): the replica identity is the primary key or the identity index
            keys = flagged
        if relation.replica_identity == "f":
            old_columns: list[str] | None = None
        else:
            old_columns = [c.name for c in relation.columns if c.is_key]
        return cls(
            config,
            filters,
            serializer,
            relation.namespace,
            relation.name,
            specs,
            keys,
            rules,
            old_tuple_columns=old_columns,
        )

    @classmethod
    def from_catalog(
        cls,
        config: ConnectorConfig,
        filters: Filters,
        serializer: Serializer,
        table: CatalogTable,
        rules: ColumnRules | None = None,
    ) -> TableSchema:
        """The schema of a table as the catalog describes it now (snapshots read it this way)."""
        specs = [
            ColumnSpec(c.name, c.type, c.not_null, c.default_text, c.default_is_function)
            for c in table.columns.values()
        ]
        return cls(
            config, filters, serializer, table.schema, table.name, specs, list(table.key_columns), rules, snapshot=True
        )

    # -- row conversion (hot path) --------------------------------------------------------------------
    def row(self, values: Sequence[Any]) -> dict[str, Any]:
        """The event row of a tuple's text values: each column converted (None stays None, a value that is not
        text is an unchanged TOASTed one and becomes the column's placeholder)."""
        try:
            row = self._row(values)
        except (ValueError, ArithmeticError) as exc:
            raise self._conversion_error(values, exc) from exc
        if self._masks:
            for name, mask in self._masks:
                if row[name] is None:
                    row[name] = mask
        if self._null_defaults:
            for name, default in self._null_defaults:
                if row[name] is None:
                    row[name] = default
        return row

    def before_row(self, values: Sequence[Any]) -> dict[str, Any]:
        """A row from an old tuple that holds only the replica identity's columns (``K``): the columns it lacks
        are NULL there, and NOT NULL ones get their default or zero value, as Debezium gives them."""
        row = self.row(values)
        for name, fill in self._not_null_fill:
            if row[name] is None:
                row[name] = fill
        return row

    def _conversion_error(self, values: Sequence[Any], exc: Exception) -> ConversionError:
        """Find which column failed (off the hot path) and say so with its value."""
        for spec in self.fields:
            value = values[spec.index]
            if isinstance(value, str):
                try:
                    spec.converter.convert(value)
                except (ValueError, ArithmeticError) as col_exc:
                    return ConversionError(
                        f"table {self.data_collection} column {spec.name!r}: cannot convert value "
                        f"{value[:200]!r} ({col_exc})",
                        unrepresentable=isinstance(col_exc, UnrepresentableValueError),
                    )
        return ConversionError(f"table {self.data_collection}: cannot convert a row ({exc})")

    def key(self, row: dict[str, Any], values: Sequence[Any] | None = None) -> dict[str, Any]:
        """The event key of a row (its key fields' values, as they are in that row); ``values``, the tuple the row was
        converted from, gives the key fields the value leaves out."""
        if self.key_only and values is not None:
            extra = {
                f.name: None if not isinstance(values[f.index], str) else f.converter.convert(values[f.index])
                for f in self.key_only
            }
            return {name: row[name] if name in row else extra[name] for name in self._key_names}
        return {name: row[name] for name in self._key_names}


def match_columns(relation: Relation, table: CatalogTable) -> list[CatalogColumn | None]:
    """For each column of a Relation message, the catalog column that is the same attribute, or ``None``.

    A Relation message may be older than the catalog: columns can have been renamed, dropped or added
    since. Same-named columns anchor the match. Between two anchors (or before the first, or after the
    last), the unmatched Relation columns are the catalog attributes there, renamed or dropped since, when
    their numbers agree; after the last anchor also when the first of more attributes are all live
    (attributes added later come last, but a column dropped before the Relation message was written could
    not be told apart). Anything ambiguous is left unmatched: wrongly claiming NOT NULL would be worse
    than not knowing it.
    """
    columns = relation.columns
    result: list[CatalogColumn | None] = [None] * len(columns)
    attrs = table.attributes
    position = {name: i for i, (_, name) in enumerate(attrs) if name is not None}
    anchors: list[tuple[int, int]] = []
    for i, column in enumerate(columns):
        pos = position.get(column.name)
        if pos is not None and (not anchors or pos > anchors[-1][1]):
            result[i] = table.columns[column.name]
            anchors.append((i, pos))
    names = {c.name for c in columns}
    # each gap between successive anchors (the first from the start, the last to the end, which has no position)
    lefts = [(-1, -1), *anchors]
    rights: list[tuple[int, int | None]] = [*anchors, (len(columns), None)]
    for (left_i, left_pos), (right_i, right_pos) in zip(lefts, rights):
        unmatched = [i for i in range(left_i + 1, right_i) if result[i] is None]
        if not unmatched:
            continue
        gap = list(attrs[left_pos + 1 : right_pos])
        # Equal numbers: nothing in the gap was dropped before, or added after, the Relation message.
        # After the last anchor, more attributes may be later additions; they come last, so the first ones
        # are the Relation's columns unless one of those first ones is dropped (maybe dropped before).
        exact = len(gap) == len(unmatched)
        tail_prefix = right_pos is None and len(gap) > len(unmatched) and all(n for _, n in gap[: len(unmatched)])
        if not (exact or tail_prefix):
            continue
        for i, (_, name) in zip(unmatched, gap):
            if name is not None and name not in names:
                result[i] = table.columns[name]
    return result


_WARNED_UNKNOWN: set[tuple[str, str]] = set()


def _warn_unknown_once(table: str, column: str, ctype: ColumnType) -> None:
    if (table, column) in _WARNED_UNKNOWN:
        return
    _WARNED_UNKNOWN.add((table, column))
    log.warning(
        "column %s.%s has type %s that walflow does not know; it is left out of the events "
        "(set 'include.unknown.datatypes: true' to carry it as bytes)",
        table,
        column,
        ctype.name or ctype.base_name or ctype.oid,
    )


def _chain(convert: Any, transform: Any) -> Any:
    return lambda text: transform(convert(text))


#: the schemas of numeric columns in ``decimal.handling.mode: precise``, which cannot carry NaN or an infinity
_PRECISE_DECIMALS = ("org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal")


def _refusing_special(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """``convert`` of a precise decimal column that may not hold null where the value is NaN or an infinity: a NOT
    NULL or key column, or any column under ``event.converting.failure.handling.mode: fail``. Debezium's converter
    gives null for such a value and the event then fails (a null in a required field), so the event is refused
    here, by :attr:`event.processing.failure.handling.mode`, instead of carrying a null its schema forbids."""

    def refusing(text: str) -> Any:
        if text in SPECIAL_DECIMAL_NAMES:
            raise UnrepresentableValueError(
                f"{text} cannot be carried by a decimal in decimal.handling.mode 'precise' (the column is NOT NULL or "
                "part of the key, or event.converting.failure.handling.mode is 'fail'); decimal.handling.mode "
                "'string' or 'double' carries it, and event.processing.failure.handling.mode 'warn' or 'skip' leaves "
                "such events out as Debezium does"
            )
        return convert(text)

    return refusing


def _default_value(column: ColumnSpec, converter: ColumnConverter, ctype: ColumnType) -> tuple[bool, Any]:
    """A literal default as the typed value; a function default as the type's zero value (as Debezium)."""
    if column.default_is_function:
        return zero_default(converter, ctype)
    if column.default_text is None:
        return False, None
    try:
        return True, converter.convert(column.default_text)
    except (ValueError, ArithmeticError):
        return False, None


#: Array element types whose unchanged TOASTed value Debezium fills with the placeholder's text, its bytes, or its
#: bytes as numbers; other arrays get null.
_TOAST_TEXT_ELEMENTS = frozenset({"text", "varchar", "bpchar", "json", "jsonb"})
_TOAST_NUMBER_ELEMENTS = frozenset({"int4", "date", "int8"})


def _toast_value(converter: ColumnConverter, ctype: ColumnType, placeholder: str, binary_mode: str) -> Any:
    """What an unchanged, unsent TOASTed value becomes: Debezium's placeholder (``toasted.value.placeholder``) in the
    form it gives each type: the text for text-like values, its bytes for binary ones, a one-entry map for hstore,
    and for arrays one element of text, bytes or a UUID derived from it, or the bytes as numbers."""
    if placeholder.startswith("hex:"):
        raw = bytes.fromhex(placeholder[4:])
        text = raw.decode("utf-8", errors="replace")
    else:
        raw = placeholder.encode("utf-8")
        text = placeholder
    schema = converter.schema
    if ctype.category == "A" and ctype.element is not None:
        element = ctype.element.base_name
        if element in _TOAST_TEXT_ELEMENTS:
            return [text]
        if element in _TOAST_NUMBER_ELEMENTS:
            return [b - 256 if b > 127 else b for b in raw]
        if element == "uuid":
            # java.util.UUID.nameUUIDFromBytes: an MD5 name-based (version 3) UUID of the bytes
            return [str(uuid.UUID(bytes=hashlib.md5(raw).digest(), version=3))]
        if element == "bytea" and binary_mode == "bytes":
            return [base64.b64encode(raw).decode("ascii")]
        return None
    if ctype.base_name == "hstore":
        return {text: text} if schema["type"] == "map" else orjson.dumps({text: text}).decode("utf-8")
    if ctype.base_name == "bytea" and binary_mode in ("base64", "base64-url-safe"):
        return None  # Debezium's base64 converters do not take the placeholder's text
    if schema["type"] == "string":
        return text
    if schema["type"] == "bytes":
        return base64.b64encode(raw).decode("ascii")
    return None


def now_ms() -> int:
    return int(time.time() * 1000)
