"""The chaos run's intruder: one more registered client, on its own credentials only, that attacks the
other clients' orders while they run (``make chaos``, :mod:`demo.chaos.run`).

A client's identity is the inbound queue it may send to (docs/clients.md). The intruder holds exactly
what the devhost issues a client: a SAS to add to its own inbound queue and one to read its own reply
queue. Once the victims' orders are recorded it takes a sample of their order ids and, round after
round, tries each kind of :class:`~demo.intruder.attacks.AttackKind`:

- ``same_id``: an order of its own under a victim's order id, for an item no demo service stocks (so it
  is declined at reservation and compensated, taking nothing from the victims' stock);
- ``cancel``: a ``CancelOrder`` of a victim's order id it never submitted;
- ``reply_to``: an order naming a victim's reply queue as ``replyTo``;
- ``operator_action``: a ``ReviewDecision`` (approve) and a ``CompensateOrder`` of a victim's order key;
- ``foreign_queue``: its inbound SAS used on a victim's inbound queue, an agent request queue and an
  agent response queue (Azurite must refuse each with 403);
- ``hostile_text``: every case of :data:`demo.intruder.hostile_text.HOSTILE_CASES` (control characters, a
  forged log line naming a victim's order, escape sequences, bidi overrides, rich markup, text UTF-8
  cannot encode) in a message id, a correlation id and a body that is not JSON, and in an order's fields;
- ``correlation_id``: messages the intake dead-letters whose correlation id is a victim's order key or
  its bare order id; after the run the driver, as an operator, lists and replays them through the
  operator API (:mod:`demo.intruder.operator`), and no answer may link them to a victim's order, nor
  may the replay write a victim's record;
- ``conflict_flood``: one of its own orders resent :data:`~demo.intruder.attacks.FLOOD_RESENDS` times
  with other content: one counted ``conflicting_order`` alert per alert window, and the victims' alerts
  stay on the newest page.

Modules: :mod:`demo.intruder.attacks` (the kinds and their messages), :mod:`demo.intruder.hostile_text`,
:mod:`demo.intruder.intruder` (the thread that sends them), :mod:`demo.intruder.effects` (what they
achieved) and :mod:`demo.intruder.operator` (the driver as an operator).

After the run :func:`demo.intruder.effects.count_cross_client_effects` reads the state store, the
intruder's dead letters, what the operator was shown and the stored alerts: anything one client caused on
another's orders is a ``cross_client_effect``.
"""
