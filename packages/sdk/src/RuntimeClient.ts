/**
 * The REST API as a typed Effect client, derived from the same `HttpApi`
 * definition the server implements (`@agent-runtime/domain`'s `Api`): every
 * endpoint is a method of its group (`client.agents.prompt(...)`,
 * `client.clients.request(...)`), and every error the API declares for it
 * is a typed failure (`ApiError.NotFound`, `ApiError.SpendLimit`, ...).
 *
 * The token is sent as a bearer token on every request: an API key (`art_…`)
 * for the tenant routes, an agent token (`aat_…`) for `/clients/{id}/…`.
 * Redirects are not followed, and the base URL must be https except for
 * localhost and 127.0.0.1. There are no retries here: compose them
 * (`Effect.retry`) where a call is safe to repeat.
 *
 * A list method answers one page as an array: without `limit`, up to 1000
 * items. When more follow, the answer's `Link: <...>; rel="next"` header
 * names the next page; read it with `withResponse: true`, or ask again
 * with `after` set to the last item's id.
 *
 * ```ts
 * const program = Effect.gen(function*() {
 *   const client = yield* RuntimeClient.RuntimeClient
 *   const agent = yield* client.agents.create({ payload: { name: "helper" }, headers: {} })
 * })
 * program.pipe(Effect.provide(RuntimeClient.layer({ baseUrl, token })), Effect.provide(FetchHttpClient.layer))
 * ```
 */
import { Api } from "@agent-runtime/domain"
import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Context, Effect, Layer } from "effect"
import * as Http from "./internal/http.ts"
import type { InvalidOptions } from "./SdkError.ts"

export interface Options {
  readonly baseUrl: string | URL
  /** An API key (`art_…`), an agent token (`aat_…`) or the operator token. */
  readonly token: string
}

const build = (options: Options) =>
  Effect.flatMap(Http.target(options.baseUrl, options.token), (target) =>
    HttpApiClient.make(Api.Api, {
      baseUrl: target.baseUrl.toString().replace(/\/+$/, ""),
      transformClient: (client) =>
        client.pipe(
          HttpClient.mapRequest(HttpClientRequest.bearerToken(target.token)),
          HttpClient.transformResponse(Http.noRedirects)
        )
    }))

/** The client: one object per API group, one method per endpoint. */
export type Client = Effect.Effect.Success<ReturnType<typeof build>>

/** The typed client of the runtime's REST API. */
export class RuntimeClient extends Context.Tag("@agent-runtime/sdk/RuntimeClient")<RuntimeClient, Client>() {}

/** A client for the runtime at `baseUrl`, sending `token`; fails with InvalidOptions for a non-https remote URL. */
export const make = (options: Options): Effect.Effect<Client, InvalidOptions, HttpClient.HttpClient> => build(options)

/** The client as a layer, on the HttpClient it is given. */
export const layer = (options: Options): Layer.Layer<RuntimeClient, InvalidOptions, HttpClient.HttpClient> =>
  Layer.effect(RuntimeClient, make(options))

/** The client as a layer on fetch. */
export const layerFetch = (options: Options): Layer.Layer<RuntimeClient, InvalidOptions> =>
  Layer.provide(layer(options), FetchHttpClient.layer)
