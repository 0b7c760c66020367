import AgentCore
import AgentWire

// The commands of pushwoosh-agentctl, one value each, in one table: name, aliases, synopsis,
// help text, options, how the parsed command line becomes the call it makes, how its answer
// prints, and (`fleet`) its form over every instance. `--help`, the parser, the nearest-name
// suggestions, the printer and `fleet`'s parser all read the table; nothing else lists commands.
// A command is added by appending one `CommandDefinition` to one of the lists below.

/// What a command sends: a typed call, encoded by AgentWire (`SocketCall.params`), or, where
/// the agent is the one to check a value (`primer`'s settings, an `advance-clock --to` that does
/// not read as a time), the params as given so its refusal is the agent's.
public enum CommandCall: Sendable, Equatable {
    case typed(SocketCall)
    case unchecked(SocketMethod, [String: JSONValue])

    public var request: (method: SocketMethod, params: [String: JSONValue]) {
        switch self {
        case .typed(let call): (call.method, call.params)
        case .unchecked(let method, let params): (method, params)
        }
    }
}

/// One command of the CLI, defined once.
struct CommandDefinition: Sendable {
    /// The command's name: the Python client's method name spelled the CLI's way
    /// (`register-for-push` is `register_for_push()` and `registerForPushNotifications`).
    var name: String
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
    /// The parsed command line (its positionals and options) as the command; nil for a command
    /// that is not one call to one agent (`fleet`, parsed by `parseRest`; `call`, fleet's only).
    var build: (@Sendable (ControlArguments.Scanned, CommandDefinition) throws(UsageError) -> ControlCommand)?
    /// The answer for people (`--json` prints it raw); an answer of another shape is an error.
    var print: @Sendable (ControlCommand, JSONValue) throws(AnswerError) -> String = { _, r in JSONWriter.string(r) }
    /// The standard-error line for an answer that is not what was asked for (a read answered
    /// with the caller's default, a refresh not sent); nil when it is.
    var warning: @Sendable (ControlCommand, JSONValue) -> String? = { _, _ in nil }
    /// A command that parses the rest of the line itself (`fleet`): the arguments after its
    /// name, `--json` and `--timeout` given before it, and the table.
    var parseRest: (@Sendable ([String], Bool, Double?, [CommandDefinition]) throws(UsageError) -> ControlRequest)?
    /// The command over every instance of a fleet (`fleet NAME`); nil: not a fleet command.
    var fleet: FleetForm?

    /// `--help` for this command.
    var help: String {
        var text = "Usage: pushwoosh-agentctl [--socket PATH] [--json] \(synopsis)\n\n\(summary.prefix(1).uppercased() + summary.dropFirst())."
        if !details.isEmpty { text += "\n\n" + details }
        if !aliases.isEmpty { text += "\n\nAlso answers to: " + aliases.joined(separator: ", ") + "." }
        return text
    }

    /// Every name the command answers to: its name, then its aliases.
    var names: [String] { [name] + aliases }

    /// Whether `pushwoosh-agentctl NAME` runs it (and `--help` lists it).
    var isTopLevel: Bool { build != nil || parseRest != nil }

    /// The command this definition builds, making `call`.
    func command(_ call: CommandCall, watch: WatchOptions? = nil) -> ControlCommand {
        ControlCommand(definition: self, call: call, watch: watch)
    }

    /// A command the definition did not build reached it: a programming error.
    static func mismatch(_ command: ControlCommand) -> Never {
        preconditionFailure("\(command.call) is not what '\(command.name)' builds")
    }
}

/// Every command, in the order `--help` lists them (`fleet --help` lists the fleet forms in
/// the same order).
let commandTable: [CommandDefinition] = CommandDefinition.flagCommands + CommandDefinition.deviceCommands
    + CommandDefinition.primerCommands + CommandDefinition.stateCommands + CommandDefinition.clockCommands + CommandDefinition.streamCommands

extension CommandDefinition {
    /// The command `name` names in `table` (its name or an alias); nil when none does.
    static func named(_ name: String, in table: [CommandDefinition] = commandTable) -> CommandDefinition? {
        table.first { $0.isTopLevel && $0.names.contains(name) }
    }

    /// "unknown command 'X'", with the nearest name of `table` when one is near.
    static func unknown(_ name: String, in table: [CommandDefinition] = commandTable) -> UsageError {
        UsageError("unknown command '\(name)'" + Nearest.suggestion(name, among: suggestions(table)))
    }

    /// The names a misspelt command is compared with, in the table's order.
    static func suggestions(_ table: [CommandDefinition] = commandTable) -> [String] {
        table.filter(\.isTopLevel).flatMap(\.names)
    }
}

/// What the read commands say about a fallback.
let fallbackNote = """
    When the agent answers with the caller's default (FLAG_NOT_FOUND, TYPE_MISMATCH,
    PROVIDER_NOT_READY) the value is printed as usual and a warning naming the code goes to
    standard error; --strict then exits 5.
    """
