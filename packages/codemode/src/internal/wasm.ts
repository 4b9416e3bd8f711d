/**
 * QuickJS's WebAssembly module, compiled once per process and instantiated
 * once per run, each instance with its own linear memory capped at creation.
 *
 * Why not one shared instance: in this build `malloc_usable_size` is
 * unavailable, so QuickJS's `setMemoryLimit` counts 8 bytes per allocation
 * whatever its size, and a guest could grow a shared memory to 2 GiB; and a
 * host stack overflow inside the WASM code (deeply nested source reaching the
 * parser) leaves the instance inconsistent. A capped instance per run bounds
 * the first, with running out noticed where Emscripten grows the memory, and
 * confines the second to the run that caused it.
 */
import { Effect } from "effect"
import { readFile } from "node:fs/promises"
import { createRequire } from "node:module"
import {
  type CustomizeVariantOptions,
  newQuickJSWASMModuleFromVariant,
  newVariant,
  type QuickJSWASMModule,
  RELEASE_SYNC
} from "quickjs-emscripten"

/** The parts of Node's `WebAssembly` global used here: the repo's `lib` (ES2023, no DOM) does not declare it. */
interface WebAssemblyApi {
  readonly compile: (bytes: Uint8Array) => Promise<unknown>
  readonly Memory: new(descriptor: { readonly initial: number; readonly maximum: number }) => {
    grow(delta: number): number
  }
  readonly RuntimeError: new() => Error
}

const wasm = (globalThis as unknown as { readonly WebAssembly: WebAssemblyApi }).WebAssembly

export interface Instance {
  readonly module: QuickJSWASMModule
  /** Whether the memory could not grow when asked: the guest reached its cap. */
  readonly exhausted: () => boolean
}

const pageBytes = 64 * 1024
/** What the module's memory import requires: 16 MiB, of which about 5 MiB are its C stack and static data. */
const initialPages = 256
/** wasm32 with Emscripten's heap limit: 2 GiB. */
const maxPages = 32768

/** The release build's `.wasm`, resolved from quickjs-emscripten, whose dependency it is. */
const wasmPath = (): string => {
  const entry = createRequire(import.meta.url).resolve("quickjs-emscripten")
  return createRequire(entry).resolve("@jitl/quickjs-wasmfile-release-sync/wasm")
}

let compiled: Promise<unknown> | undefined

const compile = (): Promise<unknown> =>
  compiled ??= readFile(wasmPath()).then(
    (bytes) => wasm.compile(bytes),
    (error: unknown) => {
      compiled = undefined
      throw error
    }
  )

/** A fresh instance whose memory may grow by `heapBytes` beyond the initial 16 MiB. */
export const instantiate = (heapBytes: number): Effect.Effect<Instance> =>
  Effect.promise(async () => {
    const wasmModule = await compile()
    const memory = new wasm.Memory({
      initial: initialPages,
      maximum: Math.min(maxPages, initialPages + Math.ceil(heapBytes / pageBytes))
    })
    // Emscripten grows the heap with `memory.grow` and treats a throw as "out of memory".
    let exhausted = false
    const grow = memory.grow.bind(memory)
    Object.defineProperty(memory, "grow", {
      value: (delta: number) => {
        try {
          return grow(delta)
        } catch (error) {
          exhausted = true
          throw error
        }
      }
    })
    const module = await newQuickJSWASMModuleFromVariant(newVariant(RELEASE_SYNC, {
      wasmModule: wasmModule as NonNullable<CustomizeVariantOptions["wasmModule"]>,
      wasmMemory: memory as unknown as NonNullable<CustomizeVariantOptions["wasmMemory"]>
    }))
    return { module, exhausted: () => exhausted }
  })

/**
 * Whether `error`, thrown out of a call into the WASM code, left the instance inconsistent: the
 * host's stack ran out inside it (`RangeError`) or it trapped or aborted (`WebAssembly.RuntimeError`).
 */
export const isFatal = (error: unknown): boolean => error instanceof RangeError || error instanceof wasm.RuntimeError
