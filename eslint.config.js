// typescript-eslint's recommended rules, plus the type-aware ones that catch real bugs in
// async code. Layout is prettier's job (npm run lint runs both).
import js from "@eslint/js";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/dist/", "generated/", "node_modules/", "bench/results/", ".bench-tmp/", "packages/sdk/contract/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    rules: {
      // A handler set up before the value exists reads it later: keep such a `let`.
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],
      "@typescript-eslint/no-unused-vars": [
        "error",
        {
          argsIgnorePattern: "^_",
          varsIgnorePattern: "^_",
          destructuredArrayIgnorePattern: "^_",
          ignoreRestSiblings: true,
        },
      ],
    },
  },
  {
    files: ["**/*.ts"],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: false }],
    },
  },
  {
    // Tests, benchmarks and the raw-protocol example read the wire's JSON untyped, as a
    // client in any language would; tests also poke at internals on purpose.
    files: ["test/**/*.ts", "bench/**/*.ts", "examples/protocol.ts"],
    rules: { "@typescript-eslint/no-explicit-any": "off" },
  },
);
