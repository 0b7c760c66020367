import AgentCore
import AgentCurl
import AgentPosix
import FoundationEssentials

extension Doctor {
    /// Connection and TLS, from the first exchange.
    func transportSteps(_ r: CurlProbe.Result) -> [Step] {
        var steps: [Step] = []
        let ms = { (s: Double) in Int((s * 1000).rounded()) }
        switch r.problem {
        case .nameResolution?, .proxy?, .connection?:
            steps.append(Step(name: "connection", outcome: .failed, detail: reason(r.outcome), milliseconds: ms(r.total)))
            return steps
        case .timeout? where r.connected == 0:
            steps.append(Step(name: "connection", outcome: .failed, detail: reason(r.outcome), milliseconds: ms(r.total)))
            return steps
        default:
            steps.append(Step(name: "connection", outcome: .ok, detail: "\(r.address) port \(r.port)", milliseconds: ms(r.connected)))
        }
        let tlsProblem = r.problem.map { $0.rawValue.hasPrefix("tls") } ?? false
        if tlsProblem {
            steps.append(Step(name: "tls", outcome: .failed, detail: reason(r.outcome), milliseconds: ms(r.total)))
        } else if let leaf = r.certificates.first {
            var detail = "subject \(leaf.subject); issuer \(leaf.issuer); expires \(leaf.notAfter)"
            if r.certificates.count > 1 { detail += "; chain of \(r.certificates.count)" }
            steps.append(Step(name: "tls", outcome: .ok, detail: detail + "; verified", milliseconds: ms(r.tlsDone)))
        } else {
            steps.append(Step(name: "tls", outcome: .skipped, detail: "plain HTTP: no TLS"))
        }
        return steps
    }

    /// HTTP status and `status_code` of one call.
    func callStep(_ name: String, _ r: CurlProbe.Result, required: Bool) -> Step {
        let ms = Int((r.total * 1000).rounded())
        switch r.outcome {
        case .noResponse:
            return Step(name: name, outcome: .failed, detail: reason(r.outcome), milliseconds: ms)
        case .response(let status, _, let body):
            let envelope = body.withUnsafeBytes { try? JSONReader.parse($0) }
            let code = envelope?["status_code"]?.numberValue.map { Int(exactly: $0).map(String.init) ?? String($0) } ?? "none"
            let message = envelope?["status_message"]?.stringValue.map { " \"\($0)\"" } ?? ""
            let ok = status == 200 && code == "200"
            var detail = "HTTP \(status), status_code \(code)\(message)"
            if status == 401 || status == 403 { detail += ": check ApplicationCode and ApiToken" }
            return Step(name: name, outcome: ok ? .ok : (required ? .failed : .warning), detail: detail, milliseconds: ms)
        }
    }

    /// The flags answer against the contract, and the flags the agent would serve.
    func checkFlags(_ r: CurlProbe.Result, into report: inout Report) {
        guard case .response(let status, _, let body) = r.outcome else { return }
        report.deviations = PushwooshAPI.flagsAnswerDeviations(status: status, body: Array(body))
        // The agent's own verdict decides (the same code the refresh runs).
        let verdict = PushwooshAPI.classify(r.outcome).flatMap { PushwooshAPI.parseFlags($0.response) }
        switch verdict {
        case .success(let answer):
            report.flags = answer.flags.values.sorted { $0.key < $1.key }
            report.partial = answer.partial
            let notes = report.deviations.count
            report.steps.append(Step(name: "contract", outcome: notes == 0 ? .ok : .warning,
                                     detail: notes == 0 ? "the answer is what the agent expects" : "\(notes) deviation\(notes == 1 ? "" : "s") the agent reads leniently"))
            let shown = report.flags.prefix(20).map { "\($0.key)=\($0.isEnabled ? "on" : "off") (\($0.ruleId.isEmpty ? "killed" : $0.ruleId))" }
            let more = report.flags.count > 20 ? ", … \(report.flags.count - 20) more" : ""
            report.steps.append(Step(name: "flags", outcome: .ok,
                                     detail: "\(report.flags.count) flag\(report.flags.count == 1 ? "" : "s")\(report.partial ? " (partial: not stored)" : "")\(shown.isEmpty ? "" : ": ")\(shown.joined(separator: ", "))\(more)"))
        case .failure(let failure):
            if !report.deviations.contains(where: \.fatal) {
                report.deviations.append(PushwooshAPI.Deviation("(answer)", failure.message, fatal: true))
            }
            report.steps.append(Step(name: "contract", outcome: .failed,
                                     detail: "the agent cannot use this answer: \(failure.message)"))
        }
    }

    func reason(_ outcome: HTTPOutcome) -> String {
        if case .noResponse(let reason) = outcome { return reason }
        return ""
    }
}
