"""The connector under test: configs with names unique to a test, and its setup and stream tasks.

The connector-side helpers (:func:`setup`, :func:`prepare_source`, :func:`stream`) take a test database's
superuser DSN, the one the tests' own SQL uses, and run the connector as that database's least-privilege role
(:func:`tests.privileges.as_connector`), never as the superuser.
"""

from __future__ import annotations

from typing import Any

from tests.privileges import as_connector, as_reader, publish_all_tables
from tests.support.kafka import producer
from walflow.capture.batches import BatchSummary
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import ConnectorConfig, parse_config
from walflow.source.connection import connect
from walflow.source.prepare import SetupReport, setup_source


def connector(name: str, **overrides: Any) -> ConnectorConfig:
    """A connector config whose names are unique to one test (topic prefix, slot, publication)."""
    raw: dict[str, Any] = {
        "name": name,
        "topic.prefix": name,
        "slot.name": name.lower(),
        "publication.name": name.lower(),
    }
    raw.update(overrides)
    return parse_config(raw, f"<test {name}>")


def stream(config: ConnectorConfig, database: str, **kwargs: Any) -> BatchSummary:
    """One stream batch, as the connector role of ``database``, with signals' conditions evaluated as its reader role
    (see the module's docstring; ``reader_conninfo=None`` runs it without one)."""
    kwargs.setdefault("reader_conninfo", as_reader(database))
    return StreamBatch(
        config, as_connector(database), producer(config.topic_creation_default_partitions), **kwargs
    ).run()


def _publication_for(config: ConnectorConfig, database: str) -> None:
    if config.publication_autocreate_mode == "all_tables":
        publish_all_tables(
            database, config.publication_name, config.publish_via_partition_root
        )  # superusers only: a DBA's step


def setup(config: ConnectorConfig, database: str, producer_factory: Any = producer, **kwargs: Any) -> dict[str, Any]:
    """The setup task (:class:`ConnectorSetup`), as the connector role of ``database``. For publication mode
    'all_tables' the superuser creates the publication first, as a DBA would; the setup then only checks it."""
    _publication_for(config, database)
    if producer_factory is producer:
        producer_factory = lambda: producer(config.topic_creation_default_partitions)  # noqa: E731
    return ConnectorSetup(config, as_connector(database), producer_factory, **kwargs).run()


def prepare_source(config: ConnectorConfig, database: str) -> SetupReport:
    """The setup's source part (server checks, publication, slot; no snapshot, no state table), as the connector
    role of ``database``; the publication of mode 'all_tables' as in :func:`setup`."""
    _publication_for(config, database)
    with connect(as_connector(database)) as conn:
        return setup_source(conn, config)
