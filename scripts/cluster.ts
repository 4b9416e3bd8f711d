/**
 * `npm run cluster`: a three-node cluster on one machine — an embedded
 * PostgreSQL under DATA_DIR (default ./.data/cluster) and three nodes
 * (REST 8787/8797/8807, gateway 8788/8798/8808, runners 8789/8799/8809)
 * sharing its database, operator token and sealing key. Each node's output is
 * prefixed with its name. Ctrl-C drains and stops the nodes, then PostgreSQL.
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import { NodeRuntime } from "@effect/platform-node"
import { Config, Console, Effect, Redacted } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { serverFlags, serverScript } from "./serverScript.ts"

/** A secret kept in the data directory, made on first use, so restarts keep tokens and sealed keys valid. */
const secret = (dataDir: string, name: string, make: () => string) =>
  Effect.promise(async () => {
    const file = Path.join(dataDir, name)
    const existing = await Fs.readFile(file, "utf8").catch(() => undefined)
    if (existing !== undefined) return existing.trim()
    const value = make()
    await Fs.writeFile(file, value + "\n", { mode: 0o600 })
    return value
  })

Effect.gen(function*() {
  const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./.data/cluster"))
  const server = yield* EmbeddedPostgres.start({ dataDir: Path.join(dataDir, "postgres") })
  const operatorToken = yield* secret(
    dataDir,
    "operator-token",
    () => `aro_${Crypto.randomBytes(32).toString("base64url")}`
  )
  const sealingKey = yield* secret(dataDir, "sealing-key", () => Crypto.randomBytes(32).toString("base64"))
  const nodes = [0, 1, 2].map((i) => {
    const name = `node${i + 1}`
    const child = ChildProcess.spawn(process.execPath, [...serverFlags, serverScript], {
      env: {
        ...process.env,
        DATABASE_URL: Redacted.value(server.url),
        DATA_DIR: Path.join(dataDir, name),
        OPERATOR_TOKEN: operatorToken,
        SEALING_KEY: sealingKey,
        PORT: String(8787 + 10 * i),
        GATEWAY_PORT: String(8788 + 10 * i),
        RUNNER_ADDRESS: `127.0.0.1:${8789 + 10 * i}`
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    for (const stream of [child.stdout!, child.stderr!]) {
      Readline.createInterface({ input: stream }).on("line", (line) => console.log(`${name} | ${line}`))
    }
    return child
  })
  yield* Console.log(`cluster: 3 nodes on ${dataDir}; operator token in ${Path.join(dataDir, "operator-token")}`)
  yield* Effect.addFinalizer(() =>
    Effect.promise(() =>
      Promise.all(nodes.map((child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve()
          child.once("exit", () => resolve())
          child.kill("SIGTERM")
        })
      ))
    )
  )
  return yield* Effect.never
}).pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
