import AgentCore
import Foundation

/// A fault armed with `POST /admin/faults` (docs/emulator.md D.2, D.3): calls of `method`
/// (only those of `hwid` / `userId` when set) fail as described, `times` times and/or
/// for `forSeconds` of emulator time, each with `probability` (drawn from `seed`).
public struct Fault: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// HTTP `status` (with a `Retry-After: retryAfter` header when set).
        case http(status: Int, retryAfter: Int?)
        /// HTTP 200 with this envelope `status_code`.
        case statusCode(Int)
        /// HTTP 200 with a body that is not JSON.
        case garbage
        /// The connection is closed without an answer.
        case drop
        /// `getFeatureFlags` answers with `partial: true`, skipping rules that need segment data.
        case partial
        /// Only a delay (`delayMs`); the call is answered normally.
        case delayOnly
        /// The normal answer's headers and its body's first N bytes, then the connection is closed.
        case truncate(afterBytes: Int)
        /// The normal answer's headers, then nothing until the client gives up.
        case stall
        /// The connection is reset (RST) before anything is answered.
        case reset

        public var name: String {
            switch self {
            case .http: "http"
            case .statusCode: "statusCode"
            case .garbage: "garbage"
            case .drop: "drop"
            case .partial: "partial"
            case .delayOnly: "delay"
            case .truncate: "truncateAfterBytes"
            case .stall: "stallAfterHeaders"
            case .reset: "reset"
            }
        }
    }

    public var method: String
    /// How many calls it fails; nil: unlimited (only with `forSeconds`).
    public var times: Int?
    /// Waited before the answer (or the drop); combines with any kind.
    public var delayMs: Int
    public var kind: Kind
    /// Only calls whose body carries this `hwid` / `userId` match.
    public var hwid: String?
    public var userId: String?
    /// Active this long from arming, in emulator time.
    public var forSeconds: Double?
    /// Each matching call fails with this probability (0–1), drawn from `seed`.
    public var probability: Double?
    public var seed: UInt64?

    public init(method: String, times: Int? = 1, delayMs: Int = 0, kind: Kind, hwid: String? = nil, userId: String? = nil,
                forSeconds: Double? = nil, probability: Double? = nil, seed: UInt64? = nil) {
        self.method = method
        self.times = times
        self.delayMs = delayMs
        self.kind = kind
        self.hwid = hwid
        self.userId = userId
        self.forSeconds = forSeconds
        self.probability = probability
        self.seed = seed
    }

    public static let maxDelayMs = 600_000
    public static let maxTimes = 1_000_000
    /// Ten years.
    public static let maxForSeconds = 315_360_000.0
    public static let maxTruncateBytes = 1 << 30
    public static let fields: Set<String> = ["method", "times", "http", "retryAfter", "statusCode", "body", "drop", "delayMs",
                                             "partial", "hwid", "device", "userId", "forSeconds", "probability", "seed",
                                             "truncateAfterBytes", "stallAfterHeaders", "reset"]
    /// Every kind a fault can have, as its field is spelled (`delayMs` may also accompany any other).
    public static let kindFields = ["http", "statusCode", "body", "drop", "partial", "delayMs",
                                    "truncateAfterBytes", "stallAfterHeaders", "reset"]
    static let kindList = kindFields.joined(separator: ", ")

    /// Decodes `{"method": "getFeatureFlags", "times": 3, "http": 503, "retryAfter": 10}`
    /// and the D.3 fields. Exactly one kind (`http`, `statusCode`, `body`, `drop`,
    /// `partial`, `truncateAfterBytes`, `stallAfterHeaders`, `reset`), or only `delayMs`;
    /// `delayMs` and the scope fields may accompany any of them.
    public init(json: JSONValue) throws(DefinitionError) {
        if case .object(let o) = json, let unknown = o.keys.filter({ !Self.fields.contains($0) }).sorted().first {
            // `GET /admin/faults` shows a `kind`; arming takes the kind's own field.
            let why = unknown == "kind" ? "a fault's kind is its own field" : "a fault has method, one kind"
            throw DefinitionError([.key(unknown)], "unknown field (\(why); kinds: \(Self.kindList); "
                                  + "besides: \(Self.fields.subtracting(Self.kindFields).sorted().joined(separator: ", ")))")
        }
        let r = try ObjectReader(json, at: [], allowed: Self.fields)
        method = try r.string("method", required: true)!
        guard DeviceMethods.isKnown(method) else { throw DefinitionError([.key("method")], DeviceMethods.unknownMessage(method)) }
        delayMs = Int(try r.number("delayMs", expectation: "an integer 0-\(Self.maxDelayMs)",
                                   range: 0...Double(Self.maxDelayMs), integer: true) ?? 0)
        var kinds: [Kind] = []
        if let status = try r.number("http", expectation: "an HTTP status 300-599", range: 300...599, integer: true) {
            let retryAfter = try r.number("retryAfter", expectation: "an integer number of seconds 0-86400",
                                          range: 0...86_400, integer: true)
            kinds.append(.http(status: Int(status), retryAfter: retryAfter.map { Int($0) }))
        } else if r.members["retryAfter"] != nil {
            throw DefinitionError([.key("retryAfter")], "only allowed with \"http\"")
        }
        if let code = try r.number("statusCode", expectation: "an integer status code other than 200",
                                   range: -1_000_000...1_000_000, integer: true) {
            if code == 200 { throw DefinitionError([.key("statusCode")], "expected an integer status code other than 200") }
            kinds.append(.statusCode(Int(code)))
        }
        if let body = r.members["body"] {
            guard body == .string("garbage") else {
                throw DefinitionError([.key("body")], "expected \"garbage\", found \(JSONWriter.string(body))")
            }
            kinds.append(.garbage)
        }
        for (field, kind) in [("drop", Kind.drop), ("partial", .partial), ("stallAfterHeaders", .stall), ("reset", .reset)] {
            if let on = try r.bool(field) {
                guard on else { throw DefinitionError([.key(field)], "expected true") }
                kinds.append(kind)
            }
        }
        if let n = try r.number("truncateAfterBytes", expectation: "an integer 0-\(Self.maxTruncateBytes)",
                                range: 0...Double(Self.maxTruncateBytes), integer: true) {
            kinds.append(.truncate(afterBytes: Int(n)))
        }
        if kinds.count > 1 {
            let names = kinds.map { $0.name == "garbage" ? "body" : $0.name }
            throw DefinitionError([.key(names[1])], "cannot be combined with \(names[0]) "
                                  + "(expected only one kind of: \(Self.kindList); delayMs may accompany any)")
        }
        if kinds.isEmpty, r.members["delayMs"] == nil {
            throw DefinitionError([], "no fault kind (expected one of: \(Self.kindList))")
        }
        kind = kinds.first ?? .delayOnly
        hwid = try r.string("hwid")
        // `device` names a lab device: the lab (docs/lab.md) puts its HWID in `hwid` before the
        // fault reaches here, so one that gets here names no device this emulator knows.
        if r.members["device"] != nil {
            throw DefinitionError([.key("device")], "names a lab device, and this emulator serves no lab (start it with --lab DIR), "
                                  + "or give the device's hwid instead")
        }
        userId = try r.string("userId")
        forSeconds = try r.number("forSeconds", expectation: "a number of seconds > 0 and at most \(Int(Self.maxForSeconds))",
                                  range: 0...Self.maxForSeconds)
        if forSeconds == 0 { throw DefinitionError([.key("forSeconds")], "expected a number of seconds > 0 and at most \(Int(Self.maxForSeconds)), found 0") }
        let times = try r.number("times", expectation: "an integer 1-\(Self.maxTimes)", range: 1...Double(Self.maxTimes), integer: true)
        // forSeconds alone: every matching call in the window; with times: whichever ends first.
        self.times = times.map { Int($0) } ?? (forSeconds == nil ? 1 : nil)
        probability = try r.number("probability", expectation: "a number 0-1", range: 0...1)
        if let s = try r.number("seed", expectation: "an integer 0-9007199254740991", range: 0...9_007_199_254_740_991, integer: true) {
            guard probability != nil else { throw DefinitionError([.key("seed")], "only allowed with \"probability\"") }
            seed = UInt64(s)
        }
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["method": .string(method), "times": times.map { .number(Double($0)) } ?? .null,
                                      "kind": .string(kind.name)]
        if delayMs > 0 { o["delayMs"] = .number(Double(delayMs)) }
        switch kind {
        case .http(let status, let retryAfter):
            o["http"] = .number(Double(status))
            if let retryAfter { o["retryAfter"] = .number(Double(retryAfter)) }
        case .statusCode(let code): o["statusCode"] = .number(Double(code))
        case .garbage: o["body"] = "garbage"
        case .drop: o["drop"] = true
        case .partial: o["partial"] = true
        case .delayOnly: break
        case .truncate(let n): o["truncateAfterBytes"] = .number(Double(n))
        case .stall: o["stallAfterHeaders"] = true
        case .reset: o["reset"] = true
        }
        if let hwid { o["hwid"] = .string(hwid) }
        if let userId { o["userId"] = .string(userId) }
        if let forSeconds { o["forSeconds"] = .number(forSeconds) }
        if let probability { o["probability"] = .number(probability) }
        if let seed { o["seed"] = .number(Double(seed)) }
        return .object(o)
    }

    /// Whether a call of this method by this device and user is in the fault's scope.
    public func scopeMatches(hwid: String?, userId: String?) -> Bool {
        (self.hwid == nil || self.hwid == hwid) && (self.userId == nil || self.userId == userId)
    }
}
