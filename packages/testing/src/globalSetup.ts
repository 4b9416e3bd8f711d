/**
 * Vitest global setup: one embedded PostgreSQL for the whole run, with
 * throwaway settings. Each test file makes its own database on it.
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import { Effect, Exit, Redacted, Scope } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import type { TestProject } from "vitest/node"

declare module "vitest" {
  export interface ProvidedContext {
    postgresUrl: string
  }
}

export default async function setup(project: TestProject) {
  const dataDir = await Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-runtime-test-"))
  const scope = Effect.runSync(Scope.make())
  const server = await Effect.runPromise(
    EmbeddedPostgres.start({
      dataDir,
      postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
    }).pipe(Scope.extend(scope))
  )
  project.provide("postgresUrl", Redacted.value(server.url))
  return async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await Fs.rm(dataDir, { recursive: true, force: true })
  }
}
