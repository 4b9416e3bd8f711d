/**
 * `node scripts/bench/codemode.ts`: figures for code mode (`Codemode.run`,
 * packages/codemode), in one process, no node or database: what a run costs
 * beside the cheapest thing it could be compared with, each set measured in
 * the same loop, alternating one by one (so drift on a shared machine hits
 * all alike), after 20 warm-up rounds that are not counted. Before all of
 * it, 100 runs warm the process up (the first 50-80 runs were slower,
 * presumably while V8 tiers up the QuickJS WebAssembly code).
 *
 * - sandbox start: `Codemode.run("return 1", [])`, a fresh WebAssembly
 *   instance, runtime and context each run; p50/p99 and runs/s (1000 / mean).
 *   Floors: `Effect.succeed(1)` yielded in the same fiber, and a bare
 *   `new Function("return 1")()`.
 * - tool call: a run whose code awaits one host tool answering at once
 *   (`Effect.succeed({ text: '{"ok":true}', isError: false })`); then the
 *   marginal cost of a call, from code awaiting the tool BENCH_CALLS times in
 *   a loop against the same code looping zero times (same tool bound):
 *   per call = (p50 of the looping run - p50 of the empty run) / calls, and
 *   the same from the mean CPU time of each. Floor: the same tool's `call`
 *   yielded directly BENCH_CALLS times.
 * - CPU: the process's user + system CPU time (`process.cpuUsage`, all its
 *   threads, GC included) per run, mean; steadier than wall time when other
 *   work shares the machine.
 * - memory: RSS, V8 heap used and external memory (ArrayBuffers, the
 *   instances' linear memories among them) after full collections, before
 *   BENCH_MEMORY_RUNS one-call runs, halfway and after them.
 *
 * Prints a table, then the figures as one JSON line.
 *
 * Environment: BENCH_RUNS (per measurement, default 200), BENCH_CALLS (calls in
 * the looping run, default 100), BENCH_MEMORY_RUNS (default 1000).
 */
import { Codemode } from "@agent-runtime/codemode"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as Os from "node:os"
import * as V8 from "node:v8"
import * as Vm from "node:vm"

const runs = Number(process.env.BENCH_RUNS ?? 200)
const calls = Number(process.env.BENCH_CALLS ?? 100)
const memoryRuns = Number(process.env.BENCH_MEMORY_RUNS ?? 1000)
const warmUp = 20
const processWarmUp = 100

// A full collection on demand, without a flag on the command line.
V8.setFlagsFromString("--expose-gc")
const gc = Vm.runInNewContext("gc") as () => void

const now = () => performance.now()

/** The process's user + system CPU time, in ms. */
const cpu = () => {
  const { system, user } = process.cpuUsage()
  return (user + system) / 1000
}

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

const mean = (values: ReadonlyArray<number>) => values.reduce((sum, value) => sum + value, 0) / values.length

/** Milliseconds, in µs below 0.1 ms. */
const time = (ms: number) => ms < 0.1 ? `${(ms * 1000).toFixed(2)} µs` : `${ms.toFixed(2)} ms`

const round = (ms: number) => Number(ms.toFixed(5))

interface Samples {
  /** Wall time of each run, ms. */
  readonly wall: Array<number>
  /** CPU time of each run, ms. */
  readonly cpu: Array<number>
}

const stats = (samples: Samples) => ({
  p50Ms: round(percentile(samples.wall, 50)),
  p99Ms: round(percentile(samples.wall, 99)),
  runsPerSecond: Math.round(1000 / mean(samples.wall)),
  cpuMeanMs: round(mean(samples.cpu))
})

const echo: Codemode.HostTool = {
  name: "echo",
  description: "Answers at once.",
  parameters: { type: "object" },
  call: () => Effect.succeed({ text: '{"ok":true}', isError: false })
}

const loop = (n: number) => `for (let i = 0; i < ${n}; i++) await tools.echo({ i })\nreturn ${n}`

