/**
 * One node: the REST API and the gateway listener over one database. The
 * layer is what `main.ts` runs and what tests start on free ports.
 */
import { ConsoleSessions, Operator, Tenants, Tokens } from "@agent-runtime/accounts"
import {
  AgentEvents,
  AgentFiles,
  AgentRuntime,
  Agents,
  AgentStore,
  AgentTokens,
  Arrivals,
  BrowserTokens,
  Definitions,
  Delegation,
  Drain,
  FileNotices,
  Inputs,
  LocalAgents,
  type RunnerReports,
  Runs,
  ScheduleFiring,
  Schedules,
  Settlements,
  Tools,
  Wakeups
} from "@agent-runtime/agent"
import { AutoTopups, BillingEvents, Ledger, Payments, Purchases, Rates } from "@agent-runtime/billing"
import { Api } from "@agent-runtime/domain"
import { Egress, Resolver } from "@agent-runtime/egress"
import { ContentStore, Downloads, StorageCharges, Volumes } from "@agent-runtime/files"
import { IdentityTokens } from "@agent-runtime/identity"
import { HostedMcp } from "@agent-runtime/mcp"
import {
  Catalog,
  Credentials,
  CustomProviders,
  Keys,
  KeyScopes,
  Listing,
  ModelClient,
  UsageLog,
  WebSearch
} from "@agent-runtime/models"
import { AuthorizationServer, OAuthGrants, SignIn } from "@agent-runtime/oauth"
import {
  Database,
  DatabaseHealth,
  type EmbeddedPostgres,
  type PersistenceError,
  SealedSecret
} from "@agent-runtime/store"
import { TelemetrySettings, TraceExport } from "@agent-runtime/telemetry"
import { ToolSources } from "@agent-runtime/toolsources"
import { WebhookDelivery, WebhookEndpoints } from "@agent-runtime/webhooks"
import {
  HttpRunner,
  RunnerAddress,
  RunnerHealth,
  Runners as ClusterRunners,
  ShardingConfig,
  SqlMessageStorage,
  SqlRunnerStorage
} from "@effect/cluster"
import {
  HttpApiBuilder,
  HttpApiScalar,
  HttpMiddleware,
  HttpRouter,
  HttpServer,
  type HttpServerError
} from "@effect/platform"
import { NodeHttpServer, NodeSocket } from "@effect/platform-node"
import { RpcSerialization } from "@effect/rpc"
import type { MigrationError } from "@effect/sql/Migrator"
import type { SqlError } from "@effect/sql/SqlError"
import { type ConfigError, Context, Deferred, Duration, Effect, Layer, Option } from "effect"
import * as Http from "node:http"
import * as Gateway from "./Gateway.ts"
import * as Admin from "./http/Admin.ts"
import * as AgentsHttp from "./http/Agents.ts"
import * as Authentication from "./http/Authentication.ts"
import * as BillingHttp from "./http/Billing.ts"
import * as Clients from "./http/Clients.ts"
import * as ConsoleHttp from "./http/Console.ts"
import * as Cors from "./http/Cors.ts"
import * as DefinitionsHttp from "./http/Definitions.ts"
import * as Errors from "./http/Errors.ts"
import * as Health from "./http/Health.ts"
import * as HotRoutes from "./http/HotRoutes.ts"
import * as InputsHttp from "./http/Inputs.ts"
import * as McpHttp from "./http/Mcp.ts"
import * as Me from "./http/Me.ts"
import * as MetricsHttp from "./http/Metrics.ts"
import * as Models from "./http/Models.ts"
import * as OAuthHttp from "./http/OAuth.ts"
import * as OAuthGrantsHttp from "./http/OAuthGrants.ts"
import * as Page from "./http/Page.ts"
import * as RunsHttp from "./http/Runs.ts"
import * as SchedulesHttp from "./http/Schedules.ts"
import * as TelemetryHttp from "./http/Telemetry.ts"
import * as Tokens_ from "./http/Tokens.ts"
import * as VolumesHttp from "./http/Volumes.ts"
import * as WebhooksHttp from "./http/Webhooks.ts"
import * as WellKnown from "./http/WellKnown.ts"
import * as Metrics from "./Metrics.ts"
import { migrations } from "./Migrations.ts"
import * as OtelResource from "./OtelResource.ts"
import * as Readiness from "./Readiness.ts"
import * as Runners from "./Runners.ts"
import * as ServerConfig from "./ServerConfig.ts"
import * as Sockets from "./Sockets.ts"
import * as Tracing from "./Tracing.ts"

