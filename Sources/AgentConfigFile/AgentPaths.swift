// docs/configuration.md C and E: where an agent's files are, and what an instance may be called. One home
// for the daemon, pushwoosh-agentctl (`--instance`, `fleet`) and the fleet generator; the
// Python client's `default_socket_path`/`instance_socket_path` are tested against agentctl.

/// The installed layout. An instance NAME (`pushwoosh-agent@NAME`) has its own socket and
/// state directory; under systemd, `$RUNTIME_DIRECTORY`/`$STATE_DIRECTORY` decide instead.
public enum AgentPaths {
    public static let configFile = "/etc/pushwoosh-agent/agent.conf"
    public static let fleetManifest = "/etc/pushwoosh-agent/fleet.conf"
    /// The socket units' directory: `agent.sock` and each instance's `NAME.sock`.
    public static let socketDirectory = "/run/pushwoosh-agent"
    public static let socket = socketDirectory + "/agent.sock"
    public static let stateDirectory = "/var/lib/pushwoosh-agent"

    /// `pushwoosh-agent@NAME.socket`'s path.
    public static func instanceSocket(_ name: String) -> String { socketDirectory + "/\(name).sock" }
    /// An instance's state outside systemd.
    public static func instanceStateDirectory(_ name: String) -> String { stateDirectory + "@\(name)" }

    /// The socket the service binds itself when it runs without its socket unit
    /// (`RuntimeDirectory=pushwoosh-agentd`, or `pushwoosh-agentd@NAME` for an instance).
    public static func serviceSocket(instance: String? = nil) -> String {
        "/run/pushwoosh-agentd\(instance.map { "@" + $0 } ?? "")/agent.sock"
    }

    /// `$RUNTIME_DIRECTORY/agent.sock`, the first directory when systemd lists several; nil without it.
    public static func runtimeSocket(environment: [String: String]) -> String? {
        firstDirectory(environment["RUNTIME_DIRECTORY"]).map { $0.hasSuffix("/") ? $0 + "agent.sock" : $0 + "/agent.sock" }
    }

    /// `$STATE_DIRECTORY`, the first when several; nil without it.
    public static func stateDirectory(environment: [String: String]) -> String? {
        firstDirectory(environment["STATE_DIRECTORY"])
    }

    private static func firstDirectory(_ value: String?) -> String? {
        guard let value, let first = value.split(separator: ":").first, !first.isEmpty else { return nil }
        return String(first)
    }
}

// MARK: - Instance names

/// docs/fleet.md E: the NAME of `pushwoosh-agent@NAME`, safe as a file name part and a systemd
/// instance: `[A-Za-z0-9_.-]`, 1–64 characters, not starting with `.` (never `..` or a
/// hidden file).
public enum InstanceName {
    public static let maximumLength = 64

    public static func isValid(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= maximumLength && !name.hasPrefix(".")
            && name.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "-_.".unicodeScalars.contains($0)) }
    }
}
