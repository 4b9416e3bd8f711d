import { describe, expect, it } from "@effect/vitest"
import { type Item, Parser } from "../src/ServerSentEvents.ts"

const parseAll = (pieces: ReadonlyArray<string>): Array<Item> => {
  const parser = new Parser()
  return pieces.flatMap((piece) => parser.push(piece))
}

const frame = (event: string | undefined, id: string | undefined, data: string | undefined): Item => ({
  _tag: "Frame",
  event,
  id,
  data
})

const stream = [
  'event: ready\ndata: {"version":1,"connection":"conn_1"}\n\n',
  'id: 7\ndata: {"type":"event"}\n\n',
  ": heartbeat\n\n",
  'event: mcp\ndata: {"jsonrpc":"2.0","id":"c1","method":"ping"}\n\n',
  "id: 8\ndata: line one\ndata: line two\n\n",
  "event: reconnect\ndata: {}\n\n"
].join("")

const expected: Array<Item> = [
  frame("ready", undefined, '{"version":1,"connection":"conn_1"}'),
  frame(undefined, "7", '{"type":"event"}'),
  { _tag: "Comment", text: "heartbeat" },
  frame("mcp", undefined, '{"jsonrpc":"2.0","id":"c1","method":"ping"}'),
  frame(undefined, "8", "line one\nline two"),
  frame("reconnect", undefined, "{}")
]

describe("the SSE parser", () => {
  it("reads frames, ids, events, multi-line data and comments", () => {
    expect(parseAll([stream])).toEqual(expected)
  })

  it("gives the same frames however the text is cut", () => {
    expect(parseAll(stream.split(""))).toEqual(expected)
    for (const size of [2, 3, 5, 7, 13, 64]) {
      const pieces: Array<string> = []
      for (let i = 0; i < stream.length; i += size) pieces.push(stream.slice(i, i + size))
      expect(parseAll(pieces)).toEqual(expected)
    }
  })

  it("takes CRLF and CR line ends, also a CRLF split across pieces", () => {
    const crlf = stream.replaceAll("\n", "\r\n")
    expect(parseAll([crlf])).toEqual(expected)
    expect(parseAll(crlf.split(""))).toEqual(expected)
    expect(parseAll([stream.replaceAll("\n", "\r")])).toEqual(expected)
    expect(parseAll(["id: 1\r", "\ndata: x\r", "\n\r", "\n"])).toEqual([frame(undefined, "1", "x")])
  })

  it("gives the same frames at every split point of mixed line ends", () => {
    const mixed = "data: one\n\ndata: two\r\n\r\nevent: three\rdata: 3\r\rdata: four\n\n"
    const frames = [
      frame(undefined, undefined, "one"),
      frame(undefined, undefined, "two"),
      frame("three", undefined, "3"),
      frame(undefined, undefined, "four")
    ]
    for (let at = 0; at <= mixed.length; at++) {
      expect(parseAll([mixed.slice(0, at), mixed.slice(at)])).toEqual(frames)
    }
  })

  it("reads a megabyte line sent a few characters at a time, joining it once", () => {
    const big = "x".repeat(1 << 20)
    const pieces = [...`data: ${big}`.match(/[\s\S]{1,7}/g)!, "\n", "\n"]
    const [read] = parseAll(pieces)
    expect(read).toEqual(frame(undefined, undefined, big))
  })

  it("drops one space after the colon only, and takes a field without a colon as empty", () => {
    expect(parseAll(["data:  two spaces\ndata:none\ndata\n\n"])).toEqual([
      frame(undefined, undefined, " two spaces\nnone\n")
    ])
  })

  it("ignores retry, unknown fields and an id holding NUL", () => {
    expect(parseAll(["retry: 100\nfoo: bar\nid: a\0b\ndata: x\n\n"])).toEqual([frame(undefined, undefined, "x")])
  })

  it("strips a leading byte order mark", () => {
    expect(parseAll(["\uFEFFid: 1\ndata: x\n\n"])).toEqual([frame(undefined, "1", "x")])
  })

  it("keeps a frame's id to itself: the next frame without id: has none", () => {
    expect(parseAll(["id: 5\ndata: a\n\ndata: b\n\n"])).toEqual([
      frame(undefined, "5", "a"),
      frame(undefined, undefined, "b")
    ])
  })

  it("drops a frame cut off by the end of the stream, and blank lines alone make nothing", () => {
    expect(parseAll(["\n\n\nid: 9\ndata: partial"])).toEqual([])
    expect(parseAll(["data: whole\n\ndata: partial\n"])).toEqual([frame(undefined, undefined, "whole")])
  })

  it("reads a frame with an event and no data (not dropped, unlike a browser)", () => {
    expect(parseAll(["event: closed\n\n"])).toEqual([frame("closed", undefined, undefined)])
  })
})
