/**
 * The usual world of an API test: a fake upstream, a fresh database and a
 * real node on it (with ALLOW_PRIVATE_URLS, so tenants can point providers
 * at the fake upstream).
 */
import { Context, Effect, Layer, type Scope } from "effect"
import * as FakeUpstream from "./FakeUpstream.ts"
import * as Http from "./Http.ts"
import * as TestDatabase from "./TestDatabase.ts"
import * as TestNode from "./TestNode.ts"

export interface World {
  readonly node: TestNode.TestNode
  readonly upstream: FakeUpstream.FakeUpstream
  readonly databaseUrl: string
}

export class TestWorld extends Context.Tag("@agent-runtime/testing/TestWorld")<TestWorld, World>() {}

/** `env` may depend on the upstream (a catalog file naming its URL, say) and on other fakes the test provides. */
export const layer = <R = never>(
  env: (upstream: FakeUpstream.FakeUpstream) => Effect.Effect<Record<string, string>, never, R | Scope.Scope> = () =>
    Effect.succeed({})
): Layer.Layer<TestWorld, Error, Exclude<R, Scope.Scope>> =>
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

/**
 * A new tenant whose custom provider `fake` is the fake upstream (model `fake/m1`), with its API key; `login`
 * names whom it belongs to (who signs in to it).
 */
export const tenantWithModel = (
  world: { readonly node: TestNode.TestNode; readonly upstream: FakeUpstream.FakeUpstream },
  name: string,
  options: { readonly login?: string } = {}
) =>
  Effect.gen(function*() {
    const api = Http.client(world.node.rest)
    const tenant = (yield* api.post("/v1/admin/tenants", {
      token: world.node.operatorToken,
      json: { name, ...(options.login === undefined ? {} : { login: options.login }) }
    })).body
    const saved = yield* api.put("/v1/providers/fake", {
      token: tenant.token,
      json: {
        type: "openai-completions",
        baseUrl: `${world.upstream.url}/v1`,
        models: [{ id: "m1", contextWindow: 100_000 }]
      }
    })
    if (saved.status !== 200) return yield* Effect.die(new Error(`saving the fake provider answered ${saved.status}`))
    return { api, token: tenant.token as string, tenantId: tenant.id as string }
  })
