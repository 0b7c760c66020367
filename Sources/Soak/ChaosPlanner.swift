import AgentCore

/// The chaos of a real-timings run, in device time (docs/soak.md "Chaos in device time"): a
/// pure value, the seed in, when the next event comes and what a fault is out. A device backs
/// off to about one request an hour, so a fault sized in requests could hold every device for
/// days; here every fault has a window of device time (`forSeconds`, the emulator's clock being
/// the devices'), and the counted ones end at whichever comes first. No fault on every device
/// lasts over `longestGlobal`; the long outage that lets every device's flags expire comes at
/// most once per `expireOutageEvery` and never in the run's last hours, so faults keep coming
/// to the end; a fault scoped to one device is aimed only at a device it can hit.
public struct ChaosPlanner: Sendable {
    /// One fault to arm: the emulator's fault (docs/emulator.md D.2), the one device it is
    /// scoped to (nil: every device), and its window in device seconds.
    public struct Fault: Sendable, Equatable {
        public var json: [String: JSONValue]
        public var agent: Int?
        public var seconds: Double
    }

    /// No fault on every device lasts longer (device seconds).
    public static let longestGlobal: Double = 26 * 3600
    /// Device seconds between two long outages of every device.
    public static let expireOutageEvery: Double = 3 * 86_400
    /// The longest window of an ordinary fault (device seconds).
    public static let longestOrdinary: Double = 3 * 3600

    public var rng: SeededRandom
    /// Mean device seconds between two chaos events (a flag change or a fault).
    public var every: Double
    public var lifetime: Double
    public var refresh: Double
    /// The run's end, in the device time the `at`s are given in.
    public var runEnd: Double
    public private(set) var lastExpireOutage = -Double.infinity

    public init(seed: UInt64, lifetime: Double, refresh: Double, runEnd: Double, every: Double = 2 * 3600) {
        rng = SeededRandom(seed: seed ^ 0xC4A0_5D71)
        (self.lifetime, self.refresh, self.runEnd, self.every) = (lifetime, refresh, runEnd, every)
    }

    /// Device seconds to the next event.
    public mutating func pause() -> Double { min(rng.exponential(mean: every), every * 4) }

    /// The fault armed at device time `at`; nil when none can hit anybody (no target: a flag
    /// change instead).
    /// - Parameters:
    ///   - targets: the devices a fault can hit (started, up, no duty that keeps them silent).
    ///   - plannedWaiting: a planned fault waits for its turn (one fault is armed at a time):
    ///     no long outage then.
    public mutating func fault(at: Double, targets: [Int], agents: Int, plannedWaiting: Bool) -> Fault? {
        guard !targets.isEmpty else { return nil }
        let method = JSONValue.string(PushwooshAPI.Method.getFeatureFlags.rawValue)
        if agents > 1, rng.chance(0.15) {
            // One device offline for a while, the others refreshing (the outage invariant).
            let agent = targets[Int(rng.next() % UInt64(targets.count))]
            let window = (refresh * (0.5 + rng.unit() * 1.5)).rounded()
            return Fault(json: ["method": method, "forSeconds": .number(window), "drop": true], agent: agent, seconds: window)
        }
        var window = (600 + rng.unit() * (Self.longestOrdinary - 600)).rounded()
        let retryAfter = JSONValue.number(Double(2 + rng.next() % UInt64(max(2, refresh - 4))))
        var f: [String: JSONValue] = ["times": .number(Double(1 + rng.next() % 3))]
        switch rng.next() % 14 {
        case 12 where !plannedWaiting && at - lastExpireOutage >= Self.expireOutageEvery:
            // An outage long enough for every device's stored flags to expire (ST-3, ST-4),
            // bounded, and over well before the run's end.
            let long = (lifetime + 600 + rng.unit() * 5_400).rounded()
            guard at + long <= runEnd - 6 * 3600, long <= Self.longestGlobal else { f["http"] = 503; break }
            lastExpireOutage = at
            window = long
            f = ["http": 503]
        case 0, 12: f["http"] = .number([500, 502, 504][Int(rng.next() % 3)])
        case 1: f["http"] = 503
        case 2: (f["http"], f["retryAfter"]) = (503, retryAfter)
        case 3: (f["http"], f["retryAfter"]) = (429, retryAfter)
        case 4: f["drop"] = true
        case 5: f["delayMs"] = .number(Double(300 + rng.next() % 3000))
        case 6: f["body"] = "garbage"
        case 7: f["statusCode"] = .number([210, 500][Int(rng.next() % 2)])
        case 8: f["partial"] = true
        case 9: (f["drop"], f["delayMs"]) = (true, .number(Double(200 + rng.next() % 1500)))
        case 10: f["http"] = 429
        case 11: (f["http"], f["delayMs"]) = (500, .number(Double(200 + rng.next() % 2000)))
        default:
            // Impressions that fail are sent again on the next logImpression (IM-4).
            if rng.chance(0.5) { f["http"] = 500 } else { f["drop"] = true }
            f["method"] = .string(PushwooshAPI.Method.postEvent.rawValue)
        }
        if f["method"] == nil { f["method"] = method }
        f["forSeconds"] = .number(window)
        return Fault(json: f, agent: nil, seconds: window)
    }
}
