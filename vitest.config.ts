import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    globalSetup: ["./packages/testing/src/globalSetup.ts"]
  }
})
