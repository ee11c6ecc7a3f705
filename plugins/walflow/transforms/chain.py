"""The configured chain: each transform of ``transforms`` in order, each gated by its predicate, as Kafka Connect
runs them (``TransformationChain`` with ``PredicatedTransformation``)."""

from __future__ import annotations

from collections.abc import Sequence

from walflow.config.smt_chain import PredicateSpec, TransformSpec
from walflow.transforms.connect import (
    Filter,
    HasHeaderKey,
    InsertField,
    MaskField,
    Predicate,
    RecordIsTombstone,
    RegexRouter,
    ReplaceField,
    TimestampConverter,
    TopicNameMatches,
    Transform,
)
from walflow.transforms.debezium import ByLogicalTableRouter, ExtractNewRecordState
from walflow.transforms.outbox import EventRouter
from walflow.transforms.record import Codec, Record


def _predicate(spec: PredicateSpec) -> Predicate:
    kind = spec.spec.kind
    if kind == "topic_matches":
        return TopicNameMatches(spec.alias, spec.settings)
    if kind == "is_tombstone":
        return RecordIsTombstone()
    return HasHeaderKey(spec.settings)


def _transform(spec: TransformSpec, codec: Codec) -> Transform:
    kind, part, settings = spec.spec.kind, spec.spec.part, spec.settings
    if kind == "unwrap":
        return ExtractNewRecordState(spec.alias, settings, codec)
    if kind == "logical_table":
        return ByLogicalTableRouter(spec.alias, settings)
    if kind == "outbox":
        return EventRouter(spec.alias, settings, codec)
    if kind == "regex_router":
        return RegexRouter(spec.alias, settings)
    if kind == "replace_field":
        return ReplaceField(spec.alias, part, settings)
    if kind == "mask_field":
        return MaskField(spec.alias, part, settings)
    if kind == "insert_field":
        return InsertField(spec.alias, part, settings)
    if kind == "timestamp_converter":
        return TimestampConverter(spec.alias, part, settings)
    return Filter(spec.alias)


class TransformChain:
    """The transforms of one connector, built from its validated :class:`TransformSpec` s.

    :raises ConfigError: for a setting only a built transform can check (a ReplaceField rename without ``:``).
    """

    def __init__(self, specs: Sequence[TransformSpec], codec: Codec) -> None:
        predicates: dict[str, Predicate] = {}
        self.steps: list[tuple[Transform, Predicate | None, bool]] = []
        for spec in specs:
            predicate = None
            if spec.predicate is not None:
                predicate = predicates.get(spec.predicate.alias) or predicates.setdefault(
                    spec.predicate.alias, _predicate(spec.predicate)
                )
            self.steps.append((_transform(spec, codec), predicate, spec.negate))

    def apply(self, record: Record) -> Record | None:
        """The record after every transform, or ``None`` when one dropped it."""
        for transform, predicate, negate in self.steps:
            if predicate is not None and predicate.test(record) == negate:
                continue
            result = transform.apply(record)
            if result is None:
                return None
            record = result
        return record
