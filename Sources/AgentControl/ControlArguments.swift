import AgentConfigFile
import AgentCore
import AgentWire
import Foundation

// The command line of pushwoosh-agentctl, parsed into a `ControlRequest`: a pure function.

public enum ControlArguments {
    public static let defaultTimeout: Double = 120
    static let globalValued: Set<String> = ["--socket", "--timeout", "--instance"]
    static let globalFlags: Set<String> = ["--json", "--help", "-h"]

    /// The default socket: `$PUSHWOOSH_AGENT_SOCKET`, else `$RUNTIME_DIRECTORY/agent.sock`,
    /// else `/run/pushwoosh-agent/agent.sock` (docs/configuration.md C).
    /// When neither names one: the socket unit's `/run/pushwoosh-agent/agent.sock` if it
    /// exists, else `/run/pushwoosh-agentd/agent.sock` if that exists (the agent's own,
    /// when pushwoosh-agent.service runs without its socket unit), else the first.
    public static func defaultSocketPath(environment: [String: String],
                                         exists: (String) -> Bool = { access($0, F_OK) == 0 }) -> String {
        if let s = environment["PUSHWOOSH_AGENT_SOCKET"], !s.isEmpty { return s }
        if let socket = AgentPaths.runtimeSocket(environment: environment) { return socket }
        return firstExisting([AgentPaths.socket, AgentPaths.serviceSocket()], exists)
    }

    /// `--instance NAME` (docs/fleet.md E): `/run/pushwoosh-agent/NAME.sock`
    /// (pushwoosh-agent@NAME.socket), else `/run/pushwoosh-agentd@NAME/agent.sock` if it
    /// exists (pushwoosh-agent@NAME.service binding its own socket).
    public static func instanceSocketPath(_ name: String, exists: (String) -> Bool = { access($0, F_OK) == 0 }) -> String {
        firstExisting([AgentPaths.instanceSocket(name), AgentPaths.serviceSocket(instance: name)], exists)
    }

    private static func firstExisting(_ paths: [String], _ exists: (String) -> Bool) -> String {
        paths.first(where: exists) ?? paths[0]
    }


    public static var usage: String { usage(commandTable) }

    /// `--help`: every top-level command of `table`, its name and summary, then the aliases.
    static func usage(_ table: [CommandDefinition]) -> String {
        let commands = table.filter(\.isTopLevel)
        let width = commands.map(\.name.count).max()! + 2
        let list = commands.map { "  " + $0.name.padding(toLength: width, withPad: " ", startingAt: 0) + $0.summary }
        let aliases = commands.flatMap { d in
            d.aliases.map { "  " + $0.padding(toLength: width, withPad: " ", startingAt: 0) + "the same as " + d.name }
        }
        return """
            Usage: pushwoosh-agentctl [--socket PATH | --instance NAME] [--json] [--timeout SECONDS] COMMAND [ARGS]

            Talks to pushwoosh-agentd over its Unix socket.

            Commands (each named as the Python client names its method):
            \(list.joined(separator: "\n"))

            Older names, still answered:
            \(aliases.joined(separator: "\n"))

            Options (before or after the command):
              --socket PATH       the agent's socket (default $PUSHWOOSH_AGENT_SOCKET, else
                                  $RUNTIME_DIRECTORY/agent.sock, else /run/pushwoosh-agent/agent.sock,
                                  else /run/pushwoosh-agentd/agent.sock if only that exists)
              --instance NAME     talk to device NAME (pushwoosh-agent@NAME): its socket
                                  /run/pushwoosh-agent/NAME.sock, else /run/pushwoosh-agentd@NAME/agent.sock
              --json              print the agent's raw result as JSON
              --timeout SECONDS   wait at most this long for an answer (default 120; 0: no limit)
              -h, --help          this help; 'pushwoosh-agentctl COMMAND --help' for a command
              --version           the version

            Exit status: 0 success, 1 the agent answered with an error (or a refresh failed, or
            an answer was not understood), 2 usage error, 3 the agent is not running or not
            answering, 4 permission denied, 5 with --strict: a read answered with the caller's
            default (FLAG_NOT_FOUND, TYPE_MISMATCH, PROVIDER_NOT_READY) or a refresh not sent.
            """
    }

    /// Parses the arguments (without the program name).
    public static func parse(_ arguments: [String], environment: [String: String]) throws(UsageError) -> ControlRequest {
        try parse(arguments, environment: environment, table: commandTable)
    }

    /// Parses the arguments against the commands of `table`.
    static func parse(_ arguments: [String], environment: [String: String],
                      table: [CommandDefinition]) throws(UsageError) -> ControlRequest {
        var socketPath: String?
        var instance: String?
        var json = false
        var timeout: Double? = defaultTimeout

        // Global options before the command.
        var i = 0
        var commandName: String?
        while i < arguments.count {
            let (name, inline) = split(arguments[i])
            if name == "-h" || name == "--help" { return .help(usage(table)) }
            if name == "--version" { return .help(PackageVersion.line("pushwoosh-agentctl")) }
            if name == "--json" { json = true; i += 1; continue }
            if globalValued.contains(name) {
                let value = try takeValue(name, inline, arguments, &i, command: nil)
                try applyGlobal(name, value, &socketPath, &instance, &timeout, command: nil)
                i += 1
                continue
            }
            if name.hasPrefix("-") && name != "-" {
                throw UsageError("unknown option \(name)"
                                 + Nearest.suggestion(name, among: (globalValued.union(globalFlags)).sorted() + ["--version"]))
            }
            commandName = arguments[i]
            i += 1
            break
        }
        guard let commandName else { throw UsageError("no command given") }
        guard let info = CommandDefinition.named(commandName, in: table) else { throw CommandDefinition.unknown(commandName, in: table) }
        if let parseRest = info.parseRest {
            return try parseRest(Array(arguments[i...]), json, arguments[..<i].contains { $0.hasPrefix("--timeout") } ? timeout : nil, table)
        }
        guard let build = info.build else { preconditionFailure("'\(info.name)' is listed but neither builds nor parses") }

        let scanned = try scan(arguments[i...], info: info)
        if scanned.flags.contains("--help") || scanned.flags.contains("-h") { return .help(info.help) }
        if scanned.flags.contains("--json") { json = true }
        for name in globalValued { if let v = scanned.values[name] { try applyGlobal(name, v, &socketPath, &instance, &timeout, command: info.name) } }
        if socketPath != nil && instance != nil {
            throw UsageError("--socket and --instance name the socket twice; give one", command: info.name)
        }

        let command = try build(scanned, info)
        let socket = socketPath ?? instance.map { instanceSocketPath($0) } ?? defaultSocketPath(environment: environment)
        return .run(ControlInvocation(socketPath: socket, json: json, timeout: timeout, command: command,
                                      strict: scanned.flags.contains("--strict")))
    }

