import AgentCore
import Foundation

/// One device API call as `GET /admin/requests` shows it.
public struct RecordedRequest: Sendable {
    public var time: Date
    /// The device API method (`getFeatureFlags`).
    public var method: String
    public var headers: [HeaderField]
    /// The body as JSON, or as a string when it is not JSON.
    public var body: JSONValue
    /// The HTTP status answered, or nil when the connection was dropped.
    public var status: Int?
    /// The kind of the fault that fired for this call, if any.
    public var fault: String?

    public init(time: Date, method: String, headers: [HeaderField], body: JSONValue, status: Int?, fault: String? = nil) {
        self.time = time
        self.method = method
        self.headers = headers
        self.body = body
        self.status = status
        self.fault = fault
    }

    public var json: JSONValue {
        var headerObject: [String: JSONValue] = [:]
        for h in headers {
            if case .string(let previous)? = headerObject[h.name] {
                headerObject[h.name] = .string(previous + ", " + h.value)
            } else {
                headerObject[h.name] = .string(h.value)
            }
        }
        return .object([
            "time": .string(Timestamp.format(time)),
            "unixTime": .number(time.timeIntervalSince1970),
            "method": .string(method),
            "headers": .object(headerObject),
            "body": body,
            "status": status.map { .number(Double($0)) } ?? .null,
            "fault": fault.map(JSONValue.string) ?? .null,
        ])
    }
}

/// The recorded calls, oldest first, at most `limit` (the oldest are dropped).
public struct RequestLog: Sendable {
    public let limit: Int
    private var entries: [RecordedRequest] = []

    public init(limit: Int) { self.limit = max(1, limit) }

    public mutating func append(_ r: RecordedRequest) {
        entries.append(r)
        // Trim in chunks so appending stays amortized O(1).
        if entries.count >= limit + max(1, limit / 4) { entries.removeFirst(entries.count - limit) }
    }

    public mutating func clear() { entries.removeAll() }

    /// Calls of `method` (all when nil) received at or after `since`.
    public func select(method: String?, since: Date?) -> [RecordedRequest] {
        entries.suffix(limit).filter { r in
            (method == nil || r.method == method) && (since == nil || r.time >= since!)
        }
    }
}
