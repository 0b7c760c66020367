import AgentCore
import Foundation

// The invariant checkers. Each is a pure value: fed observations (socket answers), the
// emulator's request log and what the runner did, it returns the violations it finds.
// Unit tests feed them synthetic data; the runner feeds them the real thing.

/// Evidence line for a `get` observation.
func describe(_ o: FlagObservation) -> String {
    let flag = o.flag.map { "{enabled \($0.isEnabled), rule \"\($0.ruleId)\", properties \(JSONValue.object($0.properties).compactText)}" } ?? "null"
    return "get(\(o.key)) sent \(iso8601(o.sent)) answered \(iso8601(o.received)): flag \(flag), reason \(o.reason)"
        + (o.errorCode.map { "/\($0)" } ?? "") + ", source \(o.source), ageSeconds \(o.ageSeconds.map { String($0) } ?? "null")"
        + ", current user \(o.expectedUserId)"
}

extension JSONValue {
    var compactText: String {
        switch self {
        case .null: "null"
        case .bool(let b): b ? "true" : "false"
        case .number(let n): n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .string(let s): "\"\(s)\""
        case .array(let a): "[" + a.map(\.compactText).joined(separator: ",") + "]"
        case .object(let o): "{" + o.keys.sorted().map { "\($0):\(o[$0]!.compactText)" }.joined(separator: ",") + "}"
        }
    }
}

// MARK: - Lifetime (ST-3) and status consistency

/// Never flags past their lifetime: every served answer's `ageSeconds` is within the
/// lifetime, and `status` agrees with itself (`flagsExpireAt` = receipt + lifetime, in the future).
public struct LifetimeChecker: Sendable {
    public var lifetime: Double
    /// `flagsExpireAt` has whole-second precision.
    public var expireTolerance: Double = 1.5
    public private(set) var checks = 0

    public init(lifetime: Double) { self.lifetime = lifetime }

    public mutating func check(_ o: FlagObservation) -> [Violation] {
        checks += 1
        var out: [Violation] = []
        if let age = o.ageSeconds {
            // Rounded to milliseconds by the agent: 59.9996 s is reported as 60.000.
            if age > lifetime + 0.0005 || age < -0.01 {
                out.append(Violation("lifetime", agent: o.agent, time: o.received,
                                     "served flags \(age) s old; the lifetime is \(lifetime) s", evidence: [describe(o)]))
            }
            if o.flag == nil, o.errorCode != "FLAG_NOT_FOUND" {
                out.append(Violation("lifetime", agent: o.agent, time: o.received,
                                     "flags loaded but no flag and errorCode is not FLAG_NOT_FOUND", evidence: [describe(o)]))
            }
        } else if o.flag != nil || o.errorCode != "PROVIDER_NOT_READY" || o.source != "none" {
            out.append(Violation("lifetime", agent: o.agent, time: o.received,
                                 "no flag age, yet the answer is not PROVIDER_NOT_READY with source none", evidence: [describe(o)]))
        }
        return out
    }

    public mutating func check(_ s: StatusObservation) -> [Violation] {
        checks += 1
        let evidence = ["status sent \(iso8601(s.sent)) answered \(iso8601(s.received)): state \(s.state), flagsCount \(s.flagsCount), "
                        + "flagsAgeSeconds \(s.flagsAgeSeconds.map { String($0) } ?? "null"), flagsExpireAt \(s.flagsExpireAt.map(iso8601) ?? "null")"]
        func v(_ m: String) -> Violation { Violation("lifetime", agent: s.agent, time: s.received, m, evidence: evidence) }
        guard let age = s.flagsAgeSeconds else {
            if s.flagsExpireAt != nil { return [v("flagsExpireAt set while no flags are served")] }
            if s.state == "ready" || s.state == "stale" { return [v("state \(s.state) without valid flags")] }
            return []
        }
        if age > lifetime + 0.0005 { return [v("status reports flags \(age) s old; the lifetime is \(lifetime) s")] }
        guard let expireAt = s.flagsExpireAt else { return [v("flags served but flagsExpireAt is null")] }
        // Received at (sent - age ... received - age); it expires `lifetime` later.
        let earliest = s.sent - age + lifetime - expireTolerance
        let latest = s.received - age + lifetime + expireTolerance
        if expireAt < earliest || expireAt > latest {
            return [v("flagsExpireAt is not receipt + lifetime (expected \(iso8601(earliest + expireTolerance))…\(iso8601(latest - expireTolerance)))")]
        }
        if expireAt < s.sent - expireTolerance { return [v("flags served after their flagsExpireAt")] }
        if s.state != "ready" && s.state != "stale" && s.state != "fatal" { return [v("flags served in state \(s.state)")] }
        return []
    }
}

