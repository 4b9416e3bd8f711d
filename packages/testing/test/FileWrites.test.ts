/**
 * The fault suites' file-write checks on made-up histories and workspaces:
 * what they accept, what they count as uncertain, and each broken promise
 * they name.
 */
import * as FileWrites from "@agent-runtime/testing/FileWrites"
import type * as Http from "@agent-runtime/testing/Http"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

const ok = { message: { role: "toolResult", isError: false, content: [{ type: "text", text: "done" }] } }
const unknown = {
  message: { role: "toolResult", isError: true, content: [{ type: "text", text: "whether it took effect is unknown" }] }
}
const refused = { message: { role: "toolResult", isError: true, content: [{ type: "text", text: "not found" }] } }
const result = (said: typeof ok, toolCallId: string): FileWrites.Entry => ({
  message: { ...said.message, toolCallId }
})

/** A GET over agents' workspaces: `files[agentId]` maps a step to its file (version and text). */
const world =
  (files: Record<string, Record<number, { version: number; text: string }>>) =>
  (path: string): Effect.Effect<Http.Response> => {
    const respond = (body: unknown, text = JSON.stringify(body)): Http.Response => ({
      status: 200,
      headers: new Headers(),
      text,
      body
    })
    const agent = /^\/v1\/agents\/([^/]+)$/.exec(path)
    if (agent) return Effect.succeed(respond({ mounts: [{ path: "/workspace", volumeId: `vol_${agent[1]}` }] }))
    const listing = /^\/v1\/volumes\/vol_([^/]+)\/files/.exec(path)
    if (listing) {
      const data = Object.entries(files[listing[1]!] ?? {}).map(([n, file]) => ({
        path: FileWrites.pathOf(Number(n)),
        version: file.version
      }))
      return Effect.succeed(respond({ files: data }))
    }
    const read = /^\/v1\/volumes\/vol_([^/]+)\/file\?path=faults%2Fw(\d+)\.txt$/.exec(path)
    if (read) return Effect.succeed(respond(undefined, files[read[1]!]![Number(read[2])]!.text))
    return Effect.die(new Error(`unexpected ${path}`))
  }

const draft = (n: number) => ({ version: 1, text: `file ${n}: draft\n` })
const final = (n: number) => ({ version: 2, text: `file ${n}: final\n` })

describe("FileWrites.check", () => {
  it.effect("confirms steps whose files agree with their results; counts unknown ones; steps that never ran", () =>
    Effect.gen(function*() {
      const report = yield* FileWrites.check({
        scripted: [1, 2, 3, 4, 5],
        histories: new Map([
          ["a", [result(ok, "fw_1"), result(ok, "fe_1"), result(unknown, "fw_2"), result(refused, "fe_2")]],
          ["b", [result(unknown, "fw_3"), result(ok, "fe_3"), result(refused, "fw_4"), result(refused, "fe_4")]]
        ]),
        get: world({ a: { 1: final(1) }, b: { 3: final(3) } })
      })
      expect(report).toMatchObject({ scripted: 5, ran: 4, confirmed: 1, refused: 1, notRun: 1, problems: [] })
      expect(report.uncertain).toEqual([
        "step 2 (write unknown, edit refused): absent",
        "step 3 (write unknown, edit ok): version 2"
      ])
    }))

  it.effect("names a write made twice, a written file missing, and a file without its calls", () =>
    Effect.gen(function*() {
      const report = yield* FileWrites.check({
        scripted: [1, 2, 3, 4],
        histories: new Map([
          ["a", [result(ok, "fw_1"), result(ok, "fe_1"), result(ok, "fw_2"), result(ok, "fe_2")]],
          ["b", [result(ok, "fw_3"), result(refused, "fe_3")]]
        ]),
        get: world({
          // Step 1 written again after its edit; step 2's file is gone; step 3's draft edited after all; step 4 never
          // ran, yet its file is there.
          a: { 1: { version: 3, text: "file 1: draft\n" } },
          b: { 3: final(3), 4: draft(4) }
        })
      })
      expect(report.problems).toEqual([
        `step 1 on a: version 3 holds "file 1: draft\\n"`,
        "step 2 on a: write said ok, edit ok, the file is absent",
        "step 3 on b: write said ok, edit refused, the file is version 2",
        "step 4: its file is in b's workspace, its calls in no history"
      ])
    }))
})
