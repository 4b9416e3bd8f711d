/**
 * The operator's metrics over real HTTP: a node (no trace exporter set, so the figures do not depend on one)
 * scraped at `GET /v1/admin/metrics` after prompts sent both ways (the hot route, and the API for a request
 * with an Origin header), with a webhook endpoint that cannot be reached so deliveries pile up. Only the
 * operator token scrapes.
 */
import { Http, TestNode, TestWorld } from "@agent-runtime/testing"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** The samples of Prometheus' text format (comments and blank lines left out). */
const samplesOf = (text: string): ReadonlyArray<Sample> =>
  text.split("\n").filter((line) => line !== "" && !line.startsWith("#")).map((line) => {
    const match = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null) throw new Error(`not a sample line: ${line}`)
    const labels = Object.fromEntries(
      Array.from((match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g), ([, name, value]) => [name!, value!])
    )
    return { name: match[1]!, labels, value: Number(match[3]) }
  })

/** The one sample of `name` whose labels include `labels`. */
const sample = (samples: ReadonlyArray<Sample>, name: string, labels: Record<string, string> = {}) => {
  const found = samples.filter((sample) =>
    sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value)
  )
  if (found.length !== 1) throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`)
  return found[0]!.value
}

const scrape = (node: TestNode.TestNode, token?: string) =>
  Http.request(node.rest, "GET", "/v1/admin/metrics", token === undefined ? {} : { token })

layer(TestWorld.layer(), { excludeTestServices: true })("operator metrics", (it) => {
  it.scoped("after prompts, the scrape answers Prometheus text with the node's figures", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "metrics")
      const deadPort = yield* TestNode.freePort
      const webhook = yield* api.post("/v1/webhooks", {
        token,
        json: { url: `http://127.0.0.1:${deadPort}/hook`, events: ["run.completed"] }
      })
      expect(webhook.status).toBe(201)
      const agentId = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body.id as string
      // One prompt through the hot route, one through the API (an Origin header hands it on): one route either way.
      for (const headers of [{}, { origin: "https://app.example" }]) {
        world.upstream.script({ text: "counted" })
        const accepted = yield* api.post(`/v1/agents/${agentId}/prompt`, { token, headers, json: { text: "hi" } })
        expect(accepted.status).toBe(202)
        yield* Http.settled(api, token, agentId, accepted.body.id)
      }

      // A request reads settled as its run ends (the run's time is taken after), and the cluster sets its entity
      // gauge every second: scraped until both show.
      const deadline = Date.now() + 10_000
      let scraped = yield* scrape(world.node, world.node.operatorToken)
      const shown = (samples: ReadonlyArray<Sample>) =>
        sample(samples, "agent_runtime_turn_duration_seconds_count") === 2 &&
        sample(samples, "effect_cluster_entities", { type: "Agent" }) === 1
      while (!shown(samplesOf(scraped.text)) && Date.now() < deadline) {
        yield* Effect.sleep("200 millis")
        scraped = yield* scrape(world.node, world.node.operatorToken)
      }
      expect(scraped.status).toBe(200)
      expect(scraped.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8")
      const samples = samplesOf(scraped.text)
      const prompts = {
        http_request_method: "POST",
        http_route: "/v1/agents/:id/prompt",
        http_response_status_code: "202"
      }
      expect(sample(samples, "http_server_request_duration_seconds_count", prompts)).toBe(2)
      expect(sample(samples, "http_server_request_duration_seconds_bucket", { ...prompts, le: "+Inf" })).toBe(2)
      expect(sample(samples, "http_server_request_duration_seconds_sum", prompts)).toBeGreaterThan(0)
      expect(
        sample(samples, "http_server_request_duration_seconds_count", {
          http_request_method: "GET",
          http_route: "/v1/agents/:id/requests/:requestId",
          http_response_status_code: "200"
        })
      ).toBeGreaterThanOrEqual(2)
      expect(
        sample(samples, "http_server_request_duration_seconds_count", {
          http_request_method: "POST",
          http_route: "/v1/webhooks",
          http_response_status_code: "201"
        })
      ).toBe(1)
      // The scrape itself is being served.
      expect(sample(samples, "http_server_active_requests")).toBeGreaterThanOrEqual(1)

      expect(sample(samples, "agent_runtime_turn_duration_seconds_count")).toBe(2)
      expect(sample(samples, "agent_runtime_turn_duration_seconds_bucket", { le: "+Inf" })).toBe(2)
      expect(sample(samples, "agent_runtime_events_total", { type: "response" })).toBe(2)
      expect(sample(samples, "agent_runtime_events_total", { type: "turn_opened" })).toBe(2)
      expect(sample(samples, "agent_runtime_turns_running")).toBe(0)
      expect(sample(samples, "agent_runtime_requests_queued")).toBe(0)

      // The cluster's own Effect metrics come through the same bridge: one node holds every shard, the agent is
      // alive on it.
      expect(sample(samples, "effect_cluster_shards")).toBe(300)
      expect(sample(samples, "effect_cluster_entities", { type: "Agent" })).toBe(1)

      expect(sample(samples, "agent_runtime_database_reachable")).toBe(1)
      // The scrape's own statement is one active session of the node's.
      expect(sample(samples, "agent_runtime_database_sessions", { state: "active" })).toBeGreaterThanOrEqual(1)
      expect(sample(samples, "agent_runtime_database_sessions", { state: "idle in transaction" })).toBe(0)
      // Each run.completed waits for an endpoint that never answers.
      expect(sample(samples, "agent_runtime_webhook_deliveries_pending")).toBe(2)
      expect(sample(samples, "agent_runtime_webhook_oldest_pending_seconds")).toBeGreaterThan(0)

      expect(sample(samples, "process_cpu_seconds_total")).toBeGreaterThan(0)
      expect(sample(samples, "process_resident_memory_bytes")).toBeGreaterThan(0)
      expect(sample(samples, "target_info", { service_name: "agent-runtime" })).toBe(1)
      expect(samples.find((sample) => sample.name === "target_info")?.labels.service_instance_id).toBe(
        world.node.runnerAddress
      )
    }))

  it.scoped("only the operator token scrapes: an API key is refused 403, no token or another 401", () =>
    Effect.gen(function*() {
      const world = yield* TestWorld.TestWorld
      const { api, token } = yield* TestWorld.tenantWithModel(world, "metrics-refused")
      const forbidden = yield* scrape(world.node, token)
      expect(forbidden.status).toBe(403)
      expect(forbidden.body).toEqual({ error: "operator routes need the operator token", code: "FORBIDDEN" })
      expect(forbidden.text).not.toContain("http_server")

      const missing = yield* scrape(world.node)
      expect(missing.status).toBe(401)
      expect(missing.body).toEqual({ error: "missing bearer token", code: "UNAUTHORIZED" })

      const second = yield* api.post("/v1/tokens", { token, json: { name: "revoked" } })
      expect((yield* api.delete(`/v1/tokens/${second.body.id}`, { token })).status).toBe(200)
      for (const other of [second.body.token as string, "aro_not-the-operator", `${world.node.operatorToken}x`]) {
        const refused = yield* scrape(world.node, other)
        expect(refused.status).toBe(401)
        expect(refused.body).toEqual({ error: "invalid or revoked token", code: "UNAUTHORIZED" })
      }
    }))
})
