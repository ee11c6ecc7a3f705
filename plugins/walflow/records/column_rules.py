"""Column-level settings of Debezium: truncation, masking, hashing, source-type propagation, defaults.

They are resolved once per table definition into a :class:`ColumnPlan` per column, so the per-row work is
one extra function call for the few columns they apply to.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from walflow.config.connector import ConnectorConfig
from walflow.config.patterns import Pattern, compile_patterns
from walflow.errors import ConfigError
from walflow.records.convert import ColumnConverter
from walflow.source.catalog import ColumnType

log = logging.getLogger(__name__)

_WARNED_NOT_CHARACTER: set[tuple[str, tuple[str, ...]]] = set()

#: Java's MessageDigest names (what Debezium users write) to hashlib's.
_DIGESTS = {
    "md2": None,
    "md5": "md5",
    "sha-1": "sha1",
    "sha1": "sha1",
    "sha-224": "sha224",
    "sha-256": "sha256",
    "sha-384": "sha384",
    "sha-512": "sha512",
    "sha-512/224": "sha512_224",
    "sha-512/256": "sha512_256",
    "sha3-224": "sha3_224",
    "sha3-256": "sha3_256",
    "sha3-384": "sha3_384",
    "sha3-512": "sha3_512",
}


def adjust_name(name: str, mode: str, allow_dots: bool = False) -> str:
    """Debezium's name adjustment (``field.name.adjustment.mode``, ``schema.name.adjustment.mode``): ``avro``
    replaces each character Avro does not allow (the first must be a letter or ``_``, the rest letters, digits or
    ``_``, and ``.`` in schema names) by ``_`` and puts ``_`` before a leading digit; ``avro_unicode`` replaces it,
    and ``_`` itself, by ``_uXXXX``."""
    if mode == "none" or not name:
        return name
    if mode == "avro" and "0" <= name[0] <= "9":
        name = "_" + name  # a leading digit is kept behind an underscore
    out = []
    for i, ch in enumerate(name):
        valid = (
            ch == "_"
            or ("A" <= ch <= "Z")
            or ("a" <= ch <= "z")
            or (i > 0 and ("0" <= ch <= "9" or (allow_dots and ch == ".")))
        )
        if mode == "avro_unicode" and (ch == "_" or not valid):
            out.append(f"_u{ord(ch):04x}")
        else:
            out.append(ch if valid else "_")
    return "".join(out)


def _compile(patterns: list[str], key: str) -> list[Pattern]:
    return compile_patterns(patterns, f"'{key}'")


def debezium_length_scale(ctype: ColumnType) -> tuple[int, int]:
    """The column length and scale Debezium reads from the JDBC driver's metadata: what
    ``__debezium.source.column.length``/``scale`` say, and what decides whether a truncation applies."""
    base_type = ctype.element if ctype.category == "A" and ctype.element is not None else ctype
    base, mod = base_type.base_name, ctype.modifier
    if base in _FIXED_LENGTHS:
        return _FIXED_LENGTHS[base]
    if base in ("bit", "varbit"):
        return (mod if mod > 0 else (2147483647 if base == "varbit" else 1)), 0
    if base in ("bpchar", "varchar"):
        return (mod - 4 if mod > 4 else (1 if base == "bpchar" and mod == 5 else 2147483647)), 0
    if base == "numeric":
        if mod < 4:
            return 131089, 0
        return ((mod - 4) >> 16) & 0xFFFF, (mod - 4) & 0xFFFF
    if base in ("time", "timetz", "timestamp", "timestamptz"):
        precision = 6 if mod < 0 else mod
        table = _TIME_LENGTHS if base.startswith("time") and not base.startswith("timestamp") else _TIMESTAMP_LENGTHS
        return table[precision] + (6 if base.endswith("tz") else 0), precision
    if base == "interval":
        return 49, (mod & 0xFFFF) if mod >= 0 else 6
    return 2147483647, 0


_FIXED_LENGTHS = {
    "bool": (1, 0), "int2": (5, 0), "int4": (10, 0), "int8": (19, 0), "oid": (10, 0), "float4": (8, 8),
    "float8": (17, 17), "date": (13, 0),
}  # fmt: skip
_TIME_LENGTHS = {0: 8, 1: 11, 2: 11, 3: 12, 4: 13, 5: 14, 6: 15}
_TIMESTAMP_LENGTHS = {0: 22, 1: 25, 2: 25, 3: 26, 4: 27, 5: 28, 6: 29}

#: Types the JDBC driver reports as CHAR or VARCHAR: the only ones Debezium's masks change (their schema gets
#: ``masked`` whatever the type)
_JDBC_STRING_TYPES = frozenset({"bpchar", "varchar", "text", "name", "char"})


def is_character(ctype: ColumnType) -> bool:
    """True for a column whose values Debezium's masks replace: CHAR or VARCHAR for the JDBC driver (``char``,
    ``varchar``, ``text``, ``name``) and enums; not arrays, not ``citext`` (an extension type), not JSON."""
    return ctype.category != "A" and (ctype.base_name in _JDBC_STRING_TYPES or ctype.category == "E")


@dataclass(frozen=True)
class ColumnMapping:
    """What Debezium's column mapper for one column does: a function of each converted value (NULL included), the
    parameters it adds to the field's schema, whether it masks."""

    convert: Callable[[Any], Any] | None
    parameters: dict[str, str]
    masked: bool = False
    rule: str = ""


