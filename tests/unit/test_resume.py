"""Where a stream batch resumes reading (capture/stream/resume.py), and the LSN type it reasons with."""

from __future__ import annotations

import logging

import pytest

from walflow.capture.stream.resume import resume_point
from walflow.errors import DecodeError
from walflow.source.lsn import Lsn


def test_an_lsn_is_a_number_that_prints_as_postgresql_prints_it() -> None:
    lsn = Lsn.parse("16/B374D848")
    assert lsn == 0x16_B374_D848 and str(lsn) == "16/B374D848" and f"{lsn}" == "16/B374D848"
    assert "%s" % lsn == "16/B374D848"  # noqa: UP031  # how logging formats it (lazy %s)
    assert f"{lsn:d}" == str(0x16_B374_D848)
    # positions compare as numbers, which their text does not ("0/FFFFFF" sorts after "0/1000000" as text)
    assert Lsn.parse("0/FFFFFF") < Lsn.parse("0/1000000")
    with pytest.raises(DecodeError, match=r"'16-B3' is not an LSN"):
        Lsn.parse("16-B3")


def test_a_slot_where_the_previous_batch_left_it_resumes_there() -> None:
    assert resume_point("c", "s", Lsn.parse("0/200"), {"confirmed_to": "0/200", "timeline": 1}, 1) is None
    assert resume_point("c", "s", Lsn.parse("0/300"), {"confirmed_to": "0/200", "timeline": 1}, 1) is None
    assert resume_point("c", "s", Lsn.parse("0/100"), {}, 1) is None  # a connector's first batch


def test_a_slot_a_crash_rolled_back_reads_past_what_kafka_holds(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        skip = resume_point("c", "s", Lsn.parse("0/100"), {"confirmed_to": "0/200", "timeline": 1}, 1)
    assert skip == Lsn.parse("0/200")
    assert "behind 0/200 where the previous batch left it" in caplog.text and "skipped" in caplog.text


def test_after_a_failover_nothing_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        skip = resume_point("c", "s", Lsn.parse("0/100"), {"confirmed_to": "0/200", "timeline": 1}, 2)
    assert skip is None
    assert "timeline 2" in caplog.text and "streamed again" in caplog.text
