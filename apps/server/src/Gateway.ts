/**
 * The model gateway's listener on GATEWAY_PORT: a plain node:http server
 * whose one request listener is the gateway package's handler, built once
 * in the node's runtime (no per-request router or middleware on the hot
 * path). Closing the scope stops accepting and lets open calls finish;
 * keep-alive connections end from the drain's close on (`Sockets.closingIdle`).
 */
import { Drain } from "@agent-runtime/agent"
import {
  Authenticator,
  Gateway,
  GatewayConfig,
  Slots,
  Targets,
  TenantSettings,
  UsageBatch
} from "@agent-runtime/gateway"
import { Effect, Layer } from "effect"
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
export const layer = Gateway.Gateway.Default.pipe(
  Layer.provide(Layer.mergeAll(Authenticator.Authenticator.Default, Targets.Targets.Default, Slots.Slots.Default)),
  Layer.provideMerge(Layer.mergeAll(UsageBatch.UsageBatch.Default, TenantSettings.TenantSettings.Default)),
  Layer.provideMerge(GatewayConfig.layer)
)
