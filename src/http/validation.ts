// Turns a generated validator's first error into a short client message that names the
// field and the rule, never the value sent.
import * as httpValidators from "../../generated/http/validators.js";
import { invalidArgument } from "../wire/errors.js";
import { patternRule } from "../wire/pattern-rules.js";

export interface ValidateFn {
  (data: unknown): boolean;
  errors?:
    | {
        instancePath: string;
        schemaPath?: string;
        keyword: string;
        params: Record<string, unknown>;
        message?: string;
      }[]
    | null;
}

const table = httpValidators as unknown as Record<string, ValidateFn | undefined>;

export function validator(name: string): ValidateFn | undefined {
  return table[name];
}

const clip = (s: string): string => (s.length > 64 ? `${s.slice(0, 64)}…` : s);

export function describeFirstError(fn: ValidateFn, what: string): string {
  const e = fn.errors?.[0];
  if (!e) return `${what} is invalid`;
  const at = e.instancePath ? `${what} field ${clip(e.instancePath.replace(/^\//, "").replace(/\//g, "."))}` : what;
  switch (e.keyword) {
    case "additionalProperties":
      return `${at}: unknown field "${clip(String(e.params.additionalProperty))}"`;
    case "required":
      return `${at}: missing required field "${clip(String(e.params.missingProperty))}"`;
    case "pattern":
      return `${at}: ${patternRule(e.schemaPath) ?? e.message ?? "is invalid"}`;
    default:
      return `${at}: ${e.message ?? "is invalid"}`;
  }
}

/** Validates with the named generated validator or throws INVALID_ARGUMENT. */
export function check<T>(name: string, data: unknown, what: string): T {
  const fn = validator(name);
  if (!fn) throw new Error(`no generated validator ${name}`);
  if (!fn(data)) throw invalidArgument(describeFirstError(fn, what));
  return data as T;
}
