import AgentCore
import Foundation

public enum FlagAction: String, Sendable, CaseIterable {
    case kill, unkill, archive, unarchive
}

/// Where a request goes (docs/device-api.md A, D.2 and D.3). Every route is one row of
/// `Route.table`: its path, and for each HTTP method it answers, the query and body it takes.
public enum Route: Sendable, Equatable {
    case device(method: String)        // /json/1.3/{method}
    case apps                          // /admin/apps
    case app(String)                   // /admin/apps/{code}
    case flag(String, String)          // /admin/apps/{code}/flags/{key}
    case flagAction(String, String, FlagAction)
    case faults, requests, devices     // /admin/faults, /admin/requests, /admin/devices
    case requestsWait, requestsCount   // /admin/requests/wait, /admin/requests/count
    case clock, reset, state           // /admin/clock, /admin/reset, /admin/state
    /// `/lab/*` (docs/lab.md): answered by the lab (`LabCommand`, `LabService`), not the state.
    case lab(LabPath)
    case notFound

    /// A lab route (docs/lab.md M): the devices, one device, one of a device's actions, the
    /// clock, the reset, the contract.
    public enum LabPath: Sendable, Equatable {
        case devices, device(String), restart(String), call(String), signal(String), notifications(String), log(String)
        case advance, reset, openAPI
    }

    /// What a route takes with one HTTP method.
    public struct Verb: Sendable, Equatable {
        /// The query parameters it takes (anything else is a 400); nil: the query is ignored
        /// (the device API).
        public var query: Set<String>?
        /// Whether it takes a JSON body (the others accept none, or an empty object).
        public var body: Bool

        static let plain = Verb(query: [], body: false)
        static let json = Verb(query: [], body: true)
        static func filtered(_ extra: Set<String> = []) -> Verb { Verb(query: RequestFilter.parameters.union(extra), body: false) }
    }

    /// A route's methods in the table's order (the order `Allow` lists them in).
    public struct Verbs: Sendable {
        public let all: [(method: String, verb: Verb)]
        init(_ all: [(method: String, verb: Verb)]) { self.all = all }
        public var methods: [String] { all.map(\.method) }
        public subscript(_ method: String) -> Verb? { all.first { $0.method == method }?.verb }
    }

    /// One row of the table: a path (`*` a segment the route takes), the route it names from
    /// those segments (nil: not this route), and its methods.
    struct Row: Sendable {
        let pattern: [String]
        let route: @Sendable ([String]) -> Route?
        let verbs: Route.Verbs

        init(_ path: String, _ verbs: KeyValuePairs<String, Verb>, _ route: @escaping @Sendable ([String]) -> Route?) {
            pattern = path.split(separator: "/").map(String.init)
            self.route = route
            self.verbs = Verbs(verbs.map { ($0.key, $0.value) })
        }
    }

    static let table: [Row] = [
        Row("/json/1.3/*", ["POST": Verb(query: nil, body: true)]) { .device(method: $0[0]) },
        Row("/admin/apps", ["GET": .plain]) { _ in .apps },
        Row("/admin/apps/*", ["GET": .plain, "PUT": .json, "DELETE": .plain]) { .app($0[0]) },
        Row("/admin/apps/*/flags/*", ["GET": .plain, "PUT": .json, "DELETE": .plain]) { .flag($0[0], $0[1]) },
        Row("/admin/apps/*/flags/*/*", ["POST": .plain]) { p in FlagAction(rawValue: p[2]).map { .flagAction(p[0], p[1], $0) } },
        Row("/admin/faults", ["GET": .plain, "POST": .json, "DELETE": .plain]) { _ in .faults },
        Row("/admin/requests", ["GET": .filtered(), "DELETE": .plain]) { _ in .requests },
        Row("/admin/requests/wait", ["GET": .filtered(["count", "timeout"])]) { _ in .requestsWait },
        Row("/admin/requests/count", ["GET": .filtered()]) { _ in .requestsCount },
        Row("/admin/devices", ["GET": .plain, "DELETE": .plain]) { _ in .devices },
        Row("/admin/clock", ["GET": .plain, "POST": .json]) { _ in .clock },
        Row("/admin/reset", ["POST": .plain]) { _ in .reset },
        Row("/admin/state", ["GET": .plain, "PUT": .json]) { _ in .state },
        Row("/lab/devices", ["GET": .plain, "POST": .json]) { _ in .lab(.devices) },
        Row("/lab/devices/*", ["GET": .plain, "DELETE": .plain]) { .lab(.device($0[0])) },
        Row("/lab/devices/*/restart", ["POST": .json]) { .lab(.restart($0[0])) },
        Row("/lab/devices/*/call", ["POST": .json]) { .lab(.call($0[0])) },
        Row("/lab/devices/*/signal", ["POST": .json]) { .lab(.signal($0[0])) },
        Row("/lab/devices/*/notifications", ["GET": Verb(query: ["after"], body: false)]) { .lab(.notifications($0[0])) },
        Row("/lab/devices/*/log", ["GET": Verb(query: ["tail"], body: false)]) { .lab(.log($0[0])) },
        Row("/lab/advance", ["POST": .json]) { _ in .lab(.advance) },
        Row("/lab/reset", ["POST": .plain]) { _ in .lab(.reset) },
        Row("/lab/openapi.json", ["GET": .plain]) { _ in .lab(.openAPI) },
    ]

