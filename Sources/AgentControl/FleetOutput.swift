import AgentCore
import AgentWire
import Foundation

// What `pushwoosh-agentctl fleet` prints (docs/fleet.md E.1): the status table (ages in each
// device's own time), the merged Prometheus text, one line per answer of `call`, `--json`,
// the exit status and the warning that names every answer not as asked.

public enum FleetOutput {
    /// The exit status of a set of answers: 3 when any instance is down, 1 when any answered
    /// with an error or (for `refresh`, as `pushwoosh-agentctl refresh`) a failed refresh;
    /// `strict`, when all answered: 5 when any answered not as asked (`notAsAsked`).
    public static func exit(_ answers: [FleetAnswer], method: SocketMethod? = nil, strict: Bool = false) -> ExitCode {
        if answers.contains(where: { if case .down = $0.outcome { true } else if case .missing = $0.outcome { true } else { false } }) {
            return .notRunning
        }
        if answers.contains(where: { if case .error = $0.outcome { true } else { false } }) { return .agentError }
        if method == .refresh, answers.contains(where: { refreshFailed($0.outcome) }) { return .agentError }
        if strict, answers.contains(where: { notAsAsked($0.outcome, method: method) != nil }) { return .notAsAsked }
        return .success
    }

    /// What an answer did other than asked, as `pushwoosh-agentctl --strict` reads it: a read
    /// answered with the caller's default (its `errorCode`), or a refresh that was not sent;
    /// nil otherwise.
    static func notAsAsked(_ outcome: FleetOutcome, method: SocketMethod?) -> String? {
        guard case .result(let r) = outcome else { return nil }
        if let code = r["errorCode"]?.stringValue {
            return code + (r["errorMessage"]?.stringValue.map { ": " + $0 } ?? "")
        }
        if method == .refresh, let answer = try? RefreshAnswer(json: r), answer.error == nil, !answer.sent {
            return answer.throttledUntil.map { "throttle window until \(SocketTime.string($0))" } ?? "answered without a request"
        }
        return nil
    }

    /// The standard-error line naming every instance that answered not as asked, or nil: a
    /// fallback is never silent, in a fleet either.
    public static func notAsAskedWarning(_ answers: [FleetAnswer], method: SocketMethod?) -> String? {
        let named = answers.compactMap { a in notAsAsked(a.outcome, method: method).map { "\(a.target.name) (\($0))" } }
        guard !named.isEmpty else { return nil }
        let what = method == .refresh ? "did not send the refresh" : "answered with the caller's default"
        return "warning: \(named.count) of \(answers.count) instance\(answers.count == 1 ? "" : "s") \(what): "
            + named.joined(separator: "; ")
    }

    /// A refresh that failed, or whose answer is not a `refresh` result.
    static func refreshFailed(_ outcome: FleetOutcome) -> Bool {
        guard case .result(let r) = outcome else { return false }
        guard let answer = try? RefreshAnswer(json: r) else { return true }
        return answer.error != nil
    }

    /// `--json`: an array, one object per instance.
    public static func json(_ answers: [FleetAnswer]) -> String {
        let items: [JSONValue] = answers.map { a in
            var o: [String: JSONValue] = ["instance": .string(a.target.name), "socket": .string(a.target.socketPath)]
            switch a.outcome {
            case .result(let r): o["result"] = r
            case .error(let e): o["error"] = ["code": .number(Double(e.code)), "message": .string(e.message)]
            case .down(let why): o["down"] = .string(why)
            case .missing(let why): o["missing"] = .string(why)
            }
            return .object(o)
        }
        return JSONWriter.string(.array(items))
    }

    /// `fleet status`: a table, then a summary line. Ages are in each device's own time: its
    /// status' `now` (a controlled clock runs ahead of the host's), else (an agent that does
    /// not say) the host's `now`.
    public static func status(_ answers: [FleetAnswer], now: Date) -> String {
        var rows: [[String]] = [["INSTANCE", "STATE", "USER-ID", "FLAGS-AGE", "LAST-REFRESH", "FAILURES"]]
        var counts: [String: Int] = [:]
        for a in answers {
            switch a.outcome {
            case .result(let r):
                let state = r["state"]?.stringValue ?? "?"
                counts[state, default: 0] += 1
                let age = r["flagsAgeSeconds"]?.numberValue.map { TimeSpan.rough($0) } ?? "-"
                var refresh = "-"
                if let at = r["lastRefreshAt"]?.stringValue, let date = try? Date(at, strategy: .iso8601) {
                    let deviceNow = r["now"]?.stringValue.flatMap { try? Date($0, strategy: .iso8601) } ?? now
                    refresh = TimeSpan.rough(max(0, deviceNow.timeIntervalSince(date))) + " ago"
                }
                if let code = r["lastRefreshError"]?["code"]?.numberValue { refresh += " (failed: \(Int(code)))" }
                let failures = r["consecutiveFailures"]?.numberValue.map { String(Int($0)) } ?? "-"
                rows.append([a.target.name, state, r["userId"]?.stringValue ?? "-", age, refresh, failures])
            case .error(let e):
                counts["error", default: 0] += 1
                rows.append([a.target.name, "error \(e.code): \(e.message)", "-", "-", "-", "-"])
            case .down(let why):
                counts["down", default: 0] += 1
                rows.append([a.target.name, "down (\(why))", "-", "-", "-", "-"])
            case .missing(let why):
                counts["missing", default: 0] += 1
                rows.append([a.target.name, "missing (\(why))", "-", "-", "-", "-"])
            }
        }
        let summary = "\(answers.count) instance\(answers.count == 1 ? "" : "s")"
            + (counts.isEmpty ? "" : ": " + counts.keys.sorted().map { "\(counts[$0]!) \($0)" }.joined(separator: ", "))
        return table(rows) + "\n" + summary
    }

