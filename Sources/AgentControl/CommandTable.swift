// The commands of pushwoosh-agentctl: name, synopsis, help text and options, one row each.

// MARK: - The command table

/// agentctl's commands: its own words (the man page's), most of them the socket method they
/// call spelled the CLI's way.
enum CommandName: String, CaseIterable, Sendable {
    case get, isEnabled = "is-enabled", property, refresh, logImpression = "log-impression", setUser = "set-user"
    case setAppState = "set-app-state", registerPush = "register-push", unregisterPush = "unregister-push"
    case setAuthorization = "set-authorization", primer, status, metrics, clock, advanceClock = "advance-clock"
    case fleet, watch
}

struct CommandInfo {
    var name: CommandName
    var synopsis: String
    var summary: String
    var details: String = ""
    /// Options that take a value.
    var valued: Set<String> = []
    /// Options without a value.
    var flags: Set<String> = []
}

let visualOptions: [(option: String, param: String)] = [
    ("--image", "image"), ("--image-url", "imageURL"), ("--background-color", "backgroundColor"),
    ("--background-gradient", "backgroundGradient"), ("--title-color", "titleColor"),
    ("--message-color", "messageColor"), ("--accept-button-color", "acceptButtonColor"),
    ("--accept-button-text-color", "acceptButtonTextColor"), ("--decline-button-color", "declineButtonColor"),
    ("--decline-button-text-color", "declineButtonTextColor"), ("--corner-radius", "cornerRadius"),
    ("--button-corner-radius", "buttonCornerRadius"), ("--button-border-color", "buttonBorderColor"),
]

let commandTable: [CommandInfo] = [
    CommandInfo(name: .get, synopsis: "get KEY [--strict]", summary: "show a flag: enabled, rule, properties and where it came from",
                details: "Prints the flag's key, whether it is enabled, its rule, its properties and the\nprovenance (reason, source, age). \(fallbackNote) Method: get.",
                flags: ["--strict"]),
    CommandInfo(name: .isEnabled, synopsis: "is-enabled KEY [--default true|false] [--strict]",
                summary: "print true or false",
                details: "Prints whether the flag is enabled; --default (false unless given) is what the\nagent answers when it has no valid flag. \(fallbackNote) Method: isEnabled.",
                valued: ["--default"], flags: ["--strict"]),
    CommandInfo(name: .property, synopsis: "property KEY PROP --type string|number|bool|jsonObject|jsonArray [--default V] [--strict]",
                summary: "print one property of a flag",
                details: "Prints the property's value, else the default. For scalar types --default\ndefaults to \"\", 0 or false; JSON types take no default (null when absent).\n--type also takes json or json-object for jsonObject, json-array for jsonArray.\n\(fallbackNote) Method: property.",
                valued: ["--type", "--default"], flags: ["--strict"]),
    CommandInfo(name: .refresh, synopsis: "refresh [--strict]", summary: "fetch the flags now and wait for the outcome",
                details: """
                    Prints "refresh: sent" and the flags that changed when the request went to the
                    server, or "refresh: not sent (throttle window until T; the stored flags are in
                    use)" when it was answered from the stored flags inside the 5-minute throttle
                    window (T in device time). Exits 1 when the refresh failed; with --strict, 5
                    when it was not sent. Method: refresh.
                    """,
                flags: ["--strict"]),
    CommandInfo(name: .logImpression, synopsis: "log-impression KEY", summary: "record that the user saw the flag's feature",
                details: "Method: logImpression."),
    CommandInfo(name: .setUser, synopsis: "set-user USERID", summary: "set the User ID (then the flags are refreshed)",
                details: "Method: setUserId."),
    CommandInfo(name: .setAppState, synopsis: "set-app-state active|background", summary: "move the simulated app to the foreground or background",
                details: "Method: setAppState."),
    CommandInfo(name: .registerPush, synopsis: "register-push", summary: "register for push notifications",
                details: "Method: registerForPushNotifications."),
    CommandInfo(name: .unregisterPush, synopsis: "unregister-push", summary: "unregister from push notifications",
                details: "Method: unregisterForPushNotifications."),
    CommandInfo(name: .setAuthorization, synopsis: "set-authorization notDetermined|denied|authorized|provisional|ephemeral",
                summary: "set the simulated notification authorization",
                details: "Method: setNotificationAuthorization."),
    CommandInfo(name: .primer, synopsis: "primer --title T --message M --accept A --decline D [OPTIONS]",
                summary: "present the push primer to the simulated user",
                details: """
                    Options:
                      --style alert|sheet              (sheet by default in the agent)
                      --position bottom|top|center     (sheet only)
                      --no-fallback-to-settings        when denied, do not send the user to settings
                      --min-interval SECONDS           not shown again within this many seconds
                      --answer accept|decline          what the simulated user taps
                      --image NAME, --image-url URL
                      --background-color C, --background-gradient C1,C2[,…]
                      --title-color C, --message-color C
                      --accept-button-color C, --accept-button-text-color C
                      --decline-button-color C, --decline-button-text-color C
                      --corner-radius N, --button-corner-radius N, --button-border-color C
                    Colours: #RRGGBB, #RRGGBBAA or a semantic name (systemBlue, label, …).
                    Method: presentPushPrimer.
                    """,
                valued: Set(["--title", "--message", "--accept", "--decline", "--style", "--position", "--min-interval", "--answer"]
                    + visualOptions.map(\.option)),
                flags: ["--no-fallback-to-settings", "--fallback-to-settings"]),
    CommandInfo(name: .status, synopsis: "status", summary: "show the agent's state, device and flags freshness",
                details: "Method: status."),
    CommandInfo(name: .metrics, synopsis: "metrics", summary: "print the Prometheus metrics (the text of the HTTP interface's /metrics)",
                details: "Method: metrics."),
    CommandInfo(name: .clock, synopsis: "clock", summary: "show the device's time and how far its controlled clock is ahead",
                details: "Needs [Device] Clock=controlled. Method: clock."),
    CommandInfo(name: .advanceClock, synopsis: "advance-clock SPAN | advance-clock --to TIME",
                summary: "move the device's clock forward; every timer due meanwhile runs at its own time",
                details: """
                    SPAN is a systemd time span (23h59min, 30min, 7d); TIME is ISO 8601 UTC
                    (2026-12-03T10:00:00Z). Answers once the device is quiet again and lists
                    the timers that fired. Needs [Device] Clock=controlled. Method: advanceClock.
                    """,
                valued: ["--to"]),
    CommandInfo(name: .fleet, synopsis: "fleet status|metrics|call METHOD [PARAMS-JSON]|advance-clock SPAN --emulator URL",
                summary: "ask every instance of the fleet at once ('fleet --help')"),
    CommandInfo(name: .watch, synopsis: "watch [--events flags,refresh,state] [--reconnect]",
                summary: "print flag updates (and refreshes, state changes) as they happen, until interrupted",
                details: """
                    Subscribes and prints one line per notification, each stamped with the device
                    time of the event: flags (featureFlagsDidUpdate, the default), refresh
                    (refreshCompleted: every refresh, sent or not) and state (stateChanged).
                    --reconnect keeps watching when the agent restarts, saying so on standard
                    error. With --json, one JSON object per line. Method: subscribe.
                    """,
                valued: ["--events"], flags: ["--reconnect"]),
]

/// What the read commands say about a fallback.
let fallbackNote = """
    When the agent answers with the caller's default (FLAG_NOT_FOUND, TYPE_MISMATCH,
    PROVIDER_NOT_READY) the value is printed as usual and a warning naming the code goes to
    standard error; --strict then exits 5.
    """
