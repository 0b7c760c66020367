import AgentCore
import Foundation

/// One device API call as `GET /admin/requests` shows it.
public struct RecordedRequest: Sendable {
    /// Emulator time (docs/emulator.md D.3) when it was received.
    public var time: Date
    /// The device API method (`getFeatureFlags`).
    public var method: String
    public var headers: [HTTPHeader]
    /// The body as JSON, or as a string when it is not JSON.
    public var body: JSONValue
    /// The HTTP status answered, or nil when the connection was dropped.
    public var status: Int?
    /// The kind of the fault that fired for this call, if any.
    public var fault: String?
    /// The body's `request.hwid` and `request.userId`, when present.
    public var hwid: String?
    public var userId: String?

    public init(time: Date, method: String, headers: [HTTPHeader], body: JSONValue, status: Int?, fault: String? = nil,
                hwid: String? = nil, userId: String? = nil) {
        // At the log's resolution, the millisecond it is written with: a record's own time
        // given back as `since=` selects it, and a time taken after it does not.
        self.time = Timestamp.millisecond(time)
        self.method = method
        self.headers = headers
        self.body = body
        self.status = status
        self.fault = fault
        self.hwid = hwid
        self.userId = userId
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
            "hwid": hwid.map(JSONValue.string) ?? .null,
            "userId": userId.map(JSONValue.string) ?? .null,
        ])
    }
}

/// Which recorded calls a `GET /admin/requests[/wait|/count]` selects; nil fields match all.
public struct RequestFilter: Sendable, Hashable {
    public var method: String?
    public var since: Date?
    public var hwid: String?
    public var userId: String?

    public static let parameters: Set<String> = ["method", "since", "hwid", "userId"]


    public init(method: String? = nil, since: Date? = nil, hwid: String? = nil, userId: String? = nil) {
        self.method = method
        self.since = since
        self.hwid = hwid
        self.userId = userId
    }

    /// From the query (`method=&since=&hwid=&userId=`); empty values match all.
    public init(query: [String: String]) throws(DefinitionError) {
        func value(_ name: String) -> String? { query[name].flatMap { $0.isEmpty ? nil : $0 } }
        method = value("method")
        hwid = value("hwid")
        userId = value("userId")
        if let text = query["since"] {
            guard let d = Timestamp.parse(text) else {
                throw DefinitionError([.key("since")], "expected Unix seconds or an ISO 8601 time, found \"\(text)\"")
            }
            // At the log's resolution: every call recorded in since's millisecond or later.
            // A record's own time selects it, and a call made after a time taken by the
            // caller is never missed, even within the same millisecond (a wait for it would
            // hang); a call earlier in that millisecond is selected too.
            since = Timestamp.millisecond(containing: d)
        }
    }

    public func matches(_ r: RecordedRequest) -> Bool {
        (method == nil || r.method == method) && (since == nil || r.time >= since!)
            && (hwid == nil || r.hwid == hwid) && (userId == nil || r.userId == userId)
    }
}

/// A parked `GET /admin/requests/wait`: answered once `count` calls match, or at `timeout`
/// (seconds of host time: the HTTP client's patience, not emulator time).
public struct RequestWait: Sendable, Hashable {
    public var filter: RequestFilter
    public var count: Int
    public var timeout: Double

    public static let maxCount = 100_000
    public static let maxTimeout = 300.0

    public init(filter: RequestFilter = RequestFilter(), count: Int = 1, timeout: Double = 10) {
        self.filter = filter
        self.count = count
        self.timeout = timeout
    }

    public init(query: [String: String]) throws(DefinitionError) {
        filter = try RequestFilter(query: query)
        count = 1
        timeout = 10
        if let text = query["count"] {
            guard let n = Int(text), (1...Self.maxCount).contains(n) else {
                throw DefinitionError([.key("count")], "expected an integer 1-\(Self.maxCount), found \"\(text)\"")
            }
            count = n
        }
        if let text = query["timeout"] {
            guard let t = Double(text), t.isFinite, (0...Self.maxTimeout).contains(t) else {
                throw DefinitionError([.key("timeout")], "expected a number of seconds 0-\(Int(Self.maxTimeout)), found \"\(text)\"")
            }
            timeout = t
        }
    }
}

/// The recorded calls, oldest first, at most `limit` (the oldest are dropped).
public struct RequestLog: Sendable {
    public let limit: Int
    private var entries: [RecordedRequest] = []
    /// Calls appended since the start (the serial number of the next one).
    public private(set) var appended = 0

    public init(limit: Int) { self.limit = max(1, limit) }

    public mutating func append(_ r: RecordedRequest) {
        entries.append(r)
        appended += 1
        // Trim in chunks so appending stays amortized O(1).
        if entries.count >= limit + max(1, limit / 4) { entries.removeFirst(entries.count - limit) }
    }

    public mutating func clear() { entries.removeAll() }

    /// Sets the status of call number `serial` (a forwarded call, answered after it was logged),
    /// if it is still kept.
    public mutating func setStatus(ofCall serial: Int, _ status: Int?) {
        let index = serial - (appended - entries.count)
        if entries.indices.contains(index) { entries[index].status = status }
    }

    /// Calls of `method` (all when nil) received at or after `since`.
    public func select(method: String?, since: Date?) -> [RecordedRequest] {
        select(RequestFilter(method: method, since: since))
    }

    public func select(_ filter: RequestFilter) -> [RecordedRequest] {
        entries.suffix(limit).filter(filter.matches)
    }

    public func count(_ filter: RequestFilter) -> Int {
        entries.suffix(limit).reduce(0) { $0 + (filter.matches($1) ? 1 : 0) }
    }
}
