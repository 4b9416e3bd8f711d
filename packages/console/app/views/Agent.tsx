/**
 * One agent: its conversation, live (text streams in, tool calls with their
 * arguments and results, thinking folded away, files), a prompt box, its
 * pending inputs with answer forms, its requests and their outcomes, its
 * spend, and configure, fork, abort and delete.
 */
import { useLocation, useRoute } from "preact-iso"
import { useEffect, useReducer, useRef, useState } from "preact/hooks"
import { type AgentDetail, api, ApiError, type HistoryPage, path, type PendingInput, type Usage } from "../Api.ts"
import { follow } from "../Stream.ts"
import { type Entry, Transcript } from "../Transcript.ts"
import {
  ConfirmButton,
  ErrorNote,
  Field,
  formValue,
  Loading,
  Page,
  pretty,
  Table,
  Time,
  usd,
  useAction,
  useLoad
} from "../ui.tsx"
import { Status } from "./Agents.tsx"
import { InputCard } from "./Inputs.tsx"

const EntryView = ({ entry }: { readonly entry: Entry }) => {
  switch (entry.kind) {
    case "user":
      return (
        <li class="message message-user">
          <span class="who">{entry.who}</span>
          <div class="text">{entry.text}</div>
        </li>
      )
    case "assistant":
      return (
        <li class="message message-assistant" aria-busy={entry.streaming ? "true" : undefined}>
          <span class="who">Agent</span>
          {entry.thinking === "" ? null : (
            <details class="thinking">
              <summary>Thinking</summary>
              <div class="text">{entry.thinking}</div>
            </details>
          )}
          <div class="text">{entry.text}</div>
          {entry.error === undefined ? null : <p class="error">{entry.error}</p>}
        </li>
      )
    case "tool":
      return (
        <li class={`tool ${entry.isError ? "tool-error" : ""}`}>
          Tool <code>{entry.name}</code> <span class="badge">{entry.status}</span>
          {entry.args === undefined ? null : (
            <details>
              <summary>Arguments</summary>
              <pre>{pretty(entry.args)}</pre>
            </details>
          )}
          {entry.result === undefined || entry.result === "" ? null : (
            <details>
              <summary>{entry.isError ? "Error" : "Result"}</summary>
              <pre>{entry.result}</pre>
            </details>
          )}
        </li>
      )
    case "notice":
      return (
        <li class={`notice notice-${entry.tone}`}>
          {entry.href === undefined ?
            entry.text :
            <a href={entry.href} target="_blank" rel="noopener noreferrer">{entry.text}</a>}
        </li>
      )
  }
}

/** The conversation, followed live; `onChange` when the stream says a run ended or inputs changed. */
const useConversation = (agentId: string, onChange: () => void) => {
  // The latest callback, without following the stream again when it changes.
  const changed = useRef(onChange)
  changed.current = onChange
  const transcript = useRef(new Transcript())
  const [, redraw] = useReducer((count: number) => count + 1, 0)
  const [status, setStatus] = useState<string>("connecting")
  const [error, setError] = useState<unknown>(undefined)
  /** Where the next older page of history starts, while there is one. */
  const [older, setOlder] = useState<number | null>(null)
  useEffect(() => {
    const aborter = new AbortController()
    transcript.current = new Transcript()
    const catchUp = async () => {
      const detail = await api<AgentDetail>(path`/v1/agents/${agentId}`, { signal: aborter.signal })
      const history = await api<HistoryPage>(path`/v1/agents/${agentId}/history`, { signal: aborter.signal })
      transcript.current.clear()
      for (const entry of history.entries) transcript.current.message(entry.index, entry.message)
      setOlder(history.next)
      redraw(0)
      return detail.cursor
    }
    catchUp().then((cursor) =>
      follow(agentId, cursor, {
        onFrame: (frame) => {
          if (frame.type === "snapshot") {
            catchUp().catch(setError)
            changed.current()
            return
          }
          if (transcript.current.frame(frame)) changed.current()
          redraw(0)
        },
        onStatus: setStatus,
        onError: setError
      }, aborter.signal), (failure) => aborter.signal.aborted || setError(failure))
    return () => aborter.abort()
  }, [agentId])
  const loadEarlier = async () => {
    if (older === null) return
    const page = await api<HistoryPage>(`${path`/v1/agents/${agentId}/history`}?before=${older}`).catch((failure) => {
      setError(failure)
      return undefined
    })
    if (page === undefined) return
    transcript.current.earlier(page.entries)
    setOlder(page.next)
  }
  return { entries: [...transcript.current.entries.values()], status, error, older, loadEarlier }
}

