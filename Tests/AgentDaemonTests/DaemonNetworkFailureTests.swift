import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
import ToolSupport

/// The daemon's side of a network failure libcurl reports (the transport's own tests are
/// AgentPosixTests' CurlTransportTests).
@Suite struct DaemonNetworkFailureTests {
    // A DNS failure, in a network namespace of its own (no interface but a down loopback,
    // so nothing leaves the machine): the daemon reports it as a code-0 refresh error.
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")))
    func dnsFailureIsAnError() throws {
        let dir = TempDir()
        let agent = try AgentProcess(dir: dir, config: AgentProcess.config(server: "http://pushwoosh-agent-test.invalid/json/1.3/",
                                                                           dir: dir.path),
                                     server: "", launcher: ["/usr/bin/unshare", "--net"])
        guard agent.waitForNotify("READY=1") != nil else { throw FixtureError("no READY=1: \(agent.stderrText)") }
        let client = try LineClient(path: agent.socketPath)
        let answer = client.call("refresh")["result"]?["error"]
        #expect(answer?["code"] == 0)
        let message = answer?["message"]?.stringValue ?? ""
        #expect(message.contains("resolve") && message.contains("curl 6"), "\(message)")
    }
}
