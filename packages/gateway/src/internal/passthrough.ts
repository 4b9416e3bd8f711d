/**
 * Same protocol in and out: the client's body goes upstream as it came,
 * with only the model id replaced (and, for a chat stream, usage asked
 * for), and the upstream's bytes come back as they are, frame by frame.
 * Fields the gateway does not know (cache_control, metadata, betas) thus
 * survive. Usage is read from the frames on the way through.
 */
import type { Credentials } from "@agent-runtime/models"
import type * as Http from "node:http"
import type { Dispatcher } from "undici"
import * as Canonical from "../Canonical.ts"
import type { Codec } from "./codec.ts"
import * as Sse from "./sse.ts"
import type { TokenUsage } from "./tokenUsage.ts"
import * as Upstream from "./upstream.ts"

/** Client headers that belong to the protocol and go upstream unchanged. */
const forwardedHeaders = ["anthropic-version", "anthropic-beta", "openai-beta"]

/** Upstream answer headers the client gets back. */
const answerHeaders = ["content-type", "retry-after", "request-id", "x-request-id", "anthropic-organization-id"]

const pick = (headers: Record<string, string | Array<string> | undefined>, status: number) => {
  const out: Record<string, string> = {}
  for (const name of answerHeaders) {
    const value = headers[name]
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(", ") : value
  }
  // 429 and 503 always say when to come back.
  if ((status === 429 || status === 503) && out["retry-after"] === undefined) out["retry-after"] = "1"
  return out
}

export interface Options {
  readonly dispatcher: Dispatcher
  readonly codec: Codec
  readonly target: Credentials.Target
  readonly body: Canonical.Json
  readonly incoming: Http.IncomingHttpHeaders
  readonly res: Http.ServerResponse
  /** Upstream path when it is not the codec's own (count_tokens). */
  readonly path?: string
  /** Called once with the usage of a finished answer. */
  readonly onUsage: (usage: TokenUsage) => void
}

/** Sends the request and relays the answer; resolves when the client has it all (or left). */
export const forward = async (options: Options): Promise<void> => {
  const { body, codec, res, target } = options
  const stream = body.stream === true
  const upstreamBody: Record<string, unknown> = { ...body, model: target.model.id }
  if (stream && codec.protocol === "chat") {
    // Without it the upstream sends no usage at all; the tap drops the extra chunk if the client did not ask.
    upstreamBody.stream_options = {
      ...(Canonical.isObject(body.stream_options) ? body.stream_options : {}),
      include_usage: true
    }
  }
  const sent = Upstream.headers(target, codec.protocol === "messages")
  for (const name of forwardedHeaders) {
    const value = options.incoming[name]
    if (typeof value === "string") sent[name] = value
  }
  return Upstream.forClient(res, target, async (signal) => {
    const answer = await Upstream.send({
      dispatcher: options.dispatcher,
      target,
      path: options.path ?? codec.upstreamPath,
      headers: sent,
      body: JSON.stringify(upstreamBody),
      signal
    })
    const status = answer.statusCode
    const headers = pick(answer.headers, status)
    if (!stream || status >= 300) {
      // The bytes go back as they came (no decoding and encoding again), before usage is read out of them.
      const chunks: Array<Buffer> = []
      for await (const chunk of answer.body) chunks.push(chunk as Buffer)
      const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
      res.writeHead(status, { ...headers, "content-length": bytes.length })
      res.end(bytes)
      if (status < 300) {
        try {
          const usage = codec.usageOfBody(JSON.parse(bytes.toString("utf8")))
          if (usage !== undefined) options.onUsage(usage)
        } catch {
          // An answer that is not JSON is still the upstream's answer.
        }
      }
      return
    }
    res.writeHead(status, { ...headers, "cache-control": "no-cache" })
    const tap = codec.usageTap(body)
    const splitter = new Sse.Splitter()
    await new Promise<void>((resolve) => {
      answer.body.setEncoding("utf8")
      answer.body.on("data", (chunk: string) => {
        let out = ""
        for (const frame of splitter.push(chunk)) if (tap.frame(frame)) out += frame
        if (out !== "") res.write(out)
      })
      answer.body.on("end", () => {
        res.end(splitter.rest())
        const usage = tap.usage()
        if (usage !== undefined) options.onUsage(usage)
        resolve()
      })
      answer.body.on("error", () => {
        // A stream cut upstream is cut for the client too: it must not look complete.
        res.destroy()
        resolve()
      })
    })
  })
}
