"""Child process of the crash tests: streams one batch and SIGKILLs itself at the named stage."""

from __future__ import annotations

import json
import os
import signal
import sys

from tests.support import producer
from walflow.config import parse_config
from walflow.stream import StreamBatch


def main() -> None:
    raw, dsn, stage = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]

    def hook(name: str) -> None:
        if name == stage:
            os.kill(os.getpid(), signal.SIGKILL)

    StreamBatch(parse_config(raw), dsn, producer(), fault_hook=hook).run()


if __name__ == "__main__":
    main()
