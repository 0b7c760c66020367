@testable import Emulator
import AgentCore
import AgentPosix
import EmulatorCore
import Foundation
import Glibc
import HarnessSupport
import Testing

/// The emulator on a shared host, over real HTTP: `--admin-token` answers 401 before a
/// body is read, bodies are bounded per request and in total, `--listen` stays on loopback
/// unless `--allow-remote`, and the token file's errors are named.
@Suite struct LockedEmulatorTests {
    static let token = "adm1n-\(UUID().uuidString)"

    func withLockedServer(_ body: (EmulatorServer, UInt16) throws -> Void) throws {
        let server = try EmulatorServer(listen: "127.0.0.1:0", configuration: EmulatorConfiguration(requireToken: "api", adminToken: Self.token),
                                        apps: try EmulatorCommand.loadApps(path: exampleFile), threads: 2)
        let port = try server.start()
        defer { server.stop() }
        try body(server, port)
    }

    @Test("--admin-token: 401 without the token, answered at the headers (a 20 MiB body never sent); 200 with it")
    func adminTokenOverHTTP() throws {
        try withLockedServer { server, port in
            let refused = try RawSocket.answer(port: port, "PUT /admin/apps/X HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20971520\r\n\r\n")
            #expect(refused.status == 401)
            #expect(refused.text.contains("WWW-Authenticate: Bearer"))
            #expect(try RawSocket.answer(port: port, "GET /admin/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Self.token)\r\nConnection: close\r\n\r\n").status == 200)
            #expect(try RawSocket.answer(port: port, "DELETE /admin/apps/ABCDE-12345 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\(Self.token)\r\nConnection: close\r\n\r\n").status == 401)
            #expect(server.withState { $0.apps["ABCDE-12345"] != nil })  // refused: nothing removed
        }
    }

