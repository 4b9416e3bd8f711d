/**
 * A fresh database per test file on the run's embedded PostgreSQL, so files
 * never see each other's rows (or advisory locks).
 */
import { Migrations } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import Pg from "pg"

/** Makes an empty database and answers its URL. */
export const make = Effect.promise(async () => {
  // Imported here, not at the top: benchmark scripts use the fixtures beside this one outside vitest.
  const { inject } = await import("vitest")
  const server = inject("postgresUrl")
  const name = `t_${Crypto.randomBytes(6).toString("hex")}`
  const client = new Pg.Client({ connectionString: server })
  await client.connect()
  try {
    await client.query(`CREATE DATABASE ${name}`)
  } finally {
    await client.end()
  }
  const url = new URL(server)
  url.pathname = `/${name}`
  return url.href
})

/** Runs one statement on a test database, for tests that change it behind the server's back. */
export const query = (url: string, text: string) =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: url })
    await client.connect()
    try {
      return (await client.query(text)).rows
    } finally {
      await client.end()
    }
  })

/**
 * A stand-in for the accounts package's `tenants`, for the tests of packages
 * below accounts whose tables hang off it: the columns they use, no more.
 */
export const tenantsStandIn = Migrations.make("test_tenants_migrations", {
  "1_tenants": Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`CREATE TABLE tenants (id text PRIMARY KEY, name text NOT NULL)`
  )
})
