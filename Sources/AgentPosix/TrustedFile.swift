import Glibc

/// Why a file read for trust (a CA bundle, a token, a TLS key) was refused: the path and the
/// problem, e.g. `/etc/pw/token: writable by others (mode 0666)`.
public struct TrustedFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public let path: String
    /// What is wrong with it, e.g. `is a FIFO, not a regular file`.
    public let problem: String
    public var description: String { "\(path): \(problem)" }
}

/// The whole content of a file read for trust (docs/shared-host.md L.4), checked on the open
/// descriptor and not on the name, so nothing swapped in between is read:
/// - opened with `O_NOFOLLOW` (a symlink in the last component is refused) and `O_NONBLOCK`
///   (a FIFO or a device never blocks the open);
/// - `fstat` on the descriptor: a regular file, at most `maxBytes` long, and, with
///   `refuseWritableByOthers`, neither writable by others nor by a group other than the
///   process's own (anyone who can write it could choose its content);
/// - read to its end, refused if it has grown past `maxBytes` since.
public func readTrustedFile(path: String, maxBytes: Int, refuseWritableByOthers: Bool) throws(TrustedFileError) -> [UInt8] {
    var fd: Int32
    repeat { fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) } while fd < 0 && errno == EINTR
    guard fd >= 0 else {
        let code = errno
        throw TrustedFileError(path: path, problem: code == ELOOP ? "is a symbolic link (refused: a file read for trust is opened as itself)"
                               : "cannot open it: \(String(cString: strerror(code)))")
    }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else {
        throw TrustedFileError(path: path, problem: "cannot stat it: \(String(cString: strerror(errno)))")
    }
    let kind = info.st_mode & S_IFMT
    guard kind == S_IFREG else {
        let what = switch kind {
        case S_IFIFO: "a FIFO"
        case S_IFDIR: "a directory"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFSOCK: "a socket"
        default: "not a regular file"
        }
        throw TrustedFileError(path: path, problem: "is \(what), not a regular file")
    }
    if refuseWritableByOthers, info.st_mode & S_IWOTH != 0 || (info.st_mode & S_IWGRP != 0 && info.st_gid != getegid()) {
        let octal = String(info.st_mode & 0o7777, radix: 8)
        let mode = String(repeating: "0", count: max(0, 4 - octal.count)) + octal
        let who = info.st_mode & S_IWOTH != 0 ? "others" : "group \(info.st_gid), which this process does not run as"
        throw TrustedFileError(path: path, problem: "is writable by \(who) (mode \(mode)): anyone who can write it chooses what is trusted; "
                               + "chmod 0600 (or 0640 with this process's group)")
    }
    guard Int(info.st_size) <= maxBytes else {
        throw TrustedFileError(path: path, problem: "is \(info.st_size) bytes, over the limit of \(maxBytes)")
    }
    var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)  // one more: a file that grew shows it
    var count = 0
    while true {
        if count == bytes.count {
            guard bytes.count <= maxBytes else { break }
            bytes.append(contentsOf: repeatElement(0, count: min(maxBytes + 1, bytes.count * 2) - bytes.count))
        }
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw TrustedFileError(path: path, problem: "cannot read it: \(String(cString: strerror(errno)))")
        }
        if n == 0 { break }
        count += n
    }
    guard count <= maxBytes else {
        throw TrustedFileError(path: path, problem: "grew past the limit of \(maxBytes) bytes while read")
    }
    bytes.removeLast(bytes.count - count)
    return bytes
}
