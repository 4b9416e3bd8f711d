// @ts-check
/**
 * The agent page's script (plain ES module, no dependencies, no build step).
 *
 * Configuration, never from the URL:
 * - by postMessage from the page that frames this one, a message
 *   `{type: "agent-runtime:connect", token, agentId, base?, answerUrl?, answerToken?}`
 *   sent to this page's origin. Only the parent frame is heard, and answerUrl
 *   must be on the parent's own origin. The page says `{type: "agent-runtime:ready"}`
 *   to its parent when it can listen, `{type: "agent-runtime:unauthorized", status}`
 *   when the runtime refuses the token (send a new connect message with a fresh
 *   token), and `{type: "agent-runtime:error", error}` when a message is unusable;
 * - or typed into the page's form by the person.
 *
 * `base` is the runtime's address (this page's origin when absent). The token
 * goes to the runtime only, as a bearer header; answers go to `answerUrl`,
 * the application's endpoint, with `answerToken` as a bearer header when given
 * (cookies are sent instead when it is not). Everything the agent says is set
 * as text, never parsed as HTML.
 */

/** A stream silent this long is dead (the runtime sends a heartbeat about every 5 seconds). */
const silenceMs = 20_000
const retryFirstMs = 500
const retryMostMs = 15_000

/**
 * @typedef {{
 *   token: string
 *   agentId: string
 *   base: string
 *   answerUrl?: string | undefined
 *   answerToken?: string | undefined
 * }} Config
 */

/** @type {Config | undefined} */
let config
/** The last event id seen: sent as Last-Event-ID when the stream reconnects. */
/** @type {number | undefined} */
let cursor
/** Bumped by every (re)connection: a loop of an older one stops. */
let generation = 0
/** @type {AbortController | undefined} */
let streaming
const embedded = window.parent !== window

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id))

let nextId = 0
/** @param {string} prefix */
const uniqueId = (prefix) => `${prefix}-${++nextId}`

/**
 * An element with attributes and children; strings become text nodes, never markup.
 * @param {string} tag
 * @param {Record<string, string | number | boolean | undefined>} [attributes]
 * @param {Array<Node | string | undefined | null | false>} children
 * @returns {HTMLElement}
 */
const el = (tag, attributes = {}, ...children) => {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === false) continue
    node.setAttribute(name, value === true ? "" : String(value))
  }
  for (const child of children) {
    if (child !== undefined && child !== null && child !== false) node.append(child)
  }
  return node
}

/** A link only for http(s) addresses. @param {unknown} href */
const safeHttpUrl = (href) => {
  if (typeof href !== "string") return undefined
  try {
    const url = new URL(href)
    return url.protocol === "https:" || url.protocol === "http:" ? url : undefined
  } catch {
    return undefined
  }
}

/** @param {unknown} value */
const pretty = (value) => {
  if (typeof value === "string") return value
  try {
    return JSON.stringify(value, null, 2) ?? ""
  } catch {
    return String(value)
  }
}

/**
 * @param {string} text
 * @param {"live" | "error" | undefined} [state]
 */
const setStatus = (text, state) => {
  const status = byId("status")
  status.textContent = text
  if (state === undefined) delete status.dataset.state
  else status.dataset.state = state
}

/** Tells the framing page, on its origin only. @param {Record<string, unknown>} message @param {string} [origin] */
const tellParent = (message, origin = parentOrigin) => {
  if (embedded && origin !== undefined) window.parent.postMessage(message, origin)
}
/** The origin of the page that sent the configuration, if one did. @type {string | undefined} */
let parentOrigin

// ---------------------------------------------------------------------------
// Reading the runtime with the browser token

class HttpError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   * @param {string | undefined} code
   * @param {number | undefined} retryAfter
   */
  constructor(status, message, code, retryAfter) {
    super(message)
    this.status = status
    this.code = code
    this.retryAfter = retryAfter
  }
}

/** @param {Response} response @param {string} what */
const httpError = async (response, what) => {
  let message = `${what} answered ${response.status}`
  let code
  try {
    const body = await response.json()
    if (typeof body?.error === "string") message = body.error
    if (typeof body?.code === "string") code = body.code
  } catch {
    // Not a JSON error body: the status says enough.
  }
  const retryAfter = Number(response.headers.get("retry-after"))
  return new HttpError(response.status, message, code, Number.isFinite(retryAfter) ? retryAfter : undefined)
}

/**
 * A GET of the agent's route with the browser token.
 * @param {Config} at
 * @param {string} path
 * @param {{headers?: Record<string, string>, signal?: AbortSignal}} [options]
 */
