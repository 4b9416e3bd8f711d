/**
 * `notify` mounts: an agent is prompted when someone else (the tenant's
 * API, an upload, another agent) changes files under such a mount. The
 * changes committed through a node are gathered there for a moment, so a
 * burst of writes becomes one prompt per agent, queued like any other and
 * keyed by what it reports (a retry sends no second one). A notice is best
 * effort: a node lost in that moment loses it; the files themselves are safe.
 */
import { Run } from "@agent-runtime/domain"
import { FilePath, Volumes } from "@agent-runtime/files"
import { Duration, Effect, Either, Layer, Queue, Stream } from "effect"
import * as Crypto from "node:crypto"
import { Agents } from "./Agents.ts"
import { AgentStore } from "./AgentStore.ts"
import * as Workspace from "./Workspace.ts"

/** How long changes are gathered before the agents are told. */
export const gatherFor = Duration.seconds(1)
const maxBatch = 256

/** One agent's notice: the changed files as it sees them. */
const describe = (change: Volumes.Change, shown: string) =>
  `- ${shown} (${change.version === null ? "removed" : `version ${change.version}`}${
    change.by === null ? "" : `, by ${change.by}`
  })`

export const layer: Layer.Layer<never, never, AgentStore | Volumes.Volumes | Agents> = Layer.scopedDiscard(
  Effect.gen(function*() {
    const volumes = yield* Volumes.Volumes
    const store = yield* AgentStore
    const agents = yield* Agents

    /** The lines each agent is told, for the changes of one volume. */
    const noticesOf = (tenantId: string, volumeId: string, changes: ReadonlyArray<Volumes.Change>) =>
      Effect.map(store.notifiedOf(tenantId, volumeId), (mounting) =>
        mounting.map((agent) => {
          const lines = (agent.config.mounts ?? []).flatMap((mount) => {
            if (mount.volumeId !== volumeId || mount.notify !== true) return []
            const under = mount.subpath === undefined
              ? ""
              : Either.getOrElse(FilePath.parseDirectory(mount.subpath), () => "")
            return changes.flatMap((change) =>
              change.by === `agent:${agent.id}` || !change.path.startsWith(under)
                ? []
                : [describe(change, Workspace.shownPath(mount, change.path))]
            )
          })
          return { agentId: agent.id, lines }
        }))

    const tell = (tenantId: string, agentId: string, lines: ReadonlyArray<string>) => {
      const text = `[runtime] Files under your mounts were changed by others:\n${lines.join("\n")}`
      const requestId = `notify_${
        Crypto.createHash("sha256").update(`${agentId}\n${text}`).digest("base64url").slice(0, 24)
      }`
      return agents.prompt(
        tenantId,
        agentId,
        new Run.PromptInput({ text, requestId, actor: "runtime", allowDisconnected: true })
      ).pipe(
        Effect.catchAllCause((cause) =>
          Effect.logWarning("an agent could not be told of changed files").pipe(
            Effect.annotateLogs({ agentId, cause })
          )
        )
      )
    }

    const notify = (batch: ReadonlyArray<Volumes.Change>) => {
      const byVolume = new Map<string, Array<Volumes.Change>>()
      for (const change of batch) {
        const key = `${change.tenantId}\n${change.volumeId}`
        byVolume.set(key, [...(byVolume.get(key) ?? []), change])
      }
      return Effect.forEach(byVolume.values(), (changes) =>
        Effect.gen(function*() {
          const { tenantId, volumeId } = changes[0]!
          for (const { agentId, lines } of yield* noticesOf(tenantId, volumeId, changes)) {
            if (lines.length > 0) yield* tell(tenantId, agentId, lines)
          }
        }).pipe(
          Effect.catchAllCause((cause) => Effect.logWarning("telling agents of changed files failed", cause))
        ), { discard: true })
    }

    // The moment opens with the first change of a burst (Stream.groupedWithin's clock runs on its own, and
    // would send the first change after a quiet spell alone).
    const pending = yield* Queue.unbounded<Volumes.Change>()
    yield* (yield* volumes.changes).pipe(Stream.runForEach((change) => Queue.offer(pending, change)), Effect.forkScoped)
    yield* Effect.gen(function*() {
      const first = yield* Queue.take(pending)
      yield* Effect.sleep(gatherFor)
      yield* notify([first, ...yield* Queue.takeUpTo(pending, maxBatch - 1)])
    }).pipe(Effect.forever, Effect.forkScoped)
  })
)
