/**
 * Lint and format, the Effect way (after Effect v3's own eslint.config.mjs):
 * ESLint's and typescript-eslint's recommended rules, and formatting by dprint
 * through `@effect/eslint-plugin` with Effect's settings (2 spaces, 120
 * columns, no semicolons, double quotes, no trailing commas, parenthesized
 * arrow parameters). `npm run lint` checks; `npm run lint:fix` rewrites what
 * can be rewritten (the formatting, import order, type-only imports), in two
 * passes, dprint last: in one pass, dprint reordering imports and another
 * rule's fix to an import line can land on different imports.
 *
 * Imports: dprint sorts the declarations and the names inside each
 * (case-insensitive); the import rules (eslint-plugin-import's, from its
 * resolver-free port `eslint-plugin-import-lite`) keep them first, deduplicated
 * and followed by a blank line.
 *
 * Where this differs from Effect: strings may keep single quotes when they
 * hold double quotes (`preferDouble`, not `alwaysDouble`: '"type":"x"' stays
 * readable); rules Effect sets to "warn" are errors here, so CI holds them;
 * no `console` in any package's or app's src (logging goes through Effect);
 * barrel imports (`from "effect"`) are fine, this being an application.
 */
import * as effectEslint from "@effect/eslint-plugin"
import js from "@eslint/js"
import importLite from "eslint-plugin-import-lite"
import sortDestructureKeys from "eslint-plugin-sort-destructure-keys"
import { defineConfig, globalIgnores } from "eslint/config"
import tseslint from "typescript-eslint"

const noSpreadPush = {
  selector: "CallExpression[callee.property.name='push'] > SpreadElement.arguments",
  message: "Do not use spread arguments in Array.push"
}

/** A package names no app's files, even as a path to run (dependency-cruiser sees only imports). */
const intoApps = "A package does not reach into apps/: the app passes it what it needs"
const noPathIntoApps = [
  { selector: "Literal[value=/(^|\\/)apps\\//]", message: intoApps },
  { selector: "TemplateElement[value.raw=/(^|\\/)apps\\//]", message: intoApps }
]

export default defineConfig(
  globalIgnores(["**/node_modules/", ".data/", ".tmp/", "docs/", "patches/"]),
  {
    files: ["**/*.{ts,tsx,mjs}"],
    extends: [js.configs.recommended, tseslint.configs.recommended, effectEslint.configs.dprint],
    plugins: {
      import: importLite,
      "sort-destructure-keys": sortDestructureKeys
    },
    languageOptions: {
      parser: tseslint.parser,
      ecmaVersion: 2023,
      sourceType: "module"
    },
    linterOptions: {
      reportUnusedDisableDirectives: "error"
    },
    rules: {
      // Off as in Effect: TypeScript covers them (noFallthroughCasesInSwitch, noUnusedLocals), or
      // they fight the Effect idioms (a generator without yield, rest and spread).
      "no-fallthrough": "off",
      "no-irregular-whitespace": "off",
      "no-unused-vars": "off",
      "prefer-destructuring": "off",
      "prefer-rest-params": "off",
      "prefer-spread": "off",
      "require-yield": "off",
      "sort-imports": "off",

      "object-shorthand": "error",
      "no-restricted-syntax": ["error", noSpreadPush],

      "import/first": "error",
      "import/newline-after-import": "error",
      "import/no-duplicates": "error",
      "sort-destructure-keys/sort-destructure-keys": "error",

      "@typescript-eslint/array-type": ["error", { default: "generic", readonly: "generic" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/ban-ts-comment": "off",
      "@typescript-eslint/no-array-constructor": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-namespace": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-unsafe-function-type": "off",
      "@typescript-eslint/no-wrapper-object-types": "off",

      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "preferDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }]
    }
  },
  {
    files: ["packages/*/src/**/*.ts", "apps/*/src/**/*.ts"],
    rules: {
      "no-console": "error"
    }
  },
  {
    files: ["packages/**/*.ts"],
    rules: {
      "no-restricted-syntax": ["error", noSpreadPush, ...noPathIntoApps]
    }
  }
)
