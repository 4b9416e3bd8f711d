/**
 * A local estimate of a request's input tokens, for upstreams that offer no
 * count of their own: about four characters a token over everything the
 * model reads (system prompt, messages, tool calls and results, tool
 * definitions as JSON), a fixed charge per image, and a small overhead per
 * message and tool. See docs/gateway.md for its error bound.
 */
import type * as Canonical from "./Canonical.ts"

const charsPerToken = 4
/** Anthropic's charge for an image at its largest size (about 1.15 megapixels). */
const tokensPerImage = 1600
const tokensPerMessage = 4
const tokensPerTool = 8

const chars = (content: string | ReadonlyArray<{ readonly type: string }>): { text: number; images: number } => {
  if (typeof content === "string") return { text: content.length, images: 0 }
  let text = 0
  let images = 0
  for (const block of content as ReadonlyArray<Canonical.Content | Canonical.UserContent>) {
    switch (block.type) {
      case "text":
        text += block.text.length
        break
      case "thinking":
        text += block.thinking.length
        break
      case "toolCall":
        text += block.name.length + JSON.stringify(block.arguments).length
        break
      case "image":
        images++
        break
    }
  }
  return { text, images }
}

export const estimate = (request: Canonical.Request): number => {
  const { context } = request
  let text = context.systemPrompt?.length ?? 0
  let images = 0
  let overhead = 0
  for (const message of context.messages) {
    overhead += tokensPerMessage
    if (message.role === "system") continue
    const counted = chars(message.content)
    text += counted.text
    images += counted.images
  }
  for (const tool of context.tools ?? []) {
    overhead += tokensPerTool
    text += tool.name.length + tool.description.length + JSON.stringify(tool.parameters).length
  }
  return Math.ceil(text / charsPerToken) + images * tokensPerImage + overhead
}