/// `status` matches what the runner did: the User ID it set last, the app state, never `fatal`
/// (the soak never answers 401/403).
public struct StatusChecker: Sendable {
    public private(set) var checks = 0
    public init() {}

    public mutating func check(_ s: StatusObservation) -> [Violation] {
        checks += 1
        let e = ["status answered \(iso8601(s.received)): userId \(s.userId), appState \(s.appState), state \(s.state)"]
        var out: [Violation] = []
        if s.userId != s.expectedUserId {
            out.append(Violation("user", agent: s.agent, time: s.received,
                                 "status.userId is \(s.userId) but setUserId \(s.expectedUserId) returned before", evidence: e))
        }
        let expected = s.expectedActive ? "active" : "background"
        if s.appState != expected {
            out.append(Violation("status", agent: s.agent, time: s.received, "appState is \(s.appState), expected \(expected)", evidence: e))
        }
        if s.state == "fatal" {
            out.append(Violation("status", agent: s.agent, time: s.received, "state fatal although the server never answered 401/403", evidence: e))
        }
        return out
    }
}

// MARK: - Provenance: never another user's flags; killed and archived flags

/// Finds the response that produced the served flags in the emulator's request log and
/// checks it: it was a successful `getFeatureFlags` for the current user (ST-2, RF-4), and
/// the served flag agrees with the flag's state (killed: off with rule ""; archived:
/// absent; otherwise present) when that request arrived (FF-7, FF-8).
///
/// Requests never overlap (RF-9), so the producing request is the last one that arrived
/// before the flags were received (received = answer time − ageSeconds).
public struct ProvenanceChecker: Sendable {
    /// How much earlier than `sent − ageSeconds` the flags may have been received (ms rounding).
    public var lowerTolerance: Double = 0.002
    /// How much later than `received − ageSeconds` (ms rounding, monotonic vs wall age).
    public var upperTolerance: Double = 0.01
    /// A flag whose rules put the User ID into property `user` for each of `pool`.
    public var userFlag: String?
    public var userPool: Set<String>
    public private(set) var checks = 0
    public private(set) var killedChecks = 0

    public init(userFlag: String? = nil, userPool: Set<String> = []) {
        self.userFlag = userFlag
        self.userPool = userPool
    }

    /// The flag's state (killed, archived) when `call` arrived; nil when a change was under way then.
    static func state(of key: String, at time: Time, changes: [FlagChange]) -> FlagChange?? {
        let history = changes.filter { $0.key == key }
        if history.contains(where: { $0.start - 0.01 <= time && time <= $0.end + 0.01 }) { return .some(nil) }
        guard let last = history.last(where: { $0.end < time }) else { return nil }
        return .some(last)
    }

