import { Api, Auth } from "@agent-runtime/domain"
import { TelemetrySettings, TraceExport, TraceParent } from "@agent-runtime/telemetry"
import { HttpApiBuilder, type HttpApiGroup, type HttpApp, HttpServerRequest } from "@effect/platform"
import { Effect, type Layer, Option } from "effect"
import * as Errors from "./Errors.ts"

/** Around the whole app: a request's W3C `traceparent` is kept for what the request records (see Prompts). */
export const middleware = <E, R>(
  app: HttpApp.Default<E, R>
): HttpApp.Default<E, R | HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const traceparent = TraceParent.valid(request.headers.traceparent)
    return traceparent === undefined ? app : Effect.locally(app, TraceParent.fromCaller, traceparent)
  })

const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "telemetry">,
  never,
  Auth.Authentication | TelemetrySettings.TelemetrySettings | TraceExport.TraceExport
> = HttpApiBuilder.group(Api.Api, "telemetry", (handlers) =>
  Effect.gen(function*() {
    const settings = yield* TelemetrySettings.TelemetrySettings
    const traces = yield* TraceExport.TraceExport
    return Errors.handlers(handlers)
      .handle("get", () => Effect.flatMap(tenant, (tenantId) => Effect.map(settings.get(tenantId), Option.getOrNull)))
      .handle("put", ({ payload }) => Effect.flatMap(tenant, (tenantId) => settings.put(tenantId, payload)))
      .handle("clear", () => Effect.flatMap(tenant, settings.clear))
      .handle("test", () => Effect.flatMap(tenant, traces.test))
  }))
