import AgentConfigFile
import AgentCore

// docs/fleet.md E.1: /etc/pushwoosh-agent/fleet.conf, the manifest of a fleet of devices.
//
//   [Fleet]
//   Devices=500                         # device-001 … device-500 (the width follows the count)
//   NamePrefix=device-
//   UserIds=user-{n}                    # optional; {n} is the instance number
//   AppStates=active:80 background:20   # optional mix, stable per instance
//   StartSpread=60s                     # instances start spread over this span
//
// Pure: bytes in, a manifest (and its instances) out; errors name file, line and key.

/// One state of the `AppStates=` mix and its weight.
public struct AppStateShare: Sendable, Equatable {
    public var state: AppState
    public var weight: Int
    public init(_ state: AppState, _ weight: Int) {
        self.state = state
        self.weight = weight
    }
}

/// The manifest, validated.
public struct FleetManifest: Sendable, Equatable {
    public static let defaultPath = AgentPaths.fleetManifest
    /// `Devices=` above this is refused: a typo must not make a host start a million agents.
    public static let maximumDevices = 10_000
    /// `StartSpread=` above this is refused.
    public static let maximumStartSpread: Seconds = 86_400

    /// `Devices=`: how many instances (0 keeps the target with none).
    public var devices: Int
    /// `NamePrefix=`: instance n is `NamePrefix` + n, zero-padded to the width of `devices`.
    public var namePrefix = "device-"
    /// `UserIds=`: the User ID template (`{n}` is the instance number); nil: none.
    public var userIds: String?
    /// `AppStates=`: the mix of initial app states; empty: agent.conf's `InitialAppState=`.
    public var appStates: [AppStateShare] = []
    /// `StartSpread=`: instance n starts (n - 1) / devices of it after the fleet target.
    public var startSpread: Seconds = 0
    /// The file it came from (named in generated files).
    public var file: String

    public init(devices: Int, file: String = FleetManifest.defaultPath) {
        self.devices = devices
        self.file = file
    }

    static let schema = INISchema([("Fleet", ["Devices", "NamePrefix", "UserIds", "AppStates", "StartSpread"])])

    /// Reads and parses `path`.
    public static func load(_ path: String = defaultPath) throws(ConfigurationError) -> FleetManifest {
        try parse(try INIFile.read(path), file: path)
    }

    public static func parse(_ text: String, file: String) throws(ConfigurationError) -> FleetManifest {
        try parse(Array(text.utf8), file: file)
    }

    public static func parse(_ bytes: [UInt8], file: String) throws(ConfigurationError) -> FleetManifest {
        var devices: Int?
        var manifest = FleetManifest(devices: 0, file: file)
        try INIFile.parse(bytes, file: file, schema: schema) { (_, key, value) throws(ValueError) in
            switch key {
            case "Devices": devices = try parseDevices(value)
            case "NamePrefix": manifest.namePrefix = try parsePrefix(value)
            case "UserIds": manifest.userIds = try parseUserIds(value)
            case "AppStates": manifest.appStates = try parseAppStates(value)
            case "StartSpread": manifest.startSpread = try parseSpread(value)
            default: preconditionFailure("key \(key) is in the schema but not handled")
            }
        }
        guard let devices else {
            throw ConfigurationError(file: file, line: nil, key: "Devices", message: "required in [Fleet], not set")
        }
        manifest.devices = devices
        let longest = manifest.name(devices == 0 ? 1 : devices)
        guard InstanceName.isValid(longest) else {
            throw ConfigurationError(file: file, line: nil, key: "NamePrefix",
                                     message: "instance names like \"\(longest)\" are longer than \(InstanceName.maximumLength) characters")
        }
        return manifest
    }

    // MARK: - Values

