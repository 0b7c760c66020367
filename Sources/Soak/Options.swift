import AgentCore
import AgentPosix
import Foundation
import HarnessSupport

/// The soak runner's draws on AgentCore's seeded generator: the same seed drives the same choices.
extension SeededRandom {
    public mutating func chance(_ p: Double) -> Bool { unit() < p }
    public mutating func exponential(mean: Double) -> Double { -log(1 - unit()) * mean }
}

/// `pushwoosh-soak` options.
public struct SoakOptions: Sendable {
    public var duration: Double = 600
    public var agents = 1
    public var seed: UInt64 = UInt64(Date().timeIntervalSince1970 * 1000) & 0xFFFF_FFFF
    public var binDirectory: String?
    public var reportDirectory = "soak-report"
    /// `--junit FILE`: also write the run as JUnit XML there.
    public var junitFile: String?
    public var apps: String?
    public var timings = Timings()
    /// Mean seconds between one agent's actions.
    public var pace: Double = 1.0
    /// Mean seconds between one agent's restarts (0: never).
    public var restartEvery: Double = 60
    /// Mean seconds between emulator-side changes (flag changes, faults; 0: none).
    public var chaosEvery: Double = 5
    public var faults = true
    /// Tolerance of the timing checks.
    public var slack: Double = 2
    /// `WatchdogSec` given to the agents (0: no watchdog).
    public var watchdog: Double = 4
    public var keepGoing = false
    public var quiet = false
    /// Seconds between progress lines.
    public var progressEvery: Double = 5
    /// `--real-timings`: the SDK's own timings (24 h, 30 min, 1 h, 5 min) on controlled device
    /// clocks that the runner steps forward, every agent's and the emulator's together.
    public var realTimings = false
    /// `--device-days`: how much device time a real-timings run covers.
    public var deviceDays: Double = 7
    /// `--speed`: device seconds per real second in a real-timings run.
    public var speed: Double = 2000
    /// The longest single step of the device clocks (they also stop at every armed timer).
    public var maxStep: Double = 600
    /// `--require-coverage` (the default with `--real-timings`): a run that leaves an invariant
    /// unchecked exits 3, and one that cannot cover them all is refused (exit 3) before it starts.
    public var requireCoverage: Bool?

    /// Whether coverage is required: as asked, else with the real timings.
    public var coverageRequired: Bool { requireCoverage ?? realTimings }

    /// What the run covers, in its own terms: `1 device-day` with the real timings, else its duration.
    public var span: String {
        realTimings ? "\(deviceDays.formatted) device-day\(deviceDays == 1 ? "" : "s")" : TimeSpan.format(duration)
    }

    public init() {}

    public static let usage = """
    usage: pushwoosh-soak [--duration 10m] [--agents N] [--seed S] [--bin DIR] [--report DIR] [--junit FILE]
                          [--lifetime 60s] [--session-gap 10s] [--refresh 15s] [--throttle 5s]
                          [--pace 1s] [--restart-every 60s] [--chaos-every 5s] [--no-faults]
                          [--slack 2s] [--watchdog 4s] [--apps FILE] [--keep-going] [--quiet] [--version]
                          [--real-timings [--device-days 7] [--speed 2000]] [--[no-]require-coverage]

    Runs the real pushwoosh-emulator with its lab (--lab) and N real pushwoosh-agentd
    processes as the lab's devices, with shortened timings, drives random actions, flag changes, server faults and restarts, and checks
    the agent's invariants continuously. Exits 1 on the first violation (0 when none,
    2 on usage errors, 3 when coverage is required and missing, 130 when interrupted) and
    writes DIR/summary.json, DIR/report.html and DIR/timeline.svg;
    --junit FILE also writes the run as JUnit XML (a test case per invariant and per agent).
    The last lines printed say how many times each invariant was checked and which never were.

    --real-timings runs the SDK's own timings instead (24 h lifetime, 30 min sessions, 1 h
    refresh, 5 min throttle) on controlled device clocks: the runner steps the lab's clock
    (every agent's and the emulator's together), to each armed timer in turn, --speed device seconds
    per real second, until --device-days are covered; the same invariants are checked.
    Its timings are the SDK's: --lifetime, --session-gap, --refresh or --throttle with it is a
    usage error (exit 2). Faults are sized in device time (none on every device over 26 h).
    With it, coverage steers the chaos: the run plans, from the seed, an expiry, a user
    switch, a restart on the cache, the throttle, a Retry-After and an outage, and
    --require-coverage (its default; --no-require-coverage turns it off) refuses a run that
    cannot cover every invariant (under 1 device-day or 3 agents) and fails one that left an
    invariant unchecked, both with exit 3 naming them. Each planned duty comes once per 3
    device-days of run, on another device each round when there is one. A refused run still
    writes its --junit FILE, the refusal as a failure.
    """

