import AgentCore
import AgentWire
import Foundation

// The device clock's commands (docs/device-clock.md H), fleet (its forms are the table's
// `fleet:` entries) and watch (subscribe).

extension CommandDefinition {
    static let clockCommands: [CommandDefinition] = [
        CommandDefinition(
            name: "clock", synopsis: "clock", summary: "show the device's time and how far its controlled clock is ahead",
            details: "Needs [Device] Clock=controlled. Method: clock.",
            build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .typed(.clock)) },
            print: { _, r throws(AnswerError) in
                let c = try ClockAnswer(json: r)
                return OutputFormatter.aligned([
                    ("now", SocketTime.string(c.now)), ("ahead of the host", OutputFormatter.number(c.offsetSeconds) + " s"),
                    ("controlled", c.controlled ? "true" : "false"),
                ])
            }),

        CommandDefinition(
            name: "advance-clock", synopsis: "advance-clock SPAN | advance-clock --to TIME",
            summary: "move the device's clock forward; every timer due meanwhile runs at its own time",
            details: """
                SPAN is a systemd time span (23h59min, 30min, 7d); TIME is ISO 8601 UTC
                (2026-12-03T10:00:00Z). Answers once the device is quiet again and lists
                the timers that fired. Needs [Device] Clock=controlled. Method: advanceClock.
                """,
            valued: ["--to"],
            build: { s, d throws(UsageError) in
                if let to = s.values["--to"] {
                    _ = try ControlArguments.positionals(s, [], d)
                    // A time the agent would refuse goes as given: the refusal (-32602 naming 'to') is its.
                    return d.command(SocketCall.advanceClock(to: to).map(CommandCall.typed)
                        ?? .unchecked(.advanceClock, SocketCall.advanceClockParams(to: to)))
                }
                let span = try ControlArguments.positionals(s, ["SPAN"], d)[0]
                guard let seconds = TimeSpan.parse(span), seconds > 0 else {
                    throw UsageError("advance-clock: \"\(span)\" is not a positive time span (e.g. 23h59min, 30min, 7d)", command: d.name)
                }
                return d.command(.typed(.advanceClock(.seconds(seconds))))
            },
            print: { _, r throws(AnswerError) in
                let a = try AdvanceClockAnswer(json: r)
                var lines = [("now", SocketTime.string(a.now)), ("requests", String(a.requests)), ("fired", "\(a.fired.count) timer(s)")]
                for f in a.fired {
                    lines.append(("  " + SocketTime.string(f.at), f.event + (f.trigger.map { " (\($0.rawValue))" } ?? "")))
                }
                return OutputFormatter.aligned(lines)
            },
            fleet: FleetAdvanceClock.form),
    ]

    /// fleet (FleetArguments parses the rest of its line against the fleet forms of this table;
    /// `fleet --help` is its help) and watch (subscribe: a connection that stays).
    static let streamCommands: [CommandDefinition] = [
        CommandDefinition(
            name: "fleet", synopsis: "fleet FORM [ARGS] (the forms: 'fleet --help')",
            summary: "ask every instance of the fleet at once ('fleet --help')",
            parseRest: { arguments, json, timeout, table throws(UsageError) in
                try FleetArguments.parse(arguments, json: json, timeout: timeout, table: table).map(ControlRequest.fleet)
                    ?? .help(FleetArguments.usage(table))
            }),

        CommandDefinition(
            name: "watch", synopsis: "watch [--events flags,refresh,state] [--reconnect]",
            summary: "print flag updates (and refreshes, state changes) as they happen, until interrupted",
            details: """
                Subscribes and prints one line per notification, each stamped with the device
                time of the event: flags (featureFlagsDidUpdate, the default), refresh
                (refreshCompleted: every refresh, sent or not) and state (stateChanged).
                --reconnect keeps watching when the agent restarts, saying so on standard
                error. With --json, one JSON object per line. Method: subscribe.
                """,
            valued: ["--events"], flags: ["--reconnect"],
            build: { s, d throws(UsageError) in
                _ = try ControlArguments.positionals(s, [], d)
                var events: [SubscriptionEvent] = [.flags]
                if let list = s.values["--events"] {
                    events = []
                    for name in list.split(separator: ",", omittingEmptySubsequences: false).map({ $0.trimmingCharacters(in: .whitespaces) }) {
                        guard let event = SubscriptionEvent(rawValue: name) else {
                            throw UsageError("--events takes a comma-separated list of \(SubscriptionEvent.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(list)\"",
                                             command: d.name)
                        }
                        if !events.contains(event) { events.append(event) }
                    }
                }
                // Answers `subscribe` with `{"subscribed": true}` (printed as JSON); the notifications print line by line.
                return d.command(.typed(.subscribe(events: Set(events))), watch: WatchOptions(events: events, reconnect: s.flags.contains("--reconnect")))
            }),
    ]
}
