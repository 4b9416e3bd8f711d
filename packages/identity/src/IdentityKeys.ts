/**
 * The keys that sign identity tokens, in the `identity_keys` table and so
 * the same on every node. A key is an Ed25519 pair: its public JWK is stored
 * as it is published, its private JWK sealed with the node's sealing key
 * (bound to `identity-key:<kid>`, so a sealed key copied to another row does
 * not open).
 *
 * A key is published from its creation until `retires_at`, and signs from
 * `activates_at`: the newest active key signs. The first node to start makes
 * the first key (nodes starting together make one: the insert of the first
 * generation conflicts). `rotate` adds a key that is published at once and
 * signs only after the activation delay, so verifiers' caches hold it before
 * it signs; the earlier keys retire at the new key's activation plus the
 * overlap, and stay verifiable until then.
 *
 * Each node reads the table through a short cache, so a rotation made on
 * one node reaches the others within it; retirement and activation are
 * decided by the clock at each use, not at each read.
 */
import { Identity } from "@agent-runtime/domain"
import { PersistenceError, SealedSecret } from "@agent-runtime/store"
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Layer, Option, Redacted, Ref, Schema } from "effect"
import { calculateJwkThumbprint, type CryptoKey, exportJWK, generateKeyPair, importJWK, type JWK } from "jose"
import * as IdentityError from "./IdentityError.ts"

export interface Options {
  /** How long a new key is published before it signs; 0 signs at once. Default 5 minutes. */
  readonly activationDelay?: Duration.DurationInput
  /** How long earlier keys stay published after a new key starts signing. Default 24 hours. */
  readonly overlap?: Duration.DurationInput
  /** How long a node reuses what it read of the table. Default 30 seconds. */
  readonly cacheTtl?: Duration.DurationInput
  /**
   * The table the keys live in, made like `identity_keys` (the default): another key set kept and rotated the
   * same way, for another signer (the OAuth server's), so no key signs for both.
   */
  readonly table?: string
}

export const defaults = {
  activationDelay: Duration.minutes(5),
  overlap: Duration.hours(24),
  cacheTtl: Duration.seconds(30)
} as const

/** A stored key; times in Unix milliseconds. */
export class StoredKey extends Schema.Class<StoredKey>("StoredKey")({
  kid: Schema.String,
  generation: Schema.Number,
  publicJwk: Identity.Jwk,
  sealedPrivateKey: Schema.String,
  createdAt: Schema.Number,
  activatesAt: Schema.Number,
  retiresAt: Schema.NullOr(Schema.Number)
}) {}

/** The key that signs now: its id and its private half, opened. */
export interface SigningKey {
  readonly kid: string
  readonly privateKey: CryptoKey
}

export interface Service {
  /** The stored keys not retired at the last read (of this node's cache), oldest first. */
  readonly keys: Effect.Effect<ReadonlyArray<StoredKey>, PersistenceError.PersistenceError>
  /** The public keys not retired now: the JWKS. */
  readonly published: Effect.Effect<ReadonlyArray<Identity.Jwk>, PersistenceError.PersistenceError>
  /** The newest key active now, its private half opened (and kept opened on this node). */
  readonly signingKey: Effect.Effect<SigningKey, IdentityError.IdentityError>
  /** The private JWKs of the keys published now, oldest first, for a signer that takes a key set. */
  readonly privateJwks: Effect.Effect<ReadonlyArray<JWK>, IdentityError.IdentityError>
  /**
   * Adds a key, published at once and signing after the activation delay;
   * earlier keys retire at its activation plus the overlap. Keys retired
   * before now are deleted. This node sees the new key at once, others
   * within the cache's lifetime.
   */
  readonly rotate: Effect.Effect<
    { readonly kid: string; readonly activatesAt: number },
    PersistenceError.PersistenceError
  >
  /** Makes the first key when no key is left unretired; a no-op otherwise, and safe to race. */
  readonly ensure: Effect.Effect<void, PersistenceError.PersistenceError>
}

export class IdentityKeys extends Context.Tag("@agent-runtime/identity/IdentityKeys")<IdentityKeys, Service>() {}

const defaultTable = "identity_keys"

/** The context a private key is sealed for: bound to its id and table. */
export const sealContext = (kid: string, table: string = defaultTable) =>
  table === defaultTable ? `identity-key:${kid}` : `${table}:${kid}`

/** Any number, the same in every process: rotations take it for their transaction, one at a time. */
const rotationLockKey = 7_424_202

