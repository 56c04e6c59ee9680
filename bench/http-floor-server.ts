// The smallest HTTP service a result append could be (bench/http-floor.ts runs it in its own
// process, as `orbit serve` runs): Koa, the request body read and parsed as JSON, then — with
// `--update` — one autocommit UPDATE of the worker's own row through a 16-connection pool,
// one durable commit per request, and a small JSON envelope back. No authentication, no
// validation, no transaction, no event: what is left is the HTTP request and the commit.
import Koa from "koa";
import mysql from "mysql2/promise";

const [databaseUrl, mode] = process.argv.slice(2);
const update = mode === "--update";
const db = mysql.createPool({ uri: databaseUrl!, connectionLimit: 16 });

const app = new Koa();
app.use(async (ctx) => {
  const chunks: Buffer[] = [];
  for await (const c of ctx.req) chunks.push(c as Buffer);
  const body: unknown = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  // The path names the worker's row: /0 … /15.
  if (update) await db.query("UPDATE http_rows SET n = n + 1 WHERE id = ?", [Number(ctx.path.slice(1))]);
  ctx.status = 200;
  ctx.type = "application/json";
  ctx.body = JSON.stringify({ data: { ok: true, echo: body } });
});
const server = app.listen(0, "127.0.0.1", () => {
  const a = server.address();
  process.stdout.write(`${JSON.stringify({ port: typeof a === "object" && a ? a.port : 0 })}\n`);
});
process.on("SIGTERM", () => {
  server.close();
  void db.end();
});
