/**
 * Watchers of one agent's events as clients hold them: live SSE streams that
 * reconnect with Last-Event-ID (at once on `event: reconnect`, after a pause
 * when a node is unreachable, through a snapshot on 409 REPLAY_GAP), and long
 * polls. Each keeps what it saw, in order, with the places where it was told
 * it missed something, so a test can check the stream's contract from
 * outside: ids only grow, and no event is skipped unless the watcher was told
 * (a REPLAY_GAP or a snapshot).
 */
import type { Scope } from "effect"
import { Effect, Fiber } from "effect"
import * as Http from "./Http.ts"

/** What a watcher saw, in order. */
export type Mark =
  | { readonly _tag: "event"; readonly id: number; readonly data: any }
  /**
   * Told that what lies after `from` up to `to` is not coming (REPLAY_GAP, then a snapshot or the buffer's
   * oldest), at `at` (ms).
   */
  | { readonly _tag: "gap"; readonly from: number; readonly to: number; readonly at: number }

export interface Watcher {
  readonly name: string
  readonly marks: ReadonlyArray<Mark>
  /** Connections or polls that failed to reach a node (it was down or paused). */
  readonly unreachable: number
  /** Live streams that went quiet (no frame, not even a heartbeat) for longer than the stall limit. */
  readonly stalls: number
  /** Streams ended by `event: reconnect`. */
  readonly reconnects: number
  /** Streams that ended without `event: reconnect`. */
  readonly cutOff: number
  /** Each connection or poll as it went (when, where, from which cursor, how it answered and ended): for a failure's diagnosis. */
  readonly journal: ReadonlyArray<string>
}

export interface Options {
  readonly agentId: string
  readonly token: string
  /** The node this watcher talks to now; undefined while none is reachable. */
  readonly base: () => string | undefined
  /** The cursor to start from; the latest (no replay) when absent. */
  readonly cursor?: number
  /** A live stream silent this long is dead and is reconnected (heartbeats come every 5 s). */
  readonly stallMs?: number
}

interface State extends Watcher {
  marks: Array<Mark>
  unreachable: number
  stalls: number
  reconnects: number
  cutOff: number
  journal: Array<string>
}

const newState = (name: string): State => ({
  name,
  marks: [],
  unreachable: 0,
  stalls: 0,
  reconnects: 0,
  cutOff: 0,
  journal: []
})

const note = (state: State, line: string) => state.journal.push(`${new Date().toISOString()} ${line}`)

const lastCursor = (state: State, initial: number | undefined) => {
  const last = state.marks.at(-1)
  return last === undefined ? initial : last._tag === "event" ? last.id : last.to
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Reads one SSE response until it ends; returns how it ended. */
const readStream = async (
  response: globalThis.Response,
  state: State,
  stallMs: number,
  signal: AbortSignal
): Promise<"reconnect" | "ended" | "stalled"> => {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let text = ""
  let timer: ReturnType<typeof setTimeout> | undefined
  let stalled = false
  const arm = () => {
    clearTimeout(timer)
    timer = setTimeout(() => {
      stalled = true
      void reader.cancel().catch(() => {})
    }, stallMs)
  }
  arm()
  try {
    while (!signal.aborted) {
      const { done, value } = await reader.read()
      if (done) break
      arm()
      text += decoder.decode(value, { stream: true })
      let end: number
      while ((end = text.indexOf("\n\n")) !== -1) {
        const fields = Http.parseFrame(text.slice(0, end))
        text = text.slice(end + 2)
        if (fields.event === "reconnect") return "reconnect"
        if (fields.event !== undefined || fields.data === undefined) continue
        const data = JSON.parse(fields.data)
        if (data.type === "snapshot") {
          // Told where it goes on from: whatever lay between is covered by the snapshot.
          const from = lastCursor(state, undefined) ?? data.cursor
          state.marks.push({ _tag: "gap", from, to: data.cursor, at: Date.now() })
          continue
        }
        if (fields.id !== undefined) state.marks.push({ _tag: "event", id: Number(fields.id), data })
      }
    }
  } catch {
    // the connection broke, or the stall timer cancelled it
  } finally {
    clearTimeout(timer)
  }
  return stalled ? "stalled" : "ended"
}

/**
 * A live SSE watcher, reconnecting like any client until its scope closes.
 * On 409 REPLAY_GAP it reconnects asking for a snapshot.
 */
export const sse = (name: string, options: Options): Effect.Effect<Watcher, never, Scope.Scope> =>
  Effect.gen(function*() {
    const state = newState(name)
    const stallMs = options.stallMs ?? 15_000
    const controller = new AbortController()
    const loop = async () => {
      let snapshot = false
      while (!controller.signal.aborted) {
        const base = options.base()
        if (base === undefined) {
          await sleep(200)
          continue
        }
        const cursor = lastCursor(state, options.cursor)
        const headers: Record<string, string> = {
          authorization: `Bearer ${options.token}`,
          accept: "text/event-stream"
        }
        if (cursor !== undefined) headers["last-event-id"] = String(cursor)
        let response: globalThis.Response
        // A node that does not answer within 10 s is unreachable; once it answers, the stream is read for as long
        // as it lasts, as by any SSE client (the stall limit catches one gone silent).
        const unanswered = new AbortController()
        const timer = setTimeout(() => unanswered.abort(new Error("no answer within 10 s")), 10_000)
        try {
          response = await fetch(`${base}/v1/agents/${options.agentId}/events${snapshot ? "?snapshot=1" : ""}`, {
            headers,
            signal: AbortSignal.any([controller.signal, unanswered.signal])
          })
        } catch (error) {
          note(state, `${base} after ${cursor}${snapshot ? " (snapshot)" : ""}: ${String(error)}`)
          state.unreachable++
          await sleep(200)
          continue
        } finally {
          clearTimeout(timer)
        }
        note(state, `${base} after ${cursor}${snapshot ? " (snapshot)" : ""}: ${response.status}`)
        if (response.status === 409) {
          await response.body?.cancel()
          snapshot = true
          continue
        }
        if (response.status !== 200) {
          await response.body?.cancel()
          state.unreachable++
          await sleep(200)
          continue
        }
        snapshot = false
        const ended = await readStream(response, state, stallMs, controller.signal)
        note(state, `${base} ${ended} at ${lastCursor(state, options.cursor)}`)
        if (ended === "reconnect") state.reconnects++
        else if (ended === "stalled") state.stalls++
        else if (!controller.signal.aborted) {
          state.cutOff++
          await sleep(100)
        }
      }
    }
    const running = loop()
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => {
        controller.abort()
        return running
      })
    )
    return state as Watcher
  })

