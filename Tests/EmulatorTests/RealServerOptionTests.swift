import AgentCore
import Emulator
import EmulatorCore
import Foundation
import Testing
import HarnessSupport

/// The emulator's options for meeting the real server: TLS, upstream, record, replay, and
/// each bad value refused naming the option.
@Suite struct RealServerOptionTests {
    @Test func parsesThem() throws {
        let o = try EmulatorCommand.parse(["--tls-cert", "c.pem", "--tls-key=k.pem", "--upstream", "https://x.example/json/1.3",
                                           "--record", "s.har"])
        #expect(o.tlsCertificate == "c.pem" && o.tlsKey == "k.pem")
        #expect(o.upstream == "https://x.example/json/1.3/")
        #expect(o.recordFile == "s.har")
        #expect(try EmulatorCommand.parse(["--replay", "s.har"]).replayFile == "s.har")
        #expect(try EmulatorCommand.parse(["--apps-from-har", "s.har"]).appsFromHAR == "s.har")
    }

    @Test(arguments: [
        (["--tls-cert", "c.pem"], "--tls-cert needs --tls-key"),
        (["--tls-key", "k.pem"], "--tls-key needs --tls-cert"),
        (["--record", "s.har"], "--record needs --upstream URL"),
        (["--upstream", "x.example"], "--upstream: expected an http:// or https:// URL with a host, found \"x.example\""),
        (["--upstream", "http://x/", "--replay", "s.har"], "--replay and --upstream exclude each other"),
        // The connection budget (docs/emulator.md D.5).
        (["--idle-timeout", "0"], "--idle-timeout: expected a number 1-86400, found \"0\""),
        (["--idle-timeout", "soon"], "--idle-timeout: expected a number 1-86400, found \"soon\""),
        (["--idle-timeout"], "--idle-timeout needs a value"),
        (["--max-connections", "15"], "--max-connections: expected a number 16-1000000, found \"15\""),
    ])
    func refusesBadCombinations(_ args: [String], _ message: String) {
        do {
            _ = try EmulatorCommand.parse(args)
            Issue.record("accepted \(args)")
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func tlsFilesAreChecked() throws {
        let dir = TempDir()
        let junk = dir.file("junk.pem")
        try Data("hello".utf8).write(to: URL(fileURLWithPath: junk))
        #expect(throws: EmulatorServerError(description: "--tls-cert: \"\(dir.path)/none.pem\": no such file")) {
            try TLSIdentity.load(certificate: dir.path + "/none.pem", key: junk)
        }
        #expect(throws: EmulatorServerError(description: "--tls-cert: \"\(junk)\" is not PEM (no \"-----BEGIN CERTIFICATE-----\" line)")) {
            try TLSIdentity.load(certificate: junk, key: junk)
        }
        // A certificate with a key that is not its own: libmicrohttpd refuses to start, and says so.
        let cert = dir.file("c.pem"), key = dir.file("k.pem")
        let other = dir.file("o.pem")
        for (out, keyOut) in [(cert, key), (other, dir.file("ok.pem"))] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            p.arguments = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", keyOut,
                           "-out", out, "-days", "1", "-subj", "/CN=127.0.0.1"]
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
        }
        let good = try TLSIdentity.load(certificate: cert, key: key)
        let server = try EmulatorServer(listen: "127.0.0.1:0", tls: good)
        #expect(try server.start() > 0)
        server.stop()
        let mismatched = try TLSIdentity.load(certificate: other, key: key)
        let refused = try EmulatorServer(listen: "127.0.0.1:0", tls: mismatched)
        #expect(throws: EmulatorServerError.self) { try refused.start() }
    }
}
