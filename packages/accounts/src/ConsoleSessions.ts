/**
 * The console's sessions: who signed in (the `ar_session` cookie), and the
 * one-time links the operator hands a person to sign in with. Only SHA-256
 * hashes of their secrets are kept; a session is checked against the table on
 * every use, so signing out or deleting a tenant ends it on every node at once.
 */
import { Ids, PersistenceError } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Context, Duration, Effect, Layer, Option, Schema } from "effect"
import * as Secret from "./internal/secret.ts"

/** How a person signed in. */
export const Method = Schema.Literal("oidc", "key", "link")
export type Method = typeof Method.Type

export const sessionPrefix = "ars_"
export const linkPrefix = "arl_"

/** How long a session lasts: a person signs in again after it. */
export const sessionLifetime = Duration.days(7)
/** How long a sign-in link may wait to be used. */
export const linkLifetime = Duration.minutes(15)

export class Session extends Schema.Class<Session>("Session")({
  id: Schema.String,
  tenantId: Schema.String,
  login: Schema.NullOr(Schema.String),
  name: Schema.NullOr(Schema.String),
  method: Method
}) {}

export interface Started {
  readonly secret: string
  /** Unix seconds. */
  readonly expiresAt: number
}

export class ConsoleSessions extends Context.Tag("@agent-runtime/accounts/ConsoleSessions")<ConsoleSessions, {
  /** Starts a session for a person of the tenant; its secret (the cookie's value) is in this answer only. */
  readonly start: (input: {
    readonly tenantId: string
    readonly login: string | null
    readonly name: string | null
    readonly method: Method
  }) => Effect.Effect<Started, PersistenceError.PersistenceError>
  /** The live session a cookie's value names, if any. */
  readonly authenticate: (secret: string) => Effect.Effect<Option.Option<Session>, PersistenceError.PersistenceError>
  /** Ends the session a cookie's value names (signing out); nothing for one that is not live. */
  readonly end: (secret: string) => Effect.Effect<void, PersistenceError.PersistenceError>
  /** A one-time sign-in link's secret for the tenant, valid for `linkLifetime`. */
  readonly createLink: (tenantId: string) => Effect.Effect<Started, PersistenceError.PersistenceError>
  /** Uses a link: its tenant once, the first time within its lifetime; none after, or for anything else. */
  readonly useLink: (secret: string) => Effect.Effect<Option.Option<string>, PersistenceError.PersistenceError>
}>() {}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const seconds = (duration: Duration.Duration) => Duration.toSeconds(duration)

  const start = (input: Parameters<ConsoleSessions["Type"]["start"]>[0]) =>
    Effect.gen(function*() {
      const secret = Secret.generate(sessionPrefix)
      const [row] = yield* sql<{ expiresAt: number }>`
        INSERT INTO console_sessions (id, tenant_id, secret_hash, login, name, method, expires_at)
        VALUES (${Ids.make("ses")}, ${input.tenantId}, ${Secret.hash(secret)}, ${input.login}, ${input.name},
          ${input.method}, now() + make_interval(secs => ${seconds(sessionLifetime)}))
        RETURNING floor(extract(epoch from expires_at))::float8 AS expires_at`
      return { secret, expiresAt: row!.expiresAt }
    }).pipe(PersistenceError.PersistenceError.refail)

  const authenticate = (secret: string) =>
    secret.startsWith(sessionPrefix)
      ? sql`
          SELECT id, tenant_id, login, name, method FROM console_sessions
          WHERE secret_hash = ${Secret.hash(secret)} AND revoked_at IS NULL AND expires_at > now()`.pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(Session))),
        Effect.map((rows) => Option.fromNullable(rows[0])),
        PersistenceError.PersistenceError.refail
      )
      : Effect.succeed(Option.none())

  const end = (secret: string) =>
    sql`UPDATE console_sessions SET revoked_at = now() WHERE secret_hash = ${Secret.hash(secret)}`.pipe(
      Effect.asVoid,
      PersistenceError.PersistenceError.refail
    )

  const createLink = (tenantId: string) =>
    Effect.gen(function*() {
      const secret = Secret.generate(linkPrefix)
      const [row] = yield* sql<{ expiresAt: number }>`
        INSERT INTO sign_in_links (secret_hash, tenant_id, expires_at)
        VALUES (${Secret.hash(secret)}, ${tenantId}, now() + make_interval(secs => ${seconds(linkLifetime)}))
        RETURNING floor(extract(epoch from expires_at))::float8 AS expires_at`
      return { secret, expiresAt: row!.expiresAt }
    }).pipe(PersistenceError.PersistenceError.refail)

  // One statement marks the link used and answers its tenant, so two uses at once sign in once.
  const useLink = (secret: string) =>
    secret.startsWith(linkPrefix)
      ? sql<{ tenantId: string }>`
          UPDATE sign_in_links SET used_at = now()
          WHERE secret_hash = ${Secret.hash(secret)} AND used_at IS NULL AND expires_at > now()
          RETURNING tenant_id`.pipe(
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => row.tenantId)),
        PersistenceError.PersistenceError.refail
      )
      : Effect.succeed(Option.none())

  return ConsoleSessions.of({ start, authenticate, end, createLink, useLink })
})

export const layer: Layer.Layer<ConsoleSessions, never, SqlClient.SqlClient> = Layer.effect(ConsoleSessions, make)
