import AgentCore

/// An application as the emulator knows it (docs/emulator.md D.1).
public struct Application: Sendable, Equatable {
    public var code: String
    /// `false`: `getFeatureFlags` answers without `flags` (a plan without feature flags).
    public var featureFlagsInPlan: Bool
    /// In definition order; keys are unique.
    public var flags: [FlagDefinition]

    public init(code: String, featureFlagsInPlan: Bool = true, flags: [FlagDefinition] = []) {
        self.code = code
        self.featureFlagsInPlan = featureFlagsInPlan
        self.flags = flags
    }

    public func flag(_ key: String) -> FlagDefinition? { flags.first { $0.key == key } }

    /// Replaces the flag with the same key, or appends it.
    public mutating func upsert(_ flag: FlagDefinition) {
        if let k = flags.firstIndex(where: { $0.key == flag.key }) { flags[k] = flag } else { flags.append(flag) }
    }
}

public struct FlagDefinition: Sendable, Equatable {
    public var key: String
    public var archived: Bool
    public var killed: Bool
    /// Declared properties by name, with their types and defaults.
    public var properties: [String: PropertyDefinition]
    /// Tried in order; the first that matches decides.
    public var rules: [Rule]

    public init(key: String, archived: Bool = false, killed: Bool = false,
                properties: [String: PropertyDefinition] = [:], rules: [Rule] = []) {
        self.key = key
        self.archived = archived
        self.killed = killed
        self.properties = properties
        self.rules = rules
    }

    /// The default value of every declared property.
    public var defaultProperties: [String: JSONValue] { properties.mapValues(\.defaultValue) }
}

public enum FlagPropertyType: String, Sendable, CaseIterable {
    case string, number, boolean, json

    /// Whether `value` is of this type; `json` takes an object or an array.
    public func accepts(_ value: JSONValue) -> Bool {
        switch (self, value) {
        case (.string, .string), (.number, .number), (.boolean, .bool), (.json, .object), (.json, .array): true
        default: false
        }
    }

    var expectation: String {
        switch self {
        case .string: "a string"
        case .number: "a number"
        case .boolean: "a boolean"
        case .json: "an object or an array"
        }
    }
}

public struct PropertyDefinition: Sendable, Equatable {
    public var type: FlagPropertyType
    public var defaultValue: JSONValue

    public init(type: FlagPropertyType, defaultValue: JSONValue) {
        self.type = type
        self.defaultValue = defaultValue
    }
}

public struct Rule: Sendable, Equatable {
    public var id: String
    public var enabled: Bool
    public var when: Conditions
    /// Overrides of declared properties; each matches the declared type.
    public var properties: [String: JSONValue]

    public init(id: String, enabled: Bool, when: Conditions = Conditions(), properties: [String: JSONValue] = [:]) {
        self.id = id
        self.enabled = enabled
        self.when = when
        self.properties = properties
    }
}

/// A rule's conditions; the rule matches when every one that is set holds.
/// An empty list sets no condition (`"hwids": []` does not exclude every device).
public struct Conditions: Sendable, Equatable {
    public var userIds: [String]?
    public var hwids: [String]?
    public var pushRegistered: Bool?
    /// The device has posted every one of these events (at any time).
    public var eventsPosted: [String]?
    /// 0–100: the device's bucket (0–99, from flag key and User ID) is below this.
    public var rolloutPercent: Double?
    public var sawFeature: SawFeature?

    public struct SawFeature: Sendable, Equatable {
        public var flag: String
        public var days: Double
        public init(flag: String, days: Double) {
            self.flag = flag
            self.days = days
        }
    }

    public init(userIds: [String]? = nil, hwids: [String]? = nil, pushRegistered: Bool? = nil,
                eventsPosted: [String]? = nil, rolloutPercent: Double? = nil, sawFeature: SawFeature? = nil) {
        self.userIds = userIds
        self.hwids = hwids
        self.pushRegistered = pushRegistered
        self.eventsPosted = eventsPosted
        self.rolloutPercent = rolloutPercent
        self.sawFeature = sawFeature
    }

