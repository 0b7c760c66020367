import FoundationEssentials

/// One flag as the server evaluated it for this device and user (FF-1, FF-4).
public struct FeatureFlag: Sendable, Equatable, Codable {
    public var key: String
    public var isEnabled: Bool
    /// The rule that decided the result; `default` when none matched; empty when killed (FF-4, FF-8).
    public var ruleId: String
    /// Property values; when the flag is off they hold the Control Panel defaults (FF-5).
    public var properties: [String: JSONValue]

    public init(key: String, isEnabled: Bool, ruleId: String, properties: [String: JSONValue] = [:]) {
        self.key = key
        self.isEnabled = isEnabled
        self.ruleId = ruleId
        self.properties = properties
    }

    /// OpenFeature's reason for this flag's value (docs/socket-api.md B.1 provenance).
    public var reason: EvaluationReason {
        switch ruleId {
        case "": .disabled
        case "default": .default
        default: .targetingMatch
        }
    }
}

/// The typed property reads of FF-5.
public enum PropertyType: String, Sendable, CaseIterable {
    case string, number, bool, jsonObject, jsonArray

    /// The one vocabulary a user types (agentctl `property --type`, the socket's `type`, the
    /// Python client): `string`, `number`, `bool`, `jsonObject`, `jsonArray`; `json` and
    /// `json-object` are accepted for `jsonObject`, `json-array` for `jsonArray`.
    public init?(spelling: String) {
        if let exact = PropertyType(rawValue: spelling) {
            self = exact
            return
        }
        switch spelling {
        case "json", "json-object": self = .jsonObject
        case "json-array": self = .jsonArray
        default: return nil
        }
    }

    /// How an error names the accepted spellings.
    public static let spellings = "string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array)"

    public var isScalar: Bool {
        switch self {
        case .string, .number, .bool: true
        case .jsonObject, .jsonArray: false
        }
    }

    /// Whether `value` holds this type. A Boolean is never a Number, nor a Number a Boolean (FF-5).
    public func matches(_ value: JSONValue) -> Bool {
        switch (self, value) {
        case (.string, .string), (.number, .number), (.bool, .bool), (.jsonObject, .object), (.jsonArray, .array):
            true
        default:
            false
        }
    }
}

/// OpenFeature's evaluation reasons, as docs/socket-api.md B.1 names them.
public enum EvaluationReason: String, Sendable {
    case targetingMatch = "TARGETING_MATCH"
    case `default` = "DEFAULT"
    case disabled = "DISABLED"
    case error = "ERROR"
}

/// OpenFeature's error codes, given with `EvaluationReason.error` only.
public enum EvaluationErrorCode: String, Sendable {
    /// Flags are loaded but the key is absent (FF-2).
    case flagNotFound = "FLAG_NOT_FOUND"
    /// No valid flags: none fetched yet, expired (ST-3) or discarded (ST-2).
    case providerNotReady = "PROVIDER_NOT_READY"
    /// `property` of another type, or a property the flag does not carry (the two are told
    /// apart by the provenance's `errorMessage`).
    case typeMismatch = "TYPE_MISMATCH"
}

/// Where the flags being served came from.
public enum FlagSource: String, Sendable, Codable {
    case network, cache, none
}

/// How a read was answered: docs/socket-api.md B.1's provenance fields.
public struct Provenance: Sendable, Equatable {
    public var reason: EvaluationReason
    public var errorCode: EvaluationErrorCode?
    /// With `errorCode`: what happened, in words naming the key (and the property), as
    /// OpenFeature's `errorMessage`: a missing property and one of another type share
    /// TYPE_MISMATCH and differ here (`FallbackMessage`).
    public var errorMessage: String?
    public var source: FlagSource
    public var ageSeconds: Seconds?

    public init(reason: EvaluationReason, errorCode: EvaluationErrorCode? = nil, errorMessage: String? = nil,
                source: FlagSource, ageSeconds: Seconds?) {
        self.reason = reason
        self.errorCode = errorCode
        self.errorMessage = errorMessage
        self.source = source
        self.ageSeconds = ageSeconds
    }
}

/// The words of a read answered with the caller's default (the provenance's `errorMessage`):
/// one source for the agent's answers, agentctl's warnings and the Python client's.
public enum FallbackMessage {
    public static let providerNotReady = "no valid flags are served (none received yet, or past their lifetime)"

    public static func flagNotFound(_ key: String) -> String { "no flag \"\(key)\" in the served flags" }

    public static func missingProperty(_ key: String, _ property: String) -> String {
        "flag \"\(key)\" has no property \"\(property)\""
    }

    public static func otherType(_ key: String, _ property: String, found: JSONValue, wanted: PropertyType) -> String {
        "property \"\(property)\" of flag \"\(key)\" is \(kind(found)), not \(article(wanted.rawValue))"
    }

    /// A value's kind in the `type` vocabulary (`a string`, `a number`, `a bool`, `a jsonObject`,
    /// `a jsonArray`, `null`).
    static func kind(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool: "a bool"
        case .number: "a number"
        case .string: "a string"
        case .array: "a jsonArray"
        case .object: "a jsonObject"
        }
    }

    static func article(_ name: String) -> String { "a " + name }
}

/// A read's value with its provenance.
public struct Evaluation<Value: Sendable>: Sendable {
    public var value: Value
    public var provenance: Provenance
}

extension Evaluation: Equatable where Value: Equatable {}
