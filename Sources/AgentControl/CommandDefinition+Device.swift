import AgentCore
import AgentWire

// The headless device's commands (docs/socket-api.md B.2): set-user-id, set-app-state,
// register-for-push, unregister-for-push, set-notification-authorization, status, metrics
// (each under the Python client's name, its older CLI name kept as an alias).

extension CommandDefinition {
    static let setUser = CommandDefinition(
        name: .setUser, aliases: ["set-user"], synopsis: "set-user-id USERID", summary: "set the User ID (then the flags are refreshed)",
        details: "Method: setUserId.",
        build: { s, d throws(UsageError) in .setUser(userId: try ControlArguments.positionals(s, ["USERID"], d)[0]) },
        call: { c in guard case .setUser(let userId) = c else { mismatch(c, .setUser) }; return .typed(.setUserId(userId)) },
        print: { c, _ in
            guard case .setUser(let userId) = c else { mismatch(c, .setUser) }
            return "User ID set to \(Visible.escape(userId))"
        })

    static let setAppState = CommandDefinition(
        name: .setAppState, synopsis: "set-app-state active|background", summary: "move the simulated app to the foreground or background",
        details: "Method: setAppState.",
        build: { s, d throws(UsageError) in
            let v = try ControlArguments.positionals(s, ["STATE (active or background)"], d)[0]
            return .setAppState(try ControlArguments.choice(v, "the state", AppState.self, d))
        },
        call: { c in guard case .setAppState(let state) = c else { mismatch(c, .setAppState) }; return .typed(.setAppState(state)) },
        print: { c, r in
            guard case .setAppState(let state) = c else { mismatch(c, .setAppState) }
            return "app state: \(state.rawValue)" + (r["sessionStarted"]?.boolValue == true ? " (a new session started)" : "")
        })

    static let registerPush = CommandDefinition(
        name: .registerPush, aliases: ["register-push"], synopsis: "register-for-push", summary: "register for push notifications",
        details: "Method: registerForPushNotifications.",
        build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .registerPush) },
        call: { _ in .typed(.registerForPushNotifications) },
        print: { _, r throws(AnswerError) in
            let registration = try RegistrationAnswer(json: r)
            guard registration.granted else { return "push registration: not granted" }
            return "push registration: granted, token " + Visible.escape(registration.pushToken ?? "-")
        })

    static let unregisterPush = CommandDefinition(
        name: .unregisterPush, aliases: ["unregister-push"], synopsis: "unregister-for-push", summary: "unregister from push notifications",
        details: "Method: unregisterForPushNotifications.",
        build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .unregisterPush) },
        call: { _ in .typed(.unregisterForPushNotifications) },
        print: { _, _ in "unregistered from push notifications" })

    static let setAuthorization = CommandDefinition(
        name: .setAuthorization, aliases: ["set-authorization"],
        synopsis: "set-notification-authorization notDetermined|denied|authorized|provisional|ephemeral",
        summary: "set the simulated notification authorization",
        details: "Method: setNotificationAuthorization.",
        build: { s, d throws(UsageError) in
            let v = try ControlArguments.positionals(s, ["STATUS"], d)[0]
            return .setAuthorization(try ControlArguments.choice(v, "the status", NotificationAuthorization.self, d))
        },
        call: { c in
            guard case .setAuthorization(let status) = c else { mismatch(c, .setAuthorization) }
            return .typed(.setNotificationAuthorization(status))
        },
        print: { c, _ in
            guard case .setAuthorization(let status) = c else { mismatch(c, .setAuthorization) }
            return "notification authorization: \(status.rawValue)"
        })

    static let status = CommandDefinition(
        name: .status, synopsis: "status", summary: "show the agent's state, device and flags freshness",
        details: "Method: status.",
        build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .status) },
        call: { _ in .typed(.status) },
        print: { _, r throws(AnswerError) in OutputFormatter.formatStatus(r, try StatusAnswer(json: r)) })

    static let metrics = CommandDefinition(
        name: .metrics, synopsis: "metrics", summary: "print the Prometheus metrics (the text of the HTTP interface's /metrics)",
        details: "Method: metrics.",
        build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .metrics) },
        call: { _ in .typed(.metrics) },
        print: { _, r in
            guard var text = r["text"]?.stringValue else { return JSONWriter.string(r) }
            if text.hasSuffix("\n") { text.removeLast() }
            return text
        })
}