    /// Conditions that need the device's segment data, which a `partial`
    /// answer cannot match (ST-5).
    public var needsSegmentData: Bool { pushRegistered != nil || eventsPosted != nil || sawFeature != nil }
}

// MARK: - Strict decoding from a JSON tree

/// Reads the members of one JSON object, rejecting unknown members.
struct ObjectReader {
    let members: [String: JSONValue]
    let path: [DefinitionError.PathComponent]

    init(_ value: JSONValue, at path: [DefinitionError.PathComponent], allowed: Set<String>) throws(DefinitionError) {
        guard case .object(let o) = value else {
            throw DefinitionError(path, "expected an object, found \(value.kindName)")
        }
        if let unknown = o.keys.filter({ !allowed.contains($0) }).sorted().first {
            throw DefinitionError(path + [.key(unknown)], "unknown field (expected one of: \(allowed.sorted().joined(separator: ", ")))")
        }
        members = o
        self.path = path
    }

    func at(_ key: String) -> [DefinitionError.PathComponent] { path + [.key(key)] }

    func string(_ key: String, required: Bool = false, nonEmpty: Bool = true) throws(DefinitionError) -> String? {
        guard let v = members[key] else {
            if required { throw DefinitionError(at(key), "missing (expected a string)") }
            return nil
        }
        guard case .string(let s) = v else { throw DefinitionError(at(key), "expected a string, found \(v.kindName)") }
        if nonEmpty, s.isEmpty { throw DefinitionError(at(key), "expected a non-empty string") }
        return s
    }

    func bool(_ key: String, required: Bool = false) throws(DefinitionError) -> Bool? {
        guard let v = members[key] else {
            if required { throw DefinitionError(at(key), "missing (expected a boolean)") }
            return nil
        }
        guard case .bool(let b) = v else { throw DefinitionError(at(key), "expected a boolean, found \(v.kindName)") }
        return b
    }

    func number(_ key: String, expectation: String = "a number", range: ClosedRange<Double>? = nil,
                integer: Bool = false) throws(DefinitionError) -> Double? {
        guard let v = members[key] else { return nil }
        guard case .number(let n) = v, range?.contains(n) ?? true, !integer || n.rounded() == n else {
            throw DefinitionError(at(key), "expected \(expectation), found \(v.kindName == "number" ? "\(JSONWriter.string(v))" : v.kindName)")
        }
        return n
    }

    /// The array at `key`, nil when absent; `what` names what it holds in the error for anything
    /// that is not an array.
    func array(_ key: String, of what: String? = nil) throws(DefinitionError) -> [JSONValue]? {
        guard let v = members[key] else { return nil }
        guard case .array(let items) = v else {
            throw DefinitionError(at(key), "expected an array\(what.map { " of " + $0 } ?? ""), found \(v.kindName)")
        }
        return items
    }

    /// The array at `key` read with `decode`, one item at a time, each unique by `id`: a repeat
    /// is an error at its `idKey`, naming the `noun` and where the first one stands
    /// (`duplicate flag key "a" (first at flags[0])`). Empty when absent.
    func uniqueItems<Item>(_ key: String, of what: String? = nil, idKey: String, noun: String, id: (Item) -> String,
                           decode: (JSONValue, [DefinitionError.PathComponent]) throws(DefinitionError) -> Item) throws(DefinitionError) -> [Item] {
        try Self.uniqueItems(try array(key, of: what) ?? [], at: at(key), idKey: idKey, noun: noun, id: id, decode: decode)
    }

    /// `uniqueItems` over an array already in hand, found at `path`.
    static func uniqueItems<Item>(_ items: [JSONValue], at path: [DefinitionError.PathComponent], idKey: String, noun: String,
                                  id: (Item) -> String,
                                  decode: (JSONValue, [DefinitionError.PathComponent]) throws(DefinitionError) -> Item) throws(DefinitionError) -> [Item] {
        var firstIndex: [String: Int] = [:]
        var out: [Item] = []
        for (k, item) in items.enumerated() {
            let decoded = try decode(item, path + [.index(k)])
            let identity = id(decoded)
            if let first = firstIndex[identity] {
                throw DefinitionError(path + [.index(k), .key(idKey)],
                                      "duplicate \(noun) \"\(identity)\" (first at \(DefinitionError.render(path + [.index(first)])))")
            }
            firstIndex[identity] = k
            out.append(decoded)
        }
        return out
    }

