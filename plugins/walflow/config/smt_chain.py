"""The single message transforms and predicates a connector file declares, in Kafka Connect's own keys.

A Debezium user writes ``transforms: unwrap,route``,
``transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState``, ``transforms.unwrap.add.fields: op,lsn``,
``predicates: onlyA``, ``predicates.onlyA.type: ...``. This module is the model of those keys: which transform and
predicate classes walflow runs (:data:`TRANSFORM_TYPES`,
:data:`PREDICATE_TYPES`), each one's properties with Kafka Connect's and Debezium's defaults, and the validation that
turns the flat keys into an ordered chain of :class:`TransformSpec` before anything runs. What each class does to a
record is :mod:`walflow.transforms`'s.

Classes walflow knows but does not run are refused with the reason (:data:`REFUSED_TYPES`): scripting transforms
take code from the configuration, which walflow treats as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from walflow.config.javaregex import CASE_INSENSITIVE, compile_java
from walflow.config.values import split_list
from walflow.errors import PatternError

#: a property's kinds: how its text is read
STRING, BOOLEAN, INTEGER, LIST, REGEX = "string", "boolean", "integer", "list", "regex"

_KAFKA = "org.apache.kafka.connect.transforms."
_DEBEZIUM = "io.debezium.transforms."


@dataclass(frozen=True)
class Prop:
    """One property of a transform or predicate: its kind, its default (``None``: none), the values allowed."""

    kind: str = STRING
    default: Any = None
    required: bool = False
    choices: tuple[str, ...] = ()
    #: why the property is accepted without effect in walflow (a cache size: walflow's caches are per schema)
    no_effect: str | None = None


@dataclass(frozen=True)
class TypeSpec:
    """A transform or predicate class: its properties and what it is, for the docs."""

    kind: str  # walflow's name of the implementation (``walflow.transforms.chain`` maps it to a class)
    props: Mapping[str, Prop]
    summary: str
    #: Kafka Connect's ``$Key``/``$Value`` variants: which part of the record it works on
    part: str = "value"


_NULL_DEFAULT = Prop(BOOLEAN, True)

#: The transform classes walflow runs, by the class name a Kafka Connect configuration gives.
TRANSFORM_TYPES: dict[str, TypeSpec] = {
    f"{_DEBEZIUM}ExtractNewRecordState": TypeSpec(
        "unwrap",
        {
            "delete.tombstone.handling.mode": Prop(
                STRING,
                "tombstone",
                choices=("drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"),
            ),
            "route.by.field": Prop(STRING, ""),
            "add.fields": Prop(LIST, []),
            "add.fields.prefix": Prop(STRING, "__"),
            "add.headers": Prop(LIST, []),
            "add.headers.prefix": Prop(STRING, "__"),
            "drop.fields.header.name": Prop(STRING, ""),
            "drop.fields.from.key": Prop(BOOLEAN, False),
            "drop.fields.keep.schema.compatible": Prop(BOOLEAN, True),
            "replace.null.with.default": _NULL_DEFAULT,
        },
        "the row state (after, or before for deletes) in place of the envelope",
    ),
    f"{_DEBEZIUM}ByLogicalTableRouter": TypeSpec(
        "logical_table",
        {
            "topic.regex": Prop(REGEX, required=True),
            "topic.replacement": Prop(STRING, required=True),
            "key.enforce.uniqueness": Prop(BOOLEAN, True),
            "key.field.name": Prop(STRING, "__dbz__physicalTableIdentifier"),
            "key.field.regex": Prop(REGEX, ""),
            "key.field.replacement": Prop(STRING, ""),
            "schema.name.adjustment.mode": Prop(STRING, "none", choices=("none", "avro", "avro_unicode")),
            "logical.table.cache.size": Prop(INTEGER, 16, no_effect="walflow keeps one entry per schema it has seen"),
        },
        "several tables' records on one topic, the physical table in the key",
    ),
    f"{_DEBEZIUM}outbox.EventRouter": TypeSpec(
        "outbox",
        {
            "table.field.event.id": Prop(STRING, "id"),
            "table.field.event.key": Prop(STRING, "aggregateid"),
            "table.field.event.type": Prop(
                STRING, "type", no_effect="Debezium 3.6 reads the type only through table.fields.additional.placement"
            ),
            "table.field.event.timestamp": Prop(STRING, ""),
            "table.field.event.payload": Prop(STRING, "payload"),
            "table.field.event.schema.version": Prop(STRING, ""),
            "table.fields.additional.placement": Prop(LIST, []),
            "table.field.additional.missing": Prop(STRING, "error", choices=("error", "ignore")),
            "route.by.field": Prop(STRING, "aggregatetype"),
            "route.topic.regex": Prop(REGEX, "(?<routedByValue>.*)"),
            "route.topic.replacement": Prop(STRING, "outbox.event.${routedByValue}"),
            "route.tombstone.on.empty.payload": Prop(BOOLEAN, False),
            "table.op.invalid.behavior": Prop(STRING, "warn", choices=("warn", "error", "fatal")),
            "table.expand.json.payload": Prop(BOOLEAN, False),
            "table.json.payload.null.behavior": Prop(STRING, "ignore", choices=("ignore", "optional_bytes")),
        },
        "the outbox table's rows as events on their aggregate's topic (the outbox pattern)",
    ),
    f"{_KAFKA}RegexRouter": TypeSpec(
        "regex_router",
        {"regex": Prop(REGEX, required=True), "replacement": Prop(STRING, required=True)},
        "the topic renamed by a regular expression",
    ),
    **{
        f"{_KAFKA}ReplaceField${part.title()}": TypeSpec(
            "replace_field",
            {
                "exclude": Prop(LIST, []),
                "include": Prop(LIST, []),
                "renames": Prop(LIST, []),
                "replace.null.with.default": _NULL_DEFAULT,
            },
            f"fields of the {part} left out, kept or renamed",
            part,
        )
        for part in ("key", "value")
    },
    **{
        f"{_KAFKA}MaskField${part.title()}": TypeSpec(
            "mask_field",
            {
                "fields": Prop(LIST, required=True),
                "replacement": Prop(STRING),
                "replace.null.with.default": _NULL_DEFAULT,
            },
            f"fields of the {part} replaced by their type's empty value or a replacement",
            part,
        )
        for part in ("key", "value")
    },
    **{
        f"{_KAFKA}InsertField${part.title()}": TypeSpec(
            "insert_field",
            {
                "topic.field": Prop(STRING),
                "partition.field": Prop(STRING),
                "offset.field": Prop(STRING),
                "timestamp.field": Prop(STRING),
                "static.field": Prop(STRING),
                "static.value": Prop(STRING),
                "replace.null.with.default": _NULL_DEFAULT,
            },
            f"the topic, partition, timestamp or a constant added to the {part}",
            part,
        )
        for part in ("key", "value")
    },
    **{
        f"{_KAFKA}TimestampConverter${part.title()}": TypeSpec(
            "timestamp_converter",
            {
                "field": Prop(STRING, ""),
                "target.type": Prop(STRING, required=True, choices=("string", "unix", "Date", "Time", "Timestamp")),
                "format": Prop(STRING, ""),
                "unix.precision": Prop(
                    STRING, "milliseconds", choices=("seconds", "milliseconds", "microseconds", "nanoseconds")
                ),
                "replace.null.with.default": _NULL_DEFAULT,
            },
            f"a timestamp field of the {part} converted between epoch numbers, Connect's logical types and text",
            part,
        )
        for part in ("key", "value")
    },
    f"{_KAFKA}Filter": TypeSpec("filter", {}, "records dropped (those its predicate matches)"),
}

#: The predicate classes walflow evaluates.
PREDICATE_TYPES: dict[str, TypeSpec] = {
    f"{_KAFKA}predicates.TopicNameMatches": TypeSpec(
        "topic_matches", {"pattern": Prop(REGEX, required=True)}, "the topic matches a regular expression"
    ),
    f"{_KAFKA}predicates.RecordIsTombstone": TypeSpec("is_tombstone", {}, "the record is a tombstone"),
    f"{_KAFKA}predicates.HasHeaderKey": TypeSpec(
        "has_header", {"name": Prop(STRING, required=True)}, "the record has a header of that name"
    ),
}

#: Transform classes walflow knows and refuses, with the reason.
REFUSED_TYPES = {
    f"{_DEBEZIUM}Filter": "it runs a script (JSR 223) taken from the configuration; walflow runs no code from "
    "configuration: use Kafka's org.apache.kafka.connect.transforms.Filter with a predicate",
    f"{_DEBEZIUM}ContentBasedRouter": "it runs a script (JSR 223) taken from the configuration; walflow runs no code "
    "from configuration: route with io.debezium.transforms.ByLogicalTableRouter or "
    "org.apache.kafka.connect.transforms.RegexRouter",
}

#: the letters of Java's SimpleDateFormat walflow writes (numbers, AM/PM, UTC's zone); walflow.transforms.connect
FORMAT_LETTERS = set("yMdHhmsSaXZz")

#: Properties every transform has (Kafka Connect's), whatever its class.
COMMON_PROPS = {"type", "predicate", "negate"}


@dataclass(frozen=True)
class TransformSpec:
    """One validated transform of the chain: its alias, class, settings (every property, defaults filled in) and
    the predicate that gates it."""

    alias: str
    type: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    predicate: PredicateSpec | None = None
    negate: bool = False

    @property
    def spec(self) -> TypeSpec:
        return TRANSFORM_TYPES[self.type]


@dataclass(frozen=True)
class PredicateSpec:
    alias: str
    type: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> TypeSpec:
        return PREDICATE_TYPES[self.type]


def _value(kind: str, key: str, value: Any, problems: list[str]) -> Any:
    if kind == BOOLEAN:
        if isinstance(value, bool):
            return value
        if str(value).strip().lower() in ("true", "false"):
            return str(value).strip().lower() == "true"
        problems.append(f"  '{key}' = {value!r}: expected true or false")
        return None
    if kind == INTEGER:
        try:
            return int(value)
        except (TypeError, ValueError):
            problems.append(f"  '{key}' = {value!r}: expected a whole number")
            return None
    if kind == LIST:
        return split_list(value if isinstance(value, (list, tuple)) else str(value))
    text = "" if value is None else str(value)
    if kind == REGEX and text:
        try:
            compile_java(text, 0, f"'{key}'")
        except PatternError as exc:
            problems.append(f"  {exc}")
    return text


def _settings(
    prefix: str, type_name: str, spec: TypeSpec, raw: Mapping[str, Any], problems: list[str], common: set[str]
) -> dict[str, Any]:
    given = {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}
    settings: dict[str, Any] = {}
    for name, value in given.items():
        if name in common:
            continue
        prop = spec.props.get(name)
        if prop is None:
            allowed = ", ".join(sorted(spec.props)) or "none"
            problems.append(f"  '{prefix}{name}' is not a property of {type_name} (its properties: {allowed})")
            continue
        settings[name] = _value(prop.kind, prefix + name, value, problems)
        if prop.choices and settings[name] not in prop.choices:
            problems.append(f"  '{prefix}{name}' = {value!r}: allowed values are {', '.join(prop.choices)}")
    for name, prop in spec.props.items():
        if name not in settings:
            if prop.required:
                problems.append(f"  '{prefix}{name}' is required by {type_name}")
            settings[name] = prop.default
    return settings


def _aliases(raw: Mapping[str, Any], key: str, problems: list[str]) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    names = _value(LIST, key, value, problems)
    seen = set()
    for name in names:
        if name in seen:
            problems.append(f"  '{key}' = {value!r}: {name!r} is listed twice")
        seen.add(name)
    return list(dict.fromkeys(names))


def _type_of(
    raw: Mapping[str, Any], prefix: str, types: Mapping[str, TypeSpec], runs: str, problems: list[str]
) -> str | None:
    """The class ``<prefix>type`` names, when walflow has it (``types``); else ``None``, with the problem listing the
    classes it has (``runs``: what the message says walflow does with them)."""
    type_name = raw.get(prefix + "type")
    if type_name in types:
        return type_name
    problems.append(f"  '{prefix}type' = {type_name!r}: walflow {runs}: {', '.join(sorted(types))}")
    return None


def is_chain_key(key: str) -> bool:
    """Whether ``key`` belongs to the transform chain's model (``transforms``, ``transforms.*``, ``predicates``...)."""
    return key in ("transforms", "predicates") or key.startswith(("transforms.", "predicates."))


