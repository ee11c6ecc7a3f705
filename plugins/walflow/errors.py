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
