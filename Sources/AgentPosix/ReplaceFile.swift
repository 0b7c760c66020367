import Glibc

/// The end of writing a file by replacing it (the agent's state, the soak's outputs): `bytes`
/// written whole to `fd`, a temporary the caller created beside `path` with
/// `O_CREAT|O_EXCL|O_NOFOLLOW` (so nothing planted in its place was followed), given `mode`
/// whatever the umask, fsynced, closed and renamed over `path` (a reader sees the old file or
/// the new one), then the directory fsynced. On a failure the temporary is removed, never left
/// half-written; the error names the call and the file it was about.
public func replaceFile(_ path: String, from temporary: String, fd: Int32, with bytes: [UInt8], mode: mode_t) throws(PosixError) {
    var failure: PosixError?
    func fail(_ call: String, _ file: String) {
        if failure == nil { failure = PosixError(errno: errno, call: call, path: file) }
    }
    var offset = 0
    while failure == nil, offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if n >= 0 {
            offset += n
        } else if errno != EINTR {
            fail("write", temporary)
        }
    }
    if failure == nil, fchmod(fd, mode) != 0 { fail("fchmod", temporary) }
    if failure == nil, fsync(fd) != 0 { fail("fsync", temporary) }
    if close(fd) != 0 { fail("close", temporary) }
    if failure == nil, rename(temporary, path) != 0 { fail("rename", path) }
    if let failure {
        unlink(temporary)
        throw failure
    }
    let slash = path.lastIndex(of: "/")
    let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard dirFD >= 0 else { return }
    defer { _ = close(dirFD) }
    if fsync(dirFD) != 0 { throw PosixError(errno: errno, call: "fsync", path: directory) }
}
