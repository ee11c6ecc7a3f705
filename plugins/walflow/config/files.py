"""Connector files: the YAML files of a connectors folder, each read (duplicate keys refused), validated by
:func:`walflow.config.connector.parse_config`, and found by name.

Split from :mod:`walflow.config`, which holds what a configuration is; this module holds where configurations come
from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from walflow.config.connector import ConnectorConfig, parse_config
from walflow.errors import ConfigError
from walflow.names import prefixes_nest


def load_config(path: str | os.PathLike[str]) -> ConnectorConfig:
    """Read and validate one connector YAML file."""
    path = Path(path)
    return parse_config(_read_raw(path), str(path))


def connectors_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """The folder of connector YAML files: ``$WALFLOW_CONNECTORS_DIR`` or ``include/connectors``."""
    env = os.environ.get("WALFLOW_CONNECTORS_DIR")
    if env:
        return Path(env)
    if default is not None:
        return Path(default)
    return Path(__file__).resolve().parents[3] / "include" / "connectors"


def load_all(directory: str | os.PathLike[str] | None = None) -> list[ConnectorConfig]:
    """Load every ``*.yaml``/``*.yml`` connector in ``directory``.

    Names must be unique, and so must topic prefixes (two connectors would mix their events in one topic) and slots
    on one source Connection (each would get part of the changes); the setup task checks the same against what
    other connectors recorded in the source database.
    """
    folder = connectors_dir(directory)
    configs: list[ConnectorConfig] = []
    seen: dict[tuple[str, ...], Path] = {}
    paths: list[Path] = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        config = load_config(path)
        for claim, what in (
            (("name", config.name), f"connector name {config.name!r}"),
            (("prefix", config.topic_prefix), f"topic prefix {config.topic_prefix!r}"),
            (("slot", config.walflow_postgres_conn_id, config.slot_name), f"slot {config.slot_name!r} of Connection {config.walflow_postgres_conn_id!r}"),
        ):
            if claim in seen:
                raise ConfigError(f"{what} is used by both {seen[claim]} and {path}; each connector needs its own")
            seen[claim] = path
        for other, other_path in zip(configs, paths):
            if other.topic_prefix != config.topic_prefix and prefixes_nest(config.topic_prefix, config.topic_delimiter, other.topic_prefix, other.topic_delimiter):
                raise ConfigError(
                    f"topic prefixes {other.topic_prefix!r} ({other_path}) and {config.topic_prefix!r} ({path}) nest: the topics of "
                    "one start with the other's prefix and delimiter, so each connector would take the other's topics for its "
                    "own tables (and apply them to its lake). Give one of them a prefix that does not start the other's"
                )
        configs.append(config)
        paths.append(path)
    return configs


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (plain YAML keeps the last one silently,
    so a second ``slot.name`` further down a long file would win without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice (lines {seen[key]} and {line}); keep one of them", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _read_raw(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except OSError as exc:
        raise ConfigError(f"cannot read connector configuration {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"connector configuration {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"connector configuration {path} must be a mapping of Debezium keys to values")
    return raw


def resolve(connector: str, overrides: dict[str, Any] | None = None, directory: str | os.PathLike[str] | None = None) -> ConnectorConfig:
    """Find a connector by name (in the connectors folder) or by YAML path, apply ``overrides``, validate.

    Operators call this in ``execute``, so a DAG that reuses them can override single keys
    (``{"table.include.list": "public.customers"}``) without a YAML file of its own.
    """
    candidate = Path(connector)
    if candidate.suffix in (".yaml", ".yml"):
        path = candidate
    else:
        folder = connectors_dir(directory)
        path = None
        for item in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            raw = _read_raw(item)
            if raw.get("name") == connector:
                path = item
                break
        if path is None:
            raise ConfigError(f"no connector named {connector!r} in {folder} (set WALFLOW_CONNECTORS_DIR or pass a YAML path)")
    raw = _read_raw(path)
    if overrides:
        raw = {**raw, **overrides}
    return parse_config(raw, str(path))
