// Placeholder until the module lands.
enum AgentControlModule {}