const read = async (at, path, options = {}) => {
  const url = `${at.base}/v1/agents/${encodeURIComponent(at.agentId)}${path}`
  const response = await fetch(url, {
    headers: { authorization: `Bearer ${at.token}`, ...options.headers },
    cache: "no-store",
    credentials: "omit",
    referrerPolicy: "no-referrer",
    ...(options.signal === undefined ? {} : { signal: options.signal })
  })
  if (!response.ok) throw await httpError(response, path.split("?")[0] ?? path)
  return response
}

/** Refused for good: the token expired, was never valid, or the agent is gone. @param {unknown} error */
const isRefusal = (error) =>
  error instanceof HttpError && (error.status === 401 || error.status === 410 ||
    (error.status === 403 && !/scope/.test(error.message)))

/** @param {unknown} error */
const isMissingScope = (error) => error instanceof HttpError && error.status === 403 && /scope/.test(error.message)

/** @param {HttpError} error */
const refused = (error) => {
  generation += 1
  streaming?.abort()
  setStatus(
    error.status === 410 ? "This agent is gone." : `The runtime refused the token: ${error.message}`,
    "error"
  )
  tellParent({ type: "agent-runtime:unauthorized", status: error.status, code: error.code })
  if (!embedded || parentOrigin === undefined) byId("connect").hidden = false
}

/**
 * Server-sent events from a response body: `{event, data, id}` per message;
 * comments (heartbeats) only count as activity.
 * @param {ReadableStream<Uint8Array>} body
 * @param {() => void} onActivity
 */