def parse_chain(raw: Mapping[str, Any]) -> tuple[tuple[TransformSpec, ...], list[str]]:
    """The chain ``raw``'s transform and predicate keys declare (``raw`` holds only those keys), and the problems
    found, each naming the key, its value and what is allowed."""
    problems: list[str] = []
    predicates: dict[str, PredicateSpec] = {}
    for alias in _aliases(raw, "predicates", problems):
        prefix = f"predicates.{alias}."
        type_name = _type_of(raw, prefix, PREDICATE_TYPES, "evaluates these predicates", problems)
        if type_name is None:
            continue
        predicates[alias] = PredicateSpec(
            alias, type_name, _settings(prefix, type_name, PREDICATE_TYPES[type_name], raw, problems, {"type"})
        )
    chain: list[TransformSpec] = []
    aliases = _aliases(raw, "transforms", problems)
    for alias in aliases:
        prefix = f"transforms.{alias}."
        given = raw.get(prefix + "type")
        refused = REFUSED_TYPES.get(given) if isinstance(given, str) else None
        if refused is not None:
            problems.append(f"  '{prefix}type' = {raw.get(prefix + 'type')!r} is not supported by walflow: {refused}")
            continue
        type_name = _type_of(raw, prefix, TRANSFORM_TYPES, "runs these transforms", problems)
        if type_name is None:
            continue
        spec = TRANSFORM_TYPES[type_name]
        settings = _settings(prefix, type_name, spec, raw, problems, COMMON_PROPS)
        predicate_name = raw.get(prefix + "predicate")
        predicate = None
        if predicate_name is not None:
            predicate = predicates.get(str(predicate_name))
            if predicate is None and str(predicate_name) not in _aliases(raw, "predicates", []):
                problems.append(f"  '{prefix}predicate' = {predicate_name!r}: no such predicate in 'predicates'")
        negate = _value(BOOLEAN, prefix + "negate", raw.get(prefix + "negate", False), problems)
        if spec.kind == "insert_field" and settings.get("offset.field"):
            problems.append(
                f"  '{prefix}offset.field' = {settings['offset.field']!r}: a Kafka offset exists only once a record is "
                "written; Kafka Connect allows this field in sink connectors only, and walflow is a source"
            )
        if spec.kind == "outbox":
            for item in settings["table.fields.additional.placement"]:
                parts = [p.strip() for p in item.split(":")]
                if len(parts) not in (2, 3) or not parts[0] or parts[1] not in ("envelope", "header", "partition"):
                    problems.append(
                        f"  '{prefix}table.fields.additional.placement' item {item!r}: expected "
                        "field:placement[:alias], placement one of envelope, header, partition"
                    )
                elif parts[1] == "partition":
                    problems.append(
                        f"  '{prefix}table.fields.additional.placement' item {item!r}: the partition placement is not "
                        "supported yet (walflow leaves partitioning to the producer's partitioner, by key)"
                    )
        if spec.kind == "timestamp_converter":
            if settings["target.type"] == "string" and not settings["format"]:
                problems.append(f"  '{prefix}format' is required when '{prefix}target.type' is string")
            unknown = sorted(
                set(regex.sub(r"'[^']*'", "", settings["format"] or "")) - FORMAT_LETTERS - set(" -_:./,T+")
            )
            if any(ch.isalpha() for ch in unknown):
                problems.append(
                    f"  '{prefix}format' = {settings['format']!r}: letter(s) "
                    f"{', '.join(c for c in unknown if c.isalpha())} are not ones walflow writes (y M d H h m s S a X "
                    "Z z, and quoted text)"
                )
        chain.append(TransformSpec(alias, type_name, settings, predicate, bool(negate)))
    listed = set(aliases)
    for key in raw:
        parts = key.split(".")
        if parts[0] == "transforms" and len(parts) > 2 and parts[1] not in listed:
            problems.append(f"  '{key}' configures transform {parts[1]!r}, which 'transforms' does not list")
        if (
            parts[0] == "predicates"
            and len(parts) > 2
            and parts[1] not in predicates
            and parts[1] not in _aliases(raw, "predicates", [])
        ):
            problems.append(f"  '{key}' configures predicate {parts[1]!r}, which 'predicates' does not list")
    return tuple(chain), problems


