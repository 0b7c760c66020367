import AgentPosix
import Foundation
import Glibc

/// Why the lab will not act in a directory, or on a file in it: the path and the reason
/// (`/tmp/lab: writable by others (mode 0777): anyone could swap what the lab runs`).
public struct PrivateDirectoryError: Error, Sendable, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "\(path): \(reason)" }
}

/// A directory the lab acts in (`--lab DIR`, a device's directory; docs/lab.md "Whose files"):
/// it must belong to the lab's user and be writable by no one else, since whoever could write
/// it could swap the configuration, socket or log the lab's processes use. It is opened once,
/// without following a symbolic link, and every file the lab makes or reads in it is opened
/// relative to that descriptor with `O_NOFOLLOW`: a symbolic link planted in its place is
/// refused, named, and never followed.
public final class PrivateDirectory: Sendable {
    public let path: String
    private let fd: Int32

    /// Opens `path` (made 0700 first when `create` and missing, with its missing parents) and
    /// checks it is the lab user's own.
    public init(_ path: String, create: Bool) throws(PrivateDirectoryError) {
        self.path = path
        if create, access(path, F_OK) != 0 {
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw PrivateDirectoryError(path: path, reason: "cannot make it: \((error as NSError).localizedDescription)")
            }
        }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            var info = stat()
            let link = lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK
            throw PrivateDirectoryError(path: path, reason: link ? "a symbolic link (not followed: name the directory itself)"
                                        : code == ENOTDIR ? "not a directory" : String(cString: strerror(code)))
        }
        var info = stat()
        fstat(fd, &info)
        if let why = Self.foreign(info) {
            close(fd)
            throw PrivateDirectoryError(path: path, reason: why)
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Why a directory with this `stat` is not the lab user's own, or nil.
    static func foreign(_ info: stat) -> String? {
        let mode = TrustedFileError.modeText(info.st_mode)
        if info.st_uid != geteuid() {
            return "owned by uid \(info.st_uid), not the lab's user (uid \(geteuid())): its owner could swap what the lab runs"
        }
        if info.st_mode & (S_IWGRP | S_IWOTH) != 0 {
            return "writable by \(info.st_mode & S_IWOTH != 0 ? "others" : "its group") (\(mode)): they could swap what the lab runs; chmod go-w it"
        }
        return nil
    }

    /// `name` as a path.
    public func file(_ name: String) -> String { path + "/" + name }

    /// Refuses `name` when it is a symbolic link (a socket, the notify socket: bound by name).
    public func refuseSymlink(_ name: String) throws(PrivateDirectoryError) {
        var info = stat()
        if fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFLNK {
            throw PrivateDirectoryError(path: file(name), reason: "a symbolic link: the lab does not follow one; remove it")
        }
    }

    /// Makes the subdirectory `name` (0700) unless it is there; a symbolic link or another kind
    /// of file there is refused.
    public func makeSubdirectory(_ name: String) throws(PrivateDirectoryError) {
        if mkdirat(fd, name, 0o700) != 0, errno != EEXIST {
            throw PrivateDirectoryError(path: file(name), reason: "cannot make it: \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw PrivateDirectoryError(path: file(name), reason: String(cString: strerror(errno)))
        }
        switch info.st_mode & S_IFMT {
        case S_IFDIR: if let why = Self.foreign(info) { throw PrivateDirectoryError(path: file(name), reason: why) }
        case S_IFLNK: throw PrivateDirectoryError(path: file(name), reason: "a symbolic link: the lab does not follow one; remove it")
        default: throw PrivateDirectoryError(path: file(name), reason: "not a directory")
        }
    }

    /// Writes `text` to `name` (made `mode` or truncated; a regular file, never through a
    /// symbolic link).
    public func write(_ name: String, _ text: String, mode: mode_t = 0o600) throws(PrivateDirectoryError) {
        try write(name, text, flags: O_CREAT | O_TRUNC, mode: mode)
    }

    /// Writes `text` to `name` as a new file: whatever was there is removed first (a symbolic
    /// link itself, never what it names), then the file is created `O_EXCL`.
    public func replace(_ name: String, _ text: String, mode: mode_t = 0o600) throws(PrivateDirectoryError) {
        if unlinkat(fd, name, 0) != 0, errno != ENOENT {
            throw PrivateDirectoryError(path: file(name), reason: "cannot remove the old one: \(String(cString: strerror(errno)))")
        }
        try write(name, text, flags: O_CREAT | O_EXCL, mode: mode)
    }

    private func write(_ name: String, _ text: String, flags: Int32, mode: mode_t) throws(PrivateDirectoryError) {
        let out = openat(fd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | flags, mode)
        guard out >= 0 else {
            let code = errno
            throw PrivateDirectoryError(path: file(name), reason: code == ELOOP ? "a symbolic link: the lab does not follow one; remove it"
                                        : "cannot write it: \(String(cString: strerror(code)))")
        }
        defer { close(out) }
        var info = stat()
        fstat(out, &info)
        guard info.st_mode & S_IFMT == S_IFREG else { throw PrivateDirectoryError(path: file(name), reason: "not a regular file") }
        let bytes = Array(text.utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(out, $0.baseAddress! + done, $0.count - done) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw PrivateDirectoryError(path: file(name), reason: "cannot write it: \(String(cString: strerror(errno)))") }
            done += n
        }
    }

    /// The last `lines` lines of `name` (read from at most its last MiB), never through a
    /// symbolic link; none when it is not there.
    public func tail(_ name: String, lines: Int) throws(PrivateDirectoryError) -> [String] {
        let input = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard input >= 0 else {
            if errno == ENOENT { return [] }
            throw PrivateDirectoryError(path: file(name), reason: errno == ELOOP ? "a symbolic link: the lab does not follow one"
                                        : String(cString: strerror(errno)))
        }
        defer { close(input) }
        var info = stat()
        fstat(input, &info)
        guard info.st_mode & S_IFMT == S_IFREG else { throw PrivateDirectoryError(path: file(name), reason: "not a regular file") }
        let window = min(Int(info.st_size), 1 << 20)
        var bytes = [UInt8](repeating: 0, count: window)
        let n = bytes.withUnsafeMutableBytes { pread(input, $0.baseAddress, window, off_t(Int(info.st_size) - window)) }
        let text = String(decoding: bytes.prefix(max(0, n)), as: UTF8.self)
        return Array(text.split(separator: "\n", omittingEmptySubsequences: true).suffix(lines).map(String.init))
    }
}
