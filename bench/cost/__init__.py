"""The cost and latency model of orderflow on Azure: per-order counts that ``make bench`` measures (and
documented estimates beside them) priced by each meter's billing rule (:mod:`bench.cost.prices`), the
same 3-step order priced on the peers, and the modelled latency of an order on Azure.

``python -m bench.cost`` prints the figures, writes them into ``bench-report.json`` and renders the cost
section of ``docs/deploy.md`` and the README's cost sentence (:mod:`bench.cost.render`)."""
