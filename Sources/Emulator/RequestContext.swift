import EmulatorCore
import Synchronization

enum Pending {
    case respond(EmulatorResponse, Outcome.Delivery)
    case drop
    case reset
    /// A parked wait: its answer is in `Runtime.answers` under this connection key.
    case parked(UInt)
}

/// Per-request state kept in libmicrohttpd's `con_cls`; touched only by the
/// thread that serves the connection (never by the delay timer).
final class RequestContext {
    private(set) var body: [UInt8] = []
    private let budget: BodyBudget
    /// Bytes of `body` counted in `budget`.
    private var reserved = 0
    var tooLarge = false
    /// The largest body this request may carry (its route's).
    var limit = EmulatorConfiguration.maxDeviceBodyBytes
    /// Answered at the headers (no token, or a body announced over the limit).
    var refused = false
    var pending: Pending?
    /// The bodies of all connections together passed `BodyBudget.limit`: answered 503.
    var overBudget = false

    init(budget: BodyBudget) { self.budget = budget }

    deinit { budget.release(reserved) }

    /// Counts `n` more body bytes in the budget; false (nothing counted) when it is spent.
    func reserve(_ n: Int) -> Bool {
        guard budget.reserve(n) else { return false }
        reserved += n
        return true
    }

    func append(_ bytes: UnsafeBufferPointer<UInt8>) { body.append(contentsOf: bytes) }

    /// The body handed over (or dropped): its bytes leave the budget.
    func releaseBody() {
        body = []
        budget.release(reserved)
        reserved = 0
    }
}

/// Request bodies buffered at once, over all connections: past `limit` a request is
/// answered 503 rather than buffered, so many connections sending large bodies cannot
/// grow the emulator without bound (each is also limited on its own: 413).
final class BodyBudget: Sendable {
    static let limit = 64 << 20
    private let used = Atomic<Int>(0)

    func reserve(_ n: Int) -> Bool {
        var current = used.load(ordering: .relaxed)
        while true {
            guard current + n <= Self.limit else { return false }
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + n, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    func release(_ n: Int) {
        if n > 0 { used.subtract(n, ordering: .relaxed) }
    }

    var bytes: Int { used.load(ordering: .relaxed) }
}
