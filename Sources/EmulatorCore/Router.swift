import AgentCore
import Foundation

public enum FlagAction: String, Sendable, CaseIterable {
    case kill, unkill, archive, unarchive
}

/// Where a request goes (docs/device-api.md A, D.2 and D.3).
public enum Route: Sendable, Equatable {
    case device(method: String)        // /json/1.3/{method}
    case apps                          // /admin/apps
    case app(String)                   // /admin/apps/{code}
    case flag(String, String)          // /admin/apps/{code}/flags/{key}
    case flagAction(String, String, FlagAction)
    case faults, requests, devices     // /admin/faults, /admin/requests, /admin/devices
    case requestsWait, requestsCount   // /admin/requests/wait, /admin/requests/count
    case clock, reset, state           // /admin/clock, /admin/reset, /admin/state
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
            case "clock": self = .clock
            case "reset": self = .reset
            case "state": self = .state
            default: self = .notFound
            }
        case 3 where parts[0] == "admin" && parts[1] == "requests" && parts[2] == "wait": self = .requestsWait
        case 3 where parts[0] == "admin" && parts[1] == "requests" && parts[2] == "count": self = .requestsCount
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
        case .device, .flagAction, .reset: ["POST"]
        case .apps, .requestsWait, .requestsCount: ["GET"]
        case .app, .flag: ["GET", "PUT", "DELETE"]
        case .faults: ["GET", "POST", "DELETE"]
        case .requests, .devices: ["GET", "DELETE"]
        case .clock: ["GET", "POST"]
        case .state: ["GET", "PUT"]
        case .notFound: []
        }
    }

    /// The query parameters an admin route takes for `verb` (anything else is a 400);
    /// nil for the device API, which ignores its query.
    public func queryParameters(_ verb: String) -> Set<String>? {
        switch self {
        case .device: nil
        case .requests where verb == "GET", .requestsCount: RequestFilter.parameters
        case .requestsWait: RequestFilter.parameters.union(["count", "timeout"])
        default: []
        }
    }

    /// Whether the admin route takes a JSON body for `verb`; the others accept none
    /// (or an empty object).
    public func takesBody(_ verb: String) -> Bool {
        switch (self, verb) {
        case (.device, _), (.app, "PUT"), (.flag, "PUT"), (.faults, "POST"), (.clock, "POST"), (.state, "PUT"): true
        default: false
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
