import AgentCore
import AgentPosix
import EmulatorCore
import Foundation
import Glibc
import Synchronization

/// `--record FILE.har`: a HAR 1.2 file that grows by one entry per exchange, each entry's
/// secrets replaced (`Redactor`) before it is written (docs/real-pushwoosh.md, "Recording a
/// session").
///
/// The file is ours and written as itself: created `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600;
/// an existing one is opened `O_NOFOLLOW` (a symlink is refused), must be a regular file of
/// this user, and is made 0600. Every write goes through that one descriptor, so nothing
/// planted beside it (`FILE.har.tmp` → someone else's file) is ever followed. An entry is
/// appended in place of the closing `]}}`, which is written again after it (one `pwrite`), so
/// the cost of a call does not grow with the file. A file in another layout (an older
/// recording, a browser's export) is read once, checked, and rewritten in this layout through
/// a new temporary file (`mkstemp`, 0600) renamed over it.
///
/// Layout: `HEAD` `\n` entry `,\n` entry … `TAIL`, each entry one line of JSON.
public final class HARRecorder: Sendable {
    public let path: String
    private let state: Mutex<State>

    struct State {
        var fd: Int32
        /// Where the closing `TAIL` starts: the next entry is written there.
        var tailOffset: Int
        var entries: Int
        var redactor: Redactor
    }

