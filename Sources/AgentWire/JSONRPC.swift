import AgentCore

// JSON-RPC 2.0 over the agent's socket (docs/socket-api.md B): parsing one line into a
// request, a batch or an error answer, typed parameter access with precise
// -32602 messages, and encoding answers and notifications as lines.

// MARK: - Identifiers and errors

/// A request id: a string, a number or null (docs/socket-api.md B). Echoed exactly.
public enum RPCID: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    case number(Double)
    /// A number id as the client wrote it (`9007199254740993`, `1.50`, `1e3`): echoed byte
    /// for byte, which a Double cannot promise. The general path keeps every number id so.
    case numberLiteral(String)
    case null

    public var json: JSONValue {
        switch self {
        case .string(let s): .string(s)
        case .number(let n): .number(n)
        case .numberLiteral(let text): .number(Double(text) ?? 0)
        case .null: .null
        }
    }

    /// Writes the id: a number literal exactly as it came.
    public func write(to writer: inout JSONWriter) {
        if case .numberLiteral(let text) = self { writer.writeASCII(text) } else { writer.write(json) }
    }

    public init?(json: JSONValue) {
        switch json {
        case .string(let s): self = .string(s)
        case .number(let n): self = .number(n)
        case .null: self = .null
        default: return nil
        }
    }

    public var description: String { JSONWriter.string(json) }
}

/// A JSON-RPC error object (docs/architecture.md §6: a stable code, a message, data).
public struct RPCError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var data: JSONValue?

    public init(code: Int, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public static let parseErrorCode = -32700
    public static let invalidRequestCode = -32600
    public static let methodNotFoundCode = -32601
    public static let invalidParamsCode = -32602
    public static let internalErrorCode = -32603
    /// B.3: a state-changing method called by a client that may not.
    public static let permissionDeniedCode = -32001
    /// docs/device-clock.md H: `clock` or `advanceClock` with `Clock=system`.
    public static let clockNotControlledCode = -32004
    /// A state-changing method whose change could not be saved (full disk, read-only or
    /// unreadable state): the change holds in memory, the save is retried.
    public static let stateNotSavedCode = -32005

    /// -32700: the line is not valid UTF-8 JSON.
    public static func parseError(_ detail: String) -> RPCError {
        RPCError(code: parseErrorCode, message: "parse error: \(detail)")
    }

    /// -32600: valid JSON, but not a JSON-RPC 2.0 request.
    public static func invalidRequest(_ detail: String) -> RPCError {
        RPCError(code: invalidRequestCode, message: "invalid request: \(detail)")
    }

    /// -32600 for a line over the framer's limit (docs/socket-api.md B: then the connection is closed).
    public static func lineTooLong(maximum: Int) -> RPCError {
        invalidRequest("line longer than \(maximum) bytes")
    }

    /// -32601.
    public static func methodNotFound(_ method: String) -> RPCError {
        RPCError(code: methodNotFoundCode, message: "method not found: '\(method)'", data: ["method": .string(method)])
    }

    /// -32602, with the parameter's name in `data` when there is one.
    public static func invalidParams(_ message: String, parameter: String? = nil) -> RPCError {
        RPCError(code: invalidParamsCode, message: message,
                 data: parameter.map { ["parameter": .string($0)] })
    }

    /// -32603.
    public static func internalError(_ detail: String) -> RPCError {
        RPCError(code: internalErrorCode, message: "internal error: \(detail)")
    }

    /// -32001 (B.3): the message names the method.
    public static func permissionDenied(method: String) -> RPCError {
        RPCError(code: permissionDeniedCode,
                 message: "permission denied: '\(method)' needs root, the agent's user or membership in ControlGroup",
                 data: ["method": .string(method)])
    }

    /// -32005: the method's change is in memory but not on disk; `data` names the method and
    /// carries the store's error.
    public static func stateNotSaved(method: String, error: String) -> RPCError {
        RPCError(code: stateNotSavedCode,
                 message: "state not saved: '\(method)' took effect in memory, but saving the state failed: \(error) (retried every 30 s; see status.storageError)",
                 data: ["method": .string(method), "error": .string(error)])
    }

    /// -32004 (docs/device-clock.md H).
    public static func clockNotControlled(method: String) -> RPCError {
        RPCError(code: clockNotControlledCode, message: "the device clock is not controlled: '\(method)' needs [Device] Clock=controlled",
                 data: ["method": .string(method)])
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["code": .number(Double(code)), "message": .string(message)]
        if let data { o["data"] = data }
        return .object(o)
    }

    /// Reads an error object from an answer (the client side).
    public init?(json: JSONValue) {
        guard let code = json["code"]?.numberValue, let exact = Int(exactly: code),
              let message = json["message"]?.stringValue else { return nil }
        self.init(code: exact, message: message, data: json["data"])
    }

    public var description: String { "\(code): \(message)" }
}

// MARK: - Answers

/// An answer: a result or an error, for one id.
public struct RPCResponse: Sendable, Hashable {
    public var id: RPCID
    public var outcome: Result<JSONValue, RPCError>

