/**
 * The endpoints a tenant registers for its events, and its one usage
 * webhook: urls checked by the egress rules when saved (and again at every
 * send), signing secrets sealed at rest and shown once, and rotation with
 * a day in which the old secret signs beside the new one.
 */
import { ApiError, Common, Webhook } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { Ids, PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Layer } from "effect"
import * as Crypto from "node:crypto"

/** How long a replaced secret keeps signing beside the new one. */
export const rotationOverlap = Duration.hours(24)

export class WebhookEndpoints extends Context.Tag("@agent-runtime/webhooks/WebhookEndpoints")<WebhookEndpoints, {
  /** Registers an endpoint; its secret is in this answer only. At most 16 per tenant (409 beyond). */
  readonly create: (
    tenantId: string,
    input: Webhook.WebhookEndpointInput
  ) => Effect.Effect<
    Webhook.WebhookEndpointCreated,
    ApiError.InvalidRequest | ApiError.Conflict | PersistenceError.PersistenceError
  >
  readonly list: (
    tenantId: string
  ) => Effect.Effect<ReadonlyArray<Webhook.WebhookEndpoint>, PersistenceError.PersistenceError>
  readonly get: (
    tenantId: string,
    id: string
  ) => Effect.Effect<Webhook.WebhookEndpoint, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly update: (
    tenantId: string,
    id: string,
    input: Webhook.WebhookEndpointUpdate
  ) => Effect.Effect<
    Webhook.WebhookEndpoint,
    ApiError.InvalidRequest | ApiError.NotFound | PersistenceError.PersistenceError
  >
  /** Removes the endpoint with its deliveries not yet made. */
  readonly remove: (
    tenantId: string,
    id: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** A new secret; the old one signs beside it for `rotationOverlap`. */
  readonly rotateSecret: (
    tenantId: string,
    id: string
  ) => Effect.Effect<Webhook.WebhookSecret, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly usage: (
    tenantId: string
  ) => Effect.Effect<Webhook.UsageWebhook, ApiError.NotFound | PersistenceError.PersistenceError>
  /**
   * Sets the usage webhook's url, with a new secret shown in this answer only; when it already existed, its
   * old secret signs beside the new one for `rotationOverlap` and its queued events go to the new url.
   */
  readonly putUsage: (
    tenantId: string,
    input: Webhook.UsageWebhookInput
  ) => Effect.Effect<Webhook.UsageWebhookCreated, ApiError.InvalidRequest | PersistenceError.PersistenceError>
  readonly removeUsage: (
    tenantId: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  readonly rotateUsageSecret: (
    tenantId: string
  ) => Effect.Effect<Webhook.WebhookSecret, ApiError.NotFound | PersistenceError.PersistenceError>
  /** Whether the endpoint (of either kind) is the tenant's: the attempts and deliveries views ask. */
  readonly owns: (tenantId: string, id: string) => Effect.Effect<boolean, PersistenceError.PersistenceError>
}>() {}

/** A Standard Webhooks secret: 32 random bytes, base64, after the whsec_ prefix. */
const newSecret = () => `whsec_${Crypto.randomBytes(32).toString("base64")}`

/** What a secret is sealed to: its endpoint, so a sealed secret copied to another row does not open. */
export const sealingContext = (endpointId: string) => `webhook-secret:${endpointId}`

interface Row {
  readonly id: string
  readonly url: string
  readonly events: ReadonlyArray<Webhook.WebhookEventType>
  readonly description: string | null
  readonly createdAt: number
}

const columns = `id, url, events, description, floor(extract(epoch from created_at))::float8 AS created_at`

const toEndpoint = (row: Row) =>
  new Webhook.WebhookEndpoint({
    id: row.id,
    url: row.url,
    events: row.events,
    ...(row.description === null ? {} : { description: row.description }),
    createdAt: row.createdAt
  })

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const egress = yield* Egress.Egress
  const sealer = yield* SealedSecret.Sealer
  const fields = sql.unsafe(columns)

  const checkUrl = (url: string) =>
    egress.check(url).pipe(
      Effect.mapError((error) => new ApiError.InvalidRequest({ error: `invalid request: url: ${error.message}` }))
    )
  const notFound = (id: string) => new ApiError.NotFound({ error: `no webhook endpoint ${id}` })
  /** Duplicates in `events` say nothing more; they are kept once, in the order given. */
  const eventsOf = (events: ReadonlyArray<Webhook.WebhookEventType>) => `{${[...new Set(events)].join(",")}}`

  const create = (tenantId: string, input: Webhook.WebhookEndpointInput) =>
    Effect.gen(function*() {
      yield* checkUrl(input.url)
      const id = Ids.make("we")
      const secret = newSecret()
      // One creation at a time per tenant, so two at once cannot both take the 16th place.
      yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`webhooks:${tenantId}`}))`
      const [count] = yield* sql<{ count: number }>`SELECT count(*)::int AS count FROM webhook_endpoints
        WHERE tenant_id = ${tenantId} AND kind = 'endpoint'`
      if ((count?.count ?? 0) >= Webhook.maxWebhookEndpoints) {
        return yield* new ApiError.Conflict({
          error: `a tenant has at most ${Webhook.maxWebhookEndpoints} webhook endpoints; remove one first`
        })
      }
      const [row] = yield* sql<Row>`INSERT INTO webhook_endpoints
          (id, tenant_id, kind, url, events, description, sealed_secret)
        VALUES (${id}, ${tenantId}, 'endpoint', ${input.url}, ${eventsOf(input.events)}::text[],
          ${input.description ?? null}, ${sealer.seal(secret, sealingContext(id))})
        RETURNING ${fields}`
      return new Webhook.WebhookEndpointCreated({ ...toEndpoint(row!), secret })
    }).pipe(
      sql.withTransaction,
      Effect.catchTag("SqlError", (cause) => new PersistenceError.PersistenceError({ cause }))
    )

  const list = (tenantId: string) =>
    sql<Row>`SELECT ${fields} FROM webhook_endpoints WHERE tenant_id = ${tenantId} AND kind = 'endpoint'
      ORDER BY webhook_endpoints.created_at, id`.pipe(
      Effect.map((rows) => rows.map(toEndpoint)),
      PersistenceError.PersistenceError.refail
    )

  const get = (tenantId: string, id: string) =>
    sql<Row>`SELECT ${fields} FROM webhook_endpoints
      WHERE tenant_id = ${tenantId} AND id = ${id} AND kind = 'endpoint'`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap(([row]) => row === undefined ? Effect.fail(notFound(id)) : Effect.succeed(toEndpoint(row)))
    )

  const update = (tenantId: string, id: string, input: Webhook.WebhookEndpointUpdate) =>
    Effect.gen(function*() {
      if (input.url !== undefined) yield* checkUrl(input.url)
      const [row] = yield* sql<Row>`UPDATE webhook_endpoints SET
          url = coalesce(${input.url ?? null}, url),
          events = coalesce(${input.events === undefined ? null : eventsOf(input.events)}::text[], events),
          description = ${input.description === undefined ? sql`description` : sql`${input.description}`}
        WHERE tenant_id = ${tenantId} AND id = ${id} AND kind = 'endpoint'
        RETURNING ${fields}`.pipe(PersistenceError.PersistenceError.refail)
      return row === undefined ? yield* notFound(id) : toEndpoint(row)
    })

  const removeWhere = (tenantId: string, id: string | undefined, kind: "endpoint" | "usage") =>
    sql<{ id: string }>`DELETE FROM webhook_endpoints
      WHERE tenant_id = ${tenantId} AND kind = ${kind} ${id === undefined ? sql`` : sql`AND id = ${id}`}
      RETURNING id`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap((rows) =>
        Common.deleted(rows[0]?.id ?? id ?? "", id === undefined ? "no usage webhook" : `no webhook endpoint ${id}`)(
          rows
        )
      )
    )

  /** Replaces the secret of the tenant's endpoint (by id, or its usage webhook); the old signs a day more. */
  const rotate = (tenantId: string, id: string | undefined, kind: "endpoint" | "usage", url?: string) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const until = (now + Duration.toMillis(rotationOverlap)) / 1000
      const secret = newSecret()
      const [row] = yield* sql<{ id: string }>`SELECT id FROM webhook_endpoints
        WHERE tenant_id = ${tenantId} AND kind = ${kind} ${id === undefined ? sql`` : sql`AND id = ${id}`}
        FOR UPDATE`
      if (row === undefined) return undefined
      yield* sql`UPDATE webhook_endpoints SET sealed_previous_secret = sealed_secret,
          previous_until = to_timestamp(${until}), sealed_secret = ${sealer.seal(secret, sealingContext(row.id))},
          url = coalesce(${url ?? null}, url)
        WHERE id = ${row.id}`
      return new Webhook.WebhookSecret({ secret })
    }).pipe(sql.withTransaction, PersistenceError.PersistenceError.refail)

  const rotateSecret = (tenantId: string, id: string) =>
    Effect.flatMap(
      rotate(tenantId, id, "endpoint"),
      (secret) => secret === undefined ? Effect.fail(notFound(id)) : Effect.succeed(secret)
    )

  const usageRow = (tenantId: string) =>
    sql<Row>`SELECT ${fields} FROM webhook_endpoints WHERE tenant_id = ${tenantId} AND kind = 'usage'`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.map(([row]) => row)
    )
  const toUsage = (row: Row) => new Webhook.UsageWebhook({ id: row.id, url: row.url, createdAt: row.createdAt })

  const usage = (tenantId: string) =>
    Effect.flatMap(
      usageRow(tenantId),
      (row) =>
        row === undefined
          ? Effect.fail(new ApiError.NotFound({ error: "no usage webhook" }))
          : Effect.succeed(toUsage(row))
    )

  const putUsage = (
    tenantId: string,
    input: Webhook.UsageWebhookInput
  ): Effect.Effect<Webhook.UsageWebhookCreated, ApiError.InvalidRequest | PersistenceError.PersistenceError> =>
    Effect.gen(function*() {
      yield* checkUrl(input.url)
      const rotated = yield* rotate(tenantId, undefined, "usage", input.url)
      if (rotated !== undefined) {
        const row = (yield* usageRow(tenantId))!
        return new Webhook.UsageWebhookCreated({ ...toUsage(row), secret: rotated.secret })
      }
      const id = Ids.make("we")
      const secret = newSecret()
      const [row] = yield* sql<Row>`INSERT INTO webhook_endpoints (id, tenant_id, kind, url, events, sealed_secret)
        VALUES (${id}, ${tenantId}, 'usage', ${input.url}, '{usage.recorded}', ${
        sealer.seal(secret, sealingContext(id))
      })
        ON CONFLICT (tenant_id) WHERE kind = 'usage' DO NOTHING
        RETURNING ${fields}`.pipe(PersistenceError.PersistenceError.refail)
      // Set by a call beside this one in the meantime: this call's url and a new secret win, as if it came second.
      if (row === undefined) return yield* putUsage(tenantId, input)
      return new Webhook.UsageWebhookCreated({ ...toUsage(row), secret })
    })

  const rotateUsageSecret = (tenantId: string) =>
    Effect.flatMap(
      rotate(tenantId, undefined, "usage"),
      (secret) =>
        secret === undefined
          ? Effect.fail(new ApiError.NotFound({ error: "no usage webhook" }))
          : Effect.succeed(secret)
    )

  const owns = (tenantId: string, id: string) =>
    sql`SELECT 1 FROM webhook_endpoints WHERE tenant_id = ${tenantId} AND id = ${id}`.pipe(
      Effect.map((rows) => rows.length > 0),
      PersistenceError.PersistenceError.refail
    )

  return WebhookEndpoints.of({
    create,
    list,
    get,
    update,
    remove: (tenantId, id) => removeWhere(tenantId, id, "endpoint"),
    rotateSecret,
    usage,
    putUsage,
    removeUsage: (tenantId) => removeWhere(tenantId, undefined, "usage"),
    rotateUsageSecret,
    owns
  })
})

export const layer: Layer.Layer<WebhookEndpoints, never, SqlClient.SqlClient | SealedSecret.Sealer | Egress.Egress> =
  Layer.effect(WebhookEndpoints, make)
