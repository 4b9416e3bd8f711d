/**
 * Fixtures for in-process tests of the agent core: a scripted model client
 * and `Turn` hooks that record what a turn does.
 *
 * The model is the one external dependency a turn has, so it is the one thing
 * scripted: `layer` is a `ModelClient` whose answers are queued by the test
 * (`script`), streamed as the real client streams them (start, deltas, done),
 * and whose calls are kept with the context the model was given. A reply can
 * hold halfway through its text until the test lets it go (`held`), for aborts
 * and moves mid-response. Everything else (tools, the journal, the entity) is
 * the project's own code, run for real.
 *
 * `recordingHooks` are the hooks an entity gives `Turn.run`, kept in memory:
 * the history, every append and every event in order, tool calls started and
 * finished, steered prompts waiting, and the abort and hand-off flags.
 */
import { AccountsMigrations } from "@agent-runtime/accounts"
import { AgentMigrations, AgentStore, Definitions, Delegation, Schedules, Tools, type Turn } from "@agent-runtime/agent"
import { BillingMigrations, Ledger, Payments, Rates } from "@agent-runtime/billing"
import { Input } from "@agent-runtime/domain"
import { Egress, Resolver } from "@agent-runtime/egress"
import { ContentStore, Downloads, FileMigrations, Volumes } from "@agent-runtime/files"
import { IdentityMigrations, IdentityTokens } from "@agent-runtime/identity"
import {
  Catalog,
  Keys,
  KeyScopes,
  ModelClient,
  type ModelError,
  ModelsMigrations,
  WebSearch
} from "@agent-runtime/models"
import { Database, SealedSecret } from "@agent-runtime/store"
import { ToolSources } from "@agent-runtime/toolsources"
import { WebhookMigrations } from "@agent-runtime/webhooks"
import { TestRunner } from "@effect/cluster"
import { Context, Deferred, Effect, Layer, Option, Queue, Redacted } from "effect"
import * as Crypto from "node:crypto"
import * as TestDatabase from "./TestDatabase.ts"

type ToolCallPart = Extract<ModelClient.AssistantMessage["content"][number], { readonly type: "toolCall" }>

export interface ScriptedToolCall {
  readonly id: string
  readonly name: string
  readonly arguments?: ToolCallPart["arguments"]
}

/** One model response, as the test wants it. */
export interface Reply {
  readonly text?: string
  readonly thinking?: string
  readonly toolCalls?: ReadonlyArray<ScriptedToolCall>
  readonly usage?: { readonly input?: number; readonly output?: number }
  /** The call fails with this error instead (nothing is streamed). */
  readonly fail?: ModelError.ModelError
  /**
   * Streams the first half of `text`, then waits until the test releases it
   * (see `Service.held`); a turn aborted meanwhile keeps that half. Needs a
   * `text`; tool calls and the rest follow the release.
   */
  readonly hold?: boolean
}

/** A reply waiting halfway: `release` lets it finish. */
export interface Held {
  readonly call: ModelClient.Call
  readonly release: Effect.Effect<void>
}

export interface Service {
  /** Queues replies, answered in order; with none queued the model answers "ok". */
  readonly script: (...replies: ReadonlyArray<Reply>) => void
  /** Every call so far (responses and compactions), oldest first. */
  readonly calls: () => ReadonlyArray<ModelClient.Call>
  /** Waits for the next reply that holds (`hold: true`) to be holding. */
  readonly held: Effect.Effect<Held>
  /** Forgets queued replies and recorded calls. */
  readonly reset: () => void
}

export class ScriptedModel extends Context.Tag("@agent-runtime/testing/ScriptedModel")<ScriptedModel, Service>() {}

export interface Options {
  /** What `limits` answers for every model: the turn compacts when the context would not leave room. */
  readonly contextWindow?: number
  readonly maxTokens?: number
}

const usageOf = (reply: Reply) => {
  const input = reply.usage?.input ?? 10
  const output = reply.usage?.output ?? 5
  return {
    input,
    output,
    cacheRead: 0,
    cacheWrite: 0,
    totalTokens: input + output,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 }
  }
}

