/**
 * Small shapes shared by many resources: times, pages of lists, bounded strings.
 */
import { Effect, Schema } from "effect"
import { NotFound } from "./ApiError.ts"

/** Unix seconds. */
export const Timestamp = Schema.Number.annotations({ description: "Unix seconds" })

/** Paging, said once in the OpenAPI document: on `limit`, which every paged list takes. */
const pagingDescription = "items per page, 1 to 1000 (default 1000). When more items follow, the answer has a " +
  'header Link: <path?after=<last id>&limit=<n>>; rel="next" (RFC 8288), the next page\'s URL'

/** The most items a page holds, and how many a list without `limit` answers. */
export const maxPageSize = 1000

/** Query of a paged list: `limit` items after the cursor `after` (the last id of the previous page). */
export const PageParams = Schema.Struct({
  limit: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, maxPageSize)).annotations({
      description: pagingDescription,
      jsonSchema: { type: "integer", minimum: 1, maximum: maxPageSize, description: pagingDescription }
    })
  ),
  after: Schema.optional(
    Schema.String.annotations({ description: "the id of the previous page's last item; the Link header names it" })
  )
})
export type PageParams = typeof PageParams.Type

/** How many rows a page query fetches: one more than the page holds, to know whether a next page exists. */
export const pageQueryLimit = (params: PageParams) => (params.limit ?? maxPageSize) + 1

/**
 * A page of rows fetched with `pageQueryLimit`; `next` is the last id shown when more follow. The HTTP
 * handlers answer `data` and put `next` in the Link header.
 */
export const toPage = <A extends { readonly id: string }>(rows: ReadonlyArray<A>, params: PageParams) => {
  const size = params.limit ?? maxPageSize
  const data = rows.slice(0, size)
  return { data, next: rows.length > size ? data[data.length - 1]!.id : null }
}

/** A page of a list as services answer it: the items, and the cursor of the next page or null on the last. */
export interface Page<A> {
  readonly data: ReadonlyArray<A>
  readonly next: string | null
}

/**
 * The `{data, next}` wrapper, kept only where a wire format of its own asks for it (the gateway's model
 * discovery, `GET /v1/models`); every other list answers a bare array.
 */
export const Page = <A, I, R>(item: Schema.Schema<A, I, R>) =>
  Schema.Struct({
    data: Schema.Array(item),
    next: Schema.NullOr(Schema.String).annotations({
      description: "pass as `after` for the next page; null at the end"
    })
  })

/** A JSON object with string values. */
export const StringMap = Schema.Record({ key: Schema.String, value: Schema.String })

/** The answer of delete endpoints. */
export const Deleted = Schema.Struct({ id: Schema.String, deleted: Schema.Literal(true) }).annotations({
  identifier: "Deleted"
})

/**
 * The answer of a delete, from the rows its `DELETE ... RETURNING` removed:
 * none removed means there was nothing by that id.
 */
export const deleted = (id: string, missing: string) => (rows: ReadonlyArray<unknown>) =>
  rows.length === 0
    ? Effect.fail(new NotFound({ error: missing }))
    : Effect.succeed({ id, deleted: true as const })

/** Success status of endpoints that create a resource. */
export const created = { status: 201 } as const
