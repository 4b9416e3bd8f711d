/**
 * Plain HTTP calls for black-box tests: status, headers and parsed body.
 */
import { Effect } from "effect"

export interface Response {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  // Tests read fields of any answer; the schema is what the test asserts.
  readonly body: any
}

export interface RequestOptions {
  readonly token?: string
  readonly json?: unknown
  readonly body?: string | Uint8Array
  readonly headers?: Record<string, string>
}

export const request = (base: string, method: string, path: string, options: RequestOptions = {}) =>
  Effect.promise(async (): Promise<Response> => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    let body = options.body
    if (options.json !== undefined) {
      headers["content-type"] ??= "application/json"
      body = JSON.stringify(options.json)
    }
    const response = await fetch(base + path, { method, headers, ...(body === undefined ? {} : { body }) })
    const text = await response.text()
    let parsed: unknown = undefined
    try {
      parsed = text === "" ? undefined : JSON.parse(text)
    } catch {
      parsed = undefined
    }
    return { status: response.status, headers: response.headers, text, body: parsed }
  })

/** A client bound to one base URL. */
export const client = (base: string) => ({
  get: (path: string, options?: RequestOptions) => request(base, "GET", path, options),
  post: (path: string, options?: RequestOptions) => request(base, "POST", path, options),
  put: (path: string, options?: RequestOptions) => request(base, "PUT", path, options),
  patch: (path: string, options?: RequestOptions) => request(base, "PATCH", path, options),
  delete: (path: string, options?: RequestOptions) => request(base, "DELETE", path, options)
})
