/**
 * The agent page (`GET /agent`) in a real browser: Debian's Chromium, headless,
 * driven by playwright-core. An application in the test (node:http) frames the
 * page, mints a browser token with its API key and hands it over by
 * postMessage, and forwards the person's answers to the runtime with its key
 * and a `from` of its own; the page streams the agent's events, shows the
 * question, takes the answer, and shows the reply as it streams. A second
 * test pastes the settings into the page's form and declines an approval; a
 * third renders a form and a page to open, from a stand-in runtime.
 *
 * Screenshots go to apps/server/test/output/. Without Chromium at
 * /usr/bin/chromium the tests fail, saying how to install it.
 */
import { Http, TestWorld } from "@agent-runtime/testing"
// Not in the package's index: only the browser tests load playwright-core.
import * as Chromium from "@agent-runtime/testing/Chromium"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as NodeHttp from "node:http"
import type { AddressInfo } from "node:net"
import type { Locator, Page } from "playwright-core"

const output = new URL("./output/", import.meta.url)

type Api = ReturnType<typeof Http.client>

const browser = Chromium.launch()

const screenshot = (page: Page, name: string) => Chromium.screenshot(page, output, name)

const promise = <A>(run: () => Promise<A>) => Effect.promise(run)

// ---------------------------------------------------------------------------
// The application: frames the page, mints browser tokens, forwards answers

interface Forwarded {
  readonly inputId: string
  /** The body sent to the runtime. */
  readonly sent: Record<string, unknown>
  readonly status: number
  readonly answer: any
}

interface Application {
  readonly url: string
  readonly forwarded: Array<Forwarded>
  /** A token the application's page gives the agent page, naming the signed-in person. */
  readonly answerToken: string
}

const user = { id: "u1", name: "Ada" }

const appPage = (runtime: string) =>
  `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Example application</title><link rel="icon" href="data:,">
<style>
  body { font-family: system-ui, sans-serif; margin: 0; padding: 1rem; background: #eef1f5 }
  iframe { width: 100%; height: 900px; border: 1px solid #c8ced8; border-radius: 6px; background: white }
</style></head>
<body>
<h1>Example application</h1>
<iframe title="Agent" src="${runtime}/agent"></iframe>
<script type="module">
  const runtime = ${JSON.stringify(runtime)}
  const frame = document.querySelector("iframe")
  // The signed-in person's session: a browser token for their agent, minted by the application's server.
  const session = fetch("/session").then((response) => response.json())
  window.addEventListener("message", async (event) => {
    if (event.origin !== runtime || event.source !== frame.contentWindow) return
    if (event.data?.type !== "agent-runtime:ready" && event.data?.type !== "agent-runtime:unauthorized") return
    const { agentId, answerToken, token } = await session
    frame.contentWindow.postMessage(
      { type: "agent-runtime:connect", token, agentId, base: runtime, answerUrl: location.origin + "/answers", answerToken },
      runtime
    )
  })
</script>
</body>
</html>`

const readBody = (request: NodeHttp.IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    request.on("error", reject)
  })

/**
 * The application's server: its page frames the agent page at `runtime`; its
 * `/answers` endpoint takes answers from pages of the runtime's origin (CORS),
 * knows the person by the answer token, and forwards to the runtime with the
 * API key, setting `from` itself.
 */
