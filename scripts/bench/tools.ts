/**
 * `node scripts/bench/tools.ts`: what the runtime adds to a call of an
 * application's tool, against a real node on an embedded PostgreSQL, the
 * fake upstream as the model (instant answers) and a bare application on
 * loopback that answers each call the moment its frame arrives.
 *
 * Per call, timed from outside the node:
 * - out: the model's tool-call response (the upstream got the request and
 *   answered at once) until the application reads the tools/call frame
 *   (journaled assistant message and call start, the frame on the stream)
 * - back: the application posts its answer until the model is asked again
 *   (the answer through the API to the owner, the result journaled, the
 *   next model request)
 * - round trip = out + back: the runtime's share of "model asks, application
 *   answers, model gets the result" (the application's own time left out)
 * Beside it, in the same run, the floor of one loopback HTTP request to the
 * node (`GET /healthz`), which any round trip pays twice.
 *
 * Environment: BENCH_CALLS (default 300).
 */
import * as BareApplication from "@agent-runtime/testing/BareApplication"
import * as Http from "@agent-runtime/testing/Http"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as BenchNode from "./benchNode.ts"

const callCount = Number(process.env.BENCH_CALLS ?? 300)

const now = () => performance.timeOrigin + performance.now()

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

const figures = (name: string, values: ReadonlyArray<number>) =>
  `${name}: p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${percentile(values, 99).toFixed(1)} ms`

const program = Effect.gen(function*() {
  const { api, node, token, upstream } = yield* BenchNode.start("tools", { maxRecorded: 10_000 })
  const agent = (yield* api.post("/v1/agents", { token, json: { model: "fake/m1" } })).body
  const app = yield* BareApplication.connected({
    base: node.rest,
    agentId: agent.id,
    token: agent.token,
    tools: [{ name: "echo", description: "Says it back", inputSchema: { type: "object" } }]
  })
  while (!(yield* api.get(`/v1/agents/${agent.id}`, { token })).body.connected) yield* Effect.sleep("50 millis")

  const out: Array<number> = []
  const back: Array<number> = []
  const floor: Array<number> = []
  // The first calls warm the path up and are not counted.
  const warmUp = 20
  for (let i = 0; i < callCount + warmUp; i++) {
    upstream.script({ toolCalls: [{ id: `call_${i}`, name: "echo", arguments: { n: i } }] })
    upstream.script({ text: "ok" })
    const before = upstream.requests().length
    const accepted = (yield* api.post(`/v1/agents/${agent.id}/prompt`, { token, json: { text: `p${i}` } })).body
    const done = (yield* api.get(`/v1/agents/${agent.id}/requests/${accepted.id}?wait=20`, { token })).body
    if (done.outcome?.result?.toolCalls?.[0]?.ok !== true) {
      return yield* Effect.die(new Error(`call ${i} failed: ${JSON.stringify(done.outcome)}`))
    }
    const [asked, answered] = upstream.requests().slice(before)
    const call = app.calls.at(-1)!
    if (i < warmUp) continue
    out.push(call.receivedAt - asked!.receivedAt)
    back.push(answered!.receivedAt - call.answeredAt)
    const started = now()
    yield* Http.request(node.rest, "GET", "/healthz")
    floor.push(now() - started)
  }
  const roundTrip = out.map((ms, i) => ms + back[i]!)
  yield* Console.log(`tool calls: ${callCount} sequential calls of an application tool, one node`)
  yield* Console.log(figures("  round trip added by the runtime", roundTrip))
  yield* Console.log(figures("    out (model asks -> application reads the call)", out))
  yield* Console.log(figures("    back (application answers -> model asked again)", back))
  yield* Console.log(figures("  floor: one loopback HTTP request to the node (GET /healthz)", floor))
})

NodeRuntime.runMain(Effect.scoped(program))
