import Synchronization

/// The event loop's time, in monotonic seconds (docs/architecture.md §4: the loop takes a clock too).
/// `SystemLoopClock` (the default) reads `CLOCK_MONOTONIC` and time passes by itself: the
/// loop sleeps in `epoll_wait` until the next deadline. `ManualLoopClock` moves only when
/// told: the loop then waits for I/O alone, and each `advance` wakes it to run the timers
/// that came due, so timer and idle-timeout tests take no real time.
public protocol LoopClock: AnyObject, Sendable {
    /// Monotonic seconds now. Any thread.
    var now: Double { get }
    /// False for a clock that moves only when told (the loop never sleeps for a deadline).
    var passesByItself: Bool { get }
    /// Called once by each loop that uses the clock: `wake` (callable from any thread)
    /// makes that loop look at its timers again.
    func attach(wake: @escaping @Sendable () -> Void)
}

/// `CLOCK_MONOTONIC`.
public final class SystemLoopClock: LoopClock {
    public static let shared = SystemLoopClock()
    public init() {}
    public var now: Double { monotonicSeconds() }
    public var passesByItself: Bool { true }
    public func attach(wake: @escaping @Sendable () -> Void) {}
}

/// A loop clock that moves only when told (tests). Thread-safe.
public final class ManualLoopClock: LoopClock {
    private struct State {
        var now: Double
        var wakes: [@Sendable () -> Void] = []
    }

    private let state: Mutex<State>

    public init(now: Double = 1_000) { state = Mutex(State(now: now)) }

    public var now: Double { state.withLock { $0.now } }
    public var passesByItself: Bool { false }

    public func attach(wake: @escaping @Sendable () -> Void) {
        state.withLock { $0.wakes.append(wake) }
    }

    /// Moves time forward by `seconds` and wakes the loops that use this clock.
    public func advance(by seconds: Double) {
        precondition(seconds >= 0, "time never goes back: \(seconds)")
        let wakes = state.withLock { s -> [@Sendable () -> Void] in
            s.now += seconds
            return s.wakes
        }
        for wake in wakes { wake() }
    }
}
