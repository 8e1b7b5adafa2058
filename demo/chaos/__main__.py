"""``python -m demo.chaos``: run ``make chaos`` (:func:`demo.chaos.run.main`)."""

from demo.chaos.run import app

app()
