"""The model-based differential test of the whole pipeline (``make test-torture``; a short form in ``make test``).

A seeded generator drives random DML and DDL against tables of varied shape; after every round the stream and the
lake run, cut into random batches (``walflow.batch.max.events`` and ``walflow.lake.max.records``) over several
partitions and stopped at random points (the stream before or after Kafka acknowledged a batch, the lake job at
each of its hook points, so that redelivered records are applied in a later run, or overtaken there by a second
run of the job that starts and ends before it goes on: two applies at once, which the fence must settle), until
both have caught up;
then every lake table is compared with its source table row by row (:mod:`tests.lakecheck`). A round ends

- ``EQUAL``: every table equals its source;
- ``REFUSED``: the lake job stopped with a walflow error; it must name the table, the cause and the fix, and be
  of a class the harness expects (``REFUSAL_CLASSES``: the documented limits); the harness then applies the fix
  and goes on, and any other refusal ends the run;
- ``DIVERGED``: every run reported success and a lake table differs from its source: a failure.

Everything random comes from ``random.Random(seed)``; a failing round prints the seed and its statements.

The tables: an int key with TOAST-able text, a composite text+int key, a keyless table (REPLICA IDENTITY FULL), a
table whose replica identity is a unique index without the key (``REPLICA IDENTITY USING INDEX``; its deletes carry
the index's columns only, and both its key and its identity columns change), a hash-partitioned table (changes
stream under each partition's name into the partition's topic, as Debezium's do, so each partition's lake table is
compared with that partition; the parent's topic holds its snapshot only), and a name Kafka cannot carry.
The DDL: columns added (with a constant default or none, then maybe SET or DROP DEFAULT), renamed, dropped and
added again (in two statements, one statement or one transaction), and on keyed tables a rewrite (``VACUUM FULL``)
followed by a column with a per-row default, whose existing rows' values only a re-read of the table can give.
The migrations of issue 45, which change rows without change events: type changes with ``USING`` (int to bigint,
text through ``upper``, a numeric's precision), columns added as an identity, a ``bigserial``, a ``uuid`` with a
volatile default or of a domain with a default and a CHECK, an enum label renamed (``t_mood``'s column and array),
``t_refresh`` dropped and created again (in one transaction with its inserts, or across transactions with the
pipeline run in between) or swapped in by renames, and a table renamed away and back around an update in one
transaction. Key changes include rotations of three keys in one transaction, and ``t_int``'s arrays are sometimes
large enough to be TOASTed. A rewrite of the keyless table (drawn rarely) is refused with the fix; the harness then
applies it (``walflow reset --lake`` and a new setup) and counts the refusal by its class.
The keyless table is compared only until the first stream fault (its redelivered records are indistinguishable from
equal rows: docs/lake.md's documented limit; the outcome says until which round it was compared). A column added
to a table is followed by a change of that table (of each partition of a partitioned table) in the same round (the
lake learns a definition from events).
About one round in ten also runs the lake's maintenance between two applies (compaction, expiry and orphan removal
with no retention), wherever a cut left the lake: the next apply then finds its offsets in the rewrite's snapshot.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from tests.lakecheck import differences
from tests.privileges import as_connector
from tests.support import apply_lake, connector, lake_settings, setup, stream, unique
from walflow.admin.reset import reset_connector
from walflow.errors import LakeFenceError, WalflowError
from walflow.lake.hooks import POINTS, ApplyHooks
from walflow.lake.maintain import LakeMaintenance
from walflow.lake.naming import table_name

STREAM_POINTS = ("before_produce", "produced", "before_flush", "flushed")
TYPES = {
    "int": lambda r: r.randint(-1000, 1000),
    "text": lambda r: r.choice(["", "a", "b c", "ü%{x}", "'q'"]) + str(r.randint(0, 99)),
    "numeric(8,2)": lambda r: round(r.uniform(-9999, 9999), 2),
    "boolean": lambda r: r.random() < 0.5,
    "int[]": lambda r: [r.randint(0, 9) for _ in range(r.randint(0, 3))],
    "jsonb": lambda r: psycopg.types.json.Jsonb({"k": r.randint(0, 5), "l": [r.random() < 0.5]}),
}
#: types the migrations bring (never drawn for a new column by the plain DDL)
MORE_TYPES = {
    "bigint": lambda r: r.randint(-(10**12), 10**12),
    "numeric(12,2)": lambda r: round(r.uniform(-99999, 99999), 2),
    "uuid": lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)),
    "tort_qty": lambda r: r.randint(-1000, 1000),
}
DEFAULTS = {
    "int": ["5", "-1"],
    "text": ["'old'", "'d%s'"],
    "numeric(8,2)": ["1.25"],
    "boolean": ["true"],
    "int[]": ["ARRAY[1, 2]"],
    "jsonb": ["'{\"d\": 1}'"],
}
#: t_refresh as it is created (again)
REFRESH = {"id": "int", "v": "text", "n": "int"}


@dataclasses.dataclass
class Table:
    name: str
    key: list[str]
    columns: dict[str, str]
    next_id: int = 1
    #: columns of the unique index that is the replica identity (``REPLICA IDENTITY USING INDEX``), kept unique
    identity: list[str] = dataclasses.field(default_factory=list)
    #: hash partitions (the table is partitioned by its key when > 0)
    partitions: int = 0

    def compared(self) -> list[str]:
        """The source tables whose lake tables must equal them: a partitioned table's partitions."""
        return [f"{self.name}_p{i}" for i in range(self.partitions)] or [self.name]

    def ident(self) -> sql.Identifier:
        return sql.Identifier("public", self.name)


