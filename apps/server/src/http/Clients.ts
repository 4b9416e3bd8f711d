import { Agents, Schedules } from "@agent-runtime/agent"
import { Agent, Api, type ApiError, Application, Auth, type Input, Run, type Session } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup, HttpServerResponse } from "@effect/platform"
import { Duration, Effect, type Layer, Option } from "effect"
import { events, sseInit, streamVersion } from "./Agents.ts"
import * as Errors from "./Errors.ts"
import { answered } from "./Inputs.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "clients">,
  never,
  Auth.AgentAuthentication | Agents.Agents | Schedules.Schedules
> = HttpApiBuilder.group(Api.Api, "clients", (handlers) =>
  Effect.gen(function*() {
    const agents = yield* Agents.Agents
    const schedules = yield* Schedules.Schedules
    /** One answer, at either route that takes it (camelRun's `.../inputs/{inputId}` and our `.../answer`). */
    const answerOne = (
      { path, payload }: { readonly path: { readonly inputId: string }; readonly payload: Input.AnswerInput }
    ) =>
      Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
        Effect.map(
          agents.answer(tenantId, agentId, [{ ...payload, id: path.inputId }], { via: "agent" }),
          (all) => answered(all, path.inputId)
        ))
    return Errors.handlers(handlers)
      .handle("request", ({ payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }): Effect.Effect<
          Run.RequestRecord,
          Effect.Effect.Error<
            | ReturnType<typeof agents.prompt>
            | ReturnType<typeof agents.statusRequest>
            | ReturnType<typeof agents.configure>
          >
        > => {
          switch (payload.method) {
            case "prompt":
            case "steer": {
              const { method, ...input } = payload
              return agents.prompt(
                tenantId,
                agentId,
                new Run.PromptInput({ ...input, ...(method === "steer" ? { whileRunning: "steer" as const } : {}) })
              )
            }
            case "execute": {
              const { method: _method, ...input } = payload
              return agents.execute(tenantId, agentId, new Run.ExecuteInput(input))
            }
            case "abort":
              return agents.abort(tenantId, agentId, Option.fromNullable(payload.requestId))
            case "configure": {
              const { method: _method, ...input } = payload
              return agents.configure(tenantId, agentId, new Agent.ConfigureInput(input))
            }
            case "status":
              return agents.statusRequest(tenantId, agentId)
            case "continue": {
              const { method: _method, ...input } = payload
              return agents.continueRun(tenantId, agentId, new Run.ContinueInput(input))
            }
          }
        }))
      .handle("getRequest", ({ path, urlParams }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.request(tenantId, agentId, path.requestId, Duration.seconds(urlParams.wait ?? 0))))
      .handle("events", ({ headers, urlParams }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) => {
          const cursor = Option.fromNullable(headers["last-event-id"])
          // Watchers (watch=1) get a snapshot by default when they fell behind.
          const snapshot = urlParams.watch !== undefined || urlParams.snapshot !== undefined
          if (urlParams.watch !== undefined || urlParams.poll !== undefined) {
            return events(agents, tenantId, agentId, cursor, { ...urlParams, snapshot })
          }
          // Otherwise this stream is the application's connection, serving the agent's tools.
          return Effect.map(
            agents.connectionBody(tenantId, agentId, cursor, {
              snapshot: urlParams.snapshot !== undefined,
              connection: Option.fromNullable(urlParams.connection),
              takeover: urlParams.takeover !== undefined,
              version: streamVersion
            }),
            (body) =>
              HttpServerResponse.stream(body, sseInit)
          )
        }))
      .handle("mcp", ({ headers, payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          Effect.as(
            agents.mcp(tenantId, agentId, Application.connectionOf(headers), payload),
            new Application.McpAccepted({ accepted: true })
          )))
      .handle("state", () =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.state(tenantId, agentId)))
      .handle("history", ({ urlParams }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }): Effect.Effect<
          Session.History | Session.HistoryPage,
          ApiError.NotFound | ApiError.Gone | ApiError.TooLarge
        > =>
          // camelRun's client reads the whole history without a query, and pages with one.
          urlParams.limit === undefined && urlParams.before === undefined
            ? agents.wholeHistory(tenantId, agentId)
            : agents.history(tenantId, agentId, urlParams)))
      .handle("delete", () =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.remove(tenantId, agentId)))
      .handle("metadata", ({ payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.setMetadata(tenantId, agentId, payload)))
      .handle("createSchedule", ({ payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          schedules.create(tenantId, agentId, payload)))
      .handle("schedules", () =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          schedules.list(tenantId, agentId)))
      .handle("cancelSchedule", ({ path }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          schedules.cancel(tenantId, agentId, path.scheduleId)))
      .handle("inputs", ({ urlParams }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.inputs(tenantId, agentId, urlParams.state)))
      .handle("answer", answerOne)
      .handle("answerInput", answerOne)
      .handle("answerAll", ({ payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.answer(tenantId, agentId, payload.answers, { via: "agent" })))
  }))
