"""docker-compose.yml run as local processes, where no Docker engine runs (``make test-deploy``).

The file is run, not only parsed: every service's ``command``, ``environment`` (with ``.env`` and ``env_file``),
``volumes``, ``depends_on`` conditions and ``deploy.replicas`` come from it. What a container would bring is mapped
onto this machine:

==========================  ===========================================================================================
image or build              runs as
==========================  ===========================================================================================
``postgres:*``              a PostgreSQL cluster of its own (Debian's server binaries), the image's entrypoint
                            emulated: ``POSTGRES_USER``, ``POSTGRES_PASSWORD``, ``POSTGRES_DB``, the command's ``-c``
``redis:*``                 Debian's ``redis-server`` with the command's arguments
``apache/kafka:*``          the Kafka-compatible broker of the development runtime (tansu): its ``KAFKA_*`` settings
                            are Kafka's own and are not read; the service's listeners map to its one port
``include/docker/spark…``   the pyspark wheel of the deployment's virtual environment (``spark-class`` on ``PATH``)
``include/docker/airflow…`` the deployment's virtual environment (walflow's wheel installed into it) first on ``PATH``
==========================  ===========================================================================================

A service's ``user:`` is honoured (run as root, the runner switches to it; the account must exist, as in the image).
Service names become 127.0.0.1 and each container port a free local port (``postgres:5432`` in a value turns into
``127.0.0.1:<port>``); container paths (``/opt/...``, ``/var/lib/...``) live in a folder per service under the
deployment's root folder, a named volume as a folder of its own linked into each service that mounts it, a bind mount as
a link to the repository's folder. Each replica gets the
``HOSTNAME`` a container would (``airflow-worker-2``) and log-server ports of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandbox.embedded import broker_command, free_port, port_open

#: the ports each kind of image listens on inside its container
IMAGE_PORTS = {"postgres": (5432,), "redis": (6379,), "kafka": (9092,)}
#: ports given on an Airflow or Spark command line
PORT_OPTIONS = ("--port", "--webui-port")
#: container paths that are mapped under the deployment's root folder
CONTAINER_PATH = re.compile(r"(?<![\w.:/-])(/(?:opt|var/lib)/[^\s\"',;]*)")


#: what the environment of the shell running the deployment must not lend its services: a container starts with
#: its file's environment only, and a sourced runtime's Airflow or walflow settings would change what they run
HOST_ONLY = ("AIRFLOW", "WALFLOW", "PYTHONPATH", "VIRTUAL_ENV")


def host_environment(keep: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment without Airflow's, walflow's and Python's path settings (but those in ``keep``)."""
    return {k: v for k, v in os.environ.items() if k in keep or not k.startswith(HOST_ONLY)}


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's ``${NAME}`` and ``$NAME`` in a value: an unset variable is an error, as ``${NAME:?}`` would be."""
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise KeyError(f"docker-compose.yml uses ${{{name}}}, which .env does not set")
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, value.replace("$$", "\0")).replace("\0", "$")


@dataclass
class Process:
    """One running replica of a service."""

    service: str
    replica: int
    popen: subprocess.Popen[bytes]
    command: list[str]
    log: Path

    @property
    def name(self) -> str:
        return self.service if self.replica == 0 else f"{self.service}-{self.replica}"


