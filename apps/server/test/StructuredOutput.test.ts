/**
 * Structured output on agent prompts, in process (see InProcess) over the
 * real model wires: the schema becomes the final_output tool, a call that
 * does not fit goes back to the model, a prose answer is reminded once with
 * the tool forced in each protocol's own tool_choice, then output_missing.
 */
import { Agent as AgentSchemas, Provider, Run } from "@agent-runtime/domain"
import type { FakeUpstream } from "@agent-runtime/testing"
import { HttpClientRequest } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as InProcess from "./InProcess.ts"

const { ServerLive, Upstream, raw, tenantWithModel } = InProcess

const Vote = {
  type: "object",
  properties: { vote: { enum: ["yes", "no"] }, reason: { type: "string" } },
  required: ["vote", "reason"],
  additionalProperties: false
}

/** The tenant's providers, one per protocol, each with its own model so scripts never cross. */
const withProtocols = Effect.gen(function*() {
  const upstream = yield* Upstream
  // Each test reads the requests it caused.
  upstream.reset()
  const { api, tenant } = yield* tenantWithModel(`structured-${Math.random().toString(36).slice(2, 8)}`)
  const add = (name: string, type: "openai-completions" | "openai-responses" | "anthropic-messages", model: string) =>
    api.providers.put({
      path: { name },
      payload: new Provider.CustomProviderInput({
        type,
        baseUrl: type === "anthropic-messages" ? upstream.url : `${upstream.url}/v1`,
        models: [new Provider.CustomModel({ id: model, contextWindow: 100_000 })]
      })
    })
  yield* add("chat", "openai-completions", "so-chat")
  yield* add("responses", "openai-responses", "so-responses")
  yield* add("messages", "anthropic-messages", "so-messages")
  return { api, tenant, upstream }
})

type Api = Effect.Effect.Success<typeof withProtocols>["api"]

/** An agent with no tools of its own (no workspace), so final_output is the model's only tool. */
const bareAgent = (api: Api, model: string, settings: Partial<AgentSchemas.AgentInput> = {}) =>
  api.agents.create({
    headers: {},
    payload: new AgentSchemas.AgentInput({ model, mounts: [], ...settings })
  })

const settle = (api: Api, agentId: string, requestId: string) =>
  api.agents.request({ path: { id: agentId, requestId }, urlParams: { wait: 20 } })

const requestsFor = (upstream: FakeUpstream.FakeUpstream, model: string) =>
  upstream.requests().filter((request) => (request.body as { model?: string } | undefined)?.model === model)

