import Glibc

/// Why a state directory could not be locked.
public enum StateDirectoryLockError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Another process holds the lock: the pid it recorded in the lock file (nil when the
    /// file holds none, e.g. on a full disk).
    case held(directory: String, pid: Int32?)
    /// The lock file could not be opened or locked.
    case failed(directory: String, PosixError)

    public var description: String {
        switch self {
        case .held(let directory, let pid):
            let who = pid.map { "another agent (pid \($0))" } ?? "another agent (pid not recorded)"
            return "state directory \(directory) is in use by \(who); lock file \(directory)/\(StateDirectoryLock.fileName)"
        case .failed(let directory, let error):
            return "cannot lock the state directory \(directory): \(error)"
        }
    }
}

/// An exclusive `flock(2)` on `DIRECTORY/agent.lock`, held until the value is dropped
/// (for the agent: the life of the process). The file holds the holder's pid, so that a
/// second agent started on the same directory can name the one that has it. The
/// descriptor is `O_CLOEXEC`: no child inherits the lock.
///
/// The lock belongs to the open file description, so it is released by the kernel when
/// the process dies however it dies (SIGKILL included): a stale file never blocks a start.
/// The file is never removed (removing it would let two processes lock two different
/// files under one name).
public struct StateDirectoryLock: ~Copyable {
    public static let fileName = "agent.lock"

    public let directory: String
    public var path: String { directory + "/" + Self.fileName }
    /// Why the pid could not be written into the lock file (a read-only or full state
    /// directory); the lock is held all the same.
    public let pidNotRecorded: PosixError?
    private let fd: FileDescriptor

    /// Takes the lock or throws at once (`LOCK_NB`): `.held` when another process has it.
    /// The directory must exist. `pid` is what the file records (the caller's by default).
    public init(directory: String, pid: Int32 = getpid()) throws(StateDirectoryLockError) {
        self.directory = directory
        let path = directory + "/" + Self.fileName
        var writable = true
        var raw: Int32
        do {
            // Held open read-only: a descriptor open for writing would make the file system
            // busy, and `mount -o remount,ro` of the state directory fail with EBUSY.
            raw = try retryingEINTR("open", path: path) { open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }
        } catch where error.errno == EROFS || error.errno == EACCES {
            // A read-only state directory (the agent serves from memory then): lock the file
            // a previous start left; flock needs no write access.
            writable = false
            do {
                raw = try retryingEINTR("open", path: path) { open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
            } catch {
                throw .failed(directory: directory, error)
            }
        } catch {
            throw .failed(directory: directory, error)
        }
        let fd = FileDescriptor(raw)
        do {
            try retryingEINTR("flock", path: path) { flock(fd.rawValue, LOCK_EX | LOCK_NB) }
        } catch where error.errno == EWOULDBLOCK {
            throw .held(directory: directory, pid: Self.recordedPID(path))
        } catch {
            throw .failed(directory: directory, error)
        }
        var notRecorded: PosixError?
        if writable {
            do {
                try Self.record(pid, path: path)
            } catch {
                notRecorded = error
            }
        } else {
            notRecorded = PosixError(errno: EROFS, call: "open", path: path)
        }
        pidNotRecorded = notRecorded
        self.fd = fd
    }

    /// The descriptor (for tests: it must be close-on-exec).
    public var descriptor: Int32 { fd.rawValue }

    /// Writes the pid through a descriptor of its own, closed at once (the lock's stays read-only).
    private static func record(_ pid: Int32, path: String) throws(PosixError) {
        let fd = FileDescriptor(try retryingEINTR("open", path: path) { open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW) })
        try retryingEINTR("ftruncate", path: path) { ftruncate(fd.rawValue, 0) }
        var bytes = Array("\(pid)\n".utf8)
        let written = try retryingEINTR("pwrite", path: path) {
            bytes.withUnsafeMutableBytes { pwrite(fd.rawValue, $0.baseAddress, $0.count, 0) }
        }
        if written != bytes.count { throw PosixError(errno: ENOSPC, call: "pwrite", path: path) }
    }

    /// The pid in the lock file. The holder truncates and then writes it, so an empty
    /// file is read again a few times (up to 50 ms) before giving up.
    static func recordedPID(_ path: String) -> Int32? {
        for attempt in 0..<6 {
            if attempt > 0 { usleep(10_000) }
            guard let bytes = try? readWholeFile(path) else { return nil }
            let digits = bytes.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            if let pid = Int32(String(decoding: digits, as: UTF8.self)), pid > 0 { return pid }
            if !bytes.isEmpty { return nil }
        }
        return nil
    }
}
