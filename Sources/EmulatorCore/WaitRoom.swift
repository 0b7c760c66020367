import AgentCore
import Foundation

/// The parked `GET /admin/requests/wait` calls (PROTOCOL D.3), by ticket. Each keeps a
/// running count of the matching calls, so a new device call costs one filter check
/// per parked wait, not a scan of the log.
public struct WaitRoom: Sendable {
    struct Parked: Sendable {
        let wait: RequestWait
        var matched: Int
        /// `RequestLog.appended` when `matched` was last brought up to date.
        var mark: Int
    }

    var parked: [Int: Parked] = [:]
    var nextTicket = 1

    public init() {}

    /// How many waits are parked.
    public var count: Int { parked.count }
}

extension RequestLog {
    /// The calls appended after `mark` (an earlier `appended`), or nil when some of
    /// them are gone (trimmed or cleared).
    func appended(after mark: Int) -> ArraySlice<RecordedRequest>? {
        let start = mark - (appended - entriesCount)
        guard start >= 0, start <= entriesCount else { return nil }
        return entriesSuffix(from: start)
    }
}

extension EmulatorState {
    /// Parks `wait` and returns its ticket; the server holds the connection until
    /// `wakeParkedWaits()` or `timeOutWait(_:)` answers it.
    public mutating func park(_ wait: RequestWait) -> Int {
        let ticket = waits.nextTicket
        waits.nextTicket += 1
        waits.parked[ticket] = WaitRoom.Parked(wait: wait, matched: requestLog.count(wait.filter), mark: requestLog.appended)
        return ticket
    }

    /// The parked waits that have what they asked for now, answered and removed.
    public mutating func wakeParkedWaits() -> [(ticket: Int, outcome: Outcome)] {
        guard !waits.parked.isEmpty else { return [] }
        let now = requestLog.appended
        var woken: [(ticket: Int, outcome: Outcome)] = []
        for (ticket, var p) in waits.parked where p.mark != now {
            if let fresh = requestLog.appended(after: p.mark) {
                p.matched += fresh.reduce(0) { $0 + (p.wait.filter.matches($1) ? 1 : 0) }
            } else {
                p.matched = requestLog.count(p.wait.filter)
            }
            p.mark = now
            if p.matched >= p.wait.count, let outcome = answer(p.wait, timedOut: false) {
                woken.append((ticket, outcome))
                waits.parked[ticket] = nil
            } else {
                if p.matched >= p.wait.count { p.matched = requestLog.count(p.wait.filter) }  // cleared meanwhile
                waits.parked[ticket] = p
            }
        }
        return woken.sorted { $0.ticket < $1.ticket }
    }

    /// The answer for a parked wait whose timeout fired (408 with what arrived, or
    /// 200 if enough arrived meanwhile); nil when it was answered already.
    public mutating func timeOutWait(_ ticket: Int) -> Outcome? {
        guard let p = waits.parked.removeValue(forKey: ticket) else { return nil }
        return answer(p.wait, timedOut: true)
    }

    /// Forgets a parked wait (its connection is gone).
    public mutating func cancelWait(_ ticket: Int) { waits.parked[ticket] = nil }

    public var parkedWaits: Int { waits.count }
}
