/**
 * The code's shape in numbers: the longest source files and functions of the
 * packages and apps (`npm run shape`, or `node scripts/shape.ts [--limit N]`).
 * docs/architecture.md keeps files under about 600 lines and functions under
 * about 150; this lists what is over, longest first, so a change can say what
 * it did to them. A function's length is its lines from its first to its last,
 * the functions inside it included ("whole"), and without them ("own");
 * `Effect.gen(function*…)` bodies count as functions, as they are where the
 * code is.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import ts from "typescript"

const root = Path.resolve(import.meta.dirname, "..")
const limitArgument = process.argv.indexOf("--limit")
const limit = limitArgument === -1 ? 15 : Number(process.argv[limitArgument + 1])
const fileLimit = 600
const functionLimit = 150

const sources = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = Path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(path)
    return entry.name.endsWith(".ts") ? [path] : []
  })

const files = ["packages", "apps"].flatMap((parent) =>
  Fs.readdirSync(Path.join(root, parent))
    .map((name) => Path.join(root, parent, name, "src"))
    .filter((dir) => Fs.existsSync(dir))
    .flatMap(sources)
)

interface Measured {
  readonly where: string
  readonly lines: number
}

interface Spanned extends Measured {
  /** Its lines less those of the functions written inside it: a service's `make` of short members is short. */
  readonly own: number
}

/** A readable name for a function: its declaration's, its variable's, or its property's. */
const nameOf = (node: ts.Node): string => {
  if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name) return node.name.getText()
  let parent = node.parent
  while (parent && (ts.isCallExpression(parent) || ts.isParenthesizedExpression(parent))) parent = parent.parent
  if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)) && parent.name) {
    return parent.name.getText()
  }
  return "(anonymous)"
}

const fileSizes: Array<Measured> = []
const functions: Array<Spanned> = []
for (const file of files) {
  const text = Fs.readFileSync(file, "utf8")
  const relative = Path.relative(root, file)
  fileSizes.push({ where: relative, lines: text.split("\n").length })
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  /** Visits a node; returns the lines of the outermost functions within it, for its enclosing function's own count. */
  const visit = (node: ts.Node): number => {
    let inner = 0
    ts.forEachChild(node, (child) => {
      inner += visit(child)
    })
    if (!(ts.isFunctionLike(node) && "body" in node && node.body)) return inner
    const start = source.getLineAndCharacterOfPosition(node.getStart()).line
    const lines = source.getLineAndCharacterOfPosition(node.getEnd()).line - start + 1
    functions.push({ where: `${relative}:${start + 1} ${nameOf(node)}`, lines, own: lines - inner })
    return lines
  }
  visit(source)
}

const show = (title: string, measured: Array<Measured>, over: number) => {
  const sorted = [...measured].sort((a, b) => b.lines - a.lines)
  console.log(`${title} (${sorted.filter((m) => m.lines > over).length} over ${over} lines)`)
  for (const m of sorted.slice(0, limit)) console.log(`${String(m.lines).padStart(6)}  ${m.where}`)
}

show("files", fileSizes, fileLimit)
show("functions, whole", functions, functionLimit)
show("functions, own lines", functions.map((f) => ({ where: f.where, lines: f.own })), functionLimit)
