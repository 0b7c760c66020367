import AgentCore
import AgentWire
import Foundation

/// A request to the lab (docs/lab.md M), read and checked: what the lab service
/// (Sources/Lab) is asked to do. Pure: the paths, methods and bodies of `/lab/*` in, a
/// command or the answer refusing it (400 naming the field, 404, 405) out.
public enum LabCommand: Sendable, Equatable {
    /// `POST /lab/devices {"count", "name", "clock", "config"}`.
    case start(LabStart)
    /// `POST /lab/devices {"attach": SOCKET, "name"}`.
    case attach(name: String, socket: String)
    /// `GET /lab/devices`.
    case list
    /// `GET /lab/devices/NAME`.
    case show(String)
    /// `DELETE /lab/devices/NAME`.
    case stop(String)
    /// `POST /lab/devices/NAME/restart {"signal": "TERM"|"KILL"}`.
    case restart(String, signal: LabSignal)
    /// `POST /lab/devices/NAME/signal {"signal": "HUP"}`: one signal to an owned device.
    case signal(String, signal: String)
    /// `GET /lab/devices/NAME/notifications?after=N`: what the device told its `NOTIFY_SOCKET`.
    case notifications(String, after: Int)
    /// `POST /lab/devices/NAME/call {"method", "params"}`.
    case call(String, method: String, params: JSONValue?)
    /// `GET /lab/devices/NAME/log?tail=N`.
    case log(String, tail: Int)
    /// `POST /lab/advance`.
    case advance(LabAdvanceRequest)
    /// `POST /lab/reset`.
    case reset
    /// `GET /lab/openapi.json`: the lab's OpenAPI document (`LabOpenAPIDocument`).
    case openAPI
    /// `POST /admin/faults {"device": NAME, …}`: a fault scoped to a lab device by its name (the
    /// lab puts the device's HWID in `hwid`); `fault` is the body without `device`.
    case armFault(device: String, fault: [String: JSONValue])
}

public enum LabSignal: String, Sendable, Equatable {
    case term = "TERM", kill = "KILL"
}

extension LabCommand {
    /// The signals `POST /lab/devices/NAME/signal` sends (Linux numbers): a reload, a stop, a
    /// crash, an interrupt.
    public static let signals: [String: Int32] = ["HUP": 1, "INT": 2, "KILL": 9, "TERM": 15, "USR1": 10, "USR2": 12]
}

/// A refusal: the status, the message and, for a 400, the field at fault.
public struct LabRefusal: Error, Sendable, Equatable {
    public var status: Int
    public var message: String
    public var path: String?

    public init(_ status: Int, _ message: String, path: String? = nil) {
        self.status = status
        self.message = message
        self.path = path
    }

    /// More members of the answer (a 409's `skipped`).
    public var details: [String: JSONValue] = [:]
    /// Headers of the answer (a 405's `Allow`).
    public var headers: [HTTPHeader] = []

    public init(_ status: Int, _ message: String, headers: [HTTPHeader]) {
        self.init(status, message)
        self.headers = headers
    }

    public init(_ status: Int, _ message: String, details: [String: JSONValue]) {
        self.init(status, message)
        self.details = details
    }

    public var response: EmulatorResponse {
        var o: [String: JSONValue] = details
        o["error"] = .string(message)
        if let path { o["path"] = .string(path) }
        return .json(status, .object(o), headers: headers)
    }
}

extension LabCommand {
    /// The most devices one `POST /lab/devices` starts.
    public static let maximumCount = 64
    /// Keys the lab sets itself: a device's socket, state and clock are the lab's (its server
    /// too, unless `config.Agent.ServerURL` points it elsewhere).
    static let labKeys: [String: String] = [
        "Agent.Socket": "the lab places each device's socket (DIR/devices/NAME/agent.sock)",
        "Agent.StateDirectory": "the lab places each device's state (DIR/devices/NAME/state)",
        "Device.Clock": "use \"clock\": \"controlled\" or \"system\"",
    ]

    /// Whether `path` is the lab's (`/lab` or under it).
    public static func isLab(_ path: String) -> Bool { path == "/lab" || path.hasPrefix("/lab/") }

    public static func parse(_ request: EmulatorRequest) -> Result<LabCommand, LabRefusal> {
        do throws(LabRefusal) { return .success(try read(request)) } catch { return .failure(error) }
    }

    /// The request read through the route table (`Route.table`'s `/lab` rows: each path's
    /// methods and query parameters), then its body by the route.
    private static func read(_ request: EmulatorRequest) throws(LabRefusal) -> LabCommand {
        if request.path == "/admin/faults" { return try armFault(request) }
        let (route, verbs) = Route.find(request.path)
        guard case .lab(let path) = route else { throw LabRefusal(404, "no such lab route: \(request.path) (docs/lab.md)") }
        guard let verb = verbs[request.method] else {
            throw LabRefusal(405, "\(request.path) takes \(verbs.methods.joined(separator: " or ")), not \(request.method)",
                             headers: [HTTPHeader("Allow", verbs.methods.joined(separator: ", "))])
        }
        if let extra = request.query.keys.sorted().first(where: { !(verb.query ?? []).contains($0) }) {
            throw LabRefusal(400, "unknown query parameter \"\(extra)\"", path: extra)
        }
        switch path {
        case .devices: return request.method == "GET" ? .list : try devicesBody(try object(request.body))
        case .device(let name): return request.method == "GET" ? .show(try deviceName(name, path: "name")) : .stop(try deviceName(name, path: "name"))
        case .restart(let name): return try restart(try deviceName(name, path: "name"), try object(request.body))
        case .call(let name): return try call(try deviceName(name, path: "name"), try object(request.body))
        case .signal(let name): return try signal(try deviceName(name, path: "name"), try object(request.body))
        case .notifications(let name):
            let name = try deviceName(name, path: "name")
            guard let text = request.query["after"] else { return .notifications(name, after: 0) }
            guard let after = Int(text), after >= 0 else {
                throw LabRefusal(400, "expected the number of notifications already read (0 or more), found \"\(text)\"", path: "after")
            }
            return .notifications(name, after: after)
        case .log(let name):
            let name = try deviceName(name, path: "name")
            guard let text = request.query["tail"] else { return .log(name, tail: 100) }
            guard let tail = Int(text), (1...10_000).contains(tail) else {
                throw LabRefusal(400, "expected a number of lines 1-10000, found \"\(text)\"", path: "tail")
            }
            return .log(name, tail: tail)
        case .advance: return .advance(try advance(try object(request.body)))
        case .reset: return .reset
        case .openAPI: return .openAPI
        }
    }

