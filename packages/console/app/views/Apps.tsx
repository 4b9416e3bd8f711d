/** Connected apps: the coding agents people allowed at /mcp with OAuth, and revoking them. */
import { api, type OAuthGrant, path } from "../Api.ts"
import { ConfirmButton, ErrorNote, Loading, Page, Table, Time, useAction, useLoad } from "../ui.tsx"

export const Apps = () => {
  const grants = useLoad(() => api<Array<OAuthGrant>>("/v1/oauth/grants"), [])
  const action = useAction()
  return (
    <Page title="Connected apps">
      <p class="muted">
        Applications someone allowed to act for this account through the MCP server. Revoking one stops its tokens at
        once, on every node.
      </p>
      <ErrorNote error={action.error ?? grants.error} />
      {grants.data === undefined ? <Loading what="connected apps" /> : (
        <Table
          label="Connected apps"
          rows={grants.data}
          rowKey={(grant) => grant.id}
          empty="No application is connected."
          columns={[
            { label: "Application", render: (grant) => grant.clientName },
            { label: "Allowed by", render: (grant) => grant.login ?? <span class="muted">unknown</span> },
            { label: "Scope", render: (grant) => <span class="mono small">{grant.scope}</span> },
            { label: "Allowed", render: (grant) => <Time at={grant.createdAt} /> },
            { label: "Last used", render: (grant) => <Time at={grant.usedAt} /> },
            {
              label: "",
              class: "row-actions",
              render: (grant) => (
                <ConfirmButton
                  confirm={`Revoke ${grant.clientName}`}
                  onConfirm={() =>
                    action.run(() => api(path`/v1/oauth/grants/${grant.id}`, { method: "DELETE" })).then(grants.reload)}
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