/** Where the REST API listens, as a base URL. */
export class RestAddress extends Context.Tag("@agent-runtime/server/RestAddress")<RestAddress, string>() {}
/**
 * Where the REST API listens, once it does: what links to presented files point at when PUBLIC_URL is not
 * set (services are made before the listener, and the port may be chosen by the system).
 */
export class RestBase extends Context.Tag("@agent-runtime/server/RestBase")<RestBase, Deferred.Deferred<string>>() {}
/** Where the gateway listens, as a base URL. */
export class GatewayAddress extends Context.Tag("@agent-runtime/server/GatewayAddress")<GatewayAddress, string>() {}

const baseUrl = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress"
    ? `http://${server.address.hostname}:${server.address.port}`
    : `unix:${server.address.path}`)

/** The REST listener: the hot routes first (see HotRoutes), then the API. */
const listenRest = Layer.unwrapEffect(
  Effect.map(
    Effect.all([ServerConfig.ServerConfig, HotRoutes.HotRoutes, Drain.Drain]),
    ([config, hot, drain]) =>
      NodeHttpServer.layer(
        () =>
          Sockets.closingIdle(
            Errors.answerClientErrors(HotRoutes.server(hot), Errors.restClientError),
            drain.onClose
          ),
        { port: config.port, host: config.host }
      )
  )
).pipe(Layer.provide(HotRoutes.layer))

const layerApi = HttpApiBuilder.api(Api.Api).pipe(
  Layer.provide([
    Health.layer,
    Me.layer,
    Tokens_.layer,
    OAuthGrantsHttp.layer,
    Models.layerModels,
    Models.layerProviders,
    Models.layerKeys,
    Models.layerKeyScopes,
    AgentsHttp.layer,
    RunsHttp.layer,
    DefinitionsHttp.layer,
    InputsHttp.layer,
    SchedulesHttp.layer,
    Clients.layer,
    Admin.layer,
    VolumesHttp.layer,
    VolumesHttp.layerClientFiles,
    VolumesHttp.layerDownloads,
    WebhooksHttp.layer,
    TelemetryHttp.layer,
    BillingHttp.layer,
    BillingHttp.layerNotices,
    WellKnown.layer
  ]),
  Layer.provide([Authentication.layer, Authentication.layerOperator, Authentication.layerAgent])
)

/**
 * The router refuses no path segment for its length (find-my-way's default `maxParamLength` is 100, and a
 * longer one answered 404 "no route"): node's limit on a request's head already bounds a URL, and each route's
 * own rules judge its segments, e.g. an upload's name and request id, up to `FilePath.maxSegmentBytes` (400
 * naming the limit above it).
 */
const routerConfig = HttpRouter.setRouterConfig({ maxParamLength: Http.maxHeaderSize })

/**
 * The REST API served on whatever `HttpServer` it is given: the node's own
 * listener in `layer`, `NodeHttpServer.layerTest` in tests that call it in
 * process. Needs the services of `layerServicesOn`.
 */
export const layerRestApp: Layer.Layer<
  never,
  never,
  | HttpServer.HttpServer
  | HttpRouter.HttpRouter.DefaultServices
  | ServerConfig.ServerConfig
  | RestBase
  | Readiness.Readiness
  | DatabaseHealth.DatabaseHealth
  | Operator.Operator
  | Tenants.Tenants
  | Tokens.Tokens
  | IdentityTokens.IdentityTokens
  | WebhookEndpoints.WebhookEndpoints
  | WebhookDelivery.WebhookDelivery
  | TelemetrySettings.TelemetrySettings
  | TraceExport.TraceExport
  | Ledger.Ledger
  | HostedMcp.HostedMcp
  | ConsoleSessions.ConsoleSessions
  | OAuthGrants.OAuthGrants
  | AuthorizationServer.AuthorizationServer
  | SignIn.SignIn
  | SealedSecret.Sealer
  | Purchases.Purchases
  | AutoTopups.AutoTopups
  | UsageLog.UsageLog
  | Volumes.Volumes
  | Downloads.Downloads
  | Listing.Listing
  | Keys.Keys
  | KeyScopes.KeyScopes
  | CustomProviders.CustomProviders
  | Agents.Agents
  | AgentFiles.AgentFiles
  | Runs.Runs
  | BrowserTokens.BrowserTokens
  | Definitions.Definitions
  | Schedules.Schedules
  | RunnerReports.RunnerReports
  | Metrics.Metrics
