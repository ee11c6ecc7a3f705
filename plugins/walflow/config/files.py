"""Connector files: the YAML files of a connectors folder, each read (duplicate keys refused), validated by
:func:`walflow.config.connector.parse_config`, and found by name.

Split from :mod:`walflow.config`, which holds what a configuration is; this module holds where configurations come
from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from walflow.config.connector import ConnectorConfig, parse_config
from walflow.errors import ConfigError
from walflow.names import prefixes_nest

#: the suffixes of connector files: YAML, and JSON (a subset of YAML) for the files Kafka Connect takes
SUFFIXES = (".yaml", ".yml", ".json")


def load_config(path: str | os.PathLike[str]) -> ConnectorConfig:
    """Read and validate one connector YAML file."""
    path = Path(path)
    return parse_config(_read_raw(path), str(path))


def connectors_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """The folder of connector YAML files: ``$WALFLOW_CONNECTORS_DIR``, else ``default``, else ``include/connectors``
    beside Airflow's DAGs folder (``$AIRFLOW__CORE__DAGS_FOLDER``, else ``$AIRFLOW_HOME/dags``), where an Astro
    project and this repository keep it. Every Airflow component reads the same folder, so a deployment sets
    ``WALFLOW_CONNECTORS_DIR`` in the environment they share."""
    env = os.environ.get("WALFLOW_CONNECTORS_DIR")
    if env:
        return Path(env)
    if default is not None:
        return Path(default)
    dags = os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") or str(
        Path(os.environ.get("AIRFLOW_HOME") or "~/airflow") / "dags"
    )
    return Path(dags).expanduser().parent / "include" / "connectors"


def connector_files(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The connector files of the folder (``*.yaml``, ``*.yml``, and ``*.json`` as Kafka Connect takes a connector),
    in name order."""
    folder = connectors_dir(directory)
    return sorted(path for suffix in SUFFIXES for path in folder.glob(f"*{suffix}"))


def load_each(
    directory: str | os.PathLike[str] | None = None, check: Callable[[ConnectorConfig], str | None] | None = None
) -> tuple[list[ConnectorConfig], dict[Path, ConfigError]]:
    """Load every connector file of ``directory`` on its own: the valid connectors, and the error of each file left out.

    A file is left out when it cannot be read or is not valid; two files are both left out when they claim the same
    connector name, topic prefix, or slot on one source Connection (each connector would get part of the changes, or
    mix its events with the other's), or when their topic prefixes nest. One broken file never takes the other
    connectors with it: the DAG file builds their DAGs, and Airflow shows the errors as an import error
    (:func:`walflow.airflow.dag_factory.check_connector_files`).

    :param check: what this machine must offer a valid connector (the lake's libraries when its lake is on): it
        returns why the connector cannot run here, which leaves its file out, or ``None``.
    """
    loaded: list[tuple[Path, ConnectorConfig]] = []
    errors: dict[Path, ConfigError] = {}
    for path in connector_files(directory):
        try:
            loaded.append((path, load_config(path)))
        except ConfigError as exc:
            errors[path] = exc
    claimed: dict[tuple[str, ...], list[Path]] = {}
    described: dict[tuple[str, ...], str] = {}
    for path, config in loaded:
        for claim, what in (
            (("name", config.name), f"connector name {config.name!r}"),
            (("prefix", config.topic_prefix), f"topic prefix {config.topic_prefix!r}"),
            (
                ("slot", config.walflow_postgres_conn_id, config.slot_name),
                f"slot {config.slot_name!r} of Connection {config.walflow_postgres_conn_id!r}",
            ),
        ):
            claimed.setdefault(claim, []).append(path)
            described[claim] = what
    for shared, paths in claimed.items():
        if len(paths) > 1:
            both = " and ".join(str(p) for p in paths)
            for path in paths:
                errors.setdefault(
                    path, ConfigError(f"{described[shared]} is used by both {both}; each connector needs its own")
                )
    for index, (path, config) in enumerate(loaded):
        for other_path, other in loaded[:index]:
            if other.topic_prefix != config.topic_prefix and prefixes_nest(
                config.topic_prefix, config.topic_delimiter, other.topic_prefix, other.topic_delimiter
            ):
                error = ConfigError(
                    f"topic prefixes {other.topic_prefix!r} ({other_path}) and {config.topic_prefix!r} ({path}) nest: "
                    "the topics of one start with the other's prefix and delimiter, so each connector would take the "
                    "other's topics for its own tables (and apply them to its lake). Give one of them a prefix that "
                    "does not start the other's"
                )
                errors.setdefault(path, error)
                errors.setdefault(other_path, error)
    for path, config in loaded:
        problem = check(config) if check is not None and path not in errors else None
        if problem:
            errors[path] = ConfigError(f"connector {config.name!r}: {problem}")
    return [config for path, config in loaded if path not in errors], dict(sorted(errors.items()))


