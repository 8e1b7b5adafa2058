"""``make chaos``: the demo under every fault at once (:mod:`demo.chaos.run`), and its fault injectors:
delivery faults at a devhost's queue seam (:mod:`demo.chaos.delivery`, installed by
:mod:`demo.chaos.faulty_host`), outages of the emulators (:mod:`demo.chaos.outages`,
:mod:`demo.chaos.faults`)."""
