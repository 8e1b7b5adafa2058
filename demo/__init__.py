"""The demo: remote services that misbehave on purpose, the TPC-H catalog, and the drivers that run the
local host (:mod:`devhost`) end to end and attack it.

Public modules: :mod:`demo.tpch` (the orders, stock and balances), :mod:`demo.faults` (the services'
fault plan), :mod:`demo.services` (one module per service, composed in one FastAPI app),
:mod:`demo.run` (``make demo``), :mod:`demo.chaos` (``make chaos``, ``make soak``, and the fault
injectors) and :mod:`demo.intruder` (the chaos run's hostile client). The drivers import the host to
drive it; the host never imports them.
"""