const application = (options: {
  readonly runtime: string
  readonly apiKey: string
  readonly agentId: string
  /** Where the agent page is served, when not by `runtime`. */
  readonly page?: string
}) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<Application & { server: NodeHttp.Server }>((resolve) => {
        const forwarded: Array<Forwarded> = []
        const answerToken = Crypto.randomBytes(16).toString("base64url")
        const pageOrigin = new URL(options.page ?? options.runtime).origin
        const cors = (request: NodeHttp.IncomingMessage): Record<string, string> =>
          request.headers.origin === pageOrigin
            ? { "access-control-allow-origin": pageOrigin, vary: "origin" }
            : { vary: "origin" }
        const json = (response: NodeHttp.ServerResponse, status: number, body: unknown, headers = {}) =>
          response.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body))

        const server = NodeHttp.createServer(async (request, response) => {
          const path = new URL(request.url ?? "/", "http://app").pathname
          if (request.method === "GET" && path === "/") {
            response.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(appPage(options.runtime))
          } else if (request.method === "GET" && path === "/session") {
            // The application's own sign-in is out of scope: this person is signed in.
            const minted = await fetch(`${options.runtime}/v1/agents/${options.agentId}/browser-tokens`, {
              method: "POST",
              headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
              body: JSON.stringify({ ttlSeconds: 600, subject: user.id })
            })
            const issued: any = await minted.json()
            json(response, minted.status === 201 ? 200 : 502, {
              token: issued.token,
              agentId: options.agentId,
              answerToken
            })
          } else if (request.method === "OPTIONS" && path === "/answers") {
            response.writeHead(204, {
              ...cors(request),
              "access-control-allow-methods": "POST",
              "access-control-allow-headers": "content-type, authorization",
              "access-control-max-age": "600"
            }).end()
          } else if (request.method === "POST" && path === "/answers") {
            const headers = cors(request)
            if (request.headers.authorization !== `Bearer ${answerToken}`) {
              return json(response, 401, { error: "sign in first" }, headers)
            }
            const body = JSON.parse(await readBody(request))
            // The person may answer their own agent only; who answers is the application's to say.
            if (body.agentId !== options.agentId || typeof body.inputId !== "string") {
              return json(response, 403, { error: "not your agent" }, headers)
            }
            const sent = {
              action: body.action,
              ...(body.content === undefined ? {} : { content: body.content }),
              from: user
            }
            const answered = await fetch(
              `${options.runtime}/v1/agents/${encodeURIComponent(body.agentId)}/inputs/${
                encodeURIComponent(body.inputId)
              }/answer`,
              {
                method: "POST",
                headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
                body: JSON.stringify(sent)
              }
            )
            const answer = await answered.json()
            forwarded.push({ inputId: body.inputId, sent, status: answered.status, answer })
            json(response, answered.status, answer, headers)
          } else {
            json(response, 404, { error: "not found" })
          }
        })
        server.listen(0, "127.0.0.1", () =>
          resolve({
            server,
            url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
            forwarded,
            answerToken
          }))
      })
    ),
    ({ server }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          server.closeAllConnections()
          server.close(() => resolve())
        })
      )
  )

// ---------------------------------------------------------------------------
// A stand-in runtime, for inputs that take an application's own tools to ask

interface StandIn {
  readonly url: string
  /** Answers it was sent: the input's id and the body. */
  readonly answers: Array<{ readonly inputId: string; readonly body: any }>
  /** The Last-Event-ID of each event stream asked for. */
  readonly streams: Array<string | undefined>
}

const standInAgent = "client_standin"

/**
 * Serves the four read routes of one agent with these pending inputs (an
 * input leaves once answered), CORS for any origin, and an event stream: the
 * first one sends a user message (event id 7) and closes with `event:
 * reconnect`, as a draining node does; later ones say ready and stay open.
 */