async function* sseMessages(body, onActivity) {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  let event = ""
  /** @type {Array<string>} */
  let data = []
  /** @type {string | undefined} */
  let id
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

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Follows the event stream from `cursor` until a newer connection takes over:
 * reconnects with Last-Event-ID after a drop, at once when the runtime asks
 * (`event: reconnect`), and when the stream goes silent.
 * @param {number} mine
 */
const follow = async (mine) => {
  let delay = retryFirstMs
  while (mine === generation && config !== undefined) {
    const at = config
    const aborter = new AbortController()
    streaming = aborter
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let silence
    const alive = () => {
      clearTimeout(silence)
      silence = setTimeout(() => aborter.abort(), silenceMs)
    }
    let again = false
    try {
      alive()
      /** @type {Record<string, string>} */
      const headers = { accept: "text/event-stream" }
      if (cursor !== undefined) headers["last-event-id"] = String(cursor)
      // snapshot=1: a cursor behind the runtime's buffer starts from a snapshot instead of failing.
      const response = await read(at, "/events?snapshot=1", { headers, signal: aborter.signal })
      if (response.body === null) throw new Error("the event stream has no body")
      for await (const message of sseMessages(response.body, alive)) {
        if (mine !== generation) return
        if (message.event === "ready") {
          setStatus("Live", "live")
          delay = retryFirstMs
          continue
        }
        if (message.event === "reconnect") {
          again = true
          break
        }
        if (message.id !== undefined && message.id !== "" && Number.isFinite(Number(message.id))) {
          cursor = Number(message.id)
        }
        if (message.event !== "message" || message.data === "") continue
        let frame
        try {
          frame = JSON.parse(message.data)
        } catch {
          continue
        }
        onFrame(frame)
      }
    } catch (error) {
      if (mine !== generation) return
      if (isRefusal(error)) return refused(/** @type {HttpError} */ (error))
      if (error instanceof HttpError && error.status === 409) {
        // Behind the buffer without a snapshot: start again from the state's cursor.
        cursor = undefined
        again = true
        try {
          await catchUp(at)
        } catch (refusal) {
          if (mine === generation) refused(/** @type {HttpError} */ (refusal))
          return
        }
      } else if (error instanceof HttpError && error.retryAfter !== undefined) {
        delay = Math.max(delay, error.retryAfter * 1000)
      }
    } finally {
      clearTimeout(silence)
    }
    if (mine !== generation) return
    setStatus("Reconnecting…")
    if (!again) {
      await sleep(delay)
      delay = Math.min(delay * 2, retryMostMs)
    }
  }
}

/** @param {any} frame */
const onFrame = (frame) => {
  if (typeof frame !== "object" || frame === null) return
  if (frame.type === "event" && typeof frame.event === "object" && frame.event !== null) onEvent(frame.event)
  else if (frame.type === "response") onResponse(frame)
  else if (frame.type === "snapshot") onSnapshot(frame)
}

// ---------------------------------------------------------------------------
// The conversation

/** Entries of the transcript by key: messages by history index, tool calls by id, run ends by request id. */
/** @type {Map<string, HTMLElement>} */
const entries = new Map()
/** What is known of each tool call. */
/** @type {Map<string, {name?: string, args?: unknown, status?: string, result?: string, isError?: boolean}>} */
const tools = new Map()

const nearBottom = () => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80

/**
 * Adds the entry, or replaces the one of the same key where it stands.
 * @param {string} key
 * @param {HTMLElement} entry
 */
const put = (key, entry) => {
  const stick = nearBottom()
  const existing = entries.get(key)
  if (existing !== undefined && existing.isConnected) existing.replaceWith(entry)
  else byId("transcript").append(entry)
  entries.set(key, entry)
  if (stick) window.scrollTo({ top: document.documentElement.scrollHeight })
}

/** @param {string} key */
const remove = (key) => {
  entries.get(key)?.remove()
  entries.delete(key)
}

/** @param {string} text @param {string} [kind] */
const notice = (text, kind) => {
  put(uniqueId("notice"), el("li", { class: `notice${kind === undefined ? "" : ` notice-${kind}`}` }, text))
}

const clearTranscript = () => {
  byId("transcript").replaceChildren()
  entries.clear()
  tools.clear()
}

/** The text parts of a message's content. @param {any} content */
const textOf = (content) =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.filter((part) => part?.type === "text" && typeof part.text === "string").map((part) => part.text).join("")
    : ""

/** @param {string} id */
const renderTool = (id) => {
  const tool = tools.get(id) ?? {}
  const name = typeof tool.name === "string" ? tool.name : "a tool"
  const status = tool.status ?? "called"
  put(
    `t${id}`,
    el(
      "li",
      { class: "tool" },
      "Tool ",
      el("code", {}, name),
      ` ${status}`,
      tool.args === undefined
        ? undefined
        : el("details", {}, el("summary", {}, "Arguments"), el("pre", {}, pretty(tool.args))),
      tool.result === undefined || tool.result === ""
        ? undefined
        : el("details", {}, el("summary", {}, tool.isError ? "Error" : "Result"), el("pre", {}, tool.result))
    )
  )
}

/**
 * @param {string | undefined} id
 * @param {{name?: string, args?: unknown, status?: string, result?: string, isError?: boolean}} update
 */
const updateTool = (id, update) => {
  if (typeof id !== "string") return
  const known = tools.get(id) ?? {}
  for (const [field, value] of Object.entries(update)) {
    if (value !== undefined) /** @type {any} */ (known)[field] = value
  }
  tools.set(id, known)
  renderTool(id)
}

/** An assistant entry, its text streaming in. @param {number} index */
const assistantEntry = (index) => {
  const existing = entries.get(`m${index}`)
  if (existing?.classList.contains("message-assistant")) return existing
  const entry = el(
    "li",
    { class: "message-assistant", "aria-busy": "true" },
    el("span", { class: "who" }, "Agent"),
    el("div", { class: "text" })
  )
  put(`m${index}`, entry)
  return entry
}

/** A message as history keeps it. @param {number} index @param {any} message */
const renderMessage = (index, message) => {
  if (typeof message !== "object" || message === null) return
  if (message.role === "user") {
    const from = message.from
    const who = typeof from?.name === "string" ? from.name : typeof from?.id === "string" ? from.id : "User"
    put(
      `m${index}`,
      el(
        "li",
        { class: "message-user" },
        el("span", { class: "who" }, who),
        el("div", { class: "text" }, textOf(message.content))
      )
    )
  } else if (message.role === "assistant") {
    const parts = Array.isArray(message.content) ? message.content : []
    const text = textOf(parts)
    const failed = message.stopReason === "error" && typeof message.errorMessage === "string"
    if (text === "" && !failed) remove(`m${index}`)
    else {
      put(
        `m${index}`,
        el(
          "li",
          { class: "message-assistant" },
          el("span", { class: "who" }, "Agent"),
          el("div", { class: "text" }, text),
          failed ? el("p", { class: "error" }, message.errorMessage) : undefined
        )
      )
    }
    for (const part of parts) {
      if (part?.type === "toolCall" && !tools.has(part.id)) {
        updateTool(part.id, { name: part.name, args: part.arguments })
      }
    }
  } else if (message.role === "toolResult") {
    updateTool(message.toolCallId, {
      name: message.toolName,
      status: message.isError ? "failed" : "done",
      result: textOf(message.content),
      isError: message.isError === true
    })
  }
}

const inputStates = /** @type {Record<string, string>} */ ({
  answered: "was answered",
  declined: "was declined",
  cancelled: "was cancelled",
  expired: "expired",
  superseded: "was superseded by a new message"
})

/** @param {any} event */
const onEvent = (event) => {
  switch (event.type) {
    case "message_start":
      if (event.message?.role === "assistant") assistantEntry(event.index)
      else renderMessage(event.index, event.message)
      break
    case "message_update": {
      const delta = event.assistantMessageEvent
      if (delta?.type !== "text_delta" || typeof delta.delta !== "string") break
      const text = /** @type {HTMLElement} */ (assistantEntry(event.index).querySelector(".text"))
      const slot = `part-${Number(delta.contentIndex) || 0}`
      let part = /** @type {HTMLElement | null} */ (text.querySelector(`[data-part="${slot}"]`))
      if (part === null) {
        part = el("span", { "data-part": slot })
        text.append(part)
      }
      const stick = nearBottom()
      part.append(delta.delta)
      if (stick) window.scrollTo({ top: document.documentElement.scrollHeight })
      break
    }
    case "message_end":
      renderMessage(event.index, event.message)
      break
    case "message_retracted":
      remove(`m${event.index}`)
      break
    case "tool_execution_start":
      updateTool(event.toolCallId, { name: event.toolName, args: event.args, status: "running…" })
      break
    case "tool_execution_end":
      updateTool(event.toolCallId, {
        name: event.toolName,
        status: event.isError ? "failed" : "done",
        result: textOf(event.result),
        isError: event.isError === true
      })
      break
    case "input_required":
      updateTool(event.input?.toolCallId, { status: "is waiting for you" })
      notice(`The agent asks: ${typeof event.input?.message === "string" ? event.input.message : "for your input"}`)
      refreshInputs()
      break
    case "input_resolved":
      notice(`An input ${inputStates[event.state] ?? "settled"}.`)
      refreshInputs()
      break
    case "auto_retry_start":
      notice("The model call failed; retrying.")
      break
    case "turn_resumed":
      notice("The run moved to another node and goes on.")
      break
    case "turn_recovered":
      notice("The run was interrupted and goes on.")
      break
    case "file_presented": {
      const name = [event.name, event.path, event.file?.path].find((value) => typeof value === "string") ?? "a file"
      const url = safeHttpUrl(event.url ?? event.file?.url)
      put(
        uniqueId("file"),
        el(
          "li",
          { class: "notice" },
          "File: ",
          url === undefined ? name : el("a", { href: url.href, target: "_blank", rel: "noopener noreferrer" }, name)
        )
      )
      break
    }
    default:
      // Other types (and types added later) are not shown.
      break
  }
}

/** A run ended; a browser token sees only whether and why it stopped. @param {any} frame */
const onResponse = (frame) => {
  const outcome = frame.outcome ?? {}
  const result = typeof outcome.result === "object" && outcome.result !== null ? outcome.result : undefined
  /** @type {[string, string]} */
  let said
  if (result === undefined && typeof outcome.error === "string") said = [`The run failed: ${outcome.error}`, "error"]
  else if (result?.stopped === "input_required") said = ["The run is waiting for your input.", "run-end"]
  else if (result?.stopped === "spend_limit") said = ["The run stopped: its spend limit is reached.", "error"]
  else if (result?.stopped === "turn_limit") said = ["The run stopped: it reached its turn limit.", "error"]
  else if (typeof result?.error === "string") said = [`The run ended with an error: ${result.error}`, "error"]
  else if (typeof outcome.error === "string") said = [`The run ended with an error: ${outcome.error}`, "error"]
  else said = ["The run finished.", "run-end"]
  put(`r${frame.id}`, el("li", { class: `notice notice-${said[1]}` }, said[0]))
  refreshInputs()
}

/**
 * The stream resumed behind the runtime's buffer: what was missed is read
 * from history again (a message streaming right then shows when it ends).
 * @param {any} frame
 */
const onSnapshot = (frame) => {
  if (typeof frame.cursor === "number") cursor = frame.cursor
  if (config !== undefined) loadHistory(config)
  refreshInputs()
}

/** The latest page of history, in place of what the transcript shows. @param {Config} at */
const loadHistory = async (at) => {
  try {
    const page = await (await read(at, "/history")).json()
    if (at !== config) return
    clearTranscript()
    if (page.next !== null && page.next !== undefined) notice("Earlier messages are not shown.")
    for (const entry of page.entries ?? []) renderMessage(entry.index, entry.message)
  } catch (error) {
    if (isRefusal(error)) return refused(/** @type {HttpError} */ (error))
    if (!isMissingScope(error)) notice(`History could not be read: ${/** @type {Error} */ (error).message}`, "error")
  }
}

/**
 * The state's cursor, then history: events after the cursor are replayed onto what history shows.
 * @param {Config} at
 */
const catchUp = async (at) => {
  try {
    const state = await (await read(at, "/state")).json()
    if (typeof state.cursor === "number") cursor = state.cursor
  } catch (error) {
    if (isRefusal(error)) throw error
    // No state scope: the stream starts from now.
  }
  await loadHistory(at)
}

// ---------------------------------------------------------------------------
// Pending inputs

/** Articles of the inputs shown, by id: kept while pending, so a half-filled answer survives a refresh. */
/** @type {Map<string, HTMLElement>} */
const shownInputs = new Map()
let listing = false
let listAgain = false

const refreshInputs = async () => {
  if (config === undefined) return
  if (listing) {
    listAgain = true
    return
  }
  listing = true
  try {
    do {
      listAgain = false
      /** @type {Config | undefined} */
      const at = config
      if (at === undefined) return
      try {
        const listed = await (await read(at, "/inputs?state=pending")).json()
        if (at !== config) {
          // Connected elsewhere meanwhile: list that agent's.
          listAgain = true
          continue
        }
        showInputs(Array.isArray(listed) ? listed : [])
      } catch (error) {
        if (isRefusal(error)) return refused(/** @type {HttpError} */ (error))
        if (isMissingScope(error)) byId("inputs").hidden = true
        else setInputsNote(`Inputs could not be read: ${/** @type {Error} */ (error).message}`)
      }
    } while (listAgain)
  } finally {
    listing = false
  }
}

/** @param {string} text */
const setInputsNote = (text) => {
  byId("inputs-empty").textContent = text
  byId("inputs-empty").hidden = false
}

/** @param {Array<any>} pending */
const showInputs = (pending) => {
  const list = byId("inputs-list")
  const ids = new Set(pending.map((input) => input.id))
  for (const [id, article] of shownInputs) {
    if (!ids.has(id)) {
      article.remove()
      shownInputs.delete(id)
    }
  }
  for (const input of pending) {
    if (typeof input?.id !== "string" || shownInputs.has(input.id)) continue
    const article = renderInput(input)
    shownInputs.set(input.id, article)
    list.append(article)
  }
  byId("inputs-empty").textContent = "Nothing is waiting for you."
  byId("inputs-empty").hidden = shownInputs.size > 0
}

const kindTitles = /** @type {Record<string, string>} */ ({
  question: "A question",
  approval: "An approval",
  form: "A form to fill in",
  url: "A page to open"
})

/** @param {any} input */
const renderInput = (input) => {
  const titleId = uniqueId("input-title")
  const article = el(
    "article",
    { class: "input", "aria-labelledby": titleId, "data-input": input.id, "data-kind": input.kind },
    el(
      "h3",
      { id: titleId },
      typeof input.message === "string" && input.message !== "" ? input.message : kindTitles[input.kind] ?? "Input"
    ),
    el(
      "p",
      { class: "muted" },
      kindTitles[input.kind] ?? "An input",
      typeof input.expiresAt === "number" ? `, open until ${new Date(input.expiresAt * 1000).toLocaleString()}` : "",
      "."
    )
  )
  const detail = typeof input.detail === "object" && input.detail !== null ? input.detail : {}
  // Checked when accepting only (reportValidity): declining a form leaves its fields as they are.
  const form = /** @type {HTMLFormElement} */ (el("form", { novalidate: true }))
  const outcome = el("p", { role: "status", class: "muted" })
  const problem = el("p", { role: "alert", class: "error" })
  if (input.kind === "question") questionForm(form, detail)
  else if (input.kind === "approval") approvalForm(form, detail)
  else if (input.kind === "form") fieldsForm(form, detail)
  else if (input.kind === "url") urlForm(form, detail)
  else form.append(el("p", {}, "This kind of input cannot be answered here."))
  if (config?.answerUrl === undefined) {
    form.append(el("p", { class: "muted" }, "Answering is not set up on this page (no answer address)."))
    for (const button of form.querySelectorAll("button")) /** @type {HTMLButtonElement} */ (button).disabled = true
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault()
    const submitter = /** @type {HTMLButtonElement | null} */ (/** @type {SubmitEvent} */ (event).submitter)
    const action = submitter?.dataset.action ?? "accept"
    problem.textContent = ""
    const answer = collect.get(form)?.(action)
    if (answer === undefined) return
    if (typeof answer === "string") {
      problem.textContent = answer
      return
    }
    sendAnswer(input, action, answer.content, form, outcome, problem)
  })
  article.append(form, problem, outcome)
  return article
}

