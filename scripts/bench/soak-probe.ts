/**
 * A probe for `scripts/bench/soak.ts`, loaded into the node under soak with
 * `NODE_OPTIONS="--import <this file>"`, so the node's own event loop and
 * memory are measured from inside without any change to product code.
 *
 * Every SOAK_PROBE_MS (default 10,000; 0: only on request) and on SIGUSR2 it
 * appends one JSON line to SOAK_PROBE_FILE: event-loop delay since the
 * previous line (p50, p99, max, from `monitorEventLoopDelay`), event-loop
 * utilization, GC time and its longest pause, the heap left after the latest
 * full collection, memory (`process.memoryUsage()`) and the active resources
 * keeping the loop alive (`process.getActiveResourcesInfo()`, counted by
 * type). When the file `<SOAK_PROBE_FILE>.gc` exists at a SIGUSR2, the probe
 * deletes it and runs a full collection first, so the line gives the exact
 * live heap (`forcedGc`); the soak asks for that only while the node is idle
 * (before and after the load), never under load. Without SOAK_PROBE_FILE it
 * does nothing, so a stray NODE_OPTIONS is harmless.
 *
 * Its own timer is unref'd and a signal listener is no active resource, so
 * the probe adds nothing to the counts it reports and never holds the node
 * open when it shuts down.
 */
import * as Fs from "node:fs"
import {
  constants,
  monitorEventLoopDelay,
  performance,
  type PerformanceEntry,
  PerformanceObserver
} from "node:perf_hooks"
import * as V8 from "node:v8"
import * as Vm from "node:vm"

const file = process.env.SOAK_PROBE_FILE
const every = Number(process.env.SOAK_PROBE_MS ?? 10_000)
// The histogram records the time between two ticks of a timer of this period, so a loop that is never late
// reads about `resolution`; the delay is what lies beyond it (the same correction @fastify/under-pressure makes).
const resolution = 10

if (file !== undefined && file !== "") {
  const histogram = monitorEventLoopDelay({ resolution })
  histogram.enable()
  let gcMs = 0
  let gcCount = 0
  let gcMaxMs = 0
  // The heap in use just after the latest full collection: what is live, without the garbage a sample at a
  // random moment also counts (the heap swings by hundreds of MiB between collections under load).
  let liveAfterMajorGc: number | null = null
  // A forced collection (below) is not the node's own: its entries, reported later, are left out of the figures.
  let forced = { from: 0, to: 0 }
  const gc = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (entry.startTime >= forced.from && entry.startTime <= forced.to) continue
      gcMs += entry.duration
      gcCount++
      gcMaxMs = Math.max(gcMaxMs, entry.duration)
      // A gc entry's detail carries its kind (@types/node's PerformanceEntry type does not show `detail`).
      const kind = (entry as PerformanceEntry & { readonly detail?: { readonly kind?: number } }).detail?.kind
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
        liveAfterMajorGc = V8.getHeapStatistics().used_heap_size
      }
    }
  })
  gc.observe({ entryTypes: ["gc"] })
  let utilization = performance.eventLoopUtilization()
  const delayMs = (nanoseconds: number) => Math.max(0, nanoseconds / 1e6 - resolution)

  /** `gc()` without starting the node with --expose-gc: the flag set now, the function taken from a new context. */
  let collect: (() => void) | undefined
  const forceGc = () => {
    if (collect === undefined) {
      V8.setFlagsFromString("--expose-gc")
      collect = Vm.runInNewContext("gc") as () => void
    }
    const started = performance.now()
    collect()
    forced = { from: started, to: performance.now() }
    return { ms: forced.to - forced.from, liveHeap: V8.getHeapStatistics().used_heap_size }
  }

  const sample = (reason: "interval" | "signal") => {
    let forcedGc: { ms: number; liveHeap: number } | null = null
    if (reason === "signal" && Fs.existsSync(`${file}.gc`)) {
      Fs.rmSync(`${file}.gc`, { force: true })
      forcedGc = forceGc()
    }
    const resources: Record<string, number> = {}
    for (const type of process.getActiveResourcesInfo()) resources[type] = (resources[type] ?? 0) + 1
    const memory = process.memoryUsage()
    const next = performance.eventLoopUtilization()
    const line = {
      at: Date.now(),
      reason,
      // No tick completed since the last sample (the loop was blocked the whole time): no figure, not zero.
      loop: histogram.count === 0 ? null : {
        p50: delayMs(histogram.percentile(50)),
        p99: delayMs(histogram.percentile(99)),
        max: delayMs(histogram.max),
        ticks: histogram.count
      },
      utilization: performance.eventLoopUtilization(next, utilization).utilization,
      gc: { ms: gcMs, count: gcCount, maxMs: gcMaxMs, liveAfterMajorGc },
      forcedGc,
      memory: {
        rss: memory.rss,
        heapUsed: memory.heapUsed,
        heapTotal: memory.heapTotal,
        external: memory.external,
        arrayBuffers: memory.arrayBuffers
      },
      resources
    }
    utilization = next
    gcMs = 0
    gcCount = 0
    gcMaxMs = 0
    histogram.reset()
    // Synchronous and tiny (one line every few seconds): an async write would itself be an active resource.
    Fs.appendFileSync(file, JSON.stringify(line) + "\n")
  }

  if (every > 0) setInterval(() => sample("interval"), every).unref()
  process.on("SIGUSR2", () => sample("signal"))
}