    @Test("Bodies over their route's limit get 413: announced (at the headers) or chunked (once it passes)")
    func bodiesAreBounded() throws {
        try withLockedServer { _, port in
            let announced = try RawSocket.answer(port: port, "POST /json/1.3/getFeatureFlags HTTP/1.1\r\nHost: x\r\nContent-Length: \((1 << 20) + 1)\r\n\r\n")
            #expect(announced.status == 413)
            #expect(announced.text.contains("body larger than 1048576 bytes"))
            let chunked = try RawSocket(port: port)
            chunked.send("POST /json/1.3/getFeatureFlags HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            let piece = String(repeating: "a", count: 256 << 10)
            for _ in 0..<5 { chunked.send(String(256 << 10, radix: 16) + "\r\n" + piece + "\r\n") }
            chunked.send("0\r\n\r\n")
            #expect(chunked.read(timeout: 5).status == 413)
            // Under the limit: answered as usual.
            let fine = try RawSocket(port: port)
            fine.device("getFeatureFlags", hwid: "h1")
            #expect(fine.read(timeout: 2).status == 401)  // --require-token: the device API's own check, after the body
        }
    }

    @Test("Bodies in flight are bounded in total: past the budget a request is refused, and the budget comes back")
    func bodyBudget() {
        let budget = BodyBudget()
        #expect(budget.reserve(BodyBudget.limit - 10))
        #expect(!budget.reserve(11))
        #expect(budget.reserve(10))
        budget.release(BodyBudget.limit)
        #expect(budget.bytes == 0)
        do {
            let context = RequestContext(budget: budget)
            #expect(context.reserve(1000))
            #expect(budget.bytes == 1000)
        }
        #expect(budget.bytes == 0)  // a connection that goes away gives its bytes back
    }

    @Test("--listen: loopback only, unless --allow-remote")
    func listenStaysOnLoopback() throws {
        for address in ["0.0.0.0:8080", "192.168.1.5:80", "10.0.0.1:0"] {
            do {
                _ = try EmulatorCommand.parse(["--listen", address])
                Issue.record("accepted \(address)")
            } catch {
                #expect(error.description == "--listen \(address): not a loopback address: other hosts could reach the device and admin APIs; add --allow-remote to mean it (and lock the admin API with --admin-token FILE)")
            }
            #expect(try EmulatorCommand.parse(["--listen", address, "--allow-remote"]).allowRemote)
        }
        #expect(try EmulatorCommand.parse(["--listen", "127.0.0.2:0"]).listen == "127.0.0.2:0")
        #expect(try EmulatorCommand.parse(["--listen", "localhost:0"]).allowRemote == false)
        #expect(throws: EmulatorCommand.UsageError.self) { try EmulatorCommand.parse(["--allow-remote=yes"]) }
        #expect(throws: EmulatorCommand.UsageError.self) { try EmulatorCommand.parse(["--admin-token"]) }
        #expect(throws: EmulatorCommand.UsageError.self) { try EmulatorCommand.parse(["--admin-token", ""]) }
        #expect(try EmulatorCommand.parse(["--admin-token", "/etc/token"]).adminTokenFile == "/etc/token")
    }

    @Test("--admin-token FILE: the file's content; a missing, empty or spaced token is an error naming the file")
    func adminTokenFile() throws {
        let temporary = TempDir(), path = temporary.file("admin-token")
        #expect(throws: EmulatorServerError(description: "--admin-token \(path): no such file")) {
            try EmulatorCommand.loadAdminToken(path: path)
        }
        try Data("s3cret\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(try EmulatorCommand.loadAdminToken(path: path) == "s3cret")
        try Data(" \n\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: EmulatorServerError(description: "--admin-token \(path): the file is empty")) {
            try EmulatorCommand.loadAdminToken(path: path)
        }
        try Data("two words\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: EmulatorServerError(description: "--admin-token \(path): the token contains whitespace")) {
            try EmulatorCommand.loadAdminToken(path: path)
        }
    }

    @Test("--admin-token and --tls-key are opened safely: a FIFO never blocks the start; a symlink or a file others can write is refused")
    func trustedFilesAreOpenedSafely() throws {
        let dir = TempDir()
        let fifo = dir.file("token-fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(errorWithin2Seconds(unblocking: fifo) { _ = try EmulatorCommand.loadAdminToken(path: fifo) }
                == "--admin-token \(fifo): not a regular file (a FIFO)")

        let token = dir.file("token"), link = dir.file("token-link")
        try Data("s3cret".utf8).write(to: URL(fileURLWithPath: token))
        #expect(chmod(token, 0o666) == 0)
        #expect(Self.error { _ = try EmulatorCommand.loadAdminToken(path: token) }
                == "--admin-token \(token): writable by others (mode 0666): anyone could change what it says")
        #expect(chmod(token, 0o600) == 0)
        #expect(symlink(token, link) == 0)
        #expect(Self.error { _ = try EmulatorCommand.loadAdminToken(path: link) }
                == "--admin-token \(link): a symbolic link (not followed: name the file itself)")
        #expect(try EmulatorCommand.loadAdminToken(path: token) == "s3cret")

