"""The peers orderflow is measured against: the same three-step saga on bare durabletask and on DBOS."""
