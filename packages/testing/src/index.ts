export * as FakeUpstream from "./FakeUpstream.ts"
export * as Http from "./Http.ts"
export * as TestDatabase from "./TestDatabase.ts"
export * as TestNode from "./TestNode.ts"
