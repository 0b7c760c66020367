import Foundation
import Synchronization

/// Where the emulator reads the host's wall time (docs/emulator.md D.3). The emulator's own
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
