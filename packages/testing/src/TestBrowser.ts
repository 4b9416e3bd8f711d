/**
 * A browser for tests of sign-in flows: it follows redirects itself, keeps
 * each host's cookies (as browsers do: by host, whatever the port, and by
 * path, sending a cookie only to its path and below it as RFC 6265 says;
 * expired ones removed), sends forms, and stops where a test says (a
 * client's redirect URI, which nothing serves).
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
  /**
   * The cookies a request to `path` on a host would carry, by name (with `path` left out: every cookie kept
   * for the host, whatever its path).
   */
  readonly cookies: (host: string, path?: string) => ReadonlyMap<string, string>
}

interface Kept {
  readonly name: string
  readonly value: string
  readonly path: string
}

/** RFC 6265 5.1.4: the cookie path `cookiePath` matches a request to `requestPath`. */
export const pathMatches = (cookiePath: string, requestPath: string) =>
  requestPath === cookiePath ||
  (requestPath.startsWith(cookiePath) && (cookiePath.endsWith("/") || requestPath[cookiePath.length] === "/"))

/** RFC 6265 5.1.4: the path a cookie without a usable `Path` gets, the request's up to its last `/`. */
const defaultPath = (requestPath: string) => {
  const last = requestPath.lastIndexOf("/")
  return last <= 0 ? "/" : requestPath.slice(0, last)
}

export const make = (): TestBrowser => {
  // By host, then by name and path: one cookie name may be kept for several paths.
  const jar = new Map<string, Map<string, Kept>>()
  const cookiesOf = (host: string) => {
    let kept = jar.get(host)
    if (kept === undefined) jar.set(host, kept = new Map())
    return kept
  }
  /** What a request to `path` carries, longer paths first (RFC 6265 5.4). */
  const sentTo = (host: string, path: string) =>
    [...cookiesOf(host).values()]
      .filter((cookie) => pathMatches(cookie.path, path))
      .sort((a, b) => b.path.length - a.path.length)

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
      const pathAttribute = attributes.map((attribute) => attribute.trim())
        .findLast((attribute) => attribute.toLowerCase().startsWith("path="))
        ?.slice("path=".length)
      const path = pathAttribute?.startsWith("/") ? pathAttribute : defaultPath(url.pathname)
      const key = `${name};${path}`
      if (expired) cookiesOf(url.hostname).delete(key)
      else cookiesOf(url.hostname).set(key, { name, value, path })
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
      const cookie = sentTo(current.hostname, current.pathname).map(({ name, value }) => `${name}=${value}`).join("; ")
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
    cookies: (host, path) => {
      const kept = path === undefined
        ? [...cookiesOf(host).values()].sort((a, b) => b.path.length - a.path.length)
        : sentTo(host, path)
      // The first of a name wins, as a server reading the Cookie header takes the first.
      const byName = new Map<string, string>()
      for (const { name, value } of kept) if (!byName.has(name)) byName.set(name, value)
      return byName
    }
  }
}
