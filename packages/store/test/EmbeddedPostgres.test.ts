/**
 * The embedded server's package installs process hooks on import (async-exit-hook): on SIGTERM they stop the
 * server and exit at once, and on `beforeExit` they exit with code 0, which made a failed vitest run (and a
 * failed node) exit 0. Starting a server leaves none of them behind.
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"

const events = ["SIGHUP", "SIGINT", "SIGTERM", "beforeExit", "exit", "message"] as const

it.scopedLive(
  "starting a server adds no process hooks: exit codes and signals stay the caller's",
  () =>
    Effect.gen(function*() {
      const before = events.map((event) => process.listenerCount(event))
      const dataDir = yield* Effect.acquireRelease(
        Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-runtime-hooks-"))),
        (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
      )
      const server = yield* EmbeddedPostgres.start({ dataDir, postgresFlags: ["-c", "fsync=off"] })
      expect(server.port).toBeGreaterThan(0)
      expect(events.map((event) => process.listenerCount(event))).toEqual(before)
    }),
  { timeout: 60_000 }
)
