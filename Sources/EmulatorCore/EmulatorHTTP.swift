import AgentCore

/// A request as the HTTP layer hands it over: path already percent-decoded.
public struct EmulatorRequest: Sendable {
    public var method: String
    public var path: String
    public var query: [String: String]
    public var headers: [HTTPHeader]
    public var body: [UInt8]

    public init(method: String, path: String, query: [String: String] = [:], headers: [HTTPHeader] = [],
                body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }

    /// The first header with this name, compared case-insensitively.
    public func header(_ name: String) -> String? { headers.value(named: name) }
}

public struct EmulatorResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [HTTPHeader]
    public var body: [UInt8]

    public init(status: Int, headers: [HTTPHeader] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func json(_ status: Int, _ value: JSONValue, headers: [HTTPHeader] = []) -> EmulatorResponse {
        EmulatorResponse(status: status, headers: [HTTPHeader("Content-Type", "application/json; charset=utf-8")] + headers,
                     body: JSONWriter.encode(value))
    }

    /// The body parsed as JSON (tests).
    public var jsonBody: JSONValue? { try? StrictJSONParser.parse(body) }
}