/** How each form turns into an answer's content, or says what is missing. */
/** @type {WeakMap<HTMLFormElement, (action: string) => {content?: unknown} | string | undefined>} */
const collect = new WeakMap()

/** @param {string} label @param {string} action @param {boolean} [secondary] */
const button = (label, action, secondary = false) =>
  el("button", { type: "submit", "data-action": action, class: secondary ? "secondary" : undefined }, label)

/** @param {HTMLFormElement} form @param {any} detail */
const questionForm = (form, detail) => {
  const questions = Array.isArray(detail.questions)
    ? detail.questions.filter((/** @type {any} */ q) => typeof q?.question === "string")
    : []
  /** @type {Array<{question: string, multi: boolean, boxes: Array<HTMLInputElement>, own: HTMLInputElement}>} */
  const fields = []
  for (const question of questions) {
    const multi = question.multiSelect === true
    const name = uniqueId("question")
    const fieldset = el(
      "fieldset",
      {},
      el(
        "legend",
        {},
        typeof question.header === "string" && question.header !== ""
          ? `${question.header}: ${question.question}`
          : question.question
      )
    )
    /** @type {Array<HTMLInputElement>} */
    const boxes = []
    for (const option of Array.isArray(question.options) ? question.options : []) {
      if (typeof option?.label !== "string") continue
      const id = uniqueId("option")
      const box = /** @type {HTMLInputElement} */ (el("input", {
        type: multi ? "checkbox" : "radio",
        id,
        name,
        value: option.label
      }))
      boxes.push(box)
      fieldset.append(
        el(
          "div",
          { class: "option" },
          box,
          el(
            "label",
            { for: id },
            option.label,
            typeof option.description === "string"
              ? el("span", { class: "description" }, option.description)
              : undefined
          )
        )
      )
    }
    const ownId = uniqueId("own")
    const own = /** @type {HTMLInputElement} */ (el("input", { id: ownId, type: "text" }))
    fieldset.append(el("label", { for: ownId }, boxes.length > 0 ? "Or in your own words" : "Your answer"), own)
    fields.push({ question: question.question, multi, boxes, own })
    form.append(fieldset)
  }
  form.append(button("Send answer", "accept"), button("Decline", "decline", true))
  collect.set(form, (action) => {
    if (action !== "accept") return {}
    /** @type {Record<string, string | Array<string>>} */
    const answers = {}
    for (const field of fields) {
      const words = field.own.value.trim()
      const chosen = field.boxes.filter((box) => box.checked).map((box) => box.value)
      if (words !== "") answers[field.question] = words
      else if (chosen.length > 0) answers[field.question] = field.multi ? chosen : chosen[0] ?? ""
    }
    if (Object.keys(answers).length === 0) return "Choose an answer, or write one."
    return { content: { answers } }
  })
}

