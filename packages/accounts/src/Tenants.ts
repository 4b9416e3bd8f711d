/**
 * Tenants (accounts). Made by the operator with a first API key, so the new
 * tenant can call the API at once.
 */
import { ApiError, Common, Tenant } from "@agent-runtime/domain"
import { Ids } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Tokens } from "./Tokens.ts"

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

export class Tenants extends Effect.Service<Tenants>()("@agent-runtime/accounts/Tenants", {
  dependencies: [Tokens.Default],
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const tokens = yield* Tokens
    const columns = sql`id, name, login, floor(extract(epoch from created_at))::float8 AS created_at`

    const create = (input: Tenant.TenantInput) =>
      Effect.gen(function*() {
        const id = Ids.make("tn")
        const [row] = yield* sql`
          INSERT INTO tenants ${sql.insert({ id, name: input.name, login: input.login ?? null })}
          RETURNING ${columns}`
        const tenant = toTenant(yield* Schema.decodeUnknown(TenantRow)(row))
        const token = yield* tokens.create(id, { name: "first key" })
        return new Tenant.TenantCreated({ ...tenant, token: token.token })
      }).pipe(sql.withTransaction, Effect.orDie)

    const list = (params: Common.PageParams) =>
      sql`
        SELECT ${columns} FROM tenants
        ${params.after === undefined ? sql`` : sql`WHERE id > ${params.after}`}
        ORDER BY id
        LIMIT ${Common.pageQueryLimit(params)}`.pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(TenantRow))),
        Effect.map((rows) => Common.toPage(rows.map(toTenant), params)),
        Effect.orDie
      )

    const find = (id: string) =>
      sql`SELECT ${columns} FROM tenants WHERE id = ${id}`.pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(TenantRow))),
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toTenant)),
        Effect.orDie
      )

    const get = (id: string) =>
      find(id).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new ApiError.NotFound({ error: `no tenant ${id}` })),
          onSome: Effect.succeed
        }))
      )

    return { create, list, find, get } as const
  })
}) {}