/** Runs `code` and checks it returned `expected` after `toolCalls` calls. */
const checked = (code: string, tools: ReadonlyArray<Codemode.HostTool>, expected: unknown, toolCalls: number) =>
  Effect.flatMap(
    Codemode.run(code, tools),
    (result) =>
      result.ok && JSON.stringify(result.result) === JSON.stringify(expected) && result.toolCalls === toolCalls
        ? Effect.void
        : Effect.die(new Error(`unexpected result of ${JSON.stringify(code)}: ${JSON.stringify(result)}`))
  )

/** Times each effect once per round, one after the other, `warmUp` uncounted rounds first. */
const alternate = <const Names extends string>(effects: Record<Names, Effect.Effect<void>>, rounds: number) =>
  Effect.gen(function*() {
    const names = Object.keys(effects) as Array<Names>
    const samples = Object.fromEntries(names.map((name): [Names, Samples] => [name, { wall: [], cpu: [] }])) as Record<
      Names,
      Samples
    >
    for (let round = 0; round < rounds + warmUp; round++) {
      for (const name of names) {
        const cpuStarted = cpu()
        const started = now()
        yield* effects[name]
        const elapsed = now() - started
        const cpuElapsed = cpu() - cpuStarted
        if (round < warmUp) continue
        samples[name].wall.push(elapsed)
        samples[name].cpu.push(cpuElapsed)
      }
    }
    return samples
  })

interface Memory {
  readonly rssMiB: number
  readonly heapUsedMiB: number
  readonly externalMiB: number
}

const mib = (bytes: number) => Number((bytes / 1024 / 1024).toFixed(1))

/** After two full collections a moment apart (ArrayBuffer backing stores are freed after the first). */
const memory: Effect.Effect<Memory> = Effect.gen(function*() {
  gc()
  yield* Effect.sleep("100 millis")
  gc()
  const usage = process.memoryUsage()
  return { rssMiB: mib(usage.rss), heapUsedMiB: mib(usage.heapUsed), externalMiB: mib(usage.external) }
})

