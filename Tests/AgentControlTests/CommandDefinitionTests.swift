import AgentCore
import AgentWire
import Foundation
import Testing
@testable import AgentControl

/// Each command is one `CommandDefinition`: the table, `--help`, the parser and the call it
/// makes all come from it, and what agentctl sends is what the agent decodes.
@Suite struct CommandDefinitionTests {
    func command(_ args: [String]) throws -> ControlCommand {
        guard case .run(let invocation) = try ControlArguments.parse(args, environment: [:]) else {
            throw UsageError("help instead of a command")
        }
        return invocation.command
    }

    static let fullPrimer = [
        "primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D", "--style", "sheet",
        "--position", "top", "--no-fallback-to-settings", "--min-interval", "60", "--answer", "accept",
        "--image", "bell", "--image-url", "https://example.com/i.png", "--background-color", "#112233",
        "--background-gradient", "systemBlue, #AABBCC", "--title-color", "label", "--message-color", "secondaryLabel",
        "--accept-button-color", "#000000", "--accept-button-text-color", "white", "--decline-button-color", "clear",
        "--decline-button-text-color", "systemBlue", "--corner-radius", "12", "--button-corner-radius", "4",
        "--button-border-color", "separator",
    ]

    static let lines: [[String]] = [
        ["get", "k"], ["is-enabled", "k", "--default", "yes"], ["property", "k", "p", "--type", "number", "--default", "2"],
        ["property", "k", "p", "--type", "json-array"], ["refresh"], ["log-impression", "k"], ["set-user", "u"],
        ["set-app-state", "background"], ["register-push"], ["unregister-push"], ["set-authorization", "ephemeral"],
        ["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D"], fullPrimer, ["status"], ["metrics"],
        ["clock"], ["advance-clock", "90min"], ["advance-clock", "--to", "2026-12-24T00:00:00+02:00"],
        ["watch"], ["watch", "--events", "state,flags"],
    ]

    /// The agent's own decoder reads every request agentctl makes.
    @Test(arguments: lines) func theAgentReadsWhatAgentctlSends(_ line: [String]) throws {
        let (method, params) = try command(line).request
        let call = try SocketCall.decode(method, RPCParams(params))
        if case .typed(let typed) = try command(line).call { #expect(call == typed) }
    }

    @Test func primerOptionsSetEveryParameterOfTheMethodWithTheAgentsNames() throws {
        let (method, params) = try command(Self.fullPrimer).request
        #expect(method == .presentPushPrimer)
        #expect(Set(params.keys) == PrimerConfiguration.parameterNames)
    }

    /// A value the agent checks goes as given, so the refusal is the agent's (as before the
    /// definitions): an unparsable `--to`, an unknown colour.
    @Test func whatTheAgentChecksGoesAsGiven() throws {
        #expect(try command(["advance-clock", "--to", "tomorrow"]).request.params == ["to": "tomorrow"])
        let primer = try command(["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D", "--title-color", "pink"])
        #expect(primer.request.params["titleColor"] == "pink")
        #expect(throws: RPCError.self) { try SocketCall.decode(.presentPushPrimer, RPCParams(primer.request.params)) }
    }

    /// One name per method across agentctl and the Python client: each command is the Python
    /// method's name with `-` for `_` (`register-for-push`, `register_for_push()`). `fleet` is
    /// agentctl's own; `watch` is the client's `events()` and `subscribe()`.
    @Test func eachCommandIsNamedAsThePythonClientsMethod() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let client = try String(contentsOf: root.appendingPathComponent("clients/python/src/pushwoosh_agent/client.py"), encoding: .utf8)
        for name in commandTable.filter(\.isTopLevel).map(\.name) where name != "fleet" && name != "watch" {
            let method = name.replacingOccurrences(of: "-", with: "_")
            #expect(client.contains("    def \(method)("), "agentctl \(name) has no AgentClient.\(method)()")
        }
    }

    @Test func helpAndTableComeFromTheDefinitions() throws {
        for definition in commandTable where definition.build != nil {
            guard case .help(let text) = try ControlArguments.parse([definition.name, "--help"], environment: [:]) else {
                Issue.record("no help for \(definition.name)"); continue
            }
            #expect(text == definition.help)
            #expect(ControlArguments.usage.contains("  \(definition.name) ") && ControlArguments.usage.contains(definition.summary))
        }
    }
}

/// `watch --reconnect`: the waits before each attempt double from 100 ms to 2 s and start
/// again after a connection that held.
@Suite struct ReconnectBackoffTests {
    @Test func waitsDoubleToTwoSecondsAndStartAgain() {
        var backoff = ReconnectBackoff()
        #expect((0..<7).map { _ in backoff.next() } == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
        backoff.reset()
        #expect(backoff.next() == 0.1)
        // At most a few attempts a second: the first two seconds of a socket that closes at once.
        var b = ReconnectBackoff(), spent = 0.0, attempts = 1
        while true {
            spent += b.next()
            if spent > 2 { break }
            attempts += 1
        }
        #expect(attempts <= 5)
    }
}
