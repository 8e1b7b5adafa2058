"""``python -m demo.services``: run the demo remote services (:func:`demo.services.cli.main`)."""

from demo.services.cli import main

raise SystemExit(main())
