import AgentCore
import Foundation

// The checks the coverage plan's duties feed (CoveragePlan): pure values, as the other
// checkers, fed what the drivers saw (in device time) and the emulator's request log.

/// The expiry duty's looks (ST-3): the status that dated the flags, then a status and a `get`
/// 60 s before their lifetime ends and 60 s after.
public struct ExpiryProbe: Sendable {
    public var agent: Int
    /// The status the duty dated the flags by (received = answered − age).
    public var dated: StatusObservation
    public var beforeStatus: StatusObservation
    public var beforeFlag: FlagObservation
    public var afterStatus: StatusObservation
    public var afterFlag: FlagObservation

    public init(agent: Int, dated: StatusObservation, beforeStatus: StatusObservation, beforeFlag: FlagObservation,
                afterStatus: StatusObservation, afterFlag: FlagObservation) {
        self.agent = agent
        self.dated = dated
        self.beforeStatus = beforeStatus
        self.beforeFlag = beforeFlag
        self.afterStatus = afterStatus
        self.afterFlag = afterFlag
    }

    /// When the flags were received, at the earliest: the status measured their age (to the
    /// millisecond) after it was sent, so the edge is never placed late.
    public var receivedAt: Time { dated.sent - (dated.flagsAgeSeconds ?? 0) }

    public mutating func convert(_ dev: (Time) -> Time) {
        for keyPath in [\ExpiryProbe.dated, \.beforeStatus, \.afterStatus] {
            self[keyPath: keyPath].sent = dev(self[keyPath: keyPath].sent)
            self[keyPath: keyPath].received = dev(self[keyPath: keyPath].received)
        }
        for keyPath in [\ExpiryProbe.beforeFlag, \.afterFlag] {
            self[keyPath: keyPath].sent = dev(self[keyPath: keyPath].sent)
            self[keyPath: keyPath].received = dev(self[keyPath: keyPath].received)
        }
    }
}

/// ST-3 at the edge: flags that reach their lifetime with no refresh in between are served a
/// minute before it, gone a minute after it, and the agent said `expired` (LS-3) in between.
/// A probe whose device sent a flags request after the flags' receipt, or whose looks missed
/// their minute, checks nothing and says so in `notes`.
public struct ExpiryChecker: Sendable {
    public var lifetime: Double
    public private(set) var checks = 0
    public private(set) var notes: [String] = []

    public init(lifetime: Double) { self.lifetime = lifetime }

    /// How early an expiry may be seen (the edge is held to the millisecond).
    public static let edgeTolerance = 0.001