    /// The route of `path` and its methods (none for `.notFound`).
    static func find(_ path: String) -> (route: Route, verbs: Verbs) {
        guard path.hasPrefix("/") else { return (.notFound, Verbs([])) }
        let parts = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard !parts.contains(where: \.isEmpty) else { return (.notFound, Verbs([])) }
        for row in table where row.pattern.count == parts.count {
            var taken: [String] = []
            guard zip(row.pattern, parts).allSatisfy({ want, part in
                if want == "*" { taken.append(part); return true }
                return want == part
            }) else { continue }
            if let route = row.route(taken) { return (route, row.verbs) }
        }
        return (.notFound, Verbs([]))
    }

    public init(path: String) { self = Self.find(path).route }
}

/// A request routed and its body parsed: the part of the work that needs no
/// state, done before the state's lock is taken.
public struct PreparedRequest: Sendable {
    public var request: EmulatorRequest
    public var route: Route
    /// The route's methods, and what each takes (`Route.table`).
    public var verbs: Route.Verbs
    /// The body as JSON; nil when the body is empty.
    public var json: Result<JSONValue, DefinitionError>?

    public init(_ request: EmulatorRequest) {
        self.request = request
        (route, verbs) = Route.find(request.path)
        json = request.body.isEmpty ? nil : Result { () throws(DefinitionError) in try StrictJSONParser.parse(request.body) }
    }

    /// The device API body's `request.hwid` and `request.userId`, when they are strings.
    public var caller: (hwid: String?, userId: String?) {
        guard case .success(let root)? = json, case .object(let fields)? = root["request"] else { return (nil, nil) }
        return (fields["hwid"]?.stringValue, fields["userId"]?.stringValue)
    }
}

/// What to do with a request: answer (after `delayMs`), drop the connection, or
/// park it until the request log has what a wait asks for.
public struct Outcome: Sendable {
    public enum Body: Sendable {
        case json(JSONValue)
        case raw([UInt8], contentType: String)
    }

    /// How the answer goes out (docs/emulator.md D.3 body faults).
    public enum Delivery: Sendable, Equatable {
        case normal
        /// Headers and the first N bytes of the body, then close.
        case truncate(afterBytes: Int)
        /// Headers, then nothing until the client gives up.
        case stall
        /// Close with RST, nothing answered (`drop` is set too).
        case reset
    }

    public var status: Int
    public var headers: [HTTPHeader]
    public var body: Body
    /// Close the connection without answering (after `delayMs`).
    public var drop: Bool
    public var delayMs: Int
    /// Notable events to log (app loaded, fault armed or fired, …), one line each.
    public var events: [String]
    public var delivery: Delivery = .normal
    /// Set for `GET /admin/requests/wait` when not enough requests have arrived:
    /// the server parks the connection and asks `EmulatorState.answer(_:timedOut:)` again.
    public var wait: RequestWait?
    /// The parked wait's ticket (`EmulatorState.timeOutWait(_:)`).
    public var ticket: Int?
    /// Parked waits this call completed (a device call that grew the request log).
    public var woken: [(ticket: Int, outcome: Outcome)] = []
    /// `--upstream`: the server forwards the call and answers with what comes back.
    public var forward = false
    /// The forwarded call's number in the request log (`EmulatorState.forwardAnswered`).
    public var forwardedCall: Int?

    /// A device API call to forward upstream (its status is the upstream's; 0 until then).
    static var forwarded: Outcome {
        var o = Outcome(status: 0, body: .json(.null))
        o.forward = true
        return o
    }

    init(status: Int, headers: [HTTPHeader] = [], body: Body, drop: Bool = false, delayMs: Int = 0,
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

    static func error(_ status: Int, _ message: String, path: String? = nil, headers: [HTTPHeader] = []) -> Outcome {
        var o: [String: JSONValue] = ["error": .string(message)]
        if let path { o["path"] = .string(path) }  // every 400 has one; "" is the body itself
        return Outcome(status: status, headers: headers, body: .json(.object(o)))
    }

    static func invalid(_ e: DefinitionError) -> Outcome { .error(400, e.description, path: e.path) }

    static func parked(_ wait: RequestWait, ticket: Int) -> Outcome {
        var o = Outcome(status: 0, body: .json(.null))
        o.wait = wait
        o.ticket = ticket
        return o
    }

    /// The bytes to send, or nil when the connection is to be dropped (or parked).
    /// Serializing is done outside the state's lock.
    public func render() -> EmulatorResponse? {
        if drop || wait != nil || forward { return nil }
        switch body {
        case .json(let v):
            return EmulatorResponse(status: status, headers: [HTTPHeader("Content-Type", "application/json; charset=utf-8")] + headers,
                                body: JSONWriter.encode(v))
        case .raw(let bytes, let contentType):
            return EmulatorResponse(status: status, headers: [HTTPHeader("Content-Type", contentType)] + headers, body: bytes)
        }
    }
}
