/**
 * Sends the outbox's events to their endpoints, per Standard Webhooks, at
 * least once, from every node.
 *
 * - Each endpoint is served by one node at a time: the node that holds its
 *   lease (a row lock would not outlive a crash; a lease does, and runs out).
 *   So no event goes to an endpoint twice at once, and a slow or dead endpoint
 *   only ever holds up its own queue: every endpoint has its own fiber.
 * - A 2xx within the timeout counts. Anything else (a timeout, a 3xx, since
 *   redirects are never followed, a 4xx or 5xx, an address the egress rules
 *   refuse) is tried again with exponential backoff and jitter, from 5
 *   seconds up to an hour apart, for 3 days from the event; then the delivery
 *   is failed. Every try keeps the event's id.
 * - A node that dies mid-send leaves the delivery pending under a lease that
 *   runs out; the next node sends it again, under the same id.
 */
import { ApiError, Webhook } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { DatabaseHealth, Ids, PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import {
  Clock,
  Config,
  type ConfigError,
  Context,
  Duration,
  Effect,
  Either,
  Layer,
  Option,
  Queue,
  Redacted,
  Schedule,
  Stream
} from "effect"
import { Webhook as Signer } from "standardwebhooks"
import { sealingContext } from "./WebhookEndpoints.ts"
import { deliveriesChannel } from "./WebhookMigrations.ts"

export interface Options {
  /** How long a receiver has to answer. Default 10 seconds. */
  readonly timeout?: Duration.DurationInput
  /** The first retry's delay, doubling from there. Default 5 seconds. */
  readonly firstRetry?: Duration.DurationInput
  /** The longest delay between tries. Default 1 hour. */
  readonly maxRetry?: Duration.DurationInput
  /** How long after the event tries go on. Default 3 days. */
  readonly retryFor?: Duration.DurationInput
  /** How long a node's hold on an endpoint lasts unrenewed: how soon a crashed node's sends are taken over. */
  readonly lease?: Duration.DurationInput
  /** How often a node looks for due deliveries besides being told of new ones. Default 1 second. */
  readonly poll?: Duration.DurationInput
  /** Names this node in the leases it holds (its runner address, say), before a part unique to the process. */
  readonly holder?: string
}

export class WebhookDelivery extends Context.Tag("@agent-runtime/webhooks/WebhookDelivery")<WebhookDelivery, {
  /** The endpoint's latest attempts, newest first. */
  readonly attempts: (
    endpointId: string,
    limit: number
  ) => Effect.Effect<ReadonlyArray<Webhook.WebhookAttempt>, PersistenceError.PersistenceError>
  /** The endpoint's latest deliveries, newest event first. */
  readonly deliveries: (
    endpointId: string,
    options: { readonly state?: Webhook.DeliveryState | undefined; readonly limit: number }
  ) => Effect.Effect<ReadonlyArray<Webhook.WebhookDelivery>, PersistenceError.PersistenceError>
  /** Sends an event to the endpoint again from now, with a fresh retry window. */
  readonly resend: (
    endpointId: string,
    eventId: string
  ) => Effect.Effect<Webhook.Resent, ApiError.NotFound | PersistenceError.PersistenceError>
}>() {}

/** How many due deliveries of one endpoint a node takes at a time, and sends at once. */
const batchSize = 32
const perEndpoint = 8
/** How many endpoints one node serves at once. */
const maxEndpoints = 256
/** How long attempts and settled deliveries are kept for the views and re-sends. */
const retentionDays = 30

/** `v1,<base64>` for the current secret, and for the previous one while it still signs, space-separated. */
export const signature = (
  secrets: ReadonlyArray<string>,
  eventId: string,
  timestamp: Date,
  body: string
): string => secrets.map((secret) => new Signer(secret).sign(eventId, timestamp, body)).join(" ")

/** The delay before try `failures + 1`: doubling from `first`, at most `max`, within a fifth either way. */
export const backoff = (failures: number, first: Duration.Duration, max: Duration.Duration, random: number) => {
  const doubled = Duration.toMillis(first) * 2 ** Math.min(failures - 1, 30)
  const jittered = doubled * (0.8 + 0.4 * random)
  return Math.min(Math.max(jittered, Duration.toMillis(first)), Duration.toMillis(max))
}

interface Due {
  readonly eventId: string
  /** Tries made so far. */
  readonly attempts: number
  readonly type: string
  readonly created: number
  readonly data: unknown
}

interface Outcome {
  readonly delivered: boolean
  readonly status: number | null
  readonly error: string | null
  readonly latencyMs: number
}

export const make = (options: Options) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const egress = yield* Egress.Egress
    const sealer = yield* SealedSecret.Sealer
    const timeout = Duration.decode(options.timeout ?? "10 seconds")
    const firstRetry = Duration.decode(options.firstRetry ?? "5 seconds")
    const maxRetry = Duration.decode(options.maxRetry ?? "1 hour")
    const retryFor = Duration.toSeconds(options.retryFor ?? "3 days")
    const leaseSeconds = Duration.toSeconds(options.lease ?? "30 seconds")
    /** This process, as the holder of leases: a restarted node is another holder. */
    const node = `${options.holder ?? "node"}/${Ids.make("holder")}`

    /** Takes endpoints with due deliveries that no node holds, up to `limit`, besides those served here. */
    const claim = (limit: number, serving: ReadonlyArray<string>) =>
      sql<{ id: string }>`UPDATE webhook_endpoints e SET lease_owner = ${node},
          lease_until = now() + make_interval(secs => ${leaseSeconds})
        WHERE e.id IN (SELECT DISTINCT d.endpoint_id FROM webhook_deliveries d
            WHERE d.state = 'pending' AND d.next_at <= now()
            ${serving.length === 0 ? sql`` : sql`AND d.endpoint_id NOT IN ${sql.in(serving)}`}
            LIMIT ${limit})
          AND (e.lease_until IS NULL OR e.lease_until < now() OR e.lease_owner = ${node})
        RETURNING e.id`.pipe(Effect.map((rows) => rows.map((row) => row.id)))

    const renew = (endpointId: string) =>
      sql`UPDATE webhook_endpoints SET lease_until = now() + make_interval(secs => ${leaseSeconds})
        WHERE id = ${endpointId} AND lease_owner = ${node} RETURNING 1`.pipe(Effect.map((rows) => rows.length > 0))

    const release = (endpointId: string) =>
      sql`UPDATE webhook_endpoints SET lease_owner = NULL, lease_until = NULL
        WHERE id = ${endpointId} AND lease_owner = ${node}`

    /** The endpoint's url and the secrets that sign now (the previous one too while it overlaps). */
    const target = (endpointId: string) =>
      Effect.gen(function*() {
        const [row] = yield* sql<{
          url: string
          sealedSecret: string
          sealedPreviousSecret: string | null
          previousUntil: number | null
        }>`SELECT url, sealed_secret, sealed_previous_secret,
            extract(epoch from previous_until)::float8 AS previous_until
          FROM webhook_endpoints WHERE id = ${endpointId} AND lease_owner = ${node}`
        if (row === undefined) return undefined
        const now = yield* Clock.currentTimeMillis
        const open = (sealed: string) => Effect.map(sealer.open(sealed, sealingContext(endpointId)), Redacted.value)
        const secrets = [yield* open(row.sealedSecret)]
        if (row.sealedPreviousSecret !== null && row.previousUntil !== null && now < row.previousUntil * 1000) {
          secrets.push(yield* open(row.sealedPreviousSecret))
        }
        return { url: row.url, secrets }
      })

    const due = (endpointId: string) =>
      sql<Due>`SELECT d.event_id, d.attempts, e.type, e.created, e.data FROM webhook_deliveries d
          JOIN webhook_events e ON e.id = d.event_id
        WHERE d.endpoint_id = ${endpointId} AND d.state = 'pending' AND d.next_at <= now()
        ORDER BY e.created LIMIT ${batchSize}`

    /** One POST: what came back, or why nothing that counts did. */
    const post = (url: string, secrets: ReadonlyArray<string>, event: Due) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const timestamp = new Date(Math.floor(now / 1000) * 1000)
        const body = JSON.stringify({ id: event.eventId, type: event.type, created: event.created, data: event.data })
        const started = performance.now()
        const answer = yield* egress.fetch(url, {
          method: "POST",
          body,
          headers: {
            "content-type": "application/json",
            "user-agent": "agent-runtime-webhooks/1",
            "webhook-id": event.eventId,
            "webhook-timestamp": String(timestamp.getTime() / 1000),
            "webhook-signature": signature(secrets, event.eventId, timestamp, body)
          }
        }).pipe(
          // The body is not read: the status is the answer. Dropping it frees the connection.
          Effect.tap((response) => Effect.promise(() => response.body?.cancel() ?? Promise.resolve())),
          Effect.map((response) => response.status),
          Effect.timeoutFail({
            duration: timeout,
            onTimeout: () => `no answer within ${Duration.format(timeout)}`
          }),
          Effect.either
        )
        const latencyMs = Math.round(performance.now() - started)
        return Either.match(answer, {
          onLeft: (error): Outcome => ({
            delivered: false,
            status: null,
            error: typeof error === "string" ? error : error.message,
            latencyMs
          }),
          onRight: (status): Outcome => ({
            delivered: status >= 200 && status < 300,
            status,
            error: status >= 200 && status < 300
              ? null
              : status >= 300 && status < 400
              ? `HTTP ${status}: redirects are not followed`
              : `HTTP ${status}`,
            latencyMs
          })
        })
      })

    /**
     * Records a try and what comes next, only while this node still holds the endpoint: a node that lost its
     * lease leaves the delivery to the one that took it.
     */
    const record = (endpointId: string, event: Due, outcome: Outcome) =>
      Effect.gen(function*() {
        const at = (yield* Clock.currentTimeMillis) / 1000
        const delay = backoff(event.attempts + 1, firstRetry, maxRetry, Math.random()) / 1000
        yield* sql`WITH d AS (
            UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = ${outcome.status},
              last_error = ${outcome.error}, updated_at = now(), next_at = now() + make_interval(secs => ${delay}),
              state = CASE WHEN ${outcome.delivered} THEN 'delivered'
                WHEN now() + make_interval(secs => ${delay}) > first_at + make_interval(secs => ${retryFor})
                  THEN 'failed'
                ELSE 'pending' END
            WHERE endpoint_id = ${endpointId} AND event_id = ${event.eventId} AND state = 'pending'
              AND EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = ${endpointId} AND lease_owner = ${node})
            RETURNING attempts, state, next_at)
          INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, at, status, latency_ms, error, outcome, next_at)
          SELECT ${endpointId}, ${event.eventId}, d.attempts, to_timestamp(${at}), ${outcome.status},
            ${outcome.latencyMs}, ${outcome.error}, CASE d.state WHEN 'pending' THEN 'retrying' ELSE d.state END,
            CASE d.state WHEN 'pending' THEN d.next_at END
          FROM d`
      })

    /** Serves one endpoint while it has due deliveries and this node holds it. */
    const serve = (endpointId: string) =>
      Effect.gen(function*() {
        while (true) {
          const endpoint = yield* target(endpointId)
          if (endpoint === undefined) return
          const events = yield* due(endpointId)
          if (events.length === 0) return
          yield* Effect.forEach(
            events,
            (event) =>
              Effect.flatMap(post(endpoint.url, endpoint.secrets, event), (outcome) =>
                record(endpointId, event, outcome)),
            { concurrency: perEndpoint, discard: true }
          )
          if (!(yield* renew(endpointId))) {
            return
          }
        }
      }).pipe(
        Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("serving a webhook endpoint failed")),
        Effect.ensuring(Effect.ignore(release(endpointId)))
      )

    const attempts = (endpointId: string, limit: number) =>
      sql<{
        eventId: string
        type: string
        attempt: number
        at: number
        status: number | null
        latencyMs: number
        error: string | null
        outcome: "delivered" | "retrying" | "failed"
        nextAt: number | null
      }>`SELECT a.event_id, e.type, a.attempt, extract(epoch from a.at)::float8 AS at, a.status, a.latency_ms,
          a.error, a.outcome, floor(extract(epoch from a.next_at))::float8 AS next_at
        FROM webhook_attempts a JOIN webhook_events e ON e.id = a.event_id
        WHERE a.endpoint_id = ${endpointId} ORDER BY a.id DESC LIMIT ${limit}`.pipe(
        Effect.map((rows) =>
          rows.map((row) =>
            new Webhook.WebhookAttempt({
              eventId: row.eventId,
              type: row.type,
              attempt: row.attempt,
              at: row.at,
              status: row.status,
              latencyMs: row.latencyMs,
              ...(row.error === null ? {} : { error: row.error }),
              outcome: row.outcome,
              ...(row.nextAt === null ? {} : { nextAt: row.nextAt })
            })
          )
        ),
        PersistenceError.PersistenceError.refail
      )

    const deliveries = (
      endpointId: string,
      options: { readonly state?: Webhook.DeliveryState | undefined; readonly limit: number }
    ) =>
      sql<{
        eventId: string
        type: string
        created: number
        state: Webhook.DeliveryState
        attempts: number
        nextAt: number
        lastStatus: number | null
        lastError: string | null
      }>`SELECT d.event_id, e.type, e.created, d.state, d.attempts,
          floor(extract(epoch from d.next_at))::float8 AS next_at, d.last_status, d.last_error
        FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
        WHERE d.endpoint_id = ${endpointId} ${options.state === undefined ? sql`` : sql`AND d.state = ${options.state}`}
        ORDER BY e.created DESC LIMIT ${options.limit}`.pipe(
        Effect.map((rows) =>
          rows.map((row) =>
            new Webhook.WebhookDelivery({ ...row, nextAt: row.state === "pending" ? row.nextAt : null })
          )
        ),
        PersistenceError.PersistenceError.refail
      )

    const resend = (endpointId: string, eventId: string) =>
      sql<{ nextAt: number }>`UPDATE webhook_deliveries SET state = 'pending', attempts = 0, first_at = now(),
          next_at = now(), updated_at = now()
        WHERE endpoint_id = ${endpointId} AND event_id = ${eventId}
        RETURNING extract(epoch from next_at)::float8 AS next_at`.pipe(
        Effect.tap((rows) =>
          rows.length === 0 ? Effect.void : sql`SELECT pg_notify(${deliveriesChannel}, ${endpointId})`
        ),
        PersistenceError.PersistenceError.refail,
        Effect.flatMap(([row]) =>
          row === undefined
            ? Effect.fail(new ApiError.NotFound({ error: `no event ${eventId} for webhook endpoint ${endpointId}` }))
            : Effect.succeed(new Webhook.Resent({ eventId, endpointId, nextAt: row.nextAt }))
        )
      )

    const prune = sql`WITH attempts AS (
        DELETE FROM webhook_attempts WHERE at < now() - make_interval(days => ${retentionDays})),
      deliveries AS (
        DELETE FROM webhook_deliveries WHERE state <> 'pending'
          AND updated_at < now() - make_interval(days => ${retentionDays}))
      DELETE FROM webhook_events e WHERE e.created < extract(epoch from now() - make_interval(days => ${retentionDays}))
        AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.state = 'pending')`

    return {
      service: WebhookDelivery.of({ attempts, deliveries, resend }),
      claim,
      serve,
      node,
      prune,
      poll: Duration.decode(options.poll ?? "1 second")
    }
  })

