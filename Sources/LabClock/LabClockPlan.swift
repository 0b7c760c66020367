import FoundationEssentials

/// A device's clock as the lab clock sees it between two steps: how far it runs ahead of the
/// host's clock and the device time of its earliest armed timer (both as `clock` answers them).
public struct LabDeviceClock: Sendable, Equatable {
    /// Device time = host time + `offsetSeconds`.
    public var offsetSeconds: Double
    /// Unix seconds (device time) of the earliest armed timer; nil when none.
    public var nextTimerAt: Double?

    public init(offsetSeconds: Double, nextTimerAt: Double?) {
        self.offsetSeconds = offsetSeconds
        self.nextTimerAt = nextTimerAt
    }
}

/// One step of the lab clock: where it ends and how far each clock moves to get there.
public struct LabClockStep: Sendable, Equatable {
    /// The lab time (Unix seconds) the step ends at.
    public var target: Double
    /// How far the emulator's clock (and the lab's offset) moves: `target - here`.
    public var seconds: Double
    /// How far each device moves (by its index) so that it ends at `target` whatever it
    /// lagged; a device already there (within half a millisecond) is left out.
    public var deviceSeconds: [Int: Double]
}

/// The lab clock's planning, pure: the emulator's clock and every device's clock move
/// together, timer to timer. Each step ends a millisecond after the earliest timer any
/// device has armed (a timer already due or overdue: a millisecond from now), or at `limit`
/// if that comes first; so every timer runs with all clocks at its own time, a fault window
/// that ends between two devices' timers covers exactly the requests sent before its end, and
/// the emulator logs each request at the device time it was sent.
public enum LabClockPlan {
    /// How far past a timer a step ends (the timer is then due on the device).
    public static let pastTimer = 0.001
    /// A device less than this behind the lab is not moved.
    public static let slack = 0.0005

    /// The next step from lab time `here` (host time + `labOffset`) towards `limit`, given
    /// every reachable device's clock; nil when `limit` is reached.
    public static func step(here: Double, limit: Double, labOffset: Double, devices: [Int: LabDeviceClock]) -> LabClockStep? {
        var target = limit
        for clock in devices.values {
            if let next = clock.nextTimerAt { target = min(target, max(here + pastTimer, next + pastTimer)) }
        }
        let seconds = target - here
        guard seconds > 0 else { return nil }
        var moves: [Int: Double] = [:]
        for (index, clock) in devices {
            let move = labOffset + seconds - clock.offsetSeconds
            if move > slack { moves[index] = move }
        }
        return LabClockStep(target: target, seconds: seconds, deviceSeconds: moves)
    }
}
