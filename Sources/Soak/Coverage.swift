import AgentCore

/// What a soak run exercised: how many times each invariant was checked, so that a pass
/// says what it stands on and an invariant that was never checked (no restart, no outage,
/// no `Retry-After` in the run) is named instead of passing silently.
public struct SoakCoverage: Sendable, Equatable {
    /// One invariant: its name (the key in `summary.json`), what it holds, the `Violation`
    /// names that break it, and how many times the run checked it.
    public struct Entry: Sendable, Equatable {
        public var name: String
        public var holds: String
        public var violationNames: [String]
        public var checks: Int

        public init(name: String, holds: String, violationNames: [String], checks: Int) {
            self.name = name
            self.holds = holds
            self.violationNames = violationNames
            self.checks = checks
        }
    }

    /// Every invariant the runner checks, in the order the report lists them.
    public static let catalogue: [(name: String, holds: String, violationNames: [String])] = [
        ("lifetime", "every get/isEnabled/status answer is younger than the lifetime; flagsExpireAt is receipt + lifetime", ["lifetime"]),
        ("expiry", "ST-3 at the edge: flags kept past their lifetime (in the background, no refresh) are served 60 s before it, gone 60 s after it, and the agent says expired", ["expiry"]),
        ("status", "status agrees with what get serves", ["status"]),
        ("user", "the served flags come from a successful getFeatureFlags for the user setUserId set", ["user", "provenance"]),
        ("userSwitch", "right after setUserId the previous user's flags are gone: soak_user is not served, or names the new user", ["userSwitch"]),
        ("killed", "a flag killed or archived before the request that served it is off or absent", ["killed"]),
        ("cadence", "while up and active, flags requests are at most refresh x 1.1 + slack apart", ["cadence"]),
        ("storm", "at most 1 + runner-triggered flags requests in any 0.9 x retry-floor window", ["storm"]),
        ("retryAfter", "no flags request within a Retry-After the server gave", ["retryAfter"]),
        ("throttle", "a refresh inside the throttle window is not sent, names the window's end, and a sent refresh opened that window", ["throttle"]),
        ("impressions", "one impression per flag, rule and state per session, user and process", ["impressions"]),
        ("outage", "inside one device's outage window every flags request of it is dropped, and nobody else's", ["outage"]),
        ("ready", "READY=1 within 10 s of every start", ["ready"]),
        ("stop", "STOPPING=1 and exit 0 within 1.5 s of every SIGTERM", ["stop"]),
        ("restart", "agents restarted mid-run (SIGTERM or SIGKILL), each then held to ready and stop", []),
        ("cache", "a restart keeps the stored flags: started in the background, the agent serves the flags it held before the stop, from the cache", ["cache"]),
        ("watchdog", "WATCHDOG=1 keeps coming while an agent runs", ["watchdog"]),
        ("crash", "no agent or emulator process exits unless signalled", ["crash"]),
    ]

    public var entries: [Entry]

    /// The catalogue with these check counts (a name missing from `checks` counts 0).
    public init(checks: [String: Int]) {
        entries = Self.catalogue.map { Entry(name: $0.name, holds: $0.holds, violationNames: $0.violationNames, checks: checks[$0.name] ?? 0) }
    }

    /// `{"lifetime": 120, …}`.
    public var json: JSONValue { .object(Dictionary(uniqueKeysWithValues: entries.map { ($0.name, .number(Double($0.checks))) })) }

    /// Every check of the run: what the progress line calls `checks`.
    public var total: Int { entries.map(\.checks).reduce(0, +) }

    /// The invariants checked 0 times, in catalogue order.
    public var notExercised: [String] { entries.filter { $0.checks == 0 }.map(\.name) }

    /// The invariant a violation belongs to; nil for the runner's own failures (its socket
    /// calls, the emulator's admin API, the device clock), which no invariant covers.
    public static func invariant(of violation: String) -> String? {
        catalogue.first { $0.violationNames.contains(violation) }?.name
    }

    /// The last lines the runner prints.
    public var lines: [String] {
        let missing = notExercised
        return ["coverage (checks per invariant): " + entries.map { "\($0.name) \($0.checks)" }.joined(separator: ", "),
                "not exercised: " + (missing.isEmpty ? "none" : missing.joined(separator: ", "))]
    }
}