@dataclass
class LocalCompose:
    """The services of ``compose_file`` as local processes under ``root`` (see the module's docstring).

    :param venv: the deployment's virtual environment (walflow's wheel with its lake extra, Airflow, Celery).
    :param pg_bindir: PostgreSQL's server binaries; ``as_pg_user`` runs a command as the server's user.
    :param broker: the Kafka-compatible broker's binary.
    :param overrides: environment set in every Airflow service after the file's (timings a test shortens).
    """

    compose_file: Path
    root: Path
    venv: Path
    pg_bindir: Path
    broker: Path
    as_pg_user: Callable[..., subprocess.CompletedProcess[str]]
    overrides: dict[str, str] = field(default_factory=dict)
    processes: dict[str, list[Process]] = field(default_factory=dict)
    ports: dict[tuple[str, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.project = self.compose_file.parent
        self.spec = yaml.safe_load(self.compose_file.read_text())
        self.dotenv = read_env_file(self.project / ".env")
        self.services: dict[str, dict[str, Any]] = self.spec["services"]
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        for service, spec in self.services.items():
            for port in self._listens(service, spec):
                self.ports[(service, port)] = free_port()
        # a published port that the local stand-in does not listen on (kafka's listener for the host, 9094) reaches
        # the service's one local port
        for service, spec in self.services.items():
            for published in spec.get("ports", []):
                container = int(str(published).rpartition(":")[2])
                first = next((port for (name, _), port in self.ports.items() if name == service), None)
                if first is not None:
                    self.ports.setdefault((service, container), first)
        self._mount_volumes()

    # -- the file's parts ----------------------------------------------------------------------------------
    def kind(self, service: str) -> str:
        spec = self.services[service]
        if "build" in spec:
            return "spark" if "spark" in spec["build"]["dockerfile"] else "airflow"
        image = spec["image"].split(":")[0]
        return {"postgres": "postgres", "redis": "redis", "apache/kafka": "kafka"}[image]

    def _listens(self, service: str, spec: dict[str, Any]) -> list[int]:
        ports = list(IMAGE_PORTS.get(self.kind(service), ()))
        command = [str(a) for a in spec.get("command", [])]
        for option in PORT_OPTIONS:
            if option in command:
                ports.append(int(command[command.index(option) + 1]))
        return ports

    def port(self, service: str, container_port: int) -> int:
        return self.ports[(service, container_port)]

    def local_path(self, service: str, container_path: str) -> Path:
        """Where ``container_path`` of ``service``'s containers lives here (each service a file system of its own)."""
        return self.root / "fs" / service / container_path.lstrip("/")

    def _mount_volumes(self) -> None:
        """Each named volume a folder of its own, linked at the container path of every service that mounts it; each
        bind mount a link to the repository's folder."""
        for service, spec in self.services.items():
            for volume in spec.get("volumes", []):
                source, target = volume.split(":")[:2]
                real = (self.project / source).resolve() if source.startswith(".") else self.root / "volumes" / source
                real.mkdir(parents=True, exist_ok=True)
                link = self.local_path(service, target)
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.is_symlink():
                    link.symlink_to(real)

    def localize(self, service: str, value: str) -> str:
        """A value as it reads on this machine: ``service:port`` to 127.0.0.1 and the local port, container paths
        into the service's file system."""
        for (name, container_port), port in sorted(self.ports.items(), key=lambda item: -len(item[0][0])):
            value = re.sub(rf"(?<![\w.-]){re.escape(name)}:{container_port}(?!\d)", f"127.0.0.1:{port}", value)
        return CONTAINER_PATH.sub(lambda m: str(self.local_path(service, m.group(1))), value)

    def environment(self, service: str, replica: int) -> dict[str, str]:
        spec = self.services[service]
        env: dict[str, str] = {}
        variables = {**self.dotenv, **{k: v for k, v in os.environ.items() if k not in self.dotenv}}
        if "env_file" in spec:
            files = spec["env_file"] if isinstance(spec["env_file"], list) else [spec["env_file"]]
            for name in files:
                env.update(read_env_file(self.project / name))
        for key, value in (spec.get("environment") or {}).items():
            env[key] = self.localize(service, str(interpolate(value, variables)))
        env["HOSTNAME"] = service if replica == 0 else f"{service}-{replica}"
        return env

    def command(self, service: str) -> list[str]:
        spec = self.services[service]
        variables = {**self.dotenv, **os.environ}
        args = [self.localize(service, str(interpolate(a, variables))) for a in spec.get("command", [])]
        for option in PORT_OPTIONS:
            if option in args:
                i = args.index(option) + 1
                args[i] = str(self.port(service, int(args[i])))
        if "--host" in args and args[args.index("--host") + 1] in self.services:
            args[args.index("--host") + 1] = "127.0.0.1"  # a service's own name, which it binds to
        return args

    def order(self) -> list[str]:
        """The services in an order that starts each after those it depends on."""
        done: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in done:
                return
            if name in path:
                raise ValueError(f"depends_on cycle: {' -> '.join((*path, name))}")
            for dependency in self.services[name].get("depends_on") or {}:
                visit(dependency, (*path, name))
            done.append(name)

        for name in self.services:
            visit(name, ())
        return done

    # -- starting and stopping -----------------------------------------------------------------------------
    def up(self, log: Callable[[str], None] = print) -> None:
        for service in self.order():
            for dependency, condition in (self.services[service].get("depends_on") or {}).items():
                self.wait(dependency, (condition or {}).get("condition", "service_started"))
            replicas = int((self.services[service].get("deploy") or {}).get("replicas", 1))
            for replica in range(replicas):
                self.start(service, replica + 1 if replicas > 1 else 0, log)
            if "healthcheck" in self.services[service]:
                self.wait(service, "service_healthy")

    def start(self, service: str, replica: int = 0, log: Callable[[str], None] = print) -> Process:
        kind = self.kind(service)
        env = {**host_environment(), **self.environment(service, replica)}
        command = self.command(service)
        if kind == "postgres":
            command = self._postgres(service, env, command)
        elif kind == "redis":
            command = [
                shutil.which("redis-server") or "redis-server",
                *command[1:],
                "--port",
                str(self.port(service, 6379)),
                "--bind",
                "127.0.0.1",
            ]
        elif kind == "kafka":
            url = f"tcp://127.0.0.1:{self.port(service, 9092)}"
            command = broker_command(self.broker, url)
        elif kind == "spark":
            spark_home = next((self.venv / "lib").glob("python3*/site-packages/pyspark"))
            env.update(SPARK_HOME=str(spark_home), PYSPARK_PYTHON=str(self.venv / "bin" / "python"),
                       SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.root / "logs" / "spark"),
                       PATH=f"{spark_home / 'bin'}:{self.venv / 'bin'}:{env['PATH']}")  # fmt: skip
            if "Worker" in " ".join(command):
                env["SPARK_WORKER_DIR"] = str(self.root / "spark-work" / f"{service}-{replica}")
        else:
            env.update(self.overrides)
            env["PATH"] = f"{self.venv / 'bin'}:{env['PATH']}"
            # one machine, several replicas: the log servers a container has to itself need ports of their own
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
            env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(free_port())
            env.setdefault("AIRFLOW__API__HOST", "127.0.0.1")
            if env.get("AIRFLOW_HOME"):
                Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
        name = service if replica == 0 else f"{service}-{replica}"
        log_path = self.root / "logs" / f"{name}.log"
        out = log_path.open("ab")
        ids = self._user(service, env) if kind in ("airflow", "spark") else None
        switch: dict[str, Any] = {"user": ids[0], "group": ids[1], "extra_groups": []} if ids else {}
        popen = subprocess.Popen(command, env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, **switch)  # fmt: skip
        process = Process(service, replica, popen, command, log_path)
        replicas = self.processes.setdefault(service, [])
        replicas[:] = [p for p in replicas if p.replica != replica] + [process]
        log(f"started {name}: pid {popen.pid}, {' '.join(command)[:160]}")
        return process

    def _user(self, service: str, env: dict[str, str]) -> tuple[int, int] | None:
        """The service's ``user: "<uid>:<gid>"``, as its container runs it: the ids the process runs as, whose
        account must exist here as it does in the image (the Airflow image's ``airflow``, the Spark image's
        ``spark``), and the service's own file system (its image's folders, not the volumes) is that user's, as an
        image's folders are. The volumes stay root's until walflow-init hands them over."""
        user = self.services[service].get("user")
        if not user or os.geteuid() != 0:
            return None
        uid, _, gid = str(user).partition(":")
        uid_n, gid_n = int(uid), int(gid or 0)
        home = self.root / "home" / service
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
        for top in (
            self.root / "fs" / service,
            home,
            *(Path(env[k]) for k in ("SPARK_WORKER_DIR", "SPARK_LOG_DIR") if k in env),
        ):
            top.mkdir(parents=True, exist_ok=True)
            for folder, dirs, files in os.walk(top):  # never into a volume: os.walk does not follow the links
                for name in (*dirs, *files):
                    os.lchown(os.path.join(folder, name), uid_n, gid_n)
                os.lchown(folder, uid_n, gid_n)
        return uid_n, gid_n

    def _postgres(self, service: str, env: dict[str, str], command: list[str]) -> list[str]:
        """The postgres image's entrypoint: a cluster made once with its superuser and database, then the server
        with the command's settings."""
        data = self.root / "pg" / service
        user, password, database = (
            env.get("POSTGRES_USER", "postgres"),
            env["POSTGRES_PASSWORD"],
            env.get("POSTGRES_DB") or env.get("POSTGRES_USER", "postgres"),
        )
        port = self.port(service, 5432)
        settings = [a for pair in zip(command[1::2], command[2::2]) if pair[0] == "-c" for a in pair]
        server = [str(self.pg_bindir / "postgres"), "-D", str(data), "-p", str(port),
                  "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={data}", *settings]  # fmt: skip
        if not (data / "PG_VERSION").exists():
            data.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(data.parent, 0o755)
            if os.geteuid() == 0:
                data.mkdir(mode=0o700)
                shutil.chown(data, "postgres", "postgres")
            pwfile = self.root / "pg" / f"{service}.pw"
            pwfile.touch(mode=0o600)
            pwfile.write_text(password + "\n")
            if os.geteuid() == 0:
                shutil.chown(pwfile, "postgres", "postgres")  # initdb runs as the server's user and reads it
            self.as_pg_user([str(self.pg_bindir / "initdb"), "-D", str(data), "-U", user, "--auth=scram-sha-256",
                             f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8"],
                            check=True, capture_output=True)  # fmt: skip
            pwfile.unlink()
            init = subprocess.Popen(
                ["runuser", "-u", "postgres", "--", *server] if os.geteuid() == 0 else server,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
            )
            try:
                deadline = time.monotonic() + 60
                while not port_open(port) and time.monotonic() < deadline:
                    time.sleep(0.2)
                if database != "postgres":
                    psql = [
                        str(self.pg_bindir / "psql"),
                        f"postgresql://{user}@127.0.0.1:{port}/postgres",
                        "-v",
                        "ON_ERROR_STOP=1",
                        "-qc",
                        f'CREATE DATABASE "{database}"',
                    ]
                    # the port opens before the server accepts connections ("the database system is starting up"):
                    # tried until the server takes it, within the same minute
                    while True:
                        created = subprocess.run(
                            psql, env={**os.environ, "PGPASSWORD": password}, capture_output=True, text=True
                        )
                        if created.returncode == 0:
                            break
                        if time.monotonic() >= deadline:
                            raise RuntimeError(
                                f"{service}: creating database {database!r} failed: {created.stderr.strip()}"
                            )
                        time.sleep(0.5)
            finally:
                init.terminate()
                init.wait(timeout=60)
        return ["runuser", "-u", "postgres", "--", *server] if os.geteuid() == 0 else server

    def wait(self, service: str, condition: str, timeout: float = 240) -> None:
        """Until ``service`` meets a depends_on condition: started, healthy (its ports answer; the API server's
        version endpoint answers), or completed with exit code 0."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            replicas = self.processes.get(service, [])
            if condition == "service_completed_successfully":
                codes = [p.popen.poll() for p in replicas]
                if replicas and all(code == 0 for code in codes):
                    return
                if any(code not in (None, 0) for code in codes):
                    raise RuntimeError(f"{service} exited with {codes}; see {self.root / 'logs' / (service + '.log')}")
            elif condition == "service_healthy" and replicas:
                if self.healthy(service):
                    return
            elif replicas:
                return
            for process in replicas:
                if process.popen.poll() not in (None, 0):
                    raise RuntimeError(
                        f"{process.name} exited with {process.popen.returncode};"
                        f" see {process.log}:\n{process.log.read_text()[-3000:]}"
                    )
            time.sleep(0.5)
        raise TimeoutError(f"{service} did not reach {condition} in {timeout:.0f} s; see {self.root / 'logs'}")

    def healthy(self, service: str) -> bool:
        ports = {port for (name, _), port in self.ports.items() if name == service}
        if not all(port_open(port) for port in ports):
            return False
        if self.kind(service) == "airflow":
            import urllib.request

            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port(service, 8080)}/api/v2/version", timeout=5
                ) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False
        return True

    def kill(self, process: Process) -> None:
        """SIGKILL a replica, every process it started (a worker's task processes, whatever their session) and its
        session, as the end of its container would."""
        children: dict[int, list[int]] = {}
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(parent, []).append(int(proc.name))
        tree, todo = [], [process.popen.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(process.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.popen.wait(timeout=30)

    def down(self) -> None:
        for service in reversed(self.order()):
            for process in self.processes.get(service, []):
                if process.popen.poll() is None:
                    try:
                        os.killpg(process.popen.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        continue
        for service in reversed(self.order()):
            for process in self.processes.get(service, []):
                try:
                    process.popen.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.popen.pid, signal.SIGKILL)