def _default_text(prop: Prop) -> str:
    if prop.required:
        return "required"
    if prop.default in (None, "", []):
        return "none"
    if isinstance(prop.default, bool):
        return str(prop.default).lower()
    return f"`{prop.default}`"


def markdown_table() -> str:
    """The transforms and predicates walflow runs, with their properties and defaults, as docs/transforms.md lists
    them (``tests/unit/test_transforms.py`` holds the page to this model)."""
    lines = ["| class | what it does | properties (default) |", "|---|---|---|"]
    for group in (TRANSFORM_TYPES, PREDICATE_TYPES):
        for name, spec in group.items():
            props = ", ".join(
                f"`{prop}` ({_default_text(p)}{'; no effect: ' + p.no_effect if p.no_effect else ''})"
                for prop, p in spec.props.items()
            )
            lines.append(f"| `{name}` | {spec.summary} | {props or 'none'} |")
    for name, reason in REFUSED_TYPES.items():
        lines.append(f"| `{name}` | refused: {reason} | |")
    return "\n".join(lines)


# -- post processors ---------------------------------------------------------------------------------------------------
#: The post processors walflow runs (Debezium's ``post.processors``: each alias's ``<alias>.type`` and properties are
#: top-level keys), by class name.
POST_PROCESSOR_TYPES: dict[str, TypeSpec] = {
    "io.debezium.processors.reselect.ReselectColumnsPostProcessor": TypeSpec(
        "reselect",
        {
            "reselect.columns.include.list": Prop(LIST, []),
            "reselect.columns.exclude.list": Prop(LIST, []),
            "reselect.unavailable.values": Prop(BOOLEAN, True),
            "reselect.null.values": Prop(BOOLEAN, True),
            "reselect.use.event.key": Prop(BOOLEAN, False),
            "reselect.error.handling.mode": Prop(STRING, "warn", choices=("warn", "fail")),
        },
        "columns of a change that are unavailable (TOASTed and unchanged) or null read again from the table",
    ),
}


