import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Synchronization
import Testing
import ToolSupport

/// docs/real-pushwoosh.md: `--upstream` reads an answer no further than the agent would
/// (16 MiB); a server that streams without end gets a 502 with the reason, and the emulator's
/// memory never follows it.
@Suite struct UpstreamBoundTests {
    @Test func anEndlessChunkedAnswerEndsAsA502AndTheEmulatorStaysSmall() throws {
        let hostile = try EndlessServer(cap: 160 << 20)
        defer { hostile.stop() }
        let emulator = try EmulatorProcess(arguments: ["--upstream", "http://127.0.0.1:\(hostile.port)/json/1.3/"])
        defer { emulator.stop() }
        let body = #"{"request":{"application":"ABCDE-12345","hwid":"h1","userId":"h1","v":"7.2.10","device_type":1}}"#
        let started = monotonicSeconds()
        let (status, text) = http("POST", emulator.serverURL + "getFeatureFlags", body)
        let peakKiB = ProcStats.status(pid: emulator.pid, field: "VmHWM") ?? .max
        #expect(status == 502, "\(status) \(text.prefix(200))")
        #expect(text.contains("upstream: response body over 16777216 bytes"), "\(text.prefix(200))")
        #expect(peakKiB < 100 * 1024, "the emulator's peak RSS reached \(peakKiB) KiB")
        #expect(monotonicSeconds() - started < 10)
        #expect(hostile.sent > 16 << 20)  // it did stream past the limit
        // Still serving.
        #expect(emulator.admin("GET", "/admin/clock").0 == 200)
    }
}

/// A loopback HTTP server that answers each request with a chunked body that never ends (it
/// stops after `cap` bytes only so that a client without a bound cannot take the machine down).
final class EndlessServer: Sendable {
    let port: UInt16
    private let fd: Int32
    private let stopped = Atomic<Bool>(false)
    private let total = Atomic<Int>(0)
    var sent: Int { total.load(ordering: .relaxed) }

    init(cap: Int) throws {
        (fd, port) = try TCPListener.listen(host: "127.0.0.1", port: 0, backlog: 16)
        let chunk = Array("10000\r\n".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 0x10000) + Array("\r\n".utf8)
        Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 50) > 0 else { continue }
                let client = accept(fd, nil, nil)
                guard client >= 0 else { continue }
                var request = [UInt8](repeating: 0, count: 65_536)
                _ = recv(client, &request, request.count, 0)
                let head = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
                var ok = send(client, head, head.count, Int32(MSG_NOSIGNAL)) == head.count
                var written = 0
                while ok, written < cap, !stopped.load(ordering: .relaxed) {
                    ok = (try? BlockingSocket.sendAll(client, chunk)) != nil
                    if ok { written += chunk.count }
                    total.store(written, ordering: .relaxed)
                }
                close(client)
            }
        }.start()
    }

    func stop() {
        if !stopped.exchange(true, ordering: .relaxed) {
            usleep(100_000)  // the thread leaves its poll
            close(fd)
        }
    }
}
