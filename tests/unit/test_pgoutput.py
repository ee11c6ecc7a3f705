"""The pgoutput decoder on messages captured from a real PostgreSQL 15 server (see capture_pgoutput.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from walflow.errors import DecodeError
from walflow.source.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputDecoder,
    Relation,
    Truncate,
    Update,
    lsn_to_str,
    pg_micros_to_unix_ms,
    str_to_lsn,
)

CAPTURE = json.loads((Path(__file__).parent / "data" / "pgoutput_v1.json").read_text())


@pytest.fixture(scope="module")
def messages() -> list[object]:
    decoder = PgOutputDecoder()
    return [decoder.decode(bytes.fromhex(row["hex"])) for row in CAPTURE]


def of(messages: list[object], cls: type) -> list:
    return [m for m in messages if type(m) is cls]


def test_transactions_are_framed_by_begin_and_commit(messages: list[object]) -> None:
    begins, commits = of(messages, Begin), of(messages, Commit)
    assert len(begins) == len(commits) == 8
    for begin, commit in zip(begins, commits):
        assert begin.final_lsn == commit.commit_lsn
        assert commit.end_lsn > commit.commit_lsn
        assert begin.commit_ts == commit.commit_ts
    assert [b.xid for b in begins] == sorted(b.xid for b in begins)


def test_relation_message_describes_columns(messages: list[object]) -> None:
    cap = next(m for m in of(messages, Relation) if m.name == "cap")
    assert cap.namespace == "public"
    assert cap.replica_identity == "d"
    assert [(c.name, c.type_oid, c.is_key) for c in cap.columns] == [
        ("id", 23, True),
        ("name", 25, False),
        ("note", 25, False),
        ("big", 25, False),
    ]
    full = next(m for m in of(messages, Relation) if m.name == "capfull")
    assert full.replica_identity == "f"
    assert all(c.is_key for c in full.columns)


def test_insert_values_are_text_or_none(messages: list[object]) -> None:
    first = of(messages, Insert)[0]
    assert first.new[:3] == ["1", "one", None]
    assert len(first.new[3]) == 6400


def test_unchanged_toast_value_is_marked(messages: list[object]) -> None:
    update = of(messages, Update)[0]
    assert update.old is None  # REPLICA IDENTITY DEFAULT, key unchanged: no old tuple
    assert update.new[:3] == ["1", "one", "n"]
    assert update.new[3] is UNCHANGED_TOAST


def test_key_change_sends_old_key_tuple(messages: list[object]) -> None:
    update = of(messages, Update)[1]
    assert update.old_is_key
    assert update.old[0] == "1" and update.old[1] is None
    assert update.new[0] == "2"


def test_replica_identity_full_sends_old_row(messages: list[object]) -> None:
    update = next(m for m in of(messages, Update) if m.relation.name == "capfull")
    assert not update.old_is_key and update.old == ["1", "a"] and update.new == ["1", "b"]
    delete = next(m for m in of(messages, Delete) if m.relation.name == "capfull")
    assert delete.old == ["1", "b"] and not delete.old_is_key


def test_delete_with_default_identity_sends_key_only(messages: list[object]) -> None:
    delete = next(m for m in of(messages, Delete) if m.relation.name == "cap")
    assert delete.old_is_key and delete.old == ["2", None, None, None]


def test_logical_message(messages: list[object]) -> None:
    (msg,) = of(messages, Message)
    assert msg.transactional and msg.prefix == "walflow-test" and msg.content == b"hello"


def test_added_column_shows_in_new_relation(messages: list[object]) -> None:
    caps = [m for m in of(messages, Relation) if m.name == "cap"]
    assert [c.name for c in caps[-1].columns] == ["id", "name", "note", "big", "extra"]
    insert = of(messages, Insert)[-1]
    assert insert.relation.columns[-1].name == "extra"
    assert insert.new == ["3", "three", None, None, "7"]


def test_truncate_lists_relations(messages: list[object]) -> None:
    (truncate,) = of(messages, Truncate)
    assert sorted(r.name for r in truncate.relations) == ["cap", "capfull"]
    assert not truncate.cascade and not truncate.restart_identity


def test_change_before_relation_is_an_error() -> None:
    insert = next(bytes.fromhex(r["hex"]) for r in CAPTURE if r["hex"].startswith("49"))
    with pytest.raises(DecodeError, match="before its Relation message"):
        PgOutputDecoder().decode(insert)


def test_unknown_and_truncated_messages_are_errors() -> None:
    with pytest.raises(DecodeError, match="unknown pgoutput message type"):
        PgOutputDecoder().decode(b"Z\x00")
    with pytest.raises(DecodeError, match="malformed"):
        PgOutputDecoder().decode(b"B\x00\x01")


def test_lsn_round_trip() -> None:
    assert lsn_to_str(str_to_lsn("16/B374D848")) == "16/B374D848"
    assert str_to_lsn("0/0") == 0
    with pytest.raises(DecodeError):
        str_to_lsn("nonsense")


def test_commit_time_is_unix_ms() -> None:
    assert pg_micros_to_unix_ms(0) == 946_684_800_000


def test_type_message_names_user_types(messages: list[object]) -> None:
    from walflow.source.pgoutput import TypeInfo

    (mood,) = of(messages, TypeInfo)
    assert (mood.namespace, mood.name) == ("public", "mood")
    enum_insert = next(m for m in of(messages, Insert) if m.relation.name == "capenum")
    assert enum_insert.relation.columns[1].type_oid == mood.type_oid
    assert enum_insert.new == ["1", "happy"]


#: A transaction replayed under a replication origin, captured from PostgreSQL 15 with
#: pg_replication_origin_session_setup('upstream_a') and pg_replication_origin_xact_setup('0/1A2B3C4D', now()):
#: Begin, Origin, Relation, Insert, Commit.
ORIGIN_CAPTURE = [
    "420000000023a93fc0000303ecca6ac7710000a542",
    "4f000000001a2b3c4d757073747265616d5f6100",
    "52000073b87075626c69630074006400010169640000000017ffffffff",
    "49000073b84e0001740000000131",
    "43000000000023a93fc00000000023a94020000303ecca6ac771",
]


def test_origin_message_names_the_origin_and_its_commit_lsn() -> None:
    decoder = PgOutputDecoder()
    begin, origin, relation, insert, commit = [decoder.decode(bytes.fromhex(h)) for h in ORIGIN_CAPTURE]
    assert type(begin) is Begin and type(commit) is Commit and begin.final_lsn == commit.commit_lsn
    assert type(origin) is Origin
    assert origin.name == "upstream_a"
    assert origin.lsn == str_to_lsn("0/1A2B3C4D")
    assert type(relation) is Relation and relation.name == "t"
    assert type(insert) is Insert and insert.new == ["1"]
