/**
 * Whether this process can reach its PostgreSQL now. A node cut off from
 * its database cannot serve (every route reads or writes it), so readiness
 * reports it, event streams send their watchers elsewhere, and the API answers
 * 503 rather than 500. A cheap probe (`SELECT 1` with a short timeout) runs
 * every second; the state changes on the probe's answer only, so one query
 * refused for another reason (a session ended by `pg_terminate_backend`, say)
 * does not flip it. The logs say it once when the database goes away and once
 * when it is back, never a line per failed query. Until a probe has first been
 * answered (a node starting on a busy machine, a server still starting) a failed
 * probe is no outage: it says "waiting for the database" once, and "database
 * reachable" when the first answer comes.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Context, Duration, Effect, Exit, Layer, Queue, Runtime } from "effect"

export interface Status {
  /** Whether the last probe got an answer. */
  readonly reachable: boolean
  /** When the current state began (ms since the epoch): the start of an outage, or the recovery. */
  readonly since: number
}

export class DatabaseHealth extends Context.Tag("@agent-runtime/store/DatabaseHealth")<DatabaseHealth, {
  /** The state now; synchronous, for hot paths (`/readyz`, the gateway). */
  readonly current: () => Status
  /**
   * Tells it about a failure a real query met: a connection failure (see
   * `isUnreachable`) makes it probe at once instead of at the next tick, so
   * the state follows an outage within one probe. Anything else is ignored.
   */
  readonly observe: (failure: unknown) => void
  /**
   * Calls `listener` once, when the database next goes away (at once when it
   * is away now, like `Drain.onClose`); the result unregisters it. For event
   * streams: end the stream with `event: reconnect` so its watcher goes to a
   * node that can serve it.
   */
  readonly onLost: (listener: () => void) => () => void
  /** Completes when the database goes away (at once when it is away now): `onLost` as an Effect. */
  readonly lost: Effect.Effect<void>
}>() {}

export interface Options {
  /** Time between probes (default 1 s). */
  readonly interval?: Duration.DurationInput
  /** A probe not answered within this is a failure (default 2 s, the pool's connection timeout). */
  readonly timeout?: Duration.DurationInput
}

/** pg's SQLSTATE classes that mean the connection, not the statement, failed. */
const connectionSqlStates = new Set([
  "57P01", // admin_shutdown: the server is stopping, or the session was terminated
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: starting up or shutting down
  "53300" // too_many_connections: a connection cannot be had
])

/** Node's socket errors: the server is not there, or the path to it broke. */
const socketCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EAI_AGAIN"
])

/** What pg, pg-pool and `@effect/sql-pg` say when a connection ends or cannot be had (they set no code). */
const connectionMessages = [
  "Connection terminated",
  "timeout exceeded when trying to connect",
  "is not queryable",
  "Connection timed out",
  "Failed to acquire connection",
  "Connection error",
  "Failed to connect"
]

const isConnectionError = (error: object) => {
  const code = (error as { code?: unknown }).code
  if (typeof code === "string" && (socketCodes.has(code) || connectionSqlStates.has(code) || code.startsWith("08"))) {
    return true
  }
  const message = (error as { message?: unknown }).message
  return typeof message === "string" && connectionMessages.some((text) => message.includes(text))
}

/**
 * Whether `test` holds for an error at or under a `SqlError` in `failure`
 * (an error, a defect, a whole `Cause`, a `FiberFailure`), following `cause`
 * chains and `AggregateError`s.
 */
const someUnderSqlError = (failure: unknown, test: (error: object) => boolean): boolean => {
  const seen = new Set<unknown>()
  const visit = (value: unknown, depth: number, inSql: boolean): boolean => {
    if (value === null || typeof value !== "object" || depth > 8 || seen.has(value)) return false
    seen.add(value)
    if (Cause.isCause(value)) {
      return [...Cause.failures(value), ...Cause.defects(value)].some((inner) => visit(inner, depth + 1, inSql))
    }
    if (Runtime.isFiberFailure(value)) return visit(value[Runtime.FiberFailureCauseId], depth + 1, inSql)
    // A SqlError, or one decoded from another runner's reply (a defect keeps its name and message).
    const sql = inSql || (value as { _tag?: unknown })._tag === "SqlError" ||
      (value as { name?: unknown }).name === "SqlError"
    if (sql && test(value)) return true
    const errors = (value as { errors?: unknown }).errors
    if (Array.isArray(errors) && errors.some((inner) => visit(inner, depth + 1, sql))) return true
    return visit((value as { cause?: unknown }).cause, depth + 1, sql)
  }
  return visit(failure, 0, false)
}

/**
 * Whether a failure comes from not reaching the database: pg's connection
 * errors (SQLSTATE class 08, 57P01–57P03, 53300), refused or reset sockets,
 * the pool's connection timeout. The cause chain is followed, so a `SqlError`
 * wrapped in the cluster's `PersistenceError` (or a defect made of either)
 * counts. Only what lies at or under a `SqlError` counts: a model provider or
 * a tool URL refusing a connection is not the database.
 */
export const isUnreachable = (failure: unknown): boolean => someUnderSqlError(failure, isConnectionError)

