import AgentCore
import AgentWire
import Foundation

// `pushwoosh-agentctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]`:
// one command per socket method (docs/socket-api.md B.1, B.2). Parsing is a pure function.

/// One parsed command of the CLI: the definition that built it and the call it makes.
public struct ControlCommand: Sendable, Equatable {
    let definition: CommandDefinition
    /// What it sends.
    public var call: CommandCall
    /// `watch`: what it streams.
    public var watch: WatchOptions?

    init(definition: CommandDefinition, call: CommandCall, watch: WatchOptions? = nil) {
        self.definition = definition
        self.call = call
        self.watch = watch
    }

    /// The command of the table named `name` making `call`.
    public init(_ name: String, _ call: CommandCall, watch: WatchOptions? = nil) {
        guard let definition = CommandDefinition.named(name) else { preconditionFailure("no command named '\(name)'") }
        self.init(definition: definition, call: call, watch: watch)
    }

    /// The definition's name.
    public var name: String { definition.name }

    /// The socket method and params this command sends.
    public var request: (method: SocketMethod, params: [String: JSONValue]) { call.request }

    public static func == (a: ControlCommand, b: ControlCommand) -> Bool {
        a.name == b.name && a.call == b.call && a.watch == b.watch
    }
}

/// `watch`: the events in the order given (the `subscribe` call holds them as a set) and
/// `--reconnect` (keep watching across restarts of the agent).
public struct WatchOptions: Sendable, Equatable {
    public var events: [SubscriptionEvent]
    public var reconnect: Bool
    public init(events: [SubscriptionEvent], reconnect: Bool) {
        self.events = events
        self.reconnect = reconnect
    }
}

/// A parsed command line.
public struct ControlInvocation: Sendable, Equatable {
    public var socketPath: String
    /// `--json`: print the raw result JSON.
    public var json: Bool
    /// `--timeout`: seconds to wait for an answer; nil waits as long as it takes.
    public var timeout: Double?
    public var command: ControlCommand
    /// `--strict` (reads and `refresh`): the caller's default, or a refresh not sent, exits 5.
    public var strict: Bool

    public init(socketPath: String, json: Bool = false, timeout: Double? = ControlArguments.defaultTimeout,
                command: ControlCommand, strict: Bool = false) {
        self.socketPath = socketPath
        self.json = json
        self.timeout = timeout
        self.command = command
        self.strict = strict
    }
}

/// What the arguments ask for.
public enum ControlRequest: Sendable, Equatable {
    case run(ControlInvocation)
    /// `fleet …`: every instance at once (FleetCommand.swift).
    case fleet(FleetInvocation)
    /// Print this help text and exit 0.
    case help(String)
}

/// A usage mistake: print it and exit 2.
public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    /// The command whose help to point at, if known.
    public var command: String?

    public init(_ message: String, command: String? = nil) {
        self.message = message
        self.command = command
    }

    public var description: String {
        let help = command.map { "pushwoosh-agentctl \($0) --help" } ?? "pushwoosh-agentctl --help"
        return "pushwoosh-agentctl: \(message)\nTry '\(help)'."
    }
}
