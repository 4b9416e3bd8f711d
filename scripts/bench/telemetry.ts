/**
 * `node scripts/bench/telemetry.ts`: what trace export costs a turn, in one
 * run on one node (its own process, embedded PostgreSQL, the fake upstream
 * answering at once), so the ratio holds on a noisy machine.
 *
 * Two tenants on the node, the same load: one exports nothing, the other
 * exports every run to an OTLP receiver that never answers (the worst a
 * tenant's backend can do). Phases alternate off, on, off, on after a warm-up
 * of both; each figure is the better of its two phases. Then one run with a
 * tool call is traced into a receiver that answers, and its span tree is
 * printed as the receiver decoded it.
 *
 * Environment: BENCH_CLIENTS (default 16), BENCH_PER_PHASE (turns per phase, default 600), BENCH_WARMUP
 * (default 200).
 */
import * as OtlpReceiver from "@agent-runtime/testing/OtlpReceiver"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as BenchNode from "./benchNode.ts"

const { better, json, ratio, turns } = BenchNode

const clients = Number(process.env.BENCH_CLIENTS ?? 16)
const perPhase = Number(process.env.BENCH_PER_PHASE ?? 600)
const warmup = Number(process.env.BENCH_WARMUP ?? 200)

const program = Effect.scoped(Effect.gen(function*() {
  const { node, token, upstream } = yield* BenchNode.start("telemetry", { maxRecorded: 1000 })
  const base = node.rest
  const hanging = yield* OtlpReceiver.make
  hanging.behave([], { hang: true })
  const answering = yield* OtlpReceiver.make
  /** Another tenant of the node, with the same provider, exporting to `endpoint`. */
  const exportingTo = (name: string, endpoint: string) =>
    Effect.promise(async () => {
      const tenant = await json(`${base}/v1/admin/tenants`, node.operatorToken, { method: "POST", body: { name } })
      await json(`${base}/v1/providers/fake`, tenant.token, {
        method: "PUT",
        body: {
          type: "openai-completions",
          baseUrl: `${upstream.url}/v1`,
          models: [{ id: "m1", contextWindow: 1_000_000 }]
        }
      })
      await json(`${base}/v1/telemetry`, tenant.token, { method: "PUT", body: { endpoint } })
      return tenant.token as string
    })
  const exporting = yield* exportingTo("exporting", hanging.url)
  const agentsOf = (owner: string) =>
    Promise.all(
      Array.from({ length: clients }, () =>
        json(`${base}/v1/agents`, owner, { method: "POST", body: { model: "fake/m1", mounts: [] } })
          .then((created) =>
            created.id as string
          ))
    )
  const [quiet, traced] = yield* Effect.promise(() => Promise.all([agentsOf(token), agentsOf(exporting)]))
  const phase = (owner: string, agents: ReadonlyArray<string>, count: number) => turns(base, owner, agents, count)
  const [offA, onA, offB, onB] = yield* Effect.promise(async () => {
    await phase(token, quiet, warmup)
    await phase(exporting, traced, warmup)
    return [
      await phase(token, quiet, perPhase),
      await phase(exporting, traced, perPhase),
      await phase(token, quiet, perPhase),
      await phase(exporting, traced, perPhase)
    ]
  })
  const off = better(offA!, offB!)
  const on = better(onA!, onB!)

  // One traced run with a tool call, by a third tenant into a receiver that answers: its tree as exported.
  const shown = yield* exportingTo("shown", answering.url)
  upstream.script({ toolCalls: [{ id: "call_lookup", name: "lookup", arguments: { q: "order 123" } }] })
  upstream.script({ text: "Order 123 shipped." })
  yield* Effect.promise(async () => {
    const agent = await json(`${base}/v1/agents`, shown, {
      method: "POST",
      body: { model: "fake/m1", mounts: [], name: "Support bot" }
    })
    const request = await json(`${base}/v1/agents/${agent.id}/prompt`, shown, {
      method: "POST",
      body: { text: "where is order 123?" }
    })
    let record = request
    while (record.state !== "completed") {
      record = await json(`${base}/v1/agents/${agent.id}/requests/${request.id}?wait=25`, shown)
    }
  })
  const spans = yield* answering.waitFor((all) => all.some((span) => span.name.startsWith("invoke_agent")))
  const lines: Array<string> = []
  const print = (parent: string | undefined, depth: number) => {
    for (const span of spans.filter((candidate) => candidate.parentSpanId === parent)) {
      const ms = Number((span.endNanos - span.startNanos) / 1_000_000n)
      const attributes = Object.entries(span.attributes)
        .filter(([key]) => !key.startsWith("agent_runtime.tenant") && key !== "agent_runtime.agent.id")
        .map(([key, value]) => `${key}=${JSON.stringify(value)}`).join(" ")
      lines.push(`${"  ".repeat(depth)}${span.name} (${ms} ms, span ${span.spanId}) ${attributes}`)
      print(span.spanId, depth + 1)
    }
  }
  print(undefined, 0)
  yield* Console.log(JSON.stringify(
    {
      clients,
      perPhase,
      exportOff: off,
      exportOnToAHangingReceiver: on,
      onPerOff: {
        throughput: ratio(on.perSecond, off.perSecond),
        p50: ratio(on.p50, off.p50),
        p99: ratio(on.p99, off.p99)
      },
      phases: { off: [offA, offB], on: [onA, onB] }
    },
    null,
    2
  ))
  yield* Console.log(`one trace (${spans[0]!.traceId}):\n${lines.join("\n")}`)
}))

NodeRuntime.runMain(program)
