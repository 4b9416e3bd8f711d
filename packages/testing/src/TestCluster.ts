/**
 * Several runner processes on one database: a cluster as operators run it,
 * for the fault suite and the cluster benchmark. Each member keeps its
 * RUNNER_ADDRESS across restarts, as a node restarted in place does.
 */
import { Effect, Scope } from "effect"
import * as Crypto from "node:crypto"
import * as TcpProxy from "./TcpProxy.ts"
import * as TestNode from "./TestNode.ts"

export interface Member {
  readonly runnerAddress: string
  /** The running process; replaced by `restart`. */
  readonly node: TestNode.TestNode
  /** False while stopped or paused: not to be sent requests. */
  readonly up: boolean
  /** The member's own way to the database, kept across restarts (with `proxied`). */
  readonly proxy: TcpProxy.TcpProxy | undefined
}

export interface TestCluster {
  readonly operatorToken: string
  readonly members: ReadonlyArray<Member>
  /** Every process started so far, stopped ones included, with its member's index: for logs after a failure. */
  readonly started: ReadonlyArray<{ readonly index: number; readonly node: TestNode.TestNode }>
  /** REST base URLs of the members that are up. */
  readonly live: () => ReadonlyArray<string>
  /** A `fetch` that sends each request to a member that is up, as a load balancer in front of the cluster would. */
  readonly fetchThroughLive: typeof globalThis.fetch
  readonly stop: (index: number, signal?: NodeJS.Signals) => Effect.Effect<TestNode.Exit>
  readonly start: (index: number) => Effect.Effect<TestNode.TestNode, Error>
  readonly pause: (index: number) => Effect.Effect<void>
  readonly resume: (index: number) => Effect.Effect<void>
}

export interface Options {
  /** The server's entry script (see `TestNode.Options`). */
  readonly script?: string
  /** Node's flags for `script` (see `TestNode.Options`). */
  readonly flags?: ReadonlyArray<string>
  readonly size: number
  readonly databaseUrl: string
  readonly env?: Record<string, string>
  /** Each member reaches the database through its own TCP proxy, so a test can cut one off, or all. */
  readonly proxied?: boolean
}

export const start = (options: Options): Effect.Effect<TestCluster, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const operatorToken = `aro_${Crypto.randomBytes(32).toString("base64url")}`
    // One key for the cluster, as in production: agent tokens and sealed secrets made on one node open on all.
    const sealingKey = Crypto.randomBytes(32).toString("base64")
    const addresses = yield* Effect.forEach(
      Array.from({ length: options.size }),
      () => Effect.map(TestNode.freePort, (port) => `127.0.0.1:${port}`)
    )
    const proxies = yield* Effect.forEach(addresses, () =>
      options.proxied === true ? TcpProxy.start(options.databaseUrl) : Effect.succeed(undefined))
    const launch = (address: string) =>
      TestNode.start({
        ...(options.script === undefined ? {} : { script: options.script }),
        ...(options.flags === undefined ? {} : { flags: options.flags }),
        databaseUrl: proxies[addresses.indexOf(address)]?.url ?? options.databaseUrl,
        operatorToken,
        env: { SEALING_KEY: sealingKey, ...options.env, RUNNER_ADDRESS: address }
      }).pipe(Scope.extend(scope))
    const nodes = yield* Effect.forEach(addresses, launch, { concurrency: "unbounded" })
    const members: Array<
      { runnerAddress: string; node: TestNode.TestNode; up: boolean; proxy: TcpProxy.TcpProxy | undefined }
    > = nodes.map((node, i) => ({ runnerAddress: addresses[i]!, node, up: true, proxy: proxies[i] }))
    const started = nodes.map((node, index) => ({ index, node }))
    return {
      operatorToken,
      members,
      started,
      live: () =>
        members.filter((member) => member.up).map((member) => member.node.rest),
      fetchThroughLive: (input, init) => {
        const url = new URL(input instanceof Request ? input.url : String(input))
        const live = members.filter((member) => member.up)
        const target = live[Math.floor(Math.random() * live.length)]
        if (target !== undefined) url.host = new URL(target.node.rest).host
        return globalThis.fetch(url, init)
      },
      stop: (index, signal = "SIGTERM") =>
        Effect.suspend(() => {
          members[index]!.up = false
          return members[index]!.node.stop(signal)
        }),
      start: (index) =>
        Effect.map(launch(members[index]!.runnerAddress), (node) => {
          members[index]!.node = node
          members[index]!.up = true
          started.push({ index, node })
          return node
        }),
      pause: (index) =>
        Effect.suspend(() => {
          members[index]!.up = false
          return members[index]!.node.signal("SIGSTOP")
        }),
      resume: (index) =>
        Effect.map(members[index]!.node.signal("SIGCONT"), () => {
          members[index]!.up = true
        })
    }
  })
