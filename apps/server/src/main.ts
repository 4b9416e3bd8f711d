/**
 * `npm start`: one node, on the database at DATABASE_URL or an embedded one.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer } from "effect"
import * as Logging from "./Logging.ts"
import * as Server from "./Server.ts"

const main = Effect.gen(function*() {
  const rest = yield* Server.RestAddress
  const gateway = yield* Server.GatewayAddress
  yield* Console.log(`agent-runtime ready rest=${rest} gateway=${gateway}`)
  return yield* Effect.never
})

main.pipe(
  Effect.provide(Server.layer.pipe(Layer.provide(Logging.layer))),
  Effect.provide(Logging.layer),
  NodeRuntime.runMain({ disablePrettyLogger: true })
)
