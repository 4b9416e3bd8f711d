/**
 * A node the tests start runs as `npm start` runs it: Node's flags from the root package.json's start script
 * (a young generation sized for a turn's garbage, see docs/benchmarks.md) reach the node's command line.
 */
import { TestDatabase, TestNode } from "@agent-runtime/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs/promises"

it.scoped("a started node has npm start's flags on its command line", () =>
  Effect.gen(function*() {
    const packageJson = JSON.parse(
      yield* Effect.promise(() => Fs.readFile(new URL("../../../package.json", import.meta.url), "utf8"))
    )
    const start = (packageJson.scripts.start as string).split(/\s+/)
    expect(start).toContain("--max-semi-space-size=16")
    const node = yield* TestNode.start({ databaseUrl: yield* TestDatabase.make })
    const commandLine = (yield* Effect.promise(() => Fs.readFile(`/proc/${node.process.pid}/cmdline`, "utf8")))
      .split("\0").filter((word) => word !== "")
    // node, its flags, the script: as the start script names them after `node`.
    expect(commandLine.slice(1)).toEqual(
      start.slice(1).map((word) => word.startsWith("--") ? word : expect.stringMatching(`/${word}$`))
    )
  }))
