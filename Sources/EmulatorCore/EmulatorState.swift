import AgentCore
import Foundation

public struct EmulatorConfiguration: Sendable {
    /// When set, device API calls without `Authorization: Token <token>` get HTTP 401.
    public var requireToken: String?
    /// How many device API calls `GET /admin/requests` keeps (the oldest are dropped).
    public var recordLimit: Int
    /// `--upstream URL`: device API calls are forwarded there (the server does it; the
    /// state answers them with `Outcome.forward`), faults and waits still apply.
    public var upstream: String?
    /// `--replay FILE.har`: device API calls are answered from this recording.
    public var replay: Recording?
    /// When set, `/admin/…` requests without `Authorization: Bearer <token>` get HTTP 401.
    public var adminToken: String?

    public init(requireToken: String? = nil, recordLimit: Int = 20_000, upstream: String? = nil, replay: Recording? = nil,
                adminToken: String? = nil) {
        self.requireToken = requireToken
        self.recordLimit = recordLimit
        self.upstream = upstream
        self.replay = replay
        self.adminToken = adminToken
    }
}

/// Everything the emulator knows: applications, devices, armed faults, recorded
/// calls and its clock offset. Pure: the host time comes in with every call (or
/// from the injected `EmulatorClock`); the emulator's time is that plus `clockOffset`.
///
/// The routes live in extensions along the API's seams: the device API
/// (`EmulatorState+DeviceAPI.swift`), D.2's admin calls (`EmulatorState+AdminAPI.swift`) and D.3's lab calls
/// (`EmulatorState+LabAPI.swift`); the whole-state document in `StateDocument.swift`.
public struct EmulatorState: Sendable {
    public let configuration: EmulatorConfiguration
    public let clock: any EmulatorClock
    /// The applications `POST /admin/reset` goes back to (the `--apps` file).
    public let baselineApps: [String: Application]
    public internal(set) var apps: [String: Application] = [:]
    public internal(set) var devices: [String: DeviceRecord] = [:]
    public internal(set) var faults = FaultQueue()
    public internal(set) var requestLog: RequestLog
    /// Seconds the emulator's time is ahead of the host's (`POST /admin/clock`); never negative.
    public internal(set) var clockOffset: TimeInterval = 0
    /// `--replay`: how many answers of each method were given (the next is the next recorded one).
    var replayed: [String: Int] = [:]
    /// Parked `GET /admin/requests/wait` calls (not part of the saved state).
    public internal(set) var waits = WaitRoom()

    /// `status_code` for an application code the emulator does not know.
    public static let applicationNotFoundCode = 210

    public init(configuration: EmulatorConfiguration = EmulatorConfiguration(), apps: [Application] = [],
                clock: any EmulatorClock = SystemClock()) {
        self.configuration = configuration
        self.clock = clock
        requestLog = RequestLog(limit: configuration.recordLimit)
        var byCode: [String: Application] = [:]
        for app in apps { byCode[app.code] = app }
        baselineApps = byCode
        self.apps = byCode
    }

    public mutating func put(_ app: Application) { apps[app.code] = app }

    /// The emulator's time at host time `hostNow`.
    public func emulatorTime(_ hostNow: Date) -> Date { hostNow.addingTimeInterval(clockOffset) }

    /// The emulator's time now, by the injected clock.
    public var now: Date { emulatorTime(clock.now()) }

    /// Back to the `--apps` file: faults, requests, devices and the clock offset cleared.
    public mutating func reset() {
        apps = baselineApps
        devices.removeAll()
        faults.clear()
        requestLog.clear()
        recountParkedWaits()
        clockOffset = 0
        replayed.removeAll()
    }

    /// Routes, parses and handles a request at the injected clock's time.
    public mutating func handle(_ request: EmulatorRequest) -> Outcome {
        handle(PreparedRequest(request), now: clock.now())
    }

    /// Routes, parses and handles a request in one step (tests; the server splits it).
    /// `now` is the host's time; the emulator's is `now` plus the clock offset.
    public mutating func handle(_ request: EmulatorRequest, now: Date) -> Outcome {
        handle(PreparedRequest(request), now: now)
    }

    public mutating func handle(_ p: PreparedRequest, now hostNow: Date) -> Outcome {
        // Before anything else, unknown routes included: without the token nothing is told.
        guard configuration.authorized(path: p.request.path, headers: p.request.headers) else { return EmulatorConfiguration.unauthorized }
        let allowed = p.verbs.methods
        if allowed.isEmpty { return .error(404, "no such route: \(p.request.path)") }
        let verb = p.request.method
        guard allowed.contains(verb) else {
            return .error(405, "\(verb) not allowed on \(p.request.path) (allowed: \(allowed.joined(separator: ", ")))",
                          headers: [HTTPHeader("Allow", allowed.joined(separator: ", "))])
        }
        let now = emulatorTime(hostNow)
        if case .device(let method) = p.route { return device(method, p, now: now) }
        if let known = p.verbs[verb]?.query,
           let unknown = p.request.query.keys.filter({ !known.contains($0) }).sorted().first {
            let expected = known.isEmpty ? "none" : "one of: " + known.sorted().joined(separator: ", ")
            return .error(400, "\(unknown): unknown query parameter (expected \(expected))", path: unknown)
        }
        if p.verbs[verb]?.body == false, let json = p.json {
            switch json {
            case .success(.object(let o)) where o.isEmpty: break
            case .success(.object(let o)):
                let unknown = o.keys.sorted()[0]
                return .error(400, "\(unknown): unknown field (\(verb) \(p.request.path) takes no body)", path: unknown)
            case .success(let other):
                return .error(400, "\(verb) \(p.request.path) takes no body, found \(other.kindName)", path: "")
            case .failure(let e):
                return .invalid(e)
            }
        }
        switch p.route {
        case .requestsWait, .requestsCount, .clock, .reset, .state: return lab(p, now: now, hostNow: hostNow)
        default: return admin(p, now: now)
        }
    }
}
