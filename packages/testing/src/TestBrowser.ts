/**
 * A browser for tests of sign-in flows: it follows redirects itself, keeps
 * each host's cookies (as browsers do: by host, whatever the port; expired
 * ones removed), sends forms, and stops where a test says (a client's
 * redirect URI, which nothing serves).
 */
export interface Visit {
  readonly url: string
  readonly status: number
  readonly headers: Headers
  readonly body: string
}

export interface TestBrowser {
  /** Goes to `url`, following redirects until a page answers or the next address starts with `stopAt`. */
  readonly open: (url: string, options?: { readonly stopAt?: string }) => Promise<Visit>
  /** Posts a form from a page of `origin`, then follows redirects as `open` does. */
  readonly submit: (
    url: string,
    fields: Record<string, string>,
    options?: { readonly stopAt?: string; readonly origin?: string }
  ) => Promise<Visit>
  /** The cookies kept for a host. */
  readonly cookies: (host: string) => ReadonlyMap<string, string>
}

export const make = (): TestBrowser => {
  const jar = new Map<string, Map<string, string>>()
  const cookiesOf = (host: string) => {
    let kept = jar.get(host)
    if (kept === undefined) jar.set(host, kept = new Map())
    return kept
  }

  const keep = (url: URL, headers: Headers) => {
    for (const line of headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(";")
      const index = pair!.indexOf("=")
      const name = pair!.slice(0, index).trim()
      const value = pair!.slice(index + 1).trim()
      const expired = attributes.some((attribute) => {
        const [key, val] = attribute.trim().split("=")
        return (key!.toLowerCase() === "max-age" && Number(val) <= 0) ||
          (key!.toLowerCase() === "expires" && new Date(val!).getTime() < Date.now())
      })
      if (expired) cookiesOf(url.hostname).delete(name)
      else cookiesOf(url.hostname).set(name, value)
    }
  }

  const request = async (
    url: string,
    init: { readonly method: string; readonly body?: string; readonly headers?: Record<string, string> },
    stopAt: string | undefined
  ): Promise<Visit> => {
    let current = new URL(url)
    let method = init.method
    let body = init.body
    let extra = init.headers ?? {}
    for (let hops = 0; hops < 30; hops++) {
      const cookie = [...cookiesOf(current.hostname)].map(([name, value]) => `${name}=${value}`).join("; ")
      const response = await fetch(current, {
        method,
        redirect: "manual",
        headers: { ...extra, ...(cookie === "" ? {} : { cookie }) },
        ...(body === undefined ? {} : { body })
      })
      keep(current, response.headers)
      const location = response.headers.get("location")
      if (response.status >= 300 && response.status < 400 && location !== null) {
        const next = new URL(location, current)
        if (stopAt !== undefined && next.href.startsWith(stopAt)) {
          return { url: next.href, status: response.status, headers: response.headers, body: await response.text() }
        }
        current = next
        method = "GET"
        body = undefined
        extra = {}
        continue
      }
      return { url: current.href, status: response.status, headers: response.headers, body: await response.text() }
    }
    throw new Error(`too many redirects from ${url}`)
  }

  return {
    open: (url, options) => request(url, { method: "GET" }, options?.stopAt),
    submit: (url, fields, options) =>
      request(url, {
        method: "POST",
        body: new URLSearchParams(fields).toString(),
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          origin: options?.origin ?? new URL(url).origin
        }
      }, options?.stopAt),
    cookies: (host) => cookiesOf(host)
  }
}
