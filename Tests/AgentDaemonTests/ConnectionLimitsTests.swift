import AgentCore
import AgentPosix
import AgentTestSupport
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import Testing
@testable import AgentDaemon

/// The socket's limits in-process (B.3): the reserved slots of control callers,
/// `RequestReadTimeout`, answers over the line limit, ids echoed exactly; and the keys
/// that set the limits, with their bad values.
@Suite struct ConnectionLimitsTests {
    static let nobody = PeerCredentials(pid: 1, uid: 65_534, gid: 65_534)

    /// Read-only callers fill MaxConnections; root (the kernel's credentials here) still
    /// gets in, up to the reserved slots, and is served.
    @Test func controlCallersHaveReservedSlots() throws {
        var settings = SocketSettings(path: "/unused")
        settings.maxConnections = 2
        let reserved = SocketSettings.reservedControlSlots
        let peers: [PeerCredentials?] = [Self.nobody, Self.nobody, Self.nobody] + Array(repeating: nil, count: reserved + 1)
        let s = try InProcessServer(peers: peers, settings: settings)
        #expect(s.lines(2).first?["error"]?["code"] == -32000, "a third read-only caller over MaxConnections=2")
        for root in 3..<(3 + reserved) {
            s.send(root, s.request(root, .status))
            #expect(s.lines(root).first?["result"]?["hwid"] != nil, "control caller \(root - 3) refused")
        }
        #expect(s.lines(3 + reserved).first?["error"]?["code"] == -32000, "the reserved slots are bounded too")
        s.send(0, s.request(1, .status))
        #expect(s.lines(0).first?["id"] == 1)
    }