/** The finished message of a reply, as a provider's stream would end with it. */
export const messageOf = (reply: Reply, model: string): ModelClient.AssistantMessage => {
  const slash = model.indexOf("/")
  const content: ModelClient.AssistantMessage["content"] = [
    ...(reply.thinking === undefined ? [] : [{ type: "thinking" as const, thinking: reply.thinking }]),
    ...(reply.text === undefined ? [] : [{ type: "text" as const, text: reply.text }]),
    ...(reply.toolCalls ?? []).map((call) => ({
      type: "toolCall" as const,
      id: call.id,
      name: call.name,
      arguments: call.arguments ?? {}
    }))
  ]
  return {
    role: "assistant",
    content,
    api: "openai-completions",
    provider: slash === -1 ? "scripted" : model.slice(0, slash),
    model: slash === -1 ? model : model.slice(slash + 1),
    usage: usageOf(reply),
    stopReason: (reply.toolCalls ?? []).length > 0 ? "toolUse" : "stop",
    timestamp: Date.now()
  }
}

/**
 * The events of a reply in the order a provider streams them, each with the
 * message so far (`partial`): those before a held reply waits, and those after.
 */
const eventsOf = (reply: Reply, model: string) => {
  const final = messageOf(reply, model)
  const parts: Array<ModelClient.AssistantMessage["content"][number]> = []
  const partial = (): ModelClient.AssistantMessage => ({ ...final, content: [...parts], stopReason: "pending" })
  const before: Array<ModelClient.ModelEvent> = [{ type: "start", partial: partial() }]
  const held: Array<ModelClient.ModelEvent> = []
  let out = before
  for (const part of final.content) {
    const contentIndex = parts.length
    if (part.type === "thinking") {
      parts.push({ type: "thinking", thinking: "" })
      out.push({ type: "thinking_start", contentIndex, partial: partial() })
      parts[contentIndex] = part
      out.push({ type: "thinking_delta", contentIndex, delta: part.thinking, partial: partial() })
      out.push({ type: "thinking_end", contentIndex, content: part.thinking, partial: partial() })
    } else if (part.type === "text") {
      parts.push({ type: "text", text: "" })
      out.push({ type: "text_start", contentIndex, partial: partial() })
      const half = Math.ceil(part.text.length / 2)
      const deltas = reply.hold === true && out === before
        ? [part.text.slice(0, half), part.text.slice(half)]
        : [part.text]
      let text = ""
      for (const delta of deltas) {
        text += delta
        parts[contentIndex] = { type: "text", text }
        out.push({ type: "text_delta", contentIndex, delta, partial: partial() })
        // The first half is out: the rest waits for the release.
        if (deltas.length === 2) out = held
      }
      out.push({ type: "text_end", contentIndex, content: part.text, partial: partial() })
    } else {
      parts.push(part)
      out.push({ type: "toolcall_start", contentIndex, partial: partial() })
      out.push({ type: "toolcall_delta", contentIndex, delta: JSON.stringify(part.arguments), partial: partial() })
      out.push({ type: "toolcall_end", contentIndex, toolCall: part, partial: partial() })
    }
  }
  out.push({ type: "done", reason: final.stopReason === "toolUse" ? "toolUse" : "stop", message: final })
  return { before, held: out === held ? held : undefined }
}

