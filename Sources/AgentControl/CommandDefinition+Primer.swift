import AgentCore
import AgentWire
import Foundation

// `primer` (docs/socket-api.md B.2 presentPushPrimer): its options are the method's parameters,
// sent as given; the agent checks them (colours, URLs) and names the one it refuses.

extension CommandDefinition {
    /// The visual options and the `presentPushPrimer` parameter each sets.
    static let visualOptions: [(option: String, param: String)] = [
        ("--image", "image"), ("--image-url", "imageURL"), ("--background-color", "backgroundColor"),
        ("--background-gradient", "backgroundGradient"), ("--title-color", "titleColor"),
        ("--message-color", "messageColor"), ("--accept-button-color", "acceptButtonColor"),
        ("--accept-button-text-color", "acceptButtonTextColor"), ("--decline-button-color", "declineButtonColor"),
        ("--decline-button-text-color", "declineButtonTextColor"), ("--corner-radius", "cornerRadius"),
        ("--button-corner-radius", "buttonCornerRadius"), ("--button-border-color", "buttonBorderColor"),
    ]

    /// The required texts and the parameter each sets.
    static let primerTexts: [(option: String, param: String)] = [
        ("--title", "title"), ("--message", "message"), ("--accept", "acceptButton"), ("--decline", "declineButton"),
    ]

    static let primerCommands: [CommandDefinition] = [
        CommandDefinition(
            name: "present-push-primer", aliases: ["primer"], synopsis: "present-push-primer --title T --message M --accept A --decline D [OPTIONS]",
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
            valued: Set(primerTexts.map(\.option) + ["--style", "--position", "--min-interval", "--answer"] + visualOptions.map(\.option)),
            flags: ["--no-fallback-to-settings", "--fallback-to-settings"],
            build: { s, d throws(UsageError) in
                _ = try ControlArguments.positionals(s, [], d)
                return d.command(.unchecked(.presentPushPrimer, try primerParams(s, d)))
            },
            print: { _, r in
                var lines: [(String, String)] = [("outcome", r["outcome"].map(OutputFormatter.scalar) ?? "-")]
                if let presentation = r["presentation"]?.objectValue {
                    for key in presentation.keys.sorted() { lines.append(("  " + key, OutputFormatter.scalar(presentation[key]!))) }
                } else {
                    lines.append(("presentation", "none"))
                }
                return OutputFormatter.aligned(lines)
            }),
    ]

    private static func primerParams(_ s: ControlArguments.Scanned, _ d: CommandDefinition) throws(UsageError) -> [String: JSONValue] {
        var params: [String: JSONValue] = [:]
        for (option, param) in primerTexts {
            guard let v = s.values[option] else { throw UsageError("'\(d.name)' needs \(option)", command: d.name) }
            params[param] = .string(v)
        }
        if let v = s.values["--style"] { params["style"] = .string(try ControlArguments.choice(v, "--style", PrimerStyle.self, d).rawValue) }
        if let v = s.values["--position"] {
            params["position"] = .string(try ControlArguments.choice(v, "--position", PrimerPosition.self, d).rawValue)
        }
        if let v = s.values["--answer"] { params["answer"] = .string(try ControlArguments.choice(v, "--answer", PrimerAnswer.self, d).rawValue) }
        if let v = s.values["--min-interval"] {
            let n = try ControlArguments.number(v, "--min-interval", d)
            guard n >= 0 else { throw UsageError("--min-interval must be 0 or more", command: d.name) }
            params["minInterval"] = .number(n)
        }
        if s.flags.contains("--no-fallback-to-settings") { params["fallbackToSettings"] = false }
        if s.flags.contains("--fallback-to-settings") {
            if s.flags.contains("--no-fallback-to-settings") {
                throw UsageError("--fallback-to-settings and --no-fallback-to-settings contradict", command: d.name)
            }
            params["fallbackToSettings"] = true
        }
        for (option, param) in visualOptions {
            guard let v = s.values[option] else { continue }
            switch param {
            case "cornerRadius", "buttonCornerRadius":
                params[param] = .number(try ControlArguments.number(v, option, d))
            case "backgroundGradient":
                let colours = v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                params[param] = .array(colours.map { .string($0) })
            default:
                params[param] = .string(v)
            }
        }
        return params
    }
}