/** @param {HTMLFormElement} form @param {any} detail */
const approvalForm = (form, detail) => {
  const reasonId = uniqueId("reason")
  const reason = /** @type {HTMLTextAreaElement} */ (el("textarea", { id: reasonId, rows: 2, maxlength: 2000 }))
  form.append(
    el(
      "p",
      {},
      "Tool: ",
      el("code", {}, String(detail.tool ?? "")),
      typeof detail.source === "string" ? ` (from ${detail.source})` : ""
    ),
    el("p", {}, "With these arguments:"),
    el("pre", {}, pretty(detail.arguments ?? {})),
    el("label", { for: reasonId }, "Reason (sent if you decline)"),
    reason,
    button("Approve", "accept"),
    button("Decline", "decline", true)
  )
  collect.set(form, (action) => {
    if (action === "accept") {
      return { content: typeof detail.argumentsHash === "string" ? { argumentsHash: detail.argumentsHash } : {} }
    }
    const why = reason.value.trim()
    return { content: why === "" ? {} : { reason: why } }
  })
}

/** @param {HTMLFormElement} form @param {any} detail */
const fieldsForm = (form, detail) => {
  const schema = typeof detail.requestedSchema === "object" && detail.requestedSchema !== null
    ? detail.requestedSchema
    : {}
  const properties = typeof schema.properties === "object" && schema.properties !== null ? schema.properties : {}
  const required = new Set(Array.isArray(schema.required) ? schema.required : [])
  /** @type {Array<() => [string, unknown] | undefined>} */
  const readers = []
  for (const [name, raw] of Object.entries(properties)) {
    const property = typeof raw === "object" && raw !== null ? /** @type {any} */ (raw) : {}
    const id = uniqueId("field")
    const title = typeof property.title === "string" ? property.title : name
    const must = required.has(name)
    const description = typeof property.description === "string"
      ? el("span", { class: "description muted" }, ` ${property.description}`)
      : undefined
    const choices = Array.isArray(property.enum)
      ? property.enum.map((/** @type {unknown} */ value, /** @type {number} */ i) => ({
        value,
        title: Array.isArray(property.enumNames) && typeof property.enumNames[i] === "string"
          ? property.enumNames[i]
          : String(value)
      }))
      : Array.isArray(property.oneOf) &&
          property.oneOf.every((/** @type {any} */ option) =>
            option !== null && typeof option === "object" && "const" in option
          )
      ? property.oneOf.map((/** @type {any} */ option) => ({
        value: option.const,
        title: typeof option.title === "string" ? option.title : String(option.const)
      }))
      : undefined
    if (choices !== undefined) {
      const select = /** @type {HTMLSelectElement} */ (el("select", { id, required: must }))
      select.append(el("option", { value: "" }, must ? "Choose…" : "(none)"))
      choices.forEach((/** @type {{value: unknown, title: string}} */ choice, /** @type {number} */ i) => {
        const option = /** @type {HTMLOptionElement} */ (el("option", { value: String(i) }, choice.title))
        if (property.default !== undefined && choice.value === property.default) option.selected = true
        select.append(option)
      })
      form.append(el("label", { for: id }, title, must ? " (required)" : "", description), select)
      readers.push(() => (select.value === "" ? undefined : [name, choices[Number(select.value)]?.value]))
    } else if (property.type === "boolean") {
      const box =
        /** @type {HTMLInputElement} */ (el("input", { id, type: "checkbox", checked: property.default === true }))
      form.append(el("div", { class: "option" }, box, el("label", { for: id }, title, description)))
      readers.push(() => [name, box.checked])
    } else if (property.type === "number" || property.type === "integer") {
      const field = /** @type {HTMLInputElement} */ (
        el("input", {
          id,
          type: "number",
          required: must,
          step: property.type === "integer" ? 1 : "any",
          min: typeof property.minimum === "number" ? property.minimum : undefined,
          max: typeof property.maximum === "number" ? property.maximum : undefined,
          value: typeof property.default === "number" ? property.default : undefined
        })
      )
      form.append(el("label", { for: id }, title, must ? " (required)" : "", description), field)
      readers.push(() => (field.value === "" ? undefined : [name, Number(field.value)]))
    } else {
      const type = property.format === "email"
        ? "email"
        : property.format === "uri"
        ? "url"
        : property.format === "date"
        ? "date"
        : "text"
      const field = /** @type {HTMLInputElement} */ (
        el("input", {
          id,
          type,
          required: must,
          minlength: typeof property.minLength === "number" ? property.minLength : undefined,
          maxlength: typeof property.maxLength === "number" ? property.maxLength : undefined,
          value: typeof property.default === "string" ? property.default : undefined
        })
      )
      form.append(el("label", { for: id }, title, must ? " (required)" : "", description), field)
      readers.push(() => (field.value === "" ? undefined : [name, field.value]))
    }
  }
  form.append(button("Submit", "accept"), button("Decline", "decline", true), button("Cancel", "cancel", true))
  collect.set(form, (action) => {
    if (action !== "accept") return {}
    if (!form.reportValidity()) return undefined
    return { content: Object.fromEntries(readers.map((reader) => reader()).filter((entry) => entry !== undefined)) }
  })
}

