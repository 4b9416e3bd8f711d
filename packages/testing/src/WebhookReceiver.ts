/**
 * A webhook receiver as a tenant would run one: a real HTTP server on
 * loopback that verifies every delivery with the `standardwebhooks` library
 * against the secrets it was given, and answers as a test tells it to
 * (a status, a delay, a redirect), or goes down and comes back on its port.
 */
import { Effect, type Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { Webhook } from "standardwebhooks"

export interface Delivery {
  readonly path: string
  readonly headers: {
    readonly id: string
    readonly timestamp: string
    readonly signature: string
  }
  readonly body: string
  readonly event: {
    readonly id: string
    readonly type: string
    readonly created: number
    readonly data: Record<string, any>
  }
  /** The secrets (as given to `trust`) whose check with the library passed. */
  readonly verifiedWith: ReadonlyArray<string>
  /** What the receiver answered (a delayed answer is recorded when it was given). */
  readonly status: number
  readonly at: number
}

export interface Behaviour {
  readonly status?: number
  readonly delayMs?: number
  /** Answers 302 to this location. */
  readonly location?: string
}

export interface WebhookReceiver {
  /** `http://127.0.0.1:<port>`; endpoints are paths under it. */
  readonly url: string
  /** The secrets a path's deliveries are checked against. */
  readonly trust: (path: string, secrets: ReadonlyArray<string>) => void
  /** How the path answers from now on (default 204 at once). */
  readonly behave: (path: string, behaviour: Behaviour) => void
  /** How many requests reached the path so far, answered or not. */
  readonly arrived: (path: string) => number
  /** Every request the path answered (all paths when none given), in the order of the answers. */
  readonly deliveries: (path?: string) => ReadonlyArray<Delivery>
  /** Waits (up to `timeoutMs`) until `done` holds of the path's deliveries. */
  readonly waitFor: (
    path: string,
    done: (deliveries: ReadonlyArray<Delivery>) => boolean,
    timeoutMs?: number
  ) => Effect.Effect<ReadonlyArray<Delivery>>
  /** Stops listening: connections are refused until `up`. */
  readonly down: Effect.Effect<void>
  /** Listens again on the same port. */
  readonly up: Effect.Effect<void>
}

const header = (request: Http.IncomingMessage, name: string) => {
  const value = request.headers[name]
  return Array.isArray(value) ? value.join(",") : value ?? ""
}

export const start: Effect.Effect<WebhookReceiver, never, Scope.Scope> = Effect.gen(function*() {
  const trusted = new Map<string, ReadonlyArray<string>>()
  const behaviours = new Map<string, Behaviour>()
  const received: Array<Delivery> = []
  const arrivals = new Map<string, number>()
  const server = Http.createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8")
      const path = new URL(request.url ?? "/", "http://receiver").pathname
      arrivals.set(path, (arrivals.get(path) ?? 0) + 1)
      const headers = {
        id: header(request, "webhook-id"),
        timestamp: header(request, "webhook-timestamp"),
        signature: header(request, "webhook-signature")
      }
      const verifiedWith = (trusted.get(path) ?? []).filter((secret) => {
        try {
          new Webhook(secret).verify(body, {
            "webhook-id": headers.id,
            "webhook-timestamp": headers.timestamp,
            "webhook-signature": headers.signature
          })
          return true
        } catch {
          return false
        }
      })
      const behaviour = behaviours.get(path) ?? {}
      const status = behaviour.location === undefined ? behaviour.status ?? 204 : 302
      const answer = () => {
        received.push({ path, headers, body, event: JSON.parse(body), verifiedWith, status, at: Date.now() })
        response.writeHead(status, behaviour.location === undefined ? {} : { location: behaviour.location })
        response.end()
      }
      if (behaviour.delayMs === undefined) answer()
      else setTimeout(answer, behaviour.delayMs)
    })
  })
  const listen = (port: number) =>
    Effect.async<number>((resume) => {
      server.listen(port, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    })
  const close = Effect.async<void>((resume) => {
    server.close(() => resume(Effect.void))
    server.closeAllConnections()
  })
  const port = yield* listen(0)
  yield* Effect.addFinalizer(() => server.listening ? close : Effect.void)

  const waitFor = (path: string, done: (deliveries: ReadonlyArray<Delivery>) => boolean, timeoutMs = 30_000) =>
    Effect.gen(function*() {
      const started = Date.now()
      while (Date.now() - started < timeoutMs) {
        const now = received.filter((delivery) => delivery.path === path)
        if (done(now)) return now
        yield* Effect.sleep("50 millis")
      }
      return yield* Effect.dieMessage(
        `the receiver's ${path} did not get what was awaited in ${timeoutMs} ms; it got ${
          JSON.stringify(received.filter((delivery) => delivery.path === path).map((delivery) => delivery.event.type))
        }`
      )
    })

  return {
    url: `http://127.0.0.1:${port}`,
    trust: (path, secrets) => trusted.set(path, secrets),
    behave: (path, behaviour) => behaviours.set(path, behaviour),
    arrived: (path) => arrivals.get(path) ?? 0,
    deliveries: (path) => path === undefined ? [...received] : received.filter((delivery) => delivery.path === path),
    waitFor,
    down: close,
    up: Effect.asVoid(listen(port))
  }
})
