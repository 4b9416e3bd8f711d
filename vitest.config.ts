import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    // One embedded PostgreSQL for the whole run; each test file makes its own database on it.
    globalSetup: ["./packages/testing/src/globalSetup.ts"],
    reporters: ["default", "./packages/testing/src/SummaryReporter.ts"]
  }
})
