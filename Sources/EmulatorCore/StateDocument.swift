import AgentCore
import Foundation

/// The whole emulator state as one JSON document (`GET`/`PUT /admin/state`,
/// `pushwoosh-emulator --state FILE`): applications, devices with their event
/// history, and the clock offset. Faults and the request log are not part of it.
///
/// ```json
/// {"version": 1, "clockOffsetSeconds": 7200,
///  "apps": [{"code": "ABCDE-12345", "flags": [...]}],
///  "devices": [{"hwid": "h1", "userId": "alice", "pushToken": null, "gateway": null,
///               "lastSeen": "2027-01-15T08:00:00.000Z", "events": [...],
///               "eventNames": ["PW_Purchase"], "lastImpressions": {"new_checkout": "…"}}]}
/// ```
public struct StateDocument: Sendable, Equatable {
    public static let version = 1
    public var apps: [Application]
    public var devices: [DeviceRecord]
    public var clockOffset: TimeInterval

    public init(apps: [Application] = [], devices: [DeviceRecord] = [], clockOffset: TimeInterval = 0) {
        self.apps = apps
        self.devices = devices
        self.clockOffset = clockOffset
    }

    /// Its sections, every one required: a document missing one is refused rather than
    /// read as "no apps" or "no devices" (which would wipe them).
    public static let sections = ["version", "clockOffsetSeconds", "apps", "devices"]

    /// Decodes the document strictly: a missing section, unknown fields, wrong types and
    /// duplicate application codes or HWIDs are errors that name the path.
    public init(json: JSONValue) throws(DefinitionError) {
        let r = try ObjectReader(json, at: [], allowed: Set(Self.sections))
        _ = try r.number("version", expectation: "\(Self.version)", range: 1...1, integer: true)
        if let missing = Self.sections.first(where: { r.members[$0] == nil }) {
            throw DefinitionError([.key(missing)], "missing (a state document has every section: \(Self.sections.joined(separator: ", "))"
                                  + "; GET /admin/state gives one)")
        }
        clockOffset = try r.number("clockOffsetSeconds", expectation: "a number of seconds 0-\(Int(EmulatorState.maxClockOffset))",
                                   range: 0...EmulatorState.maxClockOffset) ?? 0
        apps = try r.uniqueItems("apps", idKey: "code", noun: "application code", id: \.code) { (item, at) throws(DefinitionError) in
            try Application(json: item, at: at)
        }
        devices = try r.uniqueItems("devices", idKey: "hwid", noun: "device", id: \.hwid) { (item, at) throws(DefinitionError) in
            try DeviceRecord(stateJSON: item, at: at)
        }
    }

    public var json: JSONValue {
        .object([
            "version": .number(Double(Self.version)),
            "clockOffsetSeconds": .number(clockOffset),
            "apps": .array(apps.map(\.json)),
            "devices": .array(devices.map(\.stateJSON)),
        ])
    }
}

extension EmulatorState {
    /// The whole state as a document.
    public var document: StateDocument {
        StateDocument(apps: apps.keys.sorted().map { apps[$0]! }, devices: devices.keys.sorted().map { devices[$0]! },
                      clockOffset: clockOffset)
    }

    /// Replaces apps, devices and the clock offset with the document's; faults and
    /// the request log are cleared (a loaded lab starts clean).
    public mutating func load(_ doc: StateDocument) {
        apps = Dictionary(doc.apps.map { ($0.code, $0) }) { _, last in last }
        devices = Dictionary(doc.devices.map { ($0.hwid, $0) }) { _, last in last }
        clockOffset = doc.clockOffset
        faults.clear()
        requestLog.clear()
        recountParkedWaits()
    }
}