@dataclass(frozen=True)
class _Rule:
    key: str  # the Debezium setting, for messages
    patterns: list[Pattern]
    kind: str  # truncate, mask, propagate, propagate_type, hash
    arg: Any = None
    by_type: bool = False

    def matches(self, schema: str, table: str, column: str, type_name: str) -> bool:
        text = f"{schema}.{table}.{type_name if self.by_type else column}"
        return any(p.fullmatch(text) for p in self.patterns)


class ColumnRules:
    """All column-level settings of one connector, compiled once, applied as Debezium applies them: the rules are
    tried in a fixed order (truncations, character masks, column source types, data type source types, hash masks)
    and only the first that names a column acts on it."""

    def __init__(self, config: ConnectorConfig) -> None:
        self.field_mode = config.field_name_adjustment_mode
        if config.sanitize_field_names:
            log.warning(
                "sanitize.field.names is a Debezium 1.x setting that Debezium 3.x no longer reads, and neither does "
                "walflow; set field.name.adjustment.mode: avro to make field names Avro-compatible"
            )
        rules: list[_Rule] = []
        for n, patterns in sorted(config.column_truncate.items()):
            rules.append(
                _Rule(
                    f"column.truncate.to.{n}.chars", _compile(patterns, f"column.truncate.to.{n}.chars"), "truncate", n
                )
            )
        for n, patterns in sorted(config.column_mask.items()):
            rules.append(
                _Rule(f"column.mask.with.{n}.chars", _compile(patterns, f"column.mask.with.{n}.chars"), "mask", "*" * n)
            )
        if config.column_propagate_source_type:
            rules.append(
                _Rule(
                    "column.propagate.source.type",
                    _compile(config.column_propagate_source_type, "column.propagate.source.type"),
                    "propagate",
                )
            )
        if config.datatype_propagate_source_type:
            rules.append(
                _Rule(
                    "datatype.propagate.source.type",
                    _compile(config.datatype_propagate_source_type, "datatype.propagate.source.type"),
                    "propagate",
                    by_type=True,
                )
            )
        hashes = sorted(config.column_mask_hash.items(), key=lambda item: item[0][0].lower().startswith("v2."))
        for (algorithm, salt), patterns in hashes:
            v2 = algorithm.lower().startswith("v2.")
            name = _DIGESTS.get((algorithm[3:] if v2 else algorithm).lower())
            if name is None or name not in hashlib.algorithms_available:
                raise ConfigError(
                    f"'column.mask.hash.{algorithm}.with.salt.{salt}': unknown hash algorithm {algorithm!r}; "
                    f"use one of {', '.join(sorted(k.upper() for k, v in _DIGESTS.items() if v))}"
                )
            # the salt is a secret: the rule's name in messages leaves it out
            key = f"column.mask.hash.{algorithm}.with.salt.<salt>"
            rules.append(_Rule(key, _compile(patterns, key), "hash", (name, salt.encode(), v2)))
        self._rules = rules

    def field_name(self, name: str) -> str:
        return adjust_name(name, self.field_mode)

    def mapping(self, schema: str, table: str, column: str, ctype: ColumnType) -> ColumnMapping | None:
        """The mapper of column ``schema.table.column``: that of the first rule naming it, or ``None``."""
        type_name = ctype.type_name or ctype.base_name
        rule = next((r for r in self._rules if r.matches(schema, table, column, type_name)), None)
        if rule is None:
            return None
        length, scale = debezium_length_scale(ctype)
        if rule.kind == "truncate":
            if not (length < 0 or length > rule.arg):
                return None
            return ColumnMapping(_truncator(rule.arg), {"truncateLength": str(rule.arg)}, rule=rule.key)
        if rule.kind == "propagate":
            params = {"__debezium.source.column.type": type_name.upper(),
                      "__debezium.source.column.length": str(length),
                      "__debezium.source.column.scale": str(scale),
                      "__debezium.source.column.name": column}  # fmt: skip
            return ColumnMapping(None, params, rule=rule.key)
        character = is_character(ctype)
        if not character:
            _warn_not_character(rule.key, f"{schema}.{table}.{column}", ctype)
        if rule.kind == "mask":
            return ColumnMapping(_masker(rule.arg) if character else None, {"masked": "true"}, True, rule.key)
        algorithm, salt, v2 = rule.arg
        hasher = _hasher(algorithm, salt, length if length > 0 else None, v2) if character else None
        return ColumnMapping(hasher, {"masked": "true"}, True, rule.key)


