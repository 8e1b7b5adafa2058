"""``python -m demo.chaos.faulty_host ARGS...``: ``python -m devhost ARGS...`` with delivery faults at its
queue seam.

``make chaos`` starts its devhost processes through this module: it runs the devhost's own command line
with :func:`demo.chaos.delivery.with_delivery_faults` as the queue wrapper
(:data:`devhost.__main__.QueueWrapper`), which wraps the queues when :data:`~demo.chaos.delivery.CHAOS_ENV`
holds an active plan. Nothing in the devhost knows what wraps its queues.
"""

from __future__ import annotations

import sys

from demo.chaos.delivery import with_delivery_faults
from devhost.__main__ import QueueWrapper, cli

MODULE = "demo.chaos.faulty_host"
"""What a driver runs with ``python -m`` in place of ``devhost``."""


def main() -> None:
    """Hand the command line to ``python -m devhost``, its queues wrapped in delivery faults."""
    wrapper: QueueWrapper = with_delivery_faults
    sys.argv[0] = "devhost"
    cli(obj=wrapper)


if __name__ == "__main__":
    main()