const Conversation = ({ agentId, onChange }: { readonly agentId: string; readonly onChange: () => void }) => {
  const { entries, error, loadEarlier, older, status } = useConversation(agentId, onChange)
  const end = useRef<HTMLDivElement>(null)
  useEffect(() => {
    end.current?.scrollIntoView({ block: "nearest" })
  }, [entries.length, entries[entries.length - 1]])
  return (
    <section class="card conversation" aria-labelledby="conversation-title">
      <header class="card-header">
        <h2 id="conversation-title">Conversation</h2>
        <span class={`badge ${status === "live" ? "badge-live" : ""}`} role="status">
          {status === "live" ? "Live" : status === "connecting" ? "Connecting…" : "Reconnecting…"}
        </span>
      </header>
      <ErrorNote error={error} />
      {older === null ? null : <button type="button" class="secondary" onClick={loadEarlier}>Earlier messages</button>}
      {entries.length === 0 ? <p class="muted">Nothing said yet.</p> : null}
      <ol class="transcript" aria-live="polite">
        {entries.map((entry) => <EntryView entry={entry} />)}
      </ol>
      <div ref={end} />
    </section>
  )
}

const PromptBox = ({ agentId }: { readonly agentId: string }) => {
  const action = useAction()
  const [text, setText] = useState("")
  return (
    <form
      class="prompt"
      aria-label="Prompt"
      onSubmit={async (event) => {
        event.preventDefault()
        if (text.trim() === "") return
        const sent = await action.run(() =>
          api(path`/v1/agents/${agentId}/prompt`, { method: "POST", body: { text } }).then(() => true)
        )
        if (sent) setText("")
      }}
    >
      <label class="visually-hidden" for="prompt-text">Message to the agent</label>
      <textarea
        id="prompt-text"
        rows={2}
        placeholder="Message the agent"
        value={text}
        onInput={(event) => setText(event.currentTarget.value)}
        onKeyDown={(event) => {
          if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) event.currentTarget.form?.requestSubmit()
        }}
      />
      <button type="submit" disabled={action.busy || text.trim() === ""}>Send</button>
      <ErrorNote error={action.error} />
    </form>
  )
}

const Inputs = (
  { agentId, inputs }: {
    readonly agentId: string
    readonly inputs: ReturnType<typeof useLoad<Array<PendingInput>>>
  }
) => (
  <section class="inputs" aria-labelledby="inputs-title">
    <h2 id="inputs-title">Waiting for you</h2>
    <ErrorNote error={inputs.error} />
    {inputs.data === undefined
      ? <Loading what="inputs" />
      : inputs.data.length === 0
      ? <p class="muted">Nothing is waiting for an answer.</p>
      : inputs.data.map((input) => (
        <InputCard key={input.id} agentId={agentId} input={input} onAnswered={inputs.reload} />
      ))}
  </section>
)

const Configure = ({ agent, onDone }: { readonly agent: AgentDetail; readonly onDone: () => void }) => {
  const action = useAction()
  return (
    <form
      class="form"
      aria-label="Configure"
      onSubmit={async (event) => {
        event.preventDefault()
        const model = formValue(event, "model")
        const systemPrompt = formValue(event, "systemPrompt")
        const thinkingLevel = formValue(event, "thinkingLevel")
        const body = {
          ...(model !== "" && model !== agent.model ? { model } : {}),
          ...(systemPrompt !== "" && systemPrompt !== agent.systemPrompt ? { systemPrompt } : {}),
          ...(thinkingLevel === "" ? {} : { thinkingLevel })
        }
        if (Object.keys(body).length === 0) return
        const done = await action.run(() =>
          api(path`/v1/agents/${agent.id}/configure`, { method: "POST", body }).then(() => true)
        )
        if (done) onDone()
      }}
    >
      <Field label="Model">
        <input name="model" defaultValue={agent.model} autoComplete="off" />
      </Field>
      <Field label="System prompt">
        <textarea name="systemPrompt" rows={4} defaultValue={agent.systemPrompt} maxLength={32000} />
      </Field>
      <Field label="Thinking level">
        <select name="thinkingLevel">
          <option value="">Unchanged</option>
          {["off", "minimal", "low", "medium", "high", "xhigh", "max"].map((level) => <option>{level}</option>)}
        </select>
      </Field>
      <ErrorNote error={action.error} />
      <button type="submit" disabled={action.busy}>Save</button>
    </form>
  )
}