    /// Parses the command line; the error names the option at fault.
    public static func parse(_ args: [String]) throws(SoakOptionError) -> SoakOptions {
        var o = SoakOptions()
        var i = 0
        // The spans as given, for an error about one of them found after all are read.
        var given: [String: String] = [:]
        func value(_ name: String) throws(SoakOptionError) -> String {
            i += 1
            guard i < args.count else { throw SoakOptionError(name, .missingValue) }
            return args[i]
        }
        func bad(_ name: String, _ text: String, expected: String) -> SoakOptionError {
            SoakOptionError(name, .badValue(text, expected: expected))
        }
        func span(_ name: String) throws(SoakOptionError) -> Double {
            let text = try value(name)
            guard let s = TimeSpan.parse(text) else { throw bad(name, text, expected: "a time span like 90s, 10m, 1h, 500ms") }
            given[name] = text
            return s
        }
        while i < args.count {
            let a = args[i]
            switch a {
            case "--duration": o.duration = try span(a)
            case "--agents":
                let text = try value(a)
                guard let n = Int(text), (1...1000).contains(n) else { throw bad(a, text, expected: "1-1000") }
                o.agents = n
            case "--seed":
                let text = try value(a)
                guard let n = UInt64(text) else { throw bad(a, text, expected: "a non-negative integer") }
                o.seed = n
            case "--bin": o.binDirectory = try value(a)
            case "--report": o.reportDirectory = try value(a)
            case "--junit":
                let file = try value(a)
                guard !file.isEmpty, !file.hasSuffix("/") else { throw bad(a, file, expected: "a file name") }
                o.junitFile = file
            case "--apps": o.apps = try value(a)
            case "--lifetime": o.timings.lifetime = try span(a)
            case "--session-gap": o.timings.sessionGap = try span(a)
            case "--refresh": o.timings.refresh = try span(a)
            case "--throttle": o.timings.throttle = try span(a)
            case "--pace": o.pace = try span(a)
            case "--restart-every": o.restartEvery = try span(a)
            case "--chaos-every": o.chaosEvery = try span(a)
            case "--no-faults": o.faults = false
            case "--slack": o.slack = try span(a)
            case "--watchdog": o.watchdog = try span(a)
            case "--keep-going": o.keepGoing = true
            case "--quiet": o.quiet = true
            case "--progress-every": o.progressEvery = try span(a)
            case "--real-timings": o.realTimings = true
            case "--device-days":
                let text = try value(a)
                guard let d = Double(text), d > 0, d <= 3650 else { throw bad(a, text, expected: "a number of days") }
                o.deviceDays = d
            case "--speed":
                let text = try value(a)
                guard let x = Double(text), x >= 1, x <= 1_000_000 else { throw bad(a, text, expected: "1-1000000") }
                o.speed = x
            case "--require-coverage": o.requireCoverage = true
            case "--no-require-coverage": o.requireCoverage = false
            case "-h", "--help": throw SoakOptionError(a, .help)
            default: throw SoakOptionError(a, .unknown)
            }
            i += 1
        }
        for (name, value, least) in [("--refresh", o.timings.refresh, 1.0), ("--lifetime", o.timings.lifetime, 1), ("--session-gap", o.timings.sessionGap, 0.1)]
        where value < least {
            throw bad(name, given[name] ?? TimeSpan.format(value), expected: "at least \(TimeSpan.format(least))")
        }
        guard o.pace > 0 else { throw bad("--pace", given["--pace"] ?? TimeSpan.format(o.pace), expected: "a positive time span") }
        if o.realTimings {
            // Its timings are the SDK's own: a timing given with it would be silently ignored.
            let overridden = ["--lifetime", "--session-gap", "--refresh", "--throttle"].filter { given[$0] != nil }
            if let first = overridden.first { throw SoakOptionError(first, .notWithRealTimings(overridden)) }
            o.timings = Timings(lifetime: 86_400, sessionGap: 1_800, refresh: 3_600, throttle: 300)
            // The run ends when the device days are covered; the duration is only a bound.
            o.duration = max(o.duration, (o.deviceDays * 86_400 / o.speed * 3 + 60).rounded(.up))
        }
        return o
    }
}
