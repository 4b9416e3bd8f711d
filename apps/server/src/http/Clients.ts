import { Agents } from "@agent-runtime/agent"
import { Agent, Api, Application, Auth, Run } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup, HttpServerResponse } from "@effect/platform"
import { Duration, Effect, type Layer, Option } from "effect"
import { events, sseInit, streamVersion } from "./Agents.ts"
import { answered } from "./Inputs.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "clients">,
  never,
  Auth.AgentAuthentication | Agents.Agents
> = HttpApiBuilder.group(Api.Api, "clients", (handlers) =>
  Effect.gen(function*() {
    const agents = yield* Agents.Agents
    return handlers
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
            case "continue":
              return agents.continueRun(
                tenantId,
                agentId,
                Option.fromNullable(payload.requestId),
                payload.allowDisconnected
              )
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
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.history(tenantId, agentId, urlParams)))
      .handle("inputs", ({ urlParams }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.inputs(tenantId, agentId, urlParams.state)))
      .handle("answer", ({ path, payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          Effect.map(
            agents.answer(tenantId, agentId, [{ ...payload, id: path.inputId }], { via: "agent" }),
            (all) =>
              answered(all, path.inputId)
          )))
      .handle("answerAll", ({ payload }) =>
        Effect.flatMap(Auth.CurrentAgent, ({ agentId, tenantId }) =>
          agents.answer(tenantId, agentId, payload.answers, { via: "agent" })))
  }))
