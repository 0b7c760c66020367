import AgentCore
import FoundationEssentials

// The answers of `get`, `refresh` and `status` (docs/socket-api.md B.1, B.2) as values, both ways: the
// daemon encodes them here, and clients (agentctl, the soak runner, the fault tool) decode them
// with the same types, so a field renamed on one side fails the other's tests instead of reading as "?".

/// An answer that does not have the shape of the protocol; names the field.
public struct AnswerError: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var message: String
    public init(_ field: String, _ message: String) {
        self.field = field
        self.message = message
    }
    public var description: String { "\(field): \(message)" }
}

/// Socket times: ISO 8601 UTC, to the second (`2026-12-02T10:00:00Z`); null when absent.
public enum SocketTime {
    public static func json(_ date: Date?) -> JSONValue {
        date.map { .string(string($0)) } ?? .null
    }

    /// `2026-12-02T10:00:00Z`.
    public static func string(_ date: Date) -> String { date.formatted(.iso8601) }

    /// Ages and offsets in seconds travel to the millisecond.
    @inline(__always)
    public static func seconds(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

    /// To the millisecond (`2026-12-02T10:00:00.250Z`): a timer's time, which a driver steps
    /// its devices to exactly (`clock`'s `nextTimerAt`).
    public static func jsonMilliseconds(_ date: Date?) -> JSONValue {
        date.map { .string($0.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))) } ?? .null
    }

    /// Reads what `json` and `jsonMilliseconds` write.
    public static func parse(_ text: String) -> Date? {
        if let d = try? Date(text, strategy: .iso8601) { return d }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}

extension RefreshError {
    /// `{"domain", "code", "message"}`, the SDK's NSError (B.1 `refresh`, B.2 `status`).
    public var json: JSONValue {
        ["domain": .string(RefreshError.domain), "code": .number(Double(code)), "message": .string(message)]
    }

    public static func json(_ error: RefreshError?) -> JSONValue { error?.json ?? .null }

    /// Reads what `json` writes; the domain must be the SDK's.
    public init(json: JSONValue, path: String = "") throws(AnswerError) {
        let o = AnswerReader(json, path: path)
        let domain = try o.string("domain")
        guard domain == RefreshError.domain else { throw AnswerError(path + "domain", "expected \(RefreshError.domain), found \(domain)") }
        self.init(code: Int(try o.number("code")), message: try o.string("message"))
    }

    /// `message (domain code N)`, as the CLI prints it.
    public var summary: String { "\(message) (\(RefreshError.domain) code \(code))" }
}

/// `refresh`'s result (B.1, docs/device-clock.md H): the error (nil on success), whether a request went
/// to the server (false: answered from the throttle window, RF-6, or no flags URL, RF-8), and
/// when it was answered from the stored flags because of the throttle window, the device
/// time that window ends (nil otherwise).
public struct RefreshAnswer: Sendable, Equatable {
    public var error: RefreshError?
    public var sent: Bool
    public var throttledUntil: Date?

    public init(error: RefreshError?, sent: Bool, throttledUntil: Date? = nil) {
        self.error = error
        self.sent = sent
        self.throttledUntil = throttledUntil
    }

    public var json: JSONValue {
        ["error": RefreshError.json(error), "sent": .bool(sent), "throttledUntil": SocketTime.json(throttledUntil)]
    }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        error = try r.optionalObject("error").map { (e) throws(AnswerError) in try RefreshError(json: e, path: "error.") }
        sent = try r.bool("sent")
        throttledUntil = try r.optionalTime("throttledUntil")
        if sent, throttledUntil != nil { throw AnswerError("throttledUntil", "set on a refresh that was sent") }
    }
}

/// `get`'s result: the flag (nil when not served) and where the answer came from.
public struct FlagAnswer: Sendable, Equatable {
    public var flag: FeatureFlag?
    public var provenance: Provenance

    public init(flag: FeatureFlag?, provenance: Provenance) {
        self.flag = flag
        self.provenance = provenance
    }

    public var json: JSONValue { FlagAnswers.get(flag, provenance) }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        flag = try r.optionalObject("flag").map { (f) throws(AnswerError) in
            let o = AnswerReader(f, path: "flag.")
            return FeatureFlag(key: try o.string("key"), isEnabled: try o.bool("isEnabled"), ruleId: try o.string("ruleId"),
                               properties: try o.object("properties"))
        }
        provenance = Provenance(reason: try r.enumeration("reason"), errorCode: try r.optionalEnumeration("errorCode"),
                                errorMessage: try r.optionalString("errorMessage"),
                                source: try r.enumeration("source"), ageSeconds: try r.optionalNumber("ageSeconds"))
    }
}

