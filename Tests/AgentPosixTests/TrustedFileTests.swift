import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing

/// docs/shared-host.md L.4: a file read for trust is checked on its open descriptor; a FIFO, a
/// device, a directory or a symlink is refused without blocking, and so is one others can write.
@Suite struct TrustedFileTests {
    func write(_ path: String, _ text: String, mode: mode_t = 0o600) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        #expect(chmod(path, mode) == 0)
    }

    func refusal(_ path: String, maxBytes: Int = 1024, refuseWritableByOthers: Bool = true) -> String? {
        do {
            _ = try readTrustedFile(path: path, maxBytes: maxBytes, refuseWritableByOthers: refuseWritableByOthers)
            return nil
        } catch {
            #expect(error.path == path)
            return error.description
        }
    }

    @Test func readsARegularFileWhole() throws {
        let dir = TempDir(), path = dir.file("token")
        try write(path, "s3cret\n")
        #expect(try readTrustedFile(path: path, maxBytes: 7, refuseWritableByOthers: true) == Array("s3cret\n".utf8))
        try write(path, "")
        #expect(try readTrustedFile(path: path, maxBytes: 7, refuseWritableByOthers: true) == [])
        let big = String(repeating: "x", count: 200_000)
        try write(path, big)
        #expect(try readTrustedFile(path: path, maxBytes: 200_000, refuseWritableByOthers: true).count == 200_000)
    }

    @Test func aFIFOIsRefusedWithoutBlocking() throws {
        let dir = TempDir(), path = dir.file("fifo")
        #expect(mkfifo(path, 0o600) == 0)
        let started = monotonicSeconds()
        #expect(refusal(path) == "\(path): is a FIFO, not a regular file")
        #expect(monotonicSeconds() - started < 1)
    }

    @Test func whatIsNotARegularFileIsRefused() throws {
        let dir = TempDir(), target = dir.file("target"), link = dir.file("link")
        try write(target, "s3cret")
        #expect(symlink(target, link) == 0)
        #expect(refusal(link) == "\(link): is a symbolic link (refused: a file read for trust is opened as itself)")
        #expect(refusal(dir.path) == "\(dir.path): is a directory, not a regular file")
        #expect(refusal("/dev/zero") == "/dev/zero: is a character device, not a regular file")
        #expect(refusal(dir.file("none")) == "\(dir.file("none")): cannot open it: No such file or directory")
        try write(target, String(repeating: "x", count: 1025))
        #expect(refusal(target) == "\(target): is 1025 bytes, over the limit of 1024")
    }

    @Test func aFileOthersCanWriteIsRefusedWhenItHoldsTrust() throws {
        let dir = TempDir(), path = dir.file("ca.pem")
        try write(path, "trusted", mode: 0o666)
        #expect(refusal(path) == "\(path): is writable by others (mode 0666): anyone who can write it chooses what is trusted; "
                + "chmod 0600 (or 0640 with this process's group)")
        #expect(refusal(path, refuseWritableByOthers: false) == nil)
        try write(path, "trusted", mode: 0o644)
        #expect(refusal(path) == nil)
        // Writable by a group the process does not run as (root can give the file one).
        try write(path, "trusted", mode: 0o620)
        let group = getegid() &+ 4242
        if chown(path, geteuid(), group) == 0 {
            #expect(refusal(path) == "\(path): is writable by group \(group), which this process does not run as (mode 0620): "
                    + "anyone who can write it chooses what is trusted; chmod 0600 (or 0640 with this process's group)")
        }
        #expect(chown(path, geteuid(), getegid()) == 0)
        #expect(refusal(path) == nil)  // its own group may write it
    }
}
