import FoundationEssentials

/// docs/device-clock.md H: the device's clock. With `Clock=system` it is the host's; with
/// `Clock=controlled` it is the host's plus `offset`, which only moves forward
/// (`advance(by:)`), in both kinds of time at once: scheduling (monotonic) and the wall
/// time that ages stored flags (ST-1, ST-3). What belongs to the host (request timeouts,
/// the watchdog, idle connections, log stamps) keeps using the host's clock.
public final class DeviceClock: AgentClock {
    public let base: any AgentClock
    public let mode: DeviceClockMode
    public private(set) var offset: Seconds

    public init(base: any AgentClock, mode: DeviceClockMode, offset: Seconds = 0) {
        self.base = base
        self.mode = mode
        self.offset = mode == .controlled ? max(0, offset) : 0
    }

    // With Clock=system the offset is 0 for good: not read (each read of a class's `var` is
    // a checked access, and every socket read asks the time).
    public var monotonic: Seconds { mode == .controlled ? base.monotonic + offset : base.monotonic }
    public var wall: Date { mode == .controlled ? base.wall.addingTimeInterval(offset) : base.wall }

    /// Moves the device's time forward by `seconds` (≥ 0); the clock is controlled.
    public func advance(by seconds: Seconds) {
        precondition(mode == .controlled, "the device clock is not controlled")
        precondition(seconds >= 0 && seconds.isFinite, "the device clock only moves forward, not by \(seconds) s")
        offset += seconds
    }

    /// The host's monotonic time at which the device's clock reads `deviceMonotonic`.
    public func hostMonotonic(_ deviceMonotonic: Seconds) -> Seconds { deviceMonotonic - offset }
}
