"""Debezium's notifications (``notification.enabled.channels``): the progress of initial and incremental snapshots,
as records on ``notification.sink.topic.name`` (the ``sink`` channel) and lines in the task log (``log``).

Each notification is Debezium's ``io.debezium.connector.common.Notification``: an ``id`` (a new UUID, or an
incremental snapshot's signal id), the ``aggregate_type`` (``Initial Snapshot``, ``Incremental Snapshot``), the
``type`` (``STARTED``, ``IN_PROGRESS``, ``TABLE_SCAN_COMPLETED``, ``COMPLETED``...), ``additional_data`` (strings by
name, with ``connector_name``; in the order of Java's ``HashMap``, as Debezium writes them) and a ``timestamp``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from walflow.capture.context import CaptureContext, CaptureHelpers
from walflow.kafka import EventProducer
from walflow.records.envelope import java_copy_capacity, java_hash_map_order
from walflow.records.events import now_ms

log = logging.getLogger(__name__)

INITIAL, INCREMENTAL = "Initial Snapshot", "Incremental Snapshot"

KEY_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "id"}],
    "optional": False,
    "name": "io.debezium.connector.common.NotificationKey",
    "version": 1,
}
VALUE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "string", "optional": False, "field": "type"},
        {"type": "string", "optional": False, "field": "aggregate_type"},
        {
            "type": "map",
            "keys": {"type": "string", "optional": False},
            "values": {"type": "string", "optional": False},
            "optional": True,
            "field": "additional_data",
        },
        {"type": "int64", "optional": False, "field": "timestamp"},
    ],
    "optional": False,
    "name": "io.debezium.connector.common.Notification",
    "version": 1,
}  # fmt: skip


def collections(names: Iterable[str]) -> str:
    """Debezium's ``data_collections``: the tables' names, comma-separated, in the order of Java's ``HashSet``."""
    return ",".join(java_hash_map_order(list(dict.fromkeys(names))))


class Notifier:
    """The connector's notification channels; does nothing when none is enabled.

    :param context: the task's context; the ``sink`` channel writes with its producer (only when that channel is
        enabled: a context without a producer, :class:`CaptureHelpers`, serves a connector whose sink channel is off).
    :raises ValueError: for the ``sink`` channel with a context that has no producer.
    """

    def __init__(self, context: CaptureHelpers) -> None:
        config = context.config
        channels = set(config.notification_enabled_channels)
        self.config = config
        self.log = "log" in channels
        self.producer: EventProducer | None = None
        if "sink" in channels:
            if not isinstance(context, CaptureContext):
                raise ValueError("the 'sink' notification channel needs a context with a producer")
            self.producer = context.producer
        self.topic = config.notification_sink_topic_name
        self.enabled = self.log or self.producer is not None
        self._ser = context.serializer
        self._key_prefix = self._ser.prefix(KEY_SCHEMA)
        self._value_prefix = self._ser.prefix(VALUE_SCHEMA)
        self._topic_ready = False

    def notify(
        self, aggregate: str, kind: str, data: dict[str, str] | None = None, notification_id: str | None = None
    ) -> None:
        if not self.enabled:
            return
        data = data or {}
        full = {**data, "connector_name": self.config.topic_prefix}
        payload = {
            "id": notification_id or str(uuid.uuid4()),
            "type": kind,
            "aggregate_type": aggregate,
            # Debezium copies the data into a HashMap and adds the connector's name (keys of one bucket keep that
            # order, which for the data's own keys Java draws anew in each JVM)
            "additional_data": {
                name: full[name] for name in java_hash_map_order(list(full), java_copy_capacity(len(data)))
            },
            "timestamp": now_ms(),
        }
        if self.log:
            log.info("[Notification Service] %s %s %s", aggregate, kind, payload["additional_data"])
        if self.producer is not None:
            assert self.topic is not None
            if not self._topic_ready:
                self.producer.ensure_topic(self.topic)
                self._topic_ready = True
            self.producer.send(
                self.topic,
                self._ser.key(self._key_prefix, {"id": payload["id"]}),
                self._ser.value(self._value_prefix, payload),
            )
