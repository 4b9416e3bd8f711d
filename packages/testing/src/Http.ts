/**
 * Plain HTTP calls for black-box tests: status, headers and parsed body.
 */
import { Effect } from "effect"

export interface Response {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  // Tests read fields of any answer; the schema is what the test asserts.
  readonly body: any
}

export interface RequestOptions {
  readonly token?: string
  readonly json?: unknown
  readonly body?: string | Uint8Array
  readonly headers?: Record<string, string>
}

const send = async (
  base: string,
  method: string,
  path: string,
  options: RequestOptions,
  signal?: AbortSignal
): Promise<Response> => {
  const headers: Record<string, string> = { ...options.headers }
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
  let body = options.body
  if (options.json !== undefined) {
    headers["content-type"] ??= "application/json"
    body = JSON.stringify(options.json)
  }
  const response = await fetch(base + path, {
    method,
    headers,
    ...(body === undefined ? {} : { body }),
    ...(signal === undefined ? {} : { signal })
  })
  const text = await response.text()
  let parsed: unknown
  try {
    parsed = text === "" ? undefined : JSON.parse(text)
  } catch {
    parsed = undefined
  }
  return { status: response.status, headers: response.headers, text, body: parsed }
}

export const request = (base: string, method: string, path: string, options: RequestOptions = {}) =>
  Effect.promise(() => send(base, method, path, options))

/** A request that may not get an answer (a node stopping or paused): fails after `timeoutMs` or on a broken connection. */
export const attempt = (base: string, method: string, path: string, options: RequestOptions, timeoutMs: number) =>
  Effect.tryPromise({
    try: (signal) => send(base, method, path, options, AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])),
    catch: (cause) => cause as Error
  })

/** A client bound to one base URL. */
export const client = (base: string) => ({
  get: (path: string, options?: RequestOptions) => request(base, "GET", path, options),
  post: (path: string, options?: RequestOptions) => request(base, "POST", path, options),
  put: (path: string, options?: RequestOptions) => request(base, "PUT", path, options),
  patch: (path: string, options?: RequestOptions) => request(base, "PATCH", path, options),
  delete: (path: string, options?: RequestOptions) => request(base, "DELETE", path, options)
})

/** The request once it has completed, long-polling its record (45 s at most); status 200 is expected. */
export const settled = (api: ReturnType<typeof client>, token: string, agentId: string, requestId: string) =>
  Effect.gen(function*() {
    const started = Date.now()
    while (Date.now() - started < 45_000) {
      const response = yield* api.get(`/v1/agents/${agentId}/requests/${requestId}?wait=20`, { token })
      if (response.status !== 200) {
        return yield* Effect.die(new Error(`request ${requestId} answered ${response.status}: ${response.text}`))
      }
      if (response.body.state === "completed") return response.body
    }
    return yield* Effect.die(new Error(`request ${requestId} did not settle`))
  })

/** Sends a prompt and answers its request once settled; dies unless the prompt is accepted (202). */
export const prompted = (
  api: ReturnType<typeof client>,
  token: string,
  agentId: string,
  json: Record<string, unknown>
) =>
  Effect.gen(function*() {
    const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, { token, json })
    if (accepted.status !== 202) {
      return yield* Effect.die(new Error(`the prompt answered ${accepted.status}: ${accepted.text}`))
    }
    return yield* settled(api, token, agentId, accepted.body.id)
  })

/** Checks every 100 ms until `check` holds; dies naming `what` after `timeoutMs`. */
export const waitFor = (check: () => Effect.Effect<boolean, any>, what: string, timeoutMs = 20_000) =>
  Effect.gen(function*() {
    const started = Date.now()
    while (Date.now() - started < timeoutMs) {
      if (yield* check()) return
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.die(new Error(`${what}: not within ${timeoutMs} ms`))
  })

/** One server-sent event as a client sees it. */
export interface SseFrame {
  readonly event?: string
  readonly id?: string
  readonly data?: string
  readonly comment?: string
}

/** One SSE frame from the lines between two blank lines. */
export const parseFrame = (block: string): SseFrame => {
  const frame: Record<string, string> = {}
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) frame.comment = line.slice(1).trim()
    else {
      const colon = line.indexOf(":")
      frame[line.slice(0, colon)] = line.slice(colon + 1).trimStart()
    }
  }
  return frame
}

/** Reads an SSE response to its end (or until it is aborted), handing on each frame as it is parsed. */
export const readFrames = async (response: globalThis.Response, onFrame: (frame: SseFrame) => void): Promise<void> => {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let text = ""
  try {
    while (true) {
      const { done, value } = await reader.read()
      if (done) break
      text += decoder.decode(value, { stream: true })
      let end: number
      while ((end = text.indexOf("\n\n")) !== -1) {
        const frame = parseFrame(text.slice(0, end))
        text = text.slice(end + 2)
        onFrame(frame)
      }
    }
  } catch {
    // aborted by its reader
  }
}

/**
 * Opens an event stream and parses its frames as they come; `take` waits
 * for frames until `until` holds for one (or the timeout passes).
 */
export const sse = (base: string, path: string, options: RequestOptions = {}) =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    const headers: Record<string, string> = { accept: "text/event-stream", ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    const response = yield* Effect.promise(() => fetch(base + path, { headers, signal: controller.signal }))
    const frames: Array<SseFrame> = []
    let waiting: (() => void) | undefined
    if (response.ok) {
      void readFrames(response, (frame) => {
        frames.push(frame)
        waiting?.()
      }).then(() => waiting?.())
    }
    const take = (until: (frame: SseFrame) => boolean, timeoutMs = 20_000) =>
      Effect.promise(() =>
        new Promise<ReadonlyArray<SseFrame>>((resolve) => {
          const started = Date.now()
          const check = () => {
            if (frames.some(until) || Date.now() - started > timeoutMs) resolve([...frames])
            else {
              waiting = check
              setTimeout(check, 100)
            }
          }
          check()
        })
      )
    return { status: response.status, headers: response.headers, frames: () => [...frames], take }
  })
