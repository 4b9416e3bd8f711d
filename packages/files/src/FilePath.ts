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

/**
 * Characters that look like `/` or `\` without being one, by name: Unicode's confusables for the two
 * (less the letters and ideographs in everyday use, such as katakana no) and the combining solidus
 * overlays. Most have no compatibility form that is a slash, so they are refused as they are: a reader
 * still sees `a⁄b` as a path. A character only containing one in its compatibility form (`½` is `1⁄2`)
 * is not one.
 */
export const slashLookalikes: ReadonlyMap<string, string> = new Map([
  ["\u0337", "COMBINING SHORT SOLIDUS OVERLAY"],
  ["\u0338", "COMBINING LONG SOLIDUS OVERLAY"],
  ["\u1735", "PHILIPPINE SINGLE PUNCTUATION"],
  ["\u2041", "CARET INSERTION POINT"],
  ["\u2044", "FRACTION SLASH"],
  ["\u20e5", "COMBINING REVERSE SOLIDUS OVERLAY"],
  ["\u20eb", "COMBINING LONG DOUBLE SOLIDUS OVERLAY"],
  ["\u2215", "DIVISION SLASH"],
  ["\u2216", "SET MINUS"],
  ["\u2571", "BOX DRAWINGS LIGHT DIAGONAL UPPER RIGHT TO LOWER LEFT"],
  ["\u2572", "BOX DRAWINGS LIGHT DIAGONAL UPPER LEFT TO LOWER RIGHT"],
  ["\u27cb", "MATHEMATICAL RISING DIAGONAL"],
  ["\u27cd", "MATHEMATICAL FALLING DIAGONAL"],
  ["\u29f5", "REVERSE SOLIDUS OPERATOR"],
  ["\u29f6", "SOLIDUS WITH OVERBAR"],
  ["\u29f7", "REVERSE SOLIDUS WITH HORIZONTAL STROKE"],
  ["\u29f8", "BIG SOLIDUS"],
  ["\u29f9", "BIG REVERSE SOLIDUS"],
  ["\u2afb", "TRIPLE SOLIDUS BINARY RELATION"],
  ["\u2afd", "DOUBLE SOLIDUS OPERATOR"],
  ["\u3033", "VERTICAL KANA REPEAT MARK UPPER HALF"],
  ["\u31d3", "CJK STROKE SP"],
  ["\u31d4", "CJK STROKE D"],
  ["\ufe68", "SMALL REVERSE SOLIDUS"],
  ["\uff0f", "FULLWIDTH SOLIDUS"],
  ["\uff3c", "FULLWIDTH REVERSE SOLIDUS"],
  ["\u{1d20f}", "GREEK VOCAL NOTATION SYMBOL-16"],
  ["\u{1d23a}", "GREEK INSTRUMENTAL NOTATION SYMBOL-47"],
  ["\u{1d23b}", "GREEK INSTRUMENTAL NOTATION SYMBOL-48"]
])

/** `"⁄" (U+2044 FRACTION SLASH)`: a character as an error message names it. */
const named = (char: string) => {
  const code = `U+${char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`
  const name = slashLookalikes.get(char)
  return `${JSON.stringify(char)} (${name === undefined ? code : `${code} ${name}`})`
}

const segmentTooLong = `has a segment over ${maxSegmentBytes} bytes`

/**
 * Why `segment` (in NFC, without `/`) cannot be one segment of a path, or
 * undefined when it can: "has ..." for the caller to prefix with what it
 * names (a path, a file name).
 */
export const segmentProblem = (segment: string): string | undefined => {
  if (segment === "") return "has an empty segment (// or a trailing /)"
  if (control.test(segment)) return "has a control character (NUL, newline, ...)"
  if (segment.includes("\\")) return "has a backslash"
  // A compatibility form of `.`, `..` or `/` (fullwidth dots, a fullwidth solidus) is one to some tools.
  const compatible = segment.normalize("NFKC")
  if (compatible === "." || compatible === "..") return "has a . or .. segment"
  for (const char of segment) {
    const form = char.normalize("NFKC")
    if (slashLookalikes.has(char) || form.includes("/") || form.includes("\\")) {
      return `has a character that reads as a slash: ${named(char)}`
    }
  }
  if (Buffer.byteLength(segment) > maxSegmentBytes) return segmentTooLong
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
    const error = segmentProblem(segment)
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

/**
 * A file name: one segment by the same rules, in NFC. The failure says why
 * ("has ..."), for the caller to prefix with what it names.
 */
export const parseName = (name: string): Either.Either<string, string> => {
  const normal = name.normalize("NFC")
  if (normal.includes("/")) return Either.left("has a slash")
  const problem = segmentProblem(normal)
  if (problem === segmentTooLong) return Either.left(`is over ${maxSegmentBytes} bytes (UTF-8)`)
  return problem === undefined ? Either.right(normal) : Either.left(problem)
}

/** The last segment. */
export const basename = (path: string) => path.slice(path.lastIndexOf("/") + 1)

/**
 * A glob as an anchored POSIX regular expression (PostgreSQL's `~`): `**` any segments (followed by a slash,
 * also none), `*` and `?` within one segment; everything else stands for itself.
 */
export const globPattern = (glob: string): string => {
  let pattern = ""
  for (let i = 0; i < glob.length; i++) {
    const char = glob[i]!
    if (glob.startsWith("**/", i)) {
      pattern += "(.*/)?"
      i += 2
    } else if (glob.startsWith("**", i)) {
      pattern += ".*"
      i += 1
    } else if (char === "*") pattern += "[^/]*"
    else if (char === "?") pattern += "[^/]"
    else pattern += /[\\^$.|+()[\]{}]/.test(char) ? `\\${char}` : char
  }
  return `^${pattern}$`
}
