import AgentConfigFile
import AgentCore
import AgentFleet
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// `pushwoosh-agentctl fleet FORM …` (docs/fleet.md E.1): one socket method on every instance of
// the fleet at once (FleetCaller), answers collected and printed in the instances' order. The
// forms (status, metrics, call, advance-clock) are the fleet forms of the command table.

/// Where the instances are.
public enum FleetSource: Sendable, Equatable {
    /// The instances of a fleet.conf, each at its --instance socket path.
    case manifest(String)
    /// Every `NAME.sock` in a directory (tests, or a fleet outside systemd).
    case socketDirectory(String)
}

public struct FleetInvocation: Sendable, Equatable {
    public var command: FleetCommand
    public var source: FleetSource
    public var json = false
    /// Per instance.
    public var timeout: Double = FleetArguments.defaultTimeout
    /// `--expect NAME,…`: instances that must be there besides the source's; one without a
    /// socket is listed `missing` (exit 3).
    public var expected: [String] = []
    /// `call --strict`: an answer with the caller's default, or a refresh not sent, exits 5.
    public var strict = false
}

public enum FleetArguments {
    public static let defaultTimeout: Double = 10

    public static var usage: String { usage(commandTable) }

    /// `fleet --help`: fleet's options and the fleet forms of `table`, in its order.
    static func usage(_ table: [CommandDefinition]) -> String {
        let forms = table.compactMap(\.fleet)
        var synopses: [String] = []
        for synopsis in forms.map(\.synopsis) {
            if let last = synopses.last, last.count + 3 + synopsis.count <= 60 {
                synopses[synopses.count - 1] = last + " | " + synopsis
            } else {
                synopses.append(synopses.isEmpty ? synopsis : "| " + synopsis)
            }
        }
        return """
            Usage: pushwoosh-agentctl fleet [--manifest FILE | --socket-dir DIR] [--expect NAME[,NAME…]]
                                            [--json] [--timeout SECONDS]
            \(synopses.map { "                                " + $0 }.joined(separator: "\n"))

            Asks every instance of the fleet at once (one process, one poll loop), each with
            its own timeout, and prints the answers in the instances' order.

            \(forms.map(\.helpBlock).joined(separator: "\n"))

            Instances: those of --manifest FILE (default /etc/pushwoosh-agent/fleet.conf), at
            /run/pushwoosh-agent/NAME.sock; without that file, every NAME.sock in
            /run/pushwoosh-agent but agent.sock; with --socket-dir DIR, every NAME.sock in DIR.
            The manifest's instances are expected; --expect names more (with --socket-dir, the
            ones that must be in DIR): an expected instance without a socket, whatever the
            reason, is listed "missing".

            Options:
              --json              one JSON document: an array with each instance's answer
              --timeout SECONDS   per instance (default 10)

            Exit status: 0 every instance answered, 1 some answered with an error (or, for
            call refresh, its refresh failed), 2 usage error, 3 some instance is down or missing
            (advance-clock: some instance could not be moved), 5 with call --strict: some
            instance answered with the caller's default or did not send its refresh.
            """
    }

    /// fleet's own options.
    static let ownOptions = ["--expect", "--help", "--json", "--manifest", "--socket-dir", "--timeout"]

    /// The options `fleet` takes, its own and its forms' (for the nearest one to a misspelt option).
    static func options(_ table: [CommandDefinition] = commandTable) -> [String] {
        Array(Set(ownOptions + table.compactMap(\.fleet).flatMap { $0.valued + $0.flags })).sorted()
    }

    /// `arguments` after `fleet`; `json`/`timeout` given before `fleet` carry over.
    public static func parse(_ arguments: [String], json: Bool, timeout: Double?) throws(UsageError) -> FleetInvocation? {
        try parse(arguments, json: json, timeout: timeout, table: commandTable)
    }

