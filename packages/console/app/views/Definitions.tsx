/** Definitions: reusable agent settings, made from JSON (as the API takes them) and removed. */
import { api, type DefinitionInfo, path } from "../Api.ts"
import { ConfirmButton, ErrorNote, Loading, Page, pretty, Table, Time, useAction, useLoad } from "../ui.tsx"

const example = pretty({ name: "support", model: "anthropic/claude-sonnet-4-5", systemPrompt: "You help customers." })

export const Definitions = () => {
  const definitions = useLoad(() => api<Array<DefinitionInfo>>("/v1/definitions"), [])
  const action = useAction()
  return (
    <Page title="Definitions">
      <form
        class="card form"
        aria-label="New definition"
        onSubmit={async (event) => {
          event.preventDefault()
          const form = event.currentTarget
          const text = String(new FormData(form).get("definition") ?? "")
          const made = await action.run(async () => {
            let body: unknown
            try {
              body = JSON.parse(text)
            } catch {
              throw new Error("The definition is not valid JSON.")
            }
            return api("/v1/definitions", { method: "POST", body })
          })
          if (made !== undefined) {
            form.reset()
            definitions.reload()
          }
        }}
      >
        <label class="field">
          <span class="field-label">New definition (JSON, as POST /v1/definitions takes it)</span>
          <textarea name="definition" rows={6} class="mono" defaultValue={example} />
        </label>
        <button type="submit" disabled={action.busy}>Create definition</button>
      </form>
      <ErrorNote error={action.error ?? definitions.error} />
      {definitions.data === undefined ? <Loading what="definitions" /> : (
        <Table
          label="Definitions"
          rows={definitions.data}
          rowKey={(definition) => definition.id}
          empty="No definitions."
          columns={[
            {
              label: "Name",
              render: (definition) => (
                <details>
                  <summary>{definition.name}</summary>
                  <pre>{pretty(definition)}</pre>
                </details>
              )
            },
            { label: "Revision", class: "number", render: (definition) => definition.revision },
            { label: "Model", render: (definition) => <span class="mono small">{definition.model ?? "default"}</span> },
            { label: "Updated", render: (definition) => <Time at={definition.updatedAt} /> },
            {
              label: "",
              class: "row-actions",
              render: (definition) => (
                <ConfirmButton
                  confirm={`Delete ${definition.name}`}
                  onConfirm={() =>
                    action.run(() => api(path`/v1/definitions/${definition.id}`, { method: "DELETE" })).then(
                      definitions.reload
                    )}
                >
                  Delete
                </ConfirmButton>
              )
            }
          ]}
        />
      )}
    </Page>
  )
}