/** @param {HTMLFormElement} form @param {any} detail */
const urlForm = (form, detail) => {
  const url = safeHttpUrl(detail.url)
  if (url === undefined) {
    form.append(el("p", { class: "error" }, "The agent asks you to open an address this page does not open."))
    form.append(button("Decline", "decline", true))
  } else {
    // The origin the link really goes to, as the browser reads it, whatever the detail says.
    form.append(el("p", {}, "This opens a page at"), el("p", { class: "origin" }, url.origin))
    if (url.origin !== detail.origin) {
      form.append(
        el(
          "p",
          { class: "error" },
          `The agent named the origin ${String(detail.origin)}, which is not where the link goes.`
        )
      )
    }
    form.append(
      el(
        "p",
        {},
        el("a", { href: url.href, target: "_blank", rel: "noopener noreferrer" }, `Open the page at ${url.host}`)
      )
    )
    form.append(button("I am done", "accept"), button("Decline", "decline", true))
  }
  collect.set(form, () => ({}))
}

/**
 * Posts the answer to the application's endpoint, which checks its user and
 * forwards it to the runtime with its own key.
 * @param {any} input @param {string} action @param {unknown} content
 * @param {HTMLFormElement} form @param {HTMLElement} outcome @param {HTMLElement} problem
 */
