/**
 * The node's settings, read from the environment through Effect `Config`.
 */
import type { Option } from "effect"
import { Config, ConfigError, Context, Either, Layer } from "effect"

export interface ServerConfig {
  readonly port: number
  readonly gatewayPort: number
  readonly host: string
  readonly publicUrl: Option.Option<string>
  readonly dataDir: string
  /** Largest request body accepted; initialMessages alone may be 16 MB of JSON. */
  readonly maxBodyBytes: number
  /** host:port other runners reach this node's cluster runner at. */
  readonly runnerAddress: { readonly host: string; readonly port: number }
  /** How long a stopping node reports draining on /readyz while it still serves. */
  readonly drainGraceSeconds: number
  /** How long a stopping node waits for running turns to finish their current step before it hands them on. */
  readonly drainTimeoutSeconds: number
  /**
   * How long a drained node may take to close its servers, let its shards go and close its database before
   * it exits regardless (its turns were handed on; anything it still held is taken over as after a crash).
   */
  readonly stopTimeoutSeconds: number
  /** How long a silent runner keeps its shards: the crash detection time. */
  readonly runnerLeaseSeconds: number
}

export const ServerConfig = Context.GenericTag<ServerConfig>("@agent-runtime/server/ServerConfig")

/** A TCP port; 0 picks a free one (tests and scripts read the ready line). */
const port = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: "Expected a port from 0 to 65535", validation: (n) => n >= 0 && n <= 65535 }),
    Config.withDefault(fallback)
  )

export const config: Config.Config<ServerConfig> = Config.all({
  port: port("PORT", 8787),
  gatewayPort: port("GATEWAY_PORT", 8788),
  host: Config.string("HOST").pipe(Config.withDefault("127.0.0.1")),
  publicUrl: Config.option(Config.url("PUBLIC_URL").pipe(Config.map((url) => url.href.replace(/\/$/, "")))),
  dataDir: Config.string("DATA_DIR").pipe(Config.withDefault("./.data")),
  runnerAddress: Config.string("RUNNER_ADDRESS").pipe(
    Config.withDefault("127.0.0.1:8789"),
    Config.mapOrFail((address) => {
      const colon = address.lastIndexOf(":")
      const port = Number(address.slice(colon + 1))
      return colon > 0 && Number.isInteger(port) && port > 0 && port < 65536
        ? Either.right({ host: address.slice(0, colon).replace(/^\[|\]$/g, ""), port })
        : Either.left(ConfigError.InvalidData(["RUNNER_ADDRESS"], "Expected host:port"))
    })
  ),
  drainGraceSeconds: Config.number("DRAIN_GRACE_SECONDS").pipe(Config.withDefault(0)),
  drainTimeoutSeconds: Config.number("DRAIN_TIMEOUT_SECONDS").pipe(Config.withDefault(30)),
  stopTimeoutSeconds: Config.number("STOP_TIMEOUT_SECONDS").pipe(Config.withDefault(10)),
  runnerLeaseSeconds: Config.number("RUNNER_LEASE_SECONDS").pipe(
    Config.validate({ message: "Expected at least 3 seconds", validation: (n) => n >= 3 }),
    Config.withDefault(6)
  ),
  maxBodyBytes: Config.integer("MAX_BODY_BYTES").pipe(Config.withDefault(24 * 1024 * 1024))
})

export const layer: Layer.Layer<ServerConfig, ConfigError.ConfigError> = Layer.effect(ServerConfig, config)
