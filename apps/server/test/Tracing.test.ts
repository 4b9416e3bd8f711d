/**
 * The operator's traces: a real node started with the standard OTLP variables pointed at a loopback
 * collector (the testing package's OtlpReceiver) exports Effect's own spans, linked as Effect links them (a
 * caller's traceparent, the HTTP server span, the service calls and statements under it; the turn under its
 * request's run), names itself in their resource, sends the configured headers, logs the ids of its spans and
 * flushes what it batched as it stops. In process: how the variables are read, and that without an endpoint
 * no tracer is installed.
 */
import { NodeSpans } from "@agent-runtime/telemetry"
import { FakeUpstream, Http, OtlpReceiver, TestDatabase, TestNode, TestWorld } from "@agent-runtime/testing"
import { expect, it, layer } from "@effect/vitest"
import { context, ROOT_CONTEXT, SpanKind, trace, TraceFlags } from "@opentelemetry/api"
import { SamplingDecision } from "@opentelemetry/sdk-trace-base"
import { ConfigProvider, Context, Effect, Exit, Layer, Option } from "effect"
import * as Crypto from "node:crypto"
import serverPackage from "../package.json" with { type: "json" }
import * as ServerConfig from "../src/ServerConfig.ts"
import * as Tracing from "../src/Tracing.ts"

interface World {
  readonly node: TestNode.TestNode
  readonly upstream: FakeUpstream.FakeUpstream
  readonly receiver: OtlpReceiver.OtlpReceiver
}

class TracingWorld extends Context.Tag("test/TracingWorld")<TracingWorld, World>() {}

/** A node exporting to a fresh receiver, with `env` beside the endpoint. */
const start = (env: Record<string, string>) =>
  Effect.gen(function*() {
    const receiver = yield* OtlpReceiver.make
    const upstream = yield* FakeUpstream.start()
    const node = yield* TestNode.start({
      databaseUrl: yield* TestDatabase.make,
      env: { ALLOW_PRIVATE_URLS: "true", OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, ...env }
    })
    return { node, upstream, receiver }
  })

const WorldLive = Layer.scoped(
  TracingWorld,
  start({
    OTEL_EXPORTER_OTLP_HEADERS: "x-collector-key=s%C3%A9cret,x-other=1",
    OTEL_SERVICE_NAME: "agent-runtime-test",
    // Batches go out every tenth of a second instead of every five.
    OTEL_BSP_SCHEDULE_DELAY: "100"
  })
)

