"""The pure parts of walflow.source and walflow.source.health: the server version check, initial statements, replica
identity warnings and the slot-health judgement
(each a function of its inputs, so every branch is tested without a server)."""

from __future__ import annotations

import pytest

from walflow.errors import SourceError
from walflow.source.connection import MIN_SERVER_VERSION, check_server_version, split_statements
from walflow.source.health import HealthLimits, SlotHealth, assess_slot_health, confirmed_time
from walflow.source.publication import replica_identity_warning


@pytest.mark.parametrize(
    ("version_num", "version"),
    [(100023, "10.23"), (110022, "11.22"), (130016, "13.16"), (140013, "14.13 (Debian 14.13-1)")],
)
def test_too_old_servers_are_refused_with_their_version_and_the_fix(version_num: int, version: str) -> None:
    with pytest.raises(SourceError) as exc:
        check_server_version(version_num, version)
    message = str(exc.value)
    assert f"PostgreSQL {version} (server_version_num {version_num}) is too old" in message
    assert f"PostgreSQL {MIN_SERVER_VERSION // 10000} or newer" in message and "Upgrade the server" in message


@pytest.mark.parametrize("version_num", [MIN_SERVER_VERSION, 150008, 160004, 170000, 180001])
def test_supported_servers_pass(version_num: int) -> None:
    check_server_version(version_num, str(version_num))


def test_initial_statements_split_like_debezium() -> None:
    assert split_statements(None) == [] and split_statements("  ") == []
    assert split_statements("SET search_path = app; SET lock_timeout = '1s';") == [
        "SET search_path = app",
        "SET lock_timeout = '1s'",
    ]
    # ';;' stands for a literal semicolon inside one statement
    assert split_statements("SELECT 'a;;b'; SET x = 1") == ["SELECT 'a;b'", "SET x = 1"]


@pytest.mark.parametrize(
    ("replident", "has_pk", "expected"),
    [
        ("d", True, None),
        ("f", False, None),
        ("i", False, None),
        ("d", False, "no primary key and REPLICA IDENTITY DEFAULT"),
        ("n", False, "no primary key and REPLICA IDENTITY NOTHING"),
        ("n", True, "has a primary key but REPLICA IDENTITY NOTHING"),
    ],
)
def test_replica_identity_warning(replident: str, has_pk: bool, expected: str | None) -> None:
    warning = replica_identity_warning("s", "t", replident, has_pk)
    if expected is None:
        assert warning is None
    else:
        assert warning is not None and "table s.t" in warning and expected in warning and "Fix:" in warning


def test_confirmed_time_prefers_the_last_confirmation_over_the_last_batch() -> None:
    assert confirmed_time(None) == (None, None)
    assert confirmed_time({"last_batch": {"finished_at_ms": 5, "advanced_to": None}}) == (None, None)
    # records written before confirmed_at_ms existed: the batch's own finish time
    assert confirmed_time({"last_batch": {"finished_at_ms": 5, "advanced_to": "0/10"}}) == (5, "0/10")
    # a batch that confirmed nothing new carries the last confirmation over
    idle = {"last_batch": {"finished_at_ms": 9, "advanced_to": "0/8", "confirmed_at_ms": 7, "confirmed_to": "0/8"}}
    assert confirmed_time(idle) == (7, "0/8")


def test_slot_health_judgement() -> None:
    healthy = SlotHealth(
        "s", True, retained_wal_bytes=100, confirmed_lag_bytes=50, seconds_since_confirmed=10.0, wal_status="reserved"
    )
    limits = HealthLimits(
        warn_retained_wal_bytes=1000, fail_retained_wal_bytes=5000, warn_lag_bytes=500, warn_seconds_since_confirmed=600
    )
    assert assess_slot_health(healthy, limits) == ([], None)
    behind = SlotHealth(
        "s",
        True,
        retained_wal_bytes=2000,
        confirmed_lag_bytes=900,
        seconds_since_confirmed=3600.0,
        wal_status="reserved",
    )
    warnings, error = assess_slot_health(behind, limits)
    assert error is None and len(warnings) == 3
    assert "retains 2000 bytes" in warnings[0] and "900 bytes behind" in warnings[1] and "3600 s ago" in warnings[2]
    warnings, error = assess_slot_health(
        SlotHealth("s", True, retained_wal_bytes=6000, wal_status="unreserved"), limits
    )
    assert (
        error is not None
        and "above the hard limit walflow.slot.fail.retained.wal.bytes=5000" in error
        and "heartbeat.action.query" in error
    )
    assert "wal_status=unreserved" in warnings[0]
    assert assess_slot_health(SlotHealth("s", True, retained_wal_bytes=10**12), HealthLimits()) == (
        [],
        None,
    )  # limits off
    _, error = assess_slot_health(SlotHealth("gone", False), limits)
    assert error is not None and "'gone' does not exist" in error and "when_needed" in error
    # a slot that lost WAL it needed cannot stream again: an error, whatever the limits, not a warning to stream now
    _, error = assess_slot_health(SlotHealth("s", True, retained_wal_bytes=10, wal_status="lost"), HealthLimits())
    assert error is not None and "wal_status=lost" in error and "walflow reset" in error
