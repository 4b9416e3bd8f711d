/**
 * Small shapes shared by many resources: times, pages of lists, bounded strings.
 */
import { Effect, Schema } from "effect"
import { NotFound } from "./ApiError.ts"

/** Unix seconds. */
export const Timestamp = Schema.Number.annotations({ description: "Unix seconds" })

/** Query of a paged list: `limit` items after the opaque cursor `after`. */
export const PageParams = Schema.Struct({
  limit: Schema.optional(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)).annotations({
      description: "items per page, 1 to 100 (default 50)",
      jsonSchema: { type: "integer", minimum: 1, maximum: 100, description: "items per page, 1 to 100 (default 50)" }
    })
  ),
  after: Schema.optional(Schema.String.annotations({ description: "the `next` cursor of the previous page" }))
})
export type PageParams = typeof PageParams.Type

export const defaultPageSize = 50

/** How many rows a page query fetches: one more than the page holds, to know whether a next page exists. */
export const pageQueryLimit = (params: PageParams) => (params.limit ?? defaultPageSize) + 1

/** A page of rows fetched with `pageQueryLimit`; `next` is the last id shown when more follow. */
export const toPage = <A extends { readonly id: string }>(rows: ReadonlyArray<A>, params: PageParams) => {
  const size = params.limit ?? defaultPageSize
  const data = rows.slice(0, size)
  return { data, next: rows.length > size ? data[data.length - 1]!.id : null }
}

/**
 * The wrapper of every list response: `data` in a stable order and `next`,
 * the cursor of the following page, or null on the last one.
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