> = HttpApiBuilder.serve((app) =>
  Metrics.middleware(HttpMiddleware.logger(Cors.middleware(TelemetryHttp.middleware(app))))
).pipe(
  Layer.provide([
    HttpApiBuilder.middlewareOpenApi({ path: "/v1/openapi.json" }),
    HttpApiScalar.layer({ path: "/docs" }),
    Page.layer,
    ConsoleHttp.layer,
    McpHttp.layer,
    OAuthHttp.layer,
    MetricsHttp.layer,
    Errors.layer
  ]),
  Layer.provide(layerApi),
  Layer.provide(routerConfig),
  // Whatever server it is served on, links to presented files point at it (unless PUBLIC_URL says otherwise).
  Layer.merge(
    Layer.effectDiscard(
      Effect.flatMap(baseUrl, (url) => Effect.flatMap(RestBase, (base) => Deferred.succeed(base, url)))
    )
  )
)

const layerRest = Layer.effect(RestAddress, baseUrl).pipe(
  Layer.provideMerge(layerRestApp),
  Layer.provide(listenRest)
)

const layerGateway = Layer.scoped(GatewayAddress, Gateway.serve).pipe(Layer.provide(Gateway.layer))

/** The model layer: catalog, keys, key scopes, custom providers, calls and their usage. */
const layerModels = ModelClient.layer.pipe(
  Layer.provideMerge(Listing.layer),
  Layer.provideMerge(Credentials.layer),
  Layer.provideMerge(Layer.mergeAll(Keys.layer, KeyScopes.layer, CustomProviders.layer)),
  Layer.provideMerge(Layer.mergeAll(Catalog.layer, UsageLog.layer, Ledger.layer)),
  Layer.provideMerge(Layer.mergeAll(Rates.layerConfig, Payments.layerConfig)),
  Layer.provideMerge(Layer.mergeAll(Egress.layerConfig.pipe(Layer.provide(Resolver.layer)), SealedSecret.layerConfig))
)

/** The runner's sharding settings, from our configuration and not the environment, whose HOST and PORT are the REST API's. */
const shardingConfigOf = (config: ServerConfig.ServerConfig): Partial<ShardingConfig.ShardingConfig["Type"]> => ({
  runnerAddress: Option.some(RunnerAddress.make(config.runnerAddress.host, config.runnerAddress.port)),
  runnerListenAddress: Option.some(RunnerAddress.make(config.host, config.runnerAddress.port)),
  entityMaxIdleTime: Duration.minutes(5),
  // Crash detection: a runner silent for the lease leaves the ring and its shards move. The lease is renewed
  // five times within it, each renewal given a fifth of it. One that fails or is slower (its lock connection is
  // then opened anew) lets the shards go only once the lease could run out before the next reports (our
  // @effect/cluster patch); before, the first one did, and under load that moved agents that lost nothing.
  shardLockExpiration: Duration.seconds(config.runnerLeaseSeconds),
  shardLockRefreshInterval: Duration.seconds(config.runnerLeaseSeconds / 5),
  refreshAssignmentsInterval: Duration.seconds(1),
  // Handlers still open when an agent closes are reads (event streams, polls, status): turns were handed
  // on before, so they need not hold the shard for long.
  entityTerminationTimeout: Duration.seconds(3),
  shardsPerGroup: Runners.shardsPerGroup,
  // A message to an agent on this node is handed over as it is, not encoded and decoded on the way: the
  // payload is already its schema's type (the client makes it with the schema), and the round trip cost
  // every turn's prompt a schema encode and decode. Messages to other runners are serialized as before.
  simulateRemoteSerialization: false
})

const layerShardingConfig = Layer.unwrapEffect(
  Effect.map(ServerConfig.ServerConfig, (config) => ShardingConfig.layer(shardingConfigOf(config)))
)

/**
 * The cluster runner: cluster storage on the node's PostgreSQL, the runner's own listener at RUNNER_ADDRESS.
 * Runners keep a WebSocket to each other rather than making an HTTP request per message (a third less CPU
 * per turn sent through another runner). What `NodeClusterHttp.layer({ transport: "websocket", storage: "sql" })`
 * makes, but for the listener: it closes the other runners' WebSockets when it closes (after the runner has let
 * its shards go and left the cluster), rather than waiting until each of them notices, which held a drained
 * node's exit for seconds (their health-check client keeps its socket for minutes).
 */
