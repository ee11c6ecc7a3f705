"""Named exceptions of walflow.

Every error walflow raises on purpose derives from :class:`WalflowError`, and its message names the
offending value, the cause and the fix, so an operator reading a task log knows what to change.
"""

from __future__ import annotations


class WalflowError(Exception):
    """Base class of every error raised by walflow."""


class ConfigError(WalflowError):
    """A connector configuration is invalid; raised before anything touches a database."""


class SourceError(WalflowError):
    """The source PostgreSQL server or database cannot be used as configured."""


class SlotError(SourceError):
    """The replication slot is missing, busy, or in a state that would lose or repeat changes."""


class ConcurrentRunError(SlotError):
    """Another process already consumes this connector's slot."""


class DecodeError(WalflowError):
    """A pgoutput message could not be decoded."""


class ConversionError(WalflowError):
    """A column value could not be converted to its Debezium representation."""


class DeliveryError(WalflowError):
    """Kafka did not acknowledge every record of a batch; the slot was not advanced past them."""


class LakeError(WalflowError):
    """The lake cannot take the change events as they are; nothing was committed for the table named."""


class LakeSchemaError(LakeError):
    """The events' columns do not fit the lake table (an incompatible type change, schemaless values of another kind)."""


class LakeHistoryError(LakeError):
    """The lake table's snapshot history cannot be trusted: another writer changed it, or expiry removed the
    snapshot that holds the offsets walflow applied."""


class TopicMismatchError(LakeError):
    """A topic is no longer the one the lake read (recreated, or the broker lost its data)."""


class UnappliableRecordError(LakeError):
    """A Kafka record, or one value in it, that the lake job cannot apply.

    The message names the topic, partition, offset, column and value, and the way past it
    (``walflow.lake.accept.records``).
    """

    def __init__(self, message: str, problems: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        #: each problem: topic, partition, offset, column, value (truncated), error
        self.problems = problems or []
