export * as Codemode from "./Codemode.ts"