    func strings(_ key: String) throws(DefinitionError) -> [String]? {
        guard let a = try array(key, of: "strings") else { return nil }
        var out: [String] = []
        for (k, item) in a.enumerated() {
            guard case .string(let s) = item else {
                throw DefinitionError(at(key) + [.index(k)], "expected a string, found \(item.kindName)")
            }
            out.append(s)
        }
        return out
    }
}

extension Application {
    /// Decodes one application definition (D.1); errors name the path.
    /// `expectedCode`: the code from the URL (`PUT /admin/apps/{code}`); the
    /// body's `code` may then be left out but must match when present.
    public init(json: JSONValue, expectedCode: String? = nil,
                at path: [DefinitionError.PathComponent] = []) throws(DefinitionError) {
        let r = try ObjectReader(json, at: path, allowed: ["code", "featureFlagsInPlan", "flags"])
        let code = try r.string("code", required: expectedCode == nil)
        if let expectedCode, let code, code != expectedCode {
            throw DefinitionError(r.at("code"), "\"\(code)\" does not match the application code in the URL \"\(expectedCode)\"")
        }
        let finalCode = code ?? expectedCode!
        if finalCode.contains("/") { throw DefinitionError(r.at("code"), "must not contain '/'") }
        self.code = finalCode
        featureFlagsInPlan = try r.bool("featureFlagsInPlan") ?? true
        flags = try r.uniqueItems("flags", of: "flags", idKey: "key", noun: "flag key", id: \.key) { (item, at) throws(DefinitionError) in
            try FlagDefinition(json: item, at: at)
        }
    }

    /// An apps file: one application object or an array of them, codes unique.
    public static func decodeList(_ json: JSONValue) throws(DefinitionError) -> [Application] {
        guard case .array(let items) = json else { return [try Application(json: json)] }
        return try ObjectReader.uniqueItems(items, at: [], idKey: "code", noun: "application code", id: \.code) { (item, at) throws(DefinitionError) in
            try Application(json: item, at: at)
        }
    }

    public var json: JSONValue {
        .object(["code": .string(code), "featureFlagsInPlan": .bool(featureFlagsInPlan),
                 "flags": .array(flags.map(\.json))])
    }
}

extension FlagDefinition {
    /// Decodes one flag; `expectedKey` (from the URL) lets `key` be left out.
    public init(json: JSONValue, expectedKey: String? = nil,
                at path: [DefinitionError.PathComponent] = []) throws(DefinitionError) {
        let r = try ObjectReader(json, at: path, allowed: ["key", "archived", "killed", "properties", "rules"])
        let key = try r.string("key", required: expectedKey == nil)
        if let expectedKey, let key, key != expectedKey {
            throw DefinitionError(r.at("key"), "\"\(key)\" does not match the flag key in the URL \"\(expectedKey)\"")
        }
        self.key = key ?? expectedKey!
        if self.key.contains("/") { throw DefinitionError(r.at("key"), "must not contain '/'") }
        archived = try r.bool("archived") ?? false
        killed = try r.bool("killed") ?? false
        properties = [:]
        if let v = r.members["properties"] {
            guard case .object(let o) = v else {
                throw DefinitionError(r.at("properties"), "expected an object of property definitions, found \(v.kindName)")
            }
            for name in o.keys.sorted() {
                properties[name] = try PropertyDefinition(json: o[name]!, at: r.at("properties") + [.key(name)])
            }
        }
        let declared = properties
        rules = try r.uniqueItems("rules", of: "rules", idKey: "id", noun: "rule id", id: \.id) { (item, at) throws(DefinitionError) in
            try Rule(json: item, declared: declared, at: at)
        }
    }

    public var json: JSONValue {
        .object(["key": .string(key), "archived": .bool(archived), "killed": .bool(killed),
                 "properties": .object(properties.mapValues(\.json)), "rules": .array(rules.map(\.json))])
    }
}

