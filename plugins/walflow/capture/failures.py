"""``event.processing.failure.handling.mode``: what a task does with an event it cannot build.

Debezium catches whatever fails while it builds one event (a value its schema cannot carry, such as NaN in a NOT
NULL precise decimal) and, by this key, stops the connector (``fail``, the default), logs the event's position and
leaves it out (``warn``), or leaves it out silently (``skip``, and ``ignore``, which it handles as ``skip``). The
stream, the initial and blocking snapshots and the incremental snapshots' chunks all hand their
:class:`~walflow.errors.ConversionError` to :class:`EventFailures`, which raises it under ``fail`` and otherwise
keeps count of what was left out, so that nothing is left out unseen:

- each left-out event is logged (a warning under ``warn``, debug under ``skip``) with its table, position and cause,
  and listed in the batch's summary (its warnings and ``events_left_out``), which walflow's status adds up;
- with the lake on, a fact on the schema topic (:func:`left_out_record`) tells the lake job, which marks the lake
  table incomplete (:data:`walflow.records.facts.LEFT_OUT_KIND`).
"""

from __future__ import annotations

import logging
from typing import Any

from walflow.config.connector import ConnectorConfig
from walflow.errors import ConversionError
from walflow.kafka import EventProducer
from walflow.records.facts import LEFT_OUT_KIND, fact_record

log = logging.getLogger(__name__)

#: the left-out events a task describes in its summary (the count goes on): a table full of NaN must not fill the log
#: of every batch with the same line, nor its XCom
DESCRIBED = 20


def left_out_record(schema: str, table: str, position: str, reason: str, mode: str) -> tuple[bytes, bytes]:
    """The schema topic's record of an event of ``schema.table`` at ``position`` that the connector left out."""
    return fact_record(LEFT_OUT_KIND, schema, table, position=position, reason=reason[:1000], mode=mode)


class EventFailures:
    """The events one task could not build, handled as ``event.processing.failure.handling.mode`` says.

    :param config: the connector's configuration.
    :param producer: where the lake's facts go (the schema topic); None when the task writes no facts.
    """

    def __init__(self, config: ConnectorConfig, producer: EventProducer | None = None) -> None:
        self.mode = config.event_processing_failure_handling_mode
        self._name = config.name
        self._producer = producer if config.walflow_lake_enabled else None
        self._topic = config.schema_topic
        #: how many events this task left out
        self.count = 0
        #: the first :data:`DESCRIBED` of them: table, position and cause
        self.described: list[dict[str, Any]] = []

    @property
    def tolerant(self) -> bool:
        """True when an event that cannot be built is left out rather than stopping the task."""
        return self.mode != "fail"

    def left_out(self, exc: ConversionError, schema: str, table: str, position: str) -> str:
        """Leave out the event ``exc`` refused, at ``position`` of ``schema.table``; return the line that says so.

        :raises ConversionError: ``exc`` itself under ``fail``.
        """
        if not self.tolerant:
            raise exc
        line = (
            f"left out the event of table {schema}.{table} at {position}: {exc} "
            f"(event.processing.failure.handling.mode={self.mode})"
        )
        if self.mode == "warn":
            log.warning("connector %s: %s", self._name, line)
        else:
            log.debug("connector %s: %s", self._name, line)
        self.count += 1
        if len(self.described) < DESCRIBED:
            self.described.append({"table": f"{schema}.{table}", "position": position, "reason": str(exc)[:500]})
        if self._producer is not None:
            self._producer.send(self._topic, *left_out_record(schema, table, position, str(exc), self.mode))
        return line
