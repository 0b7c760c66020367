// PROTOCOL C: `pushwoosh-agentd [--config FILE] [--socket PATH] [--state-dir DIR]`.
// A pure function of the arguments; the caller prints and exits (2 on a usage error).

/// What the daemon's command line asks for.
public enum DaemonCommand: Sendable, Equatable {
    case run(DaemonOptions)
    case help
    case version
}

/// The daemon's options; those given override the configuration file.
public struct DaemonOptions: Sendable, Equatable {
    public var configFile: String = AgentConfiguration.defaultConfigFile
    public var socketPath: String?
    public var stateDirectory: String?

    public init(configFile: String = AgentConfiguration.defaultConfigFile,
                socketPath: String? = nil, stateDirectory: String? = nil) {
        self.configFile = configFile
        self.socketPath = socketPath
        self.stateDirectory = stateDirectory
    }

    /// Loads the configuration file and applies the command-line overrides.
    public func loadConfiguration(environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        var configuration = try AgentConfiguration.load(file: configFile, environment: environment)
        apply(to: &configuration)
        return configuration
    }

    /// Command-line options override the file (PROTOCOL C).
    public func apply(to configuration: inout AgentConfiguration) {
        if let socketPath { configuration.socket.path = socketPath }
        if let stateDirectory { configuration.stateDirectory = stateDirectory }
    }
}

/// A command-line mistake; the message is meant for standard error, then exit 2.
public struct CommandLineError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "\(message)\nTry 'pushwoosh-agentd --help'." }
}

public enum DaemonCommandLine {
    public static let usage = """
        Usage: pushwoosh-agentd [--config FILE] [--socket PATH] [--state-dir DIR]

        Runs the Pushwoosh agent in the foreground: the Pushwoosh SDK core, headless,
        serving feature flags as JSON-RPC 2.0 on a Unix socket. Logs go to standard error.

        Options:
          --config FILE     configuration file (default /etc/pushwoosh-agent/agent.conf)
          --socket PATH     socket to serve (overrides Socket=; default
                            $RUNTIME_DIRECTORY/agent.sock, else /run/pushwoosh-agent/agent.sock)
          --state-dir DIR   where flags and device state are kept (overrides StateDirectory=;
                            default $STATE_DIRECTORY, else /var/lib/pushwoosh-agent)
          -h, --help        show this help
          --version         show the version

        Signals: SIGHUP reloads the configuration, SIGTERM/SIGINT stop.
        """

    /// Parses `arguments` (without the program name). `--opt VALUE` and `--opt=VALUE` both work.
    public static func parse(_ arguments: [String]) throws(CommandLineError) -> DaemonCommand {
        var options = DaemonOptions()
        var i = 0
        func value(for option: String, inline: String?) throws(CommandLineError) -> String {
            if let inline {
                guard !inline.isEmpty else { throw CommandLineError("option \(option) needs a value") }
                return inline
            }
            i += 1
            guard i < arguments.count, !arguments[i].isEmpty else {
                throw CommandLineError("option \(option) needs a value")
            }
            return arguments[i]
        }
        while i < arguments.count {
            let argument = arguments[i]
            var name = argument
            var inline: String?
            if argument.hasPrefix("--"), let eq = argument.firstIndex(of: "=") {
                name = String(argument[..<eq])
                inline = String(argument[argument.index(after: eq)...])
            }
            switch name {
            case "-h", "--help":
                return .help
            case "--version":
                return .version
            case "--config":
                options.configFile = try value(for: name, inline: inline)
            case "--socket":
                let path = try value(for: name, inline: inline)
                do {
                    options.socketPath = try ConfigValue.socketPath(path)
                } catch {
                    throw CommandLineError("--socket: \(error.message)")
                }
            case "--state-dir":
                let dir = try value(for: name, inline: inline)
                do {
                    options.stateDirectory = try ConfigValue.absolutePath(dir)
                } catch {
                    throw CommandLineError("--state-dir: \(error.message)")
                }
            default:
                if argument.hasPrefix("-") {
                    throw CommandLineError("unknown option \(name)")
                }
                throw CommandLineError("unexpected argument \"\(argument)\"")
            }
            i += 1
        }
        return .run(options)
    }
}
