"""Named exceptions of walflow.

Every error walflow raises on purpose derives from :class:`WalflowError`, and its message names the
offending value, the cause and the fix, so an operator reading a task log knows what to change.
"""

from __future__ import annotations

from typing import Any


class WalflowError(Exception):
    """Base class of every error raised by walflow."""

    #: Whether running the same task again may succeed without anyone changing anything: a server or broker that was
    #: briefly away, another run holding the slot. The operators fail at once, without Airflow's retries, otherwise.
    retryable = False
    #: set on the error of a lake apply run with failed topics only: the results of the topics it applied
    #: (:meth:`walflow.lake.apply.LakeJob._failed`; the job's summary reads it with a default)
    results: list[dict[str, Any]]


class ConfigError(WalflowError):
    """A connector configuration is invalid; raised before anything touches a database."""


class ConnectorFilesError(ConfigError):
    """Connector files of a folder that cannot be loaded (unreadable, invalid, or in conflict with another file), each
    with its own error; the other files' connectors load without them.

    :param errors: the error of each file left out, by path."""

    def __init__(self, errors: dict[str, ConfigError]) -> None:
        self.errors = errors
        lines = [f"- {path}: {error}" for path, error in errors.items()]
        super().__init__(
            f"{len(errors)} connector file(s) left out: walflow builds no DAG for them until they are fixed; the other "
            "connectors' DAGs are loaded as usual\n" + "\n".join(lines)
        )


class PatternError(ConfigError):
    """A user's regular expression is invalid, or matching it took more than the bound of CPU time (runaway
    backtracking)."""


class ExpressionError(ConfigError):
    """An SQL condition or template typed by a user is not one expression, or uses what it may not."""


class SourceError(WalflowError):
    """The source PostgreSQL server or database cannot be used as configured."""


class SourceUnavailableError(SourceError):
    """The source database could not be reached (down, restarting, network)."""

    retryable = True


class StateFormatError(SourceError):
    """The connector's state was written by a newer walflow, whose layout this one would misread: some Airflow
    component runs an older walflow than the others."""


class SlotError(SourceError):
    """The replication slot is missing, busy, or in a state that would lose or repeat changes."""


class ConcurrentRunError(SlotError):
    """Another process already consumes this connector's slot."""

    retryable = True


class DecodeError(WalflowError):
    """A pgoutput message could not be decoded."""


class ConversionError(WalflowError):
    """A column value could not be converted to its Debezium representation.

    :param unrepresentable: the value is one Debezium cannot carry either (NaN in a NOT NULL precise decimal): a
        configuration choice, not a walflow bug.
    """

    def __init__(self, message: str, *, unrepresentable: bool = False) -> None:
        super().__init__(message)
        self.unrepresentable = unrepresentable


class UnrepresentableValueError(ValueError):
    """A value its column's schema cannot carry in the configured mode (a converter's refusal, turned into a
    :class:`ConversionError` naming the table and column)."""


class TransformError(WalflowError):
    """A configured transform cannot handle a record (a struct expected, a value it cannot convert): names the
    transform, the topic and the value. Nothing of the batch is confirmed to the slot."""


class DeliveryError(WalflowError):
    """Kafka did not acknowledge every record of a batch; the slot was not advanced past them."""

    retryable = True


class RecordTooLargeError(DeliveryError):
    """A record is larger than the producer or the topic accepts; nothing from its transaction on was confirmed.

    :param topic: the record's topic; :param size: its size in bytes (key, value, headers); :param limit: the limit
        it exceeds (``message.max.bytes`` of the producer).
    """

    retryable = False

    def __init__(
        self, message: str, *, topic: str | None = None, size: int | None = None, limit: int | None = None
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.size = size
        self.limit = limit


class DriftError(SourceError):
    """The source no longer matches what the connector set up: a table left the publication, a key changed type,
    two tables map to one topic, or another connector claims the slot or topic prefix."""


class LakeError(WalflowError):
    """The lake cannot take the change events as they are; nothing was committed for the table named."""


class LakeSchemaError(LakeError):
    """The events' columns do not fit the lake table (an incompatible type change, schemaless values of another
    kind)."""


class LakeHistoryError(LakeError):
    """The lake table's snapshot history cannot be trusted: another writer changed it, or expiry removed the
    snapshot that holds the offsets walflow applied."""


class LakeFenceError(LakeError):
    """Another run of the apply job committed to a lake table (or started) after this run read its offsets, so this
    run's changes to it were not published (:mod:`walflow.lake.fence`); the next run reads the offsets again."""

    retryable = True


class TopicMismatchError(LakeError):
    """A topic is no longer the one the lake read (recreated, or the broker lost its data)."""


class BrokerUnavailableError(LakeError):
    """Kafka did not answer the lake job in time; nothing was committed for the table named."""

    retryable = True


class RecordsDeletedError(TopicMismatchError):
    """Records the lake had not applied yet were deleted from their topic (retention) before it read them."""


class UnappliableRecordError(LakeError):
    """A Kafka record, or one value in it, that the lake job cannot apply.

    The message names the topic, partition, offset, column and value, and the way past it
    (``walflow.lake.accept.records``).
    """

    def __init__(self, message: str, problems: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        #: each problem: topic, partition, offset, column, value (truncated), error
        self.problems = problems or []
