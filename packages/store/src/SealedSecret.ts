/**
 * Secrets at rest (provider keys, custom headers): AES-256-GCM under the
 * node's sealing key. Every ciphertext names the key that sealed it, so the
 * key can rotate (new secrets use the current key; old ones open with a
 * previous key until resealed), and binds its owner (tenant and row) as
 * associated data, so a ciphertext copied to another row does not open.
 */
import { Config, type ConfigError, Context, Data, Effect, Layer, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"

export class SealedSecretError extends Data.TaggedError("SealedSecretError")<{ readonly message: string }> {}

export interface SealingKey {
  readonly id: string
  readonly key: Buffer
}

export class Sealer extends Context.Tag("@agent-runtime/store/Sealer")<Sealer, {
  /** Seals `plaintext` for the owner described by `context` (e.g. `tenant:tn_1/key:openai`). */
  readonly seal: (plaintext: string, context: string) => string
  readonly open: (sealed: string, context: string) => Effect.Effect<Redacted.Redacted<string>, SealedSecretError>
  /**
   * A keyed digest (HMAC-SHA256 under a key derived from the sealing key):
   * credentials the service can show again (agent tokens) without storing them.
   */
  readonly sign: (purpose: string, data: string) => string
  /** Whether `mac` is `sign(purpose, data)`, compared in constant time. */
  readonly verify: (purpose: string, data: string, mac: string) => boolean
  readonly keyId: string
}>() {}

const version = "v1"

/** A key's id: the first bytes of its SHA-256, so it names the key without revealing it. */
export const keyId = (key: Buffer) => Crypto.createHash("sha256").update(key).digest("hex").slice(0, 12)

export const parseKey = (encoded: string): SealingKey => {
  const key = Buffer.from(encoded.trim(), "base64")
  if (key.length !== 32) throw new Error("a sealing key is 32 bytes, base64-encoded")
  return { id: keyId(key), key }
}

export const make = (current: SealingKey, previous: ReadonlyArray<SealingKey> = []) => {
  const keys = new Map([current, ...previous].map((key) => [key.id, key.key]))
  const signingKeys = new Map<string, Buffer>()
  const signingKey = (purpose: string) => {
    let key = signingKeys.get(purpose)
    if (key === undefined) {
      key = Buffer.from(Crypto.hkdfSync("sha256", current.key, Buffer.alloc(0), `agent-runtime/${purpose}`, 32))
      signingKeys.set(purpose, key)
    }
    return key
  }
  const sign = (purpose: string, data: string) =>
    Crypto.createHmac("sha256", signingKey(purpose)).update(data).digest("base64url")
  // Digests of both sides have one length, so the comparison takes the same time whatever was presented.
  const digest = (value: string) => Crypto.createHash("sha256").update(value).digest()
  return Sealer.of({
    keyId: current.id,
    sign,
    verify: (purpose, data, mac) => Crypto.timingSafeEqual(digest(sign(purpose, data)), digest(mac)),
    seal: (plaintext, context) => {
      const iv = Crypto.randomBytes(12)
      const cipher = Crypto.createCipheriv("aes-256-gcm", current.key, iv)
      cipher.setAAD(Buffer.from(context))
      const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
      return [
        version,
        current.id,
        iv.toString("base64url"),
        body.toString("base64url"),
        cipher.getAuthTag().toString("base64url")
      ]
        .join(".")
    },
    open: (sealed, context) =>
      Effect.try({
        try: () => {
          const [v, id, iv, body, tag] = sealed.split(".")
          if (v !== version || !id || iv === undefined || body === undefined || tag === undefined) {
            throw new Error("not a sealed secret")
          }
          const key = keys.get(id)
          if (key === undefined) throw new Error(`sealed with unknown key ${id}`)
          const decipher = Crypto.createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"))
          decipher.setAAD(Buffer.from(context))
          decipher.setAuthTag(Buffer.from(tag, "base64url"))
          const plain = Buffer.concat([decipher.update(Buffer.from(body, "base64url")), decipher.final()])
          return Redacted.make(plain.toString("utf8"))
        },
        catch: (error) => new SealedSecretError({ message: `cannot open sealed secret: ${(error as Error).message}` })
      })
  })
}

export const layer = (current: SealingKey, previous: ReadonlyArray<SealingKey> = []): Layer.Layer<Sealer> =>
  Layer.succeed(Sealer, make(current, previous))

/** The development key, made once into the data directory. */
const fromDataDir = (dataDir: string) =>
  Effect.promise(async () => {
    const file = Path.join(Path.resolve(dataDir), "sealing-key")
    const existing = await Fs.readFile(file, "utf8").catch(() => undefined)
    if (existing) return existing
    const generated = Crypto.randomBytes(32).toString("base64")
    await Fs.mkdir(Path.dirname(file), { recursive: true })
    await Fs.writeFile(file, generated + "\n", { mode: 0o600 })
    return generated
  })

/**
 * `SEALING_KEY` (base64 of 32 bytes) seals; `SEALING_KEYS_PREVIOUS` (comma
 * separated) still open older secrets after a rotation. Without
 * `SEALING_KEY` a key is generated into `DATA_DIR/sealing-key`.
 */
export const layerConfig: Layer.Layer<Sealer, ConfigError.ConfigError | SealedSecretError> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const configured = yield* Config.option(Config.redacted("SEALING_KEY"))
    const previous = yield* Config.array(Config.string(), "SEALING_KEYS_PREVIOUS").pipe(Config.withDefault([]))
    const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./.data"))
    const encoded = Option.isSome(configured) ? Redacted.value(configured.value) : yield* fromDataDir(dataDir)
    const keys = yield* Effect.try({
      try: () => ({ current: parseKey(encoded), previous: previous.filter((key) => key !== "").map(parseKey) }),
      catch: (error) => new SealedSecretError({ message: `SEALING_KEY: ${(error as Error).message}` })
    })
    return layer(keys.current, keys.previous)
  })
)
