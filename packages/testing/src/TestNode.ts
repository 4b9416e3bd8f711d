/**
 * A real server process, started the way `npm start` does, on free ports,
 * and stopped with the test's scope. The package does not know the app: the
 * script to run is named by whoever runs the tests, as `script`, or for
 * vitest as the provided `serverMain` (the server project's setting in
 * vitest.workspace.ts).
 */
import type { Scope } from "effect"
import { Deferred, Effect, Option } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"

declare module "vitest" {
  export interface ProvidedContext {
    /** The server's entry script, for `TestNode.start` without a `script`. */
    serverMain: string
    /** Node's flags for it, as `npm start` gives them. */
    serverFlags: ReadonlyArray<string>
  }
}

export interface Options {
  /** The server's entry script; under vitest, the provided `serverMain` when absent. */
  readonly script?: string
  /** Node's flags for `script` (as `npm start` gives them); with the provided script, the provided `serverFlags`. */
  readonly flags?: ReadonlyArray<string>
  readonly databaseUrl: string
  readonly operatorToken?: string
  readonly env?: Record<string, string>
}

export interface TestNode {
  readonly rest: string
  readonly gateway: string
  readonly operatorToken: string
  readonly dataDir: string
  readonly process: ChildProcess.ChildProcess
  /** Everything the process printed so far. */
  readonly output: () => string
  /** host:port of its cluster runner. */
  readonly runnerAddress: string
  /** Sends a signal and waits for the process to end. */
  readonly stop: (signal?: NodeJS.Signals) => Effect.Effect<Exit>
  /** Waits for the process to end by itself. */
  readonly exited: Effect.Effect<Exit>
  /** Sends a signal without waiting (SIGSTOP, SIGCONT). */
  readonly signal: (signal: NodeJS.Signals) => Effect.Effect<void>
}

/** How the process ended: its exit code, or the signal that ended it. */
export interface Exit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

/** The script the test run names and its flags, for a start that names none. */
const providedScript = Effect.tryPromise({
  try: async () => {
    // Imported here, not at the top: benchmark scripts use this fixture outside vitest.
    const { inject } = await import("vitest")
    const script = inject("serverMain")
    if (typeof script !== "string") throw new Error("serverMain is not provided")
    return { script, flags: inject("serverFlags") ?? [] }
  },
  catch: (cause) =>
    new Error(
      `TestNode.start needs the server's script: pass \`script\`, or provide \`serverMain\` to vitest (${cause})`
    )
})

const readyLine = /agent-runtime ready rest=(\S+) gateway=(\S+)/

/** How long a node may take to print its ready line: 30 s, or `TEST_NODE_START_SECONDS` on a crowded machine. */
const startSeconds = Number(process.env.TEST_NODE_START_SECONDS ?? 30) || 30

/**
 * Where the kernel takes the local ports of outgoing connections from; 32768 and up when it does not say.
 */
const ephemeralLow = Effect.promise(() =>
  Fs.readFile("/proc/sys/net/ipv4/ip_local_port_range", "utf8").then(
    (range) => Number(range.trim().split(/\s+/)[0]) || 32768,
    () => 32768
  )
)

const listensOn = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = Net.createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

/**
 * A port free right now, for a node's cluster runner (which must know its address before it listens).
 * Taken below the ephemeral range: a node restarted under the same address must find its port again, and
 * an outgoing connection of any process may take an ephemeral port the moment its listener dies.
 */
export const freePort = Effect.gen(function*() {
  const below = yield* ephemeralLow
  const low = Math.min(10_000, below - 1_000)
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low + Math.floor(Math.random() * (below - low))
    if (yield* Effect.promise(() => listensOn(port))) return port
  }
  return yield* Effect.die(new Error(`no free port between ${low} and ${below}`))
})

export const start = (options: Options): Effect.Effect<TestNode, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const { flags, script } = options.script === undefined
      ? yield* providedScript
      : { script: options.script, flags: options.flags ?? [] }
    const runnerAddress = options.env?.RUNNER_ADDRESS ?? `127.0.0.1:${yield* freePort}`
    const dataDir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-runtime-node-")))
    const operatorToken = options.operatorToken ?? `aro_${Crypto.randomBytes(32).toString("base64url")}`
    const child = ChildProcess.spawn(process.execPath, [...flags, script], {
      env: {
        ...process.env,
        PORT: "0",
        GATEWAY_PORT: "0",
        HOST: "127.0.0.1",
        DATABASE_URL: options.databaseUrl,
        DATA_DIR: dataDir,
        OPERATOR_TOKEN: operatorToken,
        LOG_LEVEL: "Info",
        ...options.env,
        RUNNER_ADDRESS: runnerAddress
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    const ready = yield* Deferred.make<Option.Option<RegExpMatchArray>>()
    const exited = yield* Deferred.make<Exit>()
    let started = false
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      // Only until ready: matching the whole output on every chunk of a long, chatty run costs the test process dearly.
      if (started) return
      const match = output.match(readyLine)
      if (match) {
        started = true
        Deferred.unsafeDone(ready, Effect.succeed(Option.some(match)))
      }
    }
    child.stdout!.on("data", onData)
    child.stderr!.on("data", onData)
    child.on("exit", (code, signal) => {
      Deferred.unsafeDone(exited, Effect.succeed({ code, signal }))
      Deferred.unsafeDone(ready, Effect.succeed(Option.none()))
    })
    const stop = (signal: NodeJS.Signals = "SIGTERM") =>
      Effect.suspend(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill(signal)
        return Deferred.await(exited)
      })
    yield* Effect.addFinalizer(() =>
      // A paused process would not hear SIGTERM.
      Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGCONT")).pipe(
        // Finalizers run uninterruptibly: without this the timeout could not cut the wait for a node that
        // does not exit on SIGTERM, and the test's scope would never close.
        Effect.andThen(Effect.interruptible(stop("SIGTERM"))),
        Effect.timeout("10 seconds"),
        Effect.catchAll(() => stop("SIGKILL")),
        Effect.andThen(Effect.promise(() => Fs.rm(dataDir, { recursive: true, force: true })))
      )
    )
    const match = yield* Deferred.await(ready).pipe(
      Effect.timeoutFail({
        duration: `${startSeconds} seconds`,
        onTimeout: () => new Error(`node did not start within ${startSeconds} s:\n${output}`)
      }),
      Effect.flatMap(Option.match({
        onNone: () => Effect.fail(new Error(`node exited before ready:\n${output}`)),
        onSome: Effect.succeed
      }))
    )
    return {
      rest: match[1]!,
      gateway: match[2]!,
      operatorToken,
      dataDir,
      process: child,
      output: () => output,
      runnerAddress,
      stop,
      exited: Deferred.await(exited),
      signal: (signal) =>
        Effect.sync(() => {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal)
        })
    }
  })
