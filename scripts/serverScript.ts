/** The server's entry script, which the scripts start as nodes (the testing package does not know the app). */
import { fileURLToPath } from "node:url"

export const serverScript = fileURLToPath(new URL("../apps/server/src/main.ts", import.meta.url))
