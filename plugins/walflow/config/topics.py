"""Kafka Connect's topic creation keys, beside the default group's partitions and replication factor (fields of
:class:`~walflow.config.connector.ConnectorConfig`): ``topic.creation.groups``, each group's ``include``,
``exclude``, ``partitions``, ``replication.factor`` and topic settings, and ``topic.creation.default.<setting>``.
:class:`walflow.kafka.TopicCreation` applies what they say when a topic is created."""

from __future__ import annotations

from typing import Any

from walflow.config.javaregex import compile_java
from walflow.config.values import split_list as _split_list
from walflow.errors import PatternError


def parse_topic_creation(keys: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """Kafka Connect's topic creation keys besides the default group's partitions and replication factor:
    ``topic.creation.groups``, each group's ``include`` (required), ``exclude``, ``partitions``,
    ``replication.factor`` and topic settings, and ``topic.creation.default.<setting>``. Returns
    ``{"default": {settings}, "groups": [{"name", "include", "exclude", "partitions", "replication_factor",
    "configs"}]}``."""
    try:
        names = _split_list(keys.get("topic.creation.groups"))
    except TypeError:
        problems.append(
            f"  'topic.creation.groups' = {keys.get('topic.creation.groups')!r}: expected a comma-separated list"
        )
        names = []
    by_group: dict[str, dict[str, Any]] = {"default": {}}
    by_group.update({name: {} for name in names})
    for key, value in keys.items():
        if key == "topic.creation.groups":
            continue
        group_name, _, setting = key.removeprefix("topic.creation.").partition(".")
        if group_name not in by_group or not setting:
            problems.append(
                f"  '{key}' configures topic creation group {group_name!r}, which 'topic.creation.groups' does not list"
            )
            continue
        by_group[group_name][setting] = value
    groups = []
    for name in names:
        settings = dict(by_group[name])
        group: dict[str, Any] = {"name": name, "configs": {}}
        for part in ("include", "exclude"):
            patterns = _split_list(settings.pop(part, None))
            for pattern in patterns:
                try:
                    compile_java(pattern, 0, f"'topic.creation.{name}.{part}' item {pattern!r}")
                except PatternError as exc:
                    problems.append(f"  {exc}")
            group[part] = patterns
        if not group["include"]:
            problems.append(
                f"  'topic.creation.{name}.include' is required: the regular expressions of the topics the group "
                "creates"
            )
        for setting, field in (("partitions", "partitions"), ("replication.factor", "replication_factor")):
            raw = settings.pop(setting, None)
            try:
                group[field] = int(raw) if raw is not None else None
            except (TypeError, ValueError):
                problems.append(f"  'topic.creation.{name}.{setting}' = {raw!r}: expected a whole number")
        group["configs"] = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()}
        groups.append(group)
    default = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in by_group["default"].items()}
    return {"default": default, "groups": groups}
