/**
 * The model gateway's listener on GATEWAY_PORT: a plain node:http server
 * whose one request listener is the gateway package's handler, built once
 * in the node's runtime (no per-request router or middleware on the hot
 * path). Closing the scope stops accepting and lets open calls finish;
 * keep-alive connections end from the drain's close on (`Sockets.closingIdle`).
 */
import type { Operator, Tenants, Tokens } from "@agent-runtime/accounts"
import { Drain } from "@agent-runtime/agent"
import type { Ledger } from "@agent-runtime/billing"
import type { Egress } from "@agent-runtime/egress"
import {
  Authenticator,
  Gateway,
  GatewayConfig,
  Slots,
  Targets,
  TenantSettings,
  UsageBatch
} from "@agent-runtime/gateway"
import type { Credentials, Listing, UsageLog } from "@agent-runtime/models"
import type { DatabaseHealth } from "@agent-runtime/store"
import type { SqlClient } from "@effect/sql"
import { type ConfigError, Effect, Layer } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Errors from "./http/Errors.ts"
import * as ServerConfig from "./ServerConfig.ts"
import * as Sockets from "./Sockets.ts"

/** Serves the gateway until the scope closes; its base URL. */
export const serve = Effect.gen(function*() {
  const config = yield* ServerConfig.ServerConfig
  const { handle } = yield* Gateway.Gateway
  const drain = yield* Drain.Drain
  // Its keep-alive connections end once the node drains: one going idle after the close began held it 66 s.
  const server = Sockets.closingIdle(
    Errors.answerClientErrors(Http.createServer({ keepAliveTimeout: 65_000 }, handle), Gateway.clientErrorBody),
    drain.onClose
  )
  yield* Effect.acquireRelease(
    Effect.async<void, Error>((resume) => {
      server.once("error", (error) => resume(Effect.fail(error)))
      server.listen(config.gatewayPort, config.host, () => resume(Effect.void))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeIdleConnections()
      })
  )
  const address = server.address() as AddressInfo
  return `http://${address.address.includes(":") ? `[${address.address}]` : address.address}:${address.port}`
}).pipe(Effect.orDie)

/** The gateway's services; needs the model layer, accounts and the database. */
export const layer: Layer.Layer<
  Gateway.Gateway | UsageBatch.UsageBatch | TenantSettings.TenantSettings | GatewayConfig.GatewayConfig,
  ConfigError.ConfigError,
  | SqlClient.SqlClient
  | DatabaseHealth.DatabaseHealth
  | Egress.Egress
  | Operator.Operator
  | Tenants.Tenants
  | Tokens.Tokens
  | Credentials.Credentials
  | Listing.Listing
  | UsageLog.UsageLog
  | Ledger.Ledger
> = Gateway.layer.pipe(
  Layer.provide(Layer.mergeAll(Authenticator.layer, Targets.layer, Slots.layer)),
  Layer.provideMerge(Layer.mergeAll(UsageBatch.layer, TenantSettings.layer)),
  Layer.provideMerge(GatewayConfig.layer)
)
