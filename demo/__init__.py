"""Demo remote services (inventory, payments, shipping) with fault injection, and the TPC-H demo catalog.

Public modules: :mod:`demo.tpch` (the orders, stock and balances),
:mod:`demo.faults` (the fault plan) and :mod:`demo.services` (the FastAPI app
and how to run it).
"""
