import AgentCore
import AgentPosix
import CInih
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

// MARK: - Errors

/// A configuration problem: `FILE:LINE: KEY: what is wrong`.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    /// 1-based; nil for problems of the file as a whole (missing, a required key absent).
    public var line: Int?
    /// The key (or `[Section]`) concerned, if any.
    public var key: String?
    public var message: String

    public init(file: String, line: Int?, key: String?, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    public var description: String {
        var s = file
        if let line { s += ":\(line)" }
        if let key { s += ": \(key)" }
        return s + ": " + message
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
        for override in overrides where access(override, F_OK) == 0 {
            values = try readValues(file: override, into: values)
            sources.append(override)
        }
        var configuration = try values.build(file: path, environment: environment)
        configuration.sourceFile = sources.joined(separator: ",")
        return configuration
    }

    private static func readValues(file path: String, into values: RawValues) throws(ConfigurationError) -> RawValues {
        let bytes: [UInt8]
        do {
            bytes = try readWholeFile(path)
        } catch {
            let reason = switch error.errno {
            case ENOENT: "no such file"
            case EACCES: "permission denied"
            default: error.message
            }
            throw ConfigurationError(file: path, line: nil, key: nil, message: "cannot read the configuration file: \(reason)")
        }
        return try parseValues(bytes, file: path, into: values)
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
        let context = INIContext(file: file, bytes: bytes)
        context.values = initial
        let unmanaged = Unmanaged.passRetained(context)
        defer { unmanaged.release() }
        let pointer = unmanaged.toOpaque()
        let reader: ini_reader = { buffer, size, stream in
            Unmanaged<INIContext>.fromOpaque(stream!).takeUnretainedValue().readLine(into: buffer, size: Int(size))
        }
        let handler: ini_handler = { user, section, name, value in
            let context = Unmanaged<INIContext>.fromOpaque(user!).takeUnretainedValue()
            return context.handle(section: section, name: name, value: value) ? 1 : 0
        }
        let firstErrorLine = ini_parse_stream(reader, pointer, handler, pointer)
        if let error = context.error, firstErrorLine == 0 || firstErrorLine >= (error.line ?? 0) {
            throw error
        }
        if firstErrorLine > 0 {
            throw ConfigurationError(file: file, line: Int(firstErrorLine), key: nil,
                                     message: "syntax error: expected [Section], Key=Value or a comment")
        }
        if let error = context.error { throw error }
        return context.values
    }
}

/// The sections and keys of C.1.
private let knownKeys: [String: [String]] = [
    "Agent": ["ApplicationCode", "ApiToken", "ServerURL", "UserId", "Socket", "SocketMode", "SocketGroup",
              "ControlGroup", "MaxConnections", "StateDirectory", "RequestTimeout"],
    "FeatureFlags": ["StoredFlagsLifetime", "SessionTimeout", "RefreshInterval", "ThrottleWindow", "DisableThrottle"],
    "Device": ["InitialAppState", "NotificationAuthorization", "PermissionPromptAnswer", "Clock"],
    "HTTP": ["Listen", "TokenFile"],
]

/// The state of one parse, reached from libinih's C callbacks through `void *`.
private final class INIContext {
    let file: String
    let lines: [ArraySlice<UInt8>]
    var next = 0
    /// The 1-based number of the line libinih is working on.
    var lineNumber = 0
    var error: ConfigurationError?
    var values = RawValues()

    init(file: String, bytes: [UInt8]) {
        self.file = file
        var bytes = bytes[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        self.lines = lines
    }

    func fail(_ key: String?, _ message: String) {
        if error == nil { error = ConfigurationError(file: file, line: lineNumber, key: key, message: message) }
    }

    /// libinih's `fgets`: one line per call, so `lineNumber` is libinih's line.
    /// Leading whitespace is dropped (systemd ignores it; libinih would take an
    /// indented line for a continuation of the previous value).
    func readLine(into buffer: UnsafeMutablePointer<CChar>?, size: Int) -> UnsafeMutablePointer<CChar>? {
        guard error == nil, next < lines.count, let buffer else { return nil }
        var line = lines[next]
        next += 1
        lineNumber = next
        while let first = line.first, first == 0x20 || first == 0x09 { line = line.dropFirst() }
        if line.contains(0) { fail(nil, "the line contains a NUL byte"); return nil }
        guard line.count + 2 <= size else {
            fail(nil, "the line is longer than \(size - 2) bytes")
            return nil
        }
        if line.first == UInt8(ascii: "["), !checkSectionHeader(line) { return nil }
        var i = 0
        for byte in line {
            buffer[i] = CChar(bitPattern: byte)
            i += 1
        }
        buffer[i] = 0x0A
        buffer[i + 1] = 0
        return buffer
    }

    /// Catches unknown sections even when they hold no keys (libinih reports
    /// sections only with their keys).
    private func checkSectionHeader(_ line: ArraySlice<UInt8>) -> Bool {
        guard let close = line.firstIndex(of: UInt8(ascii: "]")) else { return true }  // libinih reports it
        let name = String(decoding: line[(line.startIndex + 1)..<close], as: UTF8.self)
        if knownKeys[name] == nil {
            fail("[\(name)]", "unknown section (expected [Agent], [FeatureFlags], [Device] or [HTTP])")
            return false
        }
        return true
    }

    func handle(section: UnsafePointer<CChar>?, name: UnsafePointer<CChar>?, value: UnsafePointer<CChar>?) -> Bool {
        guard error == nil else { return false }
        guard let name, let key = String(validatingCString: name) else {
            fail(nil, "the key is not valid UTF-8")
            return false
        }
        let sectionName = section.flatMap { String(validatingCString: $0) } ?? ""
        guard let raw = value.flatMap({ String(validatingCString: $0) }) else {
            fail(key, "the value is not valid UTF-8")
            return false
        }
        guard !sectionName.isEmpty else {
            fail(key, "key outside a section (expected it under \(sectionOf(key).map { "[\($0)]" } ?? "a section"))")
            return false
        }
        guard let keys = knownKeys[sectionName] else {
            fail("[\(sectionName)]", "unknown section (expected [Agent], [FeatureFlags], [Device] or [HTTP])")
            return false
        }
        guard keys.contains(key) else {
            var message = "unknown key in [\(sectionName)]"
            if let other = sectionOf(key) {
                message += " (it belongs in [\(other)])"
            } else if let near = knownKeys.values.joined().first(where: { $0.lowercased() == key.lowercased() }) {
                message += " (did you mean \(near)?)"
            }
            fail(key, message)
            return false
        }
        do {
            try values.set(key, Self.stripComment(raw))
        } catch {
            fail(key, error.message)
            return false
        }
        return true
    }

    private func sectionOf(_ key: String) -> String? {
        knownKeys.first(where: { $0.value.contains(key) })?.key
    }

    /// `Value   # comment` → `Value`: a `#` at the start of the value or after
    /// whitespace begins a comment (the PROTOCOL's example file has them).
    static func stripComment(_ value: String) -> String {
        var result = Substring(value)
        var previousIsSpace = true
        for index in value.indices {
            let c = value[index]
            if c == "#" && previousIsSpace {
                result = value[..<index]
                break
            }
            previousIsSpace = c == " " || c == "\t"
        }
        return result.trimmingWhitespace()
    }
}

/// A bad value, before it is placed at a line.
struct ValueError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

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
            preconditionFailure("key \(key) is in knownKeys but not handled")
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
