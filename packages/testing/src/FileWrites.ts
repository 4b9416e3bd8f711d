/**
 * File writes in a fault workload. A scripted model step calls the agent's
 * file tools on its workspace with known contents (`calls`): `write` makes
 * `/workspace/faults/w<n>.txt` (its draft, version 1), and `edit`, in the
 * same step, turns the draft into the final text (version 2). Once the run
 * is over, `check` reads what became of each step from outside: the agents'
 * histories (where each call ran and what its result said) and their
 * workspaces (which files exist, at which version, holding what).
 *
 * Whatever moved or crashed: a write ran at most once (a resumed turn never
 * writes again what it journaled, so no file is past version 2, and each
 * version holds its own text); a result the history holds agrees with the
 * file; no file exists without its call in that agent's history; and a call
 * whose outcome is unknown is counted as uncertain, with what its file
 * shows, rather than passing as missing.
 */
import { Effect } from "effect"
import type * as FakeUpstream from "./FakeUpstream.ts"
import type * as Http from "./Http.ts"

/** Where step `n` writes, in the workspace volume and as the agent sees it. */
export const pathOf = (n: number) => `faults/w${n}.txt`
const shown = (n: number) => `/workspace/${pathOf(n)}`
const draftOf = (n: number) => `file ${n}: draft\n`
const finalOf = (n: number) => `file ${n}: final\n`
const callId = /^f([we])_(\d+)$/

/**
 * The calls of step `n` (see the module), to put in a scripted model step (with other calls, or alone):
 * whichever agent takes the step makes them.
 */
export const calls = (n: number): ReadonlyArray<FakeUpstream.ToolCall> => [
  { id: `fw_${n}`, name: "write", arguments: { path: shown(n), content: draftOf(n) } },
  { id: `fe_${n}`, name: "edit", arguments: { path: shown(n), old_string: "draft", new_string: "final" } }
]

/** One entry of an agent's history, as `GET /v1/agents/{id}/history` gives it. */
export interface Entry {
  readonly message: {
    readonly role: string
    readonly content?: unknown
    readonly toolCallId?: string
    readonly isError?: boolean
  }
}

/** What a call's result said: done, refused (it did not write), or unknown (the runtime lost its answer). */
type Said = "ok" | "refused" | "unknown"

/** What became of the scripted steps. */
export interface Report {
  /** Steps scripted. */
  readonly scripted: number
  /** Steps whose calls ran (are in a history). */
  readonly ran: number
  /** Of those, with both results known: the file is exactly what they say. */
  readonly confirmed: number
  /** Of those, with a result unknown: each step and what its file shows. */
  readonly uncertain: ReadonlyArray<string>
  /** Steps whose calls ran but whose write was refused (nothing written). */
  readonly refused: number
  /** Steps whose calls are in no history (the model's answer holding them was cut off, or never asked for). */
  readonly notRun: number
  /** Broken promises: each one a line saying which step and what was wrong. */
  readonly problems: ReadonlyArray<string>
}

const saidOf = (message: Entry["message"]): Said => {
  if (message.isError !== true) return "ok"
  return JSON.stringify(message.content).includes("is unknown") ? "unknown" : "refused"
}

/** A file's state: absent, or its version and text. */
type File = { readonly version: number; readonly text: string } | undefined

const describe = (file: File) => file === undefined ? "absent" : `version ${file.version}`

/**
 * Reads every agent's workspace and checks the scripted steps `scripted`
 * against `histories` (every agent's whole history). `get` is a GET
 * through any node that is up.
 */
