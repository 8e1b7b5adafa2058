"""``python -m demo`` is ``python -m demo.services``: run the demo remote services."""

from demo.services.cli import main

raise SystemExit(main())
