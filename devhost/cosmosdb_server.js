// Starts @vercel/cosmosdb-server over HTTPS with keep-alive (the CLI has no flag for it).
// Usage: node devhost/cosmosdb_server.js PORT   — prints "listening PORT" when ready.
const { createHttpsServer } = require("@vercel/cosmosdb-server");
const port = Number(process.argv[2] || 0);
const server = createHttpsServer({ keepAlive: true });
server.keepAliveTimeout = 60000;
server.listen(port, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => server.close(() => process.exit(0)));
