/**
 * The tenant's API keys. A key is shown once when made; only its SHA-256
 * hash is kept, which is enough for 256-bit random secrets.
 */
import { type ApiError, Common, Token } from "@agent-runtime/domain"
import { Ids, PersistenceError } from "@agent-runtime/store"
import { SqlClient, type Statement } from "@effect/sql"
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Secret from "./internal/secret.ts"

/** The SHA-256 of a presented secret, as stored: also what caches of authenticated keys are keyed by. */
export const secretHash = (secret: string): Buffer => Secret.hash(secret)

export interface Authenticated {
  readonly tenantId: string
  readonly tokenId: string
}

const TokenRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  prefix: Schema.String,
  createdAt: Schema.Number
})

/** Characters of a key kept in the clear to tell keys apart. */
const shownPrefixLength = 12

export class Tokens extends Context.Tag("@agent-runtime/accounts/Tokens")<Tokens, {
  /**
   * Makes a key for the tenant; its secret is in this answer only. Runs inside the caller's transaction when
   * there is one (a tenant is made with its first key).
   */
  readonly create: (
    tenantId: string,
    input: Token.TokenInput
  ) => Effect.Effect<Token.TokenCreated, PersistenceError.PersistenceError>
  /** The tenant's live keys in id order, a page at a time; never their secrets. */
  readonly list: (tenantId: string, params: Common.PageParams) => Effect.Effect<{
    readonly data: ReadonlyArray<Token.Token>
    readonly next: string | null
  }, PersistenceError.PersistenceError>
  /** Revokes a live key of the tenant; NotFound for one that is not (another tenant's looks like none). */
  readonly revoke: (
    tenantId: string,
    id: string
  ) => Effect.Effect<typeof Common.Deleted.Type, ApiError.NotFound | PersistenceError.PersistenceError>
  /** The tenant and key a presented secret belongs to, if it is a live key. */
  readonly authenticate: (
    secret: string
  ) => Effect.Effect<Option.Option<Authenticated>, PersistenceError.PersistenceError>
  /**
   * A query for the tenant (`tenant_id`) of a presented secret, no row unless it is a live key: for a
   * statement that reads what the key asks for and checks the key at once, one round trip instead of two.
   */
  readonly tenantQuery: (secret: string) => Statement.Fragment
}>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const create = (tenantId: string, input: Token.TokenInput) =>
    Effect.gen(function*() {
      const secret = Secret.generate(Token.apiKeyPrefix)
      const row = {
        id: Ids.make("tok"),
        tenantId,
        name: input.name,
        prefix: secret.slice(0, shownPrefixLength),
        secretHash: Secret.hash(secret)
      }
      const [inserted] = yield* sql<{ createdAt: number }>`
        INSERT INTO api_tokens ${sql.insert(row)}
        RETURNING floor(extract(epoch from created_at))::float8 AS created_at`
      return new Token.TokenCreated({
        id: row.id,
        name: row.name,
        prefix: row.prefix,
        createdAt: inserted!.createdAt,
        token: secret
      })
    }).pipe(PersistenceError.PersistenceError.refail)

  const list = (tenantId: string, params: Common.PageParams) =>
    sql`
      SELECT id, name, prefix, floor(extract(epoch from created_at))::float8 AS created_at
      FROM api_tokens
      WHERE tenant_id = ${tenantId} AND revoked_at IS NULL
        ${params.after === undefined ? sql`` : sql`AND id > ${params.after}`}
      ORDER BY id
      LIMIT ${Common.pageQueryLimit(params)}`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(TokenRow))),
      Effect.map((rows) => Common.toPage(rows.map((row) => new Token.Token(row)), params)),
      PersistenceError.PersistenceError.refail
    )

  const revoke = (tenantId: string, id: string) =>
    sql<{ id: string }>`
      UPDATE api_tokens SET revoked_at = now()
      WHERE id = ${id} AND tenant_id = ${tenantId} AND revoked_at IS NULL
      RETURNING id`.pipe(
      PersistenceError.PersistenceError.refail,
      Effect.flatMap(Common.deleted(id, `no token ${id}`))
    )

  const liveKey = (secret: string) =>
    secret.startsWith(Token.apiKeyPrefix)
      ? sql`FROM api_tokens WHERE secret_hash = ${Secret.hash(secret)} AND revoked_at IS NULL`
      : sql`FROM api_tokens WHERE false`

  const authenticate = (secret: string) =>
    secret.startsWith(Token.apiKeyPrefix)
      ? sql<Authenticated>`SELECT tenant_id, id AS token_id ${liveKey(secret)}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0])),
        PersistenceError.PersistenceError.refail
      )
      : Effect.succeed(Option.none())

  const tenantQuery = (secret: string): Statement.Fragment => sql`SELECT tenant_id ${liveKey(secret)}`

  return Tokens.of({ create, list, revoke, authenticate, tenantQuery })
})

export const layer: Layer.Layer<Tokens, never, SqlClient.SqlClient> = Layer.effect(Tokens, make)
