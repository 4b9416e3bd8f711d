/** The SDK's version, as its package.json says; the `serverInfo.version` of its MCP sessions. */
export const version = "0.1.0"