def _warn_not_character(key: str, full_name: str, ctype: ColumnType) -> None:
    if (full_name, (key,)) in _WARNED_NOT_CHARACTER:
        return
    _WARNED_NOT_CHARACTER.add((full_name, (key,)))
    log.warning(
        "%s names column %s of type %s, whose values it leaves as they are (masks replace CHAR, VARCHAR and TEXT "
        "values only); its schema is marked masked all the same, as in Debezium",
        key,
        full_name,
        ctype.name or ctype.base_name,
    )


def _masker(mask: str) -> Callable[[Any], Any]:
    """Debezium's masking with a fixed text: every value (NULL included) becomes ``mask``."""
    return lambda _value: mask


def _truncator(length: int) -> Callable[[Any], Any]:
    """Debezium's truncation, on the field's value: strings cut to ``length`` characters, bytes to ``length`` bytes."""

    def truncate(value: Any) -> Any:
        if isinstance(value, str):
            return value[:length]
        return value

    return truncate


def _java_serialized(value: str) -> bytes:
    """``ObjectOutputStream.writeObject(String)``: the stream header, then TC_STRING and modified UTF-8."""
    encoded = bytearray()
    for ch in value:
        code = ord(ch)
        if 0 < code < 0x80:
            encoded.append(code)
        elif code < 0x800:
            encoded += bytes((0xC0 | (code >> 6), 0x80 | (code & 0x3F)))
        elif code < 0x10000:
            encoded += bytes((0xE0 | (code >> 12), 0x80 | ((code >> 6) & 0x3F), 0x80 | (code & 0x3F)))
        else:  # a supplementary character: two surrogates, three bytes each
            code -= 0x10000
            for unit in (0xD800 | (code >> 10), 0xDC00 | (code & 0x3FF)):
                encoded += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    if len(encoded) < 0x10000:
        return b"\xac\xed\x00\x05\x74" + len(encoded).to_bytes(2, "big") + bytes(encoded)
    return b"\xac\xed\x00\x05\x7c" + len(encoded).to_bytes(8, "big") + bytes(encoded)


