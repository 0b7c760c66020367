import AgentCore
import AgentWire
import Foundation
import Testing
@testable import AgentControl

/// A command of agentctl is defined in one place: its entry in the command table. `--help`,
/// the parser, the nearest-name suggestions, the printer, `fleet --help` and fleet's parser
/// all read the table, so an entry needs no other edit to be all of these.
@Suite struct CommandTableTests {
    /// An entry only this test has: a command and its fleet form.
    static let probe = CommandDefinition(
        name: "probe-flag", aliases: ["probe"], synopsis: "probe-flag KEY", summary: "a command only the tests have",
        details: "Method: get.",
        build: { s, d throws(UsageError) in d.command(.typed(.get(key: try ControlArguments.positionals(s, ["KEY"], d)[0]))) },
        print: { c, r in
            guard case .typed(.get(let key)) = c.call else { CommandDefinition.mismatch(c) }
            return "probed \(key): \(JSONWriter.string(r))"
        },
        fleet: .each(.status, synopsis: "probe-flag", help: "asks every instance for\nits status, as a probe",
                     print: { answers, _, _ in "probed \(answers.count)" }))

    static let table = commandTable + [probe]

    func run(_ args: [String], _ table: [CommandDefinition] = table) throws(UsageError) -> ControlRequest {
        try ControlArguments.parse(args, environment: [:], table: table)
    }

    @Test func aNewEntryIsACommandWithItsHelpSuggestionsAndFleetForm() throws {
        // Without the entry there is no such command.
        #expect(throws: UsageError.self) { try run(["probe-flag", "k"], commandTable) }

        // The global help lists it and its alias; its own help is its definition's.
        guard case .help(let usage) = try run(["--help"]) else { Issue.record("no help"); return }
        #expect(usage.contains("  probe-flag") && usage.contains("a command only the tests have"))
        #expect(usage.contains("the same as probe-flag"))
        guard case .help(let help) = try run(["probe", "--help"]) else { Issue.record("no help"); return }
        #expect(help == Self.probe.help)

        // It parses, by name or alias, into the call it makes, and its answer prints its way.
        guard case .run(let invocation) = try run(["probe", "new_checkout", "--socket", "/tmp/p.sock"]) else { Issue.record("no run"); return }
        #expect(invocation.command.name == "probe-flag" && invocation.command.call == .typed(.get(key: "new_checkout")))
        #expect(OutputFormatter.format(invocation.command, result: ["x": 1], json: false).text == #"probed new_checkout: {"x":1}"#)
        #expect(throws: UsageError("'probe-flag' needs KEY", command: "probe-flag")) { try run(["probe-flag"]) }

        // A misspelling suggests it.
        #expect(throws: UsageError("unknown command 'probe-flga'; did you mean 'probe-flag'?")) { try run(["probe-flga"]) }

        // fleet: parsed, listed in `fleet --help` and suggested.
        guard case .fleet(let fleet) = try run(["fleet", "--socket-dir", "/tmp/x", "probe-flag"]) else { Issue.record("no fleet"); return }
        #expect(fleet.command.name == "probe-flag" && fleet.command.method == .status)
        guard case .help(let fleetHelp) = try run(["fleet", "--help"]) else { Issue.record("no fleet help"); return }
        #expect(fleetHelp.contains("  probe-flag\n            asks every instance for\n            its status, as a probe"))
        #expect(fleetHelp.contains("| probe-flag") || fleetHelp.contains(" | probe-flag"))
        #expect(throws: UsageError("unknown fleet command 'probe-flga'; did you mean 'probe-flag'? (status, metrics, call, advance-clock or probe-flag)",
                                   command: "fleet")) { try run(["fleet", "probe-flga"]) }
    }

    /// Every entry of the real table is in `--help`, answers a misspelling of its name, and
    /// (with a fleet form) is in `fleet --help` and fleet's parser.
    @Test func everyEntryIsInHelpSuggestionsAndFleet() throws {
        let usage = ControlArguments.usage
        for d in commandTable where d.isTopLevel {
            #expect(usage.contains("  \(d.name) ") && usage.contains(d.summary), "\(d.name)")
            for name in d.names {
                #expect(CommandDefinition.suggestions().contains(name), "\(name)")
                #expect(CommandDefinition.unknown(name + "z").message.hasSuffix("did you mean '\(name)'?"), "\(name)")
            }
        }
        let fleetUsage = FleetArguments.usage
        for d in commandTable {
            guard let form = d.fleet else { continue }
            #expect(fleetUsage.contains(form.helpBlock), "\(d.name)")
            #expect(FleetArguments.options().isSuperset(of: form.valued + form.flags) == true, "\(d.name)")
            #expect(throws: UsageError.self) { try ControlArguments.parse(["fleet", d.name + "z"], environment: [:]) }
            do {
                _ = try ControlArguments.parse(["fleet", d.name + "z"], environment: [:])
            } catch {
                #expect(error.message.contains("did you mean '\(d.name)'?"), "\(error.message)")
            }
        }
        #expect(commandTable.compactMap { $0.fleet == nil ? nil : $0.name } == ["status", "metrics", "call", "advance-clock"])
    }

    /// Outside the table's files no source of agentctl spells a command's name: the parser,
    /// the help, the printer and fleet read them from the table (fleet's parser names itself,
    /// `command: "fleet"`, to point its usage errors at 'fleet --help').
    @Test func noOtherSourceNamesACommand() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let dir = root.appendingPathComponent("Sources/AgentControl")
        let table = ["CommandDefinition", "FleetForm.swift", "FleetCommand+AdvanceClock.swift"]
        let names = commandTable.flatMap(\.names)
        var found: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: dir.path) where !table.contains(where: file.hasPrefix) {
            let text = try String(contentsOf: dir.appendingPathComponent(file), encoding: .utf8)
            for name in names where text.contains("\"\(name)\"") && !(file == "FleetCommand.swift" && name == "fleet") {
                found.append("\(file): \"\(name)\"")
            }
        }
        #expect(found.isEmpty, "\(found)")
    }
}

extension Array where Element == String {
    fileprivate func isSuperset(of other: [String]) -> Bool { Set(self).isSuperset(of: other) }
}