    /// - Parameters:
    ///   - calls: this device's `getFeatureFlags` calls, sorted by time, complete up to after `o.received`.
    ///   - changes: admin changes of flags (initial states at time 0), sorted by start.
    public mutating func check(_ o: FlagObservation, calls: [DeviceCall], changes: [FlagChange]) -> [Violation] {
        guard let age = o.ageSeconds else { return [] }
        checks += 1
        // The flags were received between these (the agent's age is at least the wall-clock age).
        let lower = o.sent - age - lowerTolerance
        let upper = o.received - age + upperTolerance
        // The producer is the last call that arrived before receipt: certainly one of these.
        var candidates: [DeviceCall] = []
        if let last = calls.lastIndex(where: { $0.time <= lower }) { candidates.append(calls[last]) }
        candidates += calls.filter { $0.time > lower && $0.time <= upper }
        let ok = candidates.filter(\.succeeded)
        var evidence = [describe(o)]
        evidence += candidates.map { "candidate request: " + describe($0) }
        if candidates.isEmpty {
            evidence += calls.suffix(3).map { "recent request: " + describe($0) }
        }
        guard !ok.isEmpty else {
            return [Violation("provenance", agent: o.agent, time: o.received,
                              "served flags were received about \(iso8601(o.received - age)), but no successful getFeatureFlags can have produced them",
                              evidence: evidence)]
        }
        var out: [Violation] = []
        if !ok.contains(where: { $0.userId == o.expectedUserId }) {
            out.append(Violation("user", agent: o.agent, time: o.received,
                                 "served flags come from a request for user \(ok.map(\.userId).joined(separator: "/")), but the current user is \(o.expectedUserId)",
                                 evidence: evidence))
        }
        if let userFlag, o.key == userFlag, let flag = o.flag {
            let expected = userPool.contains(o.expectedUserId) ? o.expectedUserId : ""
            let served = flag.properties["user"]?.stringValue
            if served != expected {
                out.append(Violation("user", agent: o.agent, time: o.received,
                                     "\(userFlag).user is \"\(served ?? "nil")\" but the current user is \(o.expectedUserId) (expected \"\(expected)\")",
                                     evidence: evidence))
            }
        }
        // The flag's state when each possible producer arrived; judged only when all are known.
        var states: [FlagChange] = []
        for c in ok {
            guard case .some(.some(let st)) = Self.state(of: o.key, at: c.time, changes: changes) else { return out }
            states.append(st)
        }
        killedChecks += 1
        func problem(_ st: FlagChange) -> String? {
            if st.archived { return o.flag != nil ? "an archived flag is served after a successful refresh" : nil }
            if st.killed {
                guard let f = o.flag else { return "a killed flag is missing (it should be served off with rule \"\")" }
                return f.isEnabled || !f.ruleId.isEmpty ? "a killed flag is served as enabled \(f.isEnabled), rule \"\(f.ruleId)\" after a successful refresh" : nil
            }
            return o.flag == nil ? "a live flag is missing from the served flags" : nil
        }
        let problems = states.map(problem)
        if let first = problems.first ?? nil, problems.allSatisfy({ $0 != nil }) {
            evidence += states.map { "flag \(o.key) was \($0.archived ? "archived" : $0.killed ? "killed" : "live") since \(iso8601($0.end)) (\($0.description)), before the request that produced the served flags" }
            out.append(Violation("killed", agent: o.agent, time: o.received, first, evidence: evidence))
        }
        return out
    }
}

// MARK: - Refresh schedule: cadence, storms, Retry-After

/// Refresh cadence (RF-2, RF-12), no request storm after faults (RF-9, RF-10) and
/// `Retry-After` (RF-10), from one device's `getFeatureFlags` calls and what the runner did.
///
/// - cadence: while the agent runs and is active, a request follows the previous one
///   within `refresh × 1.1` (+ the previous request's injected delay, + `slack`); after a
///   return to active or a restart, the clock starts at that moment at the latest.
/// - storm: requests the agent makes on its own (periodic, retries) are at least the retry
///   floor apart; so any window of 0.9 × floor holds at most 1 + the number of
///   runner actions that may trigger a request (user change, session start, manual
///   refresh, push registration, start) within it or `grace` before.
/// - retryAfter: after a 429/503 with `Retry-After: R`, no request within R unless a
///   runner action triggered one.
public struct ScheduleChecker: Sendable {
    public var timings: Timings
    public var slack: Double
    public var grace: Double
    public private(set) var cadenceChecks = 0
    public private(set) var stormChecks = 0
    public private(set) var retryAfterChecks = 0
    /// Calls already checked, per agent (the open tail is rechecked until closed).
    private var checkedPairs: [Int: Int] = [:]
    private var checkedStorm: [Int: Int] = [:]
    private var reported: [Int: Set<Time>] = [:]

    public init(timings: Timings, slack: Double = 2, grace: Double = 6) {
        self.timings = timings
        self.slack = slack
        self.grace = grace
    }

