/** Builds the console's assets into dist/ (run by the project's postinstall). */
import * as Assets from "./Assets.ts"

const manifest = await Assets.build()
process.stdout.write(`console built: ${manifest.script}, ${manifest.style}\n`)
