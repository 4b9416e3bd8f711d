/**
 * Writing the gateway's own answers on node:http: a whole JSON body with
 * its length, or the headers that open an SSE stream.
 */
import type * as Http from "node:http"

export const sseHeaders = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" }

export const json = (
  res: Http.ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {}
) => {
  const text = JSON.stringify(value)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers })
  res.end(text)
}
