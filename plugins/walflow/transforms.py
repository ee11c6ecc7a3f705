"""Column-level settings of Debezium: truncation, masking, hashing, source-type propagation, defaults.

They are resolved once per table definition into a :class:`ColumnPlan` per column, so the per-row work is
one extra function call for the few columns they apply to.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from walflow.config import ConnectorConfig
from walflow.convert import ColumnConverter, ColumnType
from walflow.errors import ConfigError

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

_AVRO_FIELD_INVALID = re.compile(r"[^A-Za-z0-9_]")


def sanitize_field_name(name: str) -> str:
    """``sanitize.field.names``: Avro-valid field names (invalid characters to ``_``, no leading digit)."""
    cleaned = _AVRO_FIELD_INVALID.sub("_", name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "_" + cleaned
    return cleaned


def _compile(patterns: list[str]) -> list[re.Pattern[str]]:
    return [re.compile(p, re.IGNORECASE) for p in patterns]


def _length(ctype: ColumnType) -> int | None:
    """The declared length of a character type (varchar(20) → 20), else ``None``."""
    if ctype.base_name in ("varchar", "bpchar") and ctype.modifier > 4:
        return ctype.modifier - 4
    return None


#: Character types (pg_type.typname, or a domain's base type's): the only columns that
#: ``column.truncate.to.N.chars``, ``column.mask.with.N.chars`` and ``column.mask.hash.*`` apply to, as in
#: Debezium, whose column mappers act on character-based columns only (CHAR, VARCHAR, TEXT and the like).
CHARACTER_TYPES = frozenset({"bpchar", "varchar", "text", "char", "name", "citext"})


def is_character(ctype: ColumnType) -> bool:
    """True for a character column (arrays of text are not: their value is a list, not a string)."""
    return ctype.category != "A" and ctype.base_name in CHARACTER_TYPES


@dataclass(frozen=True)
class _Rule:
    patterns: list[re.Pattern[str]]
    make: Callable[[ColumnType], Callable[[Any], Any]]
    mask: bool = False
    #: the Debezium key, for the warning when it names a column it cannot apply to
    key: str = ""

    def matches(self, full_name: str) -> bool:
        return any(p.fullmatch(full_name) for p in self.patterns)


class ColumnRules:
    """All column-level settings of one connector, compiled once."""

    def __init__(self, config: ConnectorConfig) -> None:
        self.sanitize = config.sanitize_field_names
        self._propagate_columns = _compile(config.column_propagate_source_type)
        self._propagate_types = _compile(config.datatype_propagate_source_type)
        rules: list[_Rule] = []
        for n, patterns in sorted(config.column_truncate.items()):
            rules.append(
                _Rule(_compile(patterns), lambda _t, _n=n: lambda v: v[:_n] if isinstance(v, str) else v, key=f"column.truncate.to.{n}.chars")
            )
        for n, patterns in sorted(config.column_mask.items()):
            rules.append(
                _Rule(
                    _compile(patterns),
                    lambda _t, _n=n: lambda v: "*" * _n if isinstance(v, str) else v,
                    mask=True,
                    key=f"column.mask.with.{n}.chars",
                )
            )
        for (algorithm, salt), patterns in sorted(config.column_mask_hash.items()):
            name = _DIGESTS.get(algorithm.lower())
            if name is None or name not in hashlib.algorithms_available:
                raise ConfigError(
                    f"'column.mask.hash.{algorithm}.with.salt.{salt}': unknown hash algorithm {algorithm!r}; "
                    f"use one of {', '.join(sorted(k.upper() for k, v in _DIGESTS.items() if v))}"
                )
            rules.append(
                _Rule(
                    _compile(patterns),
                    lambda t, _a=name, _s=salt.encode(): _hasher(_a, _s, _length(t)),
                    mask=True,
                    key=f"column.mask.hash.{algorithm}.with.salt.{salt}",
                )
            )
        self._rules = rules

    def field_name(self, name: str) -> str:
        return sanitize_field_name(name) if self.sanitize else name

    def value_transform(self, full_name: str, ctype: ColumnType) -> tuple[Callable[[Any], Any] | None, bool]:
        """The composed value transform of a column (``schema.table.column``) and whether it masks.

        Only character columns are truncated or masked; a rule naming another column is ignored with a
        warning (once per column), as Debezium ignores it.
        """
        matching = [rule for rule in self._rules if rule.matches(full_name)]
        if matching and not is_character(ctype):
            key = (full_name, tuple(rule.key for rule in matching))
            if key not in _WARNED_NOT_CHARACTER:
                _WARNED_NOT_CHARACTER.add(key)
                log.warning(
                    "%s names column %s of type %s, which is not a character type: the column is left as it is "
                    "(truncation and masking apply to CHAR, VARCHAR, TEXT and the like only)",
                    ", ".join(rule.key for rule in matching),
                    full_name,
                    ctype.name or ctype.base_name,
                )
            return None, False
        funcs = [(rule.make(ctype), rule.mask) for rule in matching]
        if not funcs:
            return None, False
        masked = any(m for _, m in funcs)
        chain = [f for f, _ in funcs]
        if len(chain) == 1:
            return chain[0], masked

        def composed(value: Any) -> Any:
            for func in chain:
                value = func(value)
            return value

        return composed, masked

    def source_type_parameters(self, schema: str, table: str, column: str, ctype: ColumnType) -> dict[str, str] | None:
        """``column.propagate.source.type`` / ``datatype.propagate.source.type`` schema parameters."""
        type_name = (ctype.base_name or "").upper()
        full = f"{schema}.{table}.{column}"
        if not (
            any(p.fullmatch(full) for p in self._propagate_columns)
            or any(p.fullmatch(type_name) or p.fullmatch(f"{schema}.{table}.{type_name}") for p in self._propagate_types)
        ):
            return None
        params = {"__debezium.source.column.type": type_name}
        length = _length(ctype)
        if length is not None:
            params["__debezium.source.column.length"] = str(length)
        if ctype.base_name == "numeric" and ctype.modifier >= 4:
            value = ctype.modifier - 4
            params["__debezium.source.column.length"] = str((value >> 16) & 0xFFFF)
            params["__debezium.source.column.scale"] = str(value & 0xFFFF)
        params["__debezium.source.column.name"] = column
        return params


def _hasher(algorithm: str, salt: bytes, length: int | None) -> Callable[[Any], Any]:
    """Debezium's hash mask: hex digest of salt + the UTF-8 value, cut to the column's declared length."""

    def mask(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        digest = hashlib.new(algorithm, salt + value.encode("utf-8")).hexdigest()
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
