import AgentCore
import EmulatorCore
import Foundation
import Glibc
import ToolSupport

/// A device's configuration checked by the agent's own parser before the device starts
/// (`pushwoosh-agentd --check-config --json --config FILE`): a key or value the agent would
/// refuse is the caller's mistake, a 400 naming `config.SECTION.KEY` (or `extraConfig`), not a
/// device that fails to start.
struct ConfigCheck {
    /// What the agent said of the file: the line it names (1-based), the key, its reason.
    struct Problem {
        var line: Int?
        var key: String?
        var message: String

        func refusal(start: LabStart, index: Int) -> LabRefusal {
            let path = line.map { start.origin(ofLine: $0, index: index) } ?? "config"
            let what = key.map { "\($0): " } ?? ""
            return LabRefusal(400, "the agent refuses this configuration: \(what)\(message)", path: path)
        }
    }

    /// Runs the check; nil when the agent takes the file, or when it cannot tell (a daemon
    /// without `--check-config`, which then says so at its start as before).
    static func run(agentd: String, config: String, environment: [String: String], output: PrivateDirectory) -> Problem? {
        let out = output.file("check-config.out")
        guard (try? output.write("check-config.out", "")) != nil else { return nil }
        defer { unlink(out) }
        guard case .success(let pid) = ChildProcess.spawn(path: agentd, arguments: ["--check-config", "--json", "--config", config],
                                                          environment: environment, output: .files(stdout: out, stderr: "/dev/null")) else {
            return nil
        }
        let deadline = Date().addingTimeInterval(5)
        var status: Int32 = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            if Date() > deadline {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                return nil
            }
            usleep(2_000)
        }
        guard status & 0x7f == 0, (status >> 8) & 0xff == 1,
              let text = try? String(contentsOfFile: out, encoding: .utf8),
              let answer = try? StrictJSONParser.parse(Array(text.utf8)), answer["ok"] == .bool(false) else { return nil }
        return Problem(line: answer["line"]?.numberValue.map { Int($0) }, key: answer["key"]?.stringValue,
                       message: answer["message"]?.stringValue ?? "refused")
    }
}
