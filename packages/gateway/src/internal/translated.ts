/**
 * A call to a target of another protocol: the canonical request encoded in
 * the target's protocol, sent over the same kept-alive dispatcher as a
 * pass-through, and its answer decoded back (a whole body, or SSE frames as
 * they arrive, each turned into events at once) and encoded in the client's
 * protocol. No SDK client, WHATWG fetch or per-event fiber on the way.
 */
import type { Credentials } from "@agent-runtime/models"
import type * as Http from "node:http"
import type { Dispatcher } from "undici"
import type * as Canonical from "../Canonical.ts"
import { invalid } from "../GatewayError.ts"
import { Answer } from "./answer.ts"
import * as ChatUpstream from "./chatUpstream.ts"
import type { Codec, UpstreamCodec } from "./codec.ts"
import * as MessagesUpstream from "./messagesUpstream.ts"
import * as Reply from "./reply.ts"
import * as ResponsesUpstream from "./responsesUpstream.ts"
import * as Sse from "./sse.ts"
import type { TokenUsage } from "./tokenUsage.ts"
import * as Upstream from "./upstream.ts"

const upstreams: Record<string, UpstreamCodec> = {
  [ChatUpstream.upstream.api]: ChatUpstream.upstream,
  [ResponsesUpstream.upstream.api]: ResponsesUpstream.upstream,
  [MessagesUpstream.upstream.api]: MessagesUpstream.upstream
}

/** Whether the gateway speaks `api` upstream (the model layer knows more APIs than these three). */
export const speaks = (api: string) => api in upstreams

/** The upstream codec of a target; a model of another API is refused before a slot is taken. */
export const upstreamOf = (target: Credentials.Target): UpstreamCodec =>
  upstreams[target.model.api] ??
    invalid(`model ${target.id} speaks ${target.model.api}, which the gateway does not serve`, "model")

export interface Options {
  readonly dispatcher: Dispatcher
  readonly codec: Codec
  readonly upstream: UpstreamCodec
  readonly target: Credentials.Target
  readonly request: Canonical.Request
  readonly res: Http.ServerResponse
  /** Called once with the usage of an answer the upstream finished. */
  readonly onUsage: (usage: TokenUsage) => void
}

/** Sends the request and writes the answer; resolves when the client has it all (or left). */
export const call = async (options: Options): Promise<void> => {
  const { codec, request, res, target, upstream } = options
  return Upstream.forClient(res, target, async (signal) => {
    const answer = await Upstream.send({
      dispatcher: options.dispatcher,
      target,
      path: upstream.path,
      headers: { ...Upstream.headers(target, upstream.anthropic), ...upstream.headers },
      body: JSON.stringify(upstream.encode(request, target.model)),
      signal
    })
    const status = answer.statusCode
    if (status >= 300) {
      throw Upstream.failure(target, status, answer.headers["retry-after"], await answer.body.text())
    }
    if (!request.stream) {
      const message = upstream.decode(await answer.body.json())
      Reply.json(res, 200, codec.encode(message, request))
      return options.onUsage(message.usage)
    }
    res.writeHead(200, Reply.sseHeaders)
    const encoder = codec.encoder(request)
    let out = ""
    const built = new Answer((event) => {
      out += encoder.event(event)
    })
    const decode = upstream.decoder(built)
    const splitter = new Sse.Splitter()
    await new Promise<void>((resolve, reject) => {
      answer.body.setEncoding("utf8")
      answer.body.on("data", (chunk: string) => {
        try {
          for (const frame of splitter.push(chunk)) {
            const data = Sse.dataOf(frame)
            if (data === undefined || data === "[DONE]") continue
            const error = decode(JSON.parse(data))
            if (error !== undefined) throw Upstream.streamFailure(target, error)
          }
        } catch (error) {
          if (out !== "") res.write(out)
          answer.body.destroy()
          return reject(error)
        }
        // One write per upstream chunk, whatever number of frames it held.
        if (out !== "") res.write(out)
        out = ""
      })
      answer.body.on("end", () => {
        built.done()
        res.end(out)
        if (built.tokens !== undefined) options.onUsage(built.tokens)
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
