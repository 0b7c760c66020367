import AgentCore
import AgentConfigFile
import FoundationEssentials
import Glibc

// PROTOCOL C.1: the agent's configuration file, a systemd-style INI parsed by
// libinih. Every error names the file, the line and the key; the agent then
// refuses to start (or, on SIGHUP, keeps its running configuration).

// MARK: - The configuration

/// Where and how the socket API is served (PROTOCOL B.3, C).
public struct SocketSettings: Sendable, Equatable {
    /// `Socket=`: default `$RUNTIME_DIRECTORY/agent.sock`, else `/run/pushwoosh-agent/agent.sock`.
    public var path: String
    /// `SocketMode=` (octal), default 0660.
    public var mode: UInt32 = 0o660
    /// `SocketGroup=`: the socket file's group; nil keeps the agent's.
    public var group: String?
    /// `ControlGroup=`: members may call the state-changing methods (B.3).
    public var controlGroup: String?
    /// `MaxConnections=`: clients at once (B.3), default 256.
    public var maxConnections: Int = 256
    /// B.3: a connection idle this long without a subscription is closed.
    public var idleTimeout: Seconds = 600

    public init(path: String) { self.path = path }
}

/// Everything `agent.conf` and the command line decide. Validated once, on load.
///
/// Its descriptions (`description`, `debugDescription`, `dump`) never show the
/// API token: it is written as `<redacted>`.
public struct AgentConfiguration: Sendable, Equatable {
    /// `[Agent]` ApplicationCode, ApiToken, ServerURL, RequestTimeout.
    public var server: ServerSettings
    /// `[Agent] UserId=`: the User ID at first start; nil leaves the HWID.
    public var initialUserId: String?
    public var socket: SocketSettings
    /// `StateDirectory=`: default `$STATE_DIRECTORY`, else `/var/lib/pushwoosh-agent`.
    public var stateDirectory: String
    /// `[FeatureFlags]`.
    public var featureFlags: FeatureFlagSettings
    /// `[Device]`.
    public var device: DeviceSettings
    /// `[HTTP]` (PROTOCOL F).
    public var http = HTTPSettings()
    /// The file this came from, if any (for logs).
    public var sourceFile: String?

    public static let defaultConfigFile = "/etc/pushwoosh-agent/agent.conf"
    public static let defaultSocketPath = "/run/pushwoosh-agent/agent.sock"
    public static let defaultStateDirectory = "/var/lib/pushwoosh-agent"

    public init(applicationCode: String, environment: [String: String] = [:]) {
        server = ServerSettings(applicationCode: applicationCode)
        socket = SocketSettings(path: Self.defaultSocketPath(environment: environment))
        stateDirectory = Self.defaultStateDirectory(environment: environment)
        featureFlags = FeatureFlagSettings()
        device = DeviceSettings()
    }

    /// `$RUNTIME_DIRECTORY/agent.sock` (the first directory when systemd lists
    /// several), else `/run/pushwoosh-agent/agent.sock`.
    public static func defaultSocketPath(environment: [String: String]) -> String {
        if let dir = firstDirectory(environment["RUNTIME_DIRECTORY"]) {
            return dir.hasSuffix("/") ? dir + "agent.sock" : dir + "/agent.sock"
        }
        return defaultSocketPath
    }

    /// `$STATE_DIRECTORY` (the first when several), else `/var/lib/pushwoosh-agent`.
    public static func defaultStateDirectory(environment: [String: String]) -> String {
        firstDirectory(environment["STATE_DIRECTORY"]) ?? defaultStateDirectory
    }

    private static func firstDirectory(_ value: String?) -> String? {
        guard let value, let first = value.split(separator: ":").first, !first.isEmpty else { return nil }
        return String(first)
    }
}

