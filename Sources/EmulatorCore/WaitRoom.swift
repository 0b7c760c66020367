import AgentCore
import Foundation

/// The parked `GET /admin/requests/wait` calls (docs/emulator.md D.3), by ticket. Each keeps a
/// running count of the matching calls, and waits are indexed by the HWID they ask
/// for, so a device call costs a check of only the waits it could complete, however
/// many others are parked.
public struct WaitRoom: Sendable {
    struct Parked: Sendable {
        let wait: RequestWait
        var matched: Int
    }

    var parked: [Int: Parked] = [:]
    /// Tickets of waits with an `hwid` filter, by that HWID; the others are `unscoped`.
    var byHWID: [String: Set<Int>] = [:]
    var unscoped: Set<Int> = []
    var nextTicket = 1

    public init() {}

    /// How many waits are parked.
    public var count: Int { parked.count }

    mutating func insert(_ wait: RequestWait, matched: Int) -> Int {
        let ticket = nextTicket
        nextTicket += 1
        parked[ticket] = Parked(wait: wait, matched: matched)
        if let hwid = wait.filter.hwid { byHWID[hwid, default: []].insert(ticket) } else { unscoped.insert(ticket) }
        return ticket
    }

    @discardableResult
    mutating func remove(_ ticket: Int) -> Parked? {
        guard let p = parked.removeValue(forKey: ticket) else { return nil }
        if let hwid = p.wait.filter.hwid {
            byHWID[hwid]?.remove(ticket)
            if byHWID[hwid]?.isEmpty == true { byHWID[hwid] = nil }
        } else {
            unscoped.remove(ticket)
        }
        return p
    }

    /// The tickets a call by `hwid` could complete.
    func candidates(hwid: String?) -> [Int] {
        var out = Array(unscoped)
        if let hwid, let scoped = byHWID[hwid] { out += scoped }
        return out.sorted()
    }
}

extension EmulatorState {
    /// Parks `wait` and returns its ticket; the server holds the connection until
    /// `wakeParkedWaits(for:)` or `timeOutWait(_:)` answers it.
    public mutating func park(_ wait: RequestWait) -> Int {
        waits.insert(wait, matched: requestLog.count(wait.filter))
    }

    /// The parked waits that the call just recorded completes, answered and removed.
    mutating func wakeParkedWaits(for call: RecordedRequest) -> [(ticket: Int, outcome: Outcome)] {
        guard waits.count > 0 else { return [] }
        var woken: [(ticket: Int, outcome: Outcome)] = []
        var answers: [RequestWait: Outcome?] = [:]  // a thousand waits for the same thing: one answer
        for ticket in waits.candidates(hwid: call.hwid) {
            guard var p = waits.parked[ticket], p.wait.filter.matches(call) else { continue }
            p.matched += 1
            guard p.matched >= p.wait.count else { waits.parked[ticket] = p; continue }
            let outcome: Outcome?
            if let known = answers[p.wait] { outcome = known } else {
                outcome = answer(p.wait, timedOut: false)
                answers[p.wait] = outcome
            }
            if let outcome {
                woken.append((ticket, outcome))
                waits.remove(ticket)
            } else {
                p.matched = requestLog.count(p.wait.filter)  // old calls were trimmed from the log meanwhile
                waits.parked[ticket] = p
            }
        }
        return woken
    }

    /// Brings every parked wait's count up to date after the log lost calls (cleared, reset, loaded).
    mutating func recountParkedWaits() {
        for ticket in waits.parked.keys.sorted() { waits.parked[ticket]!.matched = requestLog.count(waits.parked[ticket]!.wait.filter) }
    }

    /// The answer for a parked wait whose timeout fired (408 with what arrived, or
    /// 200 if enough arrived meanwhile); nil when it was answered already.
    public mutating func timeOutWait(_ ticket: Int) -> Outcome? {
        guard let p = waits.remove(ticket) else { return nil }
        return answer(p.wait, timedOut: true)
    }

    /// Forgets every parked wait (the server stopped: their connections are closed).
    public mutating func cancelAllWaits() { waits = WaitRoom() }

    /// Forgets a parked wait (its connection is gone).
    public mutating func cancelWait(_ ticket: Int) { waits.remove(ticket) }

    public var parkedWaits: Int { waits.count }
}