/** The agent's spend; `runs` (its requests so far) reads it again when one is added. */
const Spend = ({ agentId, runs }: { readonly agentId: string; readonly runs: number }) => {
  const usage = useLoad(() => {
    const since = Math.floor(Date.now() / 1000) - 30 * 86400
    return api<Usage>(`/v1/usage?agentId=${encodeURIComponent(agentId)}&since=${since}`)
  }, [agentId, runs])
  if (usage.data === undefined) {
    return usage.error === undefined
      ? <Loading what="spend" />
      : <ErrorNote error={usage.error} />
  }
  const totals = usage.data.totals
  return (
    <p>
      {usd(totals.cost)} over the last 30 days: {totals.responses} {totals.responses === 1 ? "response" : "responses"},
      {" "}
      {totals.input.toLocaleString()} tokens in, {totals.output.toLocaleString()} out.
    </p>
  )
}

export const AgentView = () => {
  const { params } = useRoute()
  const agentId = params.id!
  const { route } = useLocation()
  const agent = useLoad(() => api<AgentDetail>(path`/v1/agents/${agentId}`), [agentId])
  const inputs = useLoad(
    () => api<Array<PendingInput>>(path`/v1/agents/${agentId}/inputs?state=pending`),
    [agentId]
  )
  const action = useAction()
  // A run ended or an input changed: what the side panel shows may have too.
  const changed = () => {
    inputs.reload()
    agent.reload()
  }
  if (agent.error instanceof ApiError && agent.error.status === 404) {
    return (
      <Page title="Agent not found">
        <p>
          No live agent has this id. <a href="/console">Back to the agents</a>.
        </p>
      </Page>
    )
  }
  const detail = agent.data
  return (
    <Page
      title={detail?.name ?? agentId}
      actions={detail === undefined ? null : (
        <div class="actions">
          <Status agent={detail} />
          <button
            type="button"
            class="secondary"
            disabled={action.busy}
            onClick={() =>
              action.run(() => api(path`/v1/agents/${agentId}/abort`, { method: "POST", body: {} })).then(agent.reload)}
          >
            Abort
          </button>
          <button
            type="button"
            class="secondary"
            disabled={action.busy}
            onClick={async () => {
              const forked = await action.run(() =>
                api<{ id: string }>(path`/v1/agents/${agentId}/fork`, {
                  method: "POST",
                  body: { name: `${detail.name} (fork)` }
                })
              )
              if (forked !== undefined) route(`/console/agents/${encodeURIComponent(forked.id)}`)
            }}
          >
            Fork
          </button>
          <ConfirmButton
            confirm="Delete for good"
            onConfirm={async () => {
              const deleted = await action.run(() => api(path`/v1/agents/${agentId}`, { method: "DELETE" }))
              if (deleted !== undefined) route("/console")
            }}
          >
            Delete
          </ConfirmButton>
        </div>
      )}
    >
      <ErrorNote error={action.error ?? agent.error} />
      <div class="agent-layout">
        <div class="agent-main">
          <Conversation agentId={agentId} onChange={changed} />
          <PromptBox agentId={agentId} />
        </div>
        <aside class="agent-side">
          <Inputs agentId={agentId} inputs={inputs} />
          {detail === undefined ? <Loading what="the agent" /> : (
            <>
              <section class="card" aria-labelledby="about-title">
                <h2 id="about-title">About</h2>
                <dl class="facts">
                  <dt>Id</dt>
                  <dd class="mono small">{detail.id}</dd>
                  <dt>Model</dt>
                  <dd class="mono small">{detail.model}</dd>
                  <dt>Key</dt>
                  <dd>{detail.key ?? <span class="muted">none</span>}</dd>
                  <dt>Builtins</dt>
                  <dd>{detail.builtins.length === 0 ? <span class="muted">none</span> : detail.builtins.join(", ")}</dd>
                  <dt>Tools</dt>
                  <dd>
                    {detail.tools.length === 0
                      ? <span class="muted">none</span>
                      : detail.tools.map((tool) => tool.name).join(", ")}
                  </dd>
                  <dt>Expires</dt>
                  <dd>
                    <Time at={detail.expiresAt} />
                  </dd>
                </dl>
                <h3>Spend</h3>
                <Spend agentId={agentId} runs={detail.requests.length} />
              </section>
              <details class="card">
                <summary>Configure</summary>
                <Configure agent={detail} onDone={agent.reload} />
              </details>
              <details class="card">
                <summary>Requests ({detail.requests.length})</summary>
                <Table
                  label="Requests"
                  rows={[...detail.requests].reverse()}
                  rowKey={(request) => request.id}
                  empty="No requests yet."
                  columns={[
                    { label: "Method", render: (request) => request.method },
                    { label: "State", render: (request) => <span class="badge">{request.state}</span> },
                    { label: "Started", render: (request) => <Time at={request.startedAt} /> },
                    {
                      label: "Outcome",
                      render: (request) =>
                        request.code ?? (request.prompt === undefined ? "" : request.prompt.slice(0, 80))
                    }
                  ]}
                />
              </details>
            </>
          )}
        </aside>
      </div>
    </Page>
  )
}
