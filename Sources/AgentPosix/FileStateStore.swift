import AgentCore
import FoundationEssentials
import Glibc

/// `PersistentState` in one file, written transactionally (ST-6, docs/architecture.md §8): a
/// temporary file is written, fsynced and renamed over the old one, then the directory is
/// fsynced. The file carries a version and a CRC-32 of its body; a file that fails either
/// check is moved aside, reported, and treated as absent. Files are 0600 in a 0700 directory.
///
/// A file that cannot be read at all (permission, EIO) is neither trusted nor overwritten:
/// `load` throws `Unreadable`, and so does a damaged file that cannot be moved aside. No
/// one else may plant files here: a directory writable by others, by a group the agent does
/// not run as, or owned by another user is refused (`init`), and the temporary file is
/// created with `O_EXCL | O_NOFOLLOW` (a symlink planted in its place is removed, never
/// followed) and renamed within the directory.
///
/// Layout: `pushwoosh-agent-state 1 <crc32 hex> <body length>\n<JSON body>`.
public final class FileStateStore: StateStore {
    public static let fileName = "state.json"
    static let magic = "pushwoosh-agent-state"
    static let version = 1

    public let directory: String
    public var path: String { directory + "/" + Self.fileName }
    private var temporaryPath: String { path + ".tmp" }
    private let now: () -> Date

    /// A state file that is there but cannot be read, or a damaged one that cannot be set
    /// aside: the agent does not start on it (it would be replaced by the first save).
    public struct Unreadable: Error, CustomStringConvertible, Equatable {
        public let path: String
        public let reason: String
        public var description: String {
            "the stored state \(path) cannot be read (\(reason)); it is neither used nor overwritten: fix its owner or mode, or move it away"
        }
    }

    /// A state directory others could plant files in.
    public struct UnsafeDirectory: Error, CustomStringConvertible, Equatable {
        public let directory: String
        public let reason: String
        public var description: String { "state directory \(directory) \(reason); make it writable by the agent's user only (chmod 0700)" }
    }

    /// Creates the directory (0700) when it is missing; refuses one that others may write to.
    public init(directory: String, now: @escaping () -> Date = Date.init) throws {
        self.directory = directory
        self.now = now
        try Self.createDirectory(directory)
        try Self.checkOwnership(directory)
    }

