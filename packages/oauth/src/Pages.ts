/**
 * The pages a person sees while signing in and allowing a coding agent:
 * plain HTML with one inline style sheet (allowed by its hash), no script,
 * every value escaped.
 */
import * as Crypto from "node:crypto"

const style = `body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}` +
  `main{max-width:28rem;margin:10vh auto;padding:2rem;background:#fff;border-radius:12px;` +
  `box-shadow:0 1px 3px rgba(0,0,0,.12)}h1{font-size:1.3rem;margin:0 0 1rem}` +
  `.muted{color:#57606a;font-size:.9rem}code{word-break:break-all}` +
  `button,.button{display:block;width:100%;box-sizing:border-box;margin:.5rem 0;padding:.65rem;` +
  `font:inherit;border-radius:8px;border:1px solid #8c959f;background:#fff;color:#1b1f24;` +
  `text-align:center;text-decoration:none;cursor:pointer}` +
  `.primary{background:#0b57d0;border-color:#0b57d0;color:#fff}` +
  `label{display:block;margin:1rem 0 .25rem}input{width:100%;box-sizing:border-box;padding:.6rem;` +
  `font:inherit;border:1px solid #8c959f;border-radius:8px}.error{color:#b3261e}` +
  `:focus-visible{outline:3px solid #0b57d0;outline-offset:2px}`

const styleHash = Crypto.createHash("sha256").update(style).digest("base64")

/**
 * Headers every page is served with: nothing but its own style runs, and no site may frame it. The referrer
 * stays on this site: with `no-referrer` browsers send `Origin: null` with the pages' own forms, which the
 * check against forged posts must refuse.
 */
export const headers: Readonly<Record<string, string>> = {
  "content-type": "text/html; charset=utf-8",
  "content-security-policy": `default-src 'none'; style-src 'sha256-${styleHash}'; base-uri 'none'; ` +
    "frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  "cache-control": "no-store"
}

export const escape = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!)

const page = (title: string, body: string) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8">` +
  `<meta name="viewport" content="width=device-width,initial-scale=1"><title>${escape(title)}</title>` +
  `<style>${style}</style></head><body><main>${body}</main></body></html>`

export const error = (message: string) =>
  page("Cannot continue", `<h1>Cannot continue</h1><p class="error">${escape(message)}</p>`)

export interface ConsentView {
  readonly action: string
  readonly csrf: string
  readonly clientName: string
  readonly destination: string
  readonly tenant: string
  readonly login: string | null
}

export const consent = (view: ConsentView) =>
  page(
    "Allow access",
    `<h1>Allow <q>${escape(view.clientName)}</q> to act as your account?</h1>` +
      `<p class="muted">The name is what the application calls itself, unverified: judge it by where it sends ` +
      `the authorization.</p>` +
      `<p>It sends the authorization to <code>${escape(view.destination)}</code>.</p>` +
      `<p>It could then do everything your account can through the API (create, prompt and delete agents, ` +
      `set keys and webhooks) except create API tokens, until you revoke it.</p>` +
      `<p class="muted">Signed in${view.login === null ? "" : ` as ${escape(view.login)}`} to ` +
      `${escape(view.tenant)}.</p>` +
      `<form method="post" action="${escape(view.action)}">` +
      `<input type="hidden" name="csrf" value="${escape(view.csrf)}">` +
      `<button class="primary" type="submit" name="decision" value="allow">Allow</button>` +
      `<button type="submit" name="decision" value="deny">Deny</button></form>`
  )

export interface SignInView {
  readonly next: string
  readonly provider: { readonly href: string; readonly label: string } | null
  readonly error: string | null
}

export const signIn = (view: SignInView) =>
  page(
    "Sign in",
    `<h1>Sign in to Agent Runtime</h1>` +
      (view.error === null ? "" : `<p class="error" role="alert">${escape(view.error)}</p>`) +
      (view.provider === null
        ? ""
        : `<a class="button primary" href="${escape(view.provider.href)}">Sign in with ${
          escape(view.provider.label)
        }</a>`) +
      `<form method="post" action="/sign-in/key"><input type="hidden" name="next" value="${escape(view.next)}">` +
      `<label for="key">Or with an API key of your account</label>` +
      `<input id="key" name="key" type="password" autocomplete="off" required placeholder="art_...">` +
      `<button type="submit">Sign in with the key</button></form>`
  )

export const signedIn = (view: { readonly tenant: string; readonly login: string | null }) =>
  page(
    "Signed in",
    `<h1>Signed in</h1><p>You are signed in${view.login === null ? "" : ` as ${escape(view.login)}`} to ` +
      `${escape(view.tenant)}. Coding agents you connect act as this account.</p>` +
      `<form method="post" action="/sign-out"><button type="submit">Sign out</button></form>`
  )
