import AgentCore
import AgentWire
import Foundation

// `pushwoosh-agentctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]`:
// one command per socket method (docs/socket-api.md B.1, B.2). Parsing is a pure function.

/// One command of the CLI.
public enum ControlCommand: Sendable, Equatable {
    case get(key: String)
    case isEnabled(key: String, default: Bool)
    case property(key: String, property: String, type: PropertyType, default: JSONValue?)
    case refresh
    case logImpression(key: String)
    case setUser(userId: String)
    case setAppState(AppState)
    case registerPush
    case unregisterPush
    case setAuthorization(NotificationAuthorization)
    /// `presentPushPrimer`'s params, already in the socket API's names.
    case primer([String: JSONValue])
    case status
    case metrics
    /// `subscribe` to `events`; `reconnect`: keep watching across restarts of the agent.
    case watch(events: [SubscriptionEvent], reconnect: Bool)
    /// docs/device-clock.md H.
    case clock
    /// `seconds` or an ISO 8601 time (`to`).
    case advanceClock(seconds: Double?, to: String?)
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
