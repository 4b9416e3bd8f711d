/**
 * Tenants (accounts). Made by the operator with a first API key, so the new
 * tenant can call the API at once.
 */
import { ApiError, Common, Tenant } from "@agent-runtime/domain"
import { Ids, PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Tokens from "./Tokens.ts"

const TenantRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  login: Schema.NullOr(Schema.String),
  createdAt: Schema.Number
})

const toTenant = (row: typeof TenantRow.Type) =>
  new Tenant.Tenant({
    id: row.id,
    name: row.name,
    createdAt: row.createdAt,
    ...(row.login === null ? {} : { login: row.login })
  })

export class Tenants extends Context.Tag("@agent-runtime/accounts/Tenants")<Tenants, {
  /** Makes a tenant with its first API key, in one transaction; the key's secret is in this answer only. */
  readonly create: (input: Tenant.TenantInput) => Effect.Effect<Tenant.TenantCreated, PersistenceError.PersistenceError>
  /** Tenants in id order, a page at a time. */
  readonly list: (params: Common.PageParams) => Effect.Effect<{
    readonly data: ReadonlyArray<Tenant.Tenant>
    readonly next: string | null
  }, PersistenceError.PersistenceError>
  readonly find: (id: string) => Effect.Effect<Option.Option<Tenant.Tenant>, PersistenceError.PersistenceError>
  /**
   * The tenant a person who signed in as `login` belongs to (logins compare without case); the oldest when
   * several name it.
   */
  readonly findByLogin: (
    login: string
  ) => Effect.Effect<Option.Option<Tenant.Tenant>, PersistenceError.PersistenceError>
  /** `find`, NotFound for no tenant of that id. */
  readonly get: (id: string) => Effect.Effect<Tenant.Tenant, ApiError.NotFound | PersistenceError.PersistenceError>
}>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const tokens = yield* Tokens.Tokens
  const columns = sql`id, name, login, floor(extract(epoch from created_at))::float8 AS created_at`

  const create = (input: Tenant.TenantInput) =>
    Effect.gen(function*() {
      const id = Ids.make("tn")
      const tenant = yield* sql`
        INSERT INTO tenants ${sql.insert({ id, name: input.name, login: input.login ?? null })}
        RETURNING ${columns}`.pipe(
        Effect.flatMap(([row]) => Schema.decodeUnknown(TenantRow)(row)),
        Effect.map(toTenant),
        PersistenceError.PersistenceError.refail
      )
      const token = yield* tokens.create(id, { name: "first key" })
      return new Tenant.TenantCreated({ ...tenant, token: token.token })
    }).pipe(
      sql.withTransaction,
      // The transaction's own statements (BEGIN, COMMIT); those inside are PersistenceErrors already.
      Effect.catchTag("SqlError", (cause) => new PersistenceError.PersistenceError({ cause }))
    )

  const list = (params: Common.PageParams) =>
    sql`
      SELECT ${columns} FROM tenants
      ${params.after === undefined ? sql`` : sql`WHERE id > ${params.after}`}
      ORDER BY id
      LIMIT ${Common.pageQueryLimit(params)}`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(TenantRow))),
      Effect.map((rows) => Common.toPage(rows.map(toTenant), params)),
      PersistenceError.PersistenceError.refail
    )

  const find = (id: string) =>
    sql`SELECT ${columns} FROM tenants WHERE id = ${id}`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(TenantRow))),
      Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toTenant)),
      PersistenceError.PersistenceError.refail
    )

  const findByLogin = (login: string) =>
    sql`SELECT ${columns} FROM tenants WHERE lower(login) = lower(${login}) ORDER BY created_at, id LIMIT 1`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(TenantRow))),
      Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toTenant)),
      PersistenceError.PersistenceError.refail
    )

  const get = (id: string) =>
    find(id).pipe(
      Effect.flatMap(Option.match({
        onNone: () => Effect.fail(new ApiError.NotFound({ error: `no tenant ${id}` })),
        onSome: Effect.succeed
      }))
    )

  return Tenants.of({ create, list, find, findByLogin, get })
})

/** The service with its `Tokens`, which makes a new tenant's first key. */
export const layer: Layer.Layer<Tenants, never, SqlClient.SqlClient> = Layer.effect(Tenants, make).pipe(
  Layer.provide(Tokens.layer)
)
