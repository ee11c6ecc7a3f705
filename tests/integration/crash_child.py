"""Child process of the crash tests: streams one batch (or runs the setup, for snapshot stages) and SIGKILLs
itself at the named stage, optionally only on its N-th occurrence. It is given the test database's superuser DSN
and runs the connector as that database's connector role (the helpers of tests.support)."""

from __future__ import annotations

import json
import os
import signal
import sys

from tests.support import setup, stream
from walflow.config.connector import parse_config


def main() -> None:
    raw, dsn, stage = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    nth = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    seen = 0

    def hook(name: str) -> None:
        nonlocal seen
        if name == stage:
            seen += 1
            if seen >= nth:
                os.kill(os.getpid(), signal.SIGKILL)

    if "WALFLOW_TEST_ROUND_ROWS" in os.environ:  # rounds of a known size, whatever the default
        import walflow.capture.stream.rounds

        walflow.capture.stream.rounds.ROUND_ROWS = int(os.environ["WALFLOW_TEST_ROUND_ROWS"])
    config = parse_config(raw)
    if stage.startswith("snapshot"):
        setup(config, dsn, fault_hook=hook)
    else:
        stream(config, dsn, fault_hook=hook)


if __name__ == "__main__":
    main()
