import AgentConfigFile
import AgentCore

// docs/configuration.md C.1: every key of agent.conf, one row each, as systemd's ConfigPerfItem
// tables are: section, name, how its value is read, which field it sets, when a change
// applies, the fleet variable that may set it. The file schema, the log line, the reload
// rule, `pushwoosh-agentd --list-keys` and the man page's list all come from this table.

/// One key of `agent.conf`.
public struct ConfigurationKey: Sendable {
    /// When a changed value takes effect.
    public enum Change: String, Sendable, CaseIterable {
        /// On SIGHUP (`systemctl reload`).
        case reload
        /// At the next start: a reload keeps the running value and logs a warning.
        case restart
        /// Only on the device's first start (later the device's saved state decides).
        case firstStart = "first-start"

        /// The man page's words for it (CONFIGURATION).
        public var summary: String {
            switch self {
            case .reload: "applies on reload (SIGHUP)."
            case .restart: "applies at the next start: a reload keeps the running value and logs a warning naming the key."
            case .firstStart: "read on the device's first start only; later its saved state decides."
            }
        }
    }

    public let section: String
    public let name: String
    public let change: Change
    /// The variable a fleet's generated drop-in sets (docs/fleet.md E.1), laid over the file.
    public let environment: String?
    /// Its name in the configuration's one-line description (`storedFlagsLifetime=24h`).
    public let logName: String
    /// Sets the field from a value; an empty value restores `defaults`' (as in systemd).
    let assign: @Sendable (_ configuration: inout AgentConfiguration, _ value: String, _ defaults: AgentConfiguration) throws(ValueError) -> Void
    /// The field as the log line shows it; nil is `-`.
    let show: @Sendable (AgentConfiguration) -> String?
    /// The field of `running` copied into `fresh` (a restart-only key on reload).
    let keep: @Sendable (_ fresh: inout AgentConfiguration, _ running: AgentConfiguration) -> Void
    let equal: @Sendable (AgentConfiguration, AgentConfiguration) -> Bool

    init<Value: Equatable & SendableMetatype>(_ section: String, _ name: String, _ field: WritableKeyPath<AgentConfiguration, Value> & Sendable,
                           change: Change = .reload, environment: String? = nil, logName: String? = nil,
                           parse: @escaping @Sendable (String) throws(ValueError) -> Value, show: @escaping @Sendable (Value) -> String?) {
        self.section = section
        self.name = name
        self.change = change
        self.environment = environment
        self.logName = logName ?? (name.prefix(1).lowercased() + name.dropFirst())
        assign = { (c, value, defaults) throws(ValueError) in
            c[keyPath: field] = value.isEmpty ? defaults[keyPath: field] : try parse(value)
        }
        self.show = { show($0[keyPath: field]) }
        keep = { fresh, running in fresh[keyPath: field] = running[keyPath: field] }
        equal = { $0[keyPath: field] == $1[keyPath: field] }
    }

    /// `[Agent] ApiToken=`.
    public var qualifiedName: String { "[\(section)] \(name)=" }
}

