import AgentCore
import Foundation

/// Armed faults in arming order. A call takes one firing from the first fault
/// that is in scope, still active and (with `probability`) draws a hit; a fault
/// leaves when its `times` are spent or its `forSeconds` window has passed.
public struct FaultQueue: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        /// Arming order, shown by `GET /admin/faults`.
        public let id: Int
        public let fault: Fault
        /// Firings left; nil: unlimited until `until`.
        public fileprivate(set) var remaining: Int?
        /// End of the `forSeconds` window (emulator time).
        public let until: Date?
        fileprivate var random: SeededRandom?

        public var json: JSONValue {
            guard case .object(var o) = fault.json else { return fault.json }
            o["id"] = .number(Double(id))
            o["remaining"] = remaining.map { .number(Double($0)) } ?? .null
            o["until"] = until.map { .string(Timestamp.format($0)) } ?? .null
            return .object(o)
        }

        func active(at now: Date) -> Bool { until.map { now < $0 } ?? true }
    }

    public private(set) var entries: [Entry] = []
    private var nextId = 1

    public init() {}

    /// Arms `fault` at emulator time `now` (the start of its `forSeconds`).
    @discardableResult
    public mutating func arm(_ fault: Fault, now: Date = Date(timeIntervalSince1970: 0)) -> Entry {
        let entry = Entry(id: nextId, fault: fault, remaining: fault.times,
                          until: fault.forSeconds.map { now.addingTimeInterval($0) },
                          random: fault.probability.map { _ in SeededRandom(seed: fault.seed ?? 0) })
        nextId += 1
        entries.append(entry)
        return entry
    }

    public mutating func clear() { entries.removeAll() }

    public var isEmpty: Bool { entries.isEmpty }

    /// The fault for this call, if one fires, with the firings left for the method
    /// after it (nil: unlimited).
    public mutating func next(for method: String, hwid: String? = nil, userId: String? = nil,
                              now: Date = Date(timeIntervalSince1970: 0)) -> (fault: Fault, remaining: Int?)? {
        expire(now)
        for k in entries.indices where entries[k].fault.method == method && entries[k].fault.scopeMatches(hwid: hwid, userId: userId) {
            if let p = entries[k].fault.probability {
                guard entries[k].random!.unit() < p else { continue }  // a miss: the next fault may fire
            }
            let fault = entries[k].fault
            if let left = entries[k].remaining {
                entries[k].remaining = left - 1
                if left == 1 { entries.remove(at: k) }
            }
            var remaining: Int? = 0
            for e in entries where e.fault.method == method {
                guard let r = e.remaining, let sum = remaining else { remaining = nil; break }
                remaining = sum + r
            }
            return (fault, remaining)
        }
        return nil
    }

    /// Drops the faults whose window has passed.
    public mutating func expire(_ now: Date) {
        entries.removeAll { !$0.active(at: now) }
    }

    /// The faults still armed at `now`, in arming order.
    public func armed(at now: Date) -> [Entry] { entries.filter { $0.active(at: now) } }

    /// The faults still armed, per method in arming order, `times` set to what is left.
    public var pending: [Fault] {
        entries.enumerated().sorted { ($0.element.fault.method, $0.offset) < ($1.element.fault.method, $1.offset) }.map { e in
            var f = e.element.fault
            f.times = e.element.remaining
            return f
        }
    }
}