const layerCluster = Layer.unwrapEffect(
  Effect.map(ServerConfig.ServerConfig, (config) => {
    const listener = NodeHttpServer.layer(() => Sockets.closingAll(Http.createServer()), {
      host: config.host,
      port: config.runnerAddress.port
    })
    const health = RunnerHealth.layerPing.pipe(
      Layer.provide(ClusterRunners.layerRpc),
      Layer.provide(HttpRunner.layerClientProtocolWebsocketDefault)
    )
    return HttpRunner.layerWebsocket.pipe(
      Layer.provide(listener),
      Layer.provide(health),
      Layer.provide(NodeSocket.layerWebSocketConstructor),
      Layer.provideMerge(Layer.orDie(SqlMessageStorage.layer)),
      Layer.provide(Layer.orDie(SqlRunnerStorage.layer)),
      Layer.provide(ShardingConfig.layer(shardingConfigOf(config))),
      Layer.provide(RpcSerialization.layerMsgPack)
    )
  })
)

/**
 * The cluster's own tables, made before the runner starts and under the
 * startup lock: nodes started together would otherwise race to create them.
 */
const layerClusterTables = Layer.effectDiscard(
  Database.withStartupLock(
    Effect.scoped(
      Layer.build(
        Layer.mergeAll(SqlMessageStorage.layer, SqlRunnerStorage.layer).pipe(
          Layer.provide(ShardingConfig.layerDefaults)
        )
      )
    )
  )
)

/** Wakes agents with accepted but unfinished work, on the cluster's lease. */
const layerWakeups = Layer.unwrapEffect(
  Effect.map(ServerConfig.ServerConfig, (config) => Wakeups.layer({ leaseSeconds: config.runnerLeaseSeconds }))
)

/** The node's cluster runner with its settings, its tables made first. */
const layerClusterRunner = layerCluster.pipe(Layer.provide(layerClusterTables), Layer.provideMerge(layerShardingConfig))

/** The agent runtime: the entity on `cluster`'s runner and the service the API calls. */
const layerAgentsOn = <ROut, E, RIn>(cluster: Layer.Layer<ROut, E, RIn>) =>
  Layer.mergeAll(
    layerWakeups,
    Arrivals.layer,
    ScheduleFiring.layer,
    Inputs.layerExpiry,
    FileNotices.layer,
    Runs.layerSweep
  ).pipe(
    Layer.provideMerge(Layer.mergeAll(Agents.layer, Runs.layer, BrowserTokens.layer, Runners.layer, AgentFiles.layer)),
    Layer.provideMerge(Layer.mergeAll(AgentEvents.layer, AgentTokens.layer)),
    Layer.provideMerge(AgentRuntime.layer),
    Layer.provideMerge(Layer.mergeAll(Metrics.layerLocalLogs, Tools.layer, Settlements.layer)),
    Layer.provideMerge(Layer.mergeAll(ToolSources.layer(), WebSearch.layerConfig, Delegation.layer)),
    Layer.provide(cluster),
    // Below the cluster runner, so it closes after the runner has let its shards go.
    Layer.provideMerge(AgentRuntime.layerReleaseAnnouncements),
    Layer.provideMerge(Inputs.layer),
    Layer.provideMerge(
      Layer.mergeAll(AgentStore.layer, Metrics.layerDrain, Definitions.layer, Schedules.layer, LocalAgents.layer)
    )
  )

/** Webhook senders, holding their endpoints' leases under the runner's address. */
const layerWebhookDelivery = Layer.unwrapEffect(
  Effect.map(
    ServerConfig.ServerConfig,
    (config) => WebhookDelivery.layerConfig({ holder: `${config.runnerAddress.host}:${config.runnerAddress.port}` })
  )
)

/** Volumes, and links to presented files rooted at PUBLIC_URL, else at the REST listener. */
const layerFiles = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* ServerConfig.ServerConfig
    const restBase = yield* RestBase
    return Downloads.layer(
      Option.match(config.publicUrl, { onNone: () => Deferred.await(restBase), onSome: Effect.succeed })
    )
  })
).pipe(
  Layer.provideMerge(Volumes.layerConfig.pipe(Layer.provide(ContentStore.layer))),
  Layer.provideMerge(Layer.effect(RestBase, Deferred.make<string>()))
)

