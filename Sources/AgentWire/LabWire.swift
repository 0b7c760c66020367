import AgentCore
import FoundationEssentials

// The lab's wire (docs/lab.md M.2): `POST /lab/advance`'s request and answer as values, one
// definition for the lab that serves them and every Swift client that sends and reads them
// (agentctl, the soak): nothing built or picked apart by hand on either side.

/// `POST /lab/advance`'s body: how far (`seconds` or `until`), which devices, all or none.
public struct LabAdvanceRequest: Sendable, Equatable {
    public enum Until: Sendable, Equatable {
        case seconds(Double)
        /// Until every targeted device has sent its next periodic refresh (RF-2, at its RF-12 phase).
        case nextRefresh
        /// To the earliest timer any targeted device has armed.
        case nextTimer
        case time(Date)
    }

    public var until: Until
    /// nil: every device of the lab.
    public var devices: [String]?
    /// All or none: when any targeted device cannot move, 409 and nothing moved.
    public var strict: Bool

    public init(until: Until, devices: [String]? = nil, strict: Bool = false) {
        self.until = until
        self.devices = devices
        self.strict = strict
    }

    /// The longest `seconds` one advance takes: a year.
    public static let maximumSeconds = 366.0 * 86_400

    public var json: JSONValue {
        var o: [String: JSONValue] = [:]
        switch until {
        case .seconds(let seconds): o["seconds"] = .number(seconds)
        case .nextRefresh: o["until"] = "nextRefresh"
        case .nextTimer: o["until"] = "nextTimer"
        case .time(let time): o["until"] = SocketTime.jsonMilliseconds(time)
        }
        if let devices { o["devices"] = .array(devices.map(JSONValue.string)) }
        if strict { o["strict"] = true }
        return .object(o)
    }

    /// Reads a body as the lab takes it; an error names the field at fault (`devices[1]`,
    /// `until`, `strict`). Device names are checked by `name`, which says why one is not.
    public init(json: [String: JSONValue], name: (String, String) throws(AnswerError) -> String) throws(AnswerError) {
        let known: Set<String> = ["seconds", "until", "devices", "strict"]
        if let extra = json.keys.sorted().first(where: { !known.contains($0) }) {
            throw AnswerError(extra, "unknown field (expected \(known.sorted().joined(separator: ", ")))")
        }
        strict = false
        if let value = json["strict"] {
            guard case .bool(let on) = value else { throw AnswerError("strict", "expected true or false") }
            strict = on
        }
        if let value = json["devices"] {
            guard let items = value.arrayValue, !items.isEmpty else { throw AnswerError("devices", "expected a non-empty array of device names") }
            var names: [String] = []
            for (i, item) in items.enumerated() {
                guard let text = item.stringValue else { throw AnswerError("devices[\(i)]", "expected a device name") }
                names.append(try name(text, "devices[\(i)]"))
            }
            devices = names
        }
        switch (json["seconds"], json["until"]) {
        case (let seconds?, nil):
            guard let s = seconds.numberValue, s > 0, s <= Self.maximumSeconds else {
                throw AnswerError("seconds", "expected a number of seconds above 0, at most a year")
            }
            until = .seconds(s)
        case (nil, let value?):
            let expected = "expected \"nextRefresh\", \"nextTimer\", an ISO 8601 time or Unix seconds"
            guard let text = value.stringValue else { throw AnswerError("until", expected) }
            switch text {
            case "nextRefresh": until = .nextRefresh
            case "nextTimer": until = .nextTimer
            default:
                // An ISO 8601 time, or Unix seconds as text (as the emulator's clock takes them).
                let unix = Double(text).flatMap { $0.isFinite ? Date(timeIntervalSince1970: $0) : nil }
                guard let time = SocketTime.parse(text) ?? unix else { throw AnswerError("until", "\(expected), found \"\(text)\"") }
                until = .time(time)
            }
        case (_?, _?): throw AnswerError("until", "expected only one of seconds, until")
        case (nil, nil): throw AnswerError("", "expected one of seconds, until")
        }
    }
}

/// `POST /lab/advance`'s answer: where the lab is, the steps taken, each device's fired timers,
/// the requests sent meanwhile, and every device that could not move with the reason.
public struct LabAdvanceAnswer: Sendable, Equatable {
    public struct Skipped: Sendable, Equatable {
        public var name: String
        public var reason: String
        public init(name: String, reason: String) {
            self.name = name
            self.reason = reason
        }
        public var json: JSONValue { .object(["name": .string(name), "reason": .string(reason)]) }
    }

    public var now: Date
    public var steps: Int
    public var fired: [String: [FiredTimer]]
    public var requests: Int
    public var skipped: [Skipped]

    public init(now: Date, steps: Int, fired: [String: [FiredTimer]], requests: Int, skipped: [Skipped]) {
        self.now = now
        self.steps = steps
        self.fired = fired
        self.requests = requests
        self.skipped = skipped
    }

    public var json: JSONValue {
        .object(["now": SocketTime.jsonMilliseconds(now), "steps": .number(Double(steps)),
                 "fired": .object(fired.mapValues { .array($0.map(\.json)) }), "requests": .number(Double(requests)),
                 "skipped": .array(skipped.map(\.json))])
    }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json, path: "")
        now = try r.time("now")
        steps = Int(try r.number("steps"))
        requests = Int(try r.number("requests"))
        guard let firedObject = json["fired"]?.objectValue else { throw AnswerError("fired", "not an object") }
        var fired: [String: [FiredTimer]] = [:]
        for (name, list) in firedObject {
            guard let items = list.arrayValue else { throw AnswerError("fired.\(name)", "not an array") }
            var timers: [FiredTimer] = []
            for item in items { timers.append(try FiredTimer(json: item)) }
            fired[name] = timers
        }
        self.fired = fired
        guard let list = json["skipped"]?.arrayValue else { throw AnswerError("skipped", "not an array") }
        var skipped: [Skipped] = []
        for (i, item) in list.enumerated() {
            guard let name = item["name"]?.stringValue, let reason = item["reason"]?.stringValue else {
                throw AnswerError("skipped[\(i)]", "not {name, reason}")
            }
            skipped.append(Skipped(name: name, reason: reason))
        }
        self.skipped = skipped
    }
}