    /// Intervals in which the process is up and the app active, from the runner's actions.
    public static func activeIntervals(_ actions: [AgentAction], until horizon: Time) -> [(Time, Time)] {
        struct Edge { var time: Time; var alive: Bool?; var active: Bool? }
        var list: [Edge] = []
        for a in actions {
            switch a.kind {
            case .started: list.append(Edge(time: a.end, alive: true, active: true))
            case .stopped, .crashed: list.append(Edge(time: a.start, alive: false, active: nil))
            case .appState(let active): list.append(Edge(time: active ? a.end : a.start, alive: nil, active: active))
            default: break
            }
        }
        list.sort { $0.time < $1.time }
        var alive = false, active = false
        var out: [(Time, Time)] = []
        var upSince: Time?
        for e in list {
            if let v = e.alive { alive = v }
            if let v = e.active { active = v }
            let up = alive && active
            if up, upSince == nil { upSince = e.time }
            if !up, let s = upSince { out.append((s, e.time)); upSince = nil }
        }
        if let s = upSince { out.append((s, max(s, horizon))) }
        return out
    }

    /// The armed fault that a faulted call took (one fault is armed at a time).
    public static func fault(for call: DeviceCall, in faults: [ArmedFault]) -> ArmedFault? {
        guard call.fault != nil else { return nil }
        return faults.last { $0.method == call.method && $0.start <= call.time + 0.05 }
    }

    /// Checks one agent up to `horizon` (the request log is complete up to there).
    public mutating func check(agent: Int, calls: [DeviceCall], actions: [AgentAction], faults: [ArmedFault],
                               horizon: Time) -> [Violation] {
        var out: [Violation] = []
        let calls = calls.filter { $0.time <= horizon }
        let intervals = Self.activeIntervals(actions, until: horizon)
        let triggers = actions.filter(\.triggersRefresh)
        // A request the runner's action caused is logged at the emulator's millisecond,
        // rounded down, and in device time through offsets kept to the millisecond: it can
        // read up to 2 ms before the action that caused it started (seen: a manual refresh
        // at 07.988 whose request was logged at 07.988, counted as unexplained).
        let logResolution = 0.002
        func triggered(from: Time, to: Time) -> [AgentAction] {
            triggers.filter { $0.start <= to + logResolution && $0.end >= from }
        }

        // Cadence: each gap after a call, including the open one up to the horizon.
        let firstPair = checkedPairs[agent] ?? 0
        if !calls.isEmpty {
            for i in firstPair..<calls.count {
                let r1 = calls[i]
                let closed = i + 1 < calls.count
                let gapEnd = closed ? calls[i + 1].time : horizon
                let delay = Self.fault(for: r1, in: faults)?.delaySeconds ?? 0
                let base = r1.time + timings.refresh * 1.1 + delay
                for (a, b) in intervals where b > r1.time && a < gapEnd {
                    let deadline = max(base, a) + slack
                    if deadline < min(b, gapEnd) {
                        if reported[agent, default: []].contains(r1.time) { break }
                        reported[agent, default: []].insert(r1.time)
                        var e = ["last request: " + describe(r1)]
                        e.append(closed ? "next request: " + describe(calls[i + 1]) : "no request by \(iso8601(gapEnd)) (log checked up to there)")
                        e.append("agent up and active since \(iso8601(a))" + (b < horizon ? " until \(iso8601(b))" : ""))
                        if delay > 0 { e.append("the last request was delayed \(delay) s by a fault") }
                        out.append(Violation("cadence", agent: agent, time: deadline,
                                             "no getFeatureFlags for \(String(format: "%.1f", min(b, gapEnd) - max(r1.time, a))) s while active; the refresh interval is \(timings.refresh) s (deadline \(iso8601(deadline)))",
                                             evidence: e))
                        break
                    }
                }
                if closed { cadenceChecks += 1 }
            }
            checkedPairs[agent] = max(firstPair, calls.count - 1)
        }

        // Storm and Retry-After.
        let window = timings.retryFloor * 0.9
        let firstStorm = checkedStorm[agent] ?? 0
        if firstStorm < calls.count {
            for i in firstStorm..<calls.count {
                let r = calls[i]
                stormChecks += 1
                let inWindow = calls[...i].filter { $0.time > r.time - window }
                let explained = triggered(from: r.time - window - grace, to: r.time)
                if inWindow.count > 1 + explained.count {
                    var e = inWindow.map { "request: " + describe($0) }
                    e += explained.map { "runner action: \($0.kind) \(iso8601($0.start))…\(iso8601($0.end))" }
                    if explained.isEmpty {
                        e += actions.filter { abs($0.start - r.time) < 120 }.map { "nearby runner action: \($0.kind) \(iso8601($0.start))…\(iso8601($0.end))" }
                    }
                    out.append(Violation("storm", agent: agent, time: r.time,
                                         "\(inWindow.count) getFeatureFlags within \(String(format: "%.1f", window)) s; at most \(1 + explained.count) can be explained (1 scheduled + \(explained.count) triggered by the runner)",
                                         evidence: e))
                }
                if i > 0, let fault = Self.fault(for: calls[i - 1], in: faults), let retryAfter = fault.retryAfter,
                   calls[i - 1].status == 429 || calls[i - 1].status == 503 {
                    retryAfterChecks += 1
                    let previous = calls[i - 1]
                    if r.time < previous.time + retryAfter - 0.5,
                       triggered(from: previous.time - 0.1, to: r.time).isEmpty {
                        out.append(Violation("retryAfter", agent: agent, time: r.time,
                                             "requested again \(String(format: "%.2f", r.time - previous.time)) s after HTTP \(previous.status ?? 0) with Retry-After \(Int(retryAfter))",
                                             evidence: ["failed request: " + describe(previous), "next request: " + describe(r)]))
                    }
                }
            }
            checkedStorm[agent] = calls.count
        }
        return out
    }
}

