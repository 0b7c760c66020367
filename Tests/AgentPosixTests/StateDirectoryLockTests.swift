import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing

/// docs/fleet.md E.1: one agent per state directory. flock(2) locks belong to open file
/// descriptions, so two locks taken in this one process conflict like two processes'.
@Suite struct StateDirectoryLockTests {
    /// This test's directory (a suite value is made for each test), removed when it ends.
    let workDir = TempDir()

    @Test func secondLockIsRefusedWithTheHoldersPid() throws {
        let dir = workDir.path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let first = try StateDirectoryLock(directory: dir, pid: 4242)
        #expect(first.pidNotRecorded == nil)
        #expect(try String(contentsOfFile: dir + "/agent.lock", encoding: .utf8) == "4242\n")
        var st = stat()
        stat(dir + "/agent.lock", &st)
        #expect(st.st_mode & 0o777 == 0o600)
        #expect(fcntl(first.descriptor, F_GETFD) & FD_CLOEXEC != 0)
        do {
            _ = try StateDirectoryLock(directory: dir, pid: 7)
            Issue.record("a second lock on \(dir) was granted")
        } catch {
            #expect(error == .held(directory: dir, pid: 4242))
            #expect(error.description.contains(dir))
            #expect(error.description.contains("pid 4242"))
        }
        // The refused attempt did not overwrite the holder's pid.
        #expect(try String(contentsOfFile: dir + "/agent.lock", encoding: .utf8) == "4242\n")
        _ = consume first
        // Released with its descriptor: the next one gets it and records its own pid.
        let again = try StateDirectoryLock(directory: dir, pid: 99)
        #expect(try String(contentsOfFile: again.path, encoding: .utf8) == "99\n")
    }

    /// A descriptor open for writing makes `mount -o remount,ro` of the state directory fail
    /// with EBUSY (scripts/fault-disk's read-only step did): the lock is held read-only, and
    /// the pid is written through a descriptor of its own that is closed at once.
    @Test func theLockHoldsNoDescriptorOpenForWriting() throws {
        let dir = workDir.path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let lock = try StateDirectoryLock(directory: dir, pid: 4242)
        #expect(fcntl(lock.descriptor, F_GETFL) & O_ACCMODE == O_RDONLY)
        #expect(lock.pidNotRecorded == nil)
        #expect(try String(contentsOfFile: lock.path, encoding: .utf8) == "4242\n")
        let writers = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").filter { fd in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd),
                  target == lock.path, let n = Int32(fd) else { return false }
            return fcntl(n, F_GETFL) & O_ACCMODE != O_RDONLY
        }
        #expect(writers.isEmpty, "descriptors open for writing on \(lock.path): \(writers)")
    }

    @Test func aLongerStalePidIsReplacedWhole() throws {
        let dir = workDir.path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "1234567\n".write(toFile: dir + "/agent.lock", atomically: false, encoding: .utf8)
        let lock = try StateDirectoryLock(directory: dir, pid: 12)
        #expect(try String(contentsOfFile: lock.path, encoding: .utf8) == "12\n")
    }

    @Test func aMissingDirectoryIsAnErrorNamingIt() {
        let dir = workDir.path + "/nope"
        do {
            _ = try StateDirectoryLock(directory: dir)
            Issue.record("locked a directory that does not exist")
        } catch {
            guard case .failed(let d, let posix) = error else { Issue.record("\(error)"); return }
            #expect(d == dir)
            #expect(posix.errno == ENOENT)
            #expect(error.description.contains(dir))
        }
    }

    @Test func aSymlinkedLockFileIsNotFollowed() throws {
        let dir = workDir.path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "x".write(toFile: dir + "/target", atomically: false, encoding: .utf8)
        #expect(symlink(dir + "/target", dir + "/agent.lock") == 0)
        #expect(throws: StateDirectoryLockError.self) { _ = try StateDirectoryLock(directory: dir) }
        #expect(try String(contentsOfFile: dir + "/target", encoding: .utf8) == "x")
    }
}
