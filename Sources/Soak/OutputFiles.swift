import AgentPosix
import Glibc

// The run's outputs (report.html, summary.json, timeline.svg, the JUnit file) are written as
// the emulator's `--record` file and the agent's state are: into a directory nobody else can
// write, through a temporary created `O_CREAT|O_EXCL|O_NOFOLLOW` beside the file, fsynced,
// renamed over it, and the directory fsynced. Nothing planted there (a symlink in the
// temporary's place) is followed or touched.

/// A directory the run would write its outputs into that group or others can write: what it
/// is for, the path and its mode.
public struct UnsafeDirectory: Error, Sendable, Equatable, CustomStringConvertible {
    public var what: String
    public var path: String
    public var mode: mode_t

    public var description: String {
        "refusing to write \(what) into \(path): the directory is writable by "
            + (mode & 0o020 != 0 && mode & 0o002 != 0 ? "group and others" : mode & 0o020 != 0 ? "its group" : "others")
            + " (mode \(String(mode & 0o7777, radix: 8))); use a directory only you can write"
    }
}

/// Refuses `directory` (an existing one; a missing one is made 0755 later) when group or
/// others can write it.
func checkOutputDirectory(_ directory: String, for what: String) throws(UnsafeDirectory) {
    var info = stat()
    guard stat(directory.isEmpty ? "." : directory, &info) == 0 else { return }
    if info.st_mode & 0o022 != 0 { throw UnsafeDirectory(what: what, path: directory.isEmpty ? "." : directory, mode: info.st_mode) }
}

/// The directory part of `path` (`.` when it has none).
func parentDirectory(_ path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    return slash == path.startIndex ? "/" : String(path[..<slash])
}

/// Writes `text` to `path` through a temporary file renamed over it (a reader sees the old
/// file or the new one): `PATH.tmp`, or another free name beside it when that one exists
/// (a file or a symlink someone left there stays as it was), created `O_CREAT|O_EXCL|O_NOFOLLOW`,
/// then AgentPosix's `replaceFile` (`mode`, fsync, rename, the directory's fsync). An error names
/// the path, the call and errno.
func writeFileReplacing(_ path: String, _ text: String, for what: String, mode: mode_t = 0o644) throws(SoakFileError) {
    var temporary = path + ".tmp"
    var fd: Int32 = -1
    for attempt in 0..<100 {
        if attempt > 0 { temporary = path + ".tmp." + String(UInt32.random(in: 0...UInt32.max), radix: 16) }
        fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        if fd >= 0 || errno != EEXIST { break }
    }
    // Named by the file asked for; the call was on its temporary neighbour.
    guard fd >= 0 else { throw SoakFileError(what, path: path, call: "open", errno: errno) }
    do throws(PosixError) {
        try replaceFile(path, from: temporary, fd: fd, with: Array(text.utf8), mode: mode)
    } catch {
        // Named by the file asked for; the call may have been on its temporary neighbour.
        throw SoakFileError(what, path: path, call: error.call, errno: error.errno)
    }
}