const program = Effect.gen(function*() {
  const started = now()
  const loadBefore = Os.loadavg()
  const startRun = checked("return 1", [], 1, 0)
  const oneCallRun = checked("return await tools.echo({})", [echo], { ok: true }, 1)
  for (let i = 0; i < processWarmUp / 2; i++) {
    yield* startRun
    yield* oneCallRun
  }

  // 1. Sandbox start, beside an Effect and a bare eval.
  const start = yield* alternate({
    run: startRun,
    effect: Effect.asVoid(Effect.succeed(1)),
    eval: Effect.sync(() => {
      if (new Function("return 1")() !== 1) throw new Error("eval")
    })
  }, runs)

  // 2. Tool calls: one call, the looping run against the empty one, and the tool called directly.
  const tool = yield* alternate({
    one: oneCallRun,
    empty: checked(loop(0), [echo], 0, 0),
    looping: checked(loop(calls), [echo], calls, calls),
    direct: Effect.gen(function*() {
      for (let i = 0; i < calls; i++) yield* echo.call({ i }, i)
    })
  }, runs)
  const perCallMs = (percentile(tool.looping.wall, 50) - percentile(tool.empty.wall, 50)) / calls
  const perCallCpuMs = (mean(tool.looping.cpu) - mean(tool.empty.cpu)) / calls
  const directPerCallMs = percentile(tool.direct.wall, 50) / calls

  // 3. Memory around one-call runs.
  const before = yield* memory
  let halfway = before
  const memoryStarted = now()
  const memoryCpuStarted = cpu()
  for (let i = 1; i <= memoryRuns; i++) {
    yield* oneCallRun
    if (i === Math.floor(memoryRuns / 2)) halfway = yield* memory
  }
  const memorySeconds = (now() - memoryStarted) / 1000
  const memoryCpuMs = cpu() - memoryCpuStarted
  const after = yield* memory

  const loadAverage = (loads: ReadonlyArray<number>) => loads.map((load) => Number(load.toFixed(2)))
  const figures = {
    machine: {
      cpus: Os.cpus().length,
      loadAverageBefore: loadAverage(loadBefore),
      loadAverageAfter: loadAverage(Os.loadavg())
    },
    node: process.version,
    runs,
    sandboxStart: { run: stats(start.run), effectSucceed: stats(start.effect), newFunction: stats(start.eval) },
    toolCall: {
      oneCallRun: stats(tool.one),
      emptyLoopRun: stats(tool.empty),
      loopingRun: { calls, ...stats(tool.looping) },
      directCalls: { calls, ...stats(tool.direct) },
      perCallMs: round(perCallMs),
      perCallCpuMs: round(perCallCpuMs),
      directPerCallMs: round(directPerCallMs)
    },
    memory: {
      runs: memoryRuns,
      runsPerSecond: Math.round(memoryRuns / memorySeconds),
      cpuPerRunMs: round(memoryCpuMs / memoryRuns),
      before,
      halfway,
      after
    },
    seconds: Number(((now() - started) / 1000).toFixed(1))
  }

  const row = (figure: string, samples: Samples) =>
    `| ${figure} | ${time(percentile(samples.wall, 50))} | ${time(percentile(samples.wall, 99))} | ${
      Math.round(1000 / mean(samples.wall)).toLocaleString("en-US")
    } | ${time(mean(samples.cpu))} |`
  const heap = (m: Memory) => `RSS ${m.rssMiB} MiB, heap used ${m.heapUsedMiB} MiB, external ${m.externalMiB} MiB`
  const ratio = (a: number, b: number) => `${Math.round(a / b).toLocaleString("en-US")}x`
  yield* Console.log(
    `\ncodemode: ${runs} runs per measurement after ${processWarmUp} warm-up runs and ${warmUp} warm-up rounds, ` +
      `alternating; ${Os.cpus().length} CPUs, ` +
      `load average ${figures.machine.loadAverageBefore.join(" ")} at the start, ` +
      `${figures.machine.loadAverageAfter.join(" ")} at the end; node ${process.version}\n`
  )
  yield* Console.log("| figure | p50 | p99 | runs/s | CPU per run (mean) |\n|---|---|---|---|---|")
  yield* Console.log(row('sandbox start: `Codemode.run("return 1", [])`', start.run))
  yield* Console.log(row("  floor: `Effect.succeed(1)` in the same fiber", start.effect))
  yield* Console.log(row('  floor: `new Function("return 1")()`', start.eval))
  yield* Console.log(row("run awaiting one tool call", tool.one))
  yield* Console.log(row("run looping 0 times over `await tools.echo`", tool.empty))
  yield* Console.log(row(`run looping ${calls} times over \`await tools.echo\``, tool.looping))
  yield* Console.log(row(`  floor: the tool's \`call\` yielded ${calls} times directly`, tool.direct))
  yield* Console.log(
    `\nper tool call from code: ${time(perCallMs)} wall (p50 of the ${calls}-call run minus p50 of the empty run, ` +
      `/ ${calls}), ${time(perCallCpuMs)} CPU (from the means); called directly: ${time(directPerCallMs)} ` +
      `(${ratio(perCallMs, directPerCallMs)})`
  )
  yield* Console.log(
    `sandbox start, p50: ${ratio(percentile(start.run.wall, 50), percentile(start.effect.wall, 50))} ` +
      `Effect.succeed, ${ratio(percentile(start.run.wall, 50), percentile(start.eval.wall, 50))} new Function`
  )
  yield* Console.log(
    `\nmemory, ${memoryRuns} one-call runs (${figures.memory.runsPerSecond} runs/s, ` +
      `${time(figures.memory.cpuPerRunMs)} CPU each), after full collections:`
  )
  yield* Console.log(`  before:  ${heap(before)}`)
  yield* Console.log(`  halfway: ${heap(halfway)}`)
  yield* Console.log(`  after:   ${heap(after)}\n`)
  yield* Console.log(JSON.stringify(figures))
})

program.pipe(NodeRuntime.runMain)
