import AgentCore

/// A fault scoped to one device for a window (Chaos.takeOneDeviceOffline): inside the
/// window every flags request of that device was dropped, and none of the others' was
/// faulted (one fault is armed at a time). `slack` keeps clear of the window's edges,
/// where the arming and the expiry race the requests.
public struct OutageChecker: Sendable {
    public var slack: Double = 0.5
    public private(set) var checks = 0
    private var done: Set<Int> = []

    public init() {}

    /// Checks each scoped fault whose window ended before `horizon` (the log is complete up to there), once.
    public mutating func check(faults: [ArmedFault], calls byHWID: [String: [DeviceCall]], hwids: [String], horizon: Time) -> [Violation] {
        var out: [Violation] = []
        for (index, fault) in faults.enumerated() where !done.contains(index) {
            guard let agent = fault.agent, let window = fault.window, agent < hwids.count else { continue }
            guard window.to + slack < horizon else { continue }
            done.insert(index)
            let (from, to) = (window.from + slack, window.to - slack)
            guard from < to else { continue }
            for (other, hwid) in hwids.enumerated() where !hwid.isEmpty {
                for call in byHWID[hwid] ?? [] where call.method == fault.method && call.time > from && call.time < to {
                    checks += 1
                    if other == agent, call.fault != "drop" || call.status != nil {
                        out.append(Violation("outage", agent: agent, time: call.time,
                                             "a flags request inside the device's outage window was not dropped",
                                             evidence: ["window \(iso8601(window.from))…\(iso8601(window.to)) for \(hwid)", describe(call)]))
                    } else if other != agent, call.fault != nil {
                        out.append(Violation("outage", agent: other, time: call.time,
                                             "a fault scoped to agent \(agent)'s HWID hit another device",
                                             evidence: ["window \(iso8601(window.from))…\(iso8601(window.to)) for \(hwids[agent])", describe(call)]))
                    }
                }
            }
        }
        return out
    }
}
