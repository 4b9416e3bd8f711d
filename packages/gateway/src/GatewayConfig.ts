/**
 * The gateway's settings, read through Effect `Config`.
 */
import { Config, type ConfigError, Context, Layer } from "effect"

export interface GatewayConfig {
  /** Concurrent upstream calls per tenant unless the operator set the tenant's own number. */
  readonly streamSlots: number
  /** How long a call waits for a slot before it is answered 429. */
  readonly queueTimeoutMs: number
  /** How long an API key's tenant and a model's resolution are reused (revocations take effect within it). */
  readonly cacheMs: number
  readonly maxBodyBytes: number
}

export const GatewayConfig = Context.GenericTag<GatewayConfig>("@agent-runtime/gateway/GatewayConfig")

export const config: Config.Config<GatewayConfig> = Config.all({
  streamSlots: Config.integer("GATEWAY_STREAM_SLOTS").pipe(
    Config.validate({ message: "Expected at least 1", validation: (n) => n >= 1 }),
    Config.withDefault(16)
  ),
  queueTimeoutMs: Config.number("GATEWAY_QUEUE_TIMEOUT_SECONDS").pipe(
    Config.withDefault(30),
    Config.map((s) => s * 1000)
  ),
  cacheMs: Config.number("GATEWAY_CACHE_SECONDS").pipe(Config.withDefault(10), Config.map((s) => s * 1000)),
  maxBodyBytes: Config.integer("MAX_BODY_BYTES").pipe(Config.withDefault(24 * 1024 * 1024))
})

export const layer: Layer.Layer<GatewayConfig, ConfigError.ConfigError> = Layer.effect(GatewayConfig, config)

/** The defaults, with `overrides`, read from no environment. */
export const layerTest = (overrides: Partial<GatewayConfig> = {}): Layer.Layer<GatewayConfig> =>
  Layer.succeed(GatewayConfig, {
    streamSlots: 16,
    queueTimeoutMs: 30_000,
    cacheMs: 10_000,
    maxBodyBytes: 1 << 24,
    ...overrides
  })