/** A long-polling watcher (`poll=1&wait=N`); on 409 REPLAY_GAP it reads on from the oldest event still buffered. */
export const poll = (name: string, options: Options & { readonly cursor: number }) =>
  Effect.gen(function*() {
    const state = newState(name)
    const loop = Effect.gen(function*() {
      while (true) {
        const base = options.base()
        if (base === undefined) {
          yield* Effect.sleep("200 millis")
          continue
        }
        const cursor = lastCursor(state, options.cursor)!
        const response = yield* Effect.either(Effect.tryPromise((signal) =>
          fetch(`${base}/v1/agents/${options.agentId}/events?poll=1&wait=5`, {
            headers: { authorization: `Bearer ${options.token}`, "last-event-id": String(cursor) },
            signal: AbortSignal.any([signal, AbortSignal.timeout(15_000)])
          }).then(async (answer) => ({
            status: answer.status,
            body: await answer.json().catch(() => undefined) as any
          }))
        ))
        if (response._tag === "Left" || response.right.status >= 500) {
          state.unreachable++
          yield* Effect.sleep("200 millis")
          continue
        }
        const { body, status } = response.right
        if (status === 409) {
          const oldest = Number(/oldest (\d+)/.exec(body.error)?.[1])
          state.marks.push({ _tag: "gap", from: cursor, to: oldest - 1, at: Date.now() })
          continue
        }
        for (const event of body.events as Array<{ id: number; data: any }>) {
          state.marks.push({ _tag: "event", id: event.id, data: event.data })
        }
      }
    })
    const fiber = yield* Effect.forkScoped(loop)
    yield* Effect.addFinalizer(() =>
      Fiber.interrupt(fiber)
    )
    return state as Watcher
  })

/** The stream event type of an event frame (`turn_resumed`, ...) or the frame's own type (`response`). */
export const typeOf = (data: any): string => data?.type === "event" ? data.event?.type : data?.type

export interface Violations {
  /** An id not above the one before it. */
  readonly wentBack: Array<string>
  /** Ids some reader had that this watcher passed over without being told. */
  readonly skipped: Array<string>
  /** Moved turns whose turn_resumed (or turn_recovered) this watcher neither saw nor was told it missed. */
  readonly missedResumes: Array<string>
  /**
   * Moved turns whose turn_resumed nobody saw, every watcher told it missed events while the turn ran: the
   * owner that told it was lost (or let the agent go) before anyone read it. Allowed; a count to report.
   */
  readonly resumesLost: Array<string>
  /** Watchers that never got as far as the response of a request in `settled` (by seeing it or being told). */
  readonly behind: Array<string>
}

