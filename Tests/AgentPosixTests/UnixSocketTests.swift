import AgentPosix
import Foundation
import Glibc
import Launcher
import Testing
import HarnessSupport

private func fileMode(_ path: String) -> (isSocket: Bool, permissions: mode_t, gid: gid_t)? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return (info.st_mode & S_IFMT == S_IFSOCK, info.st_mode & 0o7777, info.st_gid)
}

/// Leaves a socket file behind that nobody listens on (a crashed agent's).
private func makeStaleSocket(_ path: String) throws {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var (address, length) = try UnixSocket.address(path)
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    #expect(result == 0)
}

@Suite struct UnixListenerTests {
    @Test func createsTheSocketWithTheDefaultMode() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let listener = try UnixListener(path: path)
        let mode = try #require(fileMode(path))
        #expect(mode.isSocket)
        #expect(mode.permissions == 0o660)
        #expect(listener.ownsPath)
        #expect(listener.path == path)
    }

    @Test func appliesTheModeAndGroupAsked() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let groupName = try #require(UnixSocket.userName(getuid()).flatMap { _ in
            getgrgid(getgid()).map { String(cString: $0.pointee.gr_name) }
        })
        let listener = try UnixListener(path: path, mode: 0o600, group: groupName)
        let mode = try #require(fileMode(path))
        #expect(mode.permissions == 0o600)
        #expect(mode.gid == getgid())
        _ = listener
    }

    @Test func unknownGroupIsRefusedByName() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let error = #expect(throws: UnixSocketError.self) {
            try UnixListener(path: path, group: "no-such-group-pwa")
        }
        #expect(error?.code == .unknownGroup)
        #expect(error?.description.contains("no-such-group-pwa") == true)
        #expect(fileMode(path) == nil)
    }

    @Test func umaskDuringBindIsRestored() throws {
        let dir = TempDir()
        let before = umask(0o022)
        umask(before)
        _ = try UnixListener(path: dir.file("a.sock"))
        let after = umask(before)
        umask(after)
        #expect(after == before)
    }

    @Test func closeRemovesTheSocketFile() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let listener = try UnixListener(path: path)
        #expect(fileMode(path) != nil)
        listener.close()
        #expect(fileMode(path) == nil)
    }

    @Test func staleSocketIsReplaced() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        try makeStaleSocket(path)
        #expect(fileMode(path)?.isSocket == true)
        let listener = try UnixListener(path: path)
        // The new socket answers.
        let client = try TestClient(path: path)
        #expect(client.fd >= 0)
        _ = listener
    }

    @Test func fileThatIsNotASocketIsRefusedAndKept() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("keep me".utf8)))
        let error = #expect(throws: UnixSocketError.self) { try UnixListener(path: path) }
        #expect(error?.code == .notASocket)
        #expect(error?.description.contains(path) == true)
        #expect(FileManager.default.contents(atPath: path) == Data("keep me".utf8))
    }

    @Test func liveListenerIsRefusedAndLeftAlone() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let first = try UnixListener(path: path)
        let error = #expect(throws: UnixSocketError.self) { try UnixListener(path: path) }
        #expect(error?.code == .alreadyListening)
        #expect(error?.description == "another agent is already listening on \(path)")
        // The first agent still serves.
        let client = try TestClient(path: path)
        #expect(try first.accept() != nil)
        _ = client
    }

    @Test func pathTooLongIsRefused() throws {
        let path = "/tmp/" + String(repeating: "x", count: 120)
        let error = #expect(throws: UnixSocketError.self) { try UnixListener(path: path) }
        #expect(error?.code == .pathTooLong)
    }

    @Test func adoptedSocketIsNeverUnlinked() throws {
        let dir = TempDir()
        let path = dir.file("activated.sock")
        // What systemd would pass: a bound, listening socket.
        let raw = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var (address, length) = try UnixSocket.address(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(raw, $0, length) }
        }
        #expect(bound == 0)
        #expect(listen(raw, 16) == 0)
        let listener = try UnixListener(adopting: raw)
        #expect(!listener.ownsPath)
        #expect(listener.path == path)
        #expect(fcntl(raw, F_GETFL) & O_NONBLOCK != 0)
        #expect(fcntl(raw, F_GETFD) & FD_CLOEXEC != 0)
        listener.close()
        #expect(fileMode(path)?.isSocket == true)
        #expect(fcntl(raw, F_GETFD) == -1)  // closed
    }

    @Test func adoptingASocketThatDoesNotListenIsRefused() throws {
        let raw = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(raw) }
        let error = #expect(throws: UnixSocketError.self) { try UnixListener(adopting: raw) }
        #expect(error?.code == .notListening)
        #expect(fcntl(raw, F_GETFD) != -1)  // left open for the caller
    }

    @Test func acceptedConnectionsAreNonBlockingAndCloseOnExec() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let listener = try UnixListener(path: path)
        #expect(try listener.accept() == nil)  // none waiting: no blocking
        let client = try TestClient(path: path)
        guard let accepted = try listener.accept() else {
            Issue.record("no connection to accept")
            return
        }
        #expect(fcntl(accepted.rawValue, F_GETFL) & O_NONBLOCK != 0)
        #expect(fcntl(accepted.rawValue, F_GETFD) & FD_CLOEXEC != 0)
        _ = client
    }
}