def _hasher(algorithm: str, salt: bytes, length: int | None, v2: bool) -> Callable[[Any], Any]:
    """Debezium's hash mask: hex digest of salt + the value's bytes (v1: the Java-serialised string; v2: its UTF-8
    bytes), cut to the column's length; NULL stays NULL."""

    def mask(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        data = value.encode("utf-8") if v2 else _java_serialized(value)
        digest = hashlib.new(algorithm, salt + data).hexdigest()
        return digest[:length] if length else digest

    return mask


def zero_default(converter: ColumnConverter, ctype: ColumnType) -> tuple[bool, Any]:
    """The default Debezium exports for a function-computed default: the type's zero value.

    The reference's list: FALSE for BOOLEAN, 0 for numeric types, '' for text and XML, ``{}`` for JSON,
    1970-01-01 for DATE/TIMESTAMP/TIMESTAMPTZ, 00:00 for TIME, the epoch (0) for INTERVAL and the nil UUID;
    other types get no default. Returns (has_default, value in the converter's representation).
    """
    if ctype.category == "A":
        return False, None
    base = ctype.base_name
    try:
        if base == "bool":
            return True, False
        if base in ("int2", "int4", "int8", "oid", "float4", "float8"):
            return True, converter.convert("0")
        if base in ("numeric", "money"):
            return True, converter.convert("0")
        if base in ("text", "varchar", "bpchar", "xml", "citext", "name"):
            return True, ""
        if base in ("json", "jsonb"):
            return True, "{}"
        if base == "date":
            return True, converter.convert("1970-01-01")
        if base == "timestamp":
            return True, converter.convert("1970-01-01 00:00:00")
        if base == "timestamptz":
            return True, converter.convert("1970-01-01 00:00:00+00")
        if base == "time":
            return True, converter.convert("00:00:00")
        if base == "interval":
            return True, converter.convert("PT0S")
        if base == "uuid":
            return True, "00000000-0000-0000-0000-000000000000"
    except (ValueError, ArithmeticError):
        return False, None
    return False, None


def null_fallback(converter: ColumnConverter, ctype: ColumnType) -> Any:
    """What Debezium puts in a NOT NULL column without a default that holds no value (an old tuple carries only
    the replica identity's columns): its value converter's fallback, an empty or zero value of the field's type.

    Text-like types (JSON, UUID, XML, network addresses, enums...) and bytes are empty, numbers and temporal counts
    zero, a zoned timestamp or time the epoch's text, a point the origin.
    """
    schema = converter.schema
    kind, name = schema.get("type"), schema.get("name")
    if kind == "boolean":
        return False
    if kind in ("int8", "int16", "int32", "int64"):
        return 0
    if kind in ("float", "double"):
        return 0.0
    if name == "io.debezium.time.ZonedTimestamp":
        return "1970-01-01T00:00:00Z"
    if name == "io.debezium.time.ZonedTime":
        return "00:00:00Z"
    if name == "io.debezium.time.Interval":
        return "P0Y0M0DT0H0M0S"
    if name == "io.debezium.data.geometry.Point":
        return converter.convert("(0,0)")
    if name in ("io.debezium.data.geometry.Geometry", "io.debezium.data.geometry.Geography"):
        return {"wkb": "AQcAAAAAAAAA", "srid": None}  # an empty GEOMETRYCOLLECTION
    if kind == "string" and converter.semantic == "string" and ctype.base_name in ("numeric", "money"):
        # decimal.handling.mode=string: a zero with the column's scale
        scale = 2 if ctype.base_name == "money" else _numeric_scale(ctype)
        return "0." + "0" * scale if scale > 0 else "0"
    if name in ("org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal"):
        return converter.convert("0")
    if ctype.base_name == "hstore":
        return {} if kind == "map" else "{}"
    if kind in ("string", "bytes"):
        return ""
    if kind == "array":
        return []
    return None


def _numeric_scale(ctype: ColumnType) -> int:
    return (ctype.modifier - 4) & 0xFFFF if ctype.modifier >= 4 else 0