    static func parseDevices(_ value: String) throws(ValueError) -> Int {
        guard !value.isEmpty, value.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw ValueError("invalid number \"\(value)\" (expected a whole number from 0 to \(maximumDevices))")
        }
        guard value.count <= 6, let n = Int(value), n <= maximumDevices else {
            throw ValueError("\(value) devices is more than the \(maximumDevices) one host may run")
        }
        return n
    }

    static func parsePrefix(_ value: String) throws(ValueError) -> String {
        guard value.isEmpty || InstanceName.isValid(value + "1") else {
            throw ValueError("invalid prefix \"\(value)\" (letters, digits, '-', '_', '.'; not starting with '.')")
        }
        return value
    }

    static func parseUserIds(_ value: String) throws(ValueError) -> String? {
        guard !value.isEmpty else { return nil }
        for scalar in value.unicodeScalars where scalar.value < 0x20 || scalar == "\"" || scalar == "\\" || scalar.value == 0x7F {
            throw ValueError("invalid character \(scalar.escaped(asASCII: true)) in \"\(value)\" (no quotes, backslashes or control characters)")
        }
        var rest = Substring(value)
        while let open = rest.firstIndex(of: "{") {
            guard rest[open...].hasPrefix("{n}") else {
                throw ValueError("unknown placeholder in \"\(value)\" (the only one is {n}, the instance number)")
            }
            rest = rest[rest.index(open, offsetBy: 3)...]
        }
        if rest.contains("}") { throw ValueError("a '}' without '{n' in \"\(value)\"") }
        return value
    }

    static func parseAppStates(_ value: String) throws(ValueError) -> [AppStateShare] {
        var shares: [AppStateShare] = []
        for token in value.split(whereSeparator: { $0 == " " || $0 == "\t" }) {
            let parts = token.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, let state = AppState(rawValue: String(parts[0])) else {
                throw ValueError("invalid share \"\(token)\" (expected STATE:WEIGHT, STATE one of \(AppState.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            guard parts[1].count <= 6, parts[1].allSatisfy({ $0.isASCII && $0.isNumber }), let weight = Int(parts[1]) else {
                throw ValueError("invalid weight \"\(parts[1])\" in \"\(token)\" (expected a whole number up to 999999)")
            }
            guard !shares.contains(where: { $0.state == state }) else { throw ValueError("\(state.rawValue) is listed twice") }
            shares.append(AppStateShare(state, weight))
        }
        guard shares.isEmpty || shares.contains(where: { $0.weight > 0 }) else {
            throw ValueError("every weight is 0 in \"\(value)\"")
        }
        return shares
    }

    static func parseSpread(_ value: String) throws(ValueError) -> Seconds {
        guard !value.isEmpty else { return 0 }
        guard let seconds = TimeSpan.parse(value) else { throw ValueError("invalid time span \"\(value)\"") }
        guard seconds <= maximumStartSpread else { throw ValueError("time span \"\(value)\" is longer than 1 day") }
        return seconds
    }

    // MARK: - Instances

    /// The digits of instance numbers: those of `devices` (device-001 … device-500).
    public var width: Int { String(max(devices, 1)).count }

    /// Instance n's name.
    public func name(_ n: Int) -> String {
        let digits = String(n)
        return namePrefix + String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// Instance n's User ID: `{n}` replaced by n.
    public func userId(_ n: Int) -> String? {
        userIds.map { $0.replacingPlaceholder(with: String(n)) }
    }

    /// Instances 1…devices.
    public var instances: [FleetInstance] {
        let states = appStateSequence(count: devices)
        return (0..<devices).map { i in
            FleetInstance(number: i + 1, name: name(i + 1), userId: userId(i + 1), appState: states.isEmpty ? nil : states[i],
                          startDelay: devices == 0 ? 0 : startSpread * Double(i) / Double(devices))
        }
    }

    /// The app state of instances 1…count: smooth weighted round-robin over the shares,
    /// so any prefix of the fleet follows the mix within one instance per state, and an
    /// instance's state depends only on its number and the mix (not on `Devices=`).
    func appStateSequence(count: Int) -> [AppState] {
        guard !appStates.isEmpty else { return [] }
        let total = appStates.reduce(0) { $0 + $1.weight }
        var current = [Int](repeating: 0, count: appStates.count)
        var result: [AppState] = []
        result.reserveCapacity(count)
        for _ in 0..<count {
            var best = 0
            for j in appStates.indices {
                current[j] += appStates[j].weight
                if current[j] > current[best] { best = j }
            }
            current[best] -= total
            result.append(appStates[best].state)
        }
        return result
    }
}

/// One device of the fleet.
public struct FleetInstance: Sendable, Equatable {
    public var number: Int
    public var name: String
    public var userId: String?
    public var appState: AppState?
    /// Seconds after the fleet target's start.
    public var startDelay: Seconds
}

extension String {
    fileprivate func replacingPlaceholder(with value: String) -> String {
        var result = ""
        var rest = Substring(self)
        while let range = rest.firstRange(of: "{n}") {
            result += rest[..<range.lowerBound]
            result += value
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}
