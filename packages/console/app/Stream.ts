/**
 * An agent's live events: the API's server-sent event stream, read with
 * fetch (so the session cookie goes along), resumed with Last-Event-ID after
 * a drop, at once when the service asks (`event: reconnect`), and when the
 * stream falls silent (the service sends a heartbeat about every 5 seconds).
 */
import { fetchApi } from "./Api.ts"

const silenceMs = 20_000
const retryFirstMs = 500
const retryMostMs = 15_000

export interface Frame {
  readonly type: string
  readonly [field: string]: unknown
}

interface Message {
  readonly event: string
  readonly data: string
  readonly id: string | undefined
}

/** Server-sent events from a body; any bytes, heartbeats included, count as activity. */
async function* messages(body: ReadableStream<Uint8Array>, onActivity: () => void): AsyncGenerator<Message> {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  let event = ""
  let data: Array<string> = []
  let id: string | undefined
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      onActivity()
      buffer += decoder.decode(value, { stream: true })
      const lines = buffer.split("\n")
      buffer = lines.pop() ?? ""
      for (const raw of lines) {
        const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw
        if (line === "") {
          if (data.length > 0 || event !== "") yield { event: event || "message", data: data.join("\n"), id }
          event = ""
          data = []
          id = undefined
          continue
        }
        if (line.startsWith(":")) continue
        const colon = line.indexOf(":")
        const field = colon === -1 ? line : line.slice(0, colon)
        let value = colon === -1 ? "" : line.slice(colon + 1)
        if (value.startsWith(" ")) value = value.slice(1)
        if (field === "event") event = value
        else if (field === "data") data.push(value)
        else if (field === "id") id = value
      }
    }
  } finally {
    reader.cancel().catch(() => {})
  }
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
        if (message.event === "ready") {
          follower.onStatus("live")
          delay = retryFirstMs
          continue
        }
        if (message.event === "reconnect") {
          again = true
          break
        }
        if (message.id !== undefined && message.id !== "" && Number.isFinite(Number(message.id))) {
          at = Number(message.id)
        }
        if (message.event !== "message" || message.data === "") continue
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
