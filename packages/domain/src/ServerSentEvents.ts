/**
 * An incremental parser of `text/event-stream` (the WHATWG grammar), for the
 * SDK's event streams and the model client's provider streams. Fed decoded
 * text in whatever pieces the network gives, it answers the frames and
 * comments completed so far, in time linear in the stream's length: a line
 * arriving in many pieces is joined once, at its end.
 *
 * Lines end with LF, CRLF or CR (an LF starting a piece after a piece ending
 * in CR is the same line end); a leading byte order mark is dropped; a blank
 * line ends a frame; `data:` lines join with LF; one space after the colon is
 * dropped; unknown fields and `retry:` are ignored; a frame the stream never
 * ended is never answered, as the spec says.
 *
 * Unlike a browser's EventSource, a frame says whether it carried an `id:`
 * line itself (only those move a reader's cursor), and a frame with an event
 * but no data is kept.
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

/** A `:` line, such as the runtime's `: heartbeat`. */
export interface Comment {
  readonly _tag: "Comment"
  readonly text: string
}

export type Item = Frame | Comment

export class Parser {
  /** The pieces of the line not ended yet. */
  private pending: Array<string> = []
  private started = false
  private afterCr = false
  private event: string | undefined = undefined
  private id: string | undefined = undefined
  private data: Array<string> | undefined = undefined

  /** The frames and comments that `text` completes, in order. */
  push(text: string): Array<Item> {
    const items: Array<Item> = []
    if (text.length === 0) return items
    let start = 0
    if (!this.started) {
      this.started = true
      if (text.charCodeAt(0) === 0xfeff) start = 1
    }
    if (this.afterCr && text.charCodeAt(start) === 10) start++
    this.afterCr = false
    for (let index = start; index < text.length; index++) {
      const code = text.charCodeAt(index)
      if (code !== 10 && code !== 13) continue
      const piece = text.slice(start, index)
      if (this.pending.length === 0) this.line(piece, items)
      else {
        this.pending.push(piece)
        this.line(this.pending.join(""), items)
        this.pending = []
      }
      if (code === 13) {
        if (index + 1 === text.length) this.afterCr = true
        else if (text.charCodeAt(index + 1) === 10) index++
      }
      start = index + 1
    }
    if (start < text.length) this.pending.push(text.slice(start))
    return items
  }

  private line(line: string, items: Array<Item>) {
    if (line === "") {
      if (this.event !== undefined || this.id !== undefined || this.data !== undefined) {
        items.push({
          _tag: "Frame",
          event: this.event,
          id: this.id,
          data: this.data === undefined ? undefined : this.data.length === 1 ? this.data[0] : this.data.join("\n")
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
    if (value.charCodeAt(0) === 32) value = value.slice(1)
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