@Suite struct PeerCredentialTests {
    @Test func peerCredentialsAreThisProcess() throws {
        let dir = TempDir()
        let path = dir.file("agent.sock")
        let listener = try UnixListener(path: path)
        let client = try TestClient(path: path)
        guard let accepted = try listener.accept() else {
            Issue.record("no connection to accept")
            return
        }
        let credentials = try UnixSocket.peerCredentials(accepted.rawValue)
        #expect(credentials.pid == getpid() && credentials.uid == getuid() && credentials.gid == getgid())
        // The kernel's supplementary groups: this process's own (getgroups).
        var own = [gid_t](repeating: 0, count: Int(getgroups(0, nil)))
        own = Array(own.prefix(Int(getgroups(Int32(own.count), &own))))
        #expect(credentials.groups.map { Set($0) } == Set(own))
        // And from the client's side, the listener's process (also us).
        #expect(try UnixSocket.peerCredentials(client.fd).pid == getpid())
    }

    @Test func peerCredentialsOfANonSocketFail() throws {
        let error = #expect(throws: PosixError.self) { try UnixSocket.peerCredentials(0x7fff_0000) }
        #expect(error?.errno == EBADF)
        #expect(error?.call == "getsockopt(SO_PEERCRED)")
    }

    @Test func groupMembership() throws {
        let primary = try #require(getgrgid(getgid()).map { String(cString: $0.pointee.gr_name) })
        let me = PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid(), groups: [])
        #expect(UnixSocket.isMember(me, ofGroup: primary))
        #expect(!UnixSocket.isMember(me, ofGroup: "no-such-group-pwa"))
        // A user without a passwd entry is a member through its gid.
        #expect(UnixSocket.isMember(PeerCredentials(pid: 1, uid: 4_000_000_000, gid: getgid()), ofGroup: primary))
        // Supplementary groups are the kernel's (SO_PEERGROUPS), not the group database's:
        // root, its primary group elsewhere and "nogroup" among its groups, is a member.
        if let nogroup = getgrnam("nogroup").map({ String(cString: $0.pointee.gr_name) }) {
            #expect(!UnixSocket.isMember(PeerCredentials(pid: 1, uid: 0, gid: 0, groups: []), ofGroup: nogroup))
            #expect(UnixSocket.isMember(PeerCredentials(pid: 1, uid: 0, gid: 0, groups: [65_534]), ofGroup: nogroup))
        }
        #expect(UnixSocket.userName(0) == "root")
        #expect(UnixSocket.groupID(named: "root") == 0)
    }
}

@Suite struct NotifyReceiverTests {
    @Test func receivesDatagramsSentToItsPath() throws {
        let dir = TempDir()
        let path = dir.file("notify.sock")
        let receiver = try NotifyReceiver(path: path)
        let sender = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(sender) }
        var (address, length) = try UnixSocket.address(path)
        for message in ["READY=1\nSTATUS=hello", "WATCHDOG=1"] {
            let sent = message.utf8CString.withUnsafeBytes { bytes in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(sender, bytes.baseAddress, bytes.count - 1, 0, $0, length)
                    }
                }
            }
            #expect(sent == message.utf8.count)
        }
        #expect(receiver.receive(timeout: 1) == "READY=1\nSTATUS=hello")
        #expect(receiver.receive(timeout: 1) == "WATCHDOG=1")
        let start = monotonicSeconds()
        #expect(receiver.receive(timeout: 0.05) == nil)
        #expect(monotonicSeconds() - start >= 0.04)
    }

    @Test func removesItsSocketFileWhenReleased() throws {
        let dir = TempDir()
        let path = dir.file("notify.sock")
        do {
            let receiver = try NotifyReceiver(path: path)
            #expect(fileMode(path)?.isSocket == true)
            _ = receiver
        }
        #expect(fileMode(path) == nil)
    }
}
