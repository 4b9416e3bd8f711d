/**
 * A tool that needs a person before it can go on says so the way MCP
 * defines for URLs: it fails the call with the error code -32042 and
 * `data.elicitations`. The runtime takes mode `form` (with a
 * `requestedSchema`) the same way, records the input, and makes the call
 * again once it is answered, the answer in `_meta["agent-runtime/answer"]`.
 * (An application tool may also ask with camelRun's `input_required` result,
 * whose `elicitation/create` params are read here the same way.)
 */

/** MCP's "URL elicitation required" error code. */
export const inputRequiredCode = -32042

/** The `_meta` key under which a call made again carries the answer to what it asked. */
export const answerKey = "agent-runtime/answer"

/** What a call asks of a person: a form's fields, or a page to open. */
export interface Ask {
  readonly kind: "form" | "url"
  readonly message: string
  readonly detail: Record<string, unknown>
}

/** What the error's data asks (its first elicitation), if it is usable (see `elicitationAsk`). */
export const askOf = (data: unknown): Ask | undefined =>
  elicitationAsk((data as { readonly elicitations?: ReadonlyArray<unknown> } | null)?.elicitations?.[0])

/**
 * What one elicitation (`params` of MCP's `elicitation/create`) asks, if it is usable: a page on https (http
 * only on localhost) with its origin shown, or a form with a schema object.
 */
export const elicitationAsk = (elicitation: any): Ask | undefined => {
  const message = typeof elicitation?.message === "string" ? elicitation.message : undefined
  if (message === undefined) return undefined
  if (elicitation.mode === "url" && typeof elicitation.url === "string" && URL.canParse(elicitation.url)) {
    const url = new URL(elicitation.url)
    if (url.protocol !== "https:" && !(url.protocol === "http:" && url.hostname === "localhost")) return undefined
    return { kind: "url", message, detail: { url: url.href, origin: url.origin } }
  }
  const schema = elicitation.requestedSchema
  if (elicitation.mode === "form" && typeof schema === "object" && schema !== null && !Array.isArray(schema)) {
    return { kind: "form", message, detail: { requestedSchema: schema } }
  }
  return undefined
}

/** The words the model reads when a tool asked for input the runtime cannot show. */
export const unusable = "the tool asked for input the runtime cannot show (an https url, or a form with a schema)"
