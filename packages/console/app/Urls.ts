/** Addresses from the agent or the service, kept only when they are http(s): never `javascript:` or `data:`. */
export const httpUrl = (href: unknown): URL | undefined => {
  if (typeof href !== "string") return undefined
  try {
    const url = new URL(href, location.href)
    return url.protocol === "https:" || url.protocol === "http:" ? url : undefined
  } catch {
    return undefined
  }
}