    static let head = Array(#"{"log":{"version":"1.2","creator":{"name":"pushwoosh-emulator","version":"1"},"entries":["#.utf8)
    static let tail = Array("\n]}}\n".utf8)

    public init(path: String) throws(EmulatorServerError) {
        self.path = path
        do {
            state = Mutex(try Self.open(path))
        } catch {
            throw EmulatorServerError(description: error.failedCall ? "--record: cannot write \(path): \(error.description)"
                                                                    : "--record: \(path): \(error.description)")
        }
    }

    deinit { state.withLock { _ = close($0.fd) } }

    struct Refusal: Error, CustomStringConvertible {
        let description: String
        /// A system call failed (rather than the file being refused).
        var failedCall = false
        init(_ description: String) { self.description = description }
        init(_ error: PosixError) {
            description = "\(error.call): \(error.message)"
            failedCall = true
        }
    }

    private static func open(_ path: String) throws(Refusal) -> State {
        var fd = Glibc.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0, errno == ENOENT {
            fd = Glibc.open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw Refusal(PosixError(errno: errno, call: "create")) }
            _ = flock(fd, LOCK_EX | LOCK_NB)
            do throws(PosixError) {
                try write(fd, head + tail, at: 0)
            } catch {
                close(fd)
                throw Refusal(error)
            }
            return State(fd: fd, tailOffset: head.count, entries: 0, redactor: Redactor())
        }
        guard fd >= 0 else {
            throw errno == ELOOP ? Refusal("is a symbolic link (refused: a recording is written as itself)")
                                 : Refusal(PosixError(errno: errno, call: "open"))
        }
        do throws(Refusal) {
            // Two emulators appending to one file would interleave their entries.
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                throw errno == EWOULDBLOCK ? Refusal("is being recorded to by another emulator") : Refusal(PosixError(errno: errno, call: "flock"))
            }
            return try adopt(fd, path: path)
        } catch {
            close(fd)
            throw error
        }
    }

    /// An existing recording, open on `fd`: checked, made 0600, and continued.
    private static func adopt(_ fd: Int32, path: String) throws(Refusal) -> State {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Refusal(PosixError(errno: errno, call: "fstat")) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw Refusal("is not a regular file") }
        guard info.st_uid == geteuid() else {
            throw Refusal("is owned by uid \(info.st_uid), not this user (uid \(geteuid())): a recording is written only to a file of one's own")
        }
        if info.st_mode & 0o077 != 0, fchmod(fd, 0o600) != 0 { throw Refusal(PosixError(errno: errno, call: "fchmod")) }
        let size = Int(info.st_size)
        if size == 0 {
            do throws(PosixError) { try write(fd, head + tail, at: 0) } catch { throw Refusal(error) }
            return State(fd: fd, tailOffset: head.count, entries: 0, redactor: Redactor())
        }
        // Our layout: continued in place; only the placeholders' numbers are read (in pieces).
        if size >= head.count + tail.count, (try? read(fd, count: head.count, at: 0)) == head,
           (try? read(fd, count: tail.count, at: size - tail.count)) == tail {
            var counts: [String: Int] = [:]
            do throws(PosixError) {
                try scan(fd, size: size) { Redactor.highestNumbers(in: $0, into: &counts) }
            } catch {
                throw Refusal(error)
            }
            return State(fd: fd, tailOffset: size - tail.count, entries: size > head.count + tail.count ? 1 : 0,
                         redactor: Redactor(continuingFrom: counts))
        }
        return try rewrite(fd, size: size, path: path)
    }

    /// A recording in another layout: read once, checked, and written again in ours through a
    /// new temporary file renamed over it; the new file's descriptor is kept.
    private static func rewrite(_ fd: Int32, size: Int, path: String) throws(Refusal) -> State {
        var counts: [String: Int] = [:]
        let entries: [JSONValue]
        let bytes: [UInt8]
        do throws(PosixError) { bytes = try read(fd, count: size, at: 0) } catch { throw Refusal(error) }
        bytes.withUnsafeBytes { Redactor.highestNumbers(in: $0, into: &counts) }
        do throws(DefinitionError) {
            guard let list = try StrictJSONParser.parse(bytes)["log"]?["entries"]?.arrayValue else {
                throw DefinitionError([.key("log"), .key("entries")], "missing (expected a HAR 1.2 log)")
            }
            entries = list
        } catch {
            throw Refusal(error.description)
        }
        var template = Array((path + ".XXXXXX").utf8CString)
        let temporary = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }  // O_EXCL, 0600
        guard temporary >= 0 else { throw Refusal(PosixError(errno: errno, call: "mkstemp")) }
        _ = fcntl(temporary, F_SETFD, FD_CLOEXEC)
        _ = flock(temporary, LOCK_EX | LOCK_NB)  // the file it becomes stays locked
        let temporaryPath = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var text = head
        for (i, entry) in entries.enumerated() {
            text += Array((i == 0 ? "\n" : ",\n").utf8)
            text += JSONWriter.encode(entry)
        }
        text += tail
        do throws(PosixError) {
            try write(temporary, text, at: 0)
            guard fsync(temporary) == 0 else { throw PosixError(errno: errno, call: "fsync") }
            guard rename(temporaryPath, path) == 0 else { throw PosixError(errno: errno, call: "rename") }
        } catch {
            unlink(temporaryPath)
            close(temporary)
            throw Refusal(error)
        }
        close(fd)
        return State(fd: temporary, tailOffset: text.count - tail.count, entries: entries.count, redactor: Redactor(continuingFrom: counts))
    }

    /// Adds one exchange; what went wrong writing it, else nil (the file then keeps what it had).
    func append(started: Date, milliseconds: Int, url: String, request: [HTTPHeader], requestBody: [UInt8],
                response: EmulatorResponse, method: String) -> String? {
        state.withLock { s in
            s.redactor.learn(url: url)
            s.redactor.learn(headers: request, body: requestBody)
            s.redactor.learn(headers: response.headers, body: response.body)
            let r = s.redactor
            let entry = HAR.entry(started: started, milliseconds: milliseconds, url: r.redact(url: url),
                                  requestHeaders: r.redact(request),
                                  requestBody: r.redactBody(requestBody, contentType: request.value(named: "content-type")),
                                  status: response.status, responseHeaders: r.redact(response.headers),
                                  responseBody: r.redactBody(response.body, contentType: response.headers.value(named: "content-type")),
                                  method: method)
            var piece = Array((s.entries == 0 ? "\n" : ",\n").utf8)
            piece += JSONWriter.encode(entry)
            piece += Self.tail
            do throws(PosixError) {
                try Self.write(s.fd, piece, at: s.tailOffset)
            } catch {
                // Whatever part was written, the file ends where it did, closed again.
                _ = try? Self.write(s.fd, Self.tail, at: s.tailOffset)
                _ = ftruncate(s.fd, off_t(s.tailOffset + Self.tail.count))
                return error.description
            }
            s.tailOffset += piece.count - Self.tail.count
            s.entries += 1
            return nil
        }
    }

    // MARK: - Positioned reads and writes

    private static func write(_ fd: Int32, _ bytes: [UInt8], at offset: Int) throws(PosixError) {
        var done = 0
        while done < bytes.count {
            let n = try retryingEINTR("pwrite") {
                bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            }
            done += n
        }
    }

    private static func read(_ fd: Int32, count: Int, at offset: Int) throws(PosixError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = try retryingEINTR("pread") {
                bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset + done)) }
            }
            if n == 0 { break }
            done += n
        }
        bytes.removeLast(count - done)
        return bytes
    }

    /// Hands `body` the file in pieces of 1 MiB, each beginning with the previous one's last 64
    /// bytes (a placeholder cut by a boundary is seen whole).
    private static func scan(_ fd: Int32, size: Int, _ body: (UnsafeRawBufferPointer) -> Void) throws(PosixError) {
        let piece = 1 << 20, overlap = 64
        var offset = 0
        while offset < size {
            let start = max(0, offset - overlap)
            let bytes = try read(fd, count: min(piece, size - offset) + (offset - start), at: start)
            bytes.withUnsafeBytes { body($0) }
            offset += piece
        }
    }
}
