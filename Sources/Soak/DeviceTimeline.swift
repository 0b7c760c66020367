import AgentCore
import Foundation
import Synchronization

/// The device clocks of a real-timings run (docs/device-clock.md H): every agent's controlled clock and
/// the emulator's stand `offset` ahead of the runner's real clock, all by the same amount,
/// because the runner moves them together (`ClockDriver`). The checkers judge in device
/// time, so what the runner saw (real times) is converted with the offset that held then.
/// Without a real-timings run the offset stays 0 and conversion is the identity.
public final class DeviceTimeline: Sendable {
    private struct Segment: Sendable {
        var fromReal: Time
        var offset: Double
    }

    private let segments = Mutex<[Segment]>([Segment(fromReal: -.infinity, offset: 0)])

    public init() {}

    /// The offset in force now.
    public var offset: Double { segments.withLock { $0.last!.offset } }

    /// The device time now.
    public func deviceNow() -> Time { now() + offset }

    /// From `realTime` on, device time is `by` further ahead.
    public func advanced(by seconds: Double, atReal realTime: Time) {
        segments.withLock { $0.append(Segment(fromReal: realTime, offset: $0.last!.offset + seconds)) }
    }

    /// The device time at real time `t` (steps happen while nothing else runs). The checker
    /// converts every observation each second and a week has thousands of steps: the
    /// segments are sorted by `fromReal`, so the one in force is found by bisection.
    public func device(_ t: Time) -> Time {
        guard t.isFinite else { return t }
        return t + segments.withLock { all in
            var (low, high) = (0, all.count - 1)  // all[0] starts at -infinity
            while low < high {
                let mid = (low + high + 1) / 2
                if all[mid].fromReal <= t { low = mid } else { high = mid - 1 }
            }
            return all[low].offset
        }
    }
}

/// Lets the runner's clock steps happen while no driver is in the middle of an action
/// (or a restart): drivers take it shared, the clock driver exclusively.
public final class WorldGate: @unchecked Sendable {
    /// On the heap: a pthread lock must not move, and `&` of a stored property promises no address.
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    public init() {
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        // The clock's steps must not wait behind a stream of overlapping driver actions.
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(lock, &attributes)
        pthread_rwlockattr_destroy(&attributes)
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    public func shared<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    public func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
