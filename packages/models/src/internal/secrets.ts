import type { Provider } from "@agent-runtime/domain"

export const last4 = (secret: string) => secret.slice(-4)

/** Where a secret lives, bound into its ciphertext so it opens only there. */
export const context = {
  tenantKey: (tenantId: string, provider: string) => `tenant:${tenantId}/key:${provider}`,
  platformKey: (provider: string) => `platform/key:${provider}`,
  scopeKey: (tenantId: string, scope: string, provider: string) => `tenant:${tenantId}/scope:${scope}/key:${provider}`,
  scopeHeaders: (tenantId: string, scope: string, provider: string) =>
    `tenant:${tenantId}/scope:${scope}/headers:${provider}`,
  customKey: (tenantId: string, scope: string, name: string) =>
    `tenant:${tenantId}/scope:${scope}/provider:${name}/key`,
  customHeaders: (tenantId: string, scope: string, name: string) =>
    `tenant:${tenantId}/scope:${scope}/provider:${name}/headers`
}

/** Header names of a sealed header map, for display: never the values. */
export const headerNames = (headers: Record<string, string>) => Object.keys(headers).sort()

export type KeySource = Provider.KeySource
