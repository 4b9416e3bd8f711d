/** The server's entry script, which the scripts start as nodes (the testing package does not know the app). */
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

export const serverScript = fileURLToPath(new URL("../apps/server/src/main.ts", import.meta.url))

/**
 * Node's flags for the server, as `npm start` gives them (the root package.json's start script): a node that
 * a test, benchmark or script starts runs as the README's does.
 */
export const serverFlags: ReadonlyArray<string> = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).scripts.start as string
).split(/\s+/).filter((word) => word.startsWith("--"))
