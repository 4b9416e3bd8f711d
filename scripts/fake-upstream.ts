/**
 * `node scripts/fake-upstream.ts`: the fake model provider as its own
 * process, for benchmarks and out-of-process tests. Listens on PORT (default
 * 0: a free port), prints `fake-upstream listening http://127.0.0.1:<port>`
 * and runs until SIGTERM/SIGINT. FIXED_LATENCY_MS delays every model answer,
 * TOKEN_DELAY_MS every streamed delta. Steps are queued over HTTP:
 * POST /_fake/script[?model=...], GET /_fake/requests, POST /_fake/reset.
 */
// The module itself, not the package index, which also loads the vitest-only fixtures.
import * as FakeUpstream from "@agent-runtime/testing/FakeUpstream"
import { NodeRuntime } from "@effect/platform-node"
import { Config, Console, Effect } from "effect"

Effect.gen(function*() {
  // Not Config.port, which refuses 0.
  const port = yield* Config.integer("PORT").pipe(
    Config.validate({ message: "a port from 0 to 65535", validation: (n) => n >= 0 && n <= 65535 }),
    Config.withDefault(0)
  )
  const latencyMs = yield* Config.number("FIXED_LATENCY_MS").pipe(Config.withDefault(0))
  const tokenDelayMs = yield* Config.number("TOKEN_DELAY_MS").pipe(Config.withDefault(0))
  const upstream = yield* FakeUpstream.start({ port, latencyMs, tokenDelayMs })
  yield* Console.log(`fake-upstream listening ${upstream.url}`)
  return yield* Effect.never
}).pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
