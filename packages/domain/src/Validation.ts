/**
 * Checks shared by the schemas of several modules: sizes of JSON values in
 * bytes, URLs, JSON objects. Sizes in the spec's "KB"/"MB" are read as
 * 1024-byte multiples, the same as its "KiB"/"MiB".
 */
import { Schema } from "effect"

export const KiB = 1024
export const MiB = 1024 * 1024

/** Bytes of a string encoded as UTF-8, counted without encoding it. */
export const utf8Length = (text: string): number => {
  let bytes = 0
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code < 0x80) bytes += 1
    else if (code < 0x800) bytes += 2
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4
        i++
      } else bytes += 3
    } else bytes += 3
  }
  return bytes
}

/** Bytes of a value written as JSON (UTF-8); 0 for values JSON cannot write. */
export const jsonBytes = (value: unknown): number => {
  const json = JSON.stringify(value)
  return json === undefined ? 0 : utf8Length(json)
}

/** Bytes a base64 string decodes to (padding and whitespace ignored). */
export const base64DecodedBytes = (data: string): number => {
  const chars = data.replace(/[\s=]/g, "").length
  return Math.floor((chars * 3) / 4)
}

/** A JSON object with values of any type. */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type JsonObject = typeof JsonObject.Type

/**
 * An absolute `http:` or `https:` URL. Whether it may be used (public and
 * https unless ALLOW_PRIVATE_URLS) is the egress check's to say, at save and
 * at every call.
 */
export const HttpUrl = Schema.String.pipe(
  Schema.filter((url) => {
    if (!URL.canParse(url)) return "must be an absolute URL"
    const { protocol } = new URL(url)
    return protocol === "https:" || protocol === "http:" || "must be an http or https URL"
  })
).annotations({ description: "absolute http(s) URL", jsonSchema: { type: "string", format: "uri" } })
export type HttpUrl = typeof HttpUrl.Type
