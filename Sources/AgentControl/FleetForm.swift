import AgentCore
import AgentWire
import Foundation

// A command over every instance of a fleet (`pushwoosh-agentctl fleet NAME …`, docs/fleet.md
// E.1): the `fleet:` of its entry in the command table. `fleet --help`, fleet's parser and its
// nearest-name suggestions read the forms from the table.

/// What `fleet NAME` takes and does.
struct FleetForm: Sendable {
    /// `NAME ARGS` as `fleet --help` shows it.
    var synopsis: String
    /// Its text in `fleet --help` (without the indentation).
    var help: String
    /// Options of its own that take a value, and without one, besides fleet's.
    var valued: [String] = []
    var flags: [String] = []
    /// Said after "OPTION is for 'fleet NAME'" when one of its options is given to another form.
    var misplacedNote = ""
    /// From this many positionals (its name included) on, an argument is taken as given even
    /// when it starts with `-` (`call METHOD PARAMS-JSON`).
    var verbatimAfter: Int?
    /// The arguments after its name as the command.
    var build: @Sendable (FleetParsed) throws(UsageError) -> FleetCommand
    /// The answers for people (`--json` prints them as an array).
    var print: @Sendable ([FleetAnswer], FleetCommand, Date) -> String = { answers, command, _ in
        FleetOutput.call(answers, method: command.method)
    }
    /// Whether an answer with the caller's default (or a refresh not sent) is named on standard
    /// error, and `--strict` makes it exit 5.
    var namesFallbacks = false
    /// A form that is not one call on every instance (advance-clock) runs itself.
    var run: (@Sendable (FleetCommand, [FleetTarget], FleetInvocation, any ControlOutput) -> ExitCode)?

    /// A form without arguments: `call` on every instance, its answers printed by `print`.
    static func each(_ call: SocketCall, synopsis: String, help: String,
                     print: @escaping @Sendable ([FleetAnswer], FleetCommand, Date) -> String) -> FleetForm {
        FleetForm(synopsis: synopsis, help: help, build: { p throws(UsageError) in
            guard p.positionals.isEmpty else {
                throw UsageError("unexpected argument \"\(p.positionals[0])\" for 'fleet \(p.definition.name)'", command: "fleet")
            }
            return FleetCommand(p.definition, call.method, call.params)
        }, print: print)
    }

    /// The help block: `  NAME      text` (a long synopsis on a line of its own).
    var helpBlock: String {
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false).map { "            " + $0 }
        guard synopsis.count <= 8 else { return (["  " + synopsis] + lines).joined(separator: "\n") }
        return (["  " + synopsis.padding(toLength: 10, withPad: " ", startingAt: 0) + lines[0].dropFirst(12)]
                + lines.dropFirst()).joined(separator: "\n")
    }
}

/// `fleet NAME`'s arguments after its name.
struct FleetParsed {
    var definition: CommandDefinition
    var positionals: [String]
    var values: [String: String]
    var flags: Set<String>
}

/// One command over every instance: the socket call each gets (or, for a form that runs itself,
/// what it needs).
public struct FleetCommand: Sendable, Equatable {
    let form: FleetForm
    /// The table entry's name (`status`, `call`, `advance-clock`).
    public var name: String
    public var method: SocketMethod
    public var params: [String: JSONValue]
    /// `advance-clock`'s.
    public var advance: FleetAdvance?

    init(_ definition: CommandDefinition, _ method: SocketMethod, _ params: [String: JSONValue] = [:], advance: FleetAdvance? = nil) {
        guard let form = definition.fleet else { preconditionFailure("'\(definition.name)' has no fleet form") }
        self.form = form
        name = definition.name
        self.method = method
        self.params = params
        self.advance = advance
    }

    /// The fleet form of the table's command `name`.
    public init(_ name: String, _ method: SocketMethod, _ params: [String: JSONValue] = [:], advance: FleetAdvance? = nil) {
        guard let definition = commandTable.first(where: { $0.name == name }) else { preconditionFailure("no command '\(name)'") }
        self.init(definition, method, params, advance: advance)
    }

    public static func == (a: FleetCommand, b: FleetCommand) -> Bool {
        a.name == b.name && a.method == b.method && a.params == b.params && a.advance == b.advance
    }
}

/// `fleet call METHOD [PARAMS-JSON] [--strict]`: any socket method (but a subscription) on
/// every instance.
enum FleetCall {
    static let form = FleetForm(
        synopsis: "call METHOD [PARAMS-JSON] [--strict]",
        help: """
            one socket method (e.g. refresh, setAppState '{"state":"background"}')
            on every instance, each answer on its line; a read answered with the
            caller's default (FLAG_NOT_FOUND, TYPE_MISMATCH, PROVIDER_NOT_READY)
            or a refresh not sent is named on standard error, and with --strict
            exits 5
            """,
        flags: ["--strict"], misplacedNote: " (the answers of reads and refresh)", verbatimAfter: 2,
        build: { p throws(UsageError) in try build(p) }, namesFallbacks: true)

    static func build(_ p: FleetParsed) throws(UsageError) -> FleetCommand {
        let positionals = p.positionals
        guard let name = positionals.first else { throw UsageError("'fleet call' needs METHOD", command: "fleet") }
        guard let method = SocketMethod(rawValue: name) else {
            let methods = SocketMethod.allCases.map(\.rawValue)
            throw UsageError("unknown method '\(name)'" + Nearest.suggestion(name, among: methods)
                             + " (one of \(methods.joined(separator: ", ")))", command: "fleet")
        }
        guard method != .subscribe, method != .unsubscribe else {
            throw UsageError("'fleet call' answers once per instance; \(method.rawValue) needs a connection that stays (use watch)", command: "fleet")
        }
        guard positionals.count <= 2 else { throw UsageError("unexpected argument \"\(positionals[2])\" for 'fleet call'", command: "fleet") }
        var params: [String: JSONValue] = [:]
        if positionals.count == 2 {
            guard let parsed = try? JSONReader.parse(Array(positionals[1].utf8)), let object = parsed.objectValue else {
                throw UsageError("PARAMS-JSON must be a JSON object, got \(positionals[1])", command: "fleet")
            }
            params = object
        }
        return FleetCommand(p.definition, method, params)
    }
}
