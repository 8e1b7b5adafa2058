"""Index the app once in a fresh worker and print what the worker answered (one JSON line).

``python -m tests.worker.index_once`` runs :class:`~tests.worker.worker.FunctionsWorker` in a process
of its own, so a test can index the app under another environment (the worker's registry and the
app's modules are per process).
"""

from __future__ import annotations

import json

from tests.worker.conftest import REPO
from tests.worker.worker import SUCCESS, FunctionsWorker, WorkerError


def main() -> None:
    worker = FunctionsWorker(REPO, settlement_port=1)
    try:
        worker.start()
        outcome = {"ok": worker.init_response.result.status == SUCCESS, "functions": len(worker.metadata)}
    except WorkerError as error:
        outcome = {"ok": False, "error": str(error)}
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
