// Argument parsing shared by the subcommands: node:util parseArgs in strict mode, so an
// unknown or misspelt option is an error, never ignored.
import { parseArgs, type ParseArgsConfig } from "node:util";

export class UsageError extends Error {}

export type ArgValues = Readonly<Record<string, string | boolean | string[] | undefined>>;

/** Parses argv; prints the help and returns undefined for --help. */
export function parse(
  argv: string[],
  options: NonNullable<ParseArgsConfig["options"]>,
  help: string,
): ArgValues | undefined {
  let values: ArgValues;
  try {
    const parsed = parseArgs({
      args: argv,
      options: { ...options, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
      tokens: true,
    });
    values = parsed.values as ArgValues;
    // parseArgs keeps the last of a repeated single-value option: `--namespace a
    // --namespace b` would bootstrap b without a word. Repeated, it is ambiguous.
    const seen = new Set<string>();
    for (const t of parsed.tokens) {
      if (t.kind !== "option" || options[t.name]?.multiple) continue;
      if (seen.has(t.name)) throw new Error(`--${t.name} is given more than once`);
      seen.add(t.name);
    }
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n\n${help}`);
  }
  if (values.help === true) {
    process.stdout.write(help);
    return undefined;
  }
  return values;
}

export const str = (v: ArgValues, name: string): string | undefined =>
  typeof v[name] === "string" ? (v[name] as string) : undefined;
export const list = (v: ArgValues, name: string): string[] => (Array.isArray(v[name]) ? (v[name] as string[]) : []);
export const flag = (v: ArgValues, name: string): boolean => v[name] === true;