@dataclass(frozen=True)
class PostProcessorSpec:
    alias: str
    type: str
    settings: Mapping[str, Any] = field(default_factory=dict)


def post_processor_aliases(raw: Mapping[str, Any]) -> list[str]:
    """The aliases ``post.processors`` lists (their ``<alias>.*`` keys belong to them)."""
    return [a for a in _value(LIST, "post.processors", raw.get("post.processors") or [], []) if a]


def parse_post_processors(raw: Mapping[str, Any]) -> tuple[tuple[PostProcessorSpec, ...], list[str]]:
    """The post processors ``raw`` declares (``post.processors`` and each alias's keys), and the problems found."""
    problems: list[str] = []
    specs = []
    for alias in _aliases(raw, "post.processors", problems):
        prefix = f"{alias}."
        type_name = _type_of(raw, prefix, POST_PROCESSOR_TYPES, "runs these post processors", problems)
        if type_name is None:
            continue
        settings = _settings(prefix, type_name, POST_PROCESSOR_TYPES[type_name], raw, problems, {"type"})
        for key in ("reselect.columns.include.list", "reselect.columns.exclude.list"):
            for item in settings[key]:
                try:
                    compile_java(item, CASE_INSENSITIVE, f"'{prefix}{key}' item")
                except PatternError as exc:
                    problems.append(f"  {exc}")
        if settings["reselect.columns.include.list"] and settings["reselect.columns.exclude.list"]:
            problems.append(
                f"  '{prefix}reselect.columns.include.list' and '{prefix}reselect.columns.exclude.list' cannot both be "
                "set"
            )
        specs.append(PostProcessorSpec(alias, type_name, settings))
    return tuple(specs), problems
