// Where the package's own files are at run time: this file runs from dist/src/config/.
import path from "node:path";
import { fileURLToPath } from "node:url";

export const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const MIGRATIONS_DIR = path.join(PACKAGE_ROOT, "migrations");
export const PACKAGE_JSON = path.join(PACKAGE_ROOT, "package.json");
export const OPENAPI_FILE = path.join(PACKAGE_ROOT, "openapi.yaml");
export const EVENTS_SCHEMA_FILE = path.join(PACKAGE_ROOT, "events.schema.json");