/**
 * Whether the statement never reached the server: no connection could be had
 * (refused, reset while connecting, the pool's connect timeout). Such a write
 * can be tried again without running twice; a connection lost mid-statement
 * (also `isUnreachable`) leaves it unknown whether the statement ran.
 */
export const neverSent = (failure: unknown): boolean =>
  someUnderSqlError(failure, (error) => {
    const message = (error as { message?: unknown }).message
    return typeof message === "string" && message.startsWith("Failed to acquire connection")
  })

/**
 * SQLSTATE classes of a statement the server refused for what it says, not for how it was sent: the same
 * statement fails the same way each time it is tried. 22 data exception (a NUL in text, a value too long,
 * bad JSON), 23 integrity constraint violation, 42 syntax error or access rule violation, 54 program limit
 * exceeded (a row too large for an index).
 */
const permanentSqlStateClasses = new Set(["22", "23", "42", "54"])

/**
 * Whether a failure will repeat however often the statement is tried: PostgreSQL refused it for its data
 * (see `permanentSqlStateClasses`). Retrying such a write loops for ever; the caller must end what it was
 * doing with an error instead. Connection failures, serialization failures (40001), deadlocks (40P01),
 * cancelled statements (57014) and lock timeouts (55P03) are not permanent: they are worth trying again.
 */
export const isPermanent = (failure: unknown): boolean =>
  someUnderSqlError(failure, (error) => {
    const code = (error as { code?: unknown }).code
    return typeof code === "string" && code.length === 5 && permanentSqlStateClasses.has(code.slice(0, 2))
  })

/**
 * For a background task's failure: a warning with its cause, unless the
 * database is what is away (the outage is logged once, by the probe), so a
 * loop that runs every second does not log every second of an outage.
 */
export const warnUnlessUnreachable = (message: string) => (cause: Cause.Cause<unknown>): Effect.Effect<void> =>
  isUnreachable(cause) ? Effect.void : Effect.logWarning(message, cause)

/** A short account of why a probe failed, for the one log line of an outage. */
const reasonOf = (cause: Cause.Cause<unknown>) => {
  const failure = Cause.squash(cause)
  const inner = (failure as { cause?: unknown }).cause
  const text = (value: unknown) => value instanceof Error ? value.message : String(value)
  return inner === undefined ? text(failure) : `${text(failure)}: ${text(inner)}`
}

export const make = (options: Options = {}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const interval = Duration.decode(options.interval ?? Duration.seconds(1))
    const timeout = Duration.decode(options.timeout ?? Duration.seconds(2))
    let status: Status = { reachable: true, since: Date.now() }
    /** Whether a probe was ever answered: before that, the node is waiting for its database, not losing it. */
    let answered = false
    const listeners = new Set<() => void>()
    const wake = yield* Queue.sliding<void>(1)

    const notify = (listener: () => void) => {
      try {
        listener()
      } catch {
        // A listener's own failure is its business; the others still hear.
      }
    }

    // Not waiting for the interrupted query to be cancelled: with the server gone, that waits too.
    const probe = sql`SELECT 1`.pipe(
      Effect.disconnect,
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => new Error(`no answer within ${Duration.format(timeout)}`)
      })
    )

    const settle = (exit: Exit.Exit<unknown, unknown>) =>
      Effect.suspend(() => {
        const reachable = Exit.isSuccess(exit)
        const first = reachable && !answered
        if (reachable) answered = true
        if (reachable === status.reachable) return Effect.void
        const before = status
        status = { reachable, since: Date.now() }
        if (Exit.isFailure(exit)) {
          const told = [...listeners]
          listeners.clear()
          for (const listener of told) notify(listener)
          if (!answered) {
            return Effect.logInfo("waiting for the database").pipe(
              Effect.annotateLogs({ reason: reasonOf(exit.cause) })
            )
          }
          return Effect.logWarning("database unreachable: requests that need it answer 503 until it is back").pipe(
            Effect.annotateLogs({ reason: reasonOf(exit.cause), listeners: told.length })
          )
        }
        return Effect.logInfo(first ? "database reachable" : "database reachable again").pipe(
          Effect.annotateLogs(
            first ? { waitedMs: status.since - before.since } : { downMs: status.since - before.since }
          )
        )
      })

    yield* probe.pipe(
      Effect.exit,
      Effect.flatMap(settle),
      Effect.zipRight(Effect.raceFirst(Effect.sleep(interval), Queue.take(wake))),
      Effect.forever,
      Effect.forkScoped
    )

    const onLost = (listener: () => void) => {
      if (!status.reachable) {
        notify(listener)
        return () => {}
      }
      listeners.add(listener)
      return () => {
        listeners.delete(listener)
      }
    }

    return DatabaseHealth.of({
      current: () => status,
      observe: (failure) => {
        if (isUnreachable(failure)) Queue.unsafeOffer(wake, undefined)
      },
      onLost,
      lost: Effect.async<void>((resume) => {
        const off = onLost(() => resume(Effect.void))
        return Effect.sync(off)
      })
    })
  })

/** Probes every second with a 2 s timeout. */
export const layer: Layer.Layer<DatabaseHealth, never, SqlClient.SqlClient> = Layer.scoped(DatabaseHealth, make())

export const layerWith = (options: Options): Layer.Layer<DatabaseHealth, never, SqlClient.SqlClient> =>
  Layer.scoped(DatabaseHealth, make(options))
