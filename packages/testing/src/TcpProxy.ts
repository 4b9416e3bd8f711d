/**
 * A TCP proxy on loopback in front of PostgreSQL: each node of a fault test
 * reaches the database through its own, so the test can cut one node off (a
 * partition: the node still serves HTTP) or all of them (an outage) while the
 * database itself runs on. Real sockets both ways; cutting resets every open
 * connection, which PostgreSQL sees as its sessions ending (their advisory
 * locks go with them), and new connections are refused or held until
 * `restore`.
 */
import { Effect, type Scope } from "effect"
import * as Net from "node:net"

/**
 * What happens to a connection opened while cut. `refuse`: reset at once (a
 * server that is down). `hold`: accepted and never answered (packets lost on
 * the way), so the client's own connect timeout decides; reset on `restore`.
 */
export type CutMode = "refuse" | "hold"

export interface TcpProxy {
  readonly port: number
  /** The target URL with its host and port replaced by the proxy's. */
  readonly url: string
  /** Resets every open connection and refuses (or holds) new ones until `restore`. */
  readonly cut: (mode?: CutMode) => Effect.Effect<void>
  /** Forwards new connections again. */
  readonly restore: Effect.Effect<void>
  readonly isCut: () => boolean
  /** Connections being forwarded now. */
  readonly open: () => number
}

/** Starts a proxy to the host and port of `target` (a URL such as `postgres://u:p@127.0.0.1:5432/db`). */
export const start = (target: string): Effect.Effect<TcpProxy, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const upstream = new URL(target)
    const host = upstream.hostname
    const port = Number(upstream.port || 5432)
    const pairs = new Set<{ readonly client: Net.Socket; readonly server: Net.Socket }>()
    const held = new Set<Net.Socket>()
    let cutMode: CutMode | undefined

    const forward = (client: Net.Socket) => {
      const server = Net.connect({ host, port })
      const pair = { client, server }
      pairs.add(pair)
      const end = () => {
        pairs.delete(pair)
        // A reset, not a FIN: the far side learns at once, as from a broken path.
        if (!client.destroyed) client.resetAndDestroy()
        if (!server.destroyed) server.destroy()
      }
      client.on("error", end).on("close", end)
      server.on("error", end).on("close", end)
      client.pipe(server)
      server.pipe(client)
    }

    const listener = Net.createServer({ noDelay: true }, (client) => {
      if (cutMode === "refuse") return client.resetAndDestroy()
      if (cutMode === "hold") {
        held.add(client)
        client.on("error", () => {}).on("close", () => held.delete(client))
        return
      }
      forward(client)
    })

    yield* Effect.acquireRelease(
      Effect.async<void, Error>((resume) => {
        listener.once("error", (error) => resume(Effect.fail(error)))
        listener.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          for (const { client, server } of pairs) {
            client.destroy()
            server.destroy()
          }
          for (const socket of held) socket.destroy()
          listener.close(() => resume(Effect.void))
        })
    )

    const own = (listener.address() as Net.AddressInfo).port
    const url = new URL(target)
    url.hostname = "127.0.0.1"
    url.port = String(own)

    return {
      port: own,
      url: url.href,
      cut: (mode = "refuse") =>
        Effect.sync(() => {
          cutMode = mode
          for (const { client, server } of [...pairs]) {
            client.resetAndDestroy()
            server.destroy()
          }
          pairs.clear()
        }),
      restore: Effect.sync(() => {
        cutMode = undefined
        for (const socket of held) socket.resetAndDestroy()
        held.clear()
      }),
      isCut: () => cutMode !== undefined,
      open: () => pairs.size
    }
  })