        let cert = dir.file("c.pem"), key = dir.file("k.pem")
        try Data("-----BEGIN CERTIFICATE-----\n".utf8).write(to: URL(fileURLWithPath: cert))
        try Data("-----BEGIN PRIVATE KEY-----\n".utf8).write(to: URL(fileURLWithPath: key))
        #expect(chmod(key, 0o646) == 0)
        #expect(Self.error { _ = try TLSIdentity.load(certificate: cert, key: key) }
                == "--tls-key: \"\(key)\": writable by others (mode 0646): anyone could change what it says")
        #expect(chmod(key, 0o600) == 0)
        #expect(Self.error { _ = try TLSIdentity.load(certificate: fifo, key: key) } == "--tls-cert: \"\(fifo)\": not a regular file (a FIFO)")
    }

    /// `--require-token FILE`: the device API's token is read from a file, as `--admin-token`'s,
    /// so it never stands on a command line; a file others can write, a symlink, an empty file, a
    /// token with whitespace, or a token given in place of the file are refused naming the file.
    /// (Before: `--require-token TOKEN`, the secret in `ps` for every local user.)
    @Test func requireTokenIsReadFromAFile() throws {
        let dir = TempDir(files: ["api-token": "api-s3cret\n", "empty": " \n", "two": "two words\n"])
        let token = dir.file("api-token")
        #expect(chmod(token, 0o600) == 0)
        #expect(try EmulatorCommand.parse(["--require-token", token]).requireTokenFile == token)
        #expect(try EmulatorCommand.loadRequireToken(path: token) == "api-s3cret")
        #expect(chmod(token, 0o666) == 0)
        #expect(Self.error { _ = try EmulatorCommand.loadRequireToken(path: token) }
                == "--require-token \(token): writable by others (mode 0666): anyone could change what it says")
        #expect(chmod(token, 0o600) == 0)
        #expect(symlink(token, dir.file("link")) == 0)
        #expect(Self.error { _ = try EmulatorCommand.loadRequireToken(path: dir.file("link")) }
                == "--require-token \(dir.file("link")): a symbolic link (not followed: name the file itself)")
        #expect(Self.error { _ = try EmulatorCommand.loadRequireToken(path: dir.file("empty")) }
                == "--require-token \(dir.file("empty")): the file is empty")
        #expect(Self.error { _ = try EmulatorCommand.loadRequireToken(path: dir.file("two")) }
                == "--require-token \(dir.file("two")): the token contains whitespace")
        #expect(Self.error { _ = try EmulatorCommand.loadRequireToken(path: "api-s3cret") }
                == "--require-token api-s3cret: no such file")
        #expect(Self.error { _ = try EmulatorCommand.parse(["--require-token", ""]) } == "--require-token: expected a file name")
    }

    /// A private key its group or others can read is refused, as an admin token others can write
    /// is: anyone who reads it can be the emulator. 0600 and 0400 are taken; the certificate, no
    /// secret, may be 0644. (Before: 0644 and 0640 keys were served with.)
    @Test(arguments: [(0o644 as mode_t, "0644"), (0o640, "0640"), (0o604, "0604"), (0o444, "0444")])
    func aKeyOthersCanReadIsRefused(_ mode: mode_t, _ shown: String) throws {
        let dir = TempDir()
        let cert = dir.file("c.pem"), key = dir.file("k.pem")
        try Data("-----BEGIN CERTIFICATE-----\n".utf8).write(to: URL(fileURLWithPath: cert))
        try Data("-----BEGIN PRIVATE KEY-----\n".utf8).write(to: URL(fileURLWithPath: key))
        #expect(chmod(cert, 0o644) == 0 && chmod(key, mode) == 0)
        #expect(Self.error { _ = try TLSIdentity.load(certificate: cert, key: key) }
                == "--tls-key: \"\(key)\": readable by others (mode \(shown)): a secret must be its owner's alone (chmod 600)")
        for fine: mode_t in [0o600, 0o400] {
            #expect(chmod(key, fine) == 0)
            #expect(Self.error { _ = try TLSIdentity.load(certificate: cert, key: key) } == "accepted")
        }
    }

    static func error(_ body: () throws -> Void) -> String {
        do {
            try body()
            return "accepted"
        } catch {
            return "\(error)"
        }
    }
}

/// The error `body` throws reading `fifo`, run on a thread of its own; nil when it has not
/// returned within 2 s (blocked in open(2): the FIFO is then given a writer so the thread ends).
func errorWithin2Seconds(unblocking fifo: String, _ body: @escaping @Sendable () throws -> Void) -> String? {
    let lock = NSLock(), box = MessageBox()
    Thread { let m = LockedEmulatorTests.error(body); lock.withLock { box.text = m } }.start()
    let started = monotonicSeconds()
    while lock.withLock({ box.text }) == nil, monotonicSeconds() - started < 2 { usleep(10_000) }
    let message = lock.withLock { box.text }
    if message == nil {
        let unblock = open(fifo, O_WRONLY | O_NONBLOCK)
        if unblock >= 0 { close(unblock) }
    }
    return message
}

/// What a thread found, read under the test's lock.
private final class MessageBox: @unchecked Sendable {
    var text: String?
}
