/**
 * The node's listeners at shutdown. A graceful close of a node:http server
 * waits for every connection to end: keep-alive sockets that go idle after
 * the close began (their stream or long poll ended as the node drained) sat
 * there until the client's or the server's keep-alive timeout (4 s for
 * undici, 66 s for the gateway), and the runner listener's WebSockets from
 * the other runners until those noticed the runner gone. So the REST and
 * gateway listeners end their keep-alive connections once the drain closes
 * the node's streams, and the runner listener ends its connections when it
 * closes, which is after the runner has let its shards go.
 */
import type * as Http from "node:http"
import * as Net from "node:net"

/** How often a closing listener looks for connections that went idle. */
const idleSweepMillis = 100

/**
 * Ends `server`'s keep-alive connections from the moment `onClose` calls
 * back on (the drain closing the node's streams): the idle ones at once,
 * the others as their answers end; every answer begun from then on says
 * `Connection: close`. The server goes on answering until it is closed.
 */
export const closingIdle = (
  server: Http.Server,
  onClose: (listener: () => void) => unknown
): Http.Server => {
  let closing = false
  const emit = server.emit
  server.emit = function(this: Http.Server, event: string | symbol, ...args: Array<any>) {
    if (closing && event === "request") (args[1] as Http.ServerResponse).shouldKeepAlive = false
    return emit.apply(this, [event, ...args] as Parameters<Http.Server["emit"]>)
  } as Http.Server["emit"]
  onClose(() => {
    if (closing) return
    closing = true
    server.closeIdleConnections()
    // Answers under way when the drain closed (event streams, polls) said keep-alive: their sockets are closed as
    // soon as they are idle, not after the keep-alive timeout.
    const sweep = setInterval(() => server.closeIdleConnections(), idleSweepMillis)
    sweep.unref()
    server.once("close", () => clearInterval(sweep))
  })
  return server
}

/**
 * `server`, whose close also ends every connection still open, upgraded
 * ones (WebSockets) included, which node's close waits for and its
 * `closeAllConnections` does not reach. For the runner listener: it closes
 * once the runner has let its shards go and left the cluster, so what the
 * other runners still hold open to it only delays the exit.
 */
export const closingAll = (server: Http.Server): Http.Server => {
  const open = new Set<Net.Socket>()
  server.on("connection", (socket: Net.Socket) => {
    open.add(socket)
    socket.once("close", () => open.delete(socket))
  })
  const close = server.close
  server.close = function(this: Http.Server, callback?: (error?: Error) => void) {
    close.call(this, callback)
    for (const socket of open) socket.destroy()
    return this
  } as Http.Server["close"]
  return server
}

/**
 * The TCP sockets still open, each as `local <- remote` (accepted by one of
 * this node's listeners, with the request it is answering if any) or
 * `local -> remote` (opened by this node): what a stop that does not end
 * waits on.
 */
export const open = (): ReadonlyArray<string> =>
  ((process as unknown as { _getActiveHandles: () => ReadonlyArray<unknown> })._getActiveHandles()).flatMap(
    (handle) => {
      if (!(handle instanceof Net.Socket) || handle.remotePort === undefined) return []
      const socket = handle as Net.Socket & {
        readonly server?: Net.Server | null
        readonly _httpMessage?: { readonly req?: { readonly method?: string; readonly url?: string } } | null
      }
      const local = `${socket.localAddress}:${socket.localPort}`
      const remote = `${socket.remoteAddress}:${socket.remotePort}`
      if (socket.server == null) return [`${local} -> ${remote}`]
      const request = socket._httpMessage?.req
      return [`${local} <- ${remote}${request === undefined ? "" : ` answering ${request.method} ${request.url}`}`]
    }
  )
