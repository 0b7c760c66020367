import AgentConfigFile
import AgentCurl
import AgentPosix
import Foundation
import Glibc
import Testing
@testable import AgentDaemon
import HarnessSupport

/// `[Agent] CAFile=` and `[Agent] Proxy=`: what is accepted, and every bad value refused
/// naming the file, line and key.
@Suite struct NetworkSettingsTests {
    private static let file = "/etc/pushwoosh-agent/agent.conf"

    private func parse(_ lines: String) throws -> AgentConfiguration {
        try AgentConfiguration.parse("[Agent]\nApplicationCode=A\n\(lines)\n", file: Self.file, environment: [:])
    }

    private func error(_ lines: String) -> String {
        do {
            _ = try parse(lines)
            return "accepted"
        } catch {
            return "\(error)"
        }
    }

    /// A real certificate (a throw-away self-signed one, made for this file).
    static let certificate = """
        -----BEGIN CERTIFICATE-----
        MIIBfjCCASWgAwIBAgIUJ9IwHow6Rfdi4RuZOEQmIOVajlEwCgYIKoZIzj0EAwIw
        FTETMBEGA1UEAwwKcHctdGVzdC1jYTAeFw0yNjEyMDIxNzUxMzFaFw0yNjEyMDMx
        NzUxMzFaMBUxEzARBgNVBAMMCnB3LXRlc3QtY2EwWTATBgcqhkjOPQIBBggqhkjO
        PQMBBwNCAARE6K1V6/2+V64IgU2HzN1R7JMqip90F9QTXy4L5yuIoX3pADvBCJHS
        4fG0KGrTUmsvnr/pY5/TMyb9lCoH1pIeo1MwUTAdBgNVHQ4EFgQUNpJlttRGZH0A
        sUV63dok6gHm/F8wHwYDVR0jBBgwFoAUNpJlttRGZH0AsUV63dok6gHm/F8wDwYD
        VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiAHQTy48zFqHbTV+PRO4yOz
        UxtwREtigpixQzTTChO8ZQIgZgWQ6TAiFYg9UfyFiSeblXFUGEuX1dsdOU5jnLCl
        des=
        -----END CERTIFICATE-----

        """

    @Test func caFileIsReadWithItsCertificates() throws {
        let dir = TempDir(files: ["ca.pem": Self.certificate + Self.certificate])
        let path = dir.file("ca.pem")
        let c = try parse("CAFile=\(path)")
        #expect(c.network.caFile?.path == path)
        #expect(c.network.caFile?.certificates == 2)
        #expect(c.network.options.caCertificates == Array((Self.certificate + Self.certificate).utf8))
        #expect(c.description.contains("caFile=\(path)"))
        #expect(try parse("").network.options == NetworkOptions())
        #expect(try parse("CAFile=\(path)\nCAFile=").network.caFile == nil)  // empty: back to none
    }

    @Test func badCAFilesNameTheKeyAndTheProblem() throws {
        let dir = TempDir(files: [
            "key.pem": "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n",
            "empty.pem": "",
            "open.pem": "-----BEGIN CERTIFICATE-----\nMIIBfzCCASWgAwIBAgIU\n",
            "junk.pem": "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        ])
        func path(_ name: String) -> String { dir.file(name) }
        let prefix = "\(Self.file):3: CAFile: "
        #expect(error("CAFile=\(path("missing.pem"))") == prefix + "cannot read \"\(path("missing.pem"))\": no such file")
        #expect(error("CAFile=\(path("key.pem"))")
            == prefix + "\"\(path("key.pem"))\" holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)")
        #expect(error("CAFile=\(path("empty.pem"))").hasPrefix(prefix + "\"\(path("empty.pem"))\" holds no PEM certificate"))
        #expect(error("CAFile=\(path("open.pem"))") == prefix + "\"\(path("open.pem"))\": certificate 1 has no -----END CERTIFICATE----- line")
        #expect(error("CAFile=\(path("junk.pem"))") == prefix + "\"\(path("junk.pem"))\": certificate 1 is not base64 of a DER certificate")
        #expect(error("CAFile=ca.pem") == prefix + "not an absolute path: \"ca.pem\"")
        #expect(mkdir(dir.file("certs"), 0o755) == 0)
        #expect(error("CAFile=\(dir.file("certs"))") == prefix + "\"\(dir.file("certs"))\": not a regular file (a directory)")
    }

    /// A CA file anyone may write to lets anyone add a CA: refused, naming the file and its mode
    /// (as a TokenFile is); a FIFO (a swapped file) is refused at once, never waited on.
    @Test func caFilesOthersCanWriteOrThatAreNotFilesAreRefused() throws {
        let dir = TempDir(files: ["ca.pem": Self.certificate])
        let prefix = "\(Self.file):3: CAFile: "
        chmod(dir.file("ca.pem"), 0o666)
        #expect(error("CAFile=\(dir.file("ca.pem"))")
            == prefix + "\"\(dir.file("ca.pem"))\": writable by others (mode 0666): anyone could change what it says")
        chmod(dir.file("ca.pem"), 0o644)
        #expect(try parse("CAFile=\(dir.file("ca.pem"))").network.caFile?.certificates == 1)
        #expect(mkfifo(dir.file("fifo.pem"), 0o644) == 0)
        let started = Date()
        #expect(error("CAFile=\(dir.file("fifo.pem"))") == prefix + "\"\(dir.file("fifo.pem"))\": not a regular file (a FIFO)")
        #expect(Date().timeIntervalSince(started) < 1)
        #expect(symlink(dir.file("ca.pem"), dir.file("link.pem")) == 0)
        #expect(error("CAFile=\(dir.file("link.pem"))").hasPrefix(prefix + "\"\(dir.file("link.pem"))\": a symbolic link"))
    }

