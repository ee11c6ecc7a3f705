"""EventFailures: event.processing.failure.handling.mode for one task (walflow.capture.failures)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from walflow.capture.failures import DESCRIBED, EventFailures
from walflow.config.connector import parse_config
from walflow.errors import ConversionError


class Recorder:
    """A producer that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def send(self, topic: str, key: bytes, value: bytes, *_: Any) -> None:
        self.sent.append((topic, key, value))


def failures(mode: str, lake: bool = False) -> tuple[EventFailures, Recorder]:
    config = parse_config(
        {
            "name": "c",
            "topic.prefix": "p",
            "event.processing.failure.handling.mode": mode,
            "walflow.lake.enabled": lake,
        }
    )
    recorder = Recorder()
    return EventFailures(config, recorder), recorder  # type: ignore[arg-type]  # a producer's send() is all it uses


def test_fail_raises_the_error_itself() -> None:
    handler, recorder = failures("fail")
    error = ConversionError("table public.t column 'n': cannot convert value 'NaN'")
    assert not handler.tolerant
    with pytest.raises(ConversionError) as raised:
        handler.left_out(error, "public", "t", "LSN 0/1")
    assert raised.value is error and handler.count == 0 and recorder.sent == []


@pytest.mark.parametrize("mode", ["warn", "skip", "ignore"])
def test_other_modes_leave_the_event_out_and_count_it(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    handler, recorder = failures(mode)
    caplog.set_level("DEBUG", logger="walflow.capture.failures")
    for i in range(DESCRIBED + 5):
        line = handler.left_out(ConversionError(f"value {i}"), "public", "t", f"LSN 0/{i}")
        assert f"public.t at LSN 0/{i}: value {i}" in line and f"mode={mode}" in line
    assert handler.count == DESCRIBED + 5 and len(handler.described) == DESCRIBED
    assert handler.described[0] == {"table": "public.t", "position": "LSN 0/0", "reason": "value 0"}
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == (DESCRIBED + 5 if mode == "warn" else 0)
    assert recorder.sent == []  # no lake: no facts


def test_with_the_lake_each_event_left_out_is_a_fact_on_the_schema_topic() -> None:
    handler, recorder = failures("warn", lake=True)
    handler.left_out(ConversionError("cannot convert value 'NaN'"), "public", "t", "LSN 0/16")
    ((topic, key, value),) = recorder.sent
    assert topic == "__walflow-schema.p"
    assert orjson.loads(key) == {"schema": "public", "table": "t"}
    fact = orjson.loads(value)
    assert (fact["kind"], fact["position"], fact["mode"]) == ("left_out", "LSN 0/16", "warn")
    assert fact["reason"] == "cannot convert value 'NaN'"
