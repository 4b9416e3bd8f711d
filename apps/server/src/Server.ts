/**
 * One node: the REST API and the gateway listener over one database. The
 * layer is what `main.ts` runs and what tests start on free ports.
 */
import { Operator, Tenants, Tokens } from "@agent-runtime/accounts"
import { Api } from "@agent-runtime/domain"
import { Egress, Resolver } from "@agent-runtime/egress"
import { Catalog, Credentials, CustomProviders, Keys, KeyScopes, Listing, ModelClient, UsageLog } from "@agent-runtime/models"
import { Database, DatabaseHealth, SealedSecret } from "@agent-runtime/store"
import { HttpApiBuilder, HttpApiScalar, HttpMiddleware, HttpServer } from "@effect/platform"
import { Agents, AgentRuntime, AgentStore, Drain, EventLog, Tools } from "@agent-runtime/agent"
import { RunnerAddress, ShardingConfig, SqlMessageStorage, SqlRunnerStorage } from "@effect/cluster"
import { NodeClusterHttp, NodeHttpServer } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { createServer } from "node:http"
import * as Gateway from "./Gateway.ts"
import * as Admin from "./http/Admin.ts"
import * as AgentsHttp from "./http/Agents.ts"
import * as Clients from "./http/Clients.ts"
import * as Authentication from "./http/Authentication.ts"
import * as Errors from "./http/Errors.ts"
import * as Health from "./http/Health.ts"
import * as Me from "./http/Me.ts"
import * as Models from "./http/Models.ts"
import * as Tokens_ from "./http/Tokens.ts"
import * as Readiness from "./Readiness.ts"
import * as Runners from "./Runners.ts"
import * as ServerConfig from "./ServerConfig.ts"

/** Where the REST API listens, as a base URL. */
export class RestAddress extends Context.Tag("@agent-runtime/server/RestAddress")<RestAddress, string>() {}
/** Where the gateway listens, as a base URL. */
export class GatewayAddress extends Context.Tag("@agent-runtime/server/GatewayAddress")<GatewayAddress, string>() {}

const baseUrl = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress"
    ? `http://${server.address.hostname}:${server.address.port}`
    : `unix:${server.address.path}`)

const listen = (port: (config: ServerConfig.ServerConfig) => number) =>
  Layer.unwrapEffect(
    Effect.map(ServerConfig.ServerConfig, (config) =>
      NodeHttpServer.layer(() => Errors.answerClientErrors(createServer(), Errors.restClientError), {
        port: port(config),
        host: config.host
      }))
  )

const layerApi = HttpApiBuilder.api(Api.Api).pipe(
  Layer.provide([
    Health.layer,
    Me.layer,
    Tokens_.layer,
    Models.layerModels,
    Models.layerProviders,
    Models.layerKeys,
    Models.layerKeyScopes,
    AgentsHttp.layer,
    Clients.layer,
    Admin.layer
  ]),
  Layer.provide([Authentication.layer, Authentication.layerOperator, Authentication.layerAgent])
)

const layerRest = Layer.effect(RestAddress, baseUrl).pipe(
  Layer.provideMerge(HttpApiBuilder.serve(HttpMiddleware.logger)),
  Layer.provide([
    HttpApiBuilder.middlewareOpenApi({ path: "/v1/openapi.json" }),
    HttpApiScalar.layer({ path: "/docs" }),
    Errors.layer
  ]),
  Layer.provide(layerApi),
  Layer.provide(listen((config) => config.port))
)

const layerGateway = Layer.scoped(GatewayAddress, Gateway.serve).pipe(Layer.provide(Gateway.layer))

/** The model layer: catalog, keys, key scopes, custom providers, calls and their usage. */
const layerModels = ModelClient.ModelClient.Default.pipe(
  Layer.provideMerge(Listing.Listing.Default),
  Layer.provideMerge(Credentials.Credentials.Default),
  Layer.provideMerge(Layer.mergeAll(Keys.Keys.Default, KeyScopes.KeyScopes.Default, CustomProviders.CustomProviders.Default)),
  Layer.provideMerge(Layer.mergeAll(Catalog.Catalog.Default, UsageLog.UsageLog.Default)),
  Layer.provideMerge(Layer.mergeAll(Egress.layerConfig.pipe(Layer.provide(Resolver.layer)), SealedSecret.layerConfig))
)

