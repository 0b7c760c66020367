import AgentCore
import Foundation

public struct EmulatorConfiguration: Sendable {
    /// When set, device API calls without `Authorization: Token <token>` get HTTP 401.
    public var requireToken: String?
    /// How many device API calls `GET /admin/requests` keeps (the oldest are dropped).
    public var recordLimit: Int

    public init(requireToken: String? = nil, recordLimit: Int = 20_000) {
        self.requireToken = requireToken
        self.recordLimit = recordLimit
    }
}

public enum FlagAction: String, Sendable, CaseIterable {
    case kill, unkill, archive, unarchive
}

/// Where a request goes (PROTOCOL A and D.2).
public enum Route: Sendable, Equatable {
    case device(method: String)        // /json/1.3/{method}
    case apps                          // /admin/apps
    case app(String)                   // /admin/apps/{code}
    case flag(String, String)          // /admin/apps/{code}/flags/{key}
    case flagAction(String, String, FlagAction)
    case faults, requests, devices     // /admin/faults, /admin/requests, /admin/devices
    case notFound

    public init(path: String) {
        guard path.hasPrefix("/") else { self = .notFound; return }
        let parts = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if parts.contains(where: \.isEmpty) { self = .notFound; return }
        switch parts.count {
        case 3 where parts[0] == "json" && parts[1] == "1.3": self = .device(method: parts[2])
        case 2 where parts[0] == "admin":
            switch parts[1] {
            case "apps": self = .apps
            case "faults": self = .faults
            case "requests": self = .requests
            case "devices": self = .devices
            default: self = .notFound
            }
        case 3 where parts[0] == "admin" && parts[1] == "apps": self = .app(parts[2])
        case 5 where parts[0] == "admin" && parts[1] == "apps" && parts[3] == "flags": self = .flag(parts[2], parts[4])
        case 6 where parts[0] == "admin" && parts[1] == "apps" && parts[3] == "flags":
            if let action = FlagAction(rawValue: parts[5]) { self = .flagAction(parts[2], parts[4], action) } else { self = .notFound }
        default: self = .notFound
        }
    }

    /// The HTTP methods the route answers; others get 405.
    public var allowedMethods: [String] {
        switch self {
        case .device, .flagAction: ["POST"]
        case .apps: ["GET"]
        case .app, .flag: ["GET", "PUT", "DELETE"]
        case .faults: ["GET", "POST", "DELETE"]
        case .requests, .devices: ["GET", "DELETE"]
        case .notFound: []
        }
    }
}

/// A request routed and its body parsed: the part of the work that needs no
/// state, done before the state's lock is taken.
public struct PreparedRequest: Sendable {
    public var request: EmulatorRequest
    public var route: Route
    /// The body as JSON; nil when the body is empty.
    public var json: Result<JSONValue, DefinitionError>?

    public init(_ request: EmulatorRequest) {
        self.request = request
        route = Route(path: request.path)
        json = request.body.isEmpty ? nil : Result { () throws(DefinitionError) in try StrictJSONParser.parse(request.body) }
    }
}

/// What to do with a request: answer (after `delayMs`) or drop the connection.
public struct Outcome: Sendable {
    public enum Body: Sendable {
        case json(JSONValue)
        case raw([UInt8], contentType: String)
    }

    public var status: Int
    public var headers: [HeaderField]
    public var body: Body
    /// Close the connection without answering (after `delayMs`).
    public var drop: Bool
    public var delayMs: Int
    /// Notable events to log (app loaded, fault armed or fired, …), one line each.
    public var events: [String]

    init(status: Int, headers: [HeaderField] = [], body: Body, drop: Bool = false, delayMs: Int = 0,
         events: [String] = []) {
        self.status = status
        self.headers = headers
        self.body = body
        self.drop = drop
        self.delayMs = delayMs
        self.events = events
    }

    static func json(_ status: Int, _ value: JSONValue, events: [String] = []) -> Outcome {
        Outcome(status: status, body: .json(value), events: events)
    }

    static func error(_ status: Int, _ message: String, path: String? = nil, headers: [HeaderField] = []) -> Outcome {
        var o: [String: JSONValue] = ["error": .string(message)]
        if let path, !path.isEmpty { o["path"] = .string(path) }
        return Outcome(status: status, headers: headers, body: .json(.object(o)))
    }

    static func invalid(_ e: DefinitionError) -> Outcome { .error(400, e.description, path: e.path) }

