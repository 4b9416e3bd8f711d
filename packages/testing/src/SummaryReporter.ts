/**
 * Ends a vitest run with one plain line, `N passed, N failed, N skipped`,
 * for tools that read a run's result from its last line.
 */
import type { Reporter, TestModule, Vitest } from "vitest/node"

export default class SummaryReporter implements Reporter {
  private vitest: Vitest | undefined

  onInit(vitest: Vitest) {
    this.vitest = vitest
  }

  // onFinished runs after the default reporter's summary, so this line comes last.
  onFinished() {
    const modules: ReadonlyArray<TestModule> = this.vitest?.state.getTestModules() ?? []
    let passed = 0
    let failed = 0
    let skipped = 0
    for (const module of modules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state
        if (state === "passed") passed++
        else if (state === "failed") failed++
        else skipped++
      }
      if (module.state() === "failed" && module.children.size === 0) failed++
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped\n`)
  }
}