/** The runner's sharding settings, from our configuration and not the environment, whose HOST and PORT are the REST API's. */
const shardingConfigOf = (config: ServerConfig.ServerConfig): Partial<ShardingConfig.ShardingConfig["Type"]> => ({
  runnerAddress: Option.some(RunnerAddress.make(config.runnerAddress.host, config.runnerAddress.port)),
  runnerListenAddress: Option.some(RunnerAddress.make(config.host, config.runnerAddress.port)),
  entityMaxIdleTime: Duration.minutes(5),
  // Crash detection: a runner silent for the lease leaves the ring and its shards move. The lease is
  // renewed three times within it, so one slow renewal under load does not cost a runner its shards.
  shardLockExpiration: Duration.seconds(config.runnerLeaseSeconds),
  shardLockRefreshInterval: Duration.seconds(config.runnerLeaseSeconds / 3),
  refreshAssignmentsInterval: Duration.seconds(1),
  // Handlers still open when an agent closes are reads (event streams, polls, status): turns were handed
  // on before, so they need not hold the shard for long.
  entityTerminationTimeout: Duration.seconds(3),
  shardsPerGroup: Runners.shardsPerGroup
})

const layerShardingConfig = Layer.unwrapEffect(
  Effect.map(ServerConfig.ServerConfig, (config) => ShardingConfig.layer(shardingConfigOf(config)))
)

/** The cluster runner: cluster storage on the node's PostgreSQL, the runner's own HTTP listener at RUNNER_ADDRESS. */
const layerCluster = Layer.unwrapEffect(
  Effect.map(ServerConfig.ServerConfig, (config) =>
    NodeClusterHttp.layer({ transport: "http", storage: "sql", shardingConfig: shardingConfigOf(config) }))
)

/**
 * The cluster's own tables, made before the runner starts and under the
 * startup lock: nodes started together would otherwise race to create them.
 */
const layerClusterTables = Layer.effectDiscard(
  Database.withStartupLock(
    Effect.scoped(
      Layer.build(
        Layer.mergeAll(SqlMessageStorage.layer, SqlRunnerStorage.layer).pipe(Layer.provide(ShardingConfig.layerDefaults))
      )
    )
  )
)

/**
 * Wakes agents with accepted but unfinished work: each agent another node let go with work open (announced
 * on a PostgreSQL channel, so it starts on its next owner at once), and now and then every agent no live
 * runner holds, so nothing accepted is lost.
 */
const layerResumer = Layer.scopedDiscard(
  Effect.gen(function*() {
    const agents = yield* Agents.Agents
    const config = yield* ServerConfig.ServerConfig
    const sql = yield* PgClient.PgClient
    const health = yield* DatabaseHealth.DatabaseHealth
    yield* sql.listen(AgentStore.releasedChannel).pipe(
      Stream.runForEach((agentId) => Effect.fork(agents.wakeReleased(agentId, config.runnerLeaseSeconds))),
      // A listener whose connection died with the database hears nothing more, and never fails (the driver
      // drops that connection's errors): it listens anew, on a new connection, once the database is back.
      Effect.raceFirst(health.lost),
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("listening for released agents failed")),
      Effect.zipRight(Effect.sleep(Duration.seconds(1))),
      Effect.forever,
      Effect.forkScoped
    )
    yield* agents.wakeOpenWork(config.runnerLeaseSeconds).pipe(
      Effect.catchAllCause(DatabaseHealth.warnUnlessUnreachable("waking agents failed")),
      Effect.repeat(Schedule.spaced(Duration.seconds(config.runnerLeaseSeconds / 2))),
      Effect.forkScoped
    )
  })
)

/** The agent runtime: the entity on this runner and the service the API calls. */
const layerAgents = layerResumer.pipe(
  Layer.provideMerge(Layer.mergeAll(Agents.Agents.Default, Runners.Runners.Default)),
  Layer.provideMerge(AgentRuntime.layer),
  Layer.provideMerge(Layer.mergeAll(EventLog.LocalLogs.Default, Tools.Tools.Default)),
  Layer.provide(layerCluster),
  Layer.provide(layerClusterTables),
  Layer.provide(layerShardingConfig),
  // Below the cluster runner, so it closes after the runner has let its shards go.
  Layer.provideMerge(AgentRuntime.layerReleaseAnnouncements),
  Layer.provideMerge(Layer.mergeAll(AgentStore.AgentStore.Default, Drain.Drain.Default))
)

/** Everything a node needs but its configuration, logger and database. */
const layerServices = layerAgents.pipe(
  Layer.provideMerge(Layer.mergeAll(Tenants.Tenants.Default, Tokens.Tokens.Default, Operator.layerConfig, layerModels))
)

/** The node's database, its sessions named for the runner so a stale runner's can be told apart. */
const layerDatabase = Layer.unwrapEffect(
  Effect.map(ServerConfig.ServerConfig, (config) =>
    Database.layerConfig({ applicationName: Runners.sessionName(Runners.addressOf(config)) }))
)

export const layer = Readiness.layerServing.pipe(
  Layer.provideMerge(Layer.mergeAll(layerRest, layerGateway)),
  Layer.provide(layerServices),
  // Whether the node reaches its database: readiness, the runner listing, and event streams told to move on.
  Layer.provideMerge(Layer.mergeAll(Readiness.Readiness.Default, DatabaseHealth.layer)),
  Layer.provide(layerDatabase),
  Layer.provideMerge(ServerConfig.layer)
)
