import AgentConfigFile
import AgentCore
@testable import AgentCurl
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
@testable import AgentDaemon

/// `pushwoosh-agentd --doctor` against a hostile server (docs/real-pushwoosh.md): server text is
/// data (no raw escape sequence reaches the terminal), the token never shows (not even
/// JSON-escaped), every RequestTimeout the daemon accepts works, and an endless answer stops at
/// the agent's answer limit.
@Suite(.serialized) struct DoctorTests {
    /// A token JSON must escape.
    static let token = #"s3cr"et\t0ken"#

    func configuration(_ extra: String = "") throws -> AgentConfiguration {
        try AgentConfiguration.parse("[Agent]\nApplicationCode=ABCDE-12345\nServerURL=http://127.0.0.1:9/json/1.3/\nApiToken=\(Self.token)\nStateDirectory=/nonexistent\n\(extra)\n",
                                     file: "agent.conf", environment: [:])
    }

    /// What the doctor prints when the server answers `body` to every call.
    func report(_ body: String, json: Bool) throws -> String {
        let doctor = Doctor(configuration: try configuration(), environment: [:]) { _ in
            CurlProbe.Result(outcome: .response(status: 200, headers: [:], body: Data(body.utf8)), problem: nil, resolved: 0, connected: 0,
                             tlsDone: 0, total: 0, address: "127.0.0.1", port: 9, certificates: [])
        }
        let report = doctor.run()
        return json ? report.json(redacting: Self.token) : report.text(redacting: Self.token)
    }

    /// (Before: the ESC and CSI sequences were printed raw, and in --json the token, escaped as
    /// `s3cr\"et\\t0ken`, was printed whole.)
    @Test(arguments: [false, true])
    func serverTextIsEscapedAndTheTokenNeverShown(json: Bool) throws {
        let hostile = "\u{1B}]0;pwned\u{07}\u{1B}[2J\u{9B}31m\u{202E}" + Self.token
        let body = JSONWriter.string(["status_code": 500, "status_message": .string(hostile),
                                      "response": ["flags": [["key": .string(hostile), "enabled": true, "rule_id": .string(Self.token),
                                                              "properties": [.init(stringLiteral: Self.token): .string(hostile)]]]]])
        let out = try report(body, json: json)
        for raw in ["\u{1B}", "\u{07}", "\u{9B}", "\u{202E}"] { #expect(!out.contains(raw), "raw \(raw.unicodeScalars.first!.value) in \(out)") }
        #expect(!out.contains(Self.token) && !out.contains(#"s3cr\"et\\t0ken"#) && !out.contains("s3cr"), "\(out)")
        #expect(out.contains("<redacted>"))
        #expect(out.contains(#"\u001b]0;pwned"#), "\(out)")
        if json { #expect((try? JSONReader.parse(out.trimmingCharacters(in: .newlines))) != nil, "not JSON: \(out)") }
    }

    /// A local server that answers every request with an endless chunked body.
    final class EndlessServer: @unchecked Sendable {
        let fd: Int32
        let port: UInt16

        init() throws {
            (fd, port) = try TCPListener.listen(host: "127.0.0.1", port: 0, backlog: 8)
            let fd = self.fd
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)  // this thread waits in accept
            Thread.detachNewThread {
                while true {
                    let client = Glibc.accept(fd, nil, nil)
                    guard client >= 0 else { return }
                    Thread.detachNewThread {
                        var request = [UInt8](repeating: 0, count: 65_536)
                        _ = recv(client, &request, request.count, 0)
                        let head = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
                        let chunk = Array("10000\r\n".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 0x10000) + Array("\r\n".utf8)
                        var ok = send(client, head, head.count, Int32(MSG_NOSIGNAL)) > 0
                        while ok { ok = send(client, chunk, chunk.count, Int32(MSG_NOSIGNAL)) > 0 }
                        Glibc.close(client)
                    }
                }
            }
        }

        deinit { shutdown(fd, Int32(SHUT_RDWR)); Glibc.close(fd) }
    }

    /// `pushwoosh-agentd --doctor` with `extra` configuration lines; returns its exit status, its
    /// output and its peak RSS in MiB (sampled; killed past `killAbove` MiB).
    func runDoctor(_ extra: String, killAbove: Double = 1_000) throws -> (Int32, String, Double) {
        let dir = TempDir()
        try ("[Agent]\nApplicationCode=ABCDE-12345\nApiToken=\(Self.token)\nStateDirectory=\(dir.path)/state\n" + extra + "\n")
            .write(toFile: dir.file("agent.conf"), atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binaries.agentd)
        process.arguments = ["--config", dir.file("agent.conf"), "--doctor"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = out
        try process.run()
        let reader = DispatchQueue(label: "doctor-output")
        nonisolated(unsafe) var text = Data()
        let done = DispatchSemaphore(value: 0)
        reader.async {
            text = out.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }
        var peak = 0.0
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning {
            peak = max(peak, Double(ProcStats.status(pid: process.processIdentifier, field: "VmRSS") ?? 0) / 1024)
            if peak > killAbove || Date() > deadline { kill(process.processIdentifier, SIGKILL) }
            usleep(20_000)
        }
        process.waitUntilExit()
        done.wait()
        return (process.terminationStatus, String(decoding: text, as: UTF8.self), peak)
    }

    /// (Before: the doctor read the answer without a bound: 2.16 GB and an abort in the audit;
    /// here killed at 100 MiB.)
    @Test func anEndlessAnswerStopsAtTheAnswerLimit() throws {
        let server = try EndlessServer()
        let (status, out, peak) = try runDoctor("ServerURL=http://127.0.0.1:\(server.port)/json/1.3/\nRequestTimeout=20s", killAbove: 100)
        #expect(status == 1, "\(out)")
        #expect(peak < 100, "the doctor's RSS reached \(peak) MiB")
        #expect(out.contains("response body over \(16 << 20) bytes"), "\(out)")
    }

    /// Every RequestTimeout the configuration accepts works in the doctor. (Before: a crash —
    /// Double to Int overflow — on `RequestTimeout=99999999999999999999`.)
    @Test func anyAcceptedRequestTimeoutWorks() throws {
        for timeout in ["99999999999999999999", "1000000000000000000000000000000000s", "1ms"] {
            let (status, out, _) = try runDoctor("ServerURL=http://127.0.0.1:9/json/1.3/\nRequestTimeout=\(timeout)")
            #expect(status == 1 && out.contains("result: NOT usable"), "RequestTimeout=\(timeout): exit \(status): \(out)")
        }
    }

    /// An invalid `Proxy=` is reported without its password.
    @Test func anInvalidProxyIsReportedWithoutItsPassword() throws {
        let (status, out, _) = try runDoctor("ServerURL=http://127.0.0.1:9/json/1.3/\nProxy=http://user:pr0xyPass@proxy example:3128")
        #expect(status == 1)
        #expect(out.contains("Proxy: invalid proxy") && !out.contains("pr0xyPass"), "\(out)")
    }
}