/**
 * The views and re-sends, and this node's senders: woken by the outbox's
 * notifications and by a poll, each claimed endpoint served on its own
 * fiber; the leases still held are let go when the node stops.
 */
export const layer = (
  options: Options = {}
): Layer.Layer<
  WebhookDelivery,
  never,
  SqlClient.SqlClient | PgClient.PgClient | DatabaseHealth.DatabaseHealth | SealedSecret.Sealer | Egress.Egress
> =>
  Layer.scoped(
    WebhookDelivery,
    Effect.gen(function*() {
      const delivery = yield* make(options)
      const sql = yield* PgClient.PgClient
      const health = yield* DatabaseHealth.DatabaseHealth
      const serving = new Set<string>()
      const wake = yield* Queue.sliding<void>(1)

      const claimRound = Effect.gen(function*() {
        const room = maxEndpoints - serving.size
        if (room <= 0) return
        for (const endpointId of yield* delivery.claim(room, [...serving])) {
          serving.add(endpointId)
          yield* delivery.serve(endpointId).pipe(
            Effect.ensuring(Effect.sync(() => serving.delete(endpointId))),
            Effect.zipRight(Queue.offer(wake, void 0)),
            Effect.forkScoped
          )
        }
      }).pipe(Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("claiming webhook endpoints failed")))

      yield* Queue.take(wake).pipe(Effect.zipRight(claimRound), Effect.forever, Effect.forkScoped)
      yield* Queue.offer(wake, void 0).pipe(Effect.repeat(Schedule.spaced(delivery.poll)), Effect.forkScoped)
      yield* sql.listen(deliveriesChannel).pipe(
        Stream.runForEach(() => Queue.offer(wake, void 0)),
        // A listener whose connection died hears nothing more: it listens anew once the database is back.
        Effect.raceFirst(health.lost),
        Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("listening for webhook deliveries failed")),
        Effect.zipRight(Effect.sleep(Duration.seconds(1))),
        Effect.forever,
        Effect.forkScoped
      )
      yield* delivery.prune.pipe(
        Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("pruning webhook deliveries failed")),
        Effect.repeat(Schedule.spaced(Duration.hours(1))),
        Effect.forkScoped
      )
      return delivery.service
    })
  )

