/**
 * The model gateway as one node:http request handler, built once inside
 * the node's Effect runtime. Model calls (cached key, cached model, free
 * slot, pass-through or translated) run as plain callbacks and promises;
 * Effects run only where they do real work (cache misses, the model
 * listing, admin). See docs/gateway.md.
 */
import { Operator, Tenants } from "@agent-runtime/accounts"
import { Ledger } from "@agent-runtime/billing"
import { Validation } from "@agent-runtime/domain"
import { Egress } from "@agent-runtime/egress"
import { type Credentials, Listing } from "@agent-runtime/models"
import { DatabaseHealth, PersistenceError } from "@agent-runtime/store"
import { Cause, Context, Effect, Exit, Layer, Option, Runtime } from "effect"
import type * as Http from "node:http"
import { Authenticator, type Principal } from "./Authenticator.ts"
import * as Canonical from "./Canonical.ts"
import * as ChatCompletions from "./ChatCompletions.ts"
import { GatewayConfig } from "./GatewayConfig.ts"
import * as GatewayError from "./GatewayError.ts"
import type { Codec } from "./internal/codec.ts"
import * as ModelList from "./internal/modelList.ts"
import * as Passthrough from "./internal/passthrough.ts"
import * as Reply from "./internal/reply.ts"
import * as TokenUsage from "./internal/tokenUsage.ts"
import * as Translated from "./internal/translated.ts"
import * as Messages from "./Messages.ts"
import * as Responses from "./Responses.ts"
import { Slots } from "./Slots.ts"
import { Targets } from "./Targets.ts"
import { TenantSettings } from "./TenantSettings.ts"
import * as TokenCount from "./TokenCount.ts"
import { UsageBatch } from "./UsageBatch.ts"

/** Names the key scope whose keys a call uses first (the tenant's own, like an agent's `keyScope`). */
export const keyScopeHeader = "x-agent-runtime-key-scope"

const sendError = (res: Http.ServerResponse, codec: Codec, error: GatewayError.GatewayError) => {
  if (res.headersSent) {
    if (!res.writableEnded) res.end(codec.streamError(error))
    return
  }
  Reply.json(
    res,
    error.status,
    codec.errorBody(error),
    error.retryAfter === undefined ? {} : { "retry-after": String(error.retryAfter) }
  )
}

const bearer = (req: Http.IncomingMessage) => {
  const header = req.headers.authorization
  return header !== undefined && header.length > 7 && header.slice(0, 7).toLowerCase() === "bearer "
    ? header.slice(7).trim()
    : undefined
}

/** messages takes `x-api-key` (its SDK's way); a bearer token is accepted too. */
const apiKeyOf = (req: Http.IncomingMessage, codec: Codec) => {
  if (codec.protocol === "messages") {
    const key = req.headers["x-api-key"]
    if (typeof key === "string" && key !== "") return key
  }
  return bearer(req)
}

