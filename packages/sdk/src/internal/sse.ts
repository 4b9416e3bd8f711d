/**
 * An incremental parser of `text/event-stream` (the WHATWG grammar): fed
 * decoded text in whatever pieces the network gives, it answers the frames
 * and comments completed so far. Lines end with LF, CRLF or CR (a CR at the
 * end of a piece waits for the next piece, which may start with its LF); a
 * blank line ends a frame; `data:` lines join with LF; one space after the
 * colon is dropped; unknown fields and `retry:` are ignored; a frame cut off
 * by the end of the stream is dropped, as the spec says.
 *
 * Unlike a browser's EventSource, a frame says whether it carried an `id:`
 * line itself: only those move a reader's cursor (the runtime's `mcp` frames
 * carry none).
 */

export interface Frame {
  readonly _tag: "Frame"
  /** The `event:` field; undefined when the frame names none (a browser calls it "message"). */
  readonly event: string | undefined
  /** The frame's own `id:` line, when it has one. */
  readonly id: string | undefined
  /** The `data:` lines joined with LF; undefined when there were none. */
  readonly data: string | undefined
}

/** A `:` line: the runtime's `: heartbeat`. */
export interface Comment {
  readonly _tag: "Comment"
  readonly text: string
}

export type Item = Frame | Comment

export class Parser {
  private buffer = ""
  private started = false
  private event: string | undefined = undefined
  private id: string | undefined = undefined
  private data: Array<string> | undefined = undefined

  /** The frames and comments that `text` completes, in order. */
  push(text: string): Array<Item> {
    if (!this.started && text.length > 0) {
      this.started = true
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    this.buffer += text
    const items: Array<Item> = []
    let start = 0
    const buffer = this.buffer
    for (let i = 0; i < buffer.length; i++) {
      const char = buffer.charCodeAt(i)
      if (char !== 10 && char !== 13) continue
      // A CR as the last character may be the first half of a CRLF split across pieces.
      if (char === 13 && i === buffer.length - 1) break
      this.line(buffer.slice(start, i), items)
      if (char === 13 && buffer.charCodeAt(i + 1) === 10) i++
      start = i + 1
    }
    this.buffer = buffer.slice(start)
    return items
  }

  /** The end of the stream: a frame without its blank line is dropped. */
  end(): Array<Item> {
    const items: Array<Item> = []
    if (this.buffer === "\r") this.line("", items)
    this.buffer = ""
    this.reset()
    return items
  }

  private line(line: string, items: Array<Item>) {
    if (line === "") {
      if (this.event !== undefined || this.id !== undefined || this.data !== undefined) {
        items.push({
          _tag: "Frame",
          event: this.event,
          id: this.id,
          data: this.data === undefined ? undefined : this.data.join("\n")
        })
      }
      this.reset()
      return
    }
    const colon = line.indexOf(":")
    if (colon === 0) {
      items.push({ _tag: "Comment", text: line.slice(1).trimStart() })
      return
    }
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? "" : line.slice(colon + 1)
    if (value.startsWith(" ")) value = value.slice(1)
    switch (field) {
      case "event":
        this.event = value
        break
      case "data":
        ;(this.data ??= []).push(value)
        break
      case "id":
        // The spec ignores an id holding NUL.
        if (!value.includes("\0")) this.id = value
        break
    }
  }

  private reset() {
    this.event = undefined
    this.id = undefined
    this.data = undefined
  }
}
