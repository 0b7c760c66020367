import AgentCore

/// What a real-timings run does on purpose so that every invariant gets checks (docs/soak.md
/// "Coverage steers the chaos"): a pure value, the seed, the number of agents and the device
/// days in, the duties out. Device 0 keeps its first flags past their lifetime in the
/// background (the expiry); device 1 switches user and restarts on its stored flags; device 2
/// is refreshed twice inside the throttle window, meets a `Retry-After` and goes offline. The
/// random chaos fills the rest of the run, the three devices' included.
public struct CoveragePlan: Sendable, Equatable {
    public enum Duty: Sendable, Equatable, CustomStringConvertible {
        /// Keep the device in the background, with no trigger, from its flags' receipt until 60 s past their lifetime.
        case expiry
        /// `setUserId` to another user, and an impression for the new one.
        case userSwitch
        /// A restart while the device holds valid flags.
        case restartOnCache
        /// Two `refresh` calls in a row: the second inside the throttle window.
        case throttle
        /// A 503 with this `Retry-After` for this device's next flags request.
        case retryAfter(seconds: Double)
        /// The device's flags requests dropped for this long.
        case outage(seconds: Double)

        /// The invariant the duty gives checks to.
        public var invariant: String {
            switch self {
            case .expiry: "expiry"
            case .userSwitch: "userSwitch"
            case .restartOnCache: "cache"
            case .throttle: "throttle"
            case .retryAfter: "retryAfter"
            case .outage: "outage"
            }
        }

        /// `retryAfter 667 s`, `outage 1h54min`.
        public var description: String {
            switch self {
            case .retryAfter(let seconds): "retryAfter \(Int(seconds)) s"
            case .outage(let seconds): "outage \(TimeSpan.format(seconds))"
            default: "\(invariant == "cache" ? "restartOnCache" : invariant)"
            }
        }

        /// Whether the chaos thread arms it (a fault: one armed at a time) rather than the device's driver.
        public var isFault: Bool {
            switch self {
            case .retryAfter, .outage: true
            default: false
            }
        }
    }

    /// One duty of one device, due `at` device seconds after the run's start.
    public struct Assignment: Sendable, Equatable {
        public var device: Int
        public var duty: Duty
        public var at: Double
    }

    /// An invariant the plan cannot give checks to, and why.
    public struct Gap: Sendable, Equatable, CustomStringConvertible {
        public var invariant: String
        public var why: String
        public var description: String { "\(invariant) (\(why))" }
    }

    public static let minimumAgents = 3
    public static let minimumDeviceDays = 1.0

    /// The invariants any run of at least one agent checks without a duty (every observation,
    /// request, start and stop feeds them).
    public static let everyRun: Set<String> = ["lifetime", "status", "user", "killed", "cadence", "storm", "impressions",
                                               "ready", "stop", "watchdog", "crash"]
    /// Planned by a duty but checked by more: a restart is also a start and a stop.
    static let alsoCovered: [String: [String]] = ["cache": ["restart"]]

    public var assignments: [Assignment]
    public var gaps: [Gap]

    /// - Parameters:
    ///   - lifetime: the stored flags' lifetime (ST-3), in device seconds.
    public init(seed: UInt64, agents: Int, deviceDays: Double, lifetime: Double = 86_400) {
        var rng = SeededRandom(seed: seed ^ 0xC0FE_A6E5)
        let span = deviceDays * 86_400
        // Spread over the first part of the run, so that each duty's checks are in before its end.
        func when() -> Double { ((0.1 + rng.unit() * 0.5) * span).rounded() }
        var list: [Assignment] = []
        var gaps: [Gap] = []
        if agents >= 1, span >= lifetime {
            // As early as the run allows: its last look comes a lifetime and a minute after.
            list.append(Assignment(device: 0, duty: .expiry, at: (rng.unit() * (span - lifetime)).rounded()))
        } else {
            gaps.append(Gap(invariant: "expiry", why: "needs at least \(Self.minimumDeviceDays.formatted) device-day: a device's flags must reach 24 h 01 min"))
        }
        // Two restarts: one can check nothing (a request in flight at the stop, partial flags).
        let second: [Duty] = [.userSwitch, .restartOnCache, .restartOnCache]
        let third: [Duty] = [.throttle, .retryAfter(seconds: (120 + rng.unit() * 1_680).rounded()),
                             .outage(seconds: (3_600 + rng.unit() * 3_600).rounded())]
        for (device, duties) in [(1, second), (2, third)] {
            for duty in duties {
                let at = when()
                if device < agents {
                    list.append(Assignment(device: device, duty: duty, at: at))
                } else {
                    if !gaps.contains(where: { $0.invariant == duty.invariant }) {
                        gaps.append(Gap(invariant: duty.invariant, why: "needs at least \(device + 1) agents: device \(device) has this duty"))
                    }
                }
            }
        }
        if agents < 2 {
            gaps.removeAll { $0.invariant == "outage" }
            gaps.append(Gap(invariant: "outage", why: "needs at least 2 agents: one offline while another runs"))
        }
        assignments = list.sorted { ($0.at, $0.device) < ($1.at, $1.device) }
        self.gaps = gaps
    }

    /// The duties of one device, earliest first.
    public func duties(of device: Int) -> [Assignment] { assignments.filter { $0.device == device } }

    /// The invariants the plan and every run give checks to.
    public var covered: Set<String> {
        var out = Self.everyRun
        for a in assignments {
            out.insert(a.duty.invariant)
            out.formUnion(Self.alsoCovered[a.duty.invariant] ?? [])
        }
        return out
    }

    /// What a run with `--require-coverage` refuses to start with: every catalogue invariant
    /// the plan cannot cover, with why (catalogue order).
    public var refusal: [Gap] {
        let covered = self.covered
        return SoakCoverage.catalogue.map(\.name).filter { !covered.contains($0) }.map { name in
            let gap = gaps.first { $0.invariant == name || Self.alsoCovered[$0.invariant]?.contains(name) == true }
            return Gap(invariant: name, why: gap?.why ?? "no duty plans it")
        }
    }
}

extension Double {
    /// `1`, `0.5`: a count of days or seconds as people write it.
    var formatted: String { self == rounded() && abs(self) < 1e15 ? String(Int64(self)) : String(self) }
}
