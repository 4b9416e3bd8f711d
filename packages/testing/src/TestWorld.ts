/**
 * The usual world of an API test: a fake upstream, a fresh database and a
 * real node on it (with ALLOW_PRIVATE_URLS, so tenants can point providers
 * at the fake upstream).
 */
import { Context, Effect, Layer, type Scope } from "effect"
import * as FakeUpstream from "./FakeUpstream.ts"
import * as TestDatabase from "./TestDatabase.ts"
import * as TestNode from "./TestNode.ts"

export interface World {
  readonly node: TestNode.TestNode
  readonly upstream: FakeUpstream.FakeUpstream
  readonly databaseUrl: string
}

export class TestWorld extends Context.Tag("@agent-runtime/testing/TestWorld")<TestWorld, World>() {}

/** `env` may depend on the upstream (a catalog file naming its URL, say). */
export const layer = (
  env: (upstream: FakeUpstream.FakeUpstream) => Effect.Effect<Record<string, string>, never, Scope.Scope> = () =>
    Effect.succeed({})
) =>
  Layer.scoped(
    TestWorld,
    Effect.gen(function*() {
      const upstream = yield* FakeUpstream.start()
      const databaseUrl = yield* TestDatabase.make
      const node = yield* TestNode.start({
        databaseUrl,
        env: { ALLOW_PRIVATE_URLS: "true", ...(yield* env(upstream)) }
      })
      return { node, upstream, databaseUrl }
    })
  )
