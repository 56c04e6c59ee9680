// The published contract: the two documents this node implements, served as
// shipped. Read once, on first use; a missing file is an internal error, not a crash.
import { readFile } from "node:fs/promises";
import type { Handler } from "../../../generated/http/routes.js";
import { EVENTS_SCHEMA_FILE, OPENAPI_FILE } from "../../config/paths.js";
import type { HandlerContext } from "../router.js";

const cache = new Map<string, Promise<string>>();
const load = (file: string): Promise<string> => {
  let p = cache.get(file);
  if (!p) {
    p = readFile(file, "utf8");
    p.catch(() => cache.delete(file));
    cache.set(file, p);
  }
  return p;
};

export const getOpenapiDocument: Handler<"getOpenapiDocument", HandlerContext> = async () => ({
  status: 200,
  raw: await load(OPENAPI_FILE),
});

export const getEventsSchema: Handler<"getEventsSchema", HandlerContext> = async () => ({
  status: 200,
  raw: await load(EVENTS_SCHEMA_FILE),
});
