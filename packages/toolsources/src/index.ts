export * as ToolSources from "./ToolSources.ts"