/**
 * Checks every watcher against what all of them saw together (plus `known`,
 * e.g. a final read of the buffer): ids only grow; between two events a
 * watcher saw with no gap mark between them, nobody saw an event it lacks;
 * and each request in `moved` has its turn_resumed seen by every watcher
 * unless that watcher was told it missed it. A turn_resumed nobody saw went
 * with its owner's buffer: allowed only where every watcher was told of a gap
 * while the turn ran, after the first of its events the watcher saw (or, when
 * it saw none, after the request was sent, by `sentAt`).
 */
export const verify = (
  watchers: ReadonlyArray<Watcher>,
  options: {
    readonly moved?: Iterable<string>
    readonly settled?: Iterable<string>
    readonly known?: ReadonlyArray<{ id: number; data: any }>
    /** When moved requests were sent (ms): a watcher that saw none of a turn is told of it by a gap after that. */
    readonly sentAt?: ReadonlyMap<string, number>
  } = {}
): Violations => {
  const all = new Map<number, any>()
  for (const watcher of watchers) {
    for (const mark of watcher.marks) if (mark._tag === "event") all.set(mark.id, mark.data)
  }
  for (const event of options.known ?? []) all.set(event.id, event.data)
  const ids = [...all.keys()].sort((a, b) => a - b)
  const between = (low: number, high: number) => ids.filter((id) => id > low && id < high)
  const resumeIds = new Map<string, number>()
  // turn_recovered when the turn went on on the runner that began it, restarted under the same address.
  for (const [id, data] of all) {
    if (typeOf(data) === "turn_resumed" || typeOf(data) === "turn_recovered") resumeIds.set(data.requestId, id)
  }

  const responseIds = new Map<string, number>()
  for (const [id, data] of all) if (data?.type === "response") responseIds.set(data.id, id)

  const wentBack: Array<string> = []
  const behind: Array<string> = []
  const skipped: Array<string> = []
  const missedResumes: Array<string> = []
  /** Whether `watcher` was told of a gap while `requestId` ran (see above). */
  const toldWhileRan = (watcher: Watcher, requestId: string) => {
    const first = watcher.marks.findIndex((mark) => mark._tag === "event" && mark.data?.requestId === requestId)
    const sent = options.sentAt?.get(requestId) ?? Number.NEGATIVE_INFINITY
    return watcher.marks.slice(first + 1).some((mark) => mark._tag === "gap" && (first !== -1 || mark.at >= sent))
  }
  const moved = [...options.moved ?? []]
  const resumesLost = moved.filter((requestId) =>
    !resumeIds.has(requestId) && watchers.every((watcher) => toldWhileRan(watcher, requestId))
  )
  for (const watcher of watchers) {
    let previous: Mark | undefined
    const seen = new Set<number>()
    const toldSpans: Array<[number, number]> = []
    for (const mark of watcher.marks) {
      if (mark._tag === "gap") {
        toldSpans.push([mark.from, mark.to])
        if (previous?._tag === "event" && mark.to < previous.id) {
          wentBack.push(`${watcher.name}: gap to ${mark.to} after ${previous.id}`)
        }
      } else {
        seen.add(mark.id)
        if (previous !== undefined) {
          const before = previous._tag === "event" ? previous.id : previous.to
          if (mark.id <= before) wentBack.push(`${watcher.name}: ${mark.id} after ${before}`)
          if (previous._tag === "event") {
            const missing = between(previous.id, mark.id)
            if (missing.length > 0) {
              skipped.push(
                `${watcher.name}: ${missing.length} events between ${previous.id} and ${mark.id} (${
                  missing.slice(0, 3).map((id) => typeOf(all.get(id))).join(", ")
                }...)`
              )
            }
          }
        }
      }
      previous = mark
    }
    const first = watcher.marks.find((mark) => mark._tag === "event")?.id ?? Number.POSITIVE_INFINITY
    for (const requestId of moved) {
      const id = resumeIds.get(requestId)
      if (id === undefined) {
        if (!toldWhileRan(watcher, requestId)) {
          missedResumes.push(
            `${watcher.name}: nobody saw turn_resumed of ${requestId}, nor was told of a gap while it ran`
          )
        }
        continue
      }
      const told = toldSpans.some(([from, to]) => id > from && id <= to)
      if (id >= first && !seen.has(id) && !told) missedResumes.push(`${watcher.name}: ${requestId}`)
    }
    const reached = lastCursor(watcher as State, undefined) ?? Number.NEGATIVE_INFINITY
    for (const requestId of options.settled ?? []) {
      const id = responseIds.get(requestId)
      if (id === undefined) behind.push(`${watcher.name}: nobody saw the response of ${requestId}`)
      else if (reached < id) behind.push(`${watcher.name}: at ${reached}, before the response of ${requestId} (${id})`)
    }
  }
  return { wentBack, skipped, missedResumes, resumesLost, behind }
}