class Crash(Exception):
    """A fault the harness injects (the process would have died here)."""


class LakeCrash(ApplyHooks):
    def __init__(self, point: str) -> None:
        self.point = point

    def reached(self, point: str, table: str) -> None:
        if point == self.point:
            raise Crash(f"lake job stopped at {point} ({table})")


class Overtaken(ApplyHooks):
    """Two applies at once: at ``point`` another run of the job starts and ends before this one goes on (as a
    retried Airflow task beside an orphaned spark-submit); the fence must then refuse whatever this run would
    still publish on a table the other one changed."""

    def __init__(self, point: str, other: Any) -> None:
        self.point, self.other, self.done = point, other, False

    def reached(self, point: str, table: str) -> None:
        if point == self.point and not self.done:
            self.done = True
            self.other()


class StreamCrash:
    def __init__(self, point: str, after: int) -> None:
        self.point, self.after = point, after

    def __call__(self, stage: str) -> None:
        if stage == self.point:
            self.after -= 1
            if self.after < 0:
                raise Crash(f"stream stopped at {stage}")


class Torture:
    """One seed's run: tables, rounds, and the outcome of each round."""

    def __init__(self, seed: int, spark: Any, dsn: str, log: Any = print) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.spark = spark
        self.dsn = dsn
        self.log = log
        partitions = 1 + seed % 3  # one, two or three partitions per topic by seed
        self.config = connector(
            unique(f"tort{seed}"), **{"topic.creation.default.partitions": partitions, "skipped.operations": "none"}
        )
        self.tables = [
            Table("t_int", ["id"], {"id": "int", "name": "text", "n": "int", "doc": "text", "tags": "int[]"}),
            Table("t_comp", ["a", "b"], {"a": "text", "b": "int", "v": "numeric(8,2)"}),
            Table("t_keyless", [], {"x": "int", "y": "text"}),
            Table("order items", ["id"], {"id": "int", "qty": "int", "note": "text"}),
            Table("t_ident", ["id"], {"id": "int", "code": "int", "v": "text"}, identity=["code"]),
            Table("t_part", ["id"], {"id": "int", "v": "text", "n": "int"}, partitions=2),
            Table("t_mood", ["id"], {"id": "int", "mood": "tort_mood", "moods": "tort_mood[]", "v": "text"}),
            Table("t_refresh", ["id"], dict(REFRESH)),
        ]
        #: the labels of enum tort_mood (renamed by the migrations)
        self.labels = ["sad", "ok", "glad"]
        #: refusals met and fixed (walflow reset --lake and a new setup), by class
        self.refusals: dict[str, int] = {}
        #: the migrations drawn (Torture.migration), by kind
        self.migrations: dict[str, int] = {}
        self.statements: list[str] = []
        self.counter = 0
        self.faults: dict[str, int] = {"stream": 0, "lake": 0, "fenced": 0}
        self.maintained = 0
        #: the last round after which the keyless table was compared too (see :meth:`compare`)
        self.keyless_until = 0

    # -- source ------------------------------------------------------------------------------------
    def execute(self, conn: psycopg.Connection, query: Any, params: Any = None) -> None:
        self.statements.append(query.as_string(conn) if not isinstance(query, str) else query)
        conn.execute(query, params)

    def create(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.execute(conn, "CREATE TYPE tort_mood AS ENUM ('sad', 'ok', 'glad')")
            self.execute(conn, "CREATE DOMAIN tort_qty AS int DEFAULT 3 CHECK (VALUE > -100000)")
            for t in self.tables:
                cols = [
                    sql.SQL("{} {}{}").format(
                        sql.Identifier(c), sql.SQL(ty), sql.SQL(" NOT NULL" if c in t.identity else "")
                    )
                    for c, ty in t.columns.items()
                ]
                if t.key:
                    cols.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, t.key))))
                partitioned = (
                    sql.SQL(" PARTITION BY HASH ({})").format(sql.Identifier(t.key[0])) if t.partitions else sql.SQL("")
                )
                self.execute(
                    conn, sql.SQL("CREATE TABLE {} ({}){}").format(t.ident(), sql.SQL(", ").join(cols), partitioned)
                )
                for i in range(t.partitions):
                    self.execute(
                        conn,
                        sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, REMAINDER {})").format(
                            sql.Identifier("public", f"{t.name}_p{i}"),
                            t.ident(),
                            sql.Literal(t.partitions),
                            sql.Literal(i),
                        ),
                    )
                if t.identity:
                    index = sql.Identifier(f"{t.name}_identity")
                    self.execute(
                        conn,
                        sql.SQL("CREATE UNIQUE INDEX {} ON {} ({})").format(
                            index, t.ident(), sql.SQL(", ").join(map(sql.Identifier, t.identity))
                        ),
                    )
                    self.execute(
                        conn, sql.SQL("ALTER TABLE {} REPLICA IDENTITY USING INDEX {}").format(t.ident(), index)
                    )
                if not t.key:
                    self.execute(conn, sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(t.ident()))
            for t in self.tables:
                self.insert(conn, t, self.rng.randint(5, 30))

    def value(self, ty: str, key: bool = False) -> Any:
        if ty == "text" and not key and self.rng.random() < 0.1:
            return "".join(
                self.rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(3000)
            )  # stored out of line
        if ty == "int[]" and self.rng.random() < 0.1:
            return [
                self.rng.randint(-(10**9), 10**9) for _ in range(800)
            ]  # stored out of line: its placeholder is numbers
        if ty == "tort_mood":
            return self.rng.choice(self.labels)
        if ty == "tort_mood[]":
            return [self.rng.choice(self.labels) for _ in range(self.rng.randint(0, 3))]
        return (TYPES.get(ty) or MORE_TYPES.get(ty) or TYPES["text"])(self.rng)

    def insert(self, conn: psycopg.Connection, t: Table, count: int) -> None:
        for _ in range(count):
            row = {}
            for c, ty in t.columns.items():
                if c in t.key and ty == "int":
                    row[c] = t.next_id
                    t.next_id += 1
                elif c in t.identity:
                    row[c] = (
                        500_000 + t.next_id
                    )  # unique while the key is (a change adds the same to every row it moves)
                else:
                    row[c] = self.value(ty, c in t.key)
            if t.key and any(row[k] is None for k in t.key):
                continue
            query = sql.SQL(
                "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING" if t.key else "INSERT INTO {} ({}) VALUES ({})"
            ).format(
                t.ident(),
                sql.SQL(", ").join(map(sql.Identifier, row)),
                sql.SQL(", ").join(sql.Literal(v) for v in row.values()),
            )
            self.execute(conn, query)

    def some_row(self, t: Table) -> sql.Composable:
        """A condition that selects about one row in ten (or one of a keyless table's rows)."""
        if t.key and t.columns[t.key[-1]] == "int":
            return sql.SQL("{} % 10 = {}").format(sql.Identifier(t.key[-1]), sql.Literal(self.rng.randint(0, 9)))
        return sql.SQL("ctid = (SELECT min(ctid) FROM {})").format(t.ident())

    def dml(self, conn: psycopg.Connection, t: Table) -> None:
        op = self.rng.random()
        payload = [c for c in t.columns if c not in t.key and c not in t.identity]
        if op < 0.35:
            self.insert(conn, t, self.rng.randint(1, 8))
        elif op < 0.75 and payload:
            column = self.rng.choice(payload)
            self.execute(
                conn,
                sql.SQL("UPDATE {} SET {} = {} WHERE {}").format(
                    t.ident(), sql.Identifier(column), sql.Literal(self.value(t.columns[column])), self.some_row(t)
                ),
            )
        elif op < 0.93:
            self.execute(conn, sql.SQL("DELETE FROM {} WHERE {}").format(t.ident(), self.some_row(t)))
        elif t.name == "t_int" and self.rng.random() < 0.5:
            # a key change (TOASTed columns left unchanged arrive as placeholders: the lake takes the old key's values)
            self.execute(
                conn,
                sql.SQL("UPDATE {} SET id = id + 100000 WHERE id % 17 = {} AND id < 100000").format(
                    t.ident(), sql.Literal(self.rng.randint(0, 16))
                ),
            )
        elif t.name == "t_int":
            # three keys rotated in one transaction (a -> tmp, b -> a, tmp -> b): each new key takes its TOASTed values
            # from the row it came from, through a key other rows had in the same transaction
            rows = conn.execute(
                sql.SQL("SELECT id FROM {} WHERE id > 0 ORDER BY id LIMIT 2 OFFSET {}").format(
                    t.ident(), sql.Literal(self.rng.randint(0, 10))
                )
            ).fetchall()
            if len(rows) == 2:
                (a,), (b,) = rows
                for old_id, new_id in ((a, -1), (b, a), (-1, b)):
                    self.execute(
                        conn,
                        sql.SQL("UPDATE {} SET id = {} WHERE id = {}").format(
                            t.ident(), sql.Literal(new_id), sql.Literal(old_id)
                        ),
                    )
        elif t.name == "t_ident":
            # the identity index's columns change (its old tuple carries the old ones), or the key does
            column = self.rng.choice(["code", "id"])
            self.execute(
                conn,
                sql.SQL("UPDATE {} SET {} = {} + 1000000 WHERE id % 13 = {}").format(
                    t.ident(), sql.Identifier(column), sql.Identifier(column), sql.Literal(self.rng.randint(0, 12))
                ),
            )
        elif t.name == "t_part":
            # a key change that may move the row to the other partition (a delete there, an insert here)
            self.execute(
                conn,
                sql.SQL("UPDATE {} SET id = id + 100000 WHERE id % 11 = {} AND id < 100000").format(
                    t.ident(), sql.Literal(self.rng.randint(0, 10))
                ),
            )
        elif t.name == "t_comp":
            self.execute(conn, sql.SQL("TRUNCATE {}").format(t.ident()))

    def migration(self, conn: psycopg.Connection, t: Table) -> bool:
        """One of issue 45's migrations on ``t`` (rows changed without change events), when one fits it: a rewrite,
        an enum label renamed, t_refresh dropped and created again or swapped in, a rename away and back, a column
        dropped and added again in one statement or transaction. Returns whether one ran."""
        payload = [c for c in t.columns if c not in t.key and c not in t.identity]
        kind = self.rng.random()
        name = f"c{self.counter}"
        ints = [c for c in payload if t.columns[c] == "int"]
        if t.name == "t_refresh" and kind < 0.5:
            label = self.refresh(conn, t, swap=self.rng.random() < 0.4)
        elif t.name == "t_mood" and kind < 0.5:
            old = self.rng.choice(self.labels)
            new = f"{old[:3]}{self.counter}"
            self.execute(
                conn, sql.SQL("ALTER TYPE tort_mood RENAME VALUE {} TO {}").format(sql.Literal(old), sql.Literal(new))
            )
            self.labels[self.labels.index(old)] = new
            label = "enum value renamed"
        elif not t.key and kind >= 0.05:
            return False  # a rewrite of a keyless table is refused (then fixed): drawn rarely
        elif kind < 0.25 and ints:
            column = self.rng.choice(ints)
            self.execute(
                conn,
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE bigint USING {} * 2").format(
                    t.ident(), *[sql.Identifier(column)] * 2
                ),
            )
            t.columns[column] = "bigint"
            label = "type change int -> bigint USING"
        elif kind < 0.35 and "numeric(8,2)" in [t.columns[c] for c in payload]:
            column = next(c for c in payload if t.columns[c] == "numeric(8,2)")
            self.execute(
                conn,
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE numeric(12,2) USING {} * 3").format(
                    t.ident(), *[sql.Identifier(column)] * 2
                ),
            )
            t.columns[column] = "numeric(12,2)"
            label = "type change numeric precision USING"
        elif kind < 0.45 and "text" in [t.columns[c] for c in payload]:
            column = self.rng.choice([c for c in payload if t.columns[c] == "text"])
            self.execute(
                conn,
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE text USING upper({})").format(
                    t.ident(), *[sql.Identifier(column)] * 2
                ),
            )
            label = "type change text USING upper"
        elif kind < 0.6:
            kinds = [("bigserial", "bigint"), ("uuid DEFAULT gen_random_uuid()", "uuid"), ("tort_qty", "tort_qty")]
            if not t.partitions:  # PostgreSQL 15 takes no identity column on a partitioned table
                kinds.append(("bigint GENERATED BY DEFAULT AS IDENTITY", "bigint"))
            ddl, ty = self.rng.choice(kinds)
            self.execute(
                conn, sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(t.ident(), sql.Identifier(name), sql.SQL(ddl))
            )
            t.columns[name] = ty
            label = f"column added: {ddl}"
        elif kind < 0.75 and t.key and not t.partitions:
            # renamed away and back around an update, in one transaction
            away = f"{t.name}_maint"
            column = self.rng.choice(payload) if payload else None
            with conn.transaction():
                self.execute(conn, sql.SQL("ALTER TABLE {} RENAME TO {}").format(t.ident(), sql.Identifier(away)))
                if column is not None:
                    self.execute(
                        conn,
                        sql.SQL("UPDATE {} SET {} = {} WHERE {}").format(
                            sql.Identifier("public", away),
                            sql.Identifier(column),
                            sql.Literal(self.value(t.columns[column])),
                            self.some_row(t),
                        ),
                    )
                self.execute(
                    conn,
                    sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                        sql.Identifier("public", away), sql.Identifier(t.name)
                    ),
                )
            label = "renamed away and back"
        elif kind < 0.9 and payload:
            # dropped and added again under its name in one statement, or in one transaction
            gone = self.rng.choice(payload)
            ty = self.rng.choice(list(TYPES))
            default = self.rng.choice([None, *DEFAULTS[ty]])
            added = sql.SQL("ADD COLUMN {} {}{}").format(
                sql.Identifier(gone), sql.SQL(ty), sql.SQL(f" DEFAULT {default}" if default else "")
            )
            if self.rng.random() < 0.5:
                self.execute(
                    conn, sql.SQL("ALTER TABLE {} DROP COLUMN {}, {}").format(t.ident(), sql.Identifier(gone), added)
                )
            else:
                with conn.transaction():
                    self.execute(conn, sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(t.ident(), sql.Identifier(gone)))
                    self.execute(conn, sql.SQL("ALTER TABLE {} {}").format(t.ident(), added))
            del t.columns[gone]
            t.columns[gone] = ty
            label = "column dropped and added again at once"
        else:
            return False
        if not t.key:
            label += " (keyless)"
        self.migrations[label] = self.migrations.get(label, 0) + 1
        return True

    def refresh(self, conn: psycopg.Connection, t: Table, swap: bool) -> str:
        """t_refresh made anew: dropped and created again and filled (in one transaction, or across transactions with
        the pipeline maybe run in between), or a new table filled and swapped in by renames (the old one dropped)."""
        t.columns = dict(REFRESH)
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(ty)) for c, ty in REFRESH.items()
        )
        fill = (
            f"SELECT g, 'r' || g || '-{self.counter}', g * {self.rng.randint(2, 9)}"
            f" FROM generate_series({self.rng.randint(1, 20)}, {self.rng.randint(20, 40)}) g"
        )
        if swap:
            fresh = sql.Identifier("public", "t_refresh_new")
            self.execute(conn, sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (id))").format(fresh, columns))
            self.execute(conn, sql.SQL("INSERT INTO {} {}").format(fresh, sql.SQL(fill)))
            with conn.transaction():
                self.execute(conn, sql.SQL("ALTER TABLE {} RENAME TO t_refresh_old").format(t.ident()))
                self.execute(conn, sql.SQL("ALTER TABLE {} RENAME TO t_refresh").format(fresh))
            self.execute(conn, "DROP TABLE public.t_refresh_old")
            label = "table swapped in by renames"
        elif self.rng.random() < 0.5:
            with conn.transaction():
                self.execute(conn, sql.SQL("DROP TABLE {}").format(t.ident()))
                self.execute(conn, sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (id))").format(t.ident(), columns))
                self.execute(conn, sql.SQL("INSERT INTO {} {}").format(t.ident(), sql.SQL(fill)))
            label = "table dropped and created again in one transaction"
        else:
            self.execute(conn, sql.SQL("DROP TABLE {}").format(t.ident()))
            if self.rng.random() < 0.5:
                self.pipeline(cut=True)  # a batch (and an apply) between the drop and the new table
            self.execute(conn, sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (id))").format(t.ident(), columns))
            self.execute(conn, sql.SQL("INSERT INTO {} {}").format(t.ident(), sql.SQL(fill)))
            label = "table dropped, then created again"
        t.next_id = 100
        return label

    def ddl(self, conn: psycopg.Connection, t: Table) -> None:
        payload = [c for c in t.columns if c not in t.key and c not in t.identity]
        op = self.rng.random()
        self.counter += 1
        if op < 0.5 and self.migration(conn, t):
            return
        op = self.rng.random()
        if t.key and op < 0.08:
            # a rewrite (which drops kept defaults), then a default evaluated per row: the existing rows' values are
            # in no event, so the stream re-reads the table (a keyless table would be refused: not drawn)
            self.execute(conn, sql.SQL("VACUUM FULL {}").format(t.ident()))
            name = f"c{self.counter}"
            self.execute(
                conn,
                sql.SQL("ALTER TABLE {} ADD COLUMN {} int DEFAULT (random() * 1000)::int").format(
                    t.ident(), sql.Identifier(name)
                ),
            )
            t.columns[name] = "int"
        elif op < 0.45 or len(payload) < 2:
            ty = self.rng.choice(list(TYPES))
            name = f"c{self.counter}"
            default = self.rng.choice([None, *DEFAULTS[ty]])
            self.execute(
                conn,
                sql.SQL("ALTER TABLE {} ADD COLUMN {} {}{}").format(
                    t.ident(), sql.Identifier(name), sql.SQL(ty), sql.SQL(f" DEFAULT {default}" if default else "")
                ),
            )
            t.columns[name] = ty
            then = self.rng.random()
            if then < 0.3:
                self.execute(
                    conn,
                    sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET DEFAULT {}").format(
                        t.ident(), sql.Identifier(name), sql.SQL(self.rng.choice(DEFAULTS[ty]))
                    ),
                )
            elif then < 0.5 and default:
                self.execute(
                    conn, sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT").format(t.ident(), sql.Identifier(name))
                )
        elif op < 0.75:
            old = self.rng.choice(payload)
            new = f"r{self.counter}"
            self.execute(
                conn,
                sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                    t.ident(), sql.Identifier(old), sql.Identifier(new)
                ),
            )
            t.columns = {(new if c == old else c): ty for c, ty in t.columns.items()}
        else:
            gone = self.rng.choice(payload)
            self.execute(conn, sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(t.ident(), sql.Identifier(gone)))
            del t.columns[gone]
            if self.rng.random() < 0.5:  # and added again under its old name
                ty = self.rng.choice(list(TYPES))
                default = self.rng.choice([None, *DEFAULTS[ty]])
                self.execute(
                    conn,
                    sql.SQL("ALTER TABLE {} ADD COLUMN {} {}{}").format(
                        t.ident(), sql.Identifier(gone), sql.SQL(ty), sql.SQL(f" DEFAULT {default}" if default else "")
                    ),
                )
                t.columns[gone] = ty

    def round(self) -> None:
        """One round of source changes: a few transactions of DML, sometimes a DDL (followed by a change of its
        table), with stream and lake runs cut in between."""
        self.statements = []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for _ in range(self.rng.randint(1, 5)):
                with conn.transaction():
                    for _ in range(self.rng.randint(1, 4)):
                        self.dml(conn, self.rng.choice(self.tables))
                if self.rng.random() < 0.25:
                    self.pipeline(cut=True)
            if self.rng.random() < 0.1:
                self.maintain()
            if self.rng.random() < 0.4:
                t = self.rng.choice(self.tables)
                self.ddl(conn, t)
                self.insert(conn, t, 1)
                for name in t.compared() if t.partitions else []:
                    # a DDL on the parent changes every partition, and each partition's lake table learns it from
                    # that partition's next change (the limit above): one row of each is touched
                    self.execute(
                        conn,
                        sql.SQL("UPDATE {} SET {} = {} WHERE {} = (SELECT min({}) FROM {})").format(
                            t.ident(), *[sql.Identifier(t.key[0])] * 4, sql.Identifier("public", name)
                        ),
                    )

    # -- pipeline ----------------------------------------------------------------------------------
    def pipeline(self, cut: bool = False) -> None:
        """Stream and apply once each, in small batches, maybe stopped part-way (faults are not errors)."""
        config = self.config.model_copy(update={"walflow_batch_max_events": self.rng.randint(5, 200)})
        hook = None
        if self.rng.random() < 0.2:
            hook = StreamCrash(self.rng.choice(STREAM_POINTS), self.rng.randint(0, 3))
        try:
            stream(config, self.dsn, **({"fault_hook": hook} if hook else {}))
        except Crash:
            self.faults["stream"] += 1
        except WalflowError as exc:
            self.log(
                f"seed {self.seed}: a stream run within the round stopped ({type(exc).__name__});"
                " the round's catch-up meets it again"
            )
        self.apply(cut)

    def apply(self, cut: bool) -> list[dict[str, Any]]:
        records = self.rng.randint(20, 400) if cut else 5_000_000
        draw = self.rng.random() if cut else 1.0
        hooks: ApplyHooks | None = None
        if draw < 0.3:
            hooks = LakeCrash(self.rng.choice(POINTS))
        elif draw < 0.4:
            other = self.rng.randint(20, 400)
            hooks = Overtaken(self.rng.choice(POINTS), lambda: apply_lake(self.spark, self.config, max_records=other))
        try:
            return apply_lake(self.spark, self.config, hooks=hooks, max_records=records)
        except Crash:
            self.faults["lake"] += 1
        except LakeFenceError as exc:
            # only an overtaken run may be fenced; anywhere else it is a defect the round must show
            if not isinstance(hooks, Overtaken):
                raise
            self.log(f"seed {self.seed}: overtaken run fenced: {exc}")
            self.faults["fenced"] += 1
        except WalflowError as exc:
            if not cut:
                raise
            # a refusal (a table the lake cannot follow) within the round: its catch-up meets it again and fixes it
            self.log(f"seed {self.seed}: a lake run within the round stopped ({type(exc).__name__})")
        return []

    def maintain(self) -> None:
        """A maintenance run between two applies, wherever the cut left the lake (as a scheduled maintenance DAG
        run lands): compaction, delete-file rewriting, and expiry and orphan removal with no retention, so that
        the next apply finds its offsets in the rewrite's snapshot only. It also keeps the tables' file counts,
        and so the rounds' time, from growing with every apply."""
        settings = lake_settings(self.config, snapshot_retention_hours=0, orphan_retention_hours=0)
        LakeMaintenance(self.spark, settings).run()
        self.maintained += 1

    def catch_up(self) -> None:
        """Stream until the slot is drained and no re-read is running, then apply until nothing is left."""
        for _ in range(50):
            summary = stream(self.config, self.dsn)
            if not summary.events and not summary.snapshot_rows and not summary.rereads:
                break
        for _ in range(50):
            results = apply_lake(self.spark, self.config)
            # records without events (a delete's tombstone cut from it by max.records) move the offsets too
            if not any(r.get("backlog") for r in results):
                break
        left = {r["topic"]: r["backlog"] for r in results if r.get("backlog")}
        assert not left, f"the lake did not catch up: backlog {left} after 50 runs"

    def compare(self) -> list[str]:
        found: list[str] = []
        for t in self.tables:
            if not t.key and self.faults["stream"]:
                # a stream stopped after Kafka acknowledged records sends them again; the lake cannot tell a keyless
                # table's redelivered row from a second equal row (docs/lake.md, "Tables without a primary key")
                continue
            for name in t.compared():
                found += differences(self.dsn, self.config.topic_prefix, table_name("public", name), "public", name)
        return found

    def fix(self, exc: WalflowError, number: int, outcome: dict[str, Any]) -> None:
        """A refusal's documented fix, as an operator applies it: the lake rebuilt from a new snapshot (``walflow reset
        --lake``, then the setup). The refusal is counted by its class (its error and what it says happened)."""
        text = str(exc)
        label = refusal_class(text) or f"{type(exc).__name__}: {text[:80]}"
        self.refusals[label] = self.refusals.get(label, 0) + 1
        # the round's statements too: what reproduces the refusal
        outcome.setdefault("refused_rounds", []).append(
            {"round": number, "error": text[:600], "statements": list(self.statements)}
        )
        self.log(f"seed {self.seed} round {number}: REFUSED ({label}); fixed with walflow reset --lake and a new setup")
        reset_connector(self.config, as_connector(self.dsn), lake=True)
        setup(self.config, self.dsn)

    def run(self, rounds: int) -> dict[str, Any]:
        """Create the tables, snapshot them, then ``rounds`` rounds. A refusal is fixed as its message says and the
        rounds go on (:meth:`fix`); the run stops at the first round that ends DIVERGED (a defect)."""
        started = time.monotonic()
        self.create()
        setup(self.config, self.dsn)
        outcome: dict[str, Any] = {
            "seed": self.seed,
            "partitions": self.config.topic_creation_default_partitions,
            "equal": 0,
        }
        for number in range(1, rounds + 1):
            self.round()
            try:
                self.catch_up()
            except WalflowError as exc:
                # a refusal of a class the harness does not expect is a defect until shown otherwise (seed 3's
                # round 137 was one: a former table's default refused as a boolean), even when it names a fix
                if not _names_the_fix(str(exc)) or refusal_class(str(exc)) is None:
                    outcome.update(
                        result="REFUSED", round=number, error=f"{type(exc).__name__}: {exc}", statements=self.statements
                    )
                    break
                self.fix(exc, number, outcome)
                try:
                    self.catch_up()
                except WalflowError as again:
                    outcome.update(
                        result="REFUSED",
                        round=number,
                        error=f"after the fix: {type(again).__name__}: {again}",
                        statements=self.statements,
                    )
                    break
            found = self.compare()
            if found:
                outcome.update(result="DIVERGED", round=number, differences=found, statements=self.statements)
                break
            outcome["equal"] += 1
            if not self.faults["stream"]:
                self.keyless_until = number
            self.log(
                f"seed {self.seed} round {number}: EQUAL ({len(self.statements)} statement(s), faults {self.faults},"
                f" maintained {self.maintained})"
            )
        else:
            outcome["result"] = "EQUAL"
        outcome["faults"] = dict(self.faults)
        outcome["refusals"] = dict(self.refusals)
        outcome["migrations"] = dict(sorted(self.migrations.items()))
        outcome["maintained"] = self.maintained
        outcome["keyless_compared_until_round"] = self.keyless_until
        outcome["seconds"] = round(time.monotonic() - started, 1)
        return outcome


#: the refusals a run may meet, told apart by what their messages say (the first that fits names the class)
REFUSAL_CLASSES = (
    ("no primary key, and its rows changed without change events (its rows were rewritten", "keyless table rewritten"),
    (
        "no primary key, and its rows changed without change events (column(s)",
        "keyless table: a column dropped and added again",
    ),
    ("no primary key, and its rows changed without change events (enum", "keyless table: an enum value renamed"),
    ("no primary key, and its rows changed without change events", "keyless table: rows changed without events"),
    ("has no key, and its source table gained column(s)", "keyless table: a column's existing values unknown"),
    ("cannot take the source's new schema", "a type change the lake cannot make in place"),
)


def refusal_class(error: str) -> str | None:
    """The class of refusal (REFUSAL_CLASSES) an error is, or None for one the harness does not expect."""
    return next((name for phrase, name in REFUSAL_CLASSES if phrase in error), None)


def _names_the_fix(error: str) -> bool:
    """Whether a refusal says what to do (walflow's errors name the cause and the fix)."""
    return any(word in error for word in ("rebuild", "reset", "Rename", "exclude", "fix", "set "))