/** A caller's W3C trace context: the trace and span it sends, and the header. */
const caller = () => {
  const traceId = Crypto.randomBytes(16).toString("hex")
  const spanId = Crypto.randomBytes(8).toString("hex")
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` }
}

const serverKind = 2

layer(WorldLive, { excludeTestServices: true })("operator traces", (it) => {
  it.scoped("a prompt's HTTP server span continues its caller's trace; the turn's spans form their run's", () =>
    Effect.gen(function*() {
      const { node, receiver, upstream } = yield* TracingWorld
      const { api, token } = yield* TestWorld.tenantWithModel({ node, upstream }, "traced")
      const creating = caller()
      const created = yield* api.post("/v1/agents", {
        token,
        headers: { traceparent: creating.traceparent },
        json: { model: "fake/m1" }
      })
      const agentId = created.body.id as string
      upstream.script({ text: "traced" })
      const prompting = caller()
      // The hot route: served outside the API's pipeline, yet traced as the API traces.
      const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, {
        token,
        headers: { traceparent: prompting.traceparent },
        json: { text: "hi" }
      })
      expect(accepted.status).toBe(202)
      yield* Http.settled(api, token, agentId, accepted.body.id)

      const spans = yield* receiver.waitFor((spans) =>
        spans.some((span) => span.traceId === prompting.traceId && span.kind === serverKind) &&
        spans.some((span) => span.name === "Turn.run" && span.attributes["agent.id"] === agentId) &&
        // Ends after the request settles (and so may be exported in a later batch than the turn's spans).
        spans.some((span) => span.name === "AgentRuntime.runRequest" && span.attributes["agent.id"] === agentId) &&
        spans.some((span) => span.name === "Turn.modelCall")
      )
      const byId = new Map(spans.map((span) => [span.spanId, span]))

      const created_ = spans.find((span) => span.traceId === creating.traceId && span.kind === serverKind)!
      expect(created_).toMatchObject({
        name: "http.server POST",
        parentSpanId: creating.spanId,
        attributes: { "http.route": "/v1/agents", "http.response.status_code": 201 }
      })
      expect(created_.attributes["http.request.header.authorization"]).toBe("<redacted>")
      expect(spans.find((span) => span.name === "Agents.create")).toMatchObject({
        traceId: creating.traceId,
        parentSpanId: created_.spanId
      })

      const prompt = spans.find((span) => span.traceId === prompting.traceId && span.kind === serverKind)!
      expect(prompt).toMatchObject({
        name: "http.server POST",
        parentSpanId: prompting.spanId,
        attributes: {
          "http.request.method": "POST",
          "http.route": "/v1/agents/:id/prompt",
          "url.path": `/v1/agents/${agentId}/prompt`,
          "http.response.status_code": 202
        }
      })
      const promptAs = spans.find((span) => span.name === "Agents.promptAs" && span.traceId === prompting.traceId)
      expect(promptAs?.parentSpanId).toBe(prompt.spanId)
      const statements = spans.filter((span) => span.name === "sql.execute" && span.parentSpanId === promptAs?.spanId)
      expect(statements.length).toBeGreaterThan(0)

      // The turn runs in the agent's own fiber, not the request's: its spans form the trace of its run.
      const turn = spans.find((span) => span.name === "Turn.run" && span.attributes["agent.id"] === agentId)!
      const run = byId.get(turn.parentSpanId!)!
      expect(run).toMatchObject({ name: "AgentRuntime.runRequest", traceId: turn.traceId })
      expect(run.attributes).toMatchObject({ "agent.id": agentId, "request.id": accepted.body.id })
      const underTurn = spans.filter((span) => span.parentSpanId === turn.spanId).map((span) => span.name)
      expect(underTurn).toEqual(expect.arrayContaining(["Turn.start", "Turn.modelCall", "Journal.write"]))
      const write = spans.find((span) => span.name === "Journal.write" && span.parentSpanId === turn.spanId)!
      expect(spans.some((span) => span.name === "sql.execute" && span.parentSpanId === write.spanId)).toBe(true)
    }))

  it.scoped("spans name the service, its version and the node; exports carry the configured headers", () =>
    Effect.gen(function*() {
      const { node, receiver } = yield* TracingWorld
      const asked = caller()
      yield* Http.request(node.rest, "GET", "/v1/admin/tenants", {
        token: node.operatorToken,
        headers: { traceparent: asked.traceparent }
      })
      const spans = yield* receiver.waitFor((spans) => spans.some((span) => span.traceId === asked.traceId))
      for (const span of spans) {
        expect(span.resource).toMatchObject({
          "service.name": "agent-runtime-test",
          "service.version": serverPackage.version,
          "service.instance.id": node.runnerAddress
        })
      }
      for (const sent of receiver.exports()) {
        expect(sent.path).toBe("/v1/traces")
        expect(sent.contentType).toBe("application/x-protobuf")
        expect(sent.headers["x-collector-key"]).toBe("sécret")
        expect(sent.headers["x-other"]).toBe("1")
      }
      // The background loops' statements (probes, leases, sweeps), in no span, are not exported on their own.
      const lone = spans.filter((span) => span.name === "sql.execute" && span.parentSpanId === undefined)
      expect(lone.map((span) => span.attributes["db.query.text"])).toEqual([])
    }))

  it.scoped("a signed link's signature does not reach the collector", () =>
    Effect.gen(function*() {
      const { node, receiver, upstream } = yield* TracingWorld
      const { api, token } = yield* TestWorld.tenantWithModel({ node, upstream }, "signed")
      const volume = (yield* api.post("/v1/volumes", { token, json: {} })).body.id as string
      const link = yield* api.post(`/v1/volumes/${volume}/links`, { token, json: { path: "/a.txt", method: "PUT" } })
      const url = new URL(link.body.url)
      const signature = url.searchParams.get("signature")!
      expect(signature.length).toBeGreaterThan(10)
      const used = caller()
      const put = yield* Http.request(node.rest, "PUT", url.pathname + url.search, {
        headers: { traceparent: used.traceparent, "content-type": "text/plain" },
        body: "signed"
      })
      expect(put.status).toBeLessThan(300)
      const spans = yield* receiver.waitFor((spans) =>
        spans.some((span) => span.traceId === used.traceId && span.kind === serverKind)
      )
      const server = spans.find((span) => span.traceId === used.traceId && span.kind === serverKind)!
      expect(server.attributes["http.route"]).toBe("/v1/links/:volumeId")
      expect(server.attributes["url.query"]).toMatch(/(^|&)signature=REDACTED(&|$)/)
      expect(server.attributes["url.full"]).toContain("signature=REDACTED")
      const attributes = spans.filter((span) => span.traceId === used.traceId).map((span) => span.attributes)
      expect(JSON.stringify(attributes)).not.toContain(signature)
    }))

  it.scoped("a log line written in a span carries its trace_id and span_id", () =>
    Effect.gen(function*() {
      const { node, receiver } = yield* TracingWorld
      const asked = caller()
      yield* Http.request(node.rest, "GET", "/v1/admin/runners", {
        token: node.operatorToken,
        headers: { traceparent: asked.traceparent }
      })
      const spans = yield* receiver.waitFor((spans) => spans.some((span) => span.traceId === asked.traceId))
      const server = spans.find((span) => span.traceId === asked.traceId && span.kind === serverKind)!
      const line = node.output().split("\n").find((line) => line.includes(`trace_id=${asked.traceId}`))
      expect(line).toContain('message="Sent HTTP response"')
      expect(line).toContain("http.url=/v1/admin/runners")
      expect(line).toContain(`span_id=${server.spanId}`)
    }))
})

it.scopedLive("a stopping node flushes the spans it still holds", () =>
  Effect.gen(function*() {
    // Nothing goes out on the timer: what reaches the collector was sent by the stop.
    const { node, receiver } = yield* start({ OTEL_BSP_SCHEDULE_DELAY: "600000" })
    const asked = caller()
    const made = yield* Http.request(node.rest, "POST", "/v1/admin/tenants", {
      token: node.operatorToken,
      headers: { traceparent: asked.traceparent },
      json: { name: "flushed" }
    })
    expect(made.status).toBe(201)
    expect(receiver.spans().some((span) => span.traceId === asked.traceId)).toBe(false)
    const started = Date.now()
    expect(yield* node.stop("SIGTERM")).toEqual({ code: 0, signal: null })
    // Within the default stop timeout.
    expect(Date.now() - started).toBeLessThan(10_000)
    const flushed = receiver.spans().find((span) => span.traceId === asked.traceId && span.kind === serverKind)
    expect(flushed).toMatchObject({
      name: "http.server POST",
      parentSpanId: asked.spanId,
      attributes: { "http.route": "/v1/admin/tenants", "http.response.status_code": 201 }
    })
  }), { timeout: 90_000 })

it.scopedLive("an export the collector refuses is a warning in the node's log", () =>
  Effect.gen(function*() {
    const { node, receiver } = yield* start({ OTEL_BSP_SCHEDULE_DELAY: "100" })
    receiver.behave([], { status: 400 })
    yield* Http.request(node.rest, "GET", "/v1/admin/tenants", { token: node.operatorToken })
    const deadline = Date.now() + 15_000
    const warned = () => node.output().split("\n").find((line) => line.includes("component=otel"))
    while (warned() === undefined && Date.now() < deadline) yield* Effect.sleep("100 millis")
    expect(receiver.arrived()).toBeGreaterThan(0)
    expect(warned()).toContain("level=WARN")
  }), { timeout: 60_000 })

/** Reads `Tracing.config` from exactly these variables. */
const read = (variables: Record<string, string>) =>
  Effect.withConfigProvider(Effect.exit(Tracing.config), ConfigProvider.fromMap(new Map(Object.entries(variables))))

const configured = (variables: Record<string, string>) =>
  Effect.flatMap(read(variables), (exit) => Exit.isSuccess(exit) ? Effect.succeed(exit.value) : Effect.die(exit.cause))

it.effect("the traces endpoint: the traces variable as it is, else the general one with /v1/traces; none without", () =>
  Effect.gen(function*() {
    expect(yield* configured({})).toEqual(Option.none())
    const general = yield* configured({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" })
    expect(Option.map(general, (options) => options.url)).toEqual(Option.some("http://collector:4318/v1/traces"))
    const both = yield* configured({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://traces.example/ingest"
    })
    expect(Option.map(both, (options) => options.url)).toEqual(Option.some("https://traces.example/ingest"))
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }
    expect(yield* configured({ ...endpoint, OTEL_SDK_DISABLED: "true" })).toEqual(Option.none())
    expect(yield* configured({ ...endpoint, OTEL_TRACES_EXPORTER: "none" })).toEqual(Option.none())
    expect(Option.isSome(yield* configured({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" }))).toBe(true)
    // This node sends protobuf over HTTP only; a collector set up for gRPC or JSON is a mistake said at start.
    expect(Exit.isFailure(yield* read({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }))).toBe(true)
    expect(Exit.isFailure(yield* read({ ...endpoint, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json" }))).toBe(true)
  }))

it.effect("headers are decoded, the traces variable's over the general one's", () =>
  Effect.gen(function*() {
    const options = yield* configured({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      OTEL_EXPORTER_OTLP_HEADERS: "authorization=Basic%20abc%3D, x-team = core ,broken",
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: "x-team=traces"
    })
    expect(Option.map(options, (options) => options.headers)).toEqual(
      Option.some({ authorization: "Basic abc=", "x-team": "traces" })
    )
  }))

/** The sampling decision for a span named `name`, as a root or under a sampled parent. */
const decide = (options: Tracing.Options, name: string, parented: boolean) => {
  const parent = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: "0af7651916cd43dd8448eb211c80319c",
    spanId: "b7ad6b7169203331",
    traceFlags: TraceFlags.SAMPLED
  })
  return options.sampler.shouldSample(
    parented ? parent : context.active(),
    "0af7651916cd43dd8448eb211c80319c",
    name,
    SpanKind.INTERNAL,
    {},
    []
  ).decision
}

it.effect("sampling: the SDKs' variables, and no statement exported outside a span", () =>
  Effect.gen(function*() {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }
    const always = Option.getOrThrow(yield* configured(endpoint))
    expect(decide(always, "Turn.run", false)).toBe(SamplingDecision.RECORD_AND_SAMPLED)
    expect(decide(always, "sql.execute", true)).toBe(SamplingDecision.RECORD_AND_SAMPLED)
    expect(decide(always, "sql.execute", false)).toBe(SamplingDecision.NOT_RECORD)
    const none = Option.getOrThrow(yield* configured({ ...endpoint, OTEL_TRACES_SAMPLER: "always_off" }))
    expect(decide(none, "Turn.run", true)).toBe(SamplingDecision.NOT_RECORD)
    const ratio = { ...endpoint, OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0" }
    const rare = Option.getOrThrow(yield* configured(ratio))
    expect(decide(rare, "Turn.run", false)).toBe(SamplingDecision.NOT_RECORD)
    // A sampled caller's trace is followed whatever the ratio.
    expect(decide(rare, "Turn.run", true)).toBe(SamplingDecision.RECORD_AND_SAMPLED)
    expect(Exit.isFailure(yield* read({ ...ratio, OTEL_TRACES_SAMPLER_ARG: "2" }))).toBe(true)
  }))

/** The tracer and `Exporting` seen by what the tracing layer is provided to, under these variables. */
const installed = (variables: Record<string, string>) =>
  Effect.all([Effect.tracer, NodeSpans.Exporting]).pipe(
    Effect.provide(Tracing.layer.pipe(Layer.provide(ServerConfig.layer))),
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(variables)))),
    Effect.scoped
  )

it.effect("without an endpoint no tracer is installed; with one, Effect's tracer is the exporting one", () =>
  Effect.gen(function*() {
    const own = yield* Effect.tracer
    expect(yield* installed({})).toEqual([own, false])
    const [tracer, exporting] = yield* installed({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" })
    expect(tracer).not.toBe(own)
    expect(exporting).toBe(true)
  }))

it("URLs are recorded without the credentials they carry", () => {
  expect(Tracing.withoutCredentials("/v1/files/f1?signature=abc&expires=9")).toBe(
    "/v1/files/f1?signature=REDACTED&expires=9"
  )
  expect(Tracing.withoutCredentials("/sign-in/callback?code=c0de&state=s")).toBe(
    "/sign-in/callback?code=REDACTED&state=s"
  )
  expect(Tracing.withoutCredentials("/sign-in/link/arl_secret")).toBe("/sign-in/link/REDACTED")
  expect(Tracing.withoutCredentials("/v1/agents?codex=1")).toBe("/v1/agents?codex=1")
})
