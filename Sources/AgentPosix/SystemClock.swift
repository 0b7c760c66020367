import AgentCore
import FoundationEssentials

/// The real clocks: CLOCK_MONOTONIC for scheduling (the same base as `EventLoop`), the
/// system's wall clock for the 24-hour validity of stored flags (ST-1).
public final class SystemClock: AgentClock {
    public init() {}
    public var monotonic: Seconds { monotonicSeconds() }
    public var wall: Date { Date() }
}
