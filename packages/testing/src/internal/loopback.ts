import { Effect, type Scope } from "effect"
import type * as Http from "node:http"
import type { AddressInfo } from "node:net"

/** Listens on a free port of 127.0.0.1 for the scope, closing every connection at its end; its base URL. */
export const listen = (server: Http.Server): Effect.Effect<string, never, Scope.Scope> =>
  Effect.gen(function*() {
    yield* Effect.async<void>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.void))
    })
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
    )
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
