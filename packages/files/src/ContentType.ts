/**
 * The content type of a file whose writer named none: from its first bytes
 * and its name. Magic bytes win over the name for the binary formats they
 * identify (a PNG named `notes.txt` is a PNG). Bytes that are valid UTF-8
 * without a NUL are text, typed by the name when the name says a text type
 * and `text/plain` otherwise. Every text type carries `; charset=utf-8`:
 * it is only called text once its bytes are known to be UTF-8, so the
 * charset is a fact, and a browser showing it will not guess a legacy one.
 * Anything else takes the name's binary type, or `application/octet-stream`.
 */
import { isUtf8 } from "node:buffer"

const utf8 = "; charset=utf-8"

/**
 * Text types by extension, given `; charset=utf-8` when the bytes are text. Maps, not objects: a name ending
 * in `.constructor` must find nothing.
 */
const textTypes: ReadonlyMap<string, string> = new Map(Object.entries({
  txt: "text/plain",
  log: "text/plain",
  md: "text/markdown",
  markdown: "text/markdown",
  csv: "text/csv",
  tsv: "text/tab-separated-values",
  html: "text/html",
  htm: "text/html",
  css: "text/css",
  js: "text/javascript",
  mjs: "text/javascript",
  cjs: "text/javascript",
  ts: "text/x-typescript",
  tsx: "text/x-typescript",
  jsx: "text/javascript",
  py: "text/x-python",
  rb: "text/x-ruby",
  go: "text/x-go",
  rs: "text/x-rust",
  java: "text/x-java",
  c: "text/x-c",
  h: "text/x-c",
  cpp: "text/x-c++",
  sh: "text/x-shellscript",
  sql: "application/sql",
  json: "application/json",
  jsonl: "application/jsonl",
  ndjson: "application/x-ndjson",
  xml: "application/xml",
  yaml: "application/yaml",
  yml: "application/yaml",
  toml: "application/toml",
  svg: "image/svg+xml",
  ics: "text/calendar"
}))

/** Binary types by extension, for bytes that are not text. */
const binaryTypes: ReadonlyMap<string, string> = new Map(Object.entries({
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  ico: "image/x-icon",
  pdf: "application/pdf",
  zip: "application/zip",
  gz: "application/gzip",
  tgz: "application/gzip",
  tar: "application/x-tar",
  docx: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
  xlsx: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
  pptx: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
  mp3: "audio/mpeg",
  wav: "audio/wav",
  mp4: "video/mp4",
  webm: "video/webm",
  wasm: "application/wasm",
  parquet: "application/vnd.apache.parquet"
}))

/** Formats built on ZIP: their magic is ZIP's, so their name tells them apart. */
const zipContainers = new Set(["docx", "xlsx", "pptx"])

const startsWith = (bytes: Uint8Array, magic: ReadonlyArray<number>, at = 0) =>
  bytes.length >= at + magic.length && magic.every((byte, i) => bytes[at + i] === byte)

const ascii = (text: string) => [...text].map((char) => char.charCodeAt(0))

const magics: ReadonlyArray<readonly [type: string, test: (bytes: Uint8Array) => boolean]> = [
  ["image/png", (bytes) => startsWith(bytes, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])],
  ["image/jpeg", (bytes) => startsWith(bytes, [0xff, 0xd8, 0xff])],
  ["image/gif", (bytes) => startsWith(bytes, ascii("GIF87a")) || startsWith(bytes, ascii("GIF89a"))],
  ["image/webp", (bytes) => startsWith(bytes, ascii("RIFF")) && startsWith(bytes, ascii("WEBP"), 8)],
  ["application/pdf", (bytes) => startsWith(bytes, ascii("%PDF-"))],
  // A local file header, or the end record alone (an empty archive).
  [
    "application/zip",
    (bytes) => startsWith(bytes, [0x50, 0x4b, 0x03, 0x04]) || startsWith(bytes, [0x50, 0x4b, 0x05, 0x06])
  ],
  ["application/gzip", (bytes) => startsWith(bytes, [0x1f, 0x8b])]
]

const extensionOf = (name: string) => {
  const base = name.slice(name.lastIndexOf("/") + 1)
  const dot = base.lastIndexOf(".")
  return dot <= 0 ? "" : base.slice(dot + 1).toLowerCase()
}

/** The type of `bytes` stored under `name` (a path; only its last segment counts). */
export const sniff = (bytes: Uint8Array, name: string): string => {
  const extension = extensionOf(name)
  const magic = magics.find(([, test]) => test(bytes))?.[0]
  if (magic === "application/zip" && zipContainers.has(extension)) return binaryTypes.get(extension)!
  if (magic !== undefined) return magic
  if (bytes.indexOf(0) === -1 && isUtf8(bytes)) return (textTypes.get(extension) ?? "text/plain") + utf8
  return binaryTypes.get(extension) ?? "application/octet-stream"
}