    /// - Parameters:
    ///   - calls: the device's `getFeatureFlags` calls, complete up to `probe.afterFlag.received`.
    ///   - expiries: when the device's `featureFlagsDidUpdate` `expired` notifications arrived, in
    ///     device time to the millisecond (their `at` is stamped to the second only).
    public mutating func check(_ p: ExpiryProbe, calls: [DeviceCall], expiries: [Time]) -> [Violation] {
        let edge = p.receivedAt + lifetime
        if let c = calls.first(where: { $0.time > p.receivedAt + 1 && $0.time <= p.afterFlag.received }) {
            notes.append("agent \(p.agent): the expiry look checked nothing: a flags request at \(iso8601(c.time)) renewed the flags")
            return []
        }
        guard p.beforeFlag.sent >= edge - 120, p.beforeFlag.received < edge - 0.01, p.afterFlag.sent > edge + 0.01 else {
            notes.append("agent \(p.agent): the expiry looks at \(iso8601(p.beforeFlag.sent)) and \(iso8601(p.afterFlag.sent)) missed the minutes around \(iso8601(edge))")
            return []
        }
        checks += 1
        var out: [Violation] = []
        let evidence = ["flags received \(iso8601(p.receivedAt)) (status answered \(iso8601(p.dated.received)), flagsAgeSeconds \(p.dated.flagsAgeSeconds ?? 0)); they expire \(iso8601(edge))",
                        "before: " + describe(p.beforeFlag), "before: status flagsCount \(p.beforeStatus.flagsCount), state \(p.beforeStatus.state)",
                        "after: " + describe(p.afterFlag), "after: status flagsCount \(p.afterStatus.flagsCount), state \(p.afterStatus.state)",
                        "expired notifications at: " + (expiries.isEmpty ? "none" : expiries.map(iso8601).joined(separator: ", "))]
        func v(_ at: Time, _ m: String) { out.append(Violation("expiry", agent: p.agent, time: at, m, evidence: evidence)) }
        if p.beforeFlag.ageSeconds == nil || p.beforeStatus.flagsAgeSeconds == nil || p.beforeStatus.flagsCount == 0 {
            v(p.beforeFlag.received, "flags \(Int(p.beforeFlag.sent - p.receivedAt)) s old (under the lifetime of \(Int(lifetime)) s) are not served")
        }
        if p.afterFlag.ageSeconds != nil || p.afterFlag.errorCode != "PROVIDER_NOT_READY" || p.afterStatus.flagsCount != 0
            || p.afterStatus.flagsAgeSeconds != nil {
            v(p.afterFlag.received, "flags \(Int(p.afterFlag.sent - p.receivedAt)) s old (past the lifetime of \(Int(lifetime)) s) are still served")
        }
        // To the millisecond: the notification's arrival on the device's clock (never before the
        // expiry itself), against the earliest the flags can have been received.
        if let early = expiries.first(where: { $0 > p.receivedAt && $0 < edge - Self.edgeTolerance }) {
            v(early, String(format: "flags expired %.3f s before their lifetime of \(Int(lifetime)) s ended", edge - early)
                + " (featureFlagsDidUpdate expired at \(iso8601(early)), the edge at \(iso8601(edge)))")
        } else if !expiries.contains(where: { $0 >= edge - Self.edgeTolerance && $0 <= p.afterFlag.received + 1 }) {
            v(p.afterFlag.received, "no featureFlagsDidUpdate expired between \(iso8601(edge)) and \(iso8601(p.afterFlag.received))")
        }
        return out
    }
}

/// A restart's two looks at the stored flags: the status before the stop, and the status of
/// the new process, started in the background (no session, so no refresh), before anything else.
public struct CacheProbe: Sendable {
    public var agent: Int
    public var before: StatusObservation
    public var after: StatusObservation

    public init(agent: Int, before: StatusObservation, after: StatusObservation) {
        (self.agent, self.before, self.after) = (agent, before, after)
    }
}

/// ST-1: stored flags survive a restart. With no flags request between the two looks, the new
/// process serves, from the cache, the flags received when the old one's were (or none, if
/// it had none); partial flags (ST-5, not written) and flags that expired in between check nothing.
public struct CacheChecker: Sendable {
    public var lifetime: Double
    public var tolerance = 0.02
    public private(set) var checks = 0
    /// Restarts that checked nothing, and why.
    public private(set) var notes: [String] = []

    public init(lifetime: Double) { self.lifetime = lifetime }

    /// - Parameter calls: the device's `getFeatureFlags` calls, complete up to `p.after.received`.
    public mutating func check(_ p: CacheProbe, calls: [DeviceCall]) -> [Violation] {
        if let c = calls.first(where: { $0.time >= p.before.sent - 0.05 && $0.time <= p.after.received }) {
            notes.append("agent \(p.agent): the restart at \(iso8601(p.before.received)) checked no cache: a flags request at \(iso8601(c.time)) came in between")
            return []
        }
        if p.before.flagsPartial {
            notes.append("agent \(p.agent): the restart at \(iso8601(p.before.received)) checked no cache: its flags were partial (ST-5: not stored)")
            return []
        }
        let evidence = ["before the stop: " + Self.describe(p.before), "after the start: " + Self.describe(p.after)]
        guard let age0 = p.before.flagsAgeSeconds else {
            checks += 1
            return p.after.flagsAgeSeconds == nil ? [] : [Violation("cache", agent: p.agent, time: p.after.received,
                                                                     "flags served after a restart although none were stored and none were requested", evidence: evidence)]
        }
        let earliest = p.before.sent - age0, latest = p.before.received - age0
        guard latest + lifetime > p.after.received + 1 else {
            notes.append("agent \(p.agent): the restart at \(iso8601(p.before.received)) checked no cache: the flags expired meanwhile")
            return []
        }
        checks += 1
        guard let age1 = p.after.flagsAgeSeconds, p.after.flagsSource == "cache" else {
            return [Violation("cache", agent: p.agent, time: p.after.received,
                              "the stored flags (received \(iso8601(latest))) are not served from the cache after a restart", evidence: evidence)]
        }
        let (from, to) = (p.after.sent - age1, p.after.received - age1)
        if to < earliest - tolerance || from > latest + tolerance {
            return [Violation("cache", agent: p.agent, time: p.after.received,
                              "after a restart the cache serves flags received \(iso8601(to)), not the stored ones received \(iso8601(latest))", evidence: evidence)]
        }
        return []
    }

