export * as Elicitation from "./Elicitation.ts"
export * as ToolSources from "./ToolSources.ts"