    /// The bytes to send, or nil when the connection is to be dropped.
    /// Serializing is done outside the state's lock.
    public func render() -> EmulatorResponse? {
        if drop { return nil }
        switch body {
        case .json(let v):
            return EmulatorResponse(status: status, headers: [HeaderField("Content-Type", "application/json; charset=utf-8")] + headers,
                                body: JSONWriter.encode(v))
        case .raw(let bytes, let contentType):
            return EmulatorResponse(status: status, headers: [HeaderField("Content-Type", contentType)] + headers, body: bytes)
        }
    }
}

/// Everything the emulator knows: applications, devices, armed faults and
/// recorded calls. Pure: the time comes in with every call.
public struct EmulatorState: Sendable {
    public let configuration: EmulatorConfiguration
    public private(set) var apps: [String: Application] = [:]
    public private(set) var devices: [String: DeviceRecord] = [:]
    public private(set) var faults = FaultQueue()
    public private(set) var requestLog: RequestLog

    /// The methods of PROTOCOL A.2 that the emulator acts on; others are recorded and answered OK.
    public static let knownMethods: Set<String> = ["applicationOpen", "registerDevice", "unregisterDevice",
                                                   "registerUser", "postEvent", "getFeatureFlags"]
    /// `status_code` for an application code the emulator does not know.
    public static let applicationNotFoundCode = 210

    public init(configuration: EmulatorConfiguration = EmulatorConfiguration(), apps: [Application] = []) {
        self.configuration = configuration
        requestLog = RequestLog(limit: configuration.recordLimit)
        for app in apps { self.apps[app.code] = app }
    }

    public mutating func put(_ app: Application) { apps[app.code] = app }

    /// Routes, parses and handles a request in one step (tests; the server splits it).
    public mutating func handle(_ request: EmulatorRequest, now: Date) -> Outcome {
        handle(PreparedRequest(request), now: now)
    }

    public mutating func handle(_ p: PreparedRequest, now: Date) -> Outcome {
        let allowed = p.route.allowedMethods
        if allowed.isEmpty { return .error(404, "no such route: \(p.request.path)") }
        guard allowed.contains(p.request.method) else {
            return .error(405, "\(p.request.method) not allowed on \(p.request.path) (allowed: \(allowed.joined(separator: ", ")))",
                          headers: [HeaderField("Allow", allowed.joined(separator: ", "))])
        }
        switch p.route {
        case .device(let method): return device(method, p, now: now)
        default: return admin(p, now: now)
        }
    }

    // MARK: - Device API (PROTOCOL A)

    static func envelope(_ code: Int, _ message: String, _ response: JSONValue = .null) -> JSONValue {
        .object(["status_code": .number(Double(code)), "status_message": .string(message), "response": response])
    }

    mutating func device(_ method: String, _ p: PreparedRequest, now: Date) -> Outcome {
        let (outcome, fault) = deviceOutcome(method, p, now: now)
        let body: JSONValue
        switch p.json {
        case .success(let v)?: body = v
        case .failure?: body = .string(String(decoding: p.request.body, as: UTF8.self))
        case nil: body = .null
        }
        requestLog.append(RecordedRequest(time: now, method: method, headers: p.request.headers, body: body,
                                          status: outcome.drop ? nil : outcome.status, fault: fault?.kind.name))
        return outcome
    }

    /// The answer to a device API call and the fault that fired for it, if any.
    mutating func deviceOutcome(_ method: String, _ p: PreparedRequest, now: Date) -> (Outcome, Fault?) {
        if let token = configuration.requireToken, p.request.header("Authorization") != "Token \(token)" {
            return (.json(401, Self.envelope(401, "Unauthorized: expected Authorization: Token <token>")), nil)
        }
        var fired: Fault?
        var partial = false
        var delayMs = 0
        var events: [String] = []
        if let (fault, remaining) = faults.next(for: method) {
            fired = fault
            delayMs = fault.delayMs
            events.append("fault fired method=\(method) kind=\(fault.kind.name) delayMs=\(fault.delayMs) remaining=\(remaining)")
            let failed: Outcome?
            switch fault.kind {
            case .http(let status, let retryAfter):
                failed = Outcome(status: status, headers: retryAfter.map { [HeaderField("Retry-After", String($0))] } ?? [],
                                 body: .json(Self.envelope(status, "Emulated HTTP \(status)")))
            case .statusCode(let code):
                failed = .json(200, Self.envelope(code, "Emulated status_code \(code)"))
            case .garbage:
                failed = Outcome(status: 200, body: .raw(Array("<html><body><h1>502 Bad Gateway</h1>emulated garbage</body></html>\n".utf8),
                                                         contentType: "text/html"))
            case .drop:
                failed = Outcome(status: 0, body: .json(.null), drop: true)
            case .partial:
                partial = true
                failed = nil
            case .delayOnly:
                failed = nil
            }
            if var failed {
                failed.delayMs = delayMs
                failed.events = events
                return (failed, fired)
            }
        }
        var outcome = answer(method, p, partial: partial, now: now)
        outcome.delayMs = delayMs
        outcome.events = events
        return (outcome, fired)
    }

