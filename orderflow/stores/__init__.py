"""State-store and order-store ports (:mod:`.base`) and their adapters: Cosmos DB and in-memory."""
