/**
 * `oidc-provider`'s storage on PostgreSQL: every model in `oauth_records`
 * under the SHA-256 of its id (tokens, codes and sessions are bearer secrets:
 * what is stored cannot be presented), a client's secret sealed. `consume`
 * is one statement that succeeds once, so a code presented twice at the same
 * moment is used once: the second presentation revokes its grant, as reuse
 * does.
 *
 * A refresh token presented again within `refreshGrace` of its rotation (a
 * client retrying a refresh whose answer it lost, or two refreshes racing)
 * is rotated again rather than taken for theft; after that, reuse revokes
 * its grant.
 */
import { PersistenceError, type SealedSecret } from "@agent-runtime/store"
import type { SqlClient, Statement } from "@effect/sql"
import { Effect, Redacted, Runtime } from "effect"
import * as Crypto from "node:crypto"
import type { Adapter, AdapterPayload } from "oidc-provider"
import { errors } from "oidc-provider"

export const hash = (value: string): Buffer => Crypto.createHash("sha256").update(value).digest()

const grantable = new Set([
  "AccessToken",
  "AuthorizationCode",
  "RefreshToken",
  "DeviceCode",
  "BackchannelAuthenticationRequest"
])

/** How long a rotated refresh token may be presented again (a retry) before reuse counts as theft. */
export const refreshGraceSeconds = 10

const clientSecretContext = (clientId: string) => `oauth-client:${clientId}`

/** Every record of a grant, and the grant itself: its tokens stop at once. */
export const revokeGrant = (sql: SqlClient.SqlClient, grantId: string) =>
  Effect.all([
    sql`DELETE FROM oauth_records WHERE grant_id = ${grantId}`,
    sql`DELETE FROM oauth_records WHERE kind = 'Grant' AND id_hash = ${hash(grantId)}`,
    sql`DELETE FROM oauth_grants WHERE id = ${grantId}`
  ], { discard: true }).pipe(sql.withTransaction)

export const makeAdapterClass = (
  sql: SqlClient.SqlClient,
  sealer: SealedSecret.Sealer["Type"],
  runtime: Runtime.Runtime<never>
) => {
  const run = <A>(effect: Effect.Effect<A, unknown>) =>
    Runtime.runPromise(runtime)(PersistenceError.PersistenceError.refail(effect))

  const stored = (id: string, payload: AdapterPayload): AdapterPayload => {
    const { jti, ...rest } = payload as AdapterPayload & { jti?: string }
    const kept: Record<string, unknown> = jti === id ? rest : payload
    if (typeof payload.client_secret === "string" && typeof payload.client_id === "string") {
      kept.client_secret = sealer.seal(payload.client_secret, clientSecretContext(payload.client_id))
    }
    return kept as AdapterPayload
  }

  const opened = (
    id: string,
    row: { payload: AdapterPayload; consumed: number | null; retry: boolean },
    withJti: boolean
  ) =>
    Effect.gen(function*() {
      const payload: Record<string, unknown> = { ...row.payload }
      if (withJti) payload.jti = id
      if (row.consumed !== null && !row.retry) payload.consumed = row.consumed
      if (typeof payload.client_secret === "string" && typeof payload.client_id === "string") {
        payload.client_secret = Redacted.value(
          yield* sealer.open(payload.client_secret, clientSecretContext(payload.client_id))
        )
      }
      return payload as AdapterPayload
    })

  return class PostgresAdapter implements Adapter {
    readonly name: string
    constructor(name: string) {
      this.name = name
    }

    upsert(id: string, payload: AdapterPayload, expiresIn: number): Promise<void> {
      const name = this.name
      const grantId = typeof payload.grantId === "string" ? payload.grantId : null
      const uid = typeof payload.uid === "string" ? hash(payload.uid) : null
      return run(Effect.gen(function*() {
        yield* sql`
          INSERT INTO oauth_records (kind, id_hash, payload, grant_id, uid_hash, expires_at)
          VALUES (${name}, ${hash(id)}, ${JSON.stringify(stored(id, payload))}::jsonb, ${grantId}, ${uid},
            ${expiresIn > 0 ? sql`now() + make_interval(secs => ${expiresIn})` : sql`NULL`})
          ON CONFLICT (kind, id_hash) DO UPDATE
          SET payload = excluded.payload, grant_id = excluded.grant_id, uid_hash = excluded.uid_hash,
            expires_at = excluded.expires_at`
        if (grantId !== null && (name === "AccessToken" || name === "RefreshToken")) {
          yield* sql`UPDATE oauth_grants SET used_at = now() WHERE id = ${grantId}`
        }
      }))
    }

    private findWhere(id: string, where: Statement.Fragment, withJti: boolean) {
      return run(Effect.gen(function*() {
        const [row] = yield* sql<{ payload: AdapterPayload; consumed: number | null; retry: boolean }>`
          SELECT payload, extract(epoch from consumed_at)::float8 AS consumed,
            coalesce(kind = 'RefreshToken' AND consumed_at > now() - make_interval(secs => ${refreshGraceSeconds}),
              false) AS retry
          FROM oauth_records
          WHERE ${where} AND (expires_at IS NULL OR expires_at > now())`
        return row === undefined ? undefined : yield* opened(id, row, withJti)
      }))
    }

    find(id: string): Promise<AdapterPayload | undefined> {
      return this.findWhere(id, sql`kind = ${this.name} AND id_hash = ${hash(id)}`, true)
    }

    findByUid(uid: string): Promise<AdapterPayload | undefined> {
      // Only sessions are found by uid; their jti is kept in the payload for it.
      return this.findWhere(uid, sql`kind = ${this.name} AND uid_hash = ${hash(uid)}`, false)
    }

    findByUserCode(): Promise<AdapterPayload | undefined> {
      return Promise.resolve(undefined)
    }

    consume(id: string): Promise<void> {
      const name = this.name
      return run(Effect.gen(function*() {
        const used = yield* sql`
          UPDATE oauth_records SET consumed_at = now()
          WHERE kind = ${name} AND id_hash = ${hash(id)} AND consumed_at IS NULL
          RETURNING 1`
        if (used.length > 0) return false
        const [again] = yield* sql<{ grantId: string | null; retry: boolean }>`
          SELECT grant_id,
            kind = 'RefreshToken' AND consumed_at > now() - make_interval(secs => ${refreshGraceSeconds}) AS retry
          FROM oauth_records WHERE kind = ${name} AND id_hash = ${hash(id)}`
        if (again?.retry) return false
        if (again?.grantId) yield* revokeGrant(sql, again.grantId)
        return true
      })).then((reused) => {
        // Answered by the token endpoint as 400 invalid_grant.
        if (reused) throw new errors.InvalidGrant(`${name === "RefreshToken" ? "refresh token" : "code"} already used`)
      })
    }

    destroy(id: string): Promise<void> {
      const name = this.name
      return run(
        name === "Grant"
          ? revokeGrant(sql, id)
          : sql`DELETE FROM oauth_records WHERE kind = ${name} AND id_hash = ${hash(id)}`.pipe(Effect.asVoid)
      )
    }

    revokeByGrantId(grantId: string): Promise<void> {
      const name = this.name
      return run(
        grantable.has(name)
          ? sql`DELETE FROM oauth_records WHERE kind = ${name} AND grant_id = ${grantId}`.pipe(Effect.asVoid)
          : Effect.void
      )
    }
  }
}
