/**
 * Name resolution for outbound requests, a service of its own so that the
 * save-time check and the connect hook ask the same resolver, and tests can
 * answer without a network.
 */
import { Context, Effect, Layer } from "effect"
import * as Dns from "node:dns"
import * as Net from "node:net"
import * as EgressError from "./EgressError.ts"

export interface ResolvedAddress {
  readonly address: string
  readonly family: 4 | 6
}

export class Resolver extends Context.Tag("@agent-runtime/egress/Resolver")<Resolver, {
  /** Every address the name resolves to, in the resolver's order. */
  readonly lookupAll: (hostname: string) => Effect.Effect<ReadonlyArray<ResolvedAddress>, EgressError.EgressError>
}>() {}

const notFound = (hostname: string, code: string) =>
  EgressError.make("resolution_failed", hostname, `name lookup failed with ${code}`)

/** The operating system's resolver (getaddrinfo), as every other Node client would use. */
export const layer: Layer.Layer<Resolver> = Layer.succeed(
  Resolver,
  Resolver.of({
    lookupAll: (hostname) =>
      Effect.tryPromise({
        // `order: "verbatim"` is the current spelling of `verbatim: true`: keep the resolver's order.
        try: () => Dns.promises.lookup(hostname, { all: true, order: "verbatim" }),
        catch: (error) => notFound(hostname, (error as NodeJS.ErrnoException).code ?? "error")
      }).pipe(
        Effect.map((answers) => answers.map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 })))
      )
  })
)

/** What a test name resolves to: fixed addresses, or a function asked at every lookup (for DNS rebinding). */
export type Answer = ReadonlyArray<string> | (() => ReadonlyArray<string>)

/** A resolver answering from `answers` only; any other name is not found. */
export const make = (answers: Readonly<Record<string, Answer>>) =>
  Resolver.of({
    lookupAll: (hostname) =>
      Effect.suspend(() => {
        const name = hostname.toLowerCase().replace(/\.$/, "")
        const answer = Object.hasOwn(answers, name) ? answers[name]! : undefined
        const addresses = typeof answer === "function" ? answer() : answer
        return addresses === undefined || addresses.length === 0
          ? Effect.fail(notFound(hostname, "ENOTFOUND"))
          : Effect.succeed(
            addresses.map((address) => ({ address, family: Net.isIPv6(address) ? 6 as const : 4 as const }))
          )
      })
  })

export const layerTest = (answers: Readonly<Record<string, Answer>>): Layer.Layer<Resolver> =>
  Layer.succeed(Resolver, make(answers))
