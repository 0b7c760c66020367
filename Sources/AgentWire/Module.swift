// Placeholder until the module lands; see the issues.
enum AgentWireModule {}
