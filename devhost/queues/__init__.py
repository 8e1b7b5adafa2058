"""Azure Storage queues for the local host (Azurite): the adapter of the message-queue port
(:mod:`devhost.queues.storage`), its factory (:mod:`devhost.queues.factory`) and the dead-letter scan
(:mod:`devhost.queues.dead_letter_scan`)."""
