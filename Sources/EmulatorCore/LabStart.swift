import AgentCore
import Foundation

/// Devices to start (`POST /lab/devices`, docs/lab.md M.1): `count` of them (named `NAME-0`…)
/// or one (named `NAME`), each a `pushwoosh-agentd` child of the lab with `config` (`{n}` in a
/// value is the index).
public struct LabStart: Sendable, Equatable {
    public var name: String
    public var count: Int?
    public var controlledClock: Bool
    /// `[section: [key: value]]`, values as the configuration file has them.
    public var config: [String: [String: String]]
    /// Where the one device lives (configuration, state, socket, log), kept as it is found:
    /// a test's own directory, whose state a second start continues. nil: `DIR/devices/NAME`,
    /// made afresh.
    public var directory: String?
    /// Variables added to the device's environment (`SSL_CERT_FILE`, …).
    public var environment: [String: String]
    /// The daemon to run, when not the lab's.
    public var agentd: String?
    /// Configuration text added as it is (after the sections of `config`).
    public var extraConfig: String

    public init(name: String, count: Int?, controlledClock: Bool, config: [String: [String: String]], directory: String? = nil,
                environment: [String: String] = [:], agentd: String? = nil, extraConfig: String = "") {
        self.name = name
        self.count = count
        self.controlledClock = controlledClock
        self.config = config
        self.directory = directory
        self.environment = environment
        self.agentd = agentd
        self.extraConfig = extraConfig
    }

    /// The names of the devices it starts.
    public var names: [String] {
        guard let count else { return [name] }
        return (0..<count).map { "\(name)-\($0)" }
    }

    /// Device `index`'s configuration lines (sections and keys sorted; `{n}` replaced), then
    /// `extraConfig`'s, each with where it came from as a request path: `config.SECTION` (its
    /// header), `config.SECTION.KEY`, `extraConfig`.
    public func configurationLines(index: Int) -> [(text: String, origin: String)] {
        var lines: [(text: String, origin: String)] = []
        for section in config.keys.sorted() {
            lines.append(("[\(section)]", "config.\(section)"))
            for key in config[section]!.keys.sorted() {
                lines.append(("\(key)=\(config[section]![key]!.replacingOccurrences(of: "{n}", with: String(index)))", "config.\(section).\(key)"))
            }
        }
        let extra = extraConfig.hasSuffix("\n") ? extraConfig.dropLast() : Substring(extraConfig)
        if !extraConfig.isEmpty { lines += extra.split(separator: "\n", omittingEmptySubsequences: false).map { (String($0), "extraConfig") } }
        return lines
    }

    /// The configuration text of those lines.
    public func configurationText(index: Int) -> String {
        configurationLines(index: index).map { $0.text + "\n" }.joined()
    }

    /// Where line `line` (1-based) of device `index`'s configuration came from, as a request
    /// path; `config` for the lines the lab adds after them.
    public func origin(ofLine line: Int, index: Int) -> String {
        let lines = configurationLines(index: index)
        return line >= 1 && line <= lines.count ? lines[line - 1].origin : "config"
    }

    /// The longest `directory`: its `agent.sock` must fit a socket address (107 bytes).
    static let maximumDirectory = 107 - "/agent.sock".utf8.count
}

