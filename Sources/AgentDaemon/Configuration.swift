import AgentCore
import AgentConfigFile
import FoundationEssentials
import Glibc

// docs/configuration.md C.1: the agent's configuration file, a systemd-style INI parsed by
// libinih. Every error names the file, the line and the key; the agent then
// refuses to start (or, on SIGHUP, keeps its running configuration).

// MARK: - The configuration

/// Where and how the socket API is served (docs/socket-api.md B.3, C).
public struct SocketSettings: Sendable, Equatable {
    /// `Socket=`: default `$RUNTIME_DIRECTORY/agent.sock`, else `/run/pushwoosh-agent/agent.sock`.
    public var path: String
    /// `SocketMode=` (octal), default 0660.
    public var mode: UInt32 = 0o660
    /// `SocketGroup=`: the socket file's group; nil keeps the agent's.
    public var group: String?
    /// `ControlGroup=`: members may call the state-changing methods (B.3).
    public var controlGroup: String?
    /// `MaxConnections=`: socket clients at once (B.3), default 256; control callers
    /// have `reservedControlSlots` more.
    public var maxConnections: Int = 256
    /// Connections beyond `maxConnections` that only a caller with control access (root,
    /// the agent's user, `ControlGroup=`) may take: no number of read-only clients can
    /// refuse it.
    public static let reservedControlSlots = 4
    /// `RequestReadTimeout=`: a connection must complete a request within this long (on
    /// the socket: its first line after it opens, and every line from its first byte; on
    /// HTTP: the headers, from the opening or the previous answer), else it is closed.
    public var requestReadTimeout: Seconds = 30
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
    /// `[HTTP]` (docs/http.md F).
    public var http = HTTPSettings()
    /// `[Agent] CAFile=`, `Proxy=`: TLS trust and proxy.
    public var network = NetworkSettings()
    /// The file this came from, if any (for logs).
    public var sourceFile: String?
    /// Keys set twice in one file (the later value is used): logged as warnings.
    public var repeatedKeys: [INIFile.RepeatedKey] = []

    public static let defaultConfigFile = AgentPaths.configFile
    public static let defaultSocketPath = AgentPaths.socket
    public static let defaultStateDirectory = AgentPaths.stateDirectory

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
        AgentPaths.runtimeSocket(environment: environment) ?? AgentPaths.socket
    }

    /// `$STATE_DIRECTORY` (the first when several), else `/var/lib/pushwoosh-agent`.
    public static func defaultStateDirectory(environment: [String: String]) -> String {
        AgentPaths.stateDirectory(environment: environment) ?? AgentPaths.stateDirectory
    }
}

extension AgentConfiguration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// One line of `key=value` facts for logs, one per key of the table; the API token is never shown.
    public var description: String {
        Self.keys.map { "\($0.logName)=\($0.show(self) ?? "-")" }.joined(separator: " ")
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
    /// earlier files' (docs/fleet.md E: `agent.conf`, then `NAME.conf`). Errors name
    /// the file and line they are in; ApplicationCode= may come from any of them.
    public static func load(file path: String, overrides: [String],
                            environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        var values = try readValues(file: path, into: ConfigurationReading(environment: environment))
        var sources = [path]
        try applyFleetEnvironment(environment, to: &values)
        if fleetEnvironment.contains(where: { environment[$0.variable] != nil }) { sources.append("environment") }
        for override in overrides where access(override, F_OK) == 0 {
            values = try readValues(file: override, into: values)
            sources.append(override)
        }
        var configuration = try values.build(file: path)
        configuration.sourceFile = sources.joined(separator: ",")
        return configuration
    }

    private static func readValues(file path: String, into values: ConfigurationReading) throws(ConfigurationError) -> ConfigurationReading {
        try parseValues(try INIFile.read(path), file: path, into: values)
    }

    /// Parses configuration text; `file` names it in errors.
    public static func parse(_ text: String, file: String, environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        try parse(Array(text.utf8), file: file, environment: environment)
    }

    public static func parse(_ bytes: [UInt8], file: String, environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        try parseValues(bytes, file: file, into: ConfigurationReading(environment: environment)).build(file: file)
    }

    /// The keys of one file, laid over `initial` (a later file's key wins).
    fileprivate static func parseValues(_ bytes: [UInt8], file: String, into initial: ConfigurationReading) throws(ConfigurationError) -> ConfigurationReading {
        var values = initial
        values.repeated += try INIFile.parse(bytes, file: file, schema: schema) { (section, key, value) throws(ValueError) in
            try values.set(section: section, key, value)
        }
        return values
    }

    /// docs/fleet.md E.1: what a fleet's generated drop-in sets for one instance
    /// (pushwoosh-agent-fleet-generator), laid over agent.conf and under NAME.conf.
    public static var fleetEnvironment: [(variable: String, key: String)] {
        keys.compactMap { key in key.environment.map { ($0, key.name) } }
    }

    fileprivate static func applyFleetEnvironment(_ environment: [String: String], to values: inout ConfigurationReading) throws(ConfigurationError) {
        for key in keys {
            guard let variable = key.environment, let value = environment[variable] else { continue }
            do {
                try values.set(section: key.section, key.name, value)
            } catch {
                throw ConfigurationError(file: "environment", line: nil, key: variable, message: "\(key.name): \(error.message)")
            }
        }
    }
}

/// The configuration as the files are read: each value validated and set as it comes
/// (a later line wins; an empty value restores the default); `build` checks the whole.
fileprivate struct ConfigurationReading {
    let defaults: AgentConfiguration
    var configuration: AgentConfiguration
    /// Keys set twice in one file.
    var repeated: [INIFile.RepeatedKey] = []
    /// By `Section.Name`: a name may be in two sections (`MaxConnections`).
    let keys = Dictionary(uniqueKeysWithValues: AgentConfiguration.keys.map { ($0.section + "." + $0.name, $0) })

    init(environment: [String: String]) {
        defaults = AgentConfiguration(applicationCode: "", environment: environment)
        configuration = defaults
    }

    mutating func set(section: String, _ name: String, _ value: String) throws(ValueError) {
        guard let key = keys[section + "." + name] else { preconditionFailure("key [\(section)] \(name) is in the schema but not in the table") }
        try key.assign(&configuration, value, defaults)
    }

    func build(file: String) throws(ConfigurationError) -> AgentConfiguration {
        guard !configuration.server.applicationCode.isEmpty else {
            throw ConfigurationError(file: file, line: nil, key: "ApplicationCode", message: "required in [Agent], not set")
        }
        var c = configuration
        c.sourceFile = file
        c.repeatedKeys = repeated
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

    /// A connection limit: 1 to 65536.
    static func connectionCount(_ s: String) throws(ValueError) -> Int {
        guard s.allSatisfy(\.isASCII), let n = Int(s), (1...65536).contains(n) else {
            throw ValueError("invalid number \"\(s)\" (expected a whole number from 1 to 65536)")
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

