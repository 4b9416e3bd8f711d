/**
 * Human input over the account's credential: list an agent's inputs, answer
 * one, answer several. Answers go to the agent's owner (see Inputs).
 */
import { Agents } from "@agent-runtime/agent"
import { Api, Auth, Run } from "@agent-runtime/domain"
import { HttpApiBuilder, type HttpApiGroup } from "@effect/platform"
import { Effect, type Layer, Option } from "effect"
import * as Paging from "./Paging.ts"

/** Who answered, as the input's record keeps it: the kind of credential, and the API key used. */
export const answeredBy = (principal: Auth.Principal): Record<string, unknown> => ({
  via: principal.via,
  ...(Option.isSome(principal.tokenId) ? { tokenId: principal.tokenId.value } : {})
})

/** The single answer of a batch: the input, and the run resuming its suspension if it settled the last one. */
export const answered = (all: Run.AnsweredAll, inputId: string) => {
  const input = all.inputs.find((candidate) => candidate.id === inputId)!
  return new Run.Answered({
    input,
    request: all.requests.find((request) => request.suspension === input.requestId) ?? null
  })
}

export const layer: Layer.Layer<
  HttpApiGroup.ApiGroup<"agent-runtime", "inputs">,
  never,
  Auth.Authentication | Agents.Agents
> = HttpApiBuilder.group(Api.Api, "inputs", (handlers) =>
  Effect.gen(function*() {
    const agents = yield* Agents.Agents
    return handlers
      .handle("list", ({ path, urlParams }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          agents.inputs(principal.tenantId, path.id, urlParams.state)))
      .handle("answer", ({ path, payload }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          Effect.map(
            agents.answer(principal.tenantId, path.id, [{ ...payload, id: path.inputId }], answeredBy(principal)),
            (all) =>
              answered(all, path.inputId)
          )))
      .handle("inbox", ({ urlParams }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          Effect.flatMap(agents.inbox(principal.tenantId, urlParams), (page) =>
            Paging.answer(page, urlParams))))
      .handle("answerAll", ({ path, payload }) =>
        Effect.flatMap(Auth.CurrentPrincipal, (principal) =>
          agents.answer(principal.tenantId, path.id, payload.answers, answeredBy(principal))))
  }))