// MARK: - Impressions (IM-3)

/// One impression per flag, rule and state per session: counts successful
/// `PW_FeatureFlagImpression` events per device between the runner's session starts,
/// user changes and restarts. An event that arrives while such an action is under way (or
/// `lag` after) may belong to either side; it is placed where it does not repeat one.
public struct ImpressionChecker: Sendable {
    public var lag: Double
    public private(set) var checks = 0
    private var processed: [Int: Int] = [:]
    private var epochs: [Int: [Int: Set<ImpressionKey>]] = [:]

    public init(lag: Double = 1.0) { self.lag = lag }

    /// - Parameters:
    ///   - impressions: this device's impression `postEvent` calls, sorted by time.
    ///   - settled: calls up to this time are final (their epoch boundaries are all known).
    public mutating func check(agent: Int, impressions: [DeviceCall], actions: [AgentAction], settled: Time) -> [Violation] {
        let boundaries = actions.filter(\.startsImpressionEpoch).sorted { $0.start < $1.start }
        var out: [Violation] = []
        var i = processed[agent] ?? 0
        var sets = epochs[agent] ?? [:]
        while i < impressions.count, impressions[i].time <= settled {
            let call = impressions[i]
            i += 1
            guard call.succeeded, let key = call.impression else { continue }
            checks += 1
            let certain = boundaries.filter { $0.end + lag < call.time }.count
            let possible = boundaries.filter { $0.start - 0.05 <= call.time }.count
            if let epoch = (certain...max(certain, possible)).first(where: { !(sets[$0]?.contains(key) ?? false) }) {
                sets[epoch, default: []].insert(key)
            } else {
                let epoch = possible
                let since = epoch > 0 ? boundaries[epoch - 1] : nil
                let same = impressions[..<(i - 1)].filter { $0.impression == key && $0.succeeded && $0.time >= (since?.start ?? 0) }
                out.append(Violation("impressions", agent: agent, time: call.time,
                                     "a second impression \(key) in one session",
                                     evidence: (same.map { "earlier: " + describe($0) }) + ["this: " + describe(call),
                                               "session/user/process started by: " + (since.map { "\($0.kind) \(iso8601($0.start))…\(iso8601($0.end))" } ?? "the first start")]))
            }
        }
        processed[agent] = i
        epochs[agent] = sets
        return out
    }
}
