import { Runs } from "@agent-runtime/agent"
import { Api, Auth, type Session, StatelessRun } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup, HttpServerResponse } from "@effect/platform"
import { Duration, Effect, type Layer, Option, type Scope } from "effect"
import { sseInit, streamVersion } from "./Agents.ts"
import * as Errors from "./Errors.ts"
import * as Paging from "./Paging.ts"

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "runs">,
  never,
  Auth.Authentication | Runs.Runs
> = HttpApiBuilder.group(Api.Api, "runs", (handlers) =>
  Effect.gen(function*() {
    const runs = yield* Runs.Runs
    const tenant = Effect.map(Auth.CurrentPrincipal, (principal) => principal.tenantId)
    return Errors.handlers(handlers)
      .handle("create", ({ headers, payload }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.flatMap(
            runs.create(tenantId, payload, Option.fromNullable(headers["idempotency-key"])),
            // Still running when the wait ended: 202 (RunAccepted in the API), the same fields.
            (run): Effect.Effect<StatelessRun.StatelessRun | HttpServerResponse.HttpServerResponse> =>
              run.status === "running"
                ? Effect.orDie(HttpServerResponse.schemaJson(StatelessRun.StatelessRun)(run, { status: 202 }))
                : Effect.succeed(run)
          )))
      .handle("list", ({ urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          Effect.flatMap(runs.list(tenantId, urlParams), (page) =>
            Paging.answer(page, urlParams))))
      .handle("get", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          runs.get(tenantId, path.id, Duration.seconds(urlParams.wait ?? 0))))
      .handle("messages", ({ path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId) =>
          runs.messages(tenantId, path.id, urlParams)))
      .handle("events", ({ headers, path, urlParams }) =>
        Effect.flatMap(tenant, (tenantId): Effect.Effect<
          Session.EventPoll | HttpServerResponse.HttpServerResponse,
          Runs.PollError,
          Scope.Scope
        > => {
          const cursor = Option.fromNullable(headers["last-event-id"])
          if (urlParams.poll !== undefined) {
            return runs.poll(
              tenantId,
              path.id,
              Option.getOrElse(cursor, () =>
                0),
              Duration.seconds(urlParams.wait ?? 0)
            )
          }
          return Effect.map(
            runs.eventBody(tenantId, path.id, cursor, { version: streamVersion, runId: path.id }),
            (body) =>
              HttpServerResponse.stream(body, sseInit)
          )
        }))
      .handle("abort", ({ path }) =>
        Effect.flatMap(tenant, (tenantId) =>
          runs.abort(tenantId, path.id)))
      .handle("delete", ({ path }) => Effect.flatMap(tenant, (tenantId) => runs.remove(tenantId, path.id)))
  }))