    public init(id: RPCID, result: JSONValue) {
        self.id = id
        outcome = .success(result)
    }

    public init(id: RPCID, error: RPCError) {
        self.id = id
        outcome = .failure(error)
    }

    /// Appends `{"jsonrpc":"2.0","id":…,"result"|"error":…}` (no newline).
    public func write(to writer: inout JSONWriter) {
        writer.writeASCII(#"{"jsonrpc":"2.0","id":"#)
        id.write(to: &writer)
        switch outcome {
        case .success(let result):
            writer.writeASCII(#","result":"#)
            writer.write(result)
        case .failure(let error):
            writer.writeASCII(#","error":{"code":"#)
            writer.writeInteger(Int64(error.code))
            writer.writeASCII(#","message":"#)
            writer.writeString(error.message)
            if let data = error.data {
                writer.writeASCII(#","data":"#)
                writer.write(data)
            }
            writer.bytes.append(UInt8(ascii: "}"))
        }
        writer.bytes.append(UInt8(ascii: "}"))
    }
}

/// Encodes the lines the agent and its clients send. Every line ends in `\n`.
public enum RPCEncoder {
    public static func result(id: RPCID, _ result: JSONValue) -> [UInt8] {
        line(RPCResponse(id: id, result: result))
    }

    public static func error(id: RPCID, _ error: RPCError) -> [UInt8] {
        line(RPCResponse(id: id, error: error))
    }

    public static func line(_ response: RPCResponse) -> [UInt8] {
        var writer = JSONWriter(capacity: 160)
        response.write(to: &writer)
        writer.bytes.append(0x0A)
        return writer.bytes
    }

    /// A batch answer; nil when there is nothing to answer (all notifications).
    public static func batch(_ responses: [RPCResponse]) -> [UInt8]? {
        guard !responses.isEmpty else { return nil }
        var writer = JSONWriter(capacity: 160 * responses.count)
        writer.bytes.append(UInt8(ascii: "["))
        for (n, response) in responses.enumerated() {
            if n > 0 { writer.bytes.append(UInt8(ascii: ",")) }
            response.write(to: &writer)
        }
        writer.writeASCII("]\n")
        return writer.bytes
    }

    /// `{"jsonrpc":"2.0","method":…,"params":…}` (e.g. `featureFlagsDidUpdate`).
    public static func notification(method: String, params: JSONValue) -> [UInt8] {
        var writer = JSONWriter(capacity: 160)
        writer.writeASCII(#"{"jsonrpc":"2.0","method":"#)
        writer.writeString(method)
        writer.writeASCII(#","params":"#)
        writer.write(params)
        writer.writeASCII("}\n")
        return writer.bytes
    }

    /// A request line (the client side); `id == nil` sends a notification.
    public static func request(id: RPCID?, method: String, params: [String: JSONValue] = [:]) -> [UInt8] {
        var writer = JSONWriter(capacity: 160)
        writer.writeASCII(#"{"jsonrpc":"2.0","#)
        if let id {
            writer.writeASCII(#""id":"#)
            writer.write(id.json)
            writer.bytes.append(UInt8(ascii: ","))
        }
        writer.writeASCII(#""method":"#)
        writer.writeString(method)
        writer.writeASCII(#","params":"#)
        writer.write(.object(params))
        writer.writeASCII("}\n")
        return writer.bytes
    }
}

// MARK: - The client side

/// What a line from the agent holds, as a client reads it.
public enum RPCServerMessage: Sendable, Hashable {
    case response(RPCResponse)
    case batch([RPCResponse])
    case notification(method: String, params: JSONValue)

    /// Why a line from the agent cannot be understood.
    public struct Malformed: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    public static func parse(_ line: [UInt8]) throws(Malformed) -> RPCServerMessage {
        let json: JSONValue
        do {
            json = try JSONReader.parse(line)
        } catch {
            throw Malformed(description: "not JSON: \(error)")
        }
        if case .array(let elements) = json {
            var responses: [RPCResponse] = []
            for element in elements { responses.append(try response(element)) }
            return .batch(responses)
        }
        if let method = json["method"]?.stringValue, json["id"] == nil {
            return .notification(method: method, params: json["params"] ?? .object([:]))
        }
        return .response(try response(json))
    }

    static func response(_ json: JSONValue) throws(Malformed) -> RPCResponse {
        guard case .object(let o) = json, o["jsonrpc"] == .string("2.0") else {
            throw Malformed(description: "not a JSON-RPC 2.0 answer")
        }
        guard let rawID = o["id"], let id = RPCID(json: rawID) else {
            throw Malformed(description: "answer without a valid id")
        }
        if let result = o["result"] { return RPCResponse(id: id, result: result) }
        if let errorJSON = o["error"], let error = RPCError(json: errorJSON) {
            return RPCResponse(id: id, error: error)
        }
        throw Malformed(description: "answer with neither a result nor a valid error")
    }
}
