/**
 * Providers and keys: which providers have a key (last four characters
 * only), setting and removing the account's own, and key scopes. Keys are
 * never shown back.
 */
import { useState } from "preact/hooks"
import { api, type KeyScope, path, type ProviderInfo } from "../Api.ts"
import { ConfirmButton, ErrorNote, Loading, Page, Table, Time, useAction, useLoad } from "../ui.tsx"

const KeyForm = ({ onDone, provider }: { readonly provider: string; readonly onDone: () => void }) => {
  const action = useAction()
  const [verification, setVerification] = useState<string | undefined>(undefined)
  return (
    <form
      class="form inline"
      aria-label={`Key for ${provider}`}
      onSubmit={async (event) => {
        event.preventDefault()
        const form = event.currentTarget
        const apiKey = String(new FormData(form).get("apiKey") ?? "").trim()
        const set = await action.run(() =>
          api<{ verification: { status: string; detail?: string } }>(path`/v1/keys/${provider}`, {
            method: "PUT",
            body: { apiKey }
          })
        )
        if (set !== undefined) {
          form.reset()
          setVerification(`${set.verification.status}${set.verification.detail ? `: ${set.verification.detail}` : ""}`)
          onDone()
        }
      }}
    >
      <label class="field">
        <span class="visually-hidden">API key for {provider}</span>
        <input name="apiKey" type="password" required autoComplete="off" placeholder="New key" />
      </label>
      <button type="submit" disabled={action.busy}>Set</button>
      {verification === undefined ? null : <span role="status" class="small">Key {verification}</span>}
      <ErrorNote error={action.error} />
    </form>
  )
}

export const Models = () => {
  const providers = useLoad(() => api<Array<ProviderInfo>>("/v1/providers"), [])
  const scopes = useLoad(() => api<Array<KeyScope>>("/v1/key-scopes"), [])
  const action = useAction()
  return (
    <Page title="Models and keys">
      <ErrorNote error={action.error ?? providers.error} />
      {providers.data === undefined ? <Loading what="providers" /> : (
        <Table
          label="Providers"
          rows={providers.data}
          rowKey={(provider) => provider.id}
          empty="No providers."
          columns={[
            { label: "Provider", render: (provider) => <span class="mono">{provider.id}</span> },
            { label: "Kind", render: (provider) => provider.kind ?? "model" },
            { label: "Models", class: "number", render: (provider) => provider.models },
            {
              label: "Key",
              render: (provider) =>
                provider.key === null
                  ? <span class="muted">none</span>
                  : (
                    <span>
                      {provider.key.source}
                      {provider.key.last4 === undefined ? "" : ` …${provider.key.last4}`}
                    </span>
                  )
            },
            {
              label: "",
              class: "row-actions",
              render: (provider) =>
                provider.apiKey === false ? <span class="muted small">{provider.requires}</span> : (
                  <div class="actions">
                    <KeyForm provider={provider.id} onDone={providers.reload} />
                    {provider.key?.source === "tenant"
                      ? (
                        <ConfirmButton
                          confirm="Remove the key"
                          onConfirm={() =>
                            action.run(() => api(path`/v1/keys/${provider.id}`, { method: "DELETE" })).then(
                              providers.reload
                            )}
                        >
                          Remove
                        </ConfirmButton>
                      )
                      : null}
                  </div>
                )
            }
          ]}
        />
      )}
      <section aria-labelledby="scopes-title">
        <h2 id="scopes-title">Key scopes</h2>
        <p class="muted">Keys kept apart for some agents (an agent's keyScope), tried before the account's own.</p>
        <ErrorNote error={scopes.error} />
        {scopes.data === undefined ? <Loading what="key scopes" /> : (
          <Table
            label="Key scopes"
            rows={scopes.data}
            rowKey={(scope) => scope.scope}
            empty="No key scopes."
            columns={[
              { label: "Scope", render: (scope) => <span class="mono">{scope.scope}</span> },
              {
                label: "Providers",
                render: (scope) => scope.providers.map((entry) => entry.provider).join(", ")
              },
              {
                label: "Last set",
                render: (scope) => <Time at={Math.max(0, ...scope.providers.map((entry) => entry.setAt))} />
              },
              {
                label: "",
                class: "row-actions",
                render: (scope) => (
                  <ConfirmButton
                    confirm={`Delete ${scope.scope}`}
                    onConfirm={() =>
                      action.run(() => api(path`/v1/key-scopes/${scope.scope}`, { method: "DELETE" })).then(
                        scopes.reload
                      )}
                  >
                    Delete
                  </ConfirmButton>
                )
              }
            ]}
          />
        )}
      </section>
    </Page>
  )
}