const seconds = (name: string) => Config.option(Config.number(name)).pipe(Config.map(Option.getOrUndefined))

/**
 * `layer` with its timings from the environment, each in seconds (see
 * docs/webhooks.md): WEBHOOK_TIMEOUT_SECONDS, WEBHOOK_FIRST_RETRY_SECONDS,
 * WEBHOOK_MAX_RETRY_SECONDS, WEBHOOK_RETRY_FOR_SECONDS, WEBHOOK_LEASE_SECONDS.
 */
export const layerConfig = (
  options: Pick<Options, "holder"> = {}
): Layer.Layer<
  WebhookDelivery,
  ConfigError.ConfigError,
  SqlClient.SqlClient | PgClient.PgClient | DatabaseHealth.DatabaseHealth | SealedSecret.Sealer | Egress.Egress
> =>
  Layer.unwrapEffect(Effect.map(
    Config.all({
      timeout: seconds("WEBHOOK_TIMEOUT_SECONDS"),
      firstRetry: seconds("WEBHOOK_FIRST_RETRY_SECONDS"),
      maxRetry: seconds("WEBHOOK_MAX_RETRY_SECONDS"),
      retryFor: seconds("WEBHOOK_RETRY_FOR_SECONDS"),
      lease: seconds("WEBHOOK_LEASE_SECONDS")
    }),
    (config) =>
      layer({
        ...options,
        ...Object.fromEntries(
          Object.entries(config).flatMap(([name, value]) =>
            value === undefined ? [] : [[name, Duration.seconds(value)]]
          )
        )
      })
  ))
