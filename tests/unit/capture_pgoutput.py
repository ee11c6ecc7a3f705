"""Regenerates tests/unit/data/pgoutput_v1.json from a real server: `python tests/unit/capture_pgoutput.py`.

The decoder's unit tests run on these bytes, so they need no server; this script documents where they came from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg

SCENARIO = """
CREATE TABLE cap (id int PRIMARY KEY, name text NOT NULL, note text, big text);
CREATE TABLE capfull (id int PRIMARY KEY, v text);
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE TABLE capenum (id int PRIMARY KEY, m mood);
ALTER TABLE capfull REPLICA IDENTITY FULL;
CREATE PUBLICATION cap_pub FOR ALL TABLES;
"""
DML = [
    "INSERT INTO cap VALUES (1, 'one', NULL, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i))",
    "UPDATE cap SET note = 'n' WHERE id = 1",
    "UPDATE cap SET id = 2 WHERE id = 1",
    "INSERT INTO capfull VALUES (1, 'a'); UPDATE capfull SET v = 'b' WHERE id = 1; DELETE FROM capfull WHERE id = 1",
    "DELETE FROM cap WHERE id = 2",
    "SELECT pg_logical_emit_message(true, 'walflow-test', 'hello'); INSERT INTO capenum VALUES (1, 'happy')",
    "ALTER TABLE cap ADD COLUMN extra int DEFAULT 7; INSERT INTO cap (id, name) VALUES (3, 'three')",
    "TRUNCATE cap, capfull",
]


def main(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE pgoutput_capture")
    cap_dsn = dsn.replace("dbname=postgres", "dbname=pgoutput_capture")
    try:
        with psycopg.connect(cap_dsn, autocommit=True) as conn:
            conn.execute(SCENARIO)
            conn.execute("SELECT pg_create_logical_replication_slot('cap', 'pgoutput')")
            for statement in DML:
                with conn.transaction():
                    conn.execute(statement)
            rows = conn.execute(
                "SELECT lsn::text, encode(data, 'hex') FROM pg_logical_slot_get_binary_changes('cap', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'cap_pub', 'messages', 'true')"
            ).fetchall()
            conn.execute("SELECT pg_drop_replication_slot('cap')")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP DATABASE pgoutput_capture WITH (FORCE)")
    out = Path(__file__).parent / "data" / "pgoutput_v1.json"
    out.write_text(json.dumps([{"lsn": lsn, "hex": data} for lsn, data in rows], indent=0) + "\n")
    print(f"wrote {len(rows)} messages to {out}")


if __name__ == "__main__":
    import os

    main(sys.argv[1] if len(sys.argv) > 1 else os.environ["WALFLOW_PG_DSN"])