    mutating func answer(_ method: String, _ p: PreparedRequest, partial: Bool, now: Date) -> Outcome {
        func bad(_ e: DefinitionError) -> Outcome { .json(400, Self.envelope(400, e.description)) }
        let root: JSONValue
        switch p.json {
        case .success(let v)?: root = v
        case .failure(let e)?: return bad(e)
        case nil: return bad(DefinitionError([], "empty body (expected {\"request\": {…}})"))
        }
        guard case .object(let top) = root, let request = top["request"] else {
            return bad(DefinitionError([], "expected {\"request\": {…}}"))
        }
        let fields: [String: JSONValue]
        let hwid: String?
        let userId: String?
        do throws(DefinitionError) {
            guard case .object(let o) = request else {
                throw DefinitionError([.key("request")], "expected an object, found \(request.kindName)")
            }
            fields = o
            func string(_ key: String, required: Bool) throws(DefinitionError) -> String? {
                guard let v = o[key] else {
                    if required { throw DefinitionError([.key("request"), .key(key)], "missing (expected a string)") }
                    return nil
                }
                guard case .string(let s) = v else {
                    throw DefinitionError([.key("request"), .key(key)], "expected a string, found \(v.kindName)")
                }
                return s
            }
            _ = try string("application", required: true)
            hwid = try string("hwid", required: Self.knownMethods.contains(method))
            userId = try string("userId", required: false)
            _ = try string("v", required: false)
            if let t = o["device_type"], t.numberValue == nil {
                throw DefinitionError([.key("request"), .key("device_type")], "expected a number, found \(t.kindName)")
            }
        } catch {
            return bad(error)
        }
        guard let app = apps[fields["application"]!.stringValue!] else {
            return .json(200, Self.envelope(Self.applicationNotFoundCode, "Application not found"))
        }
        guard Self.knownMethods.contains(method), let hwid else { return .json(200, Self.envelope(200, "OK", .object([:]))) }

        var record = devices[hwid] ?? DeviceRecord(hwid: hwid)
        if let userId { record.userId = userId }
        record.lastSeen = now
        var response: JSONValue = .object([:])
        switch method {
        case "registerDevice":
            guard case .string(let token)? = fields["push_token"], !token.isEmpty else {
                return bad(DefinitionError([.key("request"), .key("push_token")], "expected a non-empty string"))
            }
            record.pushToken = token
            record.gateway = fields["gateway"]?.stringValue
        case "unregisterDevice":
            record.pushToken = nil
        case "postEvent":
            guard case .string(let name)? = fields["event"], !name.isEmpty else {
                return bad(DefinitionError([.key("request"), .key("event")], "expected a non-empty string"))
            }
            var attributes: [String: JSONValue] = [:]
            switch fields["attributes"] {
            case .object(let a)?: attributes = a
            case nil, .null?: break
            case let other?:
                return bad(DefinitionError([.key("request"), .key("attributes")], "expected an object, found \(other.kindName)"))
            }
            var time = now
            switch fields["timestampUTC"] {
            case .number(let t)?: time = Date(timeIntervalSince1970: t)
            case nil: break
            case let other?:
                return bad(DefinitionError([.key("request"), .key("timestampUTC")], "expected a number, found \(other.kindName)"))
            }
            record.record(PostedEvent(name: name, time: time, attributes: attributes))
        case "getFeatureFlags":
            let ctx = DeviceContext(hwid: hwid, userId: userId ?? record.userId ?? hwid, device: record, now: now,
                                        partial: partial)
            response = app.featureFlagsResponse(ctx)
        default:  // applicationOpen, registerUser: the common fields say it all
            break
        }
        devices[hwid] = record
        return .json(200, Self.envelope(200, "OK", response))
    }

