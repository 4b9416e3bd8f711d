/** The console's first view: the tenant's agents, searched and paged, and a form to make one. */
import type { Agent, Model } from "@agent-runtime/domain"
import type { Schema } from "effect"
import { useLocation } from "preact-iso"
import { useEffect, useState } from "preact/hooks"
import { type AgentSummary, api, apiPage } from "../Api.ts"
import { ErrorNote, Field, formValue, Loading, Page, Table, Time, useAction, useLoad } from "../ui.tsx"

type ModelInfo = Schema.Schema.Encoded<typeof Model.Model>

const builtins: ReadonlyArray<[Agent.Builtin, string]> = [
  ["ask_user", "ask you questions and for approvals"],
  ["web_search", "search the web"],
  ["web_fetch", "read web pages"],
  ["schedule", "schedule its own prompts"],
  ["delegate", "hand work to other agents"]
]

const pageSize = 50

/** A performance mark: when the first view (this list) could be used. */
export const interactiveMark = "console:interactive"

export const Status = ({ agent }: { readonly agent: Pick<AgentSummary, "running" | "connected"> }) => (
  <span class="badges">
    <span class={`badge ${agent.running ? "badge-live" : ""}`}>{agent.running ? "Running" : "Idle"}</span>
    {agent.connected ? <span class="badge">Connected</span> : null}
  </span>
)

const NewAgent = ({ onCancel }: { readonly onCancel: () => void }) => {
  const models = useLoad(() => api<{ data: Array<ModelInfo> }>("/v1/models"), [])
  const action = useAction()
  const { route } = useLocation()
  return (
    <form
      class="card form"
      aria-label="New agent"
      onSubmit={async (event) => {
        event.preventDefault()
        const name = formValue(event, "name")
        const model = formValue(event, "model")
        const systemPrompt = formValue(event, "systemPrompt")
        const chosen = new FormData(event.currentTarget).getAll("builtins").map(String)
        const created = await action.run(() =>
          api<{ id: string }>("/v1/agents", {
            method: "POST",
            body: {
              ...(name === "" ? {} : { name }),
              ...(model === "" ? {} : { model }),
              ...(systemPrompt === "" ? {} : { systemPrompt }),
              ...(chosen.length === 0 ? {} : { builtins: chosen })
            }
          })
        )
        if (created !== undefined) route(`/console/agents/${encodeURIComponent(created.id)}`)
      }}
    >
      <h2>New agent</h2>
      <Field label="Name">
        <input name="name" maxLength={200} autoComplete="off" />
      </Field>
      <Field label="Model" hint="Models whose provider has no key are marked.">
        <select name="model">
          <option value="">The default model</option>
          {(models.data?.data ?? []).map((model) => (
            <option value={model.id}>{model.available ? model.id : `${model.id} (no key)`}</option>
          ))}
        </select>
      </Field>
      <Field label="System prompt">
        <textarea name="systemPrompt" rows={3} maxLength={32000} />
      </Field>
      <fieldset class="checks">
        <legend>It may</legend>
        {builtins.map(([name, label]) => (
          <label class="check">
            <input type="checkbox" name="builtins" value={name} />
            <span>
              {label} <span class="mono small muted">{name}</span>
            </span>
          </label>
        ))}
      </fieldset>
      <ErrorNote error={action.error} />
      <div class="actions">
        <button type="submit" disabled={action.busy}>Create agent</button>
        <button type="button" class="secondary" onClick={onCancel}>Cancel</button>
      </div>
    </form>
  )
}

export const Agents = () => {
  const [pages, setPages] = useState<Array<string>>([`/v1/agents?limit=${pageSize}`])
  const page = pages[pages.length - 1]!
  const listed = useLoad(() => apiPage<AgentSummary>(page), [page])
  const [search, setSearch] = useState("")
  const [creating, setCreating] = useState(false)
  // The first view is ready for the person once the list shows: marked for the browser test's measure.
  const shown = listed.data !== undefined
  useEffect(() => {
    if (shown && performance.getEntriesByName(interactiveMark).length === 0) performance.mark(interactiveMark)
  }, [shown])
  const words = search.trim().toLowerCase()
  const rows = (listed.data?.items ?? []).filter((agent) =>
    words === "" ||
    [agent.id, agent.name, agent.key ?? "", agent.model, agent.type].some((field) =>
      field.toLowerCase().includes(words)
    )
  )
  return (
    <Page
      title="Agents"
      actions={creating ? null : <button type="button" onClick={() => setCreating(true)}>New agent</button>}
    >
      {creating ? <NewAgent onCancel={() => setCreating(false)} /> : null}
      <div class="toolbar">
        <label class="search">
          <span class="visually-hidden">Search agents</span>
          <input
            type="search"
            placeholder="Search by name, id, key or model"
            value={search}
            onInput={(event) => setSearch(event.currentTarget.value)}
          />
        </label>
        <button type="button" class="secondary" onClick={listed.reload}>Refresh</button>
      </div>
      <ErrorNote error={listed.error} />
      {listed.data === undefined ? <Loading what="agents" /> : (
        <Table
          label="Agents"
          rows={rows}
          rowKey={(agent) => agent.id}
          empty={words === "" ? "No agents yet: make one with New agent." : "No agent on this page matches."}
          columns={[
            {
              label: "Name",
              render: (agent) => (
                <a href={`/console/agents/${encodeURIComponent(agent.id)}`}>
                  {agent.name}
                  {agent.name === agent.id ? null : <span class="muted mono small">{agent.id}</span>}
                </a>
              )
            },
            { label: "Status", render: (agent) => <Status agent={agent} /> },
            { label: "Model", render: (agent) => <span class="mono small">{agent.model}</span> },
            { label: "Type", render: (agent) => agent.type },
            { label: "Expires", render: (agent) => <Time at={agent.expiresAt} /> }
          ]}
        />
      )}
      <div class="pager">
        <button
          type="button"
          class="secondary"
          disabled={pages.length === 1}
          onClick={() => setPages(pages.slice(0, -1))}
        >
          Previous page
        </button>
        <span class="muted">Page {pages.length}</span>
        <button
          type="button"
          class="secondary"
          disabled={listed.data?.next === null || listed.data === undefined}
          onClick={() => listed.data?.next != null && setPages([...pages, listed.data.next])}
        >
          Next page
        </button>
      </div>
    </Page>
  )
}
