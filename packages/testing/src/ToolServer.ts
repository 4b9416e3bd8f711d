/**
 * A page server for tool tests: the pages the agent's tools fetch. It
 * records every call (path, start and end time) so tests can tell whether
 * calls overlapped and count how often each was sent: a call must never be
 * sent twice, even across crashes and moves. `?delay=ms` holds the answer,
 * `?status=n` answers that status, `?hold=name` holds it until the test
 * calls `release(name)`.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

export interface Call {
  readonly path: string
  readonly startedAt: number
  endedAt?: number
}

export interface ToolServer {
  readonly url: string
  readonly calls: ReadonlyArray<Call>
  /** How many times `path` (without its query) was requested. */
  readonly count: (path: string) => number
  /** The paths requested more than once: a tool call sent twice. */
  readonly requestedTwice: () => ReadonlyArray<string>
  /** Answers the requests held with `?hold=name`, and from then on answers such requests at once. */
  readonly release: (name: string) => void
}

const page = (path: string) =>
  `<!doctype html><html><head><title>${path}</title><style>p{}</style><script>var hidden = 1</script></head>` +
  `<body><h1>Page ${path}</h1><p>The answer for ${path} is 42.</p></body></html>`

export const start: Effect.Effect<ToolServer, never, Scope.Scope> = Effect.acquireRelease(
  Effect.async<{ server: Http.Server; tool: ToolServer }>((resume) => {
    const calls: Array<Call> = []
    const held = new Map<string, Array<() => void>>()
    const released = new Set<string>()
    const server = Http.createServer((request, response) => {
      const url = new URL(request.url ?? "/", "http://localhost")
      const call: Call = { path: url.pathname, startedAt: Date.now() }
      calls.push(call)
      const delay = Number(url.searchParams.get("delay") ?? 0)
      const status = Number(url.searchParams.get("status") ?? 200)
      const answer = () =>
        setTimeout(() => {
          call.endedAt = Date.now()
          response.writeHead(status, { "content-type": "text/html; charset=utf-8" })
          response.end(page(url.pathname))
        }, delay)
      const hold = url.searchParams.get("hold")
      if (hold === null || released.has(hold)) answer()
      else held.set(hold, [...(held.get(hold) ?? []), answer])
    })
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resume(Effect.succeed({
        server,
        tool: {
          url: `http://127.0.0.1:${port}`,
          calls,
          count: (path) => calls.filter((call) => call.path === path).length,
          requestedTwice: () => {
            const seen = new Set<string>()
            const twice = new Set<string>()
            for (const call of calls) (seen.has(call.path) ? twice : seen).add(call.path)
            return [...twice]
          },
          release: (name) => {
            released.add(name)
            for (const answer of held.get(name) ?? []) answer()
            held.delete(name)
          }
        }
      }))
    })
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
).pipe(Effect.map(({ tool }) => tool))
