import { Common } from "@agent-runtime/domain"

/** Fetches one row more than asked, to know whether a next page exists. */
export const limitOf = (params: Common.PageParams) => (params.limit ?? Common.defaultPageSize) + 1

export const toPage = <A extends { readonly id: string }>(rows: ReadonlyArray<A>, params: Common.PageParams) => {
  const size = params.limit ?? Common.defaultPageSize
  const data = rows.slice(0, size)
  return { data, next: rows.length > size ? data[data.length - 1]!.id : null }
}
