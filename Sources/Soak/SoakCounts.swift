import AgentCore

extension DeviceCall {
    /// How a failed request failed (`http 503`, `dropped`, `garbage`, `statusCode`); nil when it succeeded.
    public var failureKind: String? {
        guard !succeeded else { return nil }
        switch fault {
        case "drop"?: return "dropped"
        case "http"?, nil, "delay"?: return status.map { "http \($0)" } ?? "dropped"
        case let kind?: return kind
        }
    }
}

/// What one device did, or all of them (summary.json `counts.refreshes`, `perAgent[].counts`
/// and the report's counts table): refreshes by trigger as the device announced them
/// (`refreshCompleted`), refreshes answered from the throttle window, failed flags requests by
/// kind (the request log), expiries and discards (`featureFlagsDidUpdate`), restarts and user switches.
public struct SoakCounts: Sendable, Equatable {
    public var heard: HeardCounts
    public var requests: Int
    public var failuresByKind: [String: Int]
    public var restarts: Int
    public var userSwitches: Int

    public init(heard: HeardCounts, calls: [DeviceCall], restarts: Int, userSwitches: Int) {
        self.heard = heard
        requests = calls.count
        failuresByKind = [:]
        for c in calls { if let kind = c.failureKind { failuresByKind[kind, default: 0] += 1 } }
        self.restarts = restarts
        self.userSwitches = userSwitches
    }

    public static func total(_ all: [SoakCounts]) -> SoakCounts {
        var t = SoakCounts(heard: HeardCounts.total(all.map(\.heard)), calls: [], restarts: 0, userSwitches: 0)
        for c in all {
            t.requests += c.requests
            t.failuresByKind.merge(c.failuresByKind, uniquingKeysWith: +)
            t.restarts += c.restarts
            t.userSwitches += c.userSwitches
        }
        return t
    }

    public var failures: Int { failuresByKind.values.reduce(0, +) }

    public var json: JSONValue {
        func n(_ x: Int) -> JSONValue { .number(Double(x)) }
        return [
            "flagsRequests": n(requests),
            "refreshesByTrigger": .object(heard.byTrigger.mapValues(n)),
            "notSentThrottled": n(heard.notSentThrottled),
            "failuresByKind": .object(failuresByKind.mapValues(n)),
            "refreshErrorsByCode": .object(heard.failedByCode.mapValues(n)),
            "expiries": n(heard.expiries.count),
            "discards": n(heard.discards.count),
            "restarts": n(restarts),
            "userSwitches": n(userSwitches),
        ]
    }
}