/// `registerForPushNotifications`' result (SE-3): whether the (simulated) prompt granted
/// notifications, and the device token made then (nil when not granted).
public struct RegistrationAnswer: Sendable, Equatable {
    public var granted: Bool
    public var pushToken: String?

    public init(granted: Bool, pushToken: String?) {
        self.granted = granted
        self.pushToken = pushToken
    }

    public var json: JSONValue { ["granted": .bool(granted), "pushToken": pushToken.map(JSONValue.string) ?? .null] }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        self.init(granted: try r.bool("granted"), pushToken: try r.optionalString("pushToken"))
    }
}

/// `status`'s result: the agent's version and its `AgentStatus`. Times travel to the second,
/// ages to the millisecond; `refreshInFlight` stays on the agent (false when decoded).
public struct StatusAnswer: Sendable, Equatable {
    public var version: String
    public var status: AgentStatus
    /// Where the HTTP interface listens (`127.0.0.1:43117`, a socket path), when the agent
    /// bound it itself; the key is left out without one.
    public var httpAddress: String?

    public init(version: String, status: AgentStatus, httpAddress: String? = nil) {
        self.version = version
        self.status = status
        self.httpAddress = httpAddress
    }

    /// The fields in docs/socket-api.md B.2's order (the order the CLI prints them in).
    public static let fields = [
        "state", "version", "applicationCode", "hwid", "userId", "appState", "sessionStartedAt", "pushRegistered",
        "pushToken", "notificationAuthorization", "flagsCount", "flagsSource", "flagsAgeSeconds", "flagsExpireAt",
        "flagsPartial", "lastRefreshAt", "lastRefreshTrigger", "lastRefreshError", "consecutiveFailures", "nextRefreshAt",
        "storageError", "now", "httpAddress",
    ]

    public var json: JSONValue {
        guard let httpAddress, case .object(var o) = fields else { return fields }
        o["httpAddress"] = .string(httpAddress)
        return .object(o)
    }

    private var fields: JSONValue {
        let s = status
        return [
            "state": .string(s.state.rawValue), "version": .string(version),
            "applicationCode": .string(s.applicationCode), "hwid": .string(s.hwid), "userId": .string(s.userId),
            "appState": .string(s.appState.rawValue), "sessionStartedAt": SocketTime.json(s.sessionStartedAt),
            "pushRegistered": .bool(s.pushRegistered), "pushToken": s.pushToken.map(JSONValue.string) ?? .null,
            "notificationAuthorization": .string(s.notificationAuthorization.rawValue),
            "flagsCount": .number(Double(s.flagsCount)), "flagsSource": .string(s.flagsSource.rawValue),
            "flagsAgeSeconds": s.flagsAgeSeconds.map { .number(SocketTime.seconds($0)) } ?? .null,
            "flagsExpireAt": SocketTime.json(s.flagsExpireAt), "lastRefreshAt": SocketTime.json(s.lastRefreshAt),
            "lastRefreshError": RefreshError.json(s.lastRefreshError),
            "consecutiveFailures": .number(Double(s.consecutiveFailures)), "nextRefreshAt": SocketTime.json(s.nextRefreshAt),
            "flagsPartial": .bool(s.flagsPartial), "storageError": s.storageError.map { ["operation": .string($0.operation.rawValue), "message": .string($0.message), "at": SocketTime.json($0.at)] } ?? .null,
            "lastRefreshTrigger": s.lastRefreshTrigger.map { .string($0.rawValue) } ?? .null, "now": SocketTime.json(s.now),
        ]
    }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        version = try r.string("version")
        httpAddress = try r.optionalString("httpAddress")
        let error = try r.optionalObject("lastRefreshError").map { (e) throws(AnswerError) in
            try RefreshError(json: e, path: "lastRefreshError.")
        }
        let storage = try r.optionalObject("storageError").map { (e) throws(AnswerError) in
            let s = AnswerReader(e, path: "storageError.")
            return StorageProblem(try s.enumeration("operation"), message: try s.string("message"), at: try s.time("at"))
        }
        status = AgentStatus(
            state: try r.enumeration("state"), applicationCode: try r.string("applicationCode"), hwid: try r.string("hwid"),
            userId: try r.string("userId"), appState: try r.enumeration("appState"), sessionStartedAt: try r.optionalTime("sessionStartedAt"),
            pushRegistered: try r.bool("pushRegistered"), pushToken: try r.optionalString("pushToken"),
            notificationAuthorization: try r.enumeration("notificationAuthorization"), flagsCount: Int(try r.number("flagsCount")),
            flagsSource: try r.enumeration("flagsSource"), flagsAgeSeconds: try r.optionalNumber("flagsAgeSeconds"),
            flagsExpireAt: try r.optionalTime("flagsExpireAt"), flagsPartial: try r.bool("flagsPartial"),
            lastRefreshAt: try r.optionalTime("lastRefreshAt"), lastRefreshError: error,
            consecutiveFailures: Int(try r.number("consecutiveFailures")), nextRefreshAt: try r.optionalTime("nextRefreshAt"),
            refreshInFlight: false, storageError: storage, now: try r.optionalTime("now"),
            lastRefreshTrigger: try r.optionalEnumeration("lastRefreshTrigger"))
    }
}

