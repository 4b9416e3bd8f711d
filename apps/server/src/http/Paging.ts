/**
 * Paged lists on the wire. Clients such as camelRun's read every list as a
 * bare JSON array, so the page's items are the whole body and the cursor
 * travels beside it: when more items follow, an RFC 8288 header
 * `Link: </v1/...?after=<last id>&limit=<n>>; rel="next"` names the next
 * page, the same request with `after` moved on.
 */
import { Common } from "@agent-runtime/domain"
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"

/** The `Link` value of the page after `next`: the request's path and query (origin-relative), `after` and `limit` set. */
export const nextLink = (requestUrl: string, next: string, limit: number): string => {
  // Only the path and query are kept; the base just lets URL parse an origin-relative request line.
  const url = new URL(requestUrl, "http://localhost")
  url.searchParams.set("after", next)
  url.searchParams.set("limit", String(limit))
  return `<${url.pathname}${url.search}>; rel="next"`
}

/** A handler's answer for a page: its items, and the next page's `Link` header when there is one. */
export const answer = <A>(
  page: Common.Page<A>,
  params: Common.PageParams
): Effect.Effect<ReadonlyArray<A>, never, HttpServerRequest.HttpServerRequest> => {
  const next = page.next
  if (next === null) return Effect.succeed(page.data)
  return Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    Effect.as(
      HttpApp.appendPreResponseHandler((_, response) =>
        Effect.succeed(
          HttpServerResponse.setHeader(
            response,
            "link",
            nextLink(request.url, next, params.limit ?? Common.maxPageSize)
          )
        )
      ),
      page.data
    ))
}
