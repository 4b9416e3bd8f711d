export * as Assets from "./Assets.ts"
