import AgentCore
import FoundationEssentials
import Glibc

/// `PersistentState` in one file, written transactionally (ST-6, docs/architecture.md §8): a
/// temporary file is written, fsynced and renamed over the old one, then the directory is
/// fsynced. The file carries a version and a CRC-32 of its body; a file that fails either
/// check is moved aside, reported, and treated as absent. Files are 0600 in a 0700 directory.
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

    /// Creates the directory (0700) when it is missing.
    public init(directory: String, now: @escaping () -> Date = Date.init) throws(PosixError) {
        self.directory = directory
        self.now = now
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw PosixError(errno: errno, call: "mkdir", path: directory)
        }
    }

    public func load() throws -> StoreLoad {
        let data: [UInt8]
        do {
            data = try readWholeFile(path)
        } catch {
            if error.errno == ENOENT { return StoreLoad(state: nil) }
            throw error
        }
        do {
            return StoreLoad(state: try Self.decode(data))
        } catch {
            let aside = path + ".damaged-\(Int(now().timeIntervalSince1970))"
            let moved = rename(path, aside) == 0
            let whereTo = moved ? "moved to \(aside)" : "could not be moved aside (\(String(cString: strerror(errno))))"
            return StoreLoad(state: nil, damage: "\(path): \(error); \(whereTo)")
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
        let body = Array(bytes[(newline + 1)...])
        guard body.count == length else {
            throw FormatError(description: "truncated: \(body.count) of \(length) bytes")
        }
        guard CRC32.checksum(body) == crc else { throw FormatError(description: "checksum mismatch") }
        do {
            return try PersistentState(json: JSONReader.parse(body))
        } catch {
            throw FormatError(description: "unreadable body: \(error)")
        }
    }

    // MARK: - Transactional write

    private func writeTransactionally(_ bytes: [UInt8]) throws {
        let fd = open(temporaryPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PosixError(errno: errno, call: "open", path: temporaryPath) }
        var failure: PosixError?
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = PosixError(errno: errno, call: "write", path: temporaryPath)
                    return
                }
                offset += n
            }
        }
        if failure == nil, fchmod(fd, 0o600) != 0 { failure = PosixError(errno: errno, call: "fchmod", path: temporaryPath) }
        if failure == nil, fsync(fd) != 0 { failure = PosixError(errno: errno, call: "fsync", path: temporaryPath) }
        if Glibc.close(fd) != 0, failure == nil { failure = PosixError(errno: errno, call: "close", path: temporaryPath) }
        if failure == nil, rename(temporaryPath, path) != 0 {
            failure = PosixError(errno: errno, call: "rename", path: path)
        }
        if let failure {
            unlink(temporaryPath)  // never leave a half-written file behind
            throw failure
        }
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 {
            defer { _ = Glibc.close(dirFD) }
            if fsync(dirFD) != 0 { throw PosixError(errno: errno, call: "fsync", path: directory) }
        }
    }
}

/// CRC-32 (IEEE 802.3), for the state file's integrity check.
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        // Through buffer pointers: no bounds check and no lazy-global check per byte.
        table.withUnsafeBufferPointer { table in
            bytes.withUnsafeBufferPointer { bytes in
                var crc: UInt32 = 0xFFFF_FFFF
                for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
                return crc ^ 0xFFFF_FFFF
            }
        }
    }
}
