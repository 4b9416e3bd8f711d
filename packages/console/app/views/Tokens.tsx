/** API tokens: made here (the key shown once) and revoked. */
import { useState } from "preact/hooks"
import { api, path, type TokenCreated, type TokenInfo } from "../Api.ts"
import {
  ConfirmButton,
  ErrorNote,
  Field,
  formValue,
  Loading,
  Page,
  ShownOnce,
  Table,
  Time,
  useAction,
  useLoad
} from "../ui.tsx"

export const Tokens = () => {
  const tokens = useLoad(() => api<Array<TokenInfo>>("/v1/tokens"), [])
  const action = useAction()
  const [created, setCreated] = useState<TokenCreated | undefined>(undefined)
  return (
    <Page title="API tokens">
      <p class="muted">
        An API token acts for the whole account: keep it on your application's server, never in a browser or a
        repository. One per application makes revoking one easy.
      </p>
      <form
        class="card form inline"
        aria-label="New token"
        onSubmit={async (event) => {
          event.preventDefault()
          const form = event.currentTarget
          const name = formValue(event, "name")
          const made = await action.run(() => api<TokenCreated>("/v1/tokens", { method: "POST", body: { name } }))
          if (made !== undefined) {
            setCreated(made)
            form.reset()
            tokens.reload()
          }
        }}
      >
        <Field label="Name" hint="What uses it, to tell tokens apart.">
          <input name="name" required minLength={1} maxLength={80} autoComplete="off" />
        </Field>
        <button type="submit" disabled={action.busy}>Create token</button>
      </form>
      {created === undefined ? null : <ShownOnce label={`The token “${created.name}”.`} secret={created.token} />}
      <ErrorNote error={action.error ?? tokens.error} />
      {tokens.data === undefined ? <Loading what="tokens" /> : (
        <Table
          label="Tokens"
          rows={tokens.data}
          rowKey={(token) => token.id}
          empty="No tokens."
          columns={[
            { label: "Name", render: (token) => token.name },
            { label: "Starts with", render: (token) => <code>{token.prefix}…</code> },
            { label: "Created", render: (token) => <Time at={token.createdAt} /> },
            {
              label: "",
              class: "row-actions",
              render: (token) => (
                <ConfirmButton
                  confirm={`Revoke ${token.name}`}
                  onConfirm={() =>
                    action.run(() => api(path`/v1/tokens/${token.id}`, { method: "DELETE" })).then(tokens.reload)}
                >
                  Revoke
                </ConfirmButton>
              )
            }
          ]}
        />
      )}
    </Page>
  )
}
