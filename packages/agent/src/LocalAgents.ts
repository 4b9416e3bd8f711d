/**
 * The agents whose instance runs on this node, so that a request queued for
 * one of them is handed to it by a call (Arrivals) rather than by a message
 * through the cluster: a message to an entity on the same node (client,
 * sharding, entity manager, RPC server, reply) cost a turn about as many
 * runtime steps as its journal writes (docs/benchmarks.md). The instance
 * takes it as it takes the message, on its own scope, so its closing cuts
 * the one as it cuts the other; whatever it does not take goes through the
 * cluster as before.
 */
import { Context, Effect, Layer, type Scope } from "effect"
import type { PromptPayload } from "./Agent.ts"

/**
 * An instance's taking of a prompt: true once it ran it, false when it declines (the prompt then goes through
 * the cluster, which knows whether this instance is still the agent's).
 */
export type Take = (payload: typeof PromptPayload.Type) => Effect.Effect<boolean, unknown>

export class LocalAgents extends Context.Tag("@agent-runtime/agent/LocalAgents")<LocalAgents, {
  /** The prompt handed to `agentId`'s instance on this node; false when none here takes it (send it instead). */
  readonly prompt: (agentId: string, payload: typeof PromptPayload.Type) => Effect.Effect<boolean, unknown>
  /** An instance takes its agent's prompts here until `scope` closes. */
  readonly register: (agentId: string, take: Take) => Effect.Effect<void, never, Scope.Scope>
}>() {}

export const make = Effect.sync(() => {
  const takes = new Map<string, Take>()
  return LocalAgents.of({
    prompt: (agentId, payload) =>
      Effect.suspend(() => {
        const take = takes.get(agentId)
        return take === undefined ? Effect.succeed(false) : take(payload)
      }),
    register: (agentId, take) =>
      Effect.acquireRelease(
        Effect.sync(() => takes.set(agentId, take)),
        // An instance restarted under the same address may have registered since.
        () => Effect.sync(() => takes.get(agentId) === take && takes.delete(agentId))
      )
  })
})

export const layer: Layer.Layer<LocalAgents> = Layer.effect(LocalAgents, make)
