import AgentCore
import AgentWire

// The commands of pushwoosh-agentctl, one value each (CommandDefinition+*.swift): name, synopsis, help
// text, options, how the parsed command line becomes the command, the typed call it makes and
// how its answer prints. The table, `--help`, the parser and the printer read them.

/// agentctl's commands: one name per method, the one the Python client uses too (the socket
/// method spelled the CLI's way: `register-for-push` is `register_for_push()` and
/// `registerForPushNotifications`); a definition's `aliases` are its other spellings.
enum CommandName: String, CaseIterable, Sendable {
    case get, isEnabled = "is-enabled", property, refresh, logImpression = "log-impression", setUser = "set-user-id"
    case setAppState = "set-app-state", registerPush = "register-for-push", unregisterPush = "unregister-for-push"
    case setAuthorization = "set-notification-authorization", primer = "present-push-primer", status, metrics, clock
    case advanceClock = "advance-clock", fleet, watch
}

/// What a command sends: a typed call, encoded by AgentWire (`SocketCall.params`), or, where
/// the agent is the one to check a value (`primer`'s settings, an `advance-clock --to` that does
/// not read as a time), the params as given so its refusal is the agent's.
enum CommandCall: Sendable, Equatable {
    case typed(SocketCall)
    case unchecked(SocketMethod, [String: JSONValue])

    var request: (method: SocketMethod, params: [String: JSONValue]) {
        switch self {
        case .typed(let call): (call.method, call.params)
        case .unchecked(let method, let params): (method, params)
        }
    }
}

/// One command of the CLI, defined once.
struct CommandDefinition: Sendable {
    var name: CommandName
    /// Other names the command answers to (its names before the CLI and the Python client
    /// agreed on one), listed in `--help`.
    var aliases: [String] = []
    var synopsis: String
    var summary: String
    var details: String = ""
    /// Options that take a value.
    var valued: Set<String> = []
    /// Options without a value.
    var flags: Set<String> = []
    /// The parsed command line (its positionals and options) as the command.
    var build: @Sendable (ControlArguments.Scanned, CommandDefinition) throws(UsageError) -> ControlCommand
    /// The call the command makes.
    var call: @Sendable (ControlCommand) -> CommandCall
    /// The answer for people (`--json` prints it raw); an answer of another shape is an error.
    var print: @Sendable (ControlCommand, JSONValue) throws(AnswerError) -> String
    /// The standard-error line for an answer that is not what was asked for (a read answered
    /// with the caller's default, a refresh not sent); nil when it is.
    var warning: @Sendable (ControlCommand, JSONValue) -> String? = { _, _ in nil }

    /// `--help` for this command.
    var help: String {
        var text = "Usage: pushwoosh-agentctl [--socket PATH] [--json] \(synopsis)\n\n\(summary.prefix(1).uppercased() + summary.dropFirst())."
        if !details.isEmpty { text += "\n\n" + details }
        if !aliases.isEmpty { text += "\n\nAlso answers to: " + aliases.joined(separator: ", ") + "." }
        return text
    }

    /// Every name the command answers to: its name, then its aliases.
    var names: [String] { [name.rawValue] + aliases }

    /// A command the definition did not build reached it: a programming error.
    static func mismatch(_ command: ControlCommand, _ name: CommandName) -> Never {
        preconditionFailure("\(command) is not '\(name.rawValue)'")
    }
}

/// Every command, in the order `--help` lists them.
let commandTable: [CommandDefinition] = [
    .get, .isEnabled, .property, .refresh, .logImpression, .setUser, .setAppState, .registerPush, .unregisterPush,
    .setAuthorization, .primer, .status, .metrics, .clock, .advanceClock, .fleet, .watch,
]

extension CommandDefinition {
    /// The command `name` names (its name or an alias); nil when none does.
    static func named(_ name: String) -> CommandDefinition? {
        commandTable.first { $0.names.contains(name) }
    }

    /// "unknown command 'X'", with the nearest name when one is near.
    static func unknown(_ name: String) -> UsageError {
        UsageError("unknown command '\(name)'" + Nearest.suggestion(name, among: commandTable.flatMap(\.names)))
    }
}

extension ControlCommand {
    /// The definition that built this command.
    var definition: CommandDefinition {
        let name: CommandName = switch self {
        case .get: .get
        case .isEnabled: .isEnabled
        case .property: .property
        case .refresh: .refresh
        case .logImpression: .logImpression
        case .setUser: .setUser
        case .setAppState: .setAppState
        case .registerPush: .registerPush
        case .unregisterPush: .unregisterPush
        case .setAuthorization: .setAuthorization
        case .primer: .primer
        case .status: .status
        case .metrics: .metrics
        case .watch: .watch
        case .clock: .clock
        case .advanceClock: .advanceClock
        }
        return commandTable.first { $0.name == name }!
    }

    /// The socket method and params this command sends.
    public var request: (method: SocketMethod, params: [String: JSONValue]) { definition.call(self).request }
}

/// What the read commands say about a fallback.
let fallbackNote = """
    When the agent answers with the caller's default (FLAG_NOT_FOUND, TYPE_MISMATCH,
    PROVIDER_NOT_READY) the value is printed as usual and a warning naming the code goes to
    standard error; --strict then exits 5.
    """