/** Buying credit, the buyer sent back to the console under PUBLIC_URL (else the REST listener); top-ups swept. */
const layerPurchases = AutoTopups.layerSweep.pipe(
  Layer.provideMerge(AutoTopups.layer),
  Layer.provideMerge(Layer.unwrapEffect(
    Effect.gen(function*() {
      const config = yield* ServerConfig.ServerConfig
      const restBase = yield* RestBase
      return Purchases.layer({
        baseUrl: Option.match(config.publicUrl, { onNone: () => Deferred.await(restBase), onSome: Effect.succeed })
      })
    })
  ))
)

/** The account's MCP server at /mcp, calling this node's own REST listener. */
const layerMcp = Layer.unwrapEffect(
  Effect.map(RestBase, (restBase) => HostedMcp.layer({ rest: Deferred.await(restBase) }))
)

/** OAuth for coding agents at /mcp and the console's sign-in, issued under PUBLIC_URL, else the REST listener. */
const layerOAuth = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* ServerConfig.ServerConfig
    const restBase = yield* RestBase
    return AuthorizationServer.layer({
      issuer: Option.match(config.publicUrl, { onNone: () => Deferred.await(restBase), onSome: Effect.succeed })
    })
  })
).pipe(Layer.merge(SignIn.layerConfig))

/** The operator's metrics, scraped at `GET /v1/admin/metrics`. */
const layerMetrics = Metrics.layer.pipe(Layer.provide(OtelResource.layer))

/** Tenants' trace export: settings and the per-node exporter. */
const layerTelemetry = TraceExport.layer().pipe(Layer.provideMerge(TelemetrySettings.layer))

/**
 * Everything a node needs but its configuration, logger and database, on a
 * cluster runner (Sharding, the cluster's Runners, ShardingConfig): the
 * node's own in `layer`; the cluster's in-memory `TestRunner` in tests.
 */
export const layerServicesOn = <ROut, E, RIn>(cluster: Layer.Layer<ROut, E, RIn>) =>
  layerMetrics.pipe(
    Layer.provideMerge(layerAgentsOn(cluster)),
    Layer.provideMerge(Layer.mergeAll(layerPurchases, layerMcp, layerOAuth)),
    Layer.provideMerge(
      Layer.mergeAll(
        WebhookEndpoints.layer,
        layerWebhookDelivery,
        layerFiles,
        layerTelemetry,
        BillingEvents.layer,
        StorageCharges.layer
      )
    ),
    Layer.provideMerge(
      Layer.mergeAll(
        Tenants.layer,
        Tokens.layer,
        ConsoleSessions.layer,
        OAuthGrants.layer,
        Operator.layerConfig,
        IdentityTokens.layerConfig.pipe(Layer.provide(SealedSecret.layerConfig)),
        layerModels
      )
    )
  )

const layerServices = layerServicesOn(layerClusterRunner)

/**
 * The node's database, migrated under the startup lock before anything uses
 * it, its sessions named for the runner so a stale runner's can be told apart.
 */
const layerDatabase = Layer.unwrapEffect(
  Effect.map(
    ServerConfig.ServerConfig,
    (config) => Database.layerConfig({ applicationName: Runners.sessionName(config), migrations })
  )
)

/** A node: its configuration, database, services, REST API and gateway, ready once they all are. */
export const layer: Layer.Layer<
  ServerConfig.ServerConfig | DatabaseHealth.DatabaseHealth | Readiness.Readiness | RestAddress | GatewayAddress,
  | EmbeddedPostgres.EmbeddedPostgresError
  | MigrationError
  | SqlError
  | ConfigError.ConfigError
  | PersistenceError.PersistenceError
  | SealedSecret.SealedSecretError
  | Catalog.CatalogError
  | HttpServerError.ServeError
> = Readiness.layerServing.pipe(
  Layer.provideMerge(Layer.mergeAll(layerRest, layerGateway)),
  Layer.provide(layerServices),
  // Whether the node reaches its database: readiness, the runner listing, and event streams told to move on.
  Layer.provideMerge(Layer.mergeAll(Readiness.layer, DatabaseHealth.layer)),
  Layer.provide(layerDatabase),
  // Beneath everything it traces, so it is installed first and closed last: the spans the others end with as
  // they close are still flushed.
  Layer.provide(Tracing.layer),
  Layer.provideMerge(ServerConfig.layer)
)