    // MARK: - Admin API (PROTOCOL D.2)

    mutating func admin(_ p: PreparedRequest, now: Date) -> Outcome {
        let verb = p.request.method
        func body() -> Result<JSONValue, DefinitionError> {
            p.json ?? .failure(DefinitionError([], "empty body (expected JSON)"))
        }
        switch p.route {
        case .apps:
            return .json(200, .object(["apps": .array(apps.keys.sorted().map { apps[$0]!.json })]))

        case .app(let code):
            switch verb {
            case "GET":
                guard let app = apps[code] else { return .error(404, "no application \"\(code)\"") }
                return .json(200, app.json)
            case "PUT":
                do throws(DefinitionError) {
                    let app = try Application(json: body().get(), expectedCode: code)
                    let replaced = apps[code] != nil
                    apps[code] = app
                    return .json(200, app.json,
                                 events: ["app \(replaced ? "replaced" : "loaded") code=\(code) flags=\(app.flags.count)"])
                } catch {
                    return .invalid(error)
                }
            default:
                guard apps.removeValue(forKey: code) != nil else { return .error(404, "no application \"\(code)\"") }
                return .json(200, .object(["deleted": .string(code)]), events: ["app removed code=\(code)"])
            }

        case .flag(let code, let key):
            guard var app = apps[code] else { return .error(404, "no application \"\(code)\"") }
            switch verb {
            case "GET":
                guard let flag = app.flag(key) else { return .error(404, "no flag \"\(key)\" in application \"\(code)\"") }
                return .json(200, flag.json)
            case "PUT":
                do throws(DefinitionError) {
                    let flag = try FlagDefinition(json: body().get(), expectedKey: key)
                    app.upsert(flag)
                    apps[code] = app
                    return .json(200, flag.json, events: ["flag replaced code=\(code) key=\(key)"])
                } catch {
                    return .invalid(error)
                }
            default:
                guard app.flag(key) != nil else { return .error(404, "no flag \"\(key)\" in application \"\(code)\"") }
                app.flags.removeAll { $0.key == key }
                apps[code] = app
                return .json(200, .object(["deleted": .string(key)]), events: ["flag removed code=\(code) key=\(key)"])
            }

        case .flagAction(let code, let key, let action):
            guard var app = apps[code] else { return .error(404, "no application \"\(code)\"") }
            guard let k = app.flags.firstIndex(where: { $0.key == key }) else {
                return .error(404, "no flag \"\(key)\" in application \"\(code)\"")
            }
            switch action {
            case .kill: app.flags[k].killed = true
            case .unkill: app.flags[k].killed = false
            case .archive: app.flags[k].archived = true
            case .unarchive: app.flags[k].archived = false
            }
            apps[code] = app
            return .json(200, app.flags[k].json, events: ["flag \(action.rawValue) code=\(code) key=\(key)"])

        case .faults:
            switch verb {
            case "GET":
                return .json(200, .object(["faults": .array(faults.pending.map(\.json))]))
            case "POST":
                do throws(DefinitionError) {
                    let fault = try Fault(json: body().get())
                    faults.arm(fault)
                    return .json(200, .object(["armed": fault.json]),
                                 events: ["fault armed method=\(fault.method) kind=\(fault.kind.name) times=\(fault.times) delayMs=\(fault.delayMs)"])
                } catch {
                    return .invalid(error)
                }
            default:
                faults.clear()
                return .json(200, .object(["cleared": true]), events: ["faults cleared"])
            }

        case .requests:
            if verb == "DELETE" {
                requestLog.clear()
                return .json(200, .object(["cleared": true]))
            }
            var since: Date?
            if let text = p.request.query["since"] {
                guard let d = Timestamp.parse(text) else {
                    return .error(400, "since: expected Unix seconds or an ISO 8601 time, found \"\(text)\"", path: "since")
                }
                since = d
            }
            let method = p.request.query["method"].flatMap { $0.isEmpty ? nil : $0 }
            let selected = requestLog.select(method: method, since: since)
            return .json(200, .object(["requests": .array(selected.map(\.json)), "count": .number(Double(selected.count))]))

        case .devices:
            if verb == "DELETE" {
                devices.removeAll()
                return .json(200, .object(["cleared": true]))
            }
            return .json(200, .object(["devices": .array(devices.keys.sorted().map { devices[$0]!.json })]))

        case .device, .notFound:
            return .error(404, "no such route: \(p.request.path)")
        }
    }
}
