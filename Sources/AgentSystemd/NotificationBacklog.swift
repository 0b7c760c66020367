/// What is still to be said to the service manager while its notify socket is full
/// (`SystemdNotifier` reported `.wouldBlock`). A value: the daemon appends, flushes
/// when it retries, and never waits.
///
/// Order is kept where it means something: state changes (`READY=1`, `RELOADING=1`,
/// `STOPPING=1`) are never dropped nor reordered. What only describes the present is
/// coalesced: a newer `STATUS=` replaces a pending one that no state change follows, and
/// one pending `WATCHDOG=1` stands for any number (systemd only needs the next ping).
public struct NotificationBacklog: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// `READY=1`, `RELOADING=1`, `STOPPING=1` (with or without `STATUS=`).
        case state
        /// Only `STATUS=`.
        case status
        /// Only `WATCHDOG=1`.
        case watchdog
    }

    public struct Entry: Sendable, Equatable {
        public var kind: Kind
        public var message: String
    }

    /// At most this many state changes are kept; older ones give way (a daemon stuck
    /// this long has told the manager nothing for a long time anyway).
    public static let limit = 32

    public private(set) var entries: [Entry] = []

    public init() {}

    public var isEmpty: Bool { entries.isEmpty }

    public mutating func append(_ kind: Kind, _ message: String) {
        switch kind {
        case .watchdog:
            if entries.contains(where: { $0.kind == .watchdog }) { return }
        case .status:
            if let last = entries.lastIndex(where: { $0.kind != .watchdog }), entries[last].kind == .status {
                entries[last].message = message
                return
            }
        case .state:
            break
        }
        entries.append(Entry(kind: kind, message: message))
        if entries.count > Self.limit, let first = entries.firstIndex(where: { $0.kind != .watchdog }) {
            entries.remove(at: first)
        }
    }

    /// Sends the entries in order until one would block; a message that fails for
    /// another reason (the manager is gone) is dropped, as an unbuffered send would be.
    /// Returns how many were delivered.
    @discardableResult
    public mutating func flush(_ send: (String) -> NotifyOutcome) -> Int {
        var delivered = 0
        while let first = entries.first {
            switch send(first.message) {
            case .wouldBlock: return delivered
            case .sent: delivered += 1
            case .notConfigured, .failed: break
            }
            entries.removeFirst()
        }
        return delivered
    }
}
