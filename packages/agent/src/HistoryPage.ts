/**
 * Where a page of history starts. Pages are whole turns of about `limit`
 * messages, oldest first, at most about `maxBytes`, unless one turn alone is
 * larger: then the page starts inside it and says `split`.
 */

/** A message as the walk needs it: its size, and whether it opens a turn. */
export interface Sized {
  readonly bytes: number
  readonly turnStart: boolean
}

export const defaultLimit = 50
export const defaultMaxBytes = 4 * 1024 * 1024

/**
 * The index into `rows` where the page ending at the last row starts. The
 * walk goes back whole messages until the page is full, then on to the start
 * of the turn it is in.
 */
export const start = (
  rows: ReadonlyArray<Sized>,
  options: { readonly limit?: number | undefined; readonly maxBytes?: number | undefined } = {}
): { readonly start: number; readonly split: boolean } => {
  const limit = options.limit ?? defaultLimit
  const maxBytes = options.maxBytes ?? defaultMaxBytes
  let start = rows.length
  let bytes = 0
  while (start > 0) {
    const row = rows[start - 1]!
    const full = rows.length - start >= limit
    if (full && rows[start]?.turnStart) break
    if (bytes + row.bytes > maxBytes && start < rows.length) {
      return { start, split: !(rows[start]?.turnStart ?? true) }
    }
    bytes += row.bytes
    start--
  }
  return { start, split: false }
}
