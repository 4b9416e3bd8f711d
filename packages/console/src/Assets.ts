/**
 * The console's assets: the browser app under `app/` (Preact, uPlot), bundled
 * by esbuild into `dist/` when the project is installed (`postinstall`), and
 * read from there by the node that serves `/console`. File names carry a hash
 * of their content, so the node can let browsers keep them for a year; the
 * page itself is never cached.
 */
import { Data, Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as Zlib from "node:zlib"

/** Where the console is served. */
export const basePath = "/console"
/** Where its bundled files are served. */
export const assetsPath = `${basePath}/assets`

const appDirectory = new URL("../app/", import.meta.url)
const distDirectory = new URL("../dist/", import.meta.url)
const manifestFile = new URL("manifest.json", distDirectory)

/** What a build made: its directory under dist/, the entry's script and style sheet, and every file. */
export interface Manifest {
  readonly directory: string
  readonly script: string
  readonly style: string
  /** The chunks the script imports at once: the page asks for them beside it, not after it. */
  readonly preload: ReadonlyArray<string>
  /** Every file of the build, the chunks views load when first shown among them. */
  readonly files: ReadonlyArray<string>
}

export interface Asset {
  readonly body: Uint8Array
  readonly contentType: string
  /** The same, gzipped once, for browsers that take it (all of them). */
  readonly gzipped: Uint8Array
}

export interface Assets {
  readonly manifest: Manifest
  /** The built files by name. */
  readonly files: ReadonlyMap<string, Asset>
}

/** The console was not built: the install's `postinstall` did not run. */
export class AssetsMissing extends Data.TaggedError("AssetsMissing")<{ readonly message: string }> {}

const contentTypes: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8"
}

const readManifest = async (): Promise<Manifest> => JSON.parse(await Fs.readFile(manifestFile, "utf8"))

/**
 * Bundles the app into a new directory of `dist/` (minified, split by view,
 * hashed names) and writes the manifest naming it last, so a node reading
 * meanwhile sees one build whole; the build before the previous one is removed.
 */
export const build = async (): Promise<Manifest> => {
  const esbuild = await import("esbuild")
  const directory = `build-${Date.now().toString(36)}-${process.pid}`
  const outdir = new URL(`${directory}/`, distDirectory)
  const result = await esbuild.build({
    entryPoints: [new URL("main.tsx", appDirectory).pathname],
    bundle: true,
    splitting: true,
    minify: true,
    format: "esm",
    target: "es2022",
    jsx: "automatic",
    jsxImportSource: "preact",
    entryNames: "console-[hash]",
    chunkNames: "chunk-[hash]",
    outdir: outdir.pathname,
    metafile: true,
    legalComments: "none",
    logLevel: "silent"
  })
  let script: string | undefined
  let style: string | undefined
  let preload: Array<string> = []
  const files: Array<string> = []
  for (const [path, output] of Object.entries(result.metafile.outputs)) {
    const name = path.split("/").pop()!
    files.push(name)
    // Views loaded on demand are entry points too: the page loads only main's.
    if (output.entryPoint === undefined || !output.entryPoint.endsWith("app/main.tsx")) continue
    script = name
    style = output.cssBundle?.split("/").pop()
    preload = output.imports.filter((imported) => imported.kind === "import-statement").map((imported) =>
      imported.path.split("/").pop()!
    )
  }
  if (script === undefined || style === undefined) throw new Error("the console's build made no script or style")
  const previous = await readManifest().catch(() => undefined)
  const manifest: Manifest = { directory, script, style, preload, files }
  const temporary = new URL(`manifest.${process.pid}.json`, distDirectory)
  await Fs.writeFile(temporary, JSON.stringify(manifest))
  await Fs.rename(temporary, manifestFile)
  for (const entry of await Fs.readdir(distDirectory)) {
    if (entry.startsWith("build-") && entry !== directory && entry !== previous?.directory) {
      await Fs.rm(new URL(entry, distDirectory), { recursive: true, force: true })
    }
  }
  return manifest
}

/** The built files, read once. */
export const load: Effect.Effect<Assets, AssetsMissing> = Effect.tryPromise({
  try: async () => {
    const manifest = await readManifest()
    const files = new Map<string, Asset>()
    for (const name of manifest.files) {
      const body = await Fs.readFile(new URL(`${manifest.directory}/${name}`, distDirectory))
      files.set(name, {
        body,
        contentType: contentTypes[name.slice(name.lastIndexOf("."))] ?? "application/octet-stream",
        gzipped: Zlib.gzipSync(body, { level: 9 })
      })
    }
    return { manifest, files }
  },
  catch: (cause) =>
    new AssetsMissing({
      message: `the console is not built (${String(cause)}): run \`npm run build --workspace @agent-runtime/console\``
    })
})

/** The page every console route answers: the app mounts into it. */
export const page = (manifest: Manifest) =>
  `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Agent Runtime console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${assetsPath}/${manifest.style}">
<script type="module" src="${assetsPath}/${manifest.script}"></script>
${manifest.preload.map((name) => `<link rel="modulepreload" href="${assetsPath}/${name}">`).join("\n")}
</head>
<body>
<div id="app"><p class="booting">Loading the console…</p></div>
</body>
</html>
`
