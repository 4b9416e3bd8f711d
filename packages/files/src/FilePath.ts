/**
 * The one rule for naming a file in a volume. A path is a list of segments
 * joined by `/`, stored in Unicode NFC. It is refused, never repaired, when
 * it could mean something else to someone: `.` or `..` (also their
 * compatibility forms such as fullwidth dots), backslashes and slash
 * look-alikes, NUL and other control characters, empty segments. Volumes
 * are not a host file system and hold no links, so a name that looks like a
 * link or a device is only a name.
 */
import { Either } from "effect"

/** Bytes of UTF-8 in a whole path, and in one segment. */
export const maxPathBytes = 1024
export const maxSegmentBytes = 255

// C0 and C1 controls, DEL, and the line and paragraph separators.
// eslint-disable-next-line no-control-regex
const control = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/

const segmentError = (segment: string): string | undefined => {
  if (segment === "") return "has an empty segment (// or a trailing /)"
  if (control.test(segment)) return "has a control character (NUL, newline, ...)"
  if (segment.includes("\\")) return "has a backslash"
  // A compatibility form of `.`, `..` or `/` (fullwidth dots, a fraction slash) is one to some tools.
  const compatible = segment.normalize("NFKC")
  if (compatible === "." || compatible === "..") return "has a . or .. segment"
  if (compatible.includes("/") || compatible.includes("\\") || segment.includes("\u2215")) {
    return "has a character that reads as a slash"
  }
  if (Buffer.byteLength(segment) > maxSegmentBytes) return `has a segment over ${maxSegmentBytes} bytes`
  return undefined
}

/**
 * A path inside a volume, e.g. `docs/readme.md`: the segments, checked and
 * in NFC, joined by `/` without a leading one (a leading `/` is allowed and
 * dropped). The failure says why, for the caller's error message.
 */
export const parse = (path: string): Either.Either<string, string> => {
  const normal = path.normalize("NFC")
  const relative = normal.startsWith("/") ? normal.slice(1) : normal
  if (relative === "") return Either.left(`path ${JSON.stringify(path)} names no file`)
  if (Buffer.byteLength(relative) > maxPathBytes) return Either.left(`path is over ${maxPathBytes} bytes`)
  for (const segment of relative.split("/")) {
    const error = segmentError(segment)
    if (error !== undefined) return Either.left(`path ${JSON.stringify(path)} ${error}`)
  }
  return Either.right(relative)
}

/**
 * A directory prefix (`docs/`, `docs` or empty for the whole volume),
 * checked like a path: answers `""` or the segments with a trailing `/`.
 */
export const parseDirectory = (prefix: string): Either.Either<string, string> => {
  const trimmed = prefix.replace(/\/+$/, "")
  if (trimmed === "" || trimmed === "/") return Either.right("")
  return Either.map(parse(trimmed), (path) => `${path}/`)
}

/** The last segment. */
export const basename = (path: string) => path.slice(path.lastIndexOf("/") + 1)