/** A fresh key pair: its id (the public JWK's RFC 7638 thumbprint), public JWK and private JWK. */
export const generate: Effect.Effect<{ readonly publicJwk: Identity.Jwk; readonly privateJwk: JWK }> = Effect
  .promise(async () => {
    const pair = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true })
    const [publicJwk, privateJwk] = await Promise.all([exportJWK(pair.publicKey), exportJWK(pair.privateKey)])
    const kid = await calculateJwkThumbprint(publicJwk, "sha256")
    return {
      publicJwk: new Identity.Jwk({ kid, kty: "OKP", crv: "Ed25519", x: publicJwk.x!, alg: "EdDSA", use: "sig" }),
      privateJwk: { ...privateJwk, kid, alg: "EdDSA", use: "sig" }
    }
  })

/** The keys published at `now` (ms): every key not yet retired, oldest first. */
export const publishedAt = (keys: ReadonlyArray<StoredKey>, now: number): ReadonlyArray<StoredKey> =>
  keys.filter((key) => key.retiresAt === null || key.retiresAt > now)

/** The key that signs at `now` (ms): the newest published key already active. */
export const signingAt = (keys: ReadonlyArray<StoredKey>, now: number): Option.Option<StoredKey> =>
  Option.fromNullable(
    publishedAt(keys, now)
      .filter((key) => key.activatesAt <= now)
      .reduce<StoredKey | undefined>(
        (newest, key) =>
          newest === undefined || key.activatesAt > newest.activatesAt ||
            (key.activatesAt === newest.activatesAt && key.generation > newest.generation)
            ? key
            : newest,
        undefined
      )
  )

const decodeKeys = Schema.decodeUnknown(Schema.Array(StoredKey))

const epochMs = (column: string) => `(extract(epoch from ${column}) * 1000)::float8`