const standIn = (inputs: ReadonlyArray<Record<string, unknown>>) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<StandIn & { server: NodeHttp.Server }>((resolve) => {
        const answers: Array<{ inputId: string; body: any }> = []
        const streams: Array<string | undefined> = []
        const cors = { "access-control-allow-origin": "*" }
        const json = (response: NodeHttp.ServerResponse, body: unknown) =>
          response.writeHead(200, { "content-type": "application/json", ...cors }).end(JSON.stringify(body))
        const server = NodeHttp.createServer(async (request, response) => {
          const path = new URL(request.url ?? "/", "http://standin").pathname
          const agent = `/v1/agents/${standInAgent}`
          if (request.method === "OPTIONS") {
            return response.writeHead(204, {
              ...cors,
              "access-control-allow-methods": "GET",
              "access-control-allow-headers": "authorization, last-event-id, content-type"
            }).end()
          }
          const answer = /^\/v1\/agents\/[^/]+\/inputs\/([^/]+)\/answer$/.exec(path)
          // The page reads with the browser token; the application answers with its API key.
          if (request.headers.authorization !== (answer === null ? "Bearer abt_standin" : "Bearer art_standin")) {
            return response.writeHead(401, { "content-type": "application/json", ...cors })
              .end(JSON.stringify({ error: "no", code: "UNAUTHORIZED" }))
          }
          if (request.method === "POST" && answer !== null) {
            answers.push({ inputId: answer[1]!, body: JSON.parse(await readBody(request)) })
            return json(response, { input: { id: answer[1], state: "answered" }, request: null })
          }
          if (path === `${agent}/state`) return json(response, { cursor: 0, requests: [] })
          if (path === `${agent}/history`) return json(response, { entries: [], next: null, total: 0, split: false })
          if (path === `${agent}/inputs`) {
            return json(response, inputs.filter((input) => !answers.some((done) => done.inputId === input.id)))
          }
          if (path === `${agent}/events`) {
            streams.push(request.headers["last-event-id"] as string | undefined)
            response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", ...cors })
            response.write(
              `event: ready\ndata: ${JSON.stringify({ version: 1, agentId: standInAgent, connection: null })}\n\n`
            )
            if (streams.length > 1) return
            const message = { role: "user", content: "Hello from the stand-in", from: { id: "u1", name: "Ada" } }
            const frame = { type: "event", requestId: "req_1", event: { type: "message_end", index: 0, message } }
            return response.end(
              `id: 7\ndata: ${JSON.stringify(frame)}\n\n: heartbeat\n\nevent: reconnect\ndata: {}\n\n`
            )
          }
          response.writeHead(404, cors).end()
        })
        server.listen(
          0,
          "127.0.0.1",
          () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, answers, streams })
        )
      })
    ),
    ({ server }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          server.closeAllConnections()
          server.close(() => resolve())
        })
      )
  )

// ---------------------------------------------------------------------------

const setup = (name: string) =>
  Effect.gen(function*() {
    const world = yield* TestWorld.TestWorld
    world.upstream.reset()
    const { api, token } = yield* TestWorld.tenantWithModel(world, name)
    return { world, api, token }
  })

const newAgent = (api: Api, token: string, json: Record<string, unknown>) =>
  Effect.map(api.post("/v1/agents", { token, json: { model: "fake/m1", ...json } }), (made) => {
    expect(made.status, made.text).toBe(201)
    return made.body.id as string
  })

const prompt = Http.prompted

const waitForForwarded = (app: Application, count: number) =>
  Http.waitFor(() => Effect.succeed(app.forwarded.length >= count), `${count} answer(s) forwarded`)

/** Where to look: the page itself, or a frame in it. */
interface Scope_ {
  readonly locator: (selector: string) => Locator
}

const visible = (frame: Scope_, selector: string, text?: string | RegExp) =>
  promise(() =>
    (text === undefined ? frame.locator(selector) : frame.locator(selector).filter({ hasText: text })).first()
      .waitFor({ state: "visible", timeout: 20_000 })
  )

