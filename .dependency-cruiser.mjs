/**
 * Layering and cycles: `npm run check:layers` fails when an import points the
 * wrong way. Checked on resolved files, imports of types included.
 *
 * Packages, bottom to top; a package imports only packages of lower layers:
 *
 *   domain  ->  store, egress, codemode  ->  webhooks, telemetry  ->  billing  ->  accounts, models, identity, files
 *     ->  toolsources, oauth
 *     ->  agent, gateway, mcp, console (the web console: domain types only)
 *     ->  apps/server
 *
 * `sdk` (the client SDK, published on its own) imports only `domain`, and no
 * package's or app's src imports it; its tests may add testing.
 *
 * `testing` may import any package, and only tests and scripts import it. No
 * package imports an app, and no app another app. Nothing imports another
 * package's `src/internal/`, or another package's files by relative path. No
 * import cycles between modules (as with Effect's `.madgerc`, imports of types
 * only do not count: they are erased), and none between a package's public
 * modules even through imports of types, so each module's imports point one
 * way (an `internal/` module may import the types of the modules it serves).
 * A package's src imports only what its
 * package.json declares; its tests may add its devDependencies.
 *
 * (A path into an app named as a string, such as a script to spawn, is no
 * import: eslint.config.mjs forbids those in packages.)
 */
import * as Fs from "node:fs"
import * as Path from "node:path"

/** Bottom to top; package directory names under packages/. */
const layers = [
  ["domain"],
  ["store", "egress", "codemode"],
  ["webhooks", "telemetry"],
  ["billing"],
  ["accounts", "models", "identity", "files"],
  ["toolsources", "oauth"],
  ["agent", "gateway", "mcp", "console"]
]

const root = import.meta.dirname
const anyOf = (names) => `(${names.join("|")})`
const below = (pkg) => layers.slice(0, layers.findIndex((layer) => layer.includes(pkg))).flat()

/** packages/* and apps/* with a package.json. */
const workspaces = ["packages", "apps"].flatMap((parent) =>
  Fs.readdirSync(Path.join(root, parent), { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && Fs.existsSync(Path.join(root, parent, entry.name, "package.json")))
    .map((entry) => `${parent}/${entry.name}`)
)

/** The workspace packages (`@agent-runtime/<name>`, in packages/<name>) a package.json lists in these sections. */
const declared = (dir, sections) => {
  const manifest = JSON.parse(Fs.readFileSync(Path.join(root, dir, "package.json"), "utf8"))
  return sections.flatMap((section) => Object.keys(manifest[section] ?? {}))
    .filter((name) => name.startsWith("@agent-runtime/"))
    .map((name) => name.slice("@agent-runtime/".length))
}

const layerRules = layers.flat().flatMap((pkg) => {
  const allowed = `^packages/${anyOf([pkg, ...below(pkg)])}/`
  const comment = `${pkg} imports only the packages below it (${
    below(pkg).join(", ") || "none"
  }); its tests may add testing`
  return [
    { from: { path: `^packages/${pkg}/src/` }, to: { path: "^(packages|apps)/", pathNot: allowed } },
    {
      from: { path: `^packages/${pkg}/`, pathNot: `^packages/${pkg}/src/` },
      to: { path: "^(packages|apps)/", pathNot: [allowed, "^packages/testing/"] }
    }
  ].map((rule) => ({ name: "layers", comment, severity: "error", ...rule }))
})

const manifestRules = workspaces.flatMap((dir) => [
  {
    name: "no-undeclared-workspace-dependency",
    comment: `${dir}/src imports a workspace package its package.json does not list in dependencies`,
    severity: "error",
    from: { path: `^${dir}/src/` },
    to: { path: "^packages/", pathNot: `^(${dir}|packages/${anyOf(declared(dir, ["dependencies"]))})/` }
  },
  {
    name: "no-undeclared-workspace-dependency",
    comment: `${dir} imports a workspace package its package.json does not list`,
    severity: "error",
    from: { path: `^${dir}/`, pathNot: `^${dir}/src/` },
    to: {
      path: "^packages/",
      pathNot: `^(${dir}|packages/${anyOf(declared(dir, ["dependencies", "devDependencies"]))})/`
    }
  }
])

/** @type {import("dependency-cruiser").IConfiguration} */
export default {
  forbidden: [
    {
      name: "no-circular",
      comment: "an import cycle between modules (imports of types only do not count)",
      severity: "error",
      from: { path: "^(packages|apps)/" },
      to: { circular: true, viaOnly: { dependencyTypesNot: ["type-only"] } }
    },
    {
      name: "no-circular-modules",
      comment: "a cycle between a package's modules, imports of types included: a module's imports point one " +
        "way; only an internal/ module may import types back from the modules it serves",
      severity: "error",
      from: { path: "^(packages|apps)/[^/]+/src/(?!internal/)" },
      to: { circular: true, viaOnly: { path: "^(packages|apps)/[^/]+/src/(?!internal/)" } }
    },
    {
      name: "not-to-app",
      comment: "a package imports an app; apps assemble packages, never the reverse",
      severity: "error",
      from: { path: "^packages/" },
      to: { path: "^apps/" }
    },
    {
      name: "not-to-other-app",
      comment: "an app imports another app",
      severity: "error",
      from: { path: "^apps/([^/]+)/" },
      to: { path: "^apps/", pathNot: "^apps/$1/" }
    },
    {
      name: "not-to-internal",
      comment: "an import of another package's src/internal/ (its private machinery)",
      severity: "error",
      from: { path: "^(packages/[^/]+|apps/[^/]+|scripts)/" },
      to: { path: "^packages/[^/]+/src/internal/", pathNot: "^$1/" }
    },
    {
      name: "not-across-by-path",
      comment: "an import of another package's file by relative path; import it by its package name",
      severity: "error",
      from: { path: "^(packages/[^/]+|apps/[^/]+|scripts)/" },
      to: { path: "^(packages|apps)/", pathNot: "^$1/", dependencyTypes: ["local"], dependencyTypesNot: ["aliased"] }
    },
    {
      name: "testing-only-in-tests",
      comment: "production code imports the testing package; only tests and scripts may",
      severity: "error",
      from: { path: "^(packages|apps)/[^/]+/src/", pathNot: "^packages/testing/" },
      to: { path: "^packages/testing/" }
    },
    ...layerRules,
    {
      name: "layers",
      comment: "the sdk imports only domain (it is published on its own); its tests may add testing",
      severity: "error",
      from: { path: "^packages/sdk/" },
      to: { path: "^(packages|apps)/", pathNot: "^packages/(sdk|domain|testing)/" }
    },
    {
      name: "not-to-sdk",
      comment: "production code imports the client SDK; only tests may (the runtime never depends on its client)",
      severity: "error",
      from: { path: "^(packages|apps)/[^/]+/src/", pathNot: "^packages/sdk/" },
      to: { path: "^packages/sdk/" }
    },
    ...manifestRules,
    {
      name: "no-undeclared-dependency",
      comment: "src imports an npm package its package.json does not declare",
      severity: "error",
      from: { path: "^(packages|apps)/[^/]+/src/" },
      to: { dependencyTypes: ["npm-no-pkg", "npm-unknown"] }
    },
    {
      name: "not-to-unresolvable",
      comment: "an import that resolves to no file",
      severity: "error",
      from: {},
      to: { couldNotResolve: true }
    }
  ],
  options: {
    doNotFollow: { path: "(^|/)node_modules/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "node", "default"],
      extensions: [".ts", ".mjs", ".js", ".json"]
    }
  }
}
