"""The chaos run's intruder: a registered client that attacks the others' orders
(:mod:`demo.intruder.attacks`), the hostile text it sends (:mod:`demo.intruder.hostile_text`) and what
it tries as an operator (:mod:`demo.intruder.operator`)."""
