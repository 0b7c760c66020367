import Glibc

/// Why a file read for trust (a CA file, a token, a configuration file) was not read: the path
/// and the problem, e.g. `/etc/ca.pem: writable by others (mode 0666)`.
public struct TrustedFileError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Problem: Sendable, Equatable {
        /// `open`, `fstat` or `read` failed with this `errno`.
        case system(call: String, errno: Int32)
        /// The path is a symbolic link (`O_NOFOLLOW`).
        case symbolicLink
        /// A FIFO, a device, a directory, a socket: only a regular file is read.
        case notARegularFile(kind: String)
        /// Larger than the bound (at the `fstat`, or while reading: it grew).
        case tooLarge(maximum: Int)
        /// Others (or a group other than the reader's) may write to it: anyone could change it.
        case writableByOthers(mode: String)
        /// A secret (a private key) that others, or its group, may read.
        case readableByOthers(mode: String)
        /// Its directory lets others put another file in its place: writable by others (sticky or
        /// not), by a group other than the reader's, or owned by another user than the reader or root.
        case directoryOpen(directory: String, why: String)
    }

    public let path: String
    public let problem: Problem

    public init(path: String, problem: Problem) {
        self.path = path
        self.problem = problem
    }

    /// The `ls -l`-style mode of `mode` (`mode 0666`).
    public static func modeText(_ mode: mode_t) -> String {
        let octal = String(mode & 0o7777, radix: 8)
        return "mode " + String(repeating: "0", count: max(0, 4 - octal.count)) + octal
    }

    /// What went wrong, without the path (callers that name the file their own way).
    public var reason: String {
        switch problem {
        case .system(let call, let code):
            switch code {
            case ENOENT: return "no such file"
            case EACCES: return "permission denied"
            default: return "\(call): \(String(cString: strerror(code)))"
            }
        case .symbolicLink: return "a symbolic link (not followed: name the file itself)"
        case .notARegularFile(let kind): return "not a regular file (\(kind))"
        case .tooLarge(let maximum): return "larger than \(maximum) bytes"
        case .writableByOthers(let mode): return "writable by others (\(mode)): anyone could change what it says"
        case .directoryOpen(let directory, let why): return "in \(directory), \(why)"
        case .readableByOthers(let mode): return "readable by others (\(mode)): a secret must be its owner's alone (chmod 600)"
        }
    }

    public var description: String { "\(path): \(reason)" }
}

/// Reads a file the caller trusts (a CA file, a token, a configuration file), without letting
/// whoever can rename or replace it block or exhaust the reader (docs/shared-host.md L.4): opened
/// with `O_NOFOLLOW|O_NONBLOCK` (a symlink is refused, a FIFO or a device never blocks the
/// `open`), checked with `fstat` on the open descriptor — a regular file of at most `maxBytes`
/// and, with `refuseWritableByOthers`, not writable by others nor by a group other than the
/// reader's — and only then read, at most `maxBytes` (a file that grows meanwhile is refused).
/// The check and the read are of the same file: nothing can be swapped in between. Errors
/// (`TrustedFileError`) name the path and the problem.
///
/// `refuseReadableByOthers`: a secret (a private key) is refused when its group or others may
/// read it.
public func readTrustedFile(path: String, maxBytes: Int, refuseWritableByOthers: Bool,
                            refuseReadableByOthers: Bool = false) throws(TrustedFileError) -> [UInt8] {
    try TrustedFile.read(path: path, maxBytes: maxBytes, refuseWritableByOthers: refuseWritableByOthers,
                         refuseReadableByOthers: refuseReadableByOthers).bytes
}

