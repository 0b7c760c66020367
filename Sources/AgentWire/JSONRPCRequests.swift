import AgentCore

// JSON-RPC 2.0 requests (docs/socket-api.md B): one line parsed into a request, a batch or an
// error answer, and typed parameter access with precise -32602 messages.

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
        guard let v = present(key) else { throw missing(key) }
        return v
    }

    private func missing(_ key: String) -> RPCError {
        .invalidParams("missing required parameter '\(key)'", parameter: key)
    }

    private func mismatch(_ key: String, _ expected: String) -> RPCError {
        .invalidParams("parameter '\(key)' must be \(expected)", parameter: key)
    }

    public func value(_ key: String) throws(RPCError) -> JSONValue { try required(key) }
    public func optionalValue(_ key: String) -> JSONValue? { present(key) }

    /// `key` as `convert` reads it: nil when absent (or null), `-32602` naming it when it is
    /// not `expected`. Every typed accessor below is this one and its required form.
    private func typed<T>(_ key: String, _ expected: @autoclosure () -> String, _ convert: (JSONValue) -> T?) throws(RPCError) -> T? {
        guard let v = present(key) else { return nil }
        guard let t = convert(v) else { throw mismatch(key, expected()) }
        return t
    }

    private func typedRequired<T>(_ key: String, _ expected: @autoclosure () -> String, _ convert: (JSONValue) -> T?) throws(RPCError) -> T {
        guard let t = try typed(key, expected(), convert) else { throw missing(key) }
        return t
    }

    public func string(_ key: String) throws(RPCError) -> String { try typedRequired(key, "a string", \.stringValue) }
    public func optionalString(_ key: String) throws(RPCError) -> String? { try typed(key, "a string", \.stringValue) }

    /// A string that is not empty ("parameter 'userId' must be a non-empty string").
    public func nonEmptyString(_ key: String) throws(RPCError) -> String {
        let s = try string(key)
        if s.isEmpty { throw mismatch(key, "a non-empty string") }
        return s
    }

    public func bool(_ key: String) throws(RPCError) -> Bool { try typedRequired(key, "a boolean", \.boolValue) }
    public func optionalBool(_ key: String) throws(RPCError) -> Bool? { try typed(key, "a boolean", \.boolValue) }
    public func double(_ key: String) throws(RPCError) -> Double { try typedRequired(key, "a number", \.numberValue) }
    public func optionalDouble(_ key: String) throws(RPCError) -> Double? { try typed(key, "a number", \.numberValue) }

    /// A finite number that is zero or more (e.g. `minInterval`).
    public func optionalNonNegativeDouble(_ key: String) throws(RPCError) -> Double? {
        guard let n = try optionalDouble(key) else { return nil }
        if !(n >= 0) || !n.isFinite { throw mismatch(key, "a number of 0 or more") }
        return n
    }

    public func object(_ key: String) throws(RPCError) -> [String: JSONValue] { try typedRequired(key, "an object", \.objectValue) }
    public func optionalObject(_ key: String) throws(RPCError) -> [String: JSONValue]? { try typed(key, "an object", \.objectValue) }

    /// A string naming one case of `E` ("parameter 'state' must be one of: active, background").
    public func enumeration<E: RawRepresentable & CaseIterable>(_ key: String, as _: E.Type = E.self)
        throws(RPCError) -> E where E.RawValue == String
    {
        try typedRequired(key, "one of: \(E.allCases.map(\.rawValue).joined(separator: ", "))") { $0.stringValue.flatMap(E.init(rawValue:)) }
    }

    public func optionalEnumeration<E: RawRepresentable & CaseIterable>(_ key: String, as _: E.Type = E.self)
        throws(RPCError) -> E? where E.RawValue == String
    {
        try typed(key, "one of: \(E.allCases.map(\.rawValue).joined(separator: ", "))") { $0.stringValue.flatMap(E.init(rawValue:)) }
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
    /// - a key twice in one object (`{"method":"get","method":"metrics"}`) → -32600 naming the
    ///   key, id null: a request has one reading (a key with a control character or NUL is
    ///   another key, kept whole);
    /// - `[]` → one -32600, id null; batch elements that are invalid → their own -32600;
    /// - `jsonrpc` not `"2.0"`, `method` not a string, `id` not a string, number
    ///   or null, `params` neither object nor array → -32600 (with the id when it is valid);
    /// - `params` an array (by-position parameters, valid JSON-RPC but not
    ///   used by this API) → -32602.
    /// Unknown top-level members are ignored.
    public static func parse(_ line: UnsafeRawBufferPointer) -> RPCMessage {
        let json: JSONValue
        do {
            json = try JSONReader.parse(line, duplicateKeys: .rejectKey)
        } catch {
            if let key = error.duplicateKey {
                return .single(.failure(RPCRejection(id: .null, error: .invalidRequest("duplicate key \"\(key)\": a request has one reading"))))
            }
            return .single(.failure(RPCRejection(id: .null, error: .parseError(error.description))))
        }
        switch json {
        case .array(let elements):
            if elements.isEmpty {
                return .single(.failure(RPCRejection(id: .null, error: .invalidRequest("empty batch"))))
            }
            let literals = IDLiterals.batch(line, count: elements.count)
            return .batch(elements.indices.map { interpret(elements[$0], idLiteral: literals[$0]) })
        default:
            return .single(interpret(json, idLiteral: IDLiterals.single(line)))
        }
    }

    public static func parse(_ line: [UInt8]) -> RPCMessage {
        line.withUnsafeBytes { parse($0) }
    }

    public static func parse(_ line: String) -> RPCMessage {
        parse(Array(line.utf8))
    }

    /// `idLiteral`: the text of the object's number `id`, as sent (`IDLiterals`).
    static func interpret(_ json: JSONValue, idLiteral: String? = nil) -> Result<RPCRequest, RPCRejection> {
        guard case .object(let o) = json else {
            return .failure(RPCRejection(id: .null, error: .invalidRequest("a request must be an object, not \(json.kindName)")))
        }
        var id: RPCID?
        if let rawID = o["id"] {
            guard let valid = RPCID(json: rawID) else {
                return .failure(RPCRejection(id: .null, error: .invalidRequest("'id' must be a string, a number or null")))
            }
            // A number the writer would write otherwise is kept as it came.
            if case .number(let n) = valid, let idLiteral, idLiteral.utf8.elementsEqual(JSONWriter.encode(.number(n))) == false {
                id = .numberLiteral(idLiteral)
            } else {
                id = valid
            }
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
