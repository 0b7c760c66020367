// docs/configuration.md C: `pushwoosh-agentd [--config FILE] [--instance NAME] [--socket PATH] [--state-dir DIR]`
// (--instance: docs/fleet.md E, one device of several on a host).
// A pure function of the arguments; the caller prints and exits (2 on a usage error).

import AgentConfigFile

/// What the daemon's command line asks for.
public enum DaemonCommand: Sendable, Equatable {
    case run(DaemonOptions)
    case help
    case version
    /// `--list-keys`: the configuration keys, one per line (section, key, when a change
    /// applies, the fleet's environment variable).
    case listKeys
    /// `--doctor [--json]`: one exchange with the configured server, checked, nothing written.
    case doctor(DaemonOptions, json: Bool)
    /// `--check-config [--json]`: the configuration read as a start reads it, nothing started.
    case checkConfig(DaemonOptions, json: Bool)
}

/// The daemon's options; those given override the configuration file.
public struct DaemonOptions: Sendable, Equatable {
    public var configFile: String = AgentConfiguration.defaultConfigFile
    public var socketPath: String?
    public var stateDirectory: String?
    /// `--instance NAME` (docs/fleet.md E): `NAME.conf` beside the configuration file
    /// overrides its keys, and the default socket and state directory are the instance's.
    public var instance: String?

    public init(configFile: String = AgentConfiguration.defaultConfigFile,
                socketPath: String? = nil, stateDirectory: String? = nil, instance: String? = nil) {
        self.configFile = configFile
        self.socketPath = socketPath
        self.stateDirectory = stateDirectory
        self.instance = instance
    }

    /// `NAME.conf` in the configuration file's directory, for `--instance NAME`.
    public var overrideFile: String? {
        guard let instance else { return nil }
        let directory = configFile.split(separator: "/", omittingEmptySubsequences: false).dropLast()
            .joined(separator: "/")
        return (configFile.contains("/") ? directory : ".") + "/" + instance + ".conf"
    }

    /// Loads the configuration file (and the instance's override file, if it exists)
    /// and applies the command-line overrides.
    public func loadConfiguration(environment: [String: String]) throws(ConfigurationError) -> AgentConfiguration {
        var configuration = try AgentConfiguration.load(file: configFile, overrides: overrideFile.map { [$0] } ?? [],
                                                        environment: environment)
        apply(to: &configuration, environment: environment)
        return configuration
    }

    /// Command-line options override the file (docs/configuration.md C). Outside systemd (no
    /// RUNTIME_DIRECTORY / STATE_DIRECTORY) an instance's defaults are
    /// /run/pushwoosh-agent/NAME.sock and /var/lib/pushwoosh-agent@NAME.
    public func apply(to configuration: inout AgentConfiguration, environment: [String: String] = [:]) {
        if let instance {
            if environment["RUNTIME_DIRECTORY"] == nil, configuration.socket.path == AgentConfiguration.defaultSocketPath {
                configuration.socket.path = AgentPaths.instanceSocket(instance)
            }
            if environment["STATE_DIRECTORY"] == nil, configuration.stateDirectory == AgentConfiguration.defaultStateDirectory {
                configuration.stateDirectory = AgentPaths.instanceStateDirectory(instance)
            }
        }
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
        Usage: pushwoosh-agentd [--config FILE] [--instance NAME] [--socket PATH] [--state-dir DIR]

        Runs the Pushwoosh agent in the foreground: the Pushwoosh SDK core, headless,
        serving feature flags as JSON-RPC 2.0 on a Unix socket. Logs go to standard error.

        Options:
          --config FILE     configuration file (default /etc/pushwoosh-agent/agent.conf)
          --instance NAME   run device NAME of several (pushwoosh-agent@NAME.service):
                            NAME.conf beside the configuration file, if it exists,
                            overrides its keys; default socket /run/pushwoosh-agent/NAME.sock,
                            state /var/lib/pushwoosh-agent@NAME (outside systemd)
          --socket PATH     socket to serve (overrides Socket=; default
                            $RUNTIME_DIRECTORY/agent.sock, else /run/pushwoosh-agent/agent.sock)
          --state-dir DIR   where flags and device state are kept (overrides StateDirectory=;
                            default $STATE_DIRECTORY, else /var/lib/pushwoosh-agent)
          -h, --help        show this help
          --list-keys       list the configuration file's keys: section, key, when a change
                            applies (reload, restart, first-start), fleet variable
          --version         show the version
          --doctor          check the configured server once, as the device would at start
                            (applicationOpen, getFeatureFlags), writing nothing: each step,
                            the answer against the contract, the flags; exit 0 usable, 1 not
          --check-config    read the configuration as a start would (the file, NAME.conf,
                            the options), start nothing: exit 0 and "ok", or exit 1 and
                            the first problem (file, line, key, reason)
          --json            with --doctor or --check-config: the report as JSON

        Signals: SIGHUP reloads the configuration, SIGTERM/SIGINT stop.
        """


    /// Parses `arguments` (without the program name). `--opt VALUE` and `--opt=VALUE` both work.
    public static func parse(_ arguments: [String]) throws(CommandLineError) -> DaemonCommand {
        var options = DaemonOptions()
        var doctor = false, check = false, json = false
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
        /// The option's value read by the configuration key's own parser; its error names the option.
        func value(for option: String, inline: String?, _ parse: (String) throws(ValueError) -> String) throws(CommandLineError) -> String {
            let raw = try value(for: option, inline: inline)
            do {
                return try parse(raw)
            } catch {
                throw CommandLineError("\(option): \(error.message)")
            }
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
            case "--list-keys":
                return .listKeys
            case "--doctor":
                doctor = true
            case "--check-config":
                check = true
            case "--json":
                json = true
            case "--config":
                options.configFile = try value(for: name, inline: inline)
            case "--instance":
                let name = try value(for: name, inline: inline)
                guard InstanceName.isValid(name) else {
                    throw CommandLineError("--instance: invalid name \"\(name)\" (letters, digits, '-', '_', '.'; not starting with '.')")
                }
                options.instance = name
            case "--socket":
                options.socketPath = try value(for: name, inline: inline, ConfigValue.socketPath)
            case "--state-dir":
                options.stateDirectory = try value(for: name, inline: inline, ConfigValue.absolutePath)
            default:
                if argument.hasPrefix("-") {
                    throw CommandLineError("unknown option \(name)")
                }
                throw CommandLineError("unexpected argument \"\(argument)\"")
            }
            i += 1
        }
        if json && !doctor && !check { throw CommandLineError("--json goes with --doctor or --check-config") }
        if doctor && check { throw CommandLineError("--doctor and --check-config exclude each other") }
        if check { return .checkConfig(options, json: json) }
        return doctor ? .doctor(options, json: json) : .run(options)
    }
}