layer(ServerLive, { timeout: 60_000, excludeTestServices: true })("structured output", (it) => {
  it.effect("a call that does not fit goes back to the model as a tool error; the one that fits is the output", () =>
    Effect.gen(function*() {
      const { api, upstream } = yield* withProtocols
      const agent = yield* bareAgent(api, "chat/so-chat")
      upstream.script([
        { text: "Thinking it over.", toolCalls: [{ name: "final_output", arguments: { vote: "maybe" } }] },
        { text: "Here it is.", toolCalls: [{ name: "final_output", arguments: { vote: "no", reason: "Friday" } }] }
      ], { model: "so-chat" })
      yield* api.agents.prompt({
        path: { id: agent.id },
        payload: new Run.PromptInput({
          text: "Ship on Friday?",
          requestId: "req_vote",
          output: new Run.OutputSpec({ schema: Vote })
        })
      })
      const settled = yield* settle(api, agent.id, "req_vote")
      expect(settled.state).toBe("completed")
      expect(settled.outcome?.result).toMatchObject({
        output: { vote: "no", reason: "Friday" },
        reply: "Here it is.",
        error: null,
        toolErrors: 1,
        toolCalls: [
          { tool: "final_output", ok: false, code: "invalid_output" },
          { tool: "final_output", ok: true }
        ]
      })
      const sent = requestsFor(upstream, "so-chat")
      expect(sent).toHaveLength(2)
      // The only tool is forced from the first request, in the chat protocol's own shape.
      for (const request of sent) {
        expect(request.body).toMatchObject({
          tool_choice: { type: "function", function: { name: "final_output" } },
          tools: [{ type: "function", function: { name: "final_output", parameters: Vote } }]
        })
      }
      const system = (sent[0]!.body as { messages: Array<{ role: string; content: string }> }).messages[0]!
      expect(system.role).toBe("system")
      expect(system.content).toContain("final_output")
      // What did not fit reached the model as the call's error.
      const second = (sent[1]!.body as { messages: Array<{ role: string; content: unknown }> }).messages
      expect(JSON.stringify(second.find((message) => message.role === "tool")?.content)).toContain("reason")

      // History holds the calls and their results like any others.
      const history = yield* api.agents.history({ path: { id: agent.id }, urlParams: {} })
      const calls = history.entries.flatMap((entry) => {
        const message = entry.message as { role: string; content?: ReadonlyArray<{ type: string; name?: string }> }
        return message.role === "assistant"
          ? (message.content ?? []).filter((part) => part.type === "toolCall").map((part) => part.name)
          : []
      })
      expect(calls).toEqual(["final_output", "final_output"])

      // A later plain prompt has no final_output and forces nothing.
      upstream.script({ text: "plain" }, { model: "so-chat" })
      yield* api.agents.prompt({
        path: { id: agent.id },
        payload: new Run.PromptInput({ text: "hi", requestId: "req_plain" })
      })
      expect((yield* settle(api, agent.id, "req_plain")).outcome?.result).toMatchObject({ reply: "plain" })
      const plain = requestsFor(upstream, "so-chat")[2]!.body as Record<string, unknown>
      // (the chat protocol sends an empty tool list once history holds calls)
      expect(plain.tools ?? []).toEqual([])
      expect(plain.tool_choice).toBeUndefined()
    }))

  it.effect("a prose answer is reminded once with the tool forced, then the run fails output_missing", () =>
    Effect.gen(function*() {
      const { api, upstream } = yield* withProtocols
      // With other tools (a workspace's file tools) the first request leaves the choice to the model.
      const agent = yield* api.agents.create({
        headers: {},
        payload: new AgentSchemas.AgentInput({ model: "chat/so-chat" })
      })
      upstream.script([{ text: "Yes, ship it." }, { text: "I said yes." }], { model: "so-chat" })
      yield* api.agents.prompt({
        path: { id: agent.id },
        payload: new Run.PromptInput({
          text: "Ship?",
          requestId: "req_prose",
          output: new Run.OutputSpec({ schema: Vote })
        })
      })
      const settled = yield* settle(api, agent.id, "req_prose")
      expect(settled.state).toBe("completed")
      expect(settled.error).toContain("final_output")
      expect(settled.outcome).toMatchObject({
        result: { reply: "I said yes." },
        error: expect.stringContaining("without calling final_output")
      })
      expect((settled.outcome?.result as { output?: unknown }).output).toBeUndefined()
      const sent = requestsFor(upstream, "so-chat")
      expect(sent).toHaveLength(2)
      expect((sent[0]!.body as Record<string, unknown>).tool_choice).toBeUndefined()
      expect(sent[1]!.body).toMatchObject({ tool_choice: { type: "function", function: { name: "final_output" } } })
      const messages = (sent[1]!.body as { messages: Array<{ role: string; content: unknown }> }).messages
      expect(JSON.stringify(messages.at(-1))).toContain("must be given by calling the final_output tool")
    }))

  it.effect("an output_missing request says so in its code; a structured prompt's retry is the same request", () =>
    Effect.gen(function*() {
      const { api, upstream } = yield* withProtocols
      const agent = yield* bareAgent(api, "chat/so-chat")
      upstream.script([{ text: "no" }, { text: "still no" }], { model: "so-chat" })
      const prompt = new Run.PromptInput({
        text: "Ship?",
        requestId: "req_missing",
        output: new Run.OutputSpec({ schema: Vote })
      })
      yield* api.agents.prompt({ path: { id: agent.id }, payload: prompt })
      const settled = yield* settle(api, agent.id, "req_missing")
      expect(settled).toMatchObject({ state: "completed", code: "output_missing" })
      // The same id and body is the same request; another schema under it is a conflict.
      expect((yield* api.agents.prompt({ path: { id: agent.id }, payload: prompt })).state).toBe("completed")
      const other = yield* api.agents.prompt({
        path: { id: agent.id },
        payload: new Run.PromptInput({
          ...prompt,
          output: new Run.OutputSpec({ schema: { ...Vote, required: ["vote"] } })
        })
      }).pipe(Effect.flip)
      expect(other._tag).toBe("IdempotencyConflict")
      expect(requestsFor(upstream, "so-chat")).toHaveLength(2)
    }))

  it.effect("each protocol forces the tool its own way; a provider refusing it is asked again without", () =>
    Effect.gen(function*() {
      const { api, upstream } = yield* withProtocols
      const answer = { toolCalls: [{ name: "final_output", arguments: { vote: "yes", reason: "tested" } }] }
      for (
        const [model, choice] of [
          ["responses/so-responses", { type: "function", name: "final_output" }],
          ["messages/so-messages", { type: "tool", name: "final_output" }]
        ] as const
      ) {
        const agent = yield* bareAgent(api, model)
        const upstreamModel = model.split("/")[1]!
        upstream.script(answer, { model: upstreamModel })
        const request = yield* api.agents.prompt({
          path: { id: agent.id },
          payload: new Run.PromptInput({ text: "Ship?", output: new Run.OutputSpec({ schema: Vote }) })
        })
        const settled = yield* settle(api, agent.id, request.id)
        expect(settled.outcome?.result).toMatchObject({ output: { vote: "yes", reason: "tested" } })
        const [sent] = requestsFor(upstream, upstreamModel)
        expect((sent!.body as Record<string, unknown>).tool_choice).toEqual(choice)
      }

      // A provider that refuses tool_choice: the turn asks again without it, and never forces again.
      const agent = yield* bareAgent(api, "chat/so-chat")
      upstream.script([
        { error: { status: 400, message: "tool_choice is not supported by this model" } },
        { text: "prose" },
        answer
      ], { model: "so-chat" })
      const request = yield* api.agents.prompt({
        path: { id: agent.id },
        payload: new Run.PromptInput({ text: "Ship?", output: new Run.OutputSpec({ schema: Vote }) })
      })
      const settled = yield* settle(api, agent.id, request.id)
      expect(settled.outcome?.result).toMatchObject({ output: { vote: "yes", reason: "tested" } })
      const sent = requestsFor(upstream, "so-chat").map((call) => (call.body as Record<string, unknown>).tool_choice)
      expect(sent).toEqual([{ type: "function", function: { name: "final_output" } }, undefined, undefined])
    }))

  it.effect("a schema that is not an object or does not compile, or a steering prompt, is refused and records nothing", () =>
    Effect.gen(function*() {
      const { api, tenant } = yield* withProtocols
      const agent = yield* bareAgent(api, "chat/so-chat")
      const refusals = [
        [{ type: "array" }, undefined, "must describe an object"],
        [{ type: "object", properties: { a: { type: "nonsense" } } }, undefined, "does not compile"],
        [Vote, "steer", "whileRunning"]
      ] as const
      for (const [schema, whileRunning, message] of refusals) {
        const response = yield* raw(
          HttpClientRequest.post(`/v1/agents/${agent.id}/prompt`).pipe(HttpClientRequest.bodyUnsafeJson({
            text: "x",
            requestId: "req_refused",
            output: { schema },
            ...(whileRunning === undefined ? {} : { whileRunning })
          })),
          tenant.token
        )
        expect(response.status).toBe(400)
        expect(response.body).toMatchObject({ code: "INVALID_REQUEST", error: expect.stringContaining(message) })
      }
      const state = yield* api.agents.state({ path: { id: agent.id } })
      expect(state.requests).toEqual([])
    }))
})