    /// A CA file in a directory others can write is refused as a 0666 one is, the directory and
    /// its mode named: anyone could put their own file in its place. The sticky bit (/tmp) does
    /// not save it: whoever made the name first owns the file. A group the agent does not run as,
    /// or another user owning the directory, is refused the same way; 0755 (root's) is fine.
    static let openDirectories: [(mode_t, String)] = [
        (0o777, "which others can write (mode 0777): anyone could put another file in its place"),
        (0o1777, "which others can write (mode 1777, sticky: whoever made the name first owns the file and may change it); "
            + "keep it in a directory only its owner can write"),
        (0o773, "which others can write (mode 0773): anyone could put another file in its place"),
    ]

    @Test(arguments: openDirectories)
    func caFileInADirectoryOthersCanWriteIsRefused(_ mode: mode_t, _ why: String) throws {
        let dir = TempDir()
        let open = dir.file("open")
        #expect(mkdir(open, 0o700) == 0 && chmod(open, mode) == 0)
        try Self.certificate.write(toFile: open + "/ca.pem", atomically: false, encoding: .utf8)
        chmod(open + "/ca.pem", 0o644)
        #expect(error("CAFile=\(open)/ca.pem") == "\(Self.file):3: CAFile: \"\(open)/ca.pem\": in \(open), \(why)")
        chmod(open, 0o755)
        #expect(try parse("CAFile=\(open)/ca.pem").network.caFile?.certificates == 1)
    }

    @Test func caFileInADirectoryOfAnotherUserOrGroupIsRefused() throws {
        let dir = TempDir()
        let theirs = dir.file("theirs")
        #expect(mkdir(theirs, 0o755) == 0)
        try Self.certificate.write(toFile: theirs + "/ca.pem", atomically: false, encoding: .utf8)
        chmod(theirs + "/ca.pem", 0o644)
        let nobody = try #require(getpwnam("nobody")?.pointee)
        #expect(chown(theirs, nobody.pw_uid, getegid()) == 0)
        #expect(error("CAFile=\(theirs)/ca.pem")
            == "\(Self.file):3: CAFile: \"\(theirs)/ca.pem\": in \(theirs), owned by uid \(nobody.pw_uid): that user could put another file in its place")
        #expect(chown(theirs, geteuid(), nobody.pw_gid) == 0 && chmod(theirs, 0o775) == 0)
        #expect(error("CAFile=\(theirs)/ca.pem")
            == "\(Self.file):3: CAFile: \"\(theirs)/ca.pem\": in \(theirs), which group \(nobody.pw_gid) can write (mode 0775): its members could put another file in its place")
    }

    @Test func proxyAccepted() throws {
        #expect(try parse("Proxy=http://proxy.example:3128").network.proxy == "http://proxy.example:3128")
        #expect(try parse("Proxy= socks5h://127.0.0.1:1080 ").network.proxy == "socks5h://127.0.0.1:1080")
        #expect(try parse("Proxy=https://[::1]:8443/").network.options.proxy == "https://[::1]:8443/")
        #expect(try parse("Proxy=http://proxy.example:3128\nProxy=").network.proxy == nil)
    }

    @Test(arguments: ["proxy.example:3128", "ftp://proxy.example", "http://", "http://proxy example:3128",
                      "http://proxy.example:3128/path", "http://proxy.example:3128?x=1"])
    func badProxies(_ value: String) {
        let e = error("Proxy=\(value)")
        #expect(e.hasPrefix("\(Self.file):3: Proxy: invalid proxy \""), "\(e)")
    }

    /// An invalid `Proxy=` is reported without its password (with a scheme or without).
    @Test(arguments: ["http://user:s3cret@proxy example:3128", "user:s3cret@proxy.example:3128", "http://user:s3cret@/x"])
    func invalidProxyKeepsItsPassword(_ value: String) {
        let e = error("Proxy=\(value)")
        #expect(e.hasPrefix("\(Self.file):3: Proxy: invalid proxy \""), "\(e)")
        #expect(!e.contains("s3cret") && e.contains("user:<redacted>@"), "\(e)")
    }

    @Test func proxyPasswordNeverShown() throws {
        let c = try parse("Proxy=http://user:s3cret@proxy.example:3128")
        #expect(c.network.proxy == "http://user:s3cret@proxy.example:3128")
        #expect(!c.description.contains("s3cret"))
        #expect(c.description.contains("proxy=http://user:<redacted>@proxy.example:3128"))
    }

    @Test func problemsAreNamedFromTheirMessages() {
        for problem in NetworkProblem.allCases where !problem.phrase.isEmpty {
            #expect(NetworkProblem.of(message: "no response: \(problem.phrase): detail (curl 60)") == problem)
        }
        #expect(NetworkProblem.of(message: "no response: Could not resolve host: x.invalid (curl 6)") == .nameResolution)
        #expect(NetworkProblem.of(message: "no response: Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server (curl 7)") == .connection)
        #expect(NetworkProblem.of(message: "no response: Operation timed out after 1000 milliseconds with 0 bytes received (curl 28)") == .timeout)
        #expect(NetworkProblem.of(message: "no response: Failure when receiving data from the peer (curl 56)") == .other)
        #expect(NetworkProblem.of(message: "no response: (curl 7") == .other)
    }
}
