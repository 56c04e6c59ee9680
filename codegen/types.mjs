// TypeScript types for HTTP (openapi-typescript) and for frames (json-schema-to-typescript).
import openapiTS, { astToString } from "openapi-typescript";
import { compile } from "json-schema-to-typescript";

export async function emitOpenapiTypes(openapi) {
  const ast = await openapiTS(structuredClone(openapi), {
    // Keep the contract's snake_case names and exact optionality.
    exactOptionalPropertyTypes: true,
    alphabetize: false,
    immutable: false,
    // A field with a default is still optional on the wire.
    defaultNonNullable: false,
  });
  return astToString(ast);
}

/**
 * Frame types. The two directions are what handlers dispatch on, so they are named
 * ClientFrame and ServerFrame; every $defs entry gets a type named after its key.
 */
export async function emitFrameTypes(events) {
  const schema = structuredClone(events);
  // Objects and unions are named after their $defs keys so that names are stable;
  // primitive aliases (Id, Uint64String, …) stay plain strings, since json-schema-to-
  // typescript would otherwise emit a numbered copy (Id1, Id2, …) for every use.
  for (const [key, def] of Object.entries(schema.$defs ?? {})) {
    const named = def && typeof def === "object" && (def.type === "object" || def.oneOf || def.allOf);
    if (named) def.title = pascal(key);
    else if (def && typeof def === "object") delete def.title;
  }
  const wrapper = {
    ...schema,
    title: "OrbitFrames",
    type: "object",
    additionalProperties: false,
    properties: {
      client: { $ref: "#/$defs/clientFrame" },
      server: { $ref: "#/$defs/serverFrame" },
    },
  };
  delete wrapper.oneOf;
  delete wrapper.anyOf;
  delete wrapper.$id;
  const ts = await compile(wrapper, "OrbitFrames", {
    bannerComment: "",
    additionalProperties: false,
    unreachableDefinitions: true,
    strictIndexSignatures: true,
    format: true,
    style: { singleQuote: false, printWidth: 100 },
  });
  return ts;
}

function pascal(s) {
  return s
    .replace(/(^|[^A-Za-z0-9])([A-Za-z0-9])/g, (_, __, c) => c.toUpperCase())
    .replace(/^[a-z]/, (c) => c.toUpperCase());
}