layer(TestWorld.layer(), { excludeTestServices: true })("the agent page", (it) => {
  it.scoped("framed by an application: streams a question, the answer goes through the application, the reply streams", () =>
    Effect.gen(function*() {
      const { api, token, world } = yield* setup("page-question")
      const agentId = yield* newAgent(api, token, { builtins: ["ask_user"] })
      const app = yield* application({ runtime: world.node.rest, apiKey: token, agentId })
      const { context, errors, urls } = yield* browser
      const page = yield* promise(() => context.newPage())
      yield* promise(() => page.goto(app.url))
      const frame = page.frameLocator('iframe[title="Agent"]')
      yield* visible(frame, '#status[data-state="live"]')

      const reply = "Blue it is: the fence will be painted blue by Friday, with two coats."
      world.upstream.script([
        {
          toolCalls: [{
            id: "call_color",
            name: "ask_user",
            arguments: {
              questions: [{
                question: "Which color?",
                header: "Paint",
                options: [{ label: "red", description: "warm" }, { label: "blue", description: "cool" }]
              }]
            }
          }]
        },
        { text: reply, tokenDelayMs: 80 }
      ])
      const stopped = yield* prompt(api, token, agentId, { text: "Paint the fence", from: user })
      expect(stopped.stopped).toBe("input_required")
      const [asked] = stopped.outcome.result.inputs

      // What streamed: the person's message, the tool waiting, the run waiting, the question to answer.
      yield* visible(frame, "li.message-user", "Paint the fence")
      yield* visible(frame, "li.tool", /ask_user.*waiting for you/)
      yield* visible(frame, "li.notice-run-end", "The run is waiting for your input.")
      yield* visible(frame, 'article[data-kind="question"]', "Which color?")
      yield* screenshot(page, "browser-page-question.png")
      yield* promise(() => frame.getByRole("radio", { name: /^blue/ }).check())
      yield* promise(() => frame.getByRole("button", { name: "Send answer" }).click())

      // The reply streams in: some of it shows before all of it.
      const seen = yield* Chromium.textsSeen(frame.locator("li.message-assistant .text").last(), reply)
      expect(seen.at(-1)).toBe(reply)
      expect(seen.some((text) => text.length < reply.length && reply.startsWith(text))).toBe(true)

      // The application forwarded the answer with its key and its own `from`; the agent resumed and replied.
      yield* waitForForwarded(app, 1)
      const [forwarded] = app.forwarded
      expect(forwarded!.inputId).toBe(asked.id)
      expect(forwarded!.sent).toEqual({
        action: "accept",
        content: { answers: { "Which color?": "blue" } },
        from: { id: "u1", name: "Ada" }
      })
      expect(forwarded!.status).toBe(200)
      expect(forwarded!.answer.input).toMatchObject({ state: "answered", answer: { by: { id: "u1", name: "Ada" } } })
      const resumed = yield* Http.settled(api, token, agentId, forwarded!.answer.request.id)
      expect(resumed.outcome.result.reply).toBe(reply)

      yield* visible(frame, "li.notice-run-end", "The run finished.")
      yield* visible(frame, "li.notice", "An input was answered.")
      yield* visible(frame, "#inputs-empty", "Nothing is waiting for you.")
      expect(yield* promise(() => frame.locator("article.input").count())).toBe(0)
      yield* visible(frame, "li.tool", /ask_user.*done/)

      const path = yield* screenshot(page, "browser-page.png")
      expect((yield* promise(() => Fs.stat(path))).size).toBeGreaterThan(10_000)
      // A connect message sending answers anywhere but to the framing page's origin is refused; the page goes on.
      const refusal = yield* promise(() =>
        page.evaluate((runtime) =>
          new Promise<string>((resolve) => {
            // In the browser: no DOM types here.
            const browser = globalThis as any
            const frame = browser.document.querySelector("iframe")
            browser.addEventListener("message", (event: any) => {
              if (event.data?.type === "agent-runtime:error") resolve(event.data.error)
            })
            frame.contentWindow.postMessage({
              type: "agent-runtime:connect",
              token: "abt_other",
              agentId: "client_other",
              answerUrl: "https://elsewhere.example.test/answers"
            }, runtime)
          }), world.node.rest)
      )
      expect(refusal).toBe("answerUrl must be on the origin of the page that sent it")
      yield* visible(frame, '#status[data-state="live"]')
      expect(yield* promise(() => frame.locator("#title").textContent())).toBe(`Agent ${agentId}`)
      // The token travelled in headers and a message, never in a URL.
      expect(urls.some((url) => url.includes("abt_"))).toBe(false)
      expect(urls.some((url) => url.startsWith(`${world.node.rest}/v1/agents/${agentId}/events`))).toBe(true)
      expect(errors).toEqual([])
    }))

  it.scoped("pasted into its form: an approval shows the call, and is declined with a reason", () =>
    Effect.gen(function*() {
      const { api, token, world } = yield* setup("page-approval")
      const definition = yield* Effect.map(
        api.post("/v1/definitions", {
          token,
          json: {
            model: "fake/m1",
            name: "careful",
            builtins: ["schedule"],
            humanInput: { approvals: [{ tool: "schedule", source: "builtins" }], approvers: ["u1"] }
          }
        }),
        (made) => {
          expect(made.status, made.text).toBe(201)
          return made.body.id as string
        }
      )
      const agentId = yield* newAgent(api, token, { definition, model: undefined })
      const app = yield* application({ runtime: world.node.rest, apiKey: token, agentId })
      const issued = yield* api.post(`/v1/agents/${agentId}/browser-tokens`, { token, json: { ttlSeconds: 300 } })
      expect(issued.status).toBe(201)
      const { context, errors, urls } = yield* browser
      const page = yield* promise(() => context.newPage())

      const served = yield* promise(() => page.goto(`${world.node.rest}/agent`))
      expect(served!.headers()["content-type"]).toContain("text/html")
      expect(served!.headers()["content-security-policy"]).toContain("script-src 'self'")
      yield* promise(() => page.getByLabel("Agent id").fill(agentId))
      yield* promise(() => page.getByLabel("Browser token").fill(issued.body.token))
      yield* promise(() => page.getByLabel(/^Answer address/).fill(`${app.url}/answers`))
      yield* promise(() => page.getByLabel(/^Answer token/).fill(app.answerToken))
      yield* promise(() => page.getByRole("button", { name: "Connect" }).click())
      yield* visible(page, '#status[data-state="live"]')
      // The token is not left in the form.
      expect(yield* promise(() => page.getByLabel("Browser token").inputValue())).toBe("")

      const args = { action: "create", text: "water the plants", inSeconds: 3600 }
      world.upstream.script([
        { toolCalls: [{ id: "call_s1", name: "schedule", arguments: args }] },
        { text: "Understood, nothing scheduled." }
      ])
      const stopped = yield* prompt(api, token, agentId, { text: "remind me", from: user })
      expect(stopped.stopped).toBe("input_required")
      const approval = page.locator('article[data-kind="approval"]')
      yield* promise(() => approval.waitFor({ timeout: 20_000 }))
      expect(yield* promise(() => approval.locator("code").first().textContent())).toBe("schedule")
      expect(JSON.parse((yield* promise(() => approval.locator("pre").textContent()))!)).toEqual(args)
      yield* promise(() => approval.getByLabel(/^Reason/).fill("not today"))
      yield* promise(() => approval.getByRole("button", { name: "Decline" }).click())

      yield* waitForForwarded(app, 1)
      expect(app.forwarded[0]!.sent).toEqual({ action: "decline", content: { reason: "not today" }, from: user })
      expect(app.forwarded[0]!.answer.input.state).toBe("declined")
      const resumed = yield* Http.settled(api, token, agentId, app.forwarded[0]!.answer.request.id)
      expect(resumed.outcome.result.reply).toBe("Understood, nothing scheduled.")
      expect((yield* api.get(`/v1/agents/${agentId}/schedules`, { token })).body).toHaveLength(0)
      yield* visible(page, "li.message-assistant", "Understood, nothing scheduled.")
      yield* visible(page, "li.notice", "An input was declined.")
      yield* visible(page, "li.notice-run-end", "The run finished.")
      yield* screenshot(page, "browser-page-approval.png")
      expect(urls.some((url) => url.includes(issued.body.token))).toBe(false)
      expect(errors).toEqual([])
    }))

  it.scoped("a form's fields and a page to open: typed answers, the link's real origin, text kept as text; reconnects", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const expiresAt = Math.floor(Date.now() / 1000) + 3600
      const runtime = yield* standIn([
        {
          id: "in_form",
          kind: "form",
          state: "pending",
          message: 'Your details <img src=x id=injected onerror="window.pwned = true">',
          expiresAt,
          detail: {
            requestedSchema: {
              type: "object",
              properties: {
                name: { type: "string", title: "Name" },
                age: { type: "integer", title: "Age", minimum: 0 },
                plan: { type: "string", title: "Plan", enum: ["free", "pro"], enumNames: ["Free", "Pro"] },
                subscribe: { type: "boolean", title: "Subscribe" },
                email: { type: "string", title: "Email", format: "email" }
              },
              required: ["name", "plan"]
            }
          }
        },
        {
          id: "in_url",
          kind: "url",
          state: "pending",
          message: "Sign in to the calendar",
          expiresAt,
          detail: { url: "https://calendar.example.test/oauth?state=1", origin: "https://calendar.example.test" }
        },
        {
          id: "in_odd_url",
          kind: "url",
          state: "pending",
          message: "Another page",
          expiresAt,
          detail: { url: "https://elsewhere.example.test/x", origin: "https://calendar.example.test" }
        },
        {
          id: "in_script_url",
          kind: "url",
          state: "pending",
          message: "A script",
          expiresAt,
          detail: { url: "javascript:window.pwned = true", origin: "https://calendar.example.test" }
        }
      ])
      const app = yield* application({
        runtime: runtime.url,
        apiKey: "art_standin",
        agentId: standInAgent,
        page: world.node.rest
      })
      const { context, errors } = yield* browser
      const page = yield* promise(() => context.newPage())
      yield* promise(() => page.goto(`${world.node.rest}/agent`))
      yield* promise(() => page.getByLabel("Runtime address").fill(runtime.url))
      yield* promise(() => page.getByLabel("Agent id").fill(standInAgent))
      yield* promise(() => page.getByLabel("Browser token").fill("abt_standin"))
      yield* promise(() => page.getByLabel(/^Answer address/).fill(`${app.url}/answers`))
      yield* promise(() => page.getByLabel(/^Answer token/).fill(app.answerToken))
      yield* promise(() => page.getByRole("button", { name: "Connect" }).click())
      yield* visible(page, '#status[data-state="live"]')
      // The first stream's event shows; the page reconnected at once from its id.
      yield* visible(page, "li.message-user", "Hello from the stand-in")
      yield* Http.waitFor(() => Effect.succeed(runtime.streams.length >= 2), "a second event stream")
      expect(runtime.streams.slice(0, 2)).toEqual(["0", "7"])

      const form = page.locator('article[data-input="in_form"]')
      yield* promise(() => form.waitFor({ timeout: 20_000 }))
      // The agent's words are text: shown as written, never markup.
      expect(yield* promise(() => form.locator("h3").textContent())).toBe(
        'Your details <img src=x id=injected onerror="window.pwned = true">'
      )
      expect(yield* promise(() => page.locator("#injected").count())).toBe(0)

      const pageInput = page.locator('article[data-input="in_url"]')
      expect(yield* promise(() => pageInput.locator(".origin").textContent())).toBe("https://calendar.example.test")
      const link = pageInput.getByRole("link", { name: "Open the page at calendar.example.test" })
      expect(yield* promise(() => link.getAttribute("href"))).toBe("https://calendar.example.test/oauth?state=1")
      expect(yield* promise(() => link.getAttribute("rel"))).toBe("noopener noreferrer")
      // A link whose real origin is not the one named says so; a script address is no link at all.
      const odd = page.locator('article[data-input="in_odd_url"]')
      expect(yield* promise(() => odd.locator(".origin").textContent())).toBe("https://elsewhere.example.test")
      yield* visible(odd, ".error", "which is not where the link goes")
      const script = page.locator('article[data-input="in_script_url"]')
      expect(yield* promise(() => script.getByRole("link").count())).toBe(0)
      expect(yield* promise(() => script.getByRole("button", { name: "I am done" }).count())).toBe(0)
      yield* screenshot(page, "browser-page-kinds.png")

      // Required fields are required: nothing is sent without them.
      yield* promise(() => form.getByRole("button", { name: "Submit" }).click())
      yield* Effect.sleep("300 millis")
      expect(runtime.answers).toHaveLength(0)
      yield* promise(() => form.getByLabel(/^Name/).fill("Ada"))
      yield* promise(() => form.getByLabel(/^Age/).fill("36"))
      yield* promise(() => form.getByLabel(/^Plan/).selectOption({ label: "Pro" }))
      yield* promise(() => form.getByLabel("Subscribe").check())
      yield* promise(() => form.getByRole("button", { name: "Submit" }).click())
      yield* waitForForwarded(app, 1)
      expect(app.forwarded[0]!.sent).toEqual({
        action: "accept",
        content: { name: "Ada", age: 36, plan: "pro", subscribe: true },
        from: user
      })
      expect(app.forwarded[0]!.status).toBe(200)
      expect(runtime.answers[0]).toEqual({ inputId: "in_form", body: app.forwarded[0]!.sent })
      yield* promise(() => form.waitFor({ state: "detached", timeout: 20_000 }))

      yield* promise(() => pageInput.getByRole("button", { name: "I am done" }).click())
      yield* waitForForwarded(app, 2)
      expect(app.forwarded[1]!.sent).toEqual({ action: "accept", from: user })
      yield* promise(() => pageInput.waitFor({ state: "detached", timeout: 20_000 }))
      expect(yield* promise(() => page.evaluate(() => (globalThis as any).pwned))).toBeUndefined()
      expect(errors).toEqual([])
    }))
})
