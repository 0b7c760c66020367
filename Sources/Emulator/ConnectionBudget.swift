import AgentPosix
import Glibc
import MicroHTTPD
import Synchronization

/// The emulator's connections and what they may hold (docs/emulator.md D.5): at most `limit`
/// open at once, and past it the connection idle the longest is closed for the new one.
///
/// A connection is *idle* from the moment it is accepted (plain, or in its TLS handshake) until
/// its request is whole (headers and body), and again once an answer has gone out on a
/// kept-alive connection; it is *busy* while its request is handled, delayed, parked
/// (`GET /admin/requests/wait`) or its answer sent, and a busy connection is never closed for
/// another. So connections that send nothing, or drip a request, cannot keep `/admin/*` or the
/// device API from being served: each new connection past the limit closes the oldest idle one
/// (with `shutdown(2)`, which libmicrohttpd's own thread then sees as the peer's end). Beside the
/// limit, libmicrohttpd closes a connection quiet for `--idle-timeout` seconds
/// (`MHD_OPTION_CONNECTION_TIMEOUT`; a suspended one, parked or delayed, is not timed).
///
/// Called from libmicrohttpd's threads; one lock. A descriptor is shut down only under the lock
/// and only while its connection is registered: libmicrohttpd tells a connection's end
/// (`MHD_CONNECTION_NOTIFY_CLOSED`, which takes the lock) before it closes the descriptor, so a
/// number reused by a newer connection is never shut down in its stead.
final class ConnectionBudget: Sendable {
    let limit: Int
    private let log: (@Sendable (String) -> Void)?
    private let state = Mutex(Registry())

    struct Registry {
        var open: [UInt: Entry] = [:]
        /// Idle connections, oldest first; an element is stale when its connection is gone or
        /// has become busy (or idle again) since: `(key, generation)` no longer matches.
        var idle: [(key: UInt, generation: UInt64)] = []
        var idleHead = 0
        var nextGeneration: UInt64 = 0
        var closed = 0
        var closedSinceLog = 0
        var lastLog: Double = -.infinity
    }

    struct Entry {
        var fd: Int32
        var busy: Bool
        var generation: UInt64
        /// Shut down for a newer connection: never idle again, never chosen twice.
        var closing = false
    }

    init(limit: Int, log: (@Sendable (String) -> Void)?) {
        self.limit = limit
        self.log = log
    }

    /// Connections open now (tests, tools).
    var count: Int { state.withLock { $0.open.count } }
    /// Connections closed for newer ones since the start.
    var closedForNewer: Int { state.withLock { $0.closed } }
    /// Elements of the idle queue, stale ones included (tests: it stays bounded).
    var queued: Int { state.withLock { $0.idle.count - $0.idleHead } }

    /// A connection was accepted: it counts, and past the limit the oldest idle one is closed.
    func opened(_ key: UInt, fd: Int32) {
        let line: String? = state.withLock { r in
            r.nextGeneration += 1
            r.open[key] = Entry(fd: fd, busy: false, generation: r.nextGeneration)
            r.idle.append((key, r.nextGeneration))
            Self.compact(&r)
            guard r.open.count > limit, let victim = Self.oldestIdle(&r) else { return nil }
            shutdown(victim.fd, Int32(SHUT_RDWR))
            r.closed += 1
            r.closedSinceLog += 1
            let now = monotonicSeconds()
            guard now - r.lastLog >= 10 else { return nil }
            defer {
                r.lastLog = now
                r.closedSinceLog = 0
            }
            return "connection limit reached: closed the longest-idle connections for newer ones limit=\(limit) closed=\(r.closedSinceLog)"
        }
        if let line { log?(line) }
    }

    /// The connection has gone (libmicrohttpd has not closed its descriptor yet).
    func closed(_ key: UInt) {
        state.withLock { r in
            r.open[key] = nil
            Self.compact(&r)
        }
    }

    /// Its request is whole: handled from now on, never closed for another.
    func busy(_ key: UInt) {
        state.withLock { r in
            guard r.open[key]?.busy == false else { return }
            r.nextGeneration += 1
            r.open[key]?.busy = true
            r.open[key]?.generation = r.nextGeneration
        }
    }

    /// Its answer is out (or it is closing): idle again, the newest.
    func idle(_ key: UInt) {
        state.withLock { r in
            guard let entry = r.open[key], entry.busy, !entry.closing else { return }
            r.nextGeneration += 1
            r.open[key]?.busy = false
            r.open[key]?.generation = r.nextGeneration
            r.idle.append((key, r.nextGeneration))
            Self.compact(&r)  // a kept-alive connection adds one element per request
        }
    }

    /// Takes the oldest idle connection off the queue (it stays registered until libmicrohttpd
    /// tells its end, and is never chosen twice).
    private static func oldestIdle(_ r: inout Registry) -> Entry? {
        while r.idleHead < r.idle.count {
            let (key, generation) = r.idle[r.idleHead]
            r.idleHead += 1
            if var entry = r.open[key], !entry.busy, entry.generation == generation {
                r.nextGeneration += 1
                entry.busy = true
                entry.closing = true
                entry.generation = r.nextGeneration
                r.open[key] = entry
                return entry
            }
        }
        return nil
    }

    /// Drops the queue's stale front and, now and then, its consumed part.
    private static func compact(_ r: inout Registry) {
        if r.idleHead > 1024, r.idleHead * 2 > r.idle.count {
            r.idle.removeFirst(r.idleHead)
            r.idleHead = 0
        }
        if r.idle.count > 4 * max(64, r.open.count) {  // mostly stale: keep only the live idle ones
            let open = r.open
            r.idle = r.idle[r.idleHead...].filter { item in open[item.key].map { !$0.busy && $0.generation == item.generation } ?? false }
            r.idleHead = 0
        }
    }
}
