/**
 * An agent's live events: the API's server-sent event stream, read with
 * fetch (so the session cookie goes along), resumed with Last-Event-ID after
 * a drop, at once when the service asks (`event: reconnect`), and when the
 * stream falls silent (the service sends a heartbeat about every 5 seconds).
 */
import type { EventSourceMessage } from "eventsource-parser"
import { EventSourceParserStream } from "eventsource-parser/stream"
import { fetchApi } from "./Api.ts"

const silenceMs = 20_000
const retryFirstMs = 500
const retryMostMs = 15_000

export interface Frame {
  readonly type: string
  readonly [field: string]: unknown
}

/**
 * The messages of a server-sent event stream (parsed by eventsource-parser); any bytes, heartbeat comments
 * included, count as activity.
 */
const messages = (body: ReadableStream<Uint8Array>, onActivity: () => void): ReadableStream<EventSourceMessage> => {
  const decoder = new TextDecoder()
  return body
    .pipeThrough(
      new TransformStream<Uint8Array, string>({
        transform: (chunk, controller) => {
          onActivity()
          controller.enqueue(decoder.decode(chunk, { stream: true }))
        }
      })
    )
    .pipeThrough(new EventSourceParserStream())
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export interface Follower {
  readonly onFrame: (frame: Frame) => void
  readonly onStatus: (status: "connecting" | "live" | "reconnecting") => void
  readonly onError: (error: unknown) => void
}

/**
 * Follows the agent's events from `cursor` until `signal` aborts. The
 * `snapshot=1` option lets a cursor behind the service's buffer start from a
 * snapshot frame (read history again) instead of failing.
 */
export const follow = async (agentId: string, cursor: number | undefined, follower: Follower, signal: AbortSignal) => {
  let delay = retryFirstMs
  let at = cursor
  follower.onStatus("connecting")
  while (!signal.aborted) {
    const aborter = new AbortController()
    const stop = () => aborter.abort()
    signal.addEventListener("abort", stop)
    let silence: ReturnType<typeof setTimeout> | undefined
    const alive = () => {
      clearTimeout(silence)
      silence = setTimeout(() => aborter.abort(), silenceMs)
    }
    let again = false
    try {
      alive()
      const response = await fetchApi(`/v1/agents/${encodeURIComponent(agentId)}/events?snapshot=1`, {
        signal: aborter.signal,
        ...(at === undefined ? {} : { headers: { "last-event-id": String(at) } })
      })
      if (response.body === null) throw new Error("the event stream has no body")
      for await (const message of messages(response.body, alive)) {
        const event = message.event ?? "message"
        if (event === "ready") {
          follower.onStatus("live")
          delay = retryFirstMs
          continue
        }
        if (event === "reconnect") {
          again = true
          break
        }
        if (message.id !== undefined && message.id !== "" && Number.isFinite(Number(message.id))) {
          at = Number(message.id)
        }
        if (event !== "message" || message.data === "") continue
        let frame: unknown
        try {
          frame = JSON.parse(message.data)
        } catch {
          continue
        }
        if (typeof frame === "object" && frame !== null && typeof (frame as Frame).type === "string") {
          if ((frame as Frame).type === "snapshot" && typeof (frame as Frame).cursor === "number") {
            at = (frame as Frame).cursor as number
          }
          follower.onFrame(frame as Frame)
        }
      }
    } catch (error) {
      if (signal.aborted) return
      if (!(error instanceof DOMException && error.name === "AbortError")) follower.onError(error)
    } finally {
      clearTimeout(silence)
      signal.removeEventListener("abort", stop)
    }
    if (signal.aborted) return
    follower.onStatus("reconnecting")
    if (!again) {
      await sleep(delay)
      delay = Math.min(delay * 2, retryMostMs)
    }
  }
}