const readBody = (req: Http.IncomingMessage, limit: number) =>
  new Promise<string>((resolve, reject) => {
    const tooLarge = () =>
      new GatewayError.GatewayError({ status: 413, code: "TOO_LARGE", message: `the body exceeds ${limit} bytes` })
    if (Number(req.headers["content-length"] ?? 0) > limit) return reject(tooLarge())
    const chunks: Array<Buffer> = []
    let size = 0
    req.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) {
        req.removeAllListeners("data")
        req.resume()
        return reject(tooLarge())
      }
      chunks.push(chunk)
    })
    req.on("end", () =>
      resolve(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const parseJson = (text: string): Canonical.Json => {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return GatewayError.invalid("the body is not valid JSON")
  }
  if (!Canonical.isObject(body)) return GatewayError.invalid("the body must be a JSON object")
  // The same refusal as the REST API's: strings PostgreSQL cannot store (NUL, lone surrogates; a model name is
  // looked up there) and nesting too deep to write upstream without overflowing the stack.
  const problem = Validation.jsonInputProblem(body)
  return problem === undefined ? body : GatewayError.invalid(`${problem.path}: ${problem.message}`, problem.path)
}

/** A path segment decoded; a malformed escape or a NUL (PostgreSQL refuses it in text) is the client's error. */
const pathSegment = (raw: string): string => {
  let decoded: string
  try {
    decoded = decodeURIComponent(raw)
  } catch {
    return GatewayError.invalid("the path is not valid percent-encoded UTF-8")
  }
  return decoded.includes("\u0000") ? GatewayError.invalid("the path must not contain NUL (%00)") : decoded
}

/**
 * The error body for a request node:http refused before the handler saw it
 * (malformed framing, headers over its limit), in the protocol its path
 * names. When the request line came in an earlier packet than the one
 * refused, the path is unknown: then the body is Anthropic's with OpenAI's
 * `param` added, which both protocols' SDKs read as their own.
 */
export const clientErrorBody = (
  error: { readonly status: number; readonly code: string; readonly message: string },
  path: string | undefined
) => {
  const refused = new GatewayError.GatewayError({ status: error.status, code: error.code, message: error.message })
  if (path === undefined) {
    const body = Messages.codec.errorBody(refused) as { type: string; error: Record<string, unknown> }
    return { ...body, error: { ...body.error, param: null } }
  }
  return (path.startsWith("/v1/messages") ? Messages.codec : ChatCompletions.codec).errorBody(refused)
}

const codecs: Record<string, Codec> = {
  "/v1/chat/completions": ChatCompletions.codec,
  "/v1/responses": Responses.codec,
  "/v1/messages": Messages.codec
}

export interface Service {
  /**
   * The node:http request listener: model calls, the model list, token counts and the operator's per-tenant
   * settings, each error answered in the shape of the protocol its path names.
   */
  readonly handle: (req: Http.IncomingMessage, res: Http.ServerResponse) => void
}

export class Gateway extends Context.Tag("@agent-runtime/gateway/Gateway")<Gateway, Service>() {}

export const make = Effect.gen(function*() {
  const config = yield* GatewayConfig
  const runtime = yield* Effect.runtime<never>()
  const runPromiseExit = Runtime.runPromiseExit(runtime)
  const auth = yield* Authenticator
  const targets = yield* Targets
  const slots = yield* Slots
  const usage = yield* UsageBatch
  const settings = yield* TenantSettings
  const { dispatcher } = yield* Egress.Egress
  const listing = yield* Listing.Listing
  const operator = yield* Operator.Operator
  const tenants = yield* Tenants.Tenants
  const health = yield* DatabaseHealth.DatabaseHealth
  const ledger = yield* Ledger.Ledger

  /**
   * Runs an Effect from a callback; a failure is thrown as the `GatewayError` it maps to. A database fault
   * (`PersistenceError`) is thrown as its cause, a defect like any other: 503 when the database cannot be
   * reached, else logged and 500 (see `handle`). The one place the gateway maps it.
   */
  const run = <A, E>(
    effect: Effect.Effect<A, E | PersistenceError.PersistenceError>,
    toError: (error: E) => GatewayError.GatewayError
  ) =>
    runPromiseExit(effect).then((exit) => {
      if (Exit.isSuccess(exit)) return exit.value
      if (DatabaseHealth.isUnreachable(exit.cause)) {
        health.observe(exit.cause)
        throw GatewayError.databaseUnreachable()
      }
      const failure = Cause.failureOption(exit.cause)
      if (Option.isNone(failure)) throw exit.cause
      if (failure.value instanceof PersistenceError.PersistenceError) throw Cause.die(failure.value.cause)
      throw toError(failure.value as E)
    })

  const authenticate = async (req: Http.IncomingMessage, codec: Codec): Promise<Principal> => {
    const key = apiKeyOf(req, codec)
    if (key === undefined) {
      throw GatewayError.unauthorized(
        codec.protocol === "messages"
          ? "send your API key in the x-api-key header"
          : "send your API key as a bearer token"
      )
    }
    const principal = await auth.authenticate(key)
    if (principal === undefined) throw GatewayError.unauthorized("invalid API key")
    // A prepaid tenant whose credit is spent (or monthly cap reached) is refused before anything is sent.
    if (!ledger.knownUnbilled(principal.tenantId)) await run(ledger.admit(principal.tenantId), GatewayError.paymentOf)
    return principal
  }

  const keyScopeOf = (req: Http.IncomingMessage) => {
    const scope = req.headers[keyScopeHeader]
    return typeof scope === "string" && scope !== "" ? Option.some(scope) : Option.none<string>()
  }

  const resolve = (principal: Principal, req: Http.IncomingMessage, model: string) => {
    const scope = keyScopeOf(req)
    return targets.cached(principal.tenantId, scope, model) ??
      run(targets.resolve(principal.tenantId, scope, model), GatewayError.fromModelError)
  }

  const recordUsage = (principal: Principal, target: Credentials.Target) => (tokens: TokenUsage.TokenUsage) =>
    usage.add(TokenUsage.entry(principal.tenantId, target, tokens))

  /** Decodes, resolves and takes a slot: what every model call shares. */
  const prepare = async (req: Http.IncomingMessage, codec: Codec) => {
    const principal = await authenticate(req, codec)
    const body = parseJson(await readBody(req, config.maxBodyBytes))
    if (typeof body.model !== "string" || body.model === "") return GatewayError.invalid("model is required", "model")
    if (codec.protocol === "messages") {
      if (typeof req.headers["anthropic-version"] !== "string") {
        GatewayError.invalid("anthropic-version: header is required")
      }
    }
    const target = await resolve(principal, req, body.model)
    return { principal, body, target }
  }

  /** Runs `call` holding one of the tenant's stream slots (waiting in its queue when none is free). */
  const withSlot = async (principal: Principal, call: () => Promise<void>) => {
    const granted = slots.acquire(principal.tenantId, principal.streamSlots)
    const release = typeof granted === "function" ? granted : await granted
    try {
      await call()
    } finally {
      release()
    }
  }

  const modelCall = async (req: Http.IncomingMessage, res: Http.ServerResponse, codec: Codec) => {
    const { body, principal, target } = await prepare(req, codec)
    const native = target.model.api === Canonical.nativeApi[codec.protocol]
    if (codec.protocol === "messages") Messages.validate(body)
    // Decoded before a slot is taken, so a request we cannot translate is refused at once.
    const upstream = native ? undefined : Translated.upstreamOf(target)
    const request = native ? undefined : codec.decode(body)
    const onUsage = recordUsage(principal, target)
    await withSlot(principal, () =>
      upstream === undefined || request === undefined
        ? Passthrough.forward({ dispatcher, codec, target, body, incoming: req.headers, res, onUsage })
        : Translated.call({ dispatcher, codec, upstream, target, request, res, onUsage }))
  }

  const countTokens = async (req: Http.IncomingMessage, res: Http.ServerResponse) => {
    const codec = Messages.codec
    const { body, principal, target } = await prepare(req, codec)
    if (!Array.isArray(body.messages)) GatewayError.invalid("messages: Field required", "messages")
    const request = target.model.api === "anthropic-messages" ? undefined : codec.decode(body)
    // The spec has count_tokens take a stream slot like any upstream call.
    await withSlot(principal, async () => {
      if (request === undefined) {
        await Passthrough.forward({
          dispatcher,
          codec,
          target,
          body,
          incoming: req.headers,
          res,
          path: "/v1/messages/count_tokens",
          onUsage: () => {}
        })
      } else {
        Reply.json(res, 200, { input_tokens: TokenCount.estimate(request) })
      }
    })
  }

  const models = async (req: Http.IncomingMessage, res: Http.ServerResponse) => {
    // Both SDKs list models: OpenAI's with a bearer token, Anthropic's with x-api-key.
    const principal = await authenticate(
      req,
      req.headers["x-api-key"] !== undefined ? Messages.codec : ChatCompletions.codec
    )
    const all = await run(listing.models(principal.tenantId), () => GatewayError.internal())
    Reply.json(res, 200, ModelList.encode(all))
  }

  /** `GET`/`PUT /v1/admin/tenants/{id}/gateway`: the operator reads or sets a tenant's stream slots. */
  const admin = async (req: Http.IncomingMessage, res: Http.ServerResponse, tenantId: string) => {
    const token = bearer(req)
    if (token === undefined || !operator.verify(token)) {
      throw GatewayError.unauthorized("the operator token is required")
    }
    const tenant = await run(tenants.find(tenantId), () => GatewayError.internal())
    if (Option.isNone(tenant)) throw GatewayError.notFound(`no tenant ${tenantId}`)
    if (req.method === "PUT") {
      const body = parseJson(await readBody(req, 4096))
      const slots = body.streamSlots
      if (
        slots !== null && !(typeof slots === "number" && Number.isInteger(slots) && slots >= 1 && slots <= 10_000)
      ) {
        GatewayError.invalid("streamSlots must be an integer from 1 to 10000, or null for the default", "streamSlots")
      }
      await run(
        settings.setStreamSlots(tenantId, Option.fromNullable(slots as number | null)),
        () => GatewayError.internal()
      )
      auth.invalidate()
    } else if (req.method !== "GET") throw GatewayError.notFound(`no route ${req.method} ${req.url}`)
    const stored = await run(settings.streamSlots(tenantId), () => GatewayError.internal())
    Reply.json(res, 200, {
      tenant: tenantId,
      streamSlots: Option.getOrElse(stored, () => config.streamSlots),
      override: Option.getOrNull(stored),
      default: config.streamSlots
    })
  }

  const adminPath = /^\/v1\/admin\/tenants\/([^/]+)\/gateway$/

  const route = (req: Http.IncomingMessage, res: Http.ServerResponse, path: string): Promise<void> | void => {
    const codec = codecs[path]
    if (codec !== undefined && req.method === "POST") return modelCall(req, res, codec)
    if (path === "/v1/messages/count_tokens" && req.method === "POST") return countTokens(req, res)
    if (path === "/v1/models" && req.method === "GET") return models(req, res)
    if (path === "/healthz") return Reply.json(res, 200, { status: "ok" })
    const admin_ = adminPath.exec(path)
    if (admin_ !== null) return admin(req, res, pathSegment(admin_[1]!))
    throw GatewayError.notFound(`no route ${req.method} ${path}`)
  }

  const handle = (req: Http.IncomingMessage, res: Http.ServerResponse): void => {
    const url = req.url ?? "/"
    const query = url.indexOf("?")
    const path = query === -1 ? url : url.slice(0, query)
    const codec = path.startsWith("/v1/messages") ? Messages.codec : ChatCompletions.codec
    const fail = (error: unknown) => {
      if (error instanceof GatewayError.GatewayError) return sendError(res, codec, error)
      // A key looked up while the database is away (the cache missed): 503 in the protocol's own shape.
      if (DatabaseHealth.isUnreachable(error)) {
        health.observe(error)
        return sendError(res, codec, GatewayError.databaseUnreachable())
      }
      Runtime.runFork(runtime)(
        Effect.logError("gateway request failed", Cause.isCause(error) ? error : Cause.die(error))
      )
      sendError(res, codec, GatewayError.internal())
    }
    try {
      const pending = route(req, res, path)
      if (pending !== undefined) pending.catch(fail)
    } catch (error) {
      fail(error)
    }
  }

  return Gateway.of({ handle })
})

export const layer: Layer.Layer<
  Gateway,
  never,
  | GatewayConfig
  | Authenticator
  | Targets
  | Slots
  | UsageBatch
  | TenantSettings
  | Egress.Egress
  | Listing.Listing
  | Operator.Operator
  | Tenants.Tenants
  | DatabaseHealth.DatabaseHealth
  | Ledger.Ledger
> = Layer.effect(Gateway, make)