export const make = (
  options: Options = {}
): Effect.Effect<Service, PersistenceError.PersistenceError, SqlClient.SqlClient | SealedSecret.Sealer> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const sealer = yield* SealedSecret.Sealer
    const activationDelay = Duration.decode(options.activationDelay ?? defaults.activationDelay)
    const overlap = Duration.decode(options.overlap ?? defaults.overlap)
    const cacheTtl = Duration.toMillis(options.cacheTtl ?? defaults.cacheTtl)
    const table = options.table ?? defaultTable
    if (!/^[a-z_]+$/.test(table)) return yield* Effect.dieMessage(`bad key table name ${table}`)

    const load = sql.unsafe(
      `SELECT kid, generation, public_jwk, sealed_private_key,
        ${epochMs("created_at")} AS created_at, ${epochMs("activates_at")} AS activates_at,
        ${epochMs("retires_at")} AS retires_at
      FROM ${table}
      WHERE retires_at IS NULL OR retires_at > now()
      ORDER BY generation`
    ).pipe(Effect.flatMap(decodeKeys), PersistenceError.PersistenceError.refail)

    // What this node last read, and when; reads are one at a time so an expired cache is read once.
    const cache = yield* Ref.make(Option.none<{ readonly keys: ReadonlyArray<StoredKey>; readonly at: number }>())
    const reading = yield* Effect.makeSemaphore(1)
    const cached = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      return Option.filter(yield* Ref.get(cache), (entry) => now - entry.at < cacheTtl)
    })
    const read = Effect.gen(function*() {
      const again = yield* cached
      if (Option.isSome(again)) return again.value.keys
      const at = yield* Clock.currentTimeMillis
      const fresh = yield* load
      yield* Ref.set(cache, Option.some({ keys: fresh, at }))
      return fresh
    })
    const keys: Service["keys"] = Effect.gen(function*() {
      const hit = yield* cached
      return Option.isSome(hit) ? hit.value.keys : yield* reading.withPermits(1)(read)
    })
    const invalidate = Ref.set(cache, Option.none())

    const published: Service["published"] = Effect.gen(function*() {
      const stored = yield* keys
      const now = yield* Clock.currentTimeMillis
      return publishedAt(stored, now).map((key) => key.publicJwk)
    })

    // Private halves opened on this node, by kid: a kid names one key forever.
    const opened = new Map<string, { readonly jwk: JWK; readonly key: CryptoKey }>()
    const importPrivate = (secret: Redacted.Redacted<string>) =>
      Effect.tryPromise(async () => {
        const jwk = JSON.parse(Redacted.value(secret)) as JWK
        return { jwk, key: await importJWK(jwk, "EdDSA") as CryptoKey }
      })
    const openPair = (key: StoredKey) =>
      Effect.suspend(() => {
        const known = opened.get(key.kid)
        if (known !== undefined) return Effect.succeed(known)
        return sealer.open(key.sealedPrivateKey, sealContext(key.kid, table)).pipe(
          Effect.flatMap(importPrivate),
          Effect.tap((pair) => opened.set(key.kid, pair)),
          IdentityError.refail("key_unreadable", `key ${key.kid} of ${table} cannot be opened`)
        )
      })
    const open = (key: StoredKey): Effect.Effect<CryptoKey, IdentityError.IdentityError> =>
      Effect.map(openPair(key), (pair) => pair.key)

    const privateJwks: Service["privateJwks"] = Effect.gen(function*() {
      const stored = yield* keys.pipe(IdentityError.refail("storage", `${table} cannot be read`))
      const now = yield* Clock.currentTimeMillis
      return yield* Effect.forEach(publishedAt(stored, now), (key) => Effect.map(openPair(key), (pair) => pair.jwk))
    })

    const signingKey: Service["signingKey"] = Effect.gen(function*() {
      const stored = yield* keys.pipe(IdentityError.refail("storage", "identity keys cannot be read"))
      const now = yield* Clock.currentTimeMillis
      const key = signingAt(stored, now)
      if (Option.isNone(key)) {
        return yield* new IdentityError.IdentityError({
          reason: "no_signing_key",
          message: "no identity key is active and unretired"
        })
      }
      return { kid: key.value.kid, privateKey: yield* open(key.value) }
    })

    /** Inserts `fresh` as the next generation, activating after `delay`, under `condition` (SQL). */
    const insert = (
      fresh: Effect.Effect.Success<typeof generate>,
      delay: Duration.Duration,
      condition: "always" | "when none is unretired"
    ) =>
      sql<{ kid: string; generation: number; activatesAt: number }>`
        INSERT INTO ${sql(table)} (kid, generation, public_jwk, sealed_private_key, activates_at)
        SELECT ${fresh.publicJwk.kid}, coalesce(max(generation), 0) + 1, ${JSON.stringify(fresh.publicJwk)}::jsonb,
          ${sealer.seal(JSON.stringify(fresh.privateJwk), sealContext(fresh.publicJwk.kid, table))},
          now() + make_interval(secs => ${Duration.toMillis(delay) / 1000})
        FROM ${sql(table)}
        ${
        condition === "always"
          ? sql``
          : sql`HAVING NOT coalesce(bool_or(retires_at IS NULL), false)`
      }
        ON CONFLICT (generation) DO NOTHING
        RETURNING kid, generation, ${sql.unsafe(epochMs("activates_at"))} AS activates_at`

    const ensure: Service["ensure"] = Effect.gen(function*() {
      const fresh = yield* generate
      const inserted = yield* insert(fresh, Duration.zero, "when none is unretired")
      if (inserted.length > 0) {
        yield* invalidate
        yield* Effect.logInfo("signing key created").pipe(
          Effect.annotateLogs({ kid: fresh.publicJwk.kid, table })
        )
      }
    }).pipe(PersistenceError.PersistenceError.refail)

    const rotate: Service["rotate"] = Effect.gen(function*() {
      const fresh = yield* generate
      const added = yield* Effect.gen(function*() {
        yield* sql`SELECT pg_advisory_xact_lock(${rotationLockKey})`
        const [row] = yield* insert(fresh, activationDelay, "always")
        if (row === undefined) return yield* Effect.dieMessage("identity key rotation inserted no key")
        yield* sql`
          UPDATE ${sql(table)}
          SET retires_at = least(
            coalesce(retires_at, 'infinity'),
            (SELECT activates_at FROM ${sql(table)} WHERE generation = ${row.generation}) +
              make_interval(secs => ${Duration.toMillis(overlap) / 1000})
          )
          WHERE generation < ${row.generation}`
        yield* sql`DELETE FROM ${sql(table)} WHERE retires_at <= now()`
        return row
      }).pipe(sql.withTransaction, PersistenceError.PersistenceError.refail)
      yield* invalidate
      yield* Effect.logInfo("signing key rotated").pipe(
        Effect.annotateLogs({ kid: added.kid, table, activatesAt: new Date(added.activatesAt).toISOString() })
      )
      return { kid: added.kid, activatesAt: added.activatesAt }
    })

    yield* ensure
    return IdentityKeys.of({ keys, published, signingKey, privateJwks, rotate, ensure })
  })

export const layer = (
  options: Options = {}
): Layer.Layer<IdentityKeys, PersistenceError.PersistenceError, SqlClient.SqlClient | SealedSecret.Sealer> =>
  Layer.effect(IdentityKeys, make(options))
