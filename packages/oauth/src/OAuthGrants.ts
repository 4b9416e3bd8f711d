/**
 * Connected applications: the grants people gave coding agents, and the
 * check of an OAuth access token on every request. A token is looked up by
 * its hash together with its grant, on every use, so a revoked grant's
 * tokens stop at once on every node.
 */
import { ApiError, OAuth } from "@agent-runtime/domain"
import { PersistenceError } from "@agent-runtime/store"
import { SqlClient, type Statement } from "@effect/sql"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { hash, revokeGrant } from "./internal/adapter.ts"

/** Who an access token acts for. */
export class Holder extends Schema.Class<Holder>("Holder")({
  tenantId: Schema.String,
  grantId: Schema.String,
  login: Schema.NullOr(Schema.String),
  clientName: Schema.String,
  /** The resource the token was issued for (its audience): this service's `/mcp` at one of its addresses. */
  audience: Schema.NullOr(Schema.String)
}) {}

const GrantRow = Schema.Struct({
  id: Schema.String,
  clientName: Schema.String,
  login: Schema.NullOr(Schema.String),
  scope: Schema.String,
  createdAt: Schema.Number,
  usedAt: Schema.NullOr(Schema.Number)
})

export class OAuthGrants extends Context.Tag("@agent-runtime/oauth/OAuthGrants")<OAuthGrants, {
  /** Records a grant a person gave on the consent page (the authorization server keeps its tokens). */
  readonly record: (grant: {
    readonly id: string
    readonly tenantId: string
    readonly clientId: string
    readonly clientName: string
    readonly login: string | null
    readonly scope: string
  }) => Effect.Effect<void, PersistenceError.PersistenceError>
  /** The tenant's grants, newest first. */
  readonly list: (tenantId: string) => Effect.Effect<ReadonlyArray<OAuth.OAuthGrant>, PersistenceError.PersistenceError>
  /** Revokes a grant of the tenant with all its tokens; NotFound for one that is not (another tenant's looks like none). */
  readonly revoke: (
    tenantId: string,
    id: string
  ) => Effect.Effect<
    { readonly id: string; readonly deleted: true },
    ApiError.NotFound | PersistenceError.PersistenceError
  >
  /** The holder of a live access token, if it is one. */
  readonly authenticate: (token: string) => Effect.Effect<Option.Option<Holder>, PersistenceError.PersistenceError>
  /** A query for the tenant (`tenant_id`) of a live access token, for a statement that checks it as it reads. */
  readonly tenantQuery: (token: string) => Statement.Fragment
}>() {}

/** Access tokens are 43 characters of base64url; anything else is not looked up. */
const looksLikeToken = (token: string) => /^[A-Za-z0-9_-]{32,128}$/.test(token)

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const record: OAuthGrants["Type"]["record"] = (grant) =>
    sql`
      INSERT INTO oauth_grants ${
      sql.insert({
        id: grant.id,
        tenantId: grant.tenantId,
        clientId: grant.clientId,
        clientName: grant.clientName,
        login: grant.login,
        scope: grant.scope
      })
    }
      ON CONFLICT (id) DO UPDATE SET scope = excluded.scope, login = excluded.login`.pipe(
      Effect.asVoid,
      PersistenceError.PersistenceError.refail
    )

  const list = (tenantId: string) =>
    sql`
      SELECT id, client_name, login, scope, floor(extract(epoch from created_at))::float8 AS created_at,
        floor(extract(epoch from used_at))::float8 AS used_at
      FROM oauth_grants WHERE tenant_id = ${tenantId}
      ORDER BY created_at DESC, id`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(GrantRow))),
      Effect.map((rows) => rows.map((row) => new OAuth.OAuthGrant(row))),
      PersistenceError.PersistenceError.refail
    )

  const revoke = (tenantId: string, id: string) =>
    Effect.gen(function*() {
      const [owned] = yield* sql`SELECT 1 FROM oauth_grants WHERE id = ${id} AND tenant_id = ${tenantId}`.pipe(
        PersistenceError.PersistenceError.refail
      )
      if (owned === undefined) return yield* new ApiError.NotFound({ error: `no connected app ${id}` })
      yield* PersistenceError.PersistenceError.refail(revokeGrant(sql, id))
      return { id, deleted: true as const }
    })

  const live = (token: string) =>
    looksLikeToken(token)
      ? sql`
          FROM oauth_records r JOIN oauth_grants g ON g.id = r.grant_id
          WHERE r.kind = 'AccessToken' AND r.id_hash = ${hash(token)} AND r.expires_at > now()
            AND r.payload->>'accountId' = g.tenant_id`
      : sql`FROM oauth_grants g WHERE false`

  const authenticate = (token: string) =>
    looksLikeToken(token)
      ? sql`
          SELECT g.tenant_id, g.id AS grant_id, g.login, g.client_name, r.payload->>'aud' AS audience
          ${live(token)}`.pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(Holder))),
        Effect.map((rows) => Option.fromNullable(rows[0])),
        PersistenceError.PersistenceError.refail
      )
      : Effect.succeed(Option.none())

  const tenantQuery = (token: string): Statement.Fragment => sql`SELECT g.tenant_id ${live(token)}`

  return OAuthGrants.of({ record, list, revoke, authenticate, tenantQuery })
})

export const layer: Layer.Layer<OAuthGrants, never, SqlClient.SqlClient> = Layer.effect(OAuthGrants, make)
