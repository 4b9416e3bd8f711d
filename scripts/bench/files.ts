/**
 * `node scripts/bench/files.ts`: volume figures, in one run, against a real
 * node (its own process) on an embedded PostgreSQL.
 *
 * - MiB/s of writing a file of BENCH_FILE_MIB with `PUT .../file` (random
 *   bytes, a new file each time, so no chunk dedupes) and of reading it whole
 *   with `GET .../file`, BENCH_REPEATS times, each turn beside two floors:
 *   - the database: the same bytes as 1 MiB `bytea` rows of a table shaped
 *     like `file_chunks`, one INSERT per row and one SELECT for all, from this
 *     process with `pg` (the node's driver), no node between
 *   - the wire: the same bytes over loopback HTTP, the same client, to and
 *     from a bare node:http server in its own process that discards them or
 *     answers them from memory
 * - the node's RSS (and its peak, VmHWM) before and after those transfers,
 *   and its CPU time over them (against their wall time: is the node the bound?)
 * - fork latency of a volume of BENCH_FORK_FILES files of BENCH_FORK_SMALL_KIB
 *   and of as many of BENCH_FORK_LARGE_KIB (written first through the API,
 *   BENCH_CONCURRENCY at once, also timed), beside two floors: one API round
 *   trip (`GET /v1/volumes/{id}`), and the fork's row copy run straight on
 *   PostgreSQL (a transaction rolled back). Each fork is removed after it,
 *   timed too, so the quota and the table stay as they were.
 *
 * Prints a markdown table, then the figures as one JSON line.
 *
 * Environment: BENCH_FILE_MIB (default 50), BENCH_REPEATS (5), BENCH_FORK_FILES (1000),
 * BENCH_FORK_SMALL_KIB (4), BENCH_FORK_LARGE_KIB (256), BENCH_FORKS (10), BENCH_CONCURRENCY (8).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Duration, Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import Pg from "pg"
import * as BenchNode from "./benchNode.ts"

const MiB = 1024 * 1024
const fileMiB = Number(process.env.BENCH_FILE_MIB ?? 50)
const repeats = Number(process.env.BENCH_REPEATS ?? 5)
const forkFiles = Number(process.env.BENCH_FORK_FILES ?? 1000)
const smallKiB = Number(process.env.BENCH_FORK_SMALL_KIB ?? 4)
const largeKiB = Number(process.env.BENCH_FORK_LARGE_KIB ?? 256)
const forks = Number(process.env.BENCH_FORKS ?? 10)
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 8)

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
const sum = (values: ReadonlyArray<number>) => values.reduce((a, b) => a + b, 0)
const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits
const sha256 = (bytes: Uint8Array) => Crypto.createHash("sha256").update(bytes).digest()

/** What `effect` answered, and the milliseconds it took. */
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([duration, value]) => ({ ms: Duration.toMillis(duration), value }))
const elapsed = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.map(timed(effect), ({ ms }) => ms)

/** The body of a 2xx answer; anything else stops the run with what the server said. */
const ok = async (response: Response, what: string) => {
  const bytes = new Uint8Array(await response.arrayBuffer())
  if (!response.ok) throw new Error(`${what}: ${response.status} ${Buffer.from(bytes).toString("utf8", 0, 500)}`)
  return bytes
}

/** The node's resident memory now and at its peak (MiB), and the CPU time it has used (s), from /proc. */
const usageOf = async (pid: number) => {
  const status = await Fs.readFile(`/proc/${pid}/status`, "utf8")
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)![1])
  return {
    rss: round(kib("VmRSS") / 1024),
    peak: round(kib("VmHWM") / 1024),
    cpu: await BenchNode.cpuSeconds(pid)
  }
}

/**
 * The wire floor's server, in its own process as the node is in its own: PUT bodies are read and dropped,
 * GET answers `BYTES` bytes held in memory.
 */