const sendAnswer = async (input, action, content, form, outcome, problem) => {
  const at = config
  if (at?.answerUrl === undefined) return
  const buttons = /** @type {Array<HTMLButtonElement>} */ ([...form.querySelectorAll("button")])
  for (const each of buttons) each.disabled = true
  outcome.textContent = "Sending…"
  try {
    /** @type {Record<string, string>} */
    const headers = { "content-type": "application/json" }
    if (at.answerToken !== undefined) headers.authorization = `Bearer ${at.answerToken}`
    const response = await fetch(at.answerUrl, {
      method: "POST",
      headers,
      // With an answer token the application knows its user by it; without one, by its cookies.
      credentials: at.answerToken === undefined ? "include" : "omit",
      referrerPolicy: "no-referrer",
      body: JSON.stringify({
        agentId: at.agentId,
        inputId: input.id,
        action,
        ...(content === undefined ? {} : { content })
      })
    })
    if (!response.ok) throw await httpError(response, "the answer")
    outcome.textContent = action === "accept" ? "Sent." : action === "decline" ? "Declined." : "Cancelled."
    refreshInputs()
  } catch (error) {
    outcome.textContent = ""
    problem.textContent = `The answer was not taken: ${/** @type {Error} */ (error).message}`
    for (const each of buttons) each.disabled = false
  }
}

