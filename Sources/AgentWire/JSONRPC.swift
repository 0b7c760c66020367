import AgentCore

// JSON-RPC 2.0 over the agent's socket (PROTOCOL B): parsing one line into a
// request, a batch or an error answer, typed parameter access with precise
// -32602 messages, and encoding answers and notifications as lines.

// MARK: - Identifiers and errors

/// A request id: a string, a number or null (PROTOCOL B). Echoed exactly.
public enum RPCID: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    case number(Double)
    case null

    public var json: JSONValue {
        switch self {
        case .string(let s): .string(s)
        case .number(let n): .number(n)
        case .null: .null
        }
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

/// A JSON-RPC error object (STYLE rule 6: a stable code, a message, data).
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
    /// PROTOCOL H: `clock` or `advanceClock` with `Clock=system`.
    public static let clockNotControlledCode = -32004

    /// -32700: the line is not valid UTF-8 JSON.
    public static func parseError(_ detail: String) -> RPCError {
        RPCError(code: parseErrorCode, message: "parse error: \(detail)")
    }

    /// -32600: valid JSON, but not a JSON-RPC 2.0 request.
    public static func invalidRequest(_ detail: String) -> RPCError {
        RPCError(code: invalidRequestCode, message: "invalid request: \(detail)")
    }

    /// -32600 for a line over the framer's limit (PROTOCOL B: then the connection is closed).
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

    /// -32004 (PROTOCOL H).
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

// MARK: - Requests

/// A request's named parameters, with accessors that throw precise -32602 errors.
///
/// Absent `params` is `{}`. A `null` value counts as absent for the optional
/// accessors and as "missing" for the required ones.
public struct RPCParams: Sendable, Hashable {
    public var values: [String: JSONValue]

    public init(_ values: [String: JSONValue] = [:]) { self.values = values }

    public subscript(key: String) -> JSONValue? { values[key] }

    private func present(_ key: String) -> JSONValue? {
        guard let v = values[key], !v.isNull else { return nil }
        return v
    }

    private func required(_ key: String) throws(RPCError) -> JSONValue {
        guard let v = present(key) else {
            throw .invalidParams("missing required parameter '\(key)'", parameter: key)
        }
        return v
    }

    private func mismatch(_ key: String, _ expected: String) -> RPCError {
        .invalidParams("parameter '\(key)' must be \(expected)", parameter: key)
    }

    public func value(_ key: String) throws(RPCError) -> JSONValue { try required(key) }
    public func optionalValue(_ key: String) -> JSONValue? { present(key) }

    public func string(_ key: String) throws(RPCError) -> String {
        guard let s = try required(key).stringValue else { throw mismatch(key, "a string") }
        return s
    }

    public func optionalString(_ key: String) throws(RPCError) -> String? {
        guard let v = present(key) else { return nil }
        guard let s = v.stringValue else { throw mismatch(key, "a string") }
        return s
    }

    /// A string that is not empty ("parameter 'userId' must be a non-empty string").
    public func nonEmptyString(_ key: String) throws(RPCError) -> String {
        let s = try string(key)
        if s.isEmpty { throw mismatch(key, "a non-empty string") }
        return s
    }

    public func bool(_ key: String) throws(RPCError) -> Bool {
        guard let b = try required(key).boolValue else { throw mismatch(key, "a boolean") }
        return b
    }

    public func optionalBool(_ key: String) throws(RPCError) -> Bool? {
        guard let v = present(key) else { return nil }
        guard let b = v.boolValue else { throw mismatch(key, "a boolean") }
        return b
    }

    public func double(_ key: String) throws(RPCError) -> Double {
        guard let n = try required(key).numberValue else { throw mismatch(key, "a number") }
        return n
    }

    public func optionalDouble(_ key: String) throws(RPCError) -> Double? {
        guard let v = present(key) else { return nil }
        guard let n = v.numberValue else { throw mismatch(key, "a number") }
        return n
    }

    /// A finite number that is zero or more (e.g. `minInterval`).
    public func optionalNonNegativeDouble(_ key: String) throws(RPCError) -> Double? {
        guard let n = try optionalDouble(key) else { return nil }
        if !(n >= 0) || !n.isFinite { throw mismatch(key, "a number of 0 or more") }
        return n
    }

    public func object(_ key: String) throws(RPCError) -> [String: JSONValue] {
        guard let o = try required(key).objectValue else { throw mismatch(key, "an object") }
        return o
    }

    public func optionalObject(_ key: String) throws(RPCError) -> [String: JSONValue]? {
        guard let v = present(key) else { return nil }
        guard let o = v.objectValue else { throw mismatch(key, "an object") }
        return o
    }

    /// A string naming one case of `E` ("parameter 'state' must be one of: active, background").
    public func enumeration<E: RawRepresentable & CaseIterable>(_ key: String, as _: E.Type = E.self)
        throws(RPCError) -> E where E.RawValue == String
    {
        guard let e = try optionalEnumeration(key, as: E.self) else {
            throw .invalidParams("missing required parameter '\(key)'", parameter: key)
        }
        return e
    }

    public func optionalEnumeration<E: RawRepresentable & CaseIterable>(_ key: String, as _: E.Type = E.self)
        throws(RPCError) -> E? where E.RawValue == String
    {
        guard let v = present(key) else { return nil }
        guard let s = v.stringValue, let e = E(rawValue: s) else {
            let names = E.allCases.map(\.rawValue).joined(separator: ", ")
            throw mismatch(key, "one of: \(names)")
        }
        return e
    }

    /// Refuses parameters outside `known` ("unknown parameter 'x'").
    public func rejectUnknown(_ known: Set<String>) throws(RPCError) {
        for key in values.keys where !known.contains(key) {
            throw .invalidParams("unknown parameter '\(key)'", parameter: key)
        }
    }
}

/// One request; `id == nil` makes it a notification (carried out, never answered).
public struct RPCRequest: Sendable, Hashable {
    public var id: RPCID?
    public var method: String
    public var params: RPCParams

    public init(id: RPCID?, method: String, params: RPCParams = RPCParams()) {
        self.id = id
        self.method = method
        self.params = params
    }

    public var isNotification: Bool { id == nil }
}

/// A request that cannot be carried out, with the id its error answer carries.
public struct RPCRejection: Error, Sendable, Hashable {
    public var id: RPCID
    public var error: RPCError

    public init(id: RPCID, error: RPCError) {
        self.id = id
        self.error = error
    }

    public var response: RPCResponse { RPCResponse(id: id, error: error) }
}

/// What one line holds.
///
/// - `.single(.failure)`: answer the rejection (parse error, empty batch, or
///   an invalid request, including one without an id).
/// - `.batch`: one entry per element, in order; answer the rejections and the
///   non-notification requests in one array, or nothing if that is empty.
public enum RPCMessage: Sendable, Hashable {
    case single(Result<RPCRequest, RPCRejection>)
    case batch([Result<RPCRequest, RPCRejection>])

    /// Parses one line (without its `\n`).
    ///
    /// - invalid UTF-8 or JSON → -32700, id null;
    /// - `[]` → one -32600, id null; batch elements that are invalid → their own -32600;
    /// - `jsonrpc` not `"2.0"`, `method` not a string, `id` not a string, number
    ///   or null, `params` neither object nor array → -32600 (with the id when it is valid);
    /// - `params` an array (by-position parameters, valid JSON-RPC but not
    ///   used by this API) → -32602.
    /// Unknown top-level members are ignored.
    public static func parse(_ line: UnsafeRawBufferPointer) -> RPCMessage {
        let json: JSONValue
        do {
            json = try JSONReader.parse(line)
        } catch {
            return .single(.failure(RPCRejection(id: .null, error: .parseError(error.description))))
        }
        switch json {
        case .array(let elements):
            if elements.isEmpty {
                return .single(.failure(RPCRejection(id: .null, error: .invalidRequest("empty batch"))))
            }
            return .batch(elements.map(interpret))
        default:
            return .single(interpret(json))
        }
    }

    public static func parse(_ line: [UInt8]) -> RPCMessage {
        line.withUnsafeBytes { parse($0) }
    }

    public static func parse(_ line: String) -> RPCMessage {
        parse(Array(line.utf8))
    }

    static func interpret(_ json: JSONValue) -> Result<RPCRequest, RPCRejection> {
        guard case .object(let o) = json else {
            return .failure(RPCRejection(id: .null, error: .invalidRequest("a request must be an object, not \(json.kindName)")))
        }
        var id: RPCID?
        if let rawID = o["id"] {
            guard let valid = RPCID(json: rawID) else {
                return .failure(RPCRejection(id: .null, error: .invalidRequest("'id' must be a string, a number or null")))
            }
            id = valid
        }
        let answerID = id ?? .null
        guard o["jsonrpc"] == .string("2.0") else {
            return .failure(RPCRejection(id: answerID, error: .invalidRequest("'jsonrpc' must be \"2.0\"")))
        }
        guard let method = o["method"]?.stringValue else {
            return .failure(RPCRejection(id: answerID, error: .invalidRequest("'method' must be a string")))
        }
        var params = RPCParams()
        switch o["params"] {
        case nil: break
        case .object(let p)?: params = RPCParams(p)
        case .array?:
            return .failure(RPCRejection(id: answerID, error: .invalidParams("'params' must be an object (by-position parameters are not supported)")))
        case let other?:
            return .failure(RPCRejection(id: answerID, error: .invalidRequest("'params' must be an object, not \(other.kindName)")))
        }
        return .success(RPCRequest(id: id, method: method, params: params))
    }
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
        writer.write(id.json)
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