const bareServer = `
const body = require("node:crypto").randomBytes(Number(process.env.BYTES))
const server = require("node:http").createServer((request, response) => {
  if (request.method === "GET") return response.writeHead(200, { "content-length": body.length }).end(body)
  request.resume()
  request.on("end", () => response.writeHead(204).end())
})
server.listen(0, "127.0.0.1", () => console.log(server.address().port))
`

const startBareServer = (bytes: number) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ url: string; child: ChildProcess.ChildProcess }>((resolve, reject) => {
        const child = ChildProcess.spawn(process.execPath, ["-e", bareServer], {
          env: { ...process.env, BYTES: String(bytes) },
          stdio: ["ignore", "pipe", "inherit"]
        })
        child.once("error", reject)
        child.stdout!.once("data", (port: Buffer) => resolve({ url: `http://127.0.0.1:${String(port).trim()}`, child }))
      })
    ),
    ({ child }) => Effect.sync(() => child.kill())
  )

const program = Effect.gen(function*() {
  const runStarted = performance.now()
  const { api, databaseUrl, node, tenantId, token } = yield* BenchNode.start("files", { maxRecorded: 10 })
  const bytes = fileMiB * MiB
  const bare = yield* startBareServer(bytes)
  const db = new Pg.Client({ connectionString: databaseUrl })
  yield* Effect.promise(() => db.connect())
  yield* Effect.addFinalizer(() => Effect.promise(() => db.end()))
  // The floor's chunks go to a table of file_chunks' shape (its primary key on the hash included).
  yield* Effect.promise(() => db.query("CREATE TABLE bench_chunks (LIKE file_chunks INCLUDING ALL)"))
  const query = (text: string, values?: ReadonlyArray<unknown>) => Effect.promise(() => db.query(text, values as any))
  const send = (what: string, url: string, init?: RequestInit) =>
    Effect.promise(() => fetch(url, init).then((response) => ok(response, what)))
  const auth = { authorization: `Bearer ${token}` }
  const pid = node.process.pid!
  const usage = Effect.promise(() => usageOf(pid))

  // 1. A file of `bytes` written and read whole, each turn beside the database floor and the wire floor.
  const volume = (yield* api.post("/v1/volumes", { token, json: { name: "big" } })).body.id as string
  const fileUrl = (i: number) => `${node.rest}/v1/volumes/${volume}/file?path=big/${i}.bin`
  const before = yield* usage
  const written: Array<{ digest: Buffer; hashes: Array<Buffer> }> = []
  const write = { api: [] as Array<number>, db: [] as Array<number>, wire: [] as Array<number> }
  const hashing: Array<number> = []
  for (let i = 0; i < repeats; i++) {
    const content = Crypto.randomBytes(bytes)
    write.api.push(
      yield* elapsed(send(`PUT ${fileUrl(i)}`, fileUrl(i), {
        method: "PUT",
        body: content,
        headers: { ...auth, "content-type": "application/octet-stream" }
      }))
    )
    // What the write path hashes, here in this process: one SHA-256 per 1 MiB chunk.
    const chunks = Array.from({ length: Math.ceil(bytes / MiB) }, (_, c) => content.subarray(c * MiB, (c + 1) * MiB))
    const hashed = yield* timed(Effect.sync(() => chunks.map(sha256)))
    hashing.push(hashed.ms)
    const insert = (chunk: Uint8Array, c: number) =>
      query("INSERT INTO bench_chunks (hash, data, size) VALUES ($1, $2, $3)", [hashed.value[c], chunk, chunk.length])
    write.db.push(yield* elapsed(Effect.forEach(chunks, insert, { discard: true })))
    write.wire.push(yield* elapsed(send("bare PUT", bare.url, { method: "PUT", body: content })))
    written.push({ digest: sha256(content), hashes: hashed.value })
  }
  const afterWrites = yield* usage

  const read = { api: [] as Array<number>, db: [] as Array<number>, wire: [] as Array<number> }
  for (let i = 0; i < repeats; i++) {
    const file = yield* timed(send(`GET ${fileUrl(i)}`, fileUrl(i), { headers: auth }))
    if (!sha256(file.value).equals(written[i]!.digest)) {
      return yield* Effect.die(new Error(`file ${i} read back ${file.value.length} bytes, not the ones written`))
    }
    read.api.push(file.ms)
    const rows = yield* timed(query("SELECT data FROM bench_chunks WHERE hash = ANY ($1)", [written[i]!.hashes]))
    if (rows.value.rowCount !== written[i]!.hashes.length) {
      return yield* Effect.die(new Error(`the floor read ${rows.value.rowCount} chunks`))
    }
    read.db.push(rows.ms)
    const wire = yield* timed(send("bare GET", bare.url))
    if (wire.value.length !== bytes) return yield* Effect.die(new Error(`bare GET answered ${wire.value.length} bytes`))
    read.wire.push(wire.ms)
  }
  const afterReads = yield* usage

  /** What a fork asks of PostgreSQL, without the node: the new volume and its rows, rolled back. */
  const copyRows = (source: string) =>
    Effect.all([
      query("BEGIN"),
      query("INSERT INTO volumes (id, tenant_id, forked_from) VALUES ('vol_floor', $1, $2)", [tenantId, source]),
      query(
        `INSERT INTO volume_files (volume_id, path, version, size, content_type, chunks, updated_at, by)
         SELECT 'vol_floor', path, version, size, content_type, chunks, updated_at, by
         FROM volume_files WHERE volume_id = $1`,
        [source]
      ),
      query("ROLLBACK")
    ])

  // 2. Forks of a volume of many files, small and large: a fork copies rows, so its time should not follow bytes.
  const forkFigures = (fileKiB: number) =>
    Effect.gen(function*() {
      const source = (yield* api.post("/v1/volumes", { token, json: { name: `fork-${fileKiB}` } })).body.id as string
      const size = fileKiB * 1024
      const contents = Crypto.randomBytes(forkFiles * size)
      const fillMs = yield* elapsed(Effect.forEach(
        Array.from({ length: forkFiles }, (_, n) => n),
        (n) =>
          send(`PUT file${n}`, `${node.rest}/v1/volumes/${source}/file?path=dir${n % 10}/file${n}.bin`, {
            method: "PUT",
            body: contents.subarray(n * size, (n + 1) * size),
            headers: { ...auth, "content-type": "application/octet-stream" }
          }),
        { concurrency, discard: true }
      ))
      const fork: Array<number> = []
      const remove: Array<number> = []
      const roundTrip: Array<number> = []
      const rowCopy: Array<number> = []
      for (let i = 0; i < forks; i++) {
        const made = yield* timed(api.post(`/v1/volumes/${source}/fork`, { token, json: {} }))
        if (made.value.status !== 201 || made.value.body.files !== forkFiles) {
          return yield* Effect.die(new Error(`fork answered ${made.value.status}: ${made.value.text}`))
        }
        fork.push(made.ms)
        remove.push(yield* elapsed(api.delete(`/v1/volumes/${made.value.body.id}`, { token })))
        roundTrip.push(yield* elapsed(api.get(`/v1/volumes/${source}`, { token })))
        rowCopy.push(yield* elapsed(copyRows(source)))
      }
      return {
        fileKiB,
        volumeMiB: round((forkFiles * size) / MiB),
        fill: { seconds: round(fillMs / 1000, 2), filesPerSecond: round(forkFiles / (fillMs / 1000)) },
        forkMs: { median: round(median(fork)), best: round(Math.min(...fork)) },
        removeMs: { median: round(median(remove)) },
        floorRoundTripMs: { median: round(median(roundTrip)) },
        floorRowCopyMs: { median: round(median(rowCopy)) }
      }
    })
  const small = yield* forkFigures(smallKiB)
  const large = yield* forkFigures(largeKiB)

  const rate = (ms: ReadonlyArray<number>) => ({
    median: round(fileMiB / (median(ms) / 1000)),
    best: round(fileMiB / (Math.min(...ms) / 1000))
  })
  const figures = {
    fileMiB,
    repeats,
    writeMiBps: { api: rate(write.api), db: rate(write.db), wire: rate(write.wire), sha256: rate(hashing) },
    readMiBps: { api: rate(read.api), db: rate(read.db), wire: rate(read.wire) },
    // The node is idle while the floors run, so its CPU time over each loop is that of its transfers.
    node: {
      before,
      afterWrites,
      afterReads,
      writes: { cpuSeconds: round(afterWrites.cpu - before.cpu, 2), wallSeconds: round(sum(write.api) / 1000, 2) },
      reads: { cpuSeconds: round(afterReads.cpu - afterWrites.cpu, 2), wallSeconds: round(sum(read.api) / 1000, 2) }
    },
    fork: { files: forkFiles, small, large },
    runSeconds: round((performance.now() - runStarted) / 1000)
  }

  const mibps = (figure: { median: number; best: number }) => `${figure.median} | ${figure.best}`
  const forkRow = (name: string, pick: (f: typeof small) => number) => `| ${name} | ${pick(small)} | ${pick(large)} |`
  yield* Console.log(
    [
      `| ${fileMiB} MiB file, ${repeats} times | MiB/s median | MiB/s best |`,
      "|---|---|---|",
      `| write: PUT /v1/volumes/{id}/file | ${mibps(figures.writeMiBps.api)} |`,
      `|   floor: INSERT of 1 MiB bytea rows, one per statement, pg | ${mibps(figures.writeMiBps.db)} |`,
      `|   floor: loopback PUT to a bare node:http server | ${mibps(figures.writeMiBps.wire)} |`,
      `|   SHA-256 of the chunks in this process | ${mibps(figures.writeMiBps.sha256)} |`,
      `| read: GET /v1/volumes/{id}/file | ${mibps(figures.readMiBps.api)} |`,
      `|   floor: one SELECT of the 1 MiB bytea rows, pg | ${mibps(figures.readMiBps.db)} |`,
      `|   floor: loopback GET from a bare node:http server | ${mibps(figures.readMiBps.wire)} |`,
      "",
      "| the node | RSS MiB | peak RSS MiB | its CPU time over the loop (s) | the API transfers' wall time (s) |",
      "|---|---|---|---|---|",
      `| before | ${before.rss} | ${before.peak} | | |`,
      `| after the writes | ${afterWrites.rss} | ${afterWrites.peak} | ${figures.node.writes.cpuSeconds} | ${figures.node.writes.wallSeconds} |`,
      `| after the reads | ${afterReads.rss} | ${afterReads.peak} | ${figures.node.reads.cpuSeconds} | ${figures.node.reads.wallSeconds} |`,
      "",
      `| volume of ${forkFiles} files | ${smallKiB} KiB each (${small.volumeMiB} MiB) | ${largeKiB} KiB each (${large.volumeMiB} MiB) |`,
      "|---|---|---|",
      forkRow(`writing them, ${concurrency} at once (s)`, (f) => f.fill.seconds),
      forkRow("  files/s", (f) => f.fill.filesPerSecond),
      forkRow(`fork, median of ${forks} (ms)`, (f) => f.forkMs.median),
      forkRow("fork, best (ms)", (f) => f.forkMs.best),
      forkRow("remove of the fork, median (ms)", (f) => f.removeMs.median),
      forkRow("  floor: GET /v1/volumes/{id}, median (ms)", (f) => f.floorRoundTripMs.median),
      forkRow("  floor: the fork's row copy straight on PostgreSQL, median (ms)", (f) => f.floorRowCopyMs.median),
      "",
      `ran in ${figures.runSeconds} s`
    ].join("\n")
  )
  yield* Console.log(JSON.stringify(figures))
})

program.pipe(Effect.scoped, NodeRuntime.runMain({ disablePrettyLogger: true }))
