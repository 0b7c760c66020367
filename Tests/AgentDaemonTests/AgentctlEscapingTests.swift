import AgentPosix
import Foundation
import HarnessSupport
import Testing
import ToolSupport

/// Output is data: `pushwoosh-agentctl` prints keys, User IDs and messages from the agent
/// with their control characters escaped, so an answer cannot drive the terminal (ESC
/// sequences, CR overwriting a line, BEL). `--json` prints JSON, escaped by JSON itself.
@Suite(.serialized) struct AgentctlEscapingTests {
    /// ESC ] 0 ; (set the window title) … BEL, CR (back to the line's start), ESC [ 2 J (clear screen), RLO.
    static let hostile = "\u{1B}]0;owned\u{07}x\r\u{1B}[2Jy\u{202E}z\u{9B}"
    static let escaped = #"\u001b]0;owned\u0007x\r\u001b[2Jy\u202ez\u009b"#

    func agentctl(_ arguments: [String]) -> CapturedRun {
        (try? runCapturing(Binaries.agentctl, arguments)) ?? CapturedRun(status: -1, out: "", err: "")
    }

    /// No byte of C0 (but the line feed), DEL or C1, and no bidirectional override.
    func isClean(_ text: String) -> Bool {
        !text.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) || $0 == "\u{202E}" }
    }

    @Test("agentctl escapes control characters in User IDs, flag keys and messages; --json stays JSON")
    func controlCharactersAreEscaped() throws {
        // A flag whose key carries the sequences, served by the real emulator.
        let dir = TempDir()
        var app = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: Binaries.repositoryRoot + "/config/flags.example.json"))) as! [String: Any]
        var flags = app["flags"] as! [[String: Any]]
        flags.append(["key": "k" + Self.hostile, "rules": [[String: Any]]()])
        app["flags"] = flags
        try JSONSerialization.data(withJSONObject: app).write(to: URL(fileURLWithPath: dir.path + "/apps.json"))
        let emulator = try EmulatorProcess(apps: dir.path + "/apps.json")
        let agent = try AgentProcess(server: emulator.serverURL)
        defer { _ = agent.stop() }
        #expect(agent.waitForNotify("READY=1") != nil)
        let socket = ["--socket", agent.socketPath]

        let set = agentctl(socket + ["set-user", Self.hostile])
        #expect(set.status == 0)
        #expect(set.out == "User ID set to \(Self.escaped)\n")
        let status = agentctl(socket + ["status"])
        #expect(isClean(status.out))
        #expect(status.out.contains("userId:") && status.out.contains(Self.escaped))
        // The agent stored and serves the User ID as it was given.
        #expect(try LineClient.call(agent.socketPath, .status)["userId"]?.stringValue == Self.hostile)

        _ = try LineClient.call(agent.socketPath, .refresh)
        let get = agentctl(socket + ["get", "k" + Self.hostile])
        #expect(get.status == 0)
        #expect(isClean(get.out))
        #expect(get.out.contains("k" + Self.escaped))
        let impression = agentctl(socket + ["log-impression", "k" + Self.hostile])
        #expect(isClean(impression.out) && impression.out.contains("k" + Self.escaped))

        // An error message (here the agent's, naming the bad value) is escaped too.
        let bad = agentctl(socket + ["set-user", ""])
        #expect(isClean(bad.err))

        // --json: JSON's own escapes, the same text a JSON reader gets back.
        let json = agentctl(socket + ["--json", "status"])
        #expect(isClean(json.out))
        let decoded = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
        #expect(decoded?["userId"] as? String == Self.hostile)
    }
}
