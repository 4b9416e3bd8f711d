import { Agents, BrowserTokens } from "@agent-runtime/agent"
import { Agent, Api, Auth, Session } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup, HttpServerResponse } from "@effect/platform"
import { type Context, Duration, Effect, type Layer, Option } from "effect"
import { ServerConfig } from "../ServerConfig.ts"
import * as Paging from "./Paging.ts"

/** Version of the event stream's frames, sent in the ready frame. */
export const streamVersion = 1

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "agents">,
  never,
  Auth.Authentication | Agents.Agents | BrowserTokens.BrowserTokens
> = HttpApiBuilder.group(Api.Api, "agents", (handlers) =>
  Effect.gen(function*() {
    const agents = yield* Agents.Agents
    const browserTokens = yield* BrowserTokens.BrowserTokens
    // Where browsers reach the runtime, when the node is told (PUBLIC_URL).
    const publicUrl = Option.flatMap(yield* Effect.serviceOption(ServerConfig), (config) => config.publicUrl)
    const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)
    return handlers
      .handle("create", ({ headers, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.create(tenantId, payload, Option.fromNullable(headers["idempotency-key"]))))
      .handle("list", ({ urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.flatMap(agents.list(tenantId, urlParams), (page) =>
            Paging.answer(page, urlParams))))
      .handle("get", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.detail(tenantId, path.id)))
      .handle("delete", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.remove(tenantId, path.id)))
      .handle("prompt", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.prompt(tenantId, path.id, payload)))
      .handle("fork", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.fork(tenantId, path.id, payload)))
      .handle("continue", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.continueRun(tenantId, path.id, payload)))
      .handle("execute", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.execute(tenantId, path.id, payload)))
      .handle("abort", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.abort(tenantId, path.id, Option.fromNullable(payload.requestId))))
      .handle("configure", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.configure(tenantId, path.id, payload)))
      .handle("mounts", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.mounts(tenantId, path.id)))
      .handle("setMounts", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          // A configure, as POST /v1/agents/{id}/configure with `mounts`; then the mounts it left.
          Effect.zipRight(
            agents.configure(tenantId, path.id, new Agent.ConfigureInput({ mounts: payload.mounts })).pipe(
              // Its request id is a new one, which no other request can have used.
              Effect.catchTag("IdempotencyConflict", Effect.die)
            ),
            agents.mounts(tenantId, path.id)
          )))
      .handle("applyDefinition", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.applyDefinition(tenantId, path.id, payload)))
      .handle("request", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.request(tenantId, path.id, path.requestId, Duration.seconds(urlParams.wait ?? 0))))
      .handle("state", ({ path }) =>
        Effect.flatMap(Auth.CurrentPrincipal, ({ browser, tenantId }) =>
          Effect.map(
            agents.state(tenantId, path.id),
            (state) =>
              browser === undefined ? state : BrowserTokens.viewState(browser, state)
          )))
      .handle("history", ({ path, urlParams }) =>
        Effect.flatMap(Auth.CurrentPrincipal, ({ browser, tenantId }) =>
          Effect.map(
            agents.history(tenantId, path.id, urlParams),
            (page) =>
              browser === undefined ? page : BrowserTokens.viewHistory(browser, page)
          )))
      .handle("upsert", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.upsert(tenantId, path.key, payload)))
      .handle("credentials", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          agents.credentials(tenantId, path.keyOrId)))
      .handle("events", ({ headers, path, urlParams }) =>
        Effect.flatMap(Auth.CurrentPrincipal, ({ browser, tenantId }) => {
          const cursor = Option.fromNullable(headers["last-event-id"])
          const options = { ...urlParams, snapshot: urlParams.snapshot !== undefined }
          return browser === undefined
            ? events(agents, tenantId, path.id, cursor, options)
            : browserEvents(agents, browserTokens, tenantId, browser, cursor, options)
        }))
      .handle("browserToken", ({ path, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.map(browserTokens.issue(tenantId, path.id, payload), (issued) =>
            Option.match(publicUrl, {
              onNone: () =>
                issued,
              onSome: (url) =>
                new Session.BrowserToken({ ...issued, url })
            }))))
  }))

/** The event stream of an agent: one JSON poll, or server-sent events from the cursor on. */
export const sseInit = {
  contentType: "text/event-stream",
  headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
}

export const events = (
  agents: Context.Tag.Service<Agents.Agents>,
  tenantId: string,
  agentId: string,
  cursor: Option.Option<number>,
  options: {
    readonly poll?: string | undefined
    readonly wait?: number | undefined
    /** A cursor behind the buffer gets a snapshot frame instead of 409. */
    readonly snapshot?: boolean
  }
) =>
  Effect.gen(function*() {
    if (options.poll !== undefined) {
      return yield* agents.poll(
        tenantId,
        agentId,
        Option.getOrElse(cursor, () => 0),
        Duration.seconds(options.wait ?? 0)
      )
    }
    const sse = yield* agents.eventBody(tenantId, agentId, cursor, {
      snapshot: options.snapshot ?? false,
      ready: { version: streamVersion, agentId, connection: null }
    })
    return sse._tag === "Node"
      ? HttpServerResponse.raw(sse.body, sseInit)
      : HttpServerResponse.stream(sse.body, sseInit)
  })

/** The event stream as a browser token sees it (see BrowserTokens.frameView). */
const browserEvents = (
  agents: Context.Tag.Service<Agents.Agents>,
  browserTokens: Context.Tag.Service<BrowserTokens.BrowserTokens>,
  tenantId: string,
  grant: Auth.BrowserGrant,
  cursor: Option.Option<number>,
  options: { readonly poll?: string | undefined; readonly wait?: number | undefined; readonly snapshot: boolean }
) =>
  Effect.gen(function*() {
    if (options.poll !== undefined) {
      const polled = yield* agents.poll(
        tenantId,
        grant.agentId,
        Option.getOrElse(cursor, () => 0),
        Duration.seconds(options.wait ?? 0)
      )
      return BrowserTokens.viewPoll(grant, polled)
    }
    const sse = yield* browserTokens.eventBody(tenantId, grant, cursor, {
      snapshot: options.snapshot,
      ready: { version: streamVersion, agentId: grant.agentId, connection: null }
    })
    return sse._tag === "Node"
      ? HttpServerResponse.raw(sse.body, sseInit)
      : HttpServerResponse.stream(sse.body, sseInit)
  })
