/**
 * Server-sent events on the wire: writing one frame, and splitting an
 * upstream byte stream into whole frames so a pass-through can read usage
 * out of the frames it forwards (and drop one it must not forward).
 */

/** One `event:`/`data:` frame; chat completions frames have no event line. */
export const frame = (data: unknown, event?: string): string =>
  event === undefined
    ? `data: ${JSON.stringify(data)}\n\n`
    : `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`

/** The text after `data: ` in one raw frame (single-line data, as every provider sends). */
export const dataOf = (raw: string): string | undefined => {
  const start = raw.startsWith("data:") ? 0 : raw.indexOf("\ndata:") + 1
  if (start === 0 && !raw.startsWith("data:")) return undefined
  const from = start + (raw.charCodeAt(start + 5) === 32 ? 6 : 5)
  const end = raw.indexOf("\n", from)
  return raw.slice(from, end === -1 ? raw.length : end)
}

/**
 * Accumulates chunks and hands out whole frames (each with its blank-line
 * terminator); a frame split across chunks waits for its end.
 */
export class Splitter {
  private buffer = ""

  /** The whole frames completed by `chunk`. Line endings are normalised to `\n`. */
  push(chunk: string): Array<string> {
    let text = this.buffer + chunk
    if (text.includes("\r")) text = text.replace(/\r\n?/g, "\n")
    const frames: Array<string> = []
    let start = 0
    let end: number
    while ((end = text.indexOf("\n\n", start)) !== -1) {
      frames.push(text.slice(start, end + 2))
      start = end + 2
    }
    this.buffer = text.slice(start)
    return frames
  }

  /** Whatever is left when the stream ends (a last frame without its blank line). */
  rest(): string {
    const rest = this.buffer
    this.buffer = ""
    return rest
  }
}