def load_all(directory: str | os.PathLike[str] | None = None) -> list[ConnectorConfig]:
    """Load every connector file of ``directory``, all of which must be valid (:func:`load_each` says which are not).

    Names must be unique, and so must topic prefixes (two connectors would mix their events in one topic) and slots
    on one source Connection (each would get part of the changes); the setup task checks the same against what
    other connectors recorded in the source database.

    :raises ConfigError: the first file's error, in name order.
    """
    configs, errors = load_each(directory)
    if errors:
        raise next(iter(errors.values()))
    return configs


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (plain YAML keeps the last one silently,
    so a second ``slot.name`` further down a long file would win without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} appears twice (lines {seen[key]} and {line}); keep one of them",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _read_raw(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except OSError as exc:
        raise ConfigError(f"cannot read connector configuration {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"connector configuration {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"connector configuration {path} must be a mapping of Debezium keys to values")
    return connect_body(raw)


def connect_body(raw: dict[str, Any]) -> dict[str, Any]:
    """A connector's keys from the body Kafka Connect's REST API takes (``{"name": ..., "config": {...}}``), so that
    a Debezium connector's file is used as it is; any other mapping is the keys themselves."""
    config = raw.get("config")
    if isinstance(config, dict) and set(raw) <= {"name", "config"}:
        name = raw.get("name")
        if name is not None and config.get("name") not in (None, name):
            raise ConfigError(f"the connector is named {name!r} but its config names {config['name']!r}")
        return {**config, "name": name} if name is not None else dict(config)
    return raw


def resolve(
    connector: str, overrides: dict[str, Any] | None = None, directory: str | os.PathLike[str] | None = None
) -> ConnectorConfig:
    """Find a connector by name (in the connectors folder) or by YAML path, apply ``overrides``, validate.

    Operators call this in ``execute``, so a DAG that reuses them can override single keys
    (``{"table.include.list": "public.customers"}``) without a YAML file of its own.
    """
    candidate = Path(connector)
    if candidate.suffix in SUFFIXES:
        path = candidate
    else:
        folder = connectors_dir(directory)
        found: Path | None = None
        unreadable: list[str] = []
        for item in connector_files(directory):
            try:
                raw = _read_raw(item)
            except ConfigError:
                # another connector's broken file must not stop this one's tasks; it is named if nothing matched
                unreadable.append(item.name)
                continue
            if raw.get("name") == connector:
                found = item
                break
        if found is None:
            among = (
                f"; {', '.join(unreadable)} cannot be read (their import error in Airflow says why)"
                if unreadable
                else ""
            )
            raise ConfigError(
                f"no connector named {connector!r} in {folder} (set WALFLOW_CONNECTORS_DIR or pass a YAML path){among}"
            )
        path = found
    raw = _read_raw(path)
    if overrides:
        raw = {**raw, **overrides}
    return parse_config(raw, str(path))
