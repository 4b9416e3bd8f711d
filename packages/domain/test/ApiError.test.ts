import { describe, expect, it } from "@effect/vitest"
import * as ApiError from "../src/ApiError.ts"

/** Every error class the module exports with a `Wire` schema: the errors endpoints may declare. */
const declared = (Object.entries(ApiError) as Array<[string, unknown]>).filter(
  (entry): entry is [string, new(props: { error: string }) => unknown] =>
    typeof entry[1] === "function" && "Wire" in entry[1]
)

describe("ApiError", () => {
  it("every error with a Wire schema is an ApiError, so the server answers it with its own status", () => {
    // The server answers anything isApiError does not recognise as 500 INTERNAL.
    expect(declared.length).toBeGreaterThan(15)
    const unrecognised = declared
      .filter(([, error]) => !ApiError.isApiError(new error({ error: "e" })))
      .map(([name]) => name)
    expect(unrecognised).toEqual([])
  })
})
