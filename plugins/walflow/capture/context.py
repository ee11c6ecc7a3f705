"""What every part of one capture task shares, derived once from the connector's configuration.

A stream batch, its incremental snapshots, its blocking snapshots and the records they build all need the same
helpers: which tables and columns are captured (:class:`~walflow.config.filters.Filters`,
:class:`~walflow.records.column_rules.ColumnRules`), the shape of Debezium's envelopes
(:class:`~walflow.records.envelope.EventFormat`), the JSON converter pair
(:class:`~walflow.records.events.Serializer`) and the producer behind the connector's transforms and topic
creation. :class:`CaptureContext` builds them once per task and is handed down, so that no part derives its own copy
(and no two parts could disagree about the configuration they read). :class:`CaptureHelpers` is the same without the
producer, for what runs before a task has one (the setup builds its producer only when it needs one).
"""

from __future__ import annotations

from dataclasses import dataclass

from walflow.capture.failures import EventFailures
from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.kafka import EventProducer, use_topic_creation
from walflow.records.column_rules import ColumnRules
from walflow.records.envelope import EventFormat
from walflow.records.events import Serializer
from walflow.transforms.producer import with_transforms


@dataclass(frozen=True)
class CaptureHelpers:
    """The helpers the connector's configuration alone gives (see the module's docstring): all of a
    :class:`CaptureContext` but its producer.

    What runs before a producer exists uses them alone: the setup plans its tables (and logs its notifications)
    without one, as it builds its producer only when a snapshot runs or a notification goes to Kafka; a snapshot
    reader process plans its tables before it builds its producer. :meth:`writing_to` then gives the context with
    the same helpers, derived once.

    :param config: the validated connector configuration.
    """

    config: ConnectorConfig
    filters: Filters
    rules: ColumnRules
    fmt: EventFormat
    serializer: Serializer

    @classmethod
    def for_config(cls, config: ConnectorConfig) -> CaptureHelpers:
        """The helpers of one task of the connector ``config`` configures."""
        return cls(
            config=config,
            filters=Filters(config),
            rules=ColumnRules(config),
            fmt=EventFormat(config),
            serializer=Serializer(config.record_key_schemas, config.record_value_schemas),
        )

    def writing_to(self, producer: EventProducer) -> CaptureContext:
        """The context of these helpers writing with ``producer`` (a plain producer: the transforms are put before
        it, and it creates topics as the topic creation keys say; an already transforming one is kept as it is)."""
        use_topic_creation(producer, self.config)
        return CaptureContext(
            config=self.config,
            filters=self.filters,
            rules=self.rules,
            fmt=self.fmt,
            serializer=self.serializer,
            producer=with_transforms(producer, self.config),
            failures=EventFailures(self.config, producer),
        )


@dataclass(frozen=True)
class CaptureContext(CaptureHelpers):
    """The helpers one task derives from its connector's configuration (see the module's docstring), and the
    producer it writes with.

    :param producer: the producer the task writes with: behind the connector's transform chain, creating topics as
        its topic creation keys say.
    :param failures: the events the task could not build (``event.processing.failure.handling.mode``).
    """

    producer: EventProducer
    failures: EventFailures

    @classmethod
    def for_task(cls, config: ConnectorConfig, producer: EventProducer) -> CaptureContext:
        """The context of one task writing with ``producer`` (a plain producer: the transforms are put before it)."""
        return CaptureHelpers.for_config(config).writing_to(producer)
