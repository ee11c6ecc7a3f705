"""Kafka Connect's transforms (``org.apache.kafka.connect.transforms``, Kafka 4.3 as Debezium 3.6.3 bundles it) and
its predicates, on :class:`~walflow.transforms.record.Record` s.

Each works as Kafka's class does on a record with schemas: the struct transforms (``ReplaceField``, ``MaskField``,
``InsertField``, ``TimestampConverter``) act on the top-level fields of the key or the value and build the new
schema as Kafka's ``SchemaUtil.copySchemaBasics`` does (a required struct with the old one's name, version, doc and
parameters); a null field with a default reads as the default while ``replace.null.with.default`` holds, as
``Struct.get`` does. A tombstone passes the struct transforms unchanged, but ``MaskField``, which fails on it as
Kafka's does.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import decimal
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from walflow.errors import ConfigError, TransformError
from walflow.transforms.javaregex import JavaPattern
from walflow.transforms.record import Record, Schema, as_field, get, require_struct, struct


class Transform:
    """A configured transform: :meth:`apply` returns the new record, or ``None`` to drop it."""

    name = "transform"

    def apply(self, record: Record) -> Record | None:
        raise NotImplementedError


class RegexRouter(Transform):
    def __init__(self, alias: str, settings: Mapping[str, Any]) -> None:
        self.name = alias
        self.pattern = JavaPattern(settings["regex"], f"transform {alias!r}")
        self.replacement = settings["replacement"]
        self._topics: dict[str, str | None] = {}

    def apply(self, record: Record) -> Record | None:
        topic = self._topics.get(record.topic, "")
        if topic == "":
            topic = self._topics[record.topic] = self.pattern.replace_first(record.topic, self.replacement)
        return record if topic is None else record.replace(topic=topic)


class _StructTransform(Transform):
    """A transform of the top-level fields of the key or the value, its new schemas cached per input schema."""

    def __init__(self, alias: str, part: str, settings: Mapping[str, Any]) -> None:
        self.name = alias
        self.part = part
        self.replace_null = bool(settings.get("replace.null.with.default", True))
        self._schemas: dict[int, tuple[Schema, Schema]] = {}

    def apply(self, record: Record) -> Record | None:
        schema, data = record.part(self.part)
        if data is None:
            return record
        value = require_struct(record, self.part, schema, data, self.name)
        assert schema is not None
        cached = self._schemas.get(id(schema))
        if cached is None:
            cached = self._schemas[id(schema)] = (schema, self.new_schema(schema))
        new_schema = cached[1]
        return record.with_part(self.part, new_schema, self.new_value(record, schema, new_schema, value))

    def new_schema(self, schema: Schema) -> Schema:
        raise NotImplementedError

    def new_value(self, record: Record, schema: Schema, new_schema: Schema, value: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


class ReplaceField(_StructTransform):
    def __init__(self, alias: str, part: str, settings: Mapping[str, Any]) -> None:
        super().__init__(alias, part, settings)
        self.exclude = set(settings["exclude"])
        self.include = set(settings["include"])
        self.renames: dict[str, str] = {}
        for item in settings["renames"]:
            old, sep, new = item.partition(":")
            if not sep or not old or not new:
                raise ConfigError(f"transform {alias!r}: 'renames' item {item!r} is not old:new")
            self.renames[old] = new
        self.reverse = {new: old for old, new in self.renames.items()}

    def _keep(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def new_schema(self, schema: Schema) -> Schema:
        fields = [
            as_field(f, self.renames.get(f["field"], f["field"])) for f in schema["fields"] if self._keep(f["field"])
        ]
        return struct(fields, optional=False, basics=schema)

    def new_value(self, record: Record, schema: Schema, new_schema: Schema, value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for field in new_schema["fields"]:
            name = field["field"]
            original = self.reverse.get(name, name)
            data = value.get(original)
            if data is None and self.replace_null:
                data = field.get("default")
            out[name] = data
        return out


#: Kafka Connect's Java class of a value of each schema type, and of each logical type by its name
_LOGICAL_CLASS = {
    "org.apache.kafka.connect.data.Decimal": "BigDecimal",
    "org.apache.kafka.connect.data.Date": "Date",
    "org.apache.kafka.connect.data.Time": "Date",
    "org.apache.kafka.connect.data.Timestamp": "Date",
}
_TYPE_CLASS = {
    "int8": "Byte", "int16": "Short", "int32": "Integer", "int64": "Long", "float32": "Float", "float64": "Double",
    "boolean": "Boolean", "string": "String", "bytes": "byte[]", "array": "List", "map": "Map", "struct": "Struct",
}  # fmt: skip


def _java_class(schema: Schema) -> str:
    kind: str = schema["type"]
    return _LOGICAL_CLASS.get(schema.get("name") or "", _TYPE_CLASS.get(kind, kind))


class MaskField(_StructTransform):
    """Fields replaced by their type's empty value (0, false, "", the epoch, an empty list or map), or by
    ``replacement`` read as the field's type; the schema is unchanged."""

    #: one mapping for the class; a list or map taken from it is copied (:meth:`_masked`), never shared by records
    _EMPTY: ClassVar[Mapping[str, Any]] = {
        "Byte": 0, "Short": 0, "Integer": 0, "Long": 0, "Float": 0.0, "Double": 0.0, "Boolean": False, "String": "",
        "Date": 0, "List": [], "Map": {},
    }  # fmt: skip

    def __init__(self, alias: str, part: str, settings: Mapping[str, Any]) -> None:
        super().__init__(alias, part, settings)
        self.fields = set(settings["fields"])
        self.replacement: str | None = settings.get("replacement")

    def apply(self, record: Record) -> Record | None:
        schema, data = record.part(self.part)
        if data is None and schema is None:
            # Kafka's MaskField reads a record without a schema as a map, and fails on a tombstone
            raise TransformError(
                f"transform {self.name!r}: Kafka's MaskField fails on a tombstone ({self.part} of a record for topic "
                f"{record.topic!r} is null), and so does walflow; drop tombstones before it (a Filter with predicate "
                "RecordIsTombstone) or apply it only to other records (predicate RecordIsTombstone, negate: true)"
            )
        return super().apply(record)

    def new_schema(self, schema: Schema) -> Schema:
        return schema

    def new_value(self, record: Record, schema: Schema, new_schema: Schema, value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for field in schema["fields"]:
            name = field["field"]
            data = get(value, field, self.replace_null)
            out[name] = data if name not in self.fields or data is None else self._masked(record, field, data)
        return out

    def _masked(self, record: Record, field: Schema, data: Any) -> Any:
        java = _java_class(field)
        if java == "BigDecimal":
            return self._decimal(record, field)
        if self.replacement is None:
            if java not in self._EMPTY:
                raise TransformError(
                    f"transform {self.name!r} cannot mask field {field['field']!r} of topic {record.topic!r}: Kafka's "
                    f"MaskField has no empty value of type {java}; leave the field out of 'fields' or drop it with "
                    "ReplaceField"
                )
            return copy.copy(self._EMPTY[java])
        try:
            if java in ("Byte", "Short", "Integer", "Long"):
                return int(self.replacement)
            if java in ("Float", "Double"):
                return float(self.replacement)
            if java == "String":
                return self.replacement
        except ValueError:
            raise TransformError(
                f"transform {self.name!r}: replacement {self.replacement!r} is not a {java}, the type of field "
                f"{field['field']!r} of topic {record.topic!r}"
            ) from None
        raise TransformError(
            f"transform {self.name!r} cannot mask field {field['field']!r} of topic {record.topic!r} (type {java}) "
            "with a replacement: Kafka's MaskField replaces numbers and strings only; leave out 'replacement' for the "
            "type's empty value"
        )

    def _decimal(self, record: Record, field: Schema) -> str:
        """A decimal masked as Kafka does: zero, or the replacement, which the field's schema takes only at its own
        scale (Kafka fails on ``BigDecimal.ZERO`` for a scale above 0)."""
        scale = int((field.get("parameters") or {}).get("scale", "0"))
        text = self.replacement if self.replacement is not None else "0"
        try:
            number = decimal.Decimal(text)
        except decimal.InvalidOperation:
            number = None
        exponent = number.as_tuple().exponent if number is not None else None
        if number is None or not isinstance(exponent, int) or -exponent != scale:
            raise TransformError(
                f"transform {self.name!r} cannot mask decimal field {field['field']!r} of topic {record.topic!r} with "
                f"{text!r}: its schema has scale {scale}, and Kafka's MaskField fails on a value of another scale; "
                f"give a 'replacement' with {scale} decimal place(s), or leave the field out of 'fields'"
            )
        unscaled = int(number.scaleb(scale))
        size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1  # Java's BigInteger.toByteArray length
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _spec(text: str | None) -> tuple[str, bool] | None:
    """An InsertField field name: ``name!`` is required, ``name?`` and ``name`` optional."""
    if not text:
        return None
    if text.endswith("!"):
        return text[:-1], False
    if text.endswith("?"):
        return text[:-1], True
    return text, True


_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"


class InsertField(_StructTransform):
    """The record's topic, partition (none: walflow leaves partitioning to the producer, as Debezium does) and
    timestamp (none before the producer stamps it), or a constant, added as fields."""

    def __init__(self, alias: str, part: str, settings: Mapping[str, Any]) -> None:
        super().__init__(alias, part, settings)
        self.topic = _spec(settings.get("topic.field"))
        self.partition = _spec(settings.get("partition.field"))
        self.timestamp = _spec(settings.get("timestamp.field"))
        self.static = _spec(settings.get("static.field"))
        self.static_value = settings.get("static.value")

    def new_schema(self, schema: Schema) -> Schema:
        fields = list(schema["fields"])
        if self.topic:
            fields.append({"type": "string", "optional": self.topic[1], "field": self.topic[0]})
        if self.partition:
            fields.append({"type": "int32", "optional": self.partition[1], "field": self.partition[0]})
        if self.timestamp:
            fields.append(
                {
                    "type": "int64",
                    "optional": self.timestamp[1],
                    "name": _TIMESTAMP,
                    "version": 1,
                    "field": self.timestamp[0],
                }
            )
        if self.static:
            fields.append({"type": "string", "optional": self.static[1], "field": self.static[0]})
        return struct(fields, optional=False, basics=schema)

    def new_value(self, record: Record, schema: Schema, new_schema: Schema, value: dict[str, Any]) -> dict[str, Any]:
        out = {field["field"]: get(value, field, self.replace_null) for field in schema["fields"]}
        if self.topic:
            out[self.topic[0]] = record.topic
        for spec in (self.partition, self.timestamp):
            if spec:
                if not spec[1]:
                    raise TransformError(
                        f"transform {self.name!r}: required field {spec[0]!r} has no value for topic {record.topic!r} "
                        "(a source record has no partition or timestamp before the producer sends it); make it "
                        "optional ('?')"
                    )
                out[spec[0]] = None
        if self.static:
            out[self.static[0]] = self.static_value
        return out


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: unix.precision: (milliseconds per unit, units per millisecond)
_UNIX = {"seconds": (1000, 1), "milliseconds": (1, 1), "microseconds": (1, 1000), "nanoseconds": (1, 1_000_000)}


def _toward_zero(a: int, b: int) -> int:
    """Java's integer division (``TimeUnit``'s conversions truncate toward zero)."""
    quotient = abs(a) // b
    return quotient if a >= 0 else -quotient


_TARGET_SCHEMA: dict[str, Schema] = {
    "unix": {"type": "int64"},
    "Timestamp": {"type": "int64", "name": _TIMESTAMP, "version": 1},
    "Date": {"type": "int32", "name": "org.apache.kafka.connect.data.Date", "version": 1},
    "Time": {"type": "int32", "name": "org.apache.kafka.connect.data.Time", "version": 1},
    "string": {"type": "string"},
}


def _constant(text: str) -> Callable[[dt.datetime], str]:
    return lambda _: text


def _java_format(pattern: str, origin: str) -> Callable[[dt.datetime], str]:
    """Java's ``SimpleDateFormat`` (in UTC) for its numeric letters (``y M d H h m s S a``), ``'`` quoting, and the
    zone letters ``X``, ``Z`` and ``z``; a text month (``MMM``) or day name (``E``) is refused."""
    parts: list[Callable[[dt.datetime], str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise ConfigError(f"{origin}: unclosed quote in format {pattern!r}")
            text = pattern[i + 1 : end] or "'"
            parts.append(_constant(text))
            i = end + 1
            continue
        if not ch.isalpha():
            parts.append(_constant(ch))
            i += 1
            continue
        j = i
        while j < len(pattern) and pattern[j] == ch:
            j += 1
        width = j - i
        if ch == "y":

            def year(t: dt.datetime, w: int = width) -> str:
                return f"{t.year % 100:02d}" if w == 2 else f"{t.year:0{w}d}"

            parts.append(year)
        elif ch == "M" and width <= 2:

            def month(t: dt.datetime, w: int = width) -> str:
                return f"{t.month:0{w}d}"

            parts.append(month)
        elif ch in "dHhmsS":
            attr = {"d": "day", "H": "hour", "h": "hour", "m": "minute", "s": "second", "S": "microsecond"}[ch]

            def number(t: dt.datetime, attr: str = attr, ch: str = ch, w: int = width) -> str:
                n = getattr(t, attr)
                if ch == "S":
                    n //= 1000  # SimpleDateFormat's S counts milliseconds
                elif ch == "h":
                    n = n % 12 or 12
                return f"{n:0{w}d}"

            parts.append(number)
        elif ch == "a":
            parts.append(lambda t: "AM" if t.hour < 12 else "PM")
        elif ch == "X":
            parts.append(lambda _: "Z")
        elif ch == "Z":
            parts.append(lambda _: "+0000")
        elif ch == "z":
            parts.append(lambda _: "UTC")
        else:
            raise ConfigError(
                f"{origin}: format letter {ch!r} in {pattern!r} is not one walflow writes (y M d H h m s S a X Z z and "
                "quoted text)"
            )
        i = j

    def render(moment: dt.datetime) -> str:
        return "".join(part(moment) for part in parts)

    return render


class TimestampConverter(_StructTransform):
    """A timestamp field converted between epoch numbers (``unix``, at ``unix.precision``), Kafka Connect's
    ``Timestamp``, ``Date`` and ``Time`` and text (``string``, in ``format``), in UTC.

    The input's kind comes from its schema as in Kafka: a Connect logical type by its name, else an ``int64`` is an
    epoch number and a ``string`` text. Debezium's own temporal types are plain numbers to it (``MicroTimestamp`` is an
    ``int64``: set ``unix.precision`` to ``microseconds``). Text input would need Java's date parser: refused with the
    reason.
    """

    def __init__(self, alias: str, part: str, settings: Mapping[str, Any]) -> None:
        super().__init__(alias, part, settings)
        self.field = settings["field"]
        self.target = settings["target.type"]
        self.precision = settings["unix.precision"]
        self.format = _java_format(settings["format"], f"transform {alias!r}") if settings["format"] else None
        if not self.field:
            raise ConfigError(
                f"transform {alias!r}: walflow converts a field of a struct; set 'field' (a whole key or value is "
                "never a timestamp in Debezium's records)"
            )

    def new_schema(self, schema: Schema) -> Schema:
        fields = []
        for field in schema["fields"]:
            if field["field"] == self.field:
                target = _TARGET_SCHEMA[self.target]
                # the JSON converter's order: type, optional, then name and version
                fields.append(
                    {
                        "type": target["type"],
                        "optional": field.get("optional", False),
                        **{k: v for k, v in target.items() if k != "type"},
                        "field": field["field"],
                    }
                )
            else:
                fields.append(field)
        return struct(fields, optional=False, basics=schema)

    def new_value(self, record: Record, schema: Schema, new_schema: Schema, value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for field in schema["fields"]:
            data = get(value, field, self.replace_null)
            if field["field"] == self.field and data is not None:
                data = self._convert(record, field, data)
            out[field["field"]] = data
        return out

    def _millis(self, record: Record, field: Schema, data: Any) -> int:
        name = field.get("name")
        if name in (_TIMESTAMP, "org.apache.kafka.connect.data.Time"):
            return int(data)
        if name == "org.apache.kafka.connect.data.Date":
            return int(data) * 86_400_000
        if field["type"] == "int64":
            per_unit, per_ms = _UNIX[self.precision]
            return _toward_zero(int(data) * per_unit, per_ms)
        raise TransformError(
            f"transform {self.name!r}: field {self.field!r} of topic {record.topic!r} has schema "
            f"{field.get('name') or field['type']!r}, which Kafka's TimestampConverter does not read as a timestamp"
            + (
                " (text input needs Java's date parser, which walflow does not reproduce)"
                if field["type"] == "string"
                else ""
            )
        )

    def _convert(self, record: Record, field: Schema, data: Any) -> Any:
        millis = self._millis(record, field, data)
        if self.target == "Timestamp":
            return millis
        if self.target == "unix":
            per_unit, per_ms = _UNIX[self.precision]
            return _toward_zero(millis * per_ms, per_unit)
        if self.target == "Date":
            return millis // 86_400_000
        if self.target == "Time":
            return millis % 86_400_000
        assert self.format is not None
        return self.format(_EPOCH + dt.timedelta(milliseconds=millis))


class Filter(Transform):
    """Drops every record it is applied to: with a predicate, those the predicate selects."""

    def __init__(self, alias: str) -> None:
        self.name = alias

    def apply(self, record: Record) -> Record | None:
        return None


# -- predicates ------------------------------------------------------------------------------------------------------
class Predicate:
    def test(self, record: Record) -> bool:
        raise NotImplementedError


class TopicNameMatches(Predicate):
    def __init__(self, alias: str, settings: Mapping[str, Any]) -> None:
        self.pattern = JavaPattern(settings["pattern"], f"predicate {alias!r}")
        self._seen: dict[str, bool] = {}

    def test(self, record: Record) -> bool:
        found = self._seen.get(record.topic)
        if found is None:
            found = self._seen[record.topic] = self.pattern.fullmatch(record.topic) is not None
        return found


class RecordIsTombstone(Predicate):
    def test(self, record: Record) -> bool:
        return record.value is None


class HasHeaderKey(Predicate):
    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.header = settings["name"]

    def test(self, record: Record) -> bool:
        return any(name == self.header for name, _ in record.headers)
