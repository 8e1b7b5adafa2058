"""The message-queue port (:mod:`.base`) and its adapters: Azure Storage queues (Azurite) and in-memory."""
