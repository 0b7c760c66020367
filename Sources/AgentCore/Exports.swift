// The core's public types carry JSON values (flag properties, the device API's bodies), so
// whoever imports the core sees the JSON module too.
@_exported import AgentJSON
