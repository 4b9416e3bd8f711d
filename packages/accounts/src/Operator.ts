/**
 * The operator token: tenant administration, and acting for any tenant that
 * a request names. Given as `OPERATOR_TOKEN`, or generated once into the
 * data directory for development.
 */
import { Config, type ConfigError, Effect, Layer, Option, Redacted } from "effect"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import * as Secret from "./internal/secret.ts"

export const operatorTokenPrefix = "aro_"

export class Operator extends Effect.Tag("@agent-runtime/accounts/Operator")<Operator, {
  readonly verify: (secret: string) => boolean
}>() {}

export const make = (token: Redacted.Redacted<string>) => {
  const expected = Secret.hash(Redacted.value(token))
  return Operator.of({ verify: (secret) => Secret.matches(secret, expected) })
}

export const layer = (token: Redacted.Redacted<string>): Layer.Layer<Operator> => Layer.succeed(Operator, make(token))

/** Reads the token kept in `dataDir`, making one on first start. */
const fromDataDir = (dataDir: string) =>
  Effect.promise(async () => {
    const file = Path.join(Path.resolve(dataDir), "operator-token")
    const existing = await Fs.readFile(file, "utf8").then((text) => text.trim(), () => undefined)
    if (existing) return { token: existing, generated: false }
    const token = Secret.generate(operatorTokenPrefix)
    await Fs.mkdir(Path.dirname(file), { recursive: true })
    await Fs.writeFile(file, token + "\n", { mode: 0o600 })
    return { token, generated: true }
  })

/** `layer` with OPERATOR_TOKEN, else the token kept in DATA_DIR (made on first start). */
export const layerConfig: Layer.Layer<Operator, ConfigError.ConfigError> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const configured = yield* Config.option(Config.redacted("OPERATOR_TOKEN"))
    if (Option.isSome(configured)) return layer(configured.value)
    const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./.data"))
    const { generated, token } = yield* fromDataDir(dataDir)
    // Development convenience: the token is in the data directory anyway; production sets OPERATOR_TOKEN.
    process.stdout.write(`operator token (${generated ? "generated" : "from"} ${dataDir}/operator-token): ${token}\n`)
    return layer(Redacted.make(token))
  })
)