extension AgentConfiguration {
    /// The keys of docs/configuration.md C.1, in the order of the file's sections and of error lists
    /// (made once: the table is read at every load and reload).
    public static let keys: [ConfigurationKey] = {
        typealias Key = ConfigurationKey
        let text: @Sendable (String?) -> String? = { $0 }
        let span: @Sendable (Seconds) -> String? = { TimeSpan.format($0) }
        let required: @Sendable (String) throws(ValueError) -> String = { $0 }
        let optional: @Sendable (String) throws(ValueError) -> String? = { $0 }
        return [
            Key("Agent", "ApplicationCode", \.server.applicationCode, change: .reload, parse: required, show: { $0.isEmpty ? nil : $0 }),
            Key("Agent", "ApiToken", \.server.apiToken, parse: optional, show: { $0 == nil ? nil : "<redacted>" }),
            Key("Agent", "ServerURL", \.server.serverURL, logName: "serverURL",
                parse: { (s) throws(ValueError) in try ConfigValue.serverURL(s) }, show: text),
            Key("Agent", "UserId", \.initialUserId, change: .firstStart, environment: "PUSHWOOSH_AGENT_USER_ID",
                parse: optional, show: text),
            Key("Agent", "Socket", \.socket.path, change: .restart,
                parse: { (s) throws(ValueError) in try ConfigValue.socketPath(s) }, show: text),
            Key("Agent", "SocketMode", \.socket.mode, change: .restart,
                parse: { (s) throws(ValueError) in try ConfigValue.mode(s) }, show: { "0" + String($0, radix: 8) }),
            Key("Agent", "SocketGroup", \.socket.group, change: .restart,
                parse: { (s) throws(ValueError) in try ConfigValue.groupName(s) }, show: text),
            Key("Agent", "ControlGroup", \.socket.controlGroup,
                parse: { (s) throws(ValueError) in try ConfigValue.groupName(s) }, show: text),
            Key("Agent", "MaxConnections", \.socket.maxConnections,
                parse: { (s) throws(ValueError) in try ConfigValue.connectionCount(s) }, show: { String($0) }),
            Key("Agent", "RequestReadTimeout", \.socket.requestReadTimeout,
                parse: { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }, show: span),
            Key("Agent", "StateDirectory", \.stateDirectory, change: .restart,
                parse: { (s) throws(ValueError) in try ConfigValue.absolutePath(s) }, show: text),
            Key("Agent", "RequestTimeout", \.server.requestTimeout,
                parse: { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }, show: span),
            Key("Agent", "CAFile", \.network.caFile, logName: "caFile",
                parse: { (s) throws(ValueError) in try CAFile.load(s) }, show: { $0?.path }),
            Key("Agent", "Proxy", \.network.proxy,
                parse: { (s) throws(ValueError) in try ConfigValue.proxy(s) }, show: { $0.map(ConfigValue.redactedProxy) }),
            Key("FeatureFlags", "StoredFlagsLifetime", \.featureFlags.storedFlagsLifetime,
                parse: { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }, show: span),
            Key("FeatureFlags", "SessionTimeout", \.featureFlags.sessionTimeout,
                parse: { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: false) }, show: span),
            Key("FeatureFlags", "RefreshInterval", \.featureFlags.refreshInterval,
                parse: { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: true) }, show: span),
            Key("FeatureFlags", "ThrottleWindow", \.featureFlags.throttleWindow,
                parse: { (s) throws(ValueError) in try ConfigValue.timeSpan(s, positive: false) }, show: span),
            Key("FeatureFlags", "DisableThrottle", \.featureFlags.disableThrottle,
                parse: { (s) throws(ValueError) in try ConfigValue.boolean(s) }, show: { $0 ? "yes" : "no" }),
            Key("Device", "InitialAppState", \.device.initialAppState, change: .restart,
                environment: "PUSHWOOSH_AGENT_INITIAL_APP_STATE",
                parse: { (s) throws(ValueError) in try ConfigValue.enumeration(s, AppState.self) }, show: { $0.rawValue }),
            Key("Device", "NotificationAuthorization", \.device.notificationAuthorization,
                parse: { (s) throws(ValueError) in try ConfigValue.enumeration(s, NotificationAuthorization.self) },
                show: { $0.rawValue }),
            Key("Device", "PermissionPromptAnswer", \.device.permissionPromptAnswer,
                parse: { (s) throws(ValueError) in try ConfigValue.enumeration(s, PermissionPromptAnswer.self) },
                show: { $0.rawValue }),
            Key("Device", "Clock", \.device.clock, change: .restart,
                parse: { (s) throws(ValueError) in try ConfigValue.enumeration(s, DeviceClockMode.self) }, show: { $0.rawValue }),
            Key("HTTP", "Listen", \.http.listen, change: .restart, logName: "httpListen",
                parse: { (s) throws(ValueError) in try HTTPListenAddress.parse(s) }, show: { $0?.description }),
            Key("HTTP", "MaxConnections", \.http.maxConnections, change: .restart, logName: "httpMaxConnections",
                parse: { (s) throws(ValueError) in try ConfigValue.connectionCount(s) }, show: { String($0) }),
            Key("HTTP", "TokenFile", \.http.tokenFile, logName: "httpTokenFile",
                parse: { (s) throws(ValueError) in try ConfigValue.absolutePath(s) }, show: text),
        ]
    }()

    /// The file's sections and keys, from the table.
    static var schema: INISchema {
        var sections: [(name: String, keys: [String])] = []
        for key in keys {
            if sections.last?.name == key.section { sections[sections.count - 1].keys.append(key.name) }
            else { sections.append((key.section, [key.name])) }
        }
        return INISchema(sections)
    }

    /// `pushwoosh-agentd --list-keys`: one tab-separated line per key
    /// (`Section Key change variable`, `-` for no variable).
    public static var keyList: String {
        keys.map { "\($0.section)\t\($0.name)\t\($0.change.rawValue)\t\($0.environment ?? "-")\n" }.joined()
    }
}