    /// A half-written line is closed with -32600 naming RequestReadTimeout; so is a
    /// connection that never sends; an idle subscription and an idle client between
    /// requests are kept.
    @Test func requestReadTimeout() throws {
        var settings = SocketSettings(path: "/unused")
        settings.requestReadTimeout = 0.5
        let s = try InProcessServer(peers: [nil, nil, nil, nil], settings: settings)
        let started = Date()
        s.send(0, #"{"jsonrpc":"2.0","id":1,"meth"#)
        s.send(2, s.request(1, .subscribe))
        #expect(s.lines(2).first?["id"] == 1)
        s.send(3, s.request(1, .status))
        #expect(s.lines(3).first?["id"] == 1)
        let answer = s.lines(0).first
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["error"]?["message"]?.stringValue?.contains("RequestReadTimeout") == true)
        #expect(s.closedByServer(0))
        #expect(s.closedByServer(1), "a connection that never sent a request")
        let took = Date().timeIntervalSince(started)
        #expect(took >= 0.4 && took < 3, "closed after \(took) s")
        usleep(700_000)
        s.send(2, s.request(2, .status))
        #expect(s.lines(2).first?["id"] == 2, "an idle subscription was closed")
        s.send(3, s.request(2, .status))
        #expect(s.lines(3).first?["id"] == 2, "a client idle between requests was closed")
        // Bytes that keep coming do not keep a line open past the timeout.
        let drip = try InProcessServer(peers: [nil], settings: settings)
        let dripStart = Date()
        for byte in #"{"jsonrpc":"2.0","id":1,"#.utf8.prefix(8) {
            drip.send(0, String(UnicodeScalar(byte)))
            usleep(100_000)
        }
        #expect(drip.closedByServer(0))
        #expect(Date().timeIntervalSince(dripStart) < 3)
    }

    /// A batch whose answer would pass the 1 MiB line limit is one -32600 naming the
    /// limit, not a line over it; the connection goes on.
    @Test func answerOverTheLineLimitIsRefusedWhole() throws {
        let s = try InProcessServer(peers: [nil])
        let batch = "[" + (0..<3000).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"status"}"# }.joined(separator: ",") + "]\n"
        s.send(0, batch)
        let answer = s.lines(0).first
        #expect(answer?["id"] == .null)
        #expect(answer?["error"]?["code"] == -32600)
        #expect(answer?["error"]?["message"]?.stringValue?.contains("line limit of 1048576 bytes") == true)
        s.send(0, s.request(9, .status))
        #expect(s.lines(0).first?["id"] == 9)
    }

    /// Ids come back byte for byte, beyond 2^53 and in any number spelling, single and in
    /// a batch; the usual ids keep the fast path's bytes.
    @Test func idsAreEchoedByteForByte() throws {
        let s = try InProcessServer(peers: [nil])
        func raw(_ line: String) -> String {
            s.send(0, line + "\n")
            return s.clients[0].readLine() ?? ""
        }
        #expect(raw(#"{"jsonrpc":"2.0","id":9007199254740993,"method":"status"}"#).hasPrefix(#"{"jsonrpc":"2.0","id":9007199254740993,"result":"#))
        for id in ["1.50", "1e3", "-0", "12345678901234567890", "0.1"] {
            #expect(raw(#"{"jsonrpc":"2.0","id":\#(id),"method":"bogus"}"#).hasPrefix(#"{"jsonrpc":"2.0","id":\#(id),"error":"#))
        }
        #expect(raw(#"{"jsonrpc":"2.0","\u0069d":9007199254740993,"method":"bogus","params":{"id":1}}"#)
            .hasPrefix(#"{"jsonrpc":"2.0","id":9007199254740993,"#))
        let batch = raw(#"[{"jsonrpc":"2.0","id":99999999999999999999,"method":"bogus"},{"jsonrpc":"2.0","id":"x","method":"bogus"},7,{"jsonrpc":"2.0","id":2.50,"method":"status"}]"#)
        #expect(batch.contains(#""id":99999999999999999999,"#) && batch.contains(#""id":"x","#) && batch.contains(#""id":2.50,"#))
        #expect(raw(#"{"jsonrpc":"2.0","id":42,"method":"isEnabled","params":{"key":"new_checkout","default":false}}"#)
            .hasPrefix(#"{"jsonrpc":"2.0","id":42,"result":"#))
    }

    // MARK: - Keys

    private func parse(_ text: String) throws -> AgentConfiguration {
        try AgentConfiguration.parse("[Agent]\nApplicationCode=A\n" + text, file: "/etc/a.conf", environment: [:])
    }

    @Test func keysAndDefaults() throws {
        var c = try parse("")
        #expect(c.socket.maxConnections == 256 && c.http.maxConnections == 256)
        #expect(c.socket.requestReadTimeout == 30)
        c = try parse("MaxConnections=5\nRequestReadTimeout=2s\n[HTTP]\nMaxConnections=7\n")
        #expect(c.socket.maxConnections == 5 && c.http.maxConnections == 7)
        #expect(c.socket.requestReadTimeout == 2)
        #expect(AgentConfiguration.keyList.contains("HTTP\tMaxConnections\trestart\t-\n"))
        #expect(AgentConfiguration.keyList.contains("Agent\tRequestReadTimeout\treload\t-\n"))
    }

    @Test(arguments: [
        ("MaxConnections=65537", "/etc/a.conf:3: MaxConnections: invalid number \"65537\" (expected a whole number from 1 to 65536)"),
        ("RequestReadTimeout=0", "/etc/a.conf:3: RequestReadTimeout: time span must be above 0"),
        ("RequestReadTimeout=soon", "/etc/a.conf:3: RequestReadTimeout: invalid time span \"soon\""),
        ("[HTTP]\nMaxConnections=0", "/etc/a.conf:4: MaxConnections: invalid number \"0\""),
        ("[HTTP]\nMaxConnections=-1", "/etc/a.conf:4: MaxConnections: invalid number \"-1\""),
        ("[HTTP]\nMaxConnections=lots", "/etc/a.conf:4: MaxConnections: invalid number \"lots\""),
        ("[HTTP]\nMaxConnections=4294967297", "/etc/a.conf:4: MaxConnections: invalid number \"4294967297\""),
        ("[HTTP]\nRequestReadTimeout=5s", "/etc/a.conf:4: RequestReadTimeout: unknown key in [HTTP]"),
    ])
    func badValues(_ line: String, _ expected: String) {
        do {
            _ = try parse(line + "\n")
            Issue.record("accepted: \(line)")
        } catch {
            #expect("\(error)".hasPrefix(expected), "\(error)")
        }
    }
}