extension AgentConfiguration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// One line of `key=value` facts for logs; the API token is never shown.
    public var description: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String?) { parts.append("\(key)=\(value ?? "-")") }
        add("applicationCode", server.applicationCode)
        add("apiToken", server.apiToken == nil ? nil : "<redacted>")
        add("serverURL", server.serverURL)
        add("requestTimeout", TimeSpan.format(server.requestTimeout))
        add("userId", initialUserId)
        add("socket", socket.path)
        add("socketMode", "0" + String(socket.mode, radix: 8))
        add("socketGroup", socket.group)
        add("controlGroup", socket.controlGroup)
        add("maxConnections", String(socket.maxConnections))
        add("stateDirectory", stateDirectory)
        add("storedFlagsLifetime", TimeSpan.format(featureFlags.storedFlagsLifetime))
        add("sessionTimeout", TimeSpan.format(featureFlags.sessionTimeout))
        add("refreshInterval", TimeSpan.format(featureFlags.refreshInterval))
        add("throttleWindow", TimeSpan.format(featureFlags.throttleWindow))
        add("disableThrottle", featureFlags.disableThrottle ? "yes" : "no")
        add("initialAppState", device.initialAppState.rawValue)
        add("notificationAuthorization", device.notificationAuthorization.rawValue)
        add("permissionPromptAnswer", device.permissionPromptAnswer.rawValue)
        add("clock", device.clock.rawValue)
        add("httpListen", http.listen?.description)
        add("httpTokenFile", http.tokenFile)
        return parts.joined(separator: " ")
    }

    public var debugDescription: String { "AgentConfiguration(\(description))" }

    /// `dump()` and the debugger see the redacted description, not the fields.
    public var customMirror: Mirror {
        Mirror(self, children: ["redacted": description], displayStyle: .struct)
    }
}

// MARK: - Loading and parsing

extension AgentConfiguration {
    /// Reads and parses `path`. A missing or unreadable file is an error naming it.
    public static func load(file path: String, environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        try load(file: path, overrides: [], environment: environment)
    }

    /// `file`, then each of `overrides` that exists, whose keys override the
    /// earlier files' (PROTOCOL E: `agent.conf`, then `NAME.conf`). Errors name
    /// the file and line they are in; ApplicationCode= may come from any of them.
    public static func load(file path: String, overrides: [String],
                            environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        var values = try readValues(file: path, into: RawValues())
        var sources = [path]
        try applyFleetEnvironment(environment, to: &values)
        if fleetEnvironment.contains(where: { environment[$0.variable] != nil }) { sources.append("environment") }
        for override in overrides where access(override, F_OK) == 0 {
            values = try readValues(file: override, into: values)
            sources.append(override)
        }
        var configuration = try values.build(file: path, environment: environment)
        configuration.sourceFile = sources.joined(separator: ",")
        return configuration
    }

    private static func readValues(file path: String, into values: RawValues) throws(ConfigurationError) -> RawValues {
        try parseValues(try INIFile.read(path), file: path, into: values)
    }

    /// Parses configuration text; `file` names it in errors.
    public static func parse(_ text: String, file: String, environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        try parse(Array(text.utf8), file: file, environment: environment)
    }

    public static func parse(_ bytes: [UInt8], file: String, environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        try parseValues(bytes, file: file, into: RawValues()).build(file: file, environment: environment)
    }

    /// The keys of one file, laid over `initial` (a later file's key wins).
    fileprivate static func parseValues(_ bytes: [UInt8], file: String, into initial: RawValues) throws(ConfigurationError) -> RawValues {
        var values = initial
        try INIFile.parse(bytes, file: file, schema: configurationSchema) { (_, key, value) throws(ValueError) in
            try values.set(key, value)
        }
        return values
    }

    /// PROTOCOL E.1: what a fleet's generated drop-in sets for one instance
    /// (pushwoosh-agent-fleet-generator), laid over agent.conf and under NAME.conf.
    public static let fleetEnvironment: [(variable: String, key: String)] = [
        ("PUSHWOOSH_AGENT_USER_ID", "UserId"),
        ("PUSHWOOSH_AGENT_INITIAL_APP_STATE", "InitialAppState"),
    ]

    fileprivate static func applyFleetEnvironment(_ environment: [String: String], to values: inout RawValues) throws(ConfigurationError) {
        for (variable, key) in fleetEnvironment {
            guard let value = environment[variable] else { continue }
            do {
                try values.set(key, value)
            } catch {
                throw ConfigurationError(file: "environment", line: nil, key: variable, message: "\(key): \(error.message)")
            }
        }
    }
}