export const make = (options: Options = {}) =>
  Effect.gen(function*() {
    let queue: Array<Reply> = []
    let calls: Array<ModelClient.Call> = []
    const holding = yield* Queue.unbounded<Held>()

    const next = (call: ModelClient.Call) =>
      Effect.sync(() => {
        calls.push(call)
        return queue.shift() ?? { text: "ok" }
      })

    const respond = (
      call: ModelClient.Call,
      onEvent: (event: ModelClient.ResponseEvent) => Effect.Effect<void>
    ): Effect.Effect<ModelClient.AssistantMessage, ModelError.ModelError> =>
      Effect.gen(function*() {
        const reply = yield* next(call)
        if (reply.fail !== undefined) return yield* Effect.fail(reply.fail)
        const { before, held } = eventsOf(reply, call.model)
        let done: ModelClient.AssistantMessage | undefined
        const send = (events: ReadonlyArray<ModelClient.ModelEvent>) =>
          Effect.forEach(events, (event) => {
            if (event.type !== "done") return onEvent(event)
            done = event.message
            return Effect.void
          }, { discard: true })
        yield* send(before)
        if (held !== undefined) {
          const gate = yield* Deferred.make<void>()
          yield* Queue.offer(holding, { call, release: Deferred.succeed(gate, void 0) })
          yield* Deferred.await(gate)
          yield* send(held)
        }
        return done!
      })

    const client = ModelClient.ModelClient.of({
      respond,
      complete: (call: ModelClient.Call) => respond(call, () => Effect.void),
      resolve: (call) => {
        const slash = call.model.indexOf("/")
        const provider = call.model.slice(0, Math.max(slash, 0))
        const id = call.model.slice(slash + 1)
        return Effect.succeed({
          id: call.model,
          provider,
          model: {
            id,
            name: id,
            api: "openai-completions",
            provider,
            baseUrl: "http://127.0.0.1:1/v1",
            reasoning: false,
            input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
            contextWindow: options.contextWindow ?? 200_000,
            maxTokens: options.maxTokens ?? 8_192
          },
          apiKey: Option.none(),
          bearer: true,
          headers: {},
          source: "tenant",
          keyScope: call.keyScope
        })
      }
    })

    const scripted: Service = {
      script: (...replies) => {
        for (const reply of replies) queue.push(reply)
      },
      calls: () => calls,
      held: Queue.take(holding),
      reset: () => {
        queue = []
        calls = []
      }
    }
    return { client, scripted }
  })

/** A `ModelClient` answering scripted replies, and the `ScriptedModel` that scripts it. */
export const layer = (options: Options = {}): Layer.Layer<ModelClient.ModelClient | ScriptedModel> =>
  Layer.effectContext(
    Effect.map(
      make(options),
      ({ client, scripted }) => Context.make(ModelClient.ModelClient, client).pipe(Context.add(ScriptedModel, scripted))
    )
  )

// ---------------------------------------------------------------------------
// Recording hooks
// ---------------------------------------------------------------------------

export interface RecordingOptions {
  /** The history the turn starts from (a resumed turn's journal). */
  readonly history?: ReadonlyArray<Turn.StoredMessage>
  /** The calls of this request a lost node sent, with their results where they came back. */
  readonly sentToolCalls?: ReadonlyMap<string, Turn.SentCall>
  /** The inputs of earlier calls left waiting on a person, by call. */
  readonly inputs?: ReadonlyMap<string, Input.Input>
}

/** What a turn did, in order, and the switches a test flips while it runs. */
export interface Recording {
  readonly hooks: Turn.TurnHooks
  readonly history: Array<Turn.StoredMessage>
  readonly appended: Array<{ readonly index: number; readonly message: Turn.StoredMessage }>
  /** How many messages had been appended each time the turn asked for them to be durable. */
  readonly durableAt: Array<number>
  readonly events: Array<Record<string, unknown>>
  readonly toolsStarted: Array<{ readonly toolCallId: string; readonly tool: string }>
  readonly toolsFinished: Array<{ readonly toolCallId: string; readonly isError: boolean }>
  /** What the turn asked people, in order. */
  readonly asked: Array<Turn.Waiting>
  /** The types of the events so far. */
  readonly eventTypes: () => ReadonlyArray<string>
  /** Queues a steered prompt for the turn's next step. */
  readonly steer: (prompt: Turn.Steered) => void
  /** An abort request: the turn is about to be interrupted on purpose. */
  readonly abort: () => void
  /** The node starts handing its agents on: the turn stops after its step. */
  readonly handOff: () => void
  /** The spend limit is reached from now on. */
  readonly exhaustBudget: () => void
}

