import AgentCore

/// What a real-timings run does on purpose so that every invariant gets checks (docs/soak.md
/// "Coverage steers the chaos"): a pure value, the seed, the number of agents and the device
/// days in, the duties out. Device 0 keeps its first flags past their lifetime in the
/// background (the expiry); device 1 switches user and restarts on its stored flags; device 2
/// is refreshed twice inside the throttle window, meets a `Retry-After` and goes offline.
/// Each duty comes once per 3 device-days of run, each round on the next device of its group
/// (3, 4, 5, then 6, 7, 8 …) when the run has it. The random chaos fills the rest of the run.
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

    /// How many times a run of `deviceDays` does each duty: once per 3 device-days of run (at
    /// least once), so that a longer run checks each planned invariant more often, on more devices.
    public static func rounds(deviceDays: Double) -> Int { max(1, Int((deviceDays / 3).rounded(.up))) }

    /// The devices that start each group of duties: device 0 the expiry, device 1 the user
    /// switch and the restarts, device 2 the throttle and the planned faults. Round `k` of a
    /// group goes to device `first + 3k` when the run has it (another device each round), else
    /// to `first` again, later.
    public static func device(first: Int, round k: Int, agents: Int) -> Int {
        first + 3 * k < agents ? first + 3 * k : first
    }

    /// - Parameters:
    ///   - lifetime: the stored flags' lifetime (ST-3), in device seconds.
    public init(seed: UInt64, agents: Int, deviceDays: Double, lifetime: Double = 86_400) {
        var rng = SeededRandom(seed: seed ^ 0xC0FE_A6E5)
        let span = deviceDays * 86_400
        let rounds = Self.rounds(deviceDays: deviceDays)
        // Round k of a duty falls in the k-th of `rounds` equal slots of the run's first 85 %, so
        // that each duty's checks are in before the end and the duties reach the run's last third.
        func when(_ k: Int) -> Double { (span * (0.05 + 0.8 * (Double(k) + 0.1 + rng.unit() * 0.8) / Double(rounds))).rounded() }
        var list: [Assignment] = []
        var gaps: [Gap] = []
        if agents >= 1, span >= lifetime {
            // Each round as early in its slot as the run allows: its last look comes a lifetime
            // and a minute after the flags; a slot ends a lifetime and 10 minutes before the run does.
            let room = max(0, span - lifetime - 600)
            for k in 0..<rounds {
                let slot = room / Double(rounds)
                list.append(Assignment(device: Self.device(first: 0, round: k, agents: agents), duty: .expiry,
                                       at: (slot * Double(k) + rng.unit() * slot * 0.4).rounded()))
            }
        } else {
            gaps.append(Gap(invariant: "expiry", why: "needs at least \(Self.minimumDeviceDays.formatted) device-day: a device's flags must reach 24 h 01 min"))
        }
        // Two restarts a round: one can check nothing (a request in flight at the stop, partial flags).
        for k in 0..<rounds {
            let second: [Duty] = [.userSwitch, .restartOnCache, .restartOnCache]
            let third: [Duty] = [.throttle, .retryAfter(seconds: (120 + rng.unit() * 1_680).rounded()),
                                 .outage(seconds: (3_600 + rng.unit() * 3_600).rounded())]
            for (first, duties) in [(1, second), (2, third)] {
                for duty in duties {
                    let at = when(k)
                    if first < agents {
                        list.append(Assignment(device: Self.device(first: first, round: k, agents: agents), duty: duty, at: at))
                    } else if !gaps.contains(where: { $0.invariant == duty.invariant }) {
                        // The hint is the plan's own: the device that has the duty must exist.
                        gaps.append(Gap(invariant: duty.invariant, why: "needs at least \(first + 1) agents: device \(first) has this duty"))
                    }
                }
            }
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
