"""Every transition of a state record, each a pure function of (a private copy of the record, the
inputs) that changes the copy and returns the record to write, or None when there is nothing to write.

Only these functions change a record's ``processState``, ``lockedBy`` and ``completeBy``; only
:func:`orderflow.protocol.conditional.update` writes what they return (checking the change against
:mod:`orderflow.protocol.state_machine`). Roles decode their input, call ``update`` with a transition,
send what the write owes, and encode the result.

- :mod:`.forward`: claim, start a step, complete, fail, await and record a review, hold for a
  dependency (the breaker trips the order), hand back a suspended order, finish.
- :mod:`.holds`: record a hold, mark it committed, start and record its re-acquisition.
- :mod:`.compensation`: begin compensation (or stop past a point of no return), start an undo, finish.
- :mod:`.supervision`: recover an expired attempt, give up, hold a poisoned order, recover or fail a
  compensation.
- :mod:`.requests`: a client's cancel, an operator's compensate, resubmit, suspend and resume.
"""

from orderflow.protocol.transitions import compensation, forward, holds, requests, supervision

__all__ = ["compensation", "forward", "holds", "requests", "supervision"]
