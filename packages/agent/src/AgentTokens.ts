/**
 * Agent tokens: `aat_<agentId>.<mac>`, derived from the agent id under the
 * node's sealing key rather than stored, so the credentials route can show a
 * keyed agent's token again and every node can check one.
 */
import { SealedSecret } from "@agent-runtime/store"
import { Context, Effect, Layer, Option } from "effect"

export const prefix = "aat_"

const purpose = "agent-token"

export class AgentTokens extends Context.Tag("@agent-runtime/agent/AgentTokens")<AgentTokens, {
  /** The agent's token. */
  readonly issue: (agentId: string) => string
  /** The agent a token names, if the token is genuine. */
  readonly agentOf: (token: string) => Option.Option<string>
}>() {}

export const make = Effect.map(SealedSecret.Sealer, (sealer) =>
  AgentTokens.of({
    issue: (agentId) => `${prefix}${agentId}.${sealer.sign(purpose, agentId)}`,
    agentOf: (token) => {
      if (!token.startsWith(prefix)) return Option.none()
      const [agentId, mac, ...rest] = token.slice(prefix.length).split(".")
      if (agentId === undefined || mac === undefined || rest.length > 0) return Option.none()
      return sealer.verify(purpose, agentId, mac) ? Option.some(agentId) : Option.none()
    }
  }))

export const layer: Layer.Layer<AgentTokens, never, SealedSecret.Sealer> = Layer.effect(AgentTokens, make)
