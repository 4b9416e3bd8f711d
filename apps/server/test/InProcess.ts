/**
 * The node in process, for server tests that need no processes: the server's
 * own `HttpApi` layer and services (`Server.layerRestApp` over
 * `Server.layerServicesOn`), served by `NodeHttpServer.layerTest` and called
 * through a client typed from the domain's `Api`, on a test database. The
 * cluster runner is the cluster's in-memory `TestRunner` instead of the
 * node's HTTP runner; the model is the fake upstream (`Upstream`), reached
 * through the real model client as a tenant's custom provider. Faults,
 * drains and several nodes need real processes: those suites use TestNode.
 */
import { Api, Provider, Tenant } from "@agent-runtime/domain"
import { Database, DatabaseHealth } from "@agent-runtime/store"
import { FakeUpstream, TestDatabase } from "@agent-runtime/testing"
import { ShardingConfig, TestRunner } from "@effect/cluster"
import { HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Context, Effect, Layer, Logger, LogLevel, Redacted } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { migrations } from "../src/Migrations.ts"
import * as Readiness from "../src/Readiness.ts"
import * as Server from "../src/Server.ts"
import * as ServerConfig from "../src/ServerConfig.ts"

export const operatorToken = `aro_${Crypto.randomBytes(32).toString("base64url")}`

/** The fake model provider, for tests to script. */
export class Upstream extends Context.Tag("test/Upstream")<Upstream, FakeUpstream.FakeUpstream>() {}

/** The node's settings: a known operator token, a fresh data directory, and private URLs for the fake provider. */
const ConfigLive = Layer.unwrapScoped(
  Effect.gen(function*() {
    const dataDir = yield* Effect.acquireRelease(
      Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "http-contract-"))),
      (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
    )
    return Layer.setConfigProvider(ConfigProvider.fromMap(
      new Map([
        ["OPERATOR_TOKEN", operatorToken],
        ["SEALING_KEY", Crypto.randomBytes(32).toString("base64")],
        ["DATA_DIR", dataDir],
        ["ALLOW_PRIVATE_URLS", "true"]
      ])
    ))
  })
)

const DatabaseLive = Layer.unwrapEffect(
  Effect.map(TestDatabase.make, (url) => Database.layerClient(Redacted.make(url), { migrations }))
)

/** The node; its services and database client are the tests' too (to run a sweep, or age a row). */
export const ServerLive = Server.layerRestApp.pipe(
  Layer.provideMerge(Server.layerServicesOn(Layer.mergeAll(TestRunner.layer, ShardingConfig.layer()))),
  Layer.provide(Layer.mergeAll(Readiness.layer, DatabaseHealth.layer)),
  Layer.provideMerge(DatabaseLive),
  Layer.provide(ServerConfig.layer),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.merge(Layer.scoped(Upstream, FakeUpstream.start())),
  Layer.provide(ConfigLive),
  Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))
)

/** The API's typed client, sending `token` as the bearer (and the tenant header, for the operator acting for one). */
export const clientFor = (token: string, headers: Record<string, string> = {}) =>
  HttpApiClient.make(Api.Api, {
    transformClient: HttpClient.mapRequest((request) =>
      request.pipe(HttpClientRequest.bearerToken(token), HttpClientRequest.setHeaders(headers))
    )
  })

/** A raw request with `token` (none when not given), answering its status and JSON body: for the wire shape of errors. */
export const raw = (request: HttpClientRequest.HttpClientRequest, token?: string) =>
  Effect.gen(function*() {
    const response = yield* HttpClient.execute(
      token === undefined ? request : HttpClientRequest.bearerToken(request, token)
    )
    return { status: response.status, body: yield* response.json }
  })

/** A new tenant (made with the operator token) whose custom provider `fake` is the fake upstream. */
export const tenantWithModel = (name: string) =>
  Effect.gen(function*() {
    const upstream = yield* Upstream
    const operator = yield* clientFor(operatorToken)
    const tenant = yield* operator.admin.createTenant({ payload: new Tenant.TenantInput({ name }) })
    const api = yield* clientFor(tenant.token)
    yield* api.providers.put({
      path: { name: "fake" },
      payload: new Provider.CustomProviderInput({
        type: "openai-completions",
        baseUrl: `${upstream.url}/v1`,
        models: [new Provider.CustomModel({ id: "m1", contextWindow: 100_000 })]
      })
    })
    return { tenant, api }
  })