/// `readTrustedFile`, with the typed error and the `stat` the checks were made on (a caller
/// may warn of a mode it accepts, e.g. a token every local user can read).
public enum TrustedFile {
    /// `followSymlink`: a symlink at `path` is followed (the configuration file, which
    /// configuration management often links into place); the file it names is checked all the same.
    ///
    /// `refuseOpenDirectory`: the file's directory is checked too, on its open descriptor, and the
    /// file opened relative to it (`openat`): refused when others may write to it (the sticky bit
    /// changes nothing: in a sticky directory such as /tmp anyone may have made the name first, and
    /// a file another user owns is theirs to change whatever its mode), when a group other than the
    /// reader's may, or when it belongs to neither the reader nor root.
    public static func read(path: String, maxBytes: Int, refuseWritableByOthers: Bool,
                            followSymlink: Bool = false, refuseOpenDirectory: Bool = false,
                            refuseReadableByOthers: Bool = false) throws(TrustedFileError) -> (bytes: [UInt8], info: stat) {
        func failure(_ problem: TrustedFileError.Problem) -> TrustedFileError { TrustedFileError(path: path, problem: problem) }
        var directoryFD = AT_FDCWD
        var name = path
        if refuseOpenDirectory {
            let (directory, base) = split(path)
            do {
                directoryFD = try retryingEINTR("open", path: directory) { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            } catch {
                throw failure(.system(call: "open", errno: error.errno))
            }
            name = base
        }
        defer { if directoryFD != AT_FDCWD { close(directoryFD) } }
        if refuseOpenDirectory, let why = openDirectory(directoryFD) {
            throw failure(.directoryOpen(directory: split(path).directory, why: why))
        }
        let fd: Int32
        let flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (followSymlink ? 0 : O_NOFOLLOW)
        do {
            fd = try retryingEINTR("open", path: path) { openat(directoryFD, name, flags) }
        } catch {
            // O_NOFOLLOW on a symlink: ELOOP.
            throw failure(error.errno == ELOOP && !followSymlink ? .symbolicLink : .system(call: "open", errno: error.errno))
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure(.system(call: "fstat", errno: errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw failure(.notARegularFile(kind: kind(info.st_mode))) }
        guard Int(info.st_size) <= maxBytes else { throw failure(.tooLarge(maximum: maxBytes)) }
        if refuseWritableByOthers, info.st_mode & S_IWOTH != 0 || (info.st_mode & S_IWGRP != 0 && info.st_gid != getegid()) {
            throw failure(.writableByOthers(mode: TrustedFileError.modeText(info.st_mode)))
        }
        if refuseReadableByOthers, info.st_mode & (S_IRGRP | S_IROTH) != 0 {
            throw failure(.readableByOthers(mode: TrustedFileError.modeText(info.st_mode)))
        }
        // A regular file: O_NONBLOCK changes nothing for its reads. One byte more than the
        // bound tells a file that grew after the fstat.
        var bytes = [UInt8](repeating: 0, count: min(maxBytes, Int(info.st_size)) + 1)
        var filled = 0
        while filled < bytes.count {
            let n: Int
            do {
                n = try retryingEINTR("read", path: path) {
                    bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + filled, $0.count - filled) }
                }
            } catch {
                throw failure(.system(call: "read", errno: error.errno))
            }
            if n == 0 { break }
            filled += n
            if filled == bytes.count, filled <= maxBytes { bytes.append(contentsOf: repeatElement(0, count: min(64 * 1024, maxBytes + 1 - filled))) }
        }
        guard filled <= maxBytes else { throw failure(.tooLarge(maximum: maxBytes)) }
        bytes.removeSubrange(filled...)
        return (bytes, info)
    }

    /// `path`'s directory and last component (`/ca.pem`: `/` and `ca.pem`; `ca.pem`: `.`).
    static func split(_ path: String) -> (directory: String, base: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let directory = String(path[..<slash])
        return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
    }

    /// Why the open directory `fd` lets someone else put another file in place of one in it; nil
    /// when only the reader (and root) may.
    static func openDirectory(_ fd: Int32) -> String? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return "fstat: \(String(cString: strerror(errno)))" }
        let mode = TrustedFileError.modeText(info.st_mode)
        if info.st_mode & S_IWOTH != 0 {
            if info.st_mode & S_ISVTX != 0 {
                return "which others can write (\(mode), sticky: whoever made the name first owns the file and may change it); "
                    + "keep it in a directory only its owner can write"
            }
            return "which others can write (\(mode)): anyone could put another file in its place"
        }
        if info.st_mode & S_IWGRP != 0, info.st_gid != getegid() {
            return "which group \(info.st_gid) can write (\(mode)): its members could put another file in its place"
        }
        if info.st_uid != geteuid(), info.st_uid != 0 {
            return "owned by uid \(info.st_uid): that user could put another file in its place"
        }
        return nil
    }

    static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: "a FIFO"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFDIR: "a directory"
        case S_IFSOCK: "a socket"
        case S_IFLNK: "a symbolic link"
        default: "mode \(String(mode & S_IFMT, radix: 8))"
        }
    }
}
