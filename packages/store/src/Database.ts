/**
 * The PostgreSQL connection: the server at `DATABASE_URL`, or an embedded one
 * under `DATA_DIR` when none is given. Both go through `@effect/sql-pg`, and
 * the migrations the app names (each package's, in dependency order) are
 * applied before the layer is ready.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import type { MigrationError } from "@effect/sql/Migrator"
import { SqlError } from "@effect/sql/SqlError"
import { Config, type ConfigError, Duration, Effect, Layer, Option, Redacted, String } from "effect"
import Pg from "pg"
import * as EmbeddedPostgres from "./EmbeddedPostgres.ts"
import { PreparingClient } from "./internal/preparingClient.ts"
import * as Migrations from "./Migrations.ts"

export interface Options {
  /** An external server; when absent an embedded one runs under `dataDir`. */
  readonly url: Option.Option<Redacted.Redacted<string>>
  readonly dataDir: string
  readonly maxConnections?: number
  /** Names every session of this process in pg_stat_activity (nodes of a cluster name themselves apart). */
  readonly applicationName?: string
  /** The packages' schemas, applied in this order under the startup lock before the layer is ready. */
  readonly migrations?: ReadonlyArray<Migrations.Migrations>
  /**
   * Whether statements are prepared on each connection (parsed once, their plans kept); on unless a pooler
   * in front of the server cannot keep them (PgBouncer in transaction mode before 1.21).
   */
  readonly preparedStatements?: boolean
}

/** Any number, the same in every process: it names the lock nodes take while they change the schema. */
const startupLockKey = 7_424_201

/**
 * Runs `effect` while holding a session advisory lock that every starting
 * node takes, so nodes started together change the schema one at a time
 * (the cluster library's own table creation is not safe to race).
 */
export const withStartupLock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.scoped(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const connection = yield* sql.reserve
      yield* connection.executeRaw(`SELECT pg_advisory_lock(${startupLockKey})`, [])
      yield* Effect.addFinalizer(() =>
        Effect.ignore(connection.executeRaw(`SELECT pg_advisory_unlock(${startupLockKey})`, []))
      )
      return yield* effect
    })
  )

/**
 * How long a query waits for a connection (a new one, or a free one from the
 * pool) before it fails. Without it a query waits as long as the server does
 * not answer; with it, a node cut off from its database answers 503 within a
 * bounded time (`DatabaseHealth.isUnreachable` knows pg-pool's timeout errors).
 */
export const connectTimeout = Duration.seconds(2)

/** The connections: `pg`'s pool, its clients preparing their statements unless told not to. */
const pool = (url: Redacted.Redacted<string>, options: Omit<Options, "url" | "dataDir">) =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const pool = new Pg.Pool({
        connectionString: Redacted.value(url),
        max: options.maxConnections ?? 20,
        connectionTimeoutMillis: Duration.toMillis(connectTimeout),
        application_name: options.applicationName ?? "agent-runtime",
        ...(options.preparedStatements === false ? {} : { Client: PreparingClient })
      })
      // A session's failure reaches the statement on it; the pool's own report of it would crash the process.
      pool.on("error", () => {})
      yield* Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(
        Effect.timeoutFail({
          duration: connectTimeout,
          onTimeout: () =>
            new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
        }),
        Effect.tapError(() => Effect.promise(() => pool.end()))
      )
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
  )

/**
 * A name transform worked out once per name: every row of every result has its column names transformed,
 * and a node uses a few hundred names. Bounded, should a statement name columns without end.
 */
const memoized = (transform: (name: string) => string) => {
  const known = new Map<string, string>()
  return (name: string) => {
    let transformed = known.get(name)
    if (transformed === undefined) {
      if (known.size >= 10_000) known.clear()
      transformed = transform(name)
      known.set(name, transformed)
    }
    return transformed
  }
}

/** A client on `url`, with `options.migrations` applied. */
export const layerClient = (
  url: Redacted.Redacted<string>,
  options: Omit<Options, "url" | "dataDir"> = {}
): Layer.Layer<SqlClient.SqlClient | PgClient.PgClient, MigrationError | SqlError> =>
  Layer.effectDiscard(withStartupLock(Migrations.run(...options.migrations ?? []))).pipe(
    Layer.provideMerge(PgClient.layerFromPool({
      acquire: pool(url, options),
      applicationName: options.applicationName ?? "agent-runtime",
      transformQueryNames: memoized(String.camelToSnake),
      transformResultNames: memoized(String.snakeToCamel),
      // Column names only. By default the transform also renames every key inside jsonb values, which holds
      // tenants' and models' own data (context, metadata, tool arguments): `order_id` came back as `orderId`,
      // and a key ending in `_` threw inside the row transform, so an agent holding one could never load again.
      transformJson: false
    }))
  )

export const layer = (
  options: Options
): Layer.Layer<
  SqlClient.SqlClient | PgClient.PgClient,
  EmbeddedPostgres.EmbeddedPostgresError | MigrationError | SqlError
> =>
  Option.match(options.url, {
    onSome: (url) => layerClient(url, options),
    onNone: () =>
      Layer.unwrapScoped(
        Effect.gen(function*() {
          const server = yield* EmbeddedPostgres.start({ dataDir: options.dataDir })
          yield* Effect.logInfo("embedded postgres ready").pipe(Effect.annotateLogs("port", server.port))
          return layerClient(server.url, options)
        })
      )
  })

/** DATABASE_URL, or an embedded server under DATA_DIR. */
export const layerConfig = (
  options: Omit<Options, "url" | "dataDir"> = {}
): Layer.Layer<
  SqlClient.SqlClient | PgClient.PgClient,
  EmbeddedPostgres.EmbeddedPostgresError | MigrationError | SqlError | ConfigError.ConfigError
> =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const url = yield* Config.option(Config.redacted("DATABASE_URL"))
      const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./.data"))
      const preparedStatements = yield* Config.boolean("DATABASE_PREPARED_STATEMENTS").pipe(Config.withDefault(true))
      return layer({ ...options, url, dataDir, preparedStatements })
    })
  )
