"""Observing the lake job's steps: a test or an operator can be told when the job reaches each of them.

The job calls :meth:`ApplyHooks.reached` after each step that leaves the lake in a different state; by default
nothing happens. ``WALFLOW_APPLY_HOOKS=<module>:<name>`` in the job's environment names another
:class:`ApplyHooks` (a class or an instance) to load instead: the fault tests use it to kill the job at each
point (``tests/faults/apply_kill.py``), which is how crash safety is tested without fault code in the job.
"""

from __future__ import annotations

import importlib
import os

HOOKS_ENV = "WALFLOW_APPLY_HOOKS"
#: after the read (nothing written), after the table DDL (table created or altered, no data), after the
#: changelog's commit (changelog ahead of the table), after a truncate's commit (rows removed, offsets not yet
#: committed), after a table's MERGE commit (before the next table)
POINTS = ("after_read", "after_ddl", "after_changelog", "after_truncate", "after_commit")


class ApplyHooks:
    """Called by the job at each of :data:`POINTS`; the base class does nothing."""

    def reached(self, point: str, table: str) -> None:
        """The job has just reached ``point`` for lake table ``table``."""


def load_hooks(spec: str | None = None) -> ApplyHooks:
    """The hooks named by ``spec`` or ``$WALFLOW_APPLY_HOOKS`` (``module:name``), else the do-nothing ones."""
    spec = spec if spec is not None else os.environ.get(HOOKS_ENV, "")
    if not spec:
        return ApplyHooks()
    module, _, name = spec.partition(":")
    found = getattr(importlib.import_module(module), name or "hooks")
    hooks = found() if isinstance(found, type) else found
    if not isinstance(hooks, ApplyHooks):
        raise TypeError(f"{HOOKS_ENV}={spec!r} does not name an ApplyHooks")
    return hooks