export const check = (options: {
  readonly scripted: ReadonlyArray<number>
  readonly histories: ReadonlyMap<string, ReadonlyArray<Entry>>
  readonly get: (path: string) => Effect.Effect<Http.Response, unknown>
}) =>
  Effect.gen(function*() {
    const problems: Array<string> = []
    // Where each step's calls ran, and what their results said.
    const ran = new Map<number, { agentId: string; write?: Said; edit?: Said }>()
    for (const [agentId, entries] of options.histories) {
      for (const { message } of entries) {
        if (message.role !== "toolResult" || message.toolCallId === undefined) continue
        const match = callId.exec(message.toolCallId)
        if (match === null) continue
        const n = Number(match[2])
        const step = ran.get(n) ?? { agentId }
        if (step.agentId !== agentId) problems.push(`step ${n}: its calls ran on ${step.agentId} and on ${agentId}`)
        const said = saidOf(message)
        if (match[1] === "w") {
          if (step.write !== undefined) problems.push(`step ${n}: its write was answered twice on ${agentId}`)
          step.write = said
        } else {
          if (step.edit !== undefined) problems.push(`step ${n}: its edit was answered twice on ${agentId}`)
          step.edit = said
        }
        ran.set(n, step)
      }
    }
    // Every agent's files under faults/.
    const files = new Map<number, { agentId: string; file: NonNullable<File> }>()
    for (const agentId of options.histories.keys()) {
      const detail = (yield* options.get(`/v1/agents/${agentId}`)).body
      const volumeId = (detail.mounts as Array<{ path: string; volumeId: string }>)
        .find((mount) => mount.path === "/workspace")?.volumeId
      if (volumeId === undefined) continue
      let after: string | null = null
      do {
        const page: any = (yield* options.get(
          `/v1/volumes/${volumeId}/files?prefix=faults/&limit=100${
            after === null ? "" : `&after=${encodeURIComponent(after)}`
          }`
        )).body
        for (const listed of page.files as Array<{ path: string; version: number }>) {
          const n = Number(/^faults\/w(\d+)\.txt$/.exec(listed.path)?.[1])
          const text = (yield* options.get(`/v1/volumes/${volumeId}/file?path=${encodeURIComponent(listed.path)}`))
            .text
          const other = files.get(n)
          if (other !== undefined) {
            problems.push(`step ${n}: its file is in ${other.agentId}'s and ${agentId}'s workspace`)
          }
          files.set(n, { agentId, file: { version: listed.version, text } })
        }
        after = page.next ?? null
      } while (after !== null)
    }

    let confirmed = 0
    let refused = 0
    let notRun = 0
    const uncertain: Array<string> = []
    for (const n of options.scripted) {
      const step = ran.get(n)
      const found = files.get(n)
      if (step === undefined) {
        notRun++
        if (found !== undefined) {
          problems.push(`step ${n}: its file is in ${found.agentId}'s workspace, its calls in no history`)
        }
        continue
      }
      if (found !== undefined && found.agentId !== step.agentId) {
        problems.push(`step ${n}: ran on ${step.agentId}, its file is in ${found.agentId}'s workspace`)
        continue
      }
      const file = found?.file
      // Each version holds its own text: a write done twice leaves a second draft, or an edit of one (version 3).
      if (
        file !== undefined && !(file.version === 1 && file.text === draftOf(n)) &&
        !(file.version === 2 && file.text === finalOf(n))
      ) {
        problems.push(`step ${n} on ${step.agentId}: version ${file.version} holds ${JSON.stringify(file.text)}`)
        continue
      }
      const { edit, write } = step
      // What the file may be, given what the results said.
      const allowed: Array<File> = write === "ok"
        ? edit === "ok" ? [{ version: 2, text: finalOf(n) }] : edit === "unknown"
          ? [{ version: 1, text: draftOf(n) }, { version: 2, text: finalOf(n) }]
          : [{ version: 1, text: draftOf(n) }]
        : write === "unknown"
        ? edit === "ok" ? [{ version: 2, text: finalOf(n) }] : edit === "unknown"
          ? [undefined, { version: 1, text: draftOf(n) }, { version: 2, text: finalOf(n) }]
          : [undefined, { version: 1, text: draftOf(n) }]
        : [undefined]
      if (!allowed.some((state) => state?.version === file?.version)) {
        problems.push(
          `step ${n} on ${step.agentId}: write said ${write ?? "nothing"}, edit ${edit ?? "nothing"}, the file is ${
            describe(file)
          }`
        )
        continue
      }
      if (write === "unknown" || edit === "unknown") {
        uncertain.push(`step ${n} (write ${write}, edit ${edit}): ${describe(file)}`)
      } else if (write === "ok") confirmed++
      else refused++
    }
    return {
      scripted: options.scripted.length,
      ran: ran.size,
      confirmed,
      uncertain,
      refused,
      notRun,
      problems
    } satisfies Report
  })

/** The report in one line, for a suite's summary. */
export const summary = (report: Report) =>
  `file steps ${report.scripted}: ran ${report.ran} (confirmed ${report.confirmed}, uncertain ${report.uncertain.length}` +
  `${report.uncertain.length === 0 ? "" : ` [${report.uncertain.join("; ")}]`}, refused ${report.refused}), ` +
  `not run ${report.notRun}`