extension LabCommand {
    static func devicesBody(_ body: [String: JSONValue]) throws(LabRefusal) -> LabCommand {
        if body["attach"] != nil {
            try allowed(body, ["attach", "name"])
            guard let socket = try string(body, "attach"), socket.hasPrefix("/") else {
                throw LabRefusal(400, "expected the absolute path of a running device's socket", path: "attach")
            }
            guard let name = try string(body, "name") else { throw LabRefusal(400, "a name for the attached device is required", path: "name") }
            return .attach(name: try deviceName(name, path: "name"), socket: socket)
        }
        try allowed(body, ["count", "name", "clock", "config", "directory", "environment", "agentd", "extraConfig"])
        var count: Int?
        if let value = body["count"] {
            guard let n = value.numberValue, n == n.rounded(), n >= 1, n <= Double(maximumCount) else {
                throw LabRefusal(400, "expected a whole number of devices 1-\(maximumCount)", path: "count")
            }
            count = Int(n)
        }
        let name = try deviceName(try string(body, "name") ?? "device", path: "name")
        let clock = try string(body, "clock") ?? "controlled"
        guard clock == "controlled" || clock == "system" else {
            throw LabRefusal(400, "expected \"controlled\" or \"system\", found \"\(clock)\"", path: "clock")
        }
        var start = LabStart(name: name, count: count, controlledClock: clock == "controlled", config: try config(body["config"]))
        if let directory = try string(body, "directory") {
            guard count == nil else { throw LabRefusal(400, "a directory is one device's: not with count", path: "directory") }
            guard directory.hasPrefix("/"), !hasControl(directory), directory.utf8.count <= LabStart.maximumDirectory else {
                throw LabRefusal(400, "expected an absolute path of at most \(LabStart.maximumDirectory) bytes (its agent.sock must fit a socket address)",
                                 path: "directory")
            }
            start.directory = directory
        }
        if let agentd = try string(body, "agentd") {
            guard agentd.hasPrefix("/"), !hasControl(agentd) else { throw LabRefusal(400, "expected the absolute path of pushwoosh-agentd", path: "agentd") }
            start.agentd = agentd
        }
        if let text = try string(body, "extraConfig") {
            guard !text.unicodeScalars.contains(where: { $0.value == 0 }) else { throw LabRefusal(400, "a NUL in the text", path: "extraConfig") }
            start.extraConfig = text
        }
        if let value = body["environment"] {
            guard let variables = value.objectValue else { throw LabRefusal(400, "expected an object of variables", path: "environment") }
            for (variable, value) in variables {
                let at = "environment.\(variable)"
                guard let first = variable.unicodeScalars.first, !CharacterSet.decimalDigits.contains(first),
                      variable.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_") }) else {
                    throw LabRefusal(400, "expected a variable name of letters, digits and _", path: at)
                }
                guard variable != "NOTIFY_SOCKET" else { throw LabRefusal(400, "set by the lab: it receives each device's notifications", path: at) }
                guard let text = value.stringValue, !text.unicodeScalars.contains(where: { $0.value == 0 }) else {
                    throw LabRefusal(400, "expected a string without NUL", path: at)
                }
                start.environment[variable] = text
            }
        }
        return .start(start)
    }

    private static func config(_ value: JSONValue?) throws(LabRefusal) -> [String: [String: String]] {
        guard let value else { return [:] }
        guard let sections = value.objectValue else { throw LabRefusal(400, "expected an object of sections", path: "config") }
        var config: [String: [String: String]] = [:]
        for (section, keys) in sections {
            let at = "config.\(section)"
            guard isIdentifier(section) else { throw LabRefusal(400, "expected a section name of letters", path: at) }
            guard let keys = keys.objectValue else { throw LabRefusal(400, "expected an object of keys", path: at) }
            for (key, value) in keys {
                let keyPath = "\(at).\(key)"
                guard isIdentifier(key) else { throw LabRefusal(400, "expected a key name of letters", path: keyPath) }
                if let why = labKeys["\(section).\(key)"] { throw LabRefusal(400, "set by the lab: \(why)", path: keyPath) }
                let text: String
                switch value {
                case .string(let s): text = s
                case .bool(let b): text = b ? "yes" : "no"
                case .number(let n): text = n == n.rounded() && abs(n) < 1e15 ? String(Int(n)) : String(n)
                default: throw LabRefusal(400, "expected a string, number or boolean", path: keyPath)
                }
                guard !hasControl(text) else { throw LabRefusal(400, "a control character (a line break?) in the value", path: keyPath) }
                config[section, default: [:]][key] = text
            }
        }
        return config
    }

    private static func hasControl(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}