/// Reads an answer's fields, each error naming its field (with `path` in front).
struct AnswerReader {
    let object: [String: JSONValue]
    let path: String
    let whole: JSONValue

    init(_ json: JSONValue, path: String = "") {
        object = json.objectValue ?? [:]
        self.path = path
        whole = json
    }

    private func present(_ key: String) throws(AnswerError) -> JSONValue? {
        guard whole.objectValue != nil else { throw AnswerError(path.isEmpty ? "result" : String(path.dropLast()), "expected an object") }
        guard let v = object[key], !v.isNull else { return nil }
        return v
    }

    /// `key` as `convert` reads it: nil when absent (or null), an error naming it when it is
    /// not `expected`. Every accessor below is this one or its required form.
    private func typed<T>(_ key: String, _ expected: String, _ convert: (JSONValue) -> T?) throws(AnswerError) -> T? {
        guard let v = try present(key) else { return nil }
        guard let t = convert(v) else { throw AnswerError(path + key, "expected \(expected), found \(JSONWriter.string(v))") }
        return t
    }

    private func required<T>(_ key: String, _ expected: String, _ convert: (JSONValue) -> T?) throws(AnswerError) -> T {
        guard let t = try typed(key, expected, convert) else { throw AnswerError(path + key, "missing") }
        return t
    }

    func string(_ key: String) throws(AnswerError) -> String { try required(key, "a string", \.stringValue) }
    func optionalString(_ key: String) throws(AnswerError) -> String? { try typed(key, "a string", \.stringValue) }
    func bool(_ key: String) throws(AnswerError) -> Bool { try required(key, "true or false", \.boolValue) }
    func number(_ key: String) throws(AnswerError) -> Double { try required(key, "a number", \.numberValue) }
    func optionalNumber(_ key: String) throws(AnswerError) -> Double? { try typed(key, "a number", \.numberValue) }
    func object(_ key: String) throws(AnswerError) -> [String: JSONValue] { try required(key, "an object", \.objectValue) }
    func array(_ key: String) throws(AnswerError) -> [JSONValue] { try required(key, "an array", \.arrayValue) }
    func optionalArray(_ key: String) throws(AnswerError) -> [JSONValue]? { try typed(key, "an array", \.arrayValue) }
    func time(_ key: String) throws(AnswerError) -> Date { try required(key, "an ISO 8601 time") { $0.stringValue.flatMap(SocketTime.parse) } }
    /// (`Optional.none` spelled out: a bare `nil` next to a `JSONValue` is its `.null`.)
    func optionalObject(_ key: String) throws(AnswerError) -> JSONValue? {
        try typed(key, "an object") { v -> JSONValue? in v.objectValue == nil ? Optional.none : v }
    }
    func optionalTime(_ key: String) throws(AnswerError) -> Date? {
        try typed(key, "an ISO 8601 time") { $0.stringValue.flatMap(SocketTime.parse) }
    }

    func enumeration<E: RawRepresentable>(_ key: String) throws(AnswerError) -> E where E.RawValue == String {
        try required(key, "one of the protocol's names") { $0.stringValue.flatMap(E.init(rawValue:)) }
    }

    func optionalEnumeration<E: RawRepresentable>(_ key: String) throws(AnswerError) -> E? where E.RawValue == String {
        try typed(key, "one of the protocol's names") { $0.stringValue.flatMap(E.init(rawValue:)) }
    }
}
