import AgentCore
import AgentWire

// The headless device's commands (docs/socket-api.md B.2): set-user-id, set-app-state,
// register-for-push, unregister-for-push, set-notification-authorization, status, metrics
// (each under the Python client's name, its older CLI name kept as an alias), and fleet's
// `call` (over every instance only).

extension CommandDefinition {
    static let deviceCommands: [CommandDefinition] = [
        CommandDefinition(
            name: "set-user-id", aliases: ["set-user"], synopsis: "set-user-id USERID", summary: "set the User ID (then the flags are refreshed)",
            details: "Method: setUserId.",
            build: { s, d throws(UsageError) in d.command(.typed(.setUserId(try ControlArguments.positionals(s, ["USERID"], d)[0]))) },
            print: { c, _ in
                guard case .typed(.setUserId(let userId)) = c.call else { mismatch(c) }
                return "User ID set to \(Visible.escape(userId))"
            }),

        CommandDefinition(
            name: "set-app-state", synopsis: "set-app-state active|background", summary: "move the simulated app to the foreground or background",
            details: "Method: setAppState.",
            build: { s, d throws(UsageError) in
                let v = try ControlArguments.positionals(s, ["STATE (active or background)"], d)[0]
                return d.command(.typed(.setAppState(try ControlArguments.choice(v, "the state", AppState.self, d))))
            },
            print: { c, r in
                guard case .typed(.setAppState(let state)) = c.call else { mismatch(c) }
                return "app state: \(state.rawValue)" + (r["sessionStarted"]?.boolValue == true ? " (a new session started)" : "")
            }),

        CommandDefinition(
            name: "register-for-push", aliases: ["register-push"], synopsis: "register-for-push", summary: "register for push notifications",
            details: "Method: registerForPushNotifications.",
            build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .typed(.registerForPushNotifications)) },
            print: { _, r throws(AnswerError) in
                let registration = try RegistrationAnswer(json: r)
                guard registration.granted else { return "push registration: not granted" }
                return "push registration: granted, token " + Visible.escape(registration.pushToken ?? "-")
            }),

        CommandDefinition(
            name: "unregister-for-push", aliases: ["unregister-push"], synopsis: "unregister-for-push", summary: "unregister from push notifications",
            details: "Method: unregisterForPushNotifications.",
            build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .typed(.unregisterForPushNotifications)) },
            print: { _, _ in "unregistered from push notifications" }),

        CommandDefinition(
            name: "set-notification-authorization", aliases: ["set-authorization"],
            synopsis: "set-notification-authorization notDetermined|denied|authorized|provisional|ephemeral",
            summary: "set the simulated notification authorization",
            details: "Method: setNotificationAuthorization.",
            build: { s, d throws(UsageError) in
                let v = try ControlArguments.positionals(s, ["STATUS"], d)[0]
                return d.command(.typed(.setNotificationAuthorization(try ControlArguments.choice(v, "the status", NotificationAuthorization.self, d))))
            },
            print: { c, _ in
                guard case .typed(.setNotificationAuthorization(let status)) = c.call else { mismatch(c) }
                return "notification authorization: \(status.rawValue)"
            }),
    ]

    /// The agent's own state: status and metrics (each also over a fleet).
    static let stateCommands: [CommandDefinition] = [
        CommandDefinition(
            name: "status", synopsis: "status", summary: "show the agent's state, device and flags freshness",
            details: "Method: status.",
            build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .typed(.status)) },
            print: { _, r throws(AnswerError) in OutputFormatter.formatStatus(r, try StatusAnswer(json: r)) },
            fleet: .each(.status, synopsis: "status", help: """
                one line per instance: name, state, User ID, flags age, last refresh,
                failures, the ages in the device's own time (its controlled clock
                may be ahead of the host's); an instance that does not answer is
                "down" with the reason, an expected one without a socket "missing"
                """, print: { answers, _, now in FleetOutput.status(answers, now: now) })),

        CommandDefinition(
            name: "metrics", synopsis: "metrics", summary: "print the Prometheus metrics (the text of the HTTP interface's /metrics)",
            details: "Method: metrics.",
            build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .typed(.metrics)) },
            print: { _, r in
                guard var text = r["text"]?.stringValue else { return JSONWriter.string(r) }
                if text.hasSuffix("\n") { text.removeLast() }
                return text
            },
            fleet: .each(.metrics, synopsis: "metrics", help: """
                one Prometheus text for all instances: each series gains an instance
                label, HELP and TYPE once per family; pushwoosh_agent_fleet_up says
                which instances answered
                """, print: { answers, _, _ in FleetOutput.metrics(answers) })),

        CommandDefinition(
            name: "call", synopsis: "fleet call METHOD [PARAMS-JSON] [--strict]", summary: "one socket method on every instance",
            fleet: FleetCall.form),
    ]
}
