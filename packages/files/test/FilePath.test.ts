/**
 * The path rule on its own: what is refused and why (naming the character
 * when one reads as a slash), what passes, and the segment limit in bytes.
 */
import { FilePath } from "@agent-runtime/files"
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"

const refusal = (path: string) => {
  const parsed = FilePath.parse(path)
  if (Either.isRight(parsed)) throw new Error(`expected ${JSON.stringify(path)} to be refused, got ${parsed.right}`)
  return parsed.left
}

describe("FilePath", () => {
  it("refuses the fraction slash and every other slash look-alike, naming the character", () => {
    expect(refusal("a\u2044b")).toBe(
      `path "a\u2044b" has a character that reads as a slash: "\u2044" (U+2044 FRACTION SLASH)`
    )
    const required = [
      "\u2044",
      "\u2215",
      "\u29F8",
      "\uFF0F",
      "\u2571",
      "\u1735",
      "\uFF3C",
      "\u29F5",
      "\u29F9",
      "\uFE68"
    ]
    for (const char of [...required, ...FilePath.slashLookalikes.keys()]) {
      const code = `U+${char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`
      for (const path of [`docs${char}x.md`, `${char}`, `dir/${char}/x`, `x${char}`]) {
        expect(refusal(path), `${code} in ${JSON.stringify(path)}`).toContain(
          `reads as a slash: ${JSON.stringify(char)} (${code}`
        )
      }
      // As a file name too.
      expect(FilePath.parseName(`a${char}b`)).toEqual(Either.left(expect.stringContaining(code)))
    }
    // Characters whose compatibility form holds a slash are refused naming them, too.
    expect(refusal("\u2105")).toContain('reads as a slash: "\u2105" (U+2105)')
  })

  it("still refuses what it refused, and keeps what reads as itself", () => {
    expect(refusal("a\\b")).toContain("has a backslash")
    expect(refusal("\uFF0E\uFF0E/x")).toContain("has a . or .. segment")
    expect(refusal("a//b")).toContain("empty segment")
    expect(refusal("a\u0000b")).toContain("control character")
    // ½ is 1⁄2 under NFKC, ≠ is = with a long solidus overlay under NFD: each is one character that reads as itself.
    for (const path of ["\u00BD cup.txt", "a\u2260b", "=\u0338", "\u30CE\u30FC\u30C8.md", "a-b_c.d (1).txt"]) {
      expect(Either.isRight(FilePath.parse(path)), JSON.stringify(path)).toBe(true)
    }
  })

  it("allows a segment of 255 bytes of UTF-8 and refuses 256, counting bytes, not characters", () => {
    for (
      const [ok, over] of [
        ["a".repeat(255), "a".repeat(256)],
        ["\u00E9".repeat(127) + "a", "\u00E9".repeat(128)],
        ["\u{1F642}".repeat(63) + "abc", "\u{1F642}".repeat(64)]
      ] as const
    ) {
      expect(Buffer.byteLength(ok)).toBe(255)
      expect(Buffer.byteLength(over)).toBe(256)
      expect(FilePath.parse(`dir/${ok}`)).toEqual(Either.right(`dir/${ok}`))
      expect(FilePath.parseName(ok)).toEqual(Either.right(ok))
      expect(refusal(`dir/${over}`)).toContain("has a segment over 255 bytes")
      expect(FilePath.parseName(over)).toEqual(Either.left("is over 255 bytes (UTF-8)"))
    }
    expect(FilePath.parseName("a/b")).toEqual(Either.left("has a slash"))
  })
})