    /// `POST /admin/faults {"device": NAME, …}`: the fault without `device`, for the lab to scope.
    private static func armFault(_ request: EmulatorRequest) throws(LabRefusal) -> LabCommand {
        guard request.method == "POST" else {
            throw LabRefusal(405, "\(request.path) takes POST with a device, not \(request.method)", headers: [HTTPHeader("Allow", "POST")])
        }
        var body = try object(request.body)
        guard let value = body.removeValue(forKey: "device") else { throw LabRefusal(400, "expected the lab device's name", path: "device") }
        guard let text = value.stringValue else { throw LabRefusal(400, "expected a lab device's name", path: "device") }
        guard body["hwid"] == nil else {
            throw LabRefusal(400, "give device or hwid, not both (device names the lab device whose hwid the fault takes)", path: "device")
        }
        return .armFault(device: try deviceName(text, path: "device"), fault: body)
    }

    private static func restart(_ name: String, _ body: [String: JSONValue]) throws(LabRefusal) -> LabCommand {
        try allowed(body, ["signal"])
        guard let text = try string(body, "signal") else { return .restart(name, signal: .term) }
        guard let signal = LabSignal(rawValue: text) else { throw LabRefusal(400, "expected \"TERM\" or \"KILL\", found \"\(text)\"", path: "signal") }
        return .restart(name, signal: signal)
    }

    private static func call(_ name: String, _ body: [String: JSONValue]) throws(LabRefusal) -> LabCommand {
        try allowed(body, ["method", "params"])
        guard let method = try string(body, "method"), !method.isEmpty else {
            throw LabRefusal(400, "expected the socket method to call (e.g. \"status\")", path: "method")
        }
        let params = body["params"] == .null ? nil : body["params"]  // null: absent, as the socket API takes it
        if let params, params.objectValue == nil, params.arrayValue == nil {
            throw LabRefusal(400, "expected an object or an array", path: "params")
        }
        return .call(name, method: method, params: params)
    }

    private static func signal(_ name: String, _ body: [String: JSONValue]) throws(LabRefusal) -> LabCommand {
        try allowed(body, ["signal"])
        guard let text = try string(body, "signal"), LabCommand.signals[text] != nil else {
            throw LabRefusal(400, "expected one of \(LabCommand.signals.keys.sorted().map { "\"\($0)\"" }.joined(separator: ", "))", path: "signal")
        }
        return .signal(name, signal: text)
    }

    // MARK: - Bodies

    private static func advance(_ body: [String: JSONValue]) throws(LabRefusal) -> LabAdvanceRequest {
        do throws(AnswerError) {
            return try LabAdvanceRequest(json: body) { (text, path) throws(AnswerError) in
                do throws(LabRefusal) { return try deviceName(text, path: path) } catch { throw AnswerError(path, error.message) }
            }
        } catch {
            throw LabRefusal(400, error.message, path: error.field)
        }
    }

    // MARK: - Pieces

    static func object(_ body: [UInt8]) throws(LabRefusal) -> [String: JSONValue] {
        if body.isEmpty { return [:] }
        let value: JSONValue
        do { value = try StrictJSONParser.parse(body) } catch { throw LabRefusal(400, "the body is not JSON: \(error)", path: "") }
        guard let object = value.objectValue else { throw LabRefusal(400, "expected a JSON object", path: "") }
        return object
    }

    static func allowed(_ body: [String: JSONValue], _ keys: Set<String>) throws(LabRefusal) {
        if let extra = body.keys.sorted().first(where: { !keys.contains($0) }) {
            throw LabRefusal(400, "unknown field (expected \(keys.sorted().joined(separator: ", ")))", path: extra)
        }
    }

    static func string(_ body: [String: JSONValue], _ key: String) throws(LabRefusal) -> String? {
        guard let value = body[key] else { return nil }
        guard let text = value.stringValue else { throw LabRefusal(400, "expected a string", path: key) }
        return text
    }

    /// A device name: 1-40 of letters, digits, `_`, `-`, `.`, not starting with `.` (it names
    /// a directory under the lab's).
    static func deviceName(_ text: String, path: String) throws(LabRefusal) -> String {
        let ok = !text.isEmpty && text.count <= 40 && !text.hasPrefix(".")
            && text.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_-.".unicodeScalars.contains($0)) }
        guard ok else { throw LabRefusal(400, "expected a name of 1-40 letters, digits, _, - or . (not starting with .), found \"\(text)\"", path: path) }
        return text
    }

    static func isIdentifier(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 64 && text.unicodeScalars.allSatisfy { $0.isASCII && CharacterSet.letters.contains($0) }
    }
}
