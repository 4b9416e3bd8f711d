/**
 * The journal's notification channels: how a statement that records, settles
 * or lets go of work tells every node as it commits (PostgreSQL NOTIFY, sent
 * by the statement itself, so a notification is never sent for a change that
 * did not commit, nor a change committed without one). Arrivals (queued
 * requests) and Settlements (settled ones) listen through
 * `internal/probedChannel`; Wakeups listens for released agents directly, its
 * periodic sweep standing behind what it misses.
 */
import type { Run } from "@agent-runtime/domain"
import type { SqlClient } from "@effect/sql"

/** The PostgreSQL channel on which a released agent with unfinished work is announced (payload: its id). */
export const releasedChannel = "agent_runtime_released"

/**
 * The PostgreSQL channel on which the statement completing a request announces it (payload:
 * `settledAnnouncement`; see Settlements).
 */
export const settledChannel = "agent_runtime_settled"

/**
 * How much of a request id a settled announcement carries, in code points: a notification holds under 8000
 * bytes, and a request id may be longer. Ids alike that far only wake each other's waiters, which read again.
 */
export const settledIdLength = 200

/** The payload announcing a settled request: the agent id and the start of the request id, a space between. */
export const settledAnnouncement = (agentId: string, requestId: string) =>
  `${agentId} ${requestId.length <= settledIdLength ? requestId : [...requestId].slice(0, settledIdLength).join("")}`

/**
 * The PostgreSQL channel on which the statement recording a request announces it to the agent's owner (see
 * Arrivals). Payload: JSON `{request, whileRunning}`, the row as `to_jsonb` writes it; a row too large for a
 * notification is announced by `{agentId, seq, whileRunning}` and read (`requestAt`).
 */
export const queuedChannel = "agent_runtime_queued"

/** How a recorded request is announced on `queuedChannel`; a prompt sent to steer says so. */
export interface Announce {
  readonly whileRunning?: Run.WhileRunning | undefined
}

/** A notification's payload must stay under 8000 bytes. */
const announceLimit = 7_900

/**
 * The CTE `announced`, which announces each row of the statement's `inserted` on `queuedChannel`; the
 * statement must read it (`announcedAll`) for it to run.
 */
export const announcing = (sql: SqlClient.SqlClient, announce: Announce | undefined) => {
  if (announce === undefined) return sql``
  const whileRunning = announce.whileRunning ?? null
  // The short form names the row by its seq: a request id may be longer than a notification.
  return sql`, announced AS (
      SELECT pg_notify(${queuedChannel}, CASE WHEN octet_length(p) <= ${announceLimit} THEN p ELSE short END)
      FROM (SELECT json_build_object('request', to_jsonb(i), 'whileRunning', ${whileRunning}::text)::text AS p,
          json_build_object('agentId', i.agent_id, 'seq', i.seq, 'whileRunning', ${whileRunning}::text)::text
            AS short
        FROM inserted i) x)`
}

/** Reads `announced` (see `announcing`), so it runs: true for every row. */
export const announcedAll = (sql: SqlClient.SqlClient, announce: Announce | undefined) =>
  announce === undefined ? sql`true` : sql`(SELECT count(*) FROM announced) >= 0`

/** For the RETURNING of a statement settling requests: announces each settled row on `settledChannel`. */
export const settledNotify = (sql: SqlClient.SqlClient) =>
  sql`pg_notify(${settledChannel}, agent_id || ' ' || left(id, ${settledIdLength}))`
