import { defineWorkspace } from "vitest/config"
import { serverFlags, serverScript } from "./scripts/serverScript.ts"

// The root vitest.config.ts holds the run-wide setup (one embedded PostgreSQL).
export default defineWorkspace([
  { test: { name: "domain", root: "./packages/domain" } },
  { test: { name: "store", root: "./packages/store", testTimeout: 30_000 } },
  { test: { name: "accounts", root: "./packages/accounts" } },
  { test: { name: "testing", root: "./packages/testing" } },
  { test: { name: "egress", root: "./packages/egress" } },
  { test: { name: "webhooks", root: "./packages/webhooks", testTimeout: 60_000 } },
  { test: { name: "telemetry", root: "./packages/telemetry", testTimeout: 60_000 } },
  { test: { name: "oauth", root: "./packages/oauth", testTimeout: 60_000 } },
  { test: { name: "billing", root: "./packages/billing", testTimeout: 30_000 } },
  { test: { name: "files", root: "./packages/files", testTimeout: 60_000 } },
  { test: { name: "identity", root: "./packages/identity", testTimeout: 30_000 } },
  { test: { name: "models", root: "./packages/models", testTimeout: 30_000 } },
  { test: { name: "codemode", root: "./packages/codemode", testTimeout: 30_000 } },
  { test: { name: "toolsources", root: "./packages/toolsources", testTimeout: 30_000 } },
  { test: { name: "agent", root: "./packages/agent" } },
  { test: { name: "gateway", root: "./packages/gateway" } },
  { test: { name: "mcp", root: "./packages/mcp" } },
  {
    test: {
      name: "sdk",
      root: "./packages/sdk",
      testTimeout: 60_000,
      hookTimeout: 60_000,
      // Rest.test.ts starts a real node with the testing package's TestNode.
      provide: { serverMain: serverScript, serverFlags }
    }
  },
  {
    test: {
      name: "server",
      root: "./apps/server",
      testTimeout: 60_000,
      hookTimeout: 60_000,
      // What the testing package's TestNode starts: it does not know the app.
      provide: { serverMain: serverScript, serverFlags }
    }
  }
])
