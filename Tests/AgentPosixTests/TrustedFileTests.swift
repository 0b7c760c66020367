import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing

/// `readTrustedFile` (docs/shared-host.md L.4): what a file read for trust may be, and every
/// refusal naming the path and the problem — promptly, whatever sits at the path.
@Suite struct TrustedFileTests {
    func problem(_ path: String, max: Int = 1024, refuseWritable: Bool = true) -> String {
        do {
            _ = try readTrustedFile(path: path, maxBytes: max, refuseWritableByOthers: refuseWritable)
            return "read"
        } catch {
            return "\(error)"
        }
    }

    @Test func aRegularFileIsReadWhole() throws {
        let dir = TempDir(files: ["a": "hello\n"])
        #expect(try readTrustedFile(path: dir.file("a"), maxBytes: 6, refuseWritableByOthers: true) == Array("hello\n".utf8))
        let empty = TempDir(files: ["e": ""])
        #expect(try readTrustedFile(path: empty.file("e"), maxBytes: 6, refuseWritableByOthers: true) == [])
        #expect(problem(dir.file("a"), max: 5) == "\(dir.file("a")): larger than 5 bytes")
        #expect(problem(dir.file("missing")) == "\(dir.file("missing")): no such file")
    }

    /// A FIFO with no writer would block a plain `open` (and a read) for ever.
    @Test func aFIFOIsRefusedAtOnce() throws {
        let dir = TempDir()
        let fifo = dir.file("fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        let started = monotonicSeconds()
        #expect(problem(fifo) == "\(fifo): not a regular file (a FIFO)")
        #expect(monotonicSeconds() - started < 1)
    }

    @Test func devicesAndDirectoriesAreRefused() {
        #expect(problem("/dev/zero") == "/dev/zero: not a regular file (a character device)")
        let dir = TempDir()
        #expect(problem(dir.path) == "\(dir.path): not a regular file (a directory)")
    }

    @Test func aSymlinkIsNotFollowed() throws {
        let dir = TempDir(files: ["real": "x"])
        #expect(symlink(dir.file("real"), dir.file("link")) == 0)
        #expect(problem(dir.file("link")) == "\(dir.file("link")): a symbolic link (not followed: name the file itself)")
    }

    @Test func aFileOthersCanWriteIsRefusedNamingItsMode() throws {
        let dir = TempDir(files: ["ca.pem": "x"])
        chmod(dir.file("ca.pem"), 0o666)
        #expect(problem(dir.file("ca.pem")) == "\(dir.file("ca.pem")): writable by others (mode 0666): anyone could change what it says")
        #expect(problem(dir.file("ca.pem"), refuseWritable: false) == "read")
        chmod(dir.file("ca.pem"), 0o644)
        #expect(problem(dir.file("ca.pem")) == "read")
    }
}
