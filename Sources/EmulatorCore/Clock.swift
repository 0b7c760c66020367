import Foundation
import Synchronization

/// Where the emulator reads the host's wall time (PROTOCOL D.3). The emulator's own
/// time is this plus the state's clock offset (`POST /admin/clock`); tests inject a
/// `ManualClock` and run in virtual time.
public protocol EmulatorClock: Sendable {
    func now() -> Date
}

/// The real wall clock.
public struct SystemClock: EmulatorClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that moves only when told (tests, tools).
public final class ManualClock: EmulatorClock {
    private let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    public func now() -> Date { current.withLock { $0 } }

    public func advance(by seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }

    public func set(_ date: Date) { current.withLock { $0 = date } }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny deterministic generator for the
/// `probability` faults, so the same `seed` gives the same hits and misses.
public struct SplitMix64: Sendable, Equatable {
    public private(set) var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A double in [0, 1) from the top 53 bits.
    public mutating func nextUnit() -> Double { Double(next() >> 11) * 0x1.0p-53 }
}