/// The sections and keys of C.1, in the order errors list them.
private let configurationSchema = INISchema([
    ("Agent", ["ApplicationCode", "ApiToken", "ServerURL", "UserId", "Socket", "SocketMode", "SocketGroup",
               "ControlGroup", "MaxConnections", "StateDirectory", "RequestTimeout"]),
    ("FeatureFlags", ["StoredFlagsLifetime", "SessionTimeout", "RefreshInterval", "ThrottleWindow", "DisableThrottle"]),
    ("Device", ["InitialAppState", "NotificationAuthorization", "PermissionPromptAnswer", "Clock"]),
    ("HTTP", ["Listen", "TokenFile"]),
])

/// Values as read, each validated on its own; `build` checks the whole.
fileprivate struct RawValues {
    var applicationCode: String?
    var apiToken: String?
    var serverURL: String?
    var userId: String?
    var socket: String?
    var socketMode: UInt32?
    var socketGroup: String?
    var controlGroup: String?
    var maxConnections: Int?
    var stateDirectory: String?
    var requestTimeout: Seconds?
    var storedFlagsLifetime: Seconds?
    var sessionTimeout: Seconds?
    var refreshInterval: Seconds?
    var throttleWindow: Seconds?
    var disableThrottle: Bool?
    var initialAppState: AppState?
    var notificationAuthorization: NotificationAuthorization?
    var permissionPromptAnswer: PermissionPromptAnswer?
    var clock: DeviceClockMode?
    var httpListen: HTTPListenAddress?
    var httpTokenFile: String?

    /// Empty values unset the key (a later line overrides an earlier one, as in systemd).
    mutating func set(_ key: String, _ value: String) throws(ValueError) {
        let v: String? = value.isEmpty ? nil : value
        switch key {
        case "ApplicationCode": applicationCode = v
        case "ApiToken": apiToken = v
        case "ServerURL": serverURL = try v.map { (s) throws(ValueError) in try ConfigValue.serverURL(s) }
        case "UserId": userId = v
        case "Socket": socket = try v.map { (s) throws(ValueError) in try ConfigValue.socketPath(s) }
        case "SocketMode": socketMode = try v.map { (s) throws(ValueError) in try ConfigValue.mode(s) }
        case "SocketGroup": socketGroup = try v.map { (s) throws(ValueError) in try ConfigValue.groupName(s) }
        case "ControlGroup": controlGroup = try v.map { (s) throws(ValueError) in try ConfigValue.groupName(s) }
        case "MaxConnections": maxConnections = try v.map { (s) throws(ValueError) in try ConfigValue.positiveInteger(s) }
        case "StateDirectory": stateDirectory = try v.map { (s) throws(ValueError) in try ConfigValue.absolutePath(s) }
        case "RequestTimeout": requestTimeout = try v.map { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }
        case "StoredFlagsLifetime": storedFlagsLifetime = try v.map { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }
        case "SessionTimeout": sessionTimeout = try v.map { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: false) }
        case "RefreshInterval": refreshInterval = try v.map { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }
        case "ThrottleWindow": throttleWindow = try v.map { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: false) }
        case "DisableThrottle": disableThrottle = try v.map { (s) throws(ValueError) in try ConfigValue.boolean(s) }
        case "InitialAppState": initialAppState = try v.map { (s) throws(ValueError) in try ConfigValue.enumeration(s, AppState.self) }
        case "NotificationAuthorization":
            notificationAuthorization = try v.map { (s) throws(ValueError) in try ConfigValue.enumeration(s, NotificationAuthorization.self) }
        case "PermissionPromptAnswer":
            permissionPromptAnswer = try v.map { (s) throws(ValueError) in try ConfigValue.enumeration(s, PermissionPromptAnswer.self) }
        case "Clock": clock = try v.map { (s) throws(ValueError) in try ConfigValue.enumeration(s, DeviceClockMode.self) }
        case "Listen": httpListen = try v.map { (s) throws(ValueError) in try HTTPListenAddress.parse(s) }
        case "TokenFile": httpTokenFile = try v.map { (s) throws(ValueError) in try ConfigValue.absolutePath(s) }
        default:
            preconditionFailure("key \(key) is in configurationSchema but not handled")
        }
    }

    func build(file: String, environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        guard let applicationCode else {
            throw ConfigurationError(file: file, line: nil, key: "ApplicationCode", message: "required in [Agent], not set")
        }
        var c = AgentConfiguration(applicationCode: applicationCode, environment: environment)
        c.sourceFile = file
        c.server.apiToken = apiToken
        c.server.serverURL = serverURL
        if let requestTimeout { c.server.requestTimeout = requestTimeout }
        c.initialUserId = userId
        if let socket { c.socket.path = socket }
        if let socketMode { c.socket.mode = socketMode }
        c.socket.group = socketGroup
        c.socket.controlGroup = controlGroup
        if let maxConnections { c.socket.maxConnections = maxConnections }
        if let stateDirectory { c.stateDirectory = stateDirectory }
        if let storedFlagsLifetime { c.featureFlags.storedFlagsLifetime = storedFlagsLifetime }
        if let sessionTimeout { c.featureFlags.sessionTimeout = sessionTimeout }
        if let refreshInterval { c.featureFlags.refreshInterval = refreshInterval }
        if let throttleWindow { c.featureFlags.throttleWindow = throttleWindow }
        if let disableThrottle { c.featureFlags.disableThrottle = disableThrottle }
        if let initialAppState { c.device.initialAppState = initialAppState }
        if let notificationAuthorization { c.device.notificationAuthorization = notificationAuthorization }
        if let permissionPromptAnswer { c.device.permissionPromptAnswer = permissionPromptAnswer }
        if let clock { c.device.clock = clock }
        c.http.listen = httpListen
        c.http.tokenFile = httpTokenFile
        return c
    }
}