    private static func split(_ argument: String) -> (String, String?) {
        guard argument.hasPrefix("--"), let eq = argument.firstIndex(of: "=") else { return (argument, nil) }
        return (String(argument[..<eq]), String(argument[argument.index(after: eq)...]))
    }

    private static func takeValue(_ name: String, _ inline: String?, _ arguments: [String], _ i: inout Int,
                                  command: String?) throws(UsageError) -> String {
        if let inline { return inline }
        guard i + 1 < arguments.count else { throw UsageError("option \(name) needs a value", command: command) }
        i += 1
        return arguments[i]
    }

    private static func applyGlobal(_ name: String, _ value: String, _ socketPath: inout String?,
                                    _ instance: inout String?, _ timeout: inout Double?,
                                    command: String?) throws(UsageError) {
        switch name {
        case "--instance":
            guard InstanceName.isValid(value) else {  // the names pushwoosh-agentd accepts (docs/fleet.md E)
                throw UsageError("invalid instance name \"\(value)\" (letters, digits, '-', '_', '.')", command: command)
            }
            instance = value
        case "--socket":
            guard !value.isEmpty else { throw UsageError("option --socket needs a path", command: command) }
            guard value.utf8.count <= 107 else { throw UsageError("socket path longer than 107 bytes", command: command) }
            socketPath = value
        case "--timeout":
            guard let t = Double(value), t >= 0, t.isFinite else {
                throw UsageError("--timeout must be a number of seconds, got \"\(value)\"", command: command)
            }
            timeout = t == 0 ? nil : t
        default:
            break
        }
    }

    struct Scanned {
        var positionals: [String] = []
        var values: [String: String] = [:]
        var flags: Set<String> = []
    }

    static func scan(_ arguments: ArraySlice<String>, info: CommandDefinition) throws(UsageError) -> Scanned {
        var result = Scanned()
        let args = Array(arguments)
        var i = 0
        var optionsEnded = false
        while i < args.count {
            let argument = args[i]
            if optionsEnded || !argument.hasPrefix("-") || argument == "-" {
                result.positionals.append(argument)
            } else if argument == "--" {
                optionsEnded = true
            } else {
                let (name, inline) = split(argument)
                if info.valued.contains(name) || globalValued.contains(name) {
                    result.values[name] = try takeValue(name, inline, args, &i, command: info.name)
                } else if info.flags.contains(name) || globalFlags.contains(name) {
                    if inline != nil { throw UsageError("option \(name) takes no value", command: info.name) }
                    result.flags.insert(name)
                } else {
                    let known = info.valued.union(info.flags).union(globalValued).union(globalFlags).sorted()
                    throw UsageError("unknown option \(name) for '\(info.name)'" + Nearest.suggestion(name, among: known),
                                     command: info.name)
                }
            }
            i += 1
        }
        return result
    }

    static func positionals(_ scanned: Scanned, _ names: [String], _ info: CommandDefinition) throws(UsageError) -> [String] {
        let p = scanned.positionals
        if p.count < names.count {
            throw UsageError("'\(info.name)' needs \(names[p.count])", command: info.name)
        }
        if p.count > names.count {
            throw UsageError("unexpected argument \"\(p[names.count])\" for '\(info.name)'", command: info.name)
        }
        for (value, name) in zip(p, names) where value.isEmpty {
            throw UsageError("\(name) must not be empty", command: info.name)
        }
        return p
    }

    static func choice<E: RawRepresentable & CaseIterable>(_ value: String, _ what: String, _: E.Type,
                                                                   _ info: CommandDefinition) throws(UsageError) -> E
        where E.RawValue == String
    {
        guard let e = E(rawValue: value) else {
            throw UsageError("\(what) must be one of \(E.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(value)\"",
                             command: info.name)
        }
        return e
    }

    /// A command without arguments.
    static func none(_ scanned: Scanned, _ info: CommandDefinition, _ call: CommandCall) throws(UsageError) -> ControlCommand {
        _ = try positionals(scanned, [], info)
        return info.command(call)
    }

    static func boolean(_ value: String, _ what: String, _ info: CommandDefinition) throws(UsageError) -> Bool {
        switch value.lowercased() {
        case "true", "yes", "1", "on": return true
        case "false", "no", "0", "off": return false
        default: throw UsageError("\(what) must be true or false, got \"\(value)\"", command: info.name)
        }
    }

    static func number(_ value: String, _ what: String, _ info: CommandDefinition) throws(UsageError) -> Double {
        guard let n = Double(value), n.isFinite else {
            throw UsageError("\(what) must be a number, got \"\(value)\"", command: info.name)
        }
        return n
    }
}