    /// `arguments` after `fleet`, its commands the fleet forms of `table`.
    static func parse(_ arguments: [String], json: Bool, timeout: Double?, table: [CommandDefinition]) throws(UsageError) -> FleetInvocation? {
        let forms = table.filter { $0.fleet != nil }
        let formValued = forms.flatMap { $0.fleet!.valued }, formFlags = forms.flatMap { $0.fleet!.flags }
        var source: FleetSource?
        var json = json
        var timeout = timeout ?? defaultTimeout
        var positionals: [String] = []
        var expected: [String] = []
        var values: [String: String] = [:]
        var flags: Set<String> = []
        var i = 0
        func value(_ name: String) throws(UsageError) -> String {
            i += 1
            guard i < arguments.count, !arguments[i].isEmpty else { throw UsageError("option \(name) needs a value", command: "fleet") }
            return arguments[i]
        }
        while i < arguments.count {
            let argument = arguments[i]
            if argument.hasPrefix("--"), let eq = argument.firstIndex(of: "=") {
                let name = String(argument[..<eq])
                if ["--json", "--help"].contains(name) || formFlags.contains(name) {
                    throw UsageError("option \(name) takes no value", command: "fleet")
                }
                // --opt=value: handled as two arguments.
                var rest = arguments
                rest[i] = String(argument[..<eq])
                rest.insert(String(argument[argument.index(after: eq)...]), at: i + 1)
                return try parse(rest, json: json, timeout: timeout, table: table)
            }
            if formFlags.contains(argument) {  // after PARAMS-JSON too
                flags.insert(argument)
                i += 1
                continue
            }
            if let first = positionals.first, let after = forms.first(where: { $0.name == first })?.fleet?.verbatimAfter,
               positionals.count >= after {
                // PARAMS-JSON may start with anything; after METHOD only one more argument.
                positionals.append(argument)
                i += 1
                continue
            }
            switch argument {
            case "-h", "--help": return nil
            case "--json": json = true
            case "--manifest", "--socket-dir":
                let v = try value(argument)
                guard source == nil else { throw UsageError("--manifest and --socket-dir name the instances twice; give one", command: "fleet") }
                source = argument == "--manifest" ? .manifest(v) : .socketDirectory(v)
            case "--timeout":
                let v = try value(argument)
                guard let t = Double(v), t > 0, t.isFinite else {
                    throw UsageError("--timeout must be a number of seconds above 0, got \"\(v)\"", command: "fleet")
                }
                timeout = t
            case "--expect":
                for name in try value(argument).split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
                    guard InstanceName.isValid(name) else {
                        throw UsageError("--expect takes instance names separated by commas (letters, digits, '-', '_', '.'), got \"\(name)\"", command: "fleet")
                    }
                    if !expected.contains(name) { expected.append(name) }
                }
            case "--socket", "--instance":
                throw UsageError("\(argument) names one instance; fleet commands ask them all (--socket-dir DIR to choose where)", command: "fleet")
            case _ where formValued.contains(argument):
                values[argument] = try value(argument)
            default:
                if argument.hasPrefix("-") {
                    throw UsageError("unknown option \(argument) for 'fleet'" + Nearest.suggestion(argument, among: options(table)), command: "fleet")
                }
                positionals.append(argument)
            }
            i += 1
        }
        let command = try command(positionals, values: values, flags: flags, forms: forms)
        return FleetInvocation(command: command, source: source ?? .manifest(FleetManifest.defaultPath), json: json, timeout: timeout,
                               expected: expected, strict: flags.contains("--strict"))
    }

    /// The command the positionals name, built by its form; an option of another form is an error.
    static func command(_ positionals: [String], values: [String: String], flags: Set<String>,
                        forms: [CommandDefinition]) throws(UsageError) -> FleetCommand {
        let names = forms.map(\.name)
        let list = names.dropLast().joined(separator: ", ") + (names.count > 1 ? " or " : "") + (names.last ?? "")
        guard let name = positionals.first else { throw UsageError("'fleet' needs \(list)", command: "fleet") }
        guard let definition = forms.first(where: { $0.name == name }), let form = definition.fleet else {
            throw UsageError("unknown fleet command '\(name)'" + Nearest.suggestion(name, among: names) + " (\(list))", command: "fleet")
        }
        let command = try form.build(FleetParsed(definition: definition, positionals: Array(positionals.dropFirst()),
                                                 values: values, flags: flags))
        let given = forms.flatMap { $0.fleet!.valued }.filter { values[$0] != nil } + forms.flatMap { $0.fleet!.flags }.filter(flags.contains)
        for option in given where !form.valued.contains(option) && !form.flags.contains(option) {
            let owner = forms.first { $0.fleet!.valued.contains(option) || $0.fleet!.flags.contains(option) }!
            throw UsageError("\(option) is for 'fleet \(owner.name)'\(owner.fleet!.misplacedNote)", command: "fleet")
        }
        return command
    }
}

// MARK: - Running it

public enum FleetTool {
    public static func run(_ invocation: FleetInvocation, output: some ControlOutput, now: () -> Date) -> ExitCode {
        let targets: [FleetTarget]
        do {
            targets = try FleetTargets.resolve(invocation.source, expecting: invocation.expected)
        } catch {
            output.err("pushwoosh-agentctl: " + error.message)
            return error.exit
        }
        let command = invocation.command
        if let run = command.form.run { return run(command, targets, invocation, output) }
        let method = command.method
        let answers = FleetCaller.call(targets, method: method, params: command.params, timeout: invocation.timeout)
        output.out(invocation.json ? FleetOutput.json(answers) : command.form.print(answers, command, now()))
        if command.form.namesFallbacks, let warning = FleetOutput.notAsAskedWarning(answers, method: method) {
            output.err(warning)
        }
        return FleetOutput.exit(answers, method: method, strict: invocation.strict)
    }
}
