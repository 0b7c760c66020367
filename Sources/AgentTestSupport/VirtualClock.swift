import AgentCore
import Foundation

/// A clock that moves only when told: monotonic and wall time advance together, and the
/// wall clock can be stepped alone (an NTP jump, a wrong RTC after reboot).
public final class VirtualClock: AgentClock {
    public private(set) var monotonic: Seconds
    public private(set) var wall: Date

    public init(monotonic: Seconds = 1_000, wall: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        self.monotonic = monotonic
        self.wall = wall
    }

    /// Moves both clocks forward by `seconds`.
    public func advance(by seconds: Seconds) {
        precondition(seconds >= 0, "time never goes back: \(seconds)")
        monotonic += seconds
        wall = wall.addingTimeInterval(seconds)
    }

    /// Moves both clocks forward to monotonic time `target`.
    public func advance(to target: Seconds) {
        advance(by: max(0, target - monotonic))
    }

    /// Steps the wall clock alone, forwards or backwards.
    public func stepWall(by seconds: Seconds) {
        wall = wall.addingTimeInterval(seconds)
    }

    /// A process restart: monotonic time restarts from an arbitrary origin, wall time goes on.
    public func reboot(monotonicOrigin: Seconds = 0) {
        monotonic = monotonicOrigin
    }
}