extension PropertyDefinition {
    init(json: JSONValue, at path: [DefinitionError.PathComponent]) throws(DefinitionError) {
        let r = try ObjectReader(json, at: path, allowed: ["type", "default"])
        guard let typeName = try r.string("type", required: true) else { throw DefinitionError(path, "missing type") }
        guard let type = FlagPropertyType(rawValue: typeName) else {
            throw DefinitionError(r.at("type"), "unknown type \"\(typeName)\" (expected string, number, boolean or json)")
        }
        guard let value = r.members["default"] else {
            throw DefinitionError(r.at("default"), "missing (expected \(type.expectation))")
        }
        guard type.accepts(value) else {
            throw DefinitionError(r.at("default"), "expected \(type.expectation) for a \(type.rawValue) property, found \(value.kindName)")
        }
        self.type = type
        defaultValue = value
    }

    public var json: JSONValue { .object(["type": .string(type.rawValue), "default": defaultValue]) }
}

extension Rule {
    init(json: JSONValue, declared: [String: PropertyDefinition],
         at path: [DefinitionError.PathComponent]) throws(DefinitionError) {
        let r = try ObjectReader(json, at: path, allowed: ["id", "enabled", "when", "properties"])
        id = try r.string("id", required: true)!
        enabled = try r.bool("enabled", required: true)!
        when = try r.members["when"].map { (v) throws(DefinitionError) in try Conditions(json: v, at: r.at("when")) } ?? Conditions()
        properties = [:]
        if let v = r.members["properties"] {
            guard case .object(let o) = v else {
                throw DefinitionError(r.at("properties"), "expected an object of property overrides, found \(v.kindName)")
            }
            for name in o.keys.sorted() {
                let value = o[name]!
                let at = r.at("properties") + [.key(name)]
                guard let def = declared[name] else {
                    throw DefinitionError(at, "not a declared property of this flag (declared: \(declared.keys.sorted().joined(separator: ", ")))")
                }
                guard def.type.accepts(value) else {
                    throw DefinitionError(at, "expected \(def.type.expectation) for a \(def.type.rawValue) property, found \(value.kindName)")
                }
                properties[name] = value
            }
        }
    }

    public var json: JSONValue {
        .object(["id": .string(id), "enabled": .bool(enabled), "when": when.json, "properties": .object(properties)])
    }
}

extension Conditions {
    init(json: JSONValue, at path: [DefinitionError.PathComponent]) throws(DefinitionError) {
        let r = try ObjectReader(json, at: path, allowed: ["userIds", "hwids", "pushRegistered", "eventsPosted",
                                                          "rolloutPercent", "sawFeature"])
        userIds = try r.strings("userIds")
        hwids = try r.strings("hwids")
        pushRegistered = try r.bool("pushRegistered")
        eventsPosted = try r.strings("eventsPosted")
        rolloutPercent = try r.number("rolloutPercent", expectation: "a number 0-100", range: 0...100)
        if let v = r.members["sawFeature"] {
            let s = try ObjectReader(v, at: r.at("sawFeature"), allowed: ["flag", "days"])
            let flag = try s.string("flag", required: true)!
            guard let days = try s.number("days", expectation: "a number of days greater than 0", range: 0...36_500),
                  days > 0
            else { throw DefinitionError(s.at("days"), "expected a number of days greater than 0") }
            sawFeature = SawFeature(flag: flag, days: days)
        } else {
            sawFeature = nil
        }
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = [:]
        if let userIds { o["userIds"] = .array(userIds.map(JSONValue.string)) }
        if let hwids { o["hwids"] = .array(hwids.map(JSONValue.string)) }
        if let pushRegistered { o["pushRegistered"] = .bool(pushRegistered) }
        if let eventsPosted { o["eventsPosted"] = .array(eventsPosted.map(JSONValue.string)) }
        if let rolloutPercent { o["rolloutPercent"] = .number(rolloutPercent) }
        if let sawFeature { o["sawFeature"] = .object(["flag": .string(sawFeature.flag), "days": .number(sawFeature.days)]) }
        return .object(o)
    }
}
