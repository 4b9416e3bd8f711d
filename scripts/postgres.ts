/**
 * `npm run postgres`: a standalone embedded PostgreSQL under DATA_DIR
 * (default ./.data/shared), for several local nodes to share. Prints the
 * DATABASE_URL to give them and runs until interrupted.
 */
import { EmbeddedPostgres } from "@agent-runtime/store"
import { NodeRuntime } from "@effect/platform-node"
import { Config, Console, Effect, Redacted } from "effect"

Effect.gen(function*() {
  const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./.data/shared"))
  const server = yield* EmbeddedPostgres.start({ dataDir })
  yield* Console.log(`DATABASE_URL=${Redacted.value(server.url)}`)
  return yield* Effect.never
}).pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