/// Value syntaxes of C.1, shared with the command line.
enum ConfigValue {
    static func serverURL(_ raw: String) throws(ValueError) -> String {
        var s = raw.trimmingWhitespace()
        let lower = s.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://"),
              let url = URL(string: s), let host = url.host, !host.isEmpty
        else {
            throw ValueError("invalid URL \"\(raw)\" (expected http:// or https:// with a host)")
        }
        if !s.hasSuffix("/") { s += "/" }
        return s
    }

    /// A socket path: absolute and short enough for `sun_path` (107 bytes).
    static func socketPath(_ s: String) throws(ValueError) -> String {
        let path = try absolutePath(s)
        if path.utf8.count > 107 { throw ValueError("socket path longer than 107 bytes: \"\(s)\"") }
        return path
    }

    static func absolutePath(_ s: String) throws(ValueError) -> String {
        guard s.hasPrefix("/") else { throw ValueError("not an absolute path: \"\(s)\"") }
        return s
    }

    static func mode(_ s: String) throws(ValueError) -> UInt32 {
        guard (1...4).contains(s.count), s.allSatisfy({ ("0"..."7").contains($0) }),
              let mode = UInt32(s, radix: 8), mode <= 0o777
        else { throw ValueError("invalid mode \"\(s)\" (expected octal permission bits like 0660)") }
        return mode
    }

    static func groupName(_ s: String) throws(ValueError) -> String {
        guard !s.contains(where: { $0 == " " || $0 == ":" || $0 == "/" || $0 == "\t" }) else {
            throw ValueError("invalid group name \"\(s)\"")
        }
        return s
    }

    static func positiveInteger(_ s: String) throws(ValueError) -> Int {
        guard s.allSatisfy(\.isASCII), let n = Int(s), n > 0 else {
            throw ValueError("invalid number \"\(s)\" (expected a whole number above 0)")
        }
        return n
    }

    static func timeSpan(_ s: String, positive: Bool) throws(ValueError) -> Seconds {
        guard let seconds = TimeSpan.parse(s) else { throw ValueError("invalid time span \"\(s)\"") }
        if positive && seconds <= 0 { throw ValueError("time span must be above 0, got \"\(s)\"") }
        return seconds
    }

    static func boolean(_ s: String) throws(ValueError) -> Bool {
        switch s.lowercased() {
        case "yes", "true", "1", "on": return true
        case "no", "false", "0", "off": return false
        default: throw ValueError("invalid boolean \"\(s)\" (expected yes/no, true/false, 1/0 or on/off)")
        }
    }

    static func enumeration<E: RawRepresentable & CaseIterable>(_ s: String, _: E.Type) throws(ValueError) -> E
        where E.RawValue == String
    {
        guard let e = E(rawValue: s) else {
            throw ValueError("invalid value \"\(s)\" (expected one of: \(E.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        return e
    }
}