    /// The state directory, created 0700 when missing (the lock is taken in it before the
    /// store checks who owns it: a second agent is told the directory is in use).
    public static func createDirectory(_ directory: String) throws(PosixError) {
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw PosixError(errno: errno, call: "mkdir", path: directory)
        }
    }

    /// The directory must be the agent's (or root's) and writable by no one else.
    static func checkOwnership(_ directory: String) throws {
        var info = stat()
        guard stat(directory, &info) == 0 else { throw PosixError(errno: errno, call: "stat", path: directory) }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw UnsafeDirectory(directory: directory, reason: "is not a directory") }
        let mode = "mode " + String(info.st_mode & 0o7777, radix: 8).leftPadded(to: 4)
        if info.st_mode & S_IWOTH != 0 {
            throw UnsafeDirectory(directory: directory, reason: "is writable by others (\(mode))")
        }
        if info.st_mode & S_IWGRP != 0, info.st_gid != getegid() {
            throw UnsafeDirectory(directory: directory, reason: "is writable by group \(info.st_gid), which the agent does not run as (\(mode))")
        }
        if info.st_uid != geteuid(), info.st_uid != 0 {
            throw UnsafeDirectory(directory: directory, reason: "is owned by uid \(info.st_uid), not the agent's user (uid \(geteuid()))")
        }
    }

    public func load() throws -> StoreLoad {
        let data: [UInt8]
        do {
            data = try readWholeFile(path)
        } catch {
            if error.errno == ENOENT { return StoreLoad(state: nil) }
            throw Unreadable(path: path, reason: "\(error)")
        }
        do {
            return StoreLoad(state: try Self.decode(data))
        } catch {
            let aside = path + ".damaged-\(Int(now().timeIntervalSince1970))"
            guard rename(path, aside) == 0 else {
                throw Unreadable(path: path, reason: "\(error), and it could not be moved aside: \(String(cString: strerror(errno)))")
            }
            return StoreLoad(state: nil, damage: "\(path): \(error); moved to \(aside)")
        }
    }

    /// The state in the file at `path` without changing anything (a damaged file throws
    /// and stays where it is); nil when there is no file. For tools and tests.
    public static func read(_ path: String) throws -> PersistentState? {
        let data: [UInt8]
        do {
            data = try readWholeFile(path)
        } catch {
            if error.errno == ENOENT { return nil }
            throw error
        }
        return try decode(data)
    }

    public func save(_ state: PersistentState) throws {
        let bytes = Self.encode(state)
        try writeTransactionally(bytes)
    }

    // MARK: - Format

    struct FormatError: Error, CustomStringConvertible {
        let description: String
    }

    static func encode(_ state: PersistentState) -> [UInt8] {
        let body = JSONWriter.encode(state.json)
        let header = "\(magic) \(version) \(String(CRC32.checksum(body), radix: 16)) \(body.count)\n"
        return Array(header.utf8) + body
    }

    static func decode(_ bytes: [UInt8]) throws -> PersistentState {
        guard let newline = bytes.firstIndex(of: UInt8(ascii: "\n")), newline < 128 else {
            throw FormatError(description: "no header")
        }
        let fields = String(decoding: bytes[..<newline], as: UTF8.self).split(separator: " ")
        guard fields.count == 4, fields[0] == magic else { throw FormatError(description: "not a state file") }
        guard Int(fields[1]) == version else { throw FormatError(description: "unsupported version \(fields[1])") }
        guard let crc = UInt32(fields[2], radix: 16), let length = Int(fields[3]) else {
            throw FormatError(description: "bad header")
        }
        // The body is read where it lies (a copy of a large file was an allocation the size of it).
        return try bytes.withUnsafeBytes { file in
            let body = UnsafeRawBufferPointer(rebasing: file[(newline + 1)...])
            guard body.count == length else {
                throw FormatError(description: "truncated: \(body.count) of \(length) bytes")
            }
            guard CRC32.checksum(body) == crc else { throw FormatError(description: "checksum mismatch") }
            do {
                return try PersistentState(stateBody: body)
            } catch {
                throw FormatError(description: "unreadable body: \(error)")
            }
        }
    }

    // MARK: - Transactional write

    private func writeTransactionally(_ bytes: [UInt8]) throws {
        // A temporary file left by a crash, or anything planted under its name (a symlink
        // included), is removed, never followed; O_EXCL fails if one appears meanwhile.
        if unlink(temporaryPath) != 0, errno != ENOENT { throw PosixError(errno: errno, call: "unlink", path: temporaryPath) }
        let fd = open(temporaryPath, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PosixError(errno: errno, call: "open", path: temporaryPath) }
        try replaceFile(path, from: temporaryPath, fd: fd, with: bytes, mode: 0o600)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

/// CRC-32 (IEEE 802.3), for the state file's integrity check: slicing-by-8, eight bytes a step
/// through eight tables made once. Four times the speed of a byte at a time (whose each step
/// waited for the previous one's table load) for a fifth fewer instructions.
enum CRC32 {
    /// `tables[k * 256 + b]`: the CRC of byte `b` followed by `k` zero bytes; table 0 is the classic one.
    static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for n in 0..<256 {
            var c = UInt32(n)
            for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            t[n] = c
        }
        for k in 1..<8 {
            for n in 0..<256 {
                let previous = t[(k - 1) * 256 + n]
                t[k * 256 + n] = t[Int(previous & 0xFF)] ^ (previous >> 8)
            }
        }
        return t
    }()

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }

    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        // Through buffer pointers: no bounds check and no lazy-global check per byte.
        tables.withUnsafeBufferPointer { t in
            var crc: UInt32 = 0xFFFF_FFFF
            var i = 0
            let n = bytes.count
            while n - i >= 8 {
                let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                let low = UInt32(truncatingIfNeeded: word) ^ crc
                let high = UInt32(truncatingIfNeeded: word >> 32)
                crc = t[7 * 256 + Int(low & 0xFF)] ^ t[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((low >> 16) & 0xFF)] ^ t[4 * 256 + Int(low >> 24)]
                    ^ t[3 * 256 + Int(high & 0xFF)] ^ t[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((high >> 16) & 0xFF)] ^ t[Int(high >> 24)]
                i += 8
            }
            while i < n {
                crc = t[Int((crc ^ UInt32(bytes[i])) & 0xFF)] ^ (crc >> 8)
                i += 1
            }
            return crc ^ 0xFFFF_FFFF
        }
    }
}