// ---------------------------------------------------------------------------
// Configuration

/**
 * The configuration a message or the form gives, or what is wrong with it.
 * @param {any} given
 * @param {string | undefined} fromOrigin the framing page's origin, for a message
 * @returns {Config | string}
 */
const configOf = (given, fromOrigin) => {
  const text = (
    /** @type {unknown} */ value
  ) => (typeof value === "string" && value.trim() !== "" ? value.trim() : undefined)
  const token = text(given.token)
  const agentId = text(given.agentId)
  if (token === undefined) return "a browser token is needed"
  if (agentId === undefined) return "an agent id is needed"
  const base = safeHttpUrl(text(given.base) ?? location.origin)
  if (base === undefined) return "the runtime address must be an http(s) URL"
  const answer = text(given.answerUrl)
  const answerUrl = answer === undefined ? undefined : safeHttpUrl(new URL(answer, fromOrigin ?? location.href).href)
  if (answer !== undefined && answerUrl === undefined) return "the answer address must be an http(s) URL"
  // Answers carry the person's say-so to the application: only the application that framed the page gets them.
  if (fromOrigin !== undefined && answerUrl !== undefined && answerUrl.origin !== fromOrigin) {
    return "answerUrl must be on the origin of the page that sent it"
  }
  return {
    token,
    agentId,
    base: base.href.replace(/\/+$/, ""),
    answerUrl: answerUrl?.href,
    answerToken: text(given.answerToken)
  }
}

/** Starts showing the agent; the same agent again (a fresh token) keeps what is shown. @param {Config} next */
const connect = async (next) => {
  const same = config !== undefined && config.agentId === next.agentId && config.base === next.base
  const answeringChanged = config?.answerUrl !== next.answerUrl
  generation += 1
  const mine = generation
  streaming?.abort()
  config = next
  byId("connect").hidden = true
  byId("connect-error").hidden = true
  byId("inputs").hidden = false
  byId("activity").hidden = false
  byId("title").textContent = `Agent ${next.agentId}`
  setStatus("Connecting…")
  if (!same || answeringChanged) {
    for (const article of shownInputs.values()) article.remove()
    shownInputs.clear()
  }
  if (!same) {
    cursor = undefined
    clearTranscript()
    try {
      await catchUp(next)
    } catch (error) {
      if (mine === generation) refused(/** @type {HttpError} */ (error))
      return
    }
  }
  if (mine !== generation) return
  refreshInputs()
  follow(mine)
}

/** @param {string} text */
const showConnectError = (text) => {
  const error = byId("connect-error")
  error.textContent = text
  error.hidden = false
}

window.addEventListener("message", (event) => {
  // Only the page framing this one configures it.
  if (!embedded || event.source !== window.parent) return
  const data = event.data
  if (typeof data !== "object" || data === null || data.type !== "agent-runtime:connect") return
  const next = configOf(data, event.origin)
  if (typeof next === "string") {
    showConnectError(next)
    tellParent({ type: "agent-runtime:error", error: next }, event.origin)
    return
  }
  parentOrigin = event.origin
  connect(next)
})

/** @param {string} id @param {string} value */
const setValue = (id, value) => {
  const input = /** @type {HTMLInputElement} */ (byId(id))
  input.value = value
}

const connectForm = /** @type {HTMLFormElement} */ (byId("connect-form"))
connectForm.addEventListener("submit", (event) => {
  event.preventDefault()
  const next = configOf(Object.fromEntries(new FormData(connectForm)), undefined)
  if (typeof next === "string") return showConnectError(next)
  // The token lives in memory only, not in the form.
  setValue("connect-token", "")
  setValue("connect-answer-token", "")
  connect(next)
})
setValue("connect-base", location.origin)

if (embedded) {
  // The framing application is expected to send the settings at once; the form shows if it does not.
  byId("connect").hidden = true
  setStatus("Waiting for the application…")
  setTimeout(() => {
    if (config === undefined) byId("connect").hidden = false
  }, 5_000)
  // Nothing secret in it: any framing page may learn that the page listens.
  window.parent.postMessage({ type: "agent-runtime:ready" }, "*")
}