export const recordingHooks = (options: RecordingOptions = {}): Recording => {
  const history: Array<Turn.StoredMessage> = [...(options.history ?? [])]
  const appended: Recording["appended"] = []
  const durableAt: Array<number> = []
  const events: Array<Record<string, unknown>> = []
  const toolsStarted: Recording["toolsStarted"] = []
  const toolsFinished: Recording["toolsFinished"] = []
  const asked: Array<Turn.Waiting> = []
  let steered: Array<Turn.Steered> = []
  let aborting = false
  let handingOff = false
  let overBudget = false
  const hooks: Turn.TurnHooks = {
    takeSteered: Effect.sync(() => {
      const taken = steered
      steered = []
      return taken
    }),
    overBudget: Effect.sync(() => overBudget),
    emit: (event) => Effect.sync(() => void events.push(event)),
    append: (index, message) =>
      Effect.sync(() => {
        appended.push({ index, message })
        history[index] = message
      }),
    durable: Effect.sync(() => void durableAt.push(appended.length)),
    historySize: () => history.length,
    history: () => history,
    toolStarted: (toolCallId, tool) => Effect.sync(() => void toolsStarted.push({ toolCallId, tool })),
    toolFinished: (toolCallId, result) =>
      Effect.sync(() => void toolsFinished.push({ toolCallId, isError: result.isError })),
    sentToolCalls: Effect.succeed(options.sentToolCalls ?? new Map()),
    aborting: () => aborting,
    handingOff: () => handingOff,
    askInputs: (asks) =>
      Effect.sync(() => {
        for (const ask of asks) asked.push(ask)
        const now = Math.floor(Date.now() / 1000)
        return asks.map((ask) =>
          new Input.Input({
            id: `in_${ask.toolCallId}`,
            agent: "client_recording",
            tenant: "tenant_recording",
            requestId: "req_recording",
            toolCallId: ask.toolCallId,
            kind: ask.kind,
            message: ask.message,
            detail: ask.detail as unknown as Input.InputDetail,
            responders: new Input.Responders({ audience: [] }),
            state: "pending",
            createdAt: now,
            expiresAt: now + Input.defaultInputLifetimeSeconds
          })
        )
      }),
    inputsFor: (toolCallIds) =>
      Effect.sync(() =>
        new Map(toolCallIds.flatMap((id) => {
          const found = options.inputs?.get(id)
          return found === undefined ? [] : [[id, { input: found }] as const]
        }))
      )
  }
  return {
    hooks,
    durableAt,
    history,
    appended,
    events,
    toolsStarted,
    toolsFinished,
    asked,
    eventTypes: () => events.map((event) => String(event.type)),
    steer: (prompt) => void steered.push(prompt),
    abort: () => {
      aborting = true
    },
    handOff: () => {
      handingOff = true
    },
    exhaustBudget: () => {
      overBudget = true
    }
  }
}

/**
 * The runtime's tools as a node has them (schedules, definitions, web search,
 * tool sources, delegation), on the database, egress, identity tokens, agent
 * journal and cluster it is given.
 */
/** Volumes on the database, and links to presented files rooted at a test address. */
export const layerFiles = Downloads.layer(Effect.succeed("http://127.0.0.1")).pipe(
  Layer.provideMerge(Volumes.layer().pipe(Layer.provide(ContentStore.layer)))
)

export const layerTools = Tools.layer.pipe(
  Layer.provide(Delegation.layer),
  Layer.provideMerge(layerFiles),
  Layer.provideMerge(Ledger.layer.pipe(Layer.provide([Rates.layerConfig, Payments.layerNone]))),
  Layer.provideMerge(
    Layer.mergeAll(Definitions.layer, Schedules.layer, ToolSources.layer(), WebSearch.layer).pipe(
      Layer.provide(KeyScopes.layer.pipe(Layer.provideMerge(Keys.layer))),
      Layer.provide(Catalog.layer)
    )
  )
)

const sealer = SealedSecret.layer(SealedSecret.parseKey(Crypto.randomBytes(32).toString("base64")))

/**
 * `layerTools` on a fresh test database with every package's tables, a
 * sealing key, identity tokens, and egress allowing private addresses (so
 * tools reach local test servers).
 */
export const layerToolsLive = layerTools.pipe(
  Layer.provideMerge(Layer.mergeAll(IdentityTokens.layer(), AgentStore.layer, TestRunner.layer)),
  Layer.provideMerge(sealer),
  Layer.provideMerge(Egress.layer({ allowPrivate: true }).pipe(Layer.provide(Resolver.layer))),
  Layer.provideMerge(Layer.unwrapEffect(
    Effect.map(TestDatabase.make, (url) =>
      Database.layerClient(Redacted.make(url), {
        migrations: [
          AccountsMigrations.migrations,
          WebhookMigrations.migrations,
          FileMigrations.migrations,
          ModelsMigrations.migrations,
          BillingMigrations.migrations,
          AgentMigrations.migrations,
          IdentityMigrations.migrations
        ]
      }))
  ))
)
