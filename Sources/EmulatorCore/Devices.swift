import AgentCore
import Foundation

/// An event a device posted (`postEvent`).
public struct PostedEvent: Sendable, Equatable {
    public var name: String
    /// The device's `timestampUTC` when it sent one, else the time the emulator received it.
    public var time: Date
    public var attributes: [String: JSONValue]

    public init(name: String, time: Date, attributes: [String: JSONValue] = [:]) {
        self.name = name
        self.time = time
        self.attributes = attributes
    }
}

/// What the emulator knows about one device (HWID), fed by the device API.
public struct DeviceRecord: Sendable, Equatable {
    public static let maxEventsKept = 1000

    public var hwid: String
    public var userId: String?
    /// Set by `registerDevice`, cleared by `unregisterDevice`.
    public var pushToken: String?
    public var gateway: String?
    /// The most recent events, at most `maxEventsKept`.
    public private(set) var events: [PostedEvent] = []
    /// Every event name ever posted (kept beyond the `events` cap).
    public private(set) var eventNames: Set<String> = []
    /// The latest `PW_FeatureFlagImpression` time per `flag_key` (kept beyond the cap).
    public private(set) var lastImpression: [String: Date] = [:]
    public var lastSeen: Date?

    public init(hwid: String) { self.hwid = hwid }

    public static let impressionEvent = "PW_FeatureFlagImpression"

    public mutating func record(_ event: PostedEvent) {
        events.append(event)
        if events.count > Self.maxEventsKept { events.removeFirst(events.count - Self.maxEventsKept) }
        eventNames.insert(event.name)
        if event.name == Self.impressionEvent, case .string(let key)? = event.attributes["flag_key"] {
            if let known = lastImpression[key], known >= event.time { return }
            lastImpression[key] = event.time
        }
    }

    /// Everything known about the device, for `GET /admin/state`: `json` plus the
    /// event names and impression times kept beyond the `events` cap.
    public var stateJSON: JSONValue {
        guard case .object(var o) = json else { return json }
        o["eventNames"] = .array(eventNames.sorted().map(JSONValue.string))
        o["lastImpressions"] = .object(lastImpression.mapValues { .string(Timestamp.format($0)) })
        return .object(o)
    }

    /// Decodes `stateJSON` strictly; errors name the path under `path`.
    public init(stateJSON json: JSONValue, at path: [DefinitionError.PathComponent]) throws(DefinitionError) {
        let r = try ObjectReader(json, at: path, allowed: ["hwid", "userId", "pushToken", "gateway", "lastSeen", "events",
                                                           "eventNames", "lastImpressions"])
        func optionalString(_ key: String) throws(DefinitionError) -> String? {
            if r.members[key] == .null { return nil }
            return try r.string(key, nonEmpty: false)
        }
        func time(_ v: JSONValue, _ at: [DefinitionError.PathComponent]) throws(DefinitionError) -> Date {
            // Years 1970-9999: what ISO 8601 with four-digit years writes back as it was read.
            guard case .string(let text) = v, let d = Timestamp.parse(text),
                  (0...253_402_300_799).contains(d.timeIntervalSince1970) else {
                throw DefinitionError(at, "expected an ISO 8601 time in the years 1970-9999, found \(JSONWriter.string(v))")
            }
            return d
        }
        hwid = try r.string("hwid", required: true)!
        userId = try optionalString("userId")
        pushToken = try optionalString("pushToken")
        gateway = try optionalString("gateway")
        if let v = r.members["lastSeen"], v != .null { lastSeen = try time(v, r.at("lastSeen")) }
        if let items = try r.array("events") {
            for (k, item) in items.enumerated() {
                let at = r.at("events") + [.index(k)]
                let e = try ObjectReader(item, at: at, allowed: ["event", "time", "attributes"])
                let name = try e.string("event", required: true)!
                guard let t = e.members["time"] else { throw DefinitionError(e.at("time"), "missing (expected an ISO 8601 time)") }
                var attributes: [String: JSONValue] = [:]
                switch e.members["attributes"] {
                case nil: break
                case .object(let a)?: attributes = a
                case let other?: throw DefinitionError(e.at("attributes"), "expected an object, found \(other.kindName)")
                }
                record(PostedEvent(name: name, time: try time(t, e.at("time")), attributes: attributes))
            }
        }
        for name in try r.strings("eventNames") ?? [] { eventNames.insert(name) }
        if let v = r.members["lastImpressions"] {
            guard case .object(let o) = v else {
                throw DefinitionError(r.at("lastImpressions"), "expected an object, found \(v.kindName)")
            }
            for (key, t) in o { lastImpression[key] = try time(t, r.at("lastImpressions") + [.key(key)]) }
        }
    }

    public var json: JSONValue {
        .object([
            "hwid": .string(hwid),
            "userId": userId.map(JSONValue.string) ?? .null,
            "pushToken": pushToken.map(JSONValue.string) ?? .null,
            "gateway": gateway.map(JSONValue.string) ?? .null,
            "lastSeen": lastSeen.map { .string(Timestamp.format($0)) } ?? .null,
            "events": .array(events.map { e in
                .object(["event": .string(e.name), "time": .string(Timestamp.format(e.time)),
                         "attributes": .object(e.attributes)])
            }),
        ])
    }
}

/// ISO 8601 formatting and the `since=` parameter of `GET /admin/requests`.
public enum Timestamp {
    /// `2024-05-01T12:00:00.123Z`: rounded to the millisecond, so that `format(parse(s)) == s`
    /// (Foundation's formatter truncates, and the double parsed from `.005` is a hair below it).
    public static func format(_ date: Date) -> String {
        let ms = (date.timeIntervalSince1970 * 1000).rounded()
        guard ms.isFinite, abs(ms) < 1e17 else { return date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)) }
        let total = Int64(ms)
        let (seconds, fraction) = (total.quotientAndRemainder(dividingBy: 1000))
        let (s, f) = fraction < 0 ? (seconds - 1, fraction + 1000) : (seconds, fraction)
        let whole = Date(timeIntervalSince1970: Double(s)).formatted(Date.ISO8601FormatStyle())
        return whole.dropLast() + "." + String(repeating: "0", count: f < 10 ? 2 : f < 100 ? 1 : 0) + String(f) + "Z"
    }

    /// Unix seconds (`1714564800`, `1714564800.5`) or ISO 8601
    /// (`2024-05-01T12:00:00Z`, with optional fractional seconds and offset).
    /// `date` rounded down to its millisecond: the time the log records (never later than
    /// it happened).
    public static func millisecond(_ date: Date) -> Date {
        let ms = (date.timeIntervalSince1970 * 1000).rounded(.down)
        return ms.isFinite ? Date(timeIntervalSince1970: ms / 1000) : date
    }

    /// The start of the millisecond `date` falls in, where a time parsed from a decimal such
    /// as `.123` (a hair below it as a double) counts as that millisecond: `since=`'s rule.
    public static func millisecond(containing date: Date) -> Date {
        let ms = (date.timeIntervalSince1970 * 1000 + 0.001).rounded(.down)
        return ms.isFinite ? Date(timeIntervalSince1970: ms / 1000) : date
    }

    public static func parse(_ text: String) -> Date? {
        if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
        if let d = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return d }
        if let d = try? Date(text, strategy: Date.ISO8601FormatStyle()) { return d }
        return nil
    }
}
