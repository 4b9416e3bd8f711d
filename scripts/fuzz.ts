/**
 * `npm run fuzz` (or `node scripts/fuzz.ts`): the schema fuzzing of
 * `apps/server/test/Fuzz.test.ts`, longer. One real node on its own
 * embedded PostgreSQL, the fake upstream as every provider, requests
 * generated from the node's OpenAPI document and the gateway's protocols.
 * Prints requests and statuses per endpoint, then every problem found
 * grouped by endpoint and kind (with the first requests that showed it);
 * exits 1 when there is any, or when the node did not survive.
 *
 * Environment: FUZZ_RUNS (default 20000), FUZZ_SEED (default: a new one,
 * printed, so a run can be repeated), FUZZ_CONCURRENCY (6), FUZZ_ONLY (a
 * regular expression an endpoint's label must match, e.g. "gateway|tokens"),
 * FUZZ_PROBLEMS (a file to write every problem to, as JSON).
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import * as Fuzz from "@agent-runtime/testing/Fuzz"
import * as FuzzWorld from "@agent-runtime/testing/FuzzWorld"
import * as Http from "@agent-runtime/testing/Http"
import * as TestNode from "@agent-runtime/testing/TestNode"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Redacted } from "effect"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { serverFlags, serverScript } from "./serverScript.ts"

const runs = Number(process.env.FUZZ_RUNS ?? 20_000)
const seed = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31))
const concurrency = Number(process.env.FUZZ_CONCURRENCY ?? 6)
const only = process.env.FUZZ_ONLY === undefined ? undefined : new RegExp(process.env.FUZZ_ONLY)
const maxBodyBytes = 256 * 1024

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "fuzz-"))),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  const postgres = yield* EmbeddedPostgres.start({
    dataDir,
    postgresFlags: ["-c", "fsync=off", "-c", "synchronous_commit=off"]
  })
  const databaseUrl = Redacted.value(yield* postgres.createDatabase("fuzz"))
  const upstream = yield* FakeUpstream.start({ maxRecorded: 1000 })
  const node = yield* TestNode.start({
    script: serverScript,
    flags: serverFlags,
    databaseUrl,
    env: yield* FuzzWorld.env(upstream, maxBodyBytes)
  })
  // Long polls up to 3 s: a long run may afford them, and they overlap with other requests.
  const world = yield* FuzzWorld.make(node, upstream, { maxBodyBytes, longPollSeconds: 3 })
  const operations = world.operations.filter((operation) => only === undefined || only.test(Fuzz.label(operation)))
  yield* Console.log(
    `fuzz: ${runs} requests over ${operations.length} endpoints, seed ${seed}, concurrency ${concurrency}`
  )
  const started = Date.now()
  const { problems, report } = yield* Fuzz.run({
    rest: node.rest,
    gateway: node.gateway,
    operations,
    fill: world.fill,
    secrets: world.secrets,
    runs,
    seed,
    concurrency,
    timeoutMs: 30_000
  })
  yield* Console.log(`${report.format()}\n\n${report.sent} requests in ${((Date.now() - started) / 1000).toFixed(1)} s`)

  if (process.env.FUZZ_PROBLEMS !== undefined) {
    yield* Effect.promise(() => Fs.writeFile(process.env.FUZZ_PROBLEMS!, JSON.stringify(problems, null, 2)))
  }
  const groups = new Map<string, Array<Fuzz.Problem>>()
  for (const problem of problems) {
    for (const kind of problem.problems) {
      const key = `${problem.label}: ${kind}`
      groups.set(key, [...(groups.get(key) ?? []), problem])
    }
  }
  for (const [key, found] of groups) {
    yield* Console.log(`\n${found.length} × ${key}`)
    for (const problem of found.slice(0, 3)) {
      yield* Console.log(
        `  ${problem.method} ${problem.path}\n    ${problem.notes.join("; ")}\n    ${problem.body.slice(0, 300)}\n` +
          `    -> ${problem.status} ${problem.answer}`
      )
    }
  }

  const alive = node.process.exitCode === null && node.process.signalCode === null
  const health = alive ? (yield* Http.request(node.rest, "GET", "/healthz")).status : 0
  yield* Console.log(`\nproblems: ${problems.length}; node ${alive ? "alive" : "gone"}, /healthz ${health}`)
  if (problems.length > 0 || health !== 200) {
    const errors = node.output().split("\n").filter((line) => /level=(ERROR|FATAL)/.test(line))
    yield* Console.log(errors.slice(0, 20).map((line) => line.slice(0, 400)).join("\n"))
    process.exitCode = 1
  }
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
