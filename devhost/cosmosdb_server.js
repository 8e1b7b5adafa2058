// Starts @vercel/cosmosdb-server over HTTPS with keep-alive (the CLI has no flag for it).
// Usage: node devhost/cosmosdb_server.js PORT   — prints "listening PORT" when ready.
//
// One correction, made before the server loads its routes: a point read of a missing document in a
// partitioned collection throws inside the server (it reads a field of the absent document) and is
// answered 500, which azure-cosmos retries once after 500 ms before the adapter's existence query.
// Cosmos DB answers 404 NotFound at once; so does this server now (docs/design.md §8).
const readDocument = require("@vercel/cosmosdb-server/lib/handler/read-document");
const readDocumentAsServed = readDocument.default;
readDocument.default = (account, req, res, params) => {
  try {
    return readDocumentAsServed(account, req, res, params);
  } catch (err) {
    if (!(err instanceof TypeError)) throw err;
    res.statusCode = 404;
    return { code: "NotFound", message: "Entity with the specified id does not exist in the system.," };
  }
};
const { createHttpsServer } = require("@vercel/cosmosdb-server");
const port = Number(process.argv[2] || 0);
const server = createHttpsServer({ keepAlive: true });
server.keepAliveTimeout = 60000;
server.listen(port, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => server.close(() => process.exit(0)));