    /// `fleet call`: one line per instance. A `refresh` says whether it was sent (and, when
    /// answered from the throttle window, until when), never a bare "ok".
    public static func call(_ answers: [FleetAnswer], method: SocketMethod? = nil) -> String {
        table(answers.map { a in
            switch a.outcome {
            case .result(let r) where method == .refresh:
                guard let answer = try? RefreshAnswer(json: r) else { return [a.target.name, "not understood", JSONWriter.string(r)] }
                if let error = answer.error { return [a.target.name, "failed", error.summary] }
                if answer.sent { return [a.target.name, "sent", JSONWriter.string(r)] }
                return [a.target.name, "not sent", answer.throttledUntil.map { "throttle window until \(SocketTime.string($0))" } ?? JSONWriter.string(r)]
            case .result(let r): return [a.target.name, "ok", JSONWriter.string(r)]
            case .error(let e): return [a.target.name, "error", "\(e.code) \(e.message)"]
            case .down(let why): return [a.target.name, "down", why]
            case .missing(let why): return [a.target.name, "missing", why]
            }
        })
    }

    static func table(_ rows: [[String]]) -> String {
        let rows = rows.map { $0.map(Visible.escape) }  // output is data: a User ID cannot redraw the table
        guard let columns = rows.map(\.count).max() else { return "" }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return rows.map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }.joined(separator: "\n")
    }

    /// `fleet metrics`: every instance's text merged, an `instance` label on each series,
    /// HELP and TYPE once per family (the first instance's), families in order of first
    /// appearance, and `pushwoosh_agent_fleet_up` for each instance.
    public static func metrics(_ answers: [FleetAnswer]) -> String {
        var order: [String] = []
        var help: [String: String] = [:]
        var type: [String: String] = [:]
        var samples: [String: [String]] = [:]
        func family(_ name: String) {
            if samples[name] == nil {
                samples[name] = []
                order.append(name)
            }
        }
        var up: [String] = []
        for a in answers {
            let label = "instance=\"\(a.target.name)\""
            guard case .result(let r) = a.outcome, let text = r["text"]?.stringValue else {
                up.append("pushwoosh_agent_fleet_up{\(label)} 0")
                continue
            }
            up.append("pushwoosh_agent_fleet_up{\(label)} 1")
            var current: String?
            for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
                if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") {
                    let parts = line.split(separator: " ", maxSplits: 3)
                    guard parts.count >= 3 else { continue }
                    let name = String(parts[2])
                    family(name)
                    current = name
                    if parts[1] == "HELP" { help[name] = help[name] ?? String(line) } else { type[name] = type[name] ?? String(line) }
                    continue
                }
                if line.hasPrefix("#") { continue }
                let nameEnd = line.firstIndex { $0 == "{" || $0 == " " } ?? line.endIndex
                let name = String(line[..<nameEnd])
                let owner = current.flatMap { name.hasPrefix($0) ? $0 : nil } ?? name
                family(owner)
                let labelled: String
                if nameEnd < line.endIndex, line[nameEnd] == "{" {
                    let inside = line.index(after: nameEnd)
                    labelled = name + "{" + label + (line[inside] == "}" ? "" : ",") + line[inside...]
                } else {
                    labelled = name + "{" + label + "}" + line[nameEnd...]
                }
                samples[owner]!.append(labelled)
            }
        }
        var out: [String] = []
        for name in order {
            if let h = help[name] { out.append(h) }
            if let t = type[name] { out.append(t) }
            out.append(contentsOf: samples[name]!)
        }
        out.append("# HELP pushwoosh_agent_fleet_up Whether the instance answered pushwoosh-agentctl fleet metrics (1) or not (0).")
        out.append("# TYPE pushwoosh_agent_fleet_up gauge")
        out.append(contentsOf: up)
        return out.joined(separator: "\n")
    }
}
