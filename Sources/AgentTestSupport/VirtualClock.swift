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

/// SplitMix64: a seeded generator so every run of a scenario is the same.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