    static func describe(_ s: StatusObservation) -> String {
        "status answered \(iso8601(s.received)): state \(s.state), flagsCount \(s.flagsCount), flagsSource \(s.flagsSource), "
            + "flagsAgeSeconds \(s.flagsAgeSeconds.map { String($0) } ?? "null"), flagsPartial \(s.flagsPartial)"
    }
}

/// One `refresh` answer, as the driver saw it.
public struct RefreshProbe: Sendable {
    public var agent: Int
    public var sent: Time
    public var received: Time
    public var wasSent: Bool
    public var failed: Bool
    public var throttledUntil: Time?

    public init(agent: Int, sent: Time, received: Time, wasSent: Bool, failed: Bool, throttledUntil: Time?) {
        (self.agent, self.sent, self.received) = (agent, sent, received)
        (self.wasSent, self.failed, self.throttledUntil) = (wasSent, failed, throttledUntil)
    }
}

/// RF-6: a refresh answered from the throttle window names the window's end, which is at most
/// one window after the call, and a flags request of the device opened that window.
public struct ThrottleChecker: Sendable {
    public var throttle: Double
    /// The window's end is given to the second above; a request may have been delayed a little.
    public var tolerance = 5.0
    public private(set) var checks = 0

    public init(throttle: Double) { self.throttle = throttle }

    /// - Parameter calls: the device's `getFeatureFlags` calls, complete up to `p.received`.
    public mutating func check(_ p: RefreshProbe, calls: [DeviceCall]) -> [Violation] {
        guard !p.wasSent, !p.failed, let until = p.throttledUntil else { return [] }
        checks += 1
        let evidence = ["refresh sent \(iso8601(p.sent)) answered \(iso8601(p.received)): not sent, throttledUntil \(iso8601(until))"]
            + calls.filter { $0.time > until - throttle - 60 && $0.time <= p.received }.map { "request: " + describe($0) }
        if until < p.sent - 1 || until > p.received + throttle + 1 {
            return [Violation("throttle", agent: p.agent, time: p.received,
                              "a throttled refresh names a window end \(iso8601(until)) outside the \(Int(throttle)) s after the call", evidence: evidence)]
        }
        let opened = until - throttle
        if !calls.contains(where: { $0.time >= opened - tolerance && $0.time <= opened + 1.01 }) {
            return [Violation("throttle", agent: p.agent, time: p.received,
                              "a refresh was throttled until \(iso8601(until)), but no flags request opened that window (at \(iso8601(opened)))", evidence: evidence)]
        }
        return []
    }
}

/// RF-4, ST-2: right after `setUserId`, the user flag is not served or names the new user.
public struct UserSwitchChecker: Sendable {
    public var userFlag: String
    public var userPool: Set<String>
    public private(set) var checks = 0

    public init(userFlag: String, userPool: Set<String>) {
        self.userFlag = userFlag
        self.userPool = userPool
    }

    public mutating func check(_ o: FlagObservation) -> [Violation] {
        guard o.afterUserSwitch, o.key == userFlag else { return [] }
        checks += 1
        guard let flag = o.flag else { return [] }
        let expected = userPool.contains(o.expectedUserId) ? o.expectedUserId : ""
        let served = flag.properties["user"]?.stringValue ?? ""
        return served == expected ? [] : [Violation("userSwitch", agent: o.agent, time: o.received,
                                                    "right after setUserId \(o.expectedUserId), \(userFlag).user is \"\(served)\" (expected \"\(expected)\")",
                                                    evidence: [describe(o)])]
    }
}
