import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing

/// ST-6 on the real file system: transactional writes, damaged files set aside, private modes.
@Suite struct FileStateStoreTests {
    /// This test's directories (a suite value is made for each test), removed when it ends.
    let workDir = TempDir(), otherDir = TempDir()

    func sample() -> PersistentState {
        var s = PersistentState(hwid: "0E4C3D6A-5B1F-4C2D-9E8F-0A1B2C3D4E5F")
        s.userId = "alice"
        s.flags = FlagSnapshot(flags: ["k": FeatureFlag(key: "k", isEnabled: true, ruleId: "r_1", properties: ["n": 1, "b": true])],
                               receivedAt: Date(timeIntervalSince1970: 1_800_000_000.5), applicationCode: "ABCDE-12345", userId: "alice")
        s.primerLastShownAt = Date(timeIntervalSince1970: 1_800_000_100)
        return s
    }

    @Test("ST-1, ST-6: what was saved is loaded, kinds and times intact; modes are private")
    func roundTripAndModes() throws {
        let dir = workDir.path + "/state"
        let store = try FileStateStore(directory: dir)
        #expect(try store.load() == StoreLoad(state: nil))
        try store.save(sample())
        let loaded = try FileStateStore(directory: dir).load()
        #expect(loaded.state == sample())
        #expect(loaded.damage == nil)
        var st = stat()
        stat(store.path, &st)
        #expect(st.st_mode & 0o777 == 0o600)
        stat(dir, &st)
        #expect(st.st_mode & 0o777 == 0o700)
        #expect(!FileManager.default.fileExists(atPath: store.path + ".tmp"))
    }

    @Test("ST-6: a damaged file (flipped byte, truncation, garbage, wrong version) is moved aside and reported", arguments: ["flip", "truncate", "garbage", "empty", "version"])
    func damagedFileIsSetAside(kind: String) throws {
        let dir = workDir.path
        let store = try FileStateStore(directory: dir)
        try store.save(sample())
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: store.path)))
        switch kind {
        case "flip": bytes[bytes.count - 5] ^= 0x20
        case "truncate": bytes.removeLast(10)
        case "garbage": bytes = Array("\u{0}\u{1}not a state file at all".utf8)
        case "empty": bytes = []
        default: bytes = Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "state 1 ", with: "state 9 ").utf8)
        }
        try Data(bytes).write(to: URL(fileURLWithPath: store.path))
        let loaded = try store.load()
        #expect(loaded.state == nil)
        #expect(loaded.damage?.contains("moved to") == true)
        #expect(!FileManager.default.fileExists(atPath: store.path))
        let aside = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.contains(".damaged-") }
        #expect(aside.count == 1)
        // Not a reason to stop: the next save works.
        try store.save(sample())
        #expect(try store.load().state == sample())
    }

    @Test("ST-6: a failed write (read-only directory) keeps the old file whole")
    func failedWriteKeepsOldFile() throws {
        let dir = workDir.path
        let store = try FileStateStore(directory: dir)
        try store.save(sample())
        var newer = sample()
        newer.userId = "bob"
        chmod(dir, 0o500)
        defer { chmod(dir, 0o700) }
        if getuid() == 0 {
            // root ignores directory modes: a directory where the temporary file goes instead.
            mkdir(store.path + ".tmp", 0o700)
            #expect(throws: (any Error).self) { try store.save(newer) }
            rmdir(store.path + ".tmp")
        } else {
            #expect(throws: (any Error).self) { try store.save(newer) }
        }
        #expect(try store.load().state == sample())
    }

    // Every prefix of a new file that did not reach the rename is invisible.
    @Test("ST-6: a crash at any point of a write leaves the old or the new state, never a mix")
    func interruptedWritesLeaveOldOrNew() throws {
        let dir = workDir.path
        let store = try FileStateStore(directory: dir)
        try store.save(sample())
        var newer = sample()
        newer.userId = "bob"
        let other = otherDir.path
        let scratch = try FileStateStore(directory: other)
        try scratch.save(newer)
        let full = [UInt8](try Data(contentsOf: URL(fileURLWithPath: scratch.path)))
        for cut in stride(from: 0, to: full.count, by: max(1, full.count / 50)) {
            // A crash before the rename leaves a partial temporary file beside the real one.
            try Data(full[..<cut]).write(to: URL(fileURLWithPath: store.path + ".tmp"))
            #expect(try store.load().state == sample())
        }
        // A torn state file itself (as if renamed too early) is detected, never trusted.
        try Data(full[..<(full.count / 2)]).write(to: URL(fileURLWithPath: store.path))
        #expect(try store.load().state == nil)
    }
}

/// A state file that cannot be read is neither trusted nor overwritten; no one else can
/// plant files in the state directory, and a planted file is never followed.
@Suite struct FileStateStoreSafetyTests {
    /// This test's directories (a suite value is made for each test), removed when it ends.
    let workDir = TempDir(), otherDir = TempDir()

    func bytes(_ path: String) -> [UInt8]? { (try? Data(contentsOf: URL(fileURLWithPath: path))).map { [UInt8]($0) } }

    @Test("A state file that cannot be read (here: EISDIR) throws, naming the file and the error, and stays")
    func unreadableFileThrows() throws {
        let dir = workDir.path
        let store = try FileStateStore(directory: dir)
        mkdir(store.path, 0o700)  // read(2) of a directory: EISDIR, as an I/O error would be
        let marker = store.path + "/inside"
        _ = FileManager.default.createFile(atPath: marker, contents: Data("keep".utf8))
        do {
            _ = try store.load()
            Issue.record("load succeeded")
        } catch let error as FileStateStore.Unreadable {
            #expect(error.path == store.path)
            #expect(error.description.contains(store.path) && error.description.contains("Is a directory"))
        }
        #expect(bytes(marker) == Array("keep".utf8))
        // Nothing was set aside.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.contains("damaged") }.isEmpty)
    }

    @Test("A state directory others may write to is refused, naming the mode", arguments: [0o777, 0o1777, 0o702])
    func worldWritableDirectoryIsRefused(mode: Int) throws {
        let dir = workDir.path
        chmod(dir, mode_t(mode))
        do {
            _ = try FileStateStore(directory: dir)
            Issue.record("accepted mode \(String(mode, radix: 8))")
        } catch let error as FileStateStore.UnsafeDirectory {
            #expect(error.description.contains("writable by others (mode \(String(mode, radix: 8).count == 3 ? "0" : "")\(String(mode, radix: 8)))"))
            #expect(error.description.contains(dir))
        }
        chmod(dir, 0o700)
        _ = try FileStateStore(directory: dir)
        chmod(dir, 0o750)  // readable by the group: fine
        _ = try FileStateStore(directory: dir)
    }

    @Test("A state directory writable by a group the agent does not run as is refused", .enabled(if: geteuid() == 0, "chown needs root"))
    func foreignGroupWritableDirectoryIsRefused() throws {
        let dir = workDir.path
        chown(dir, geteuid(), getegid() == 65534 ? 0 : 65534)
        chmod(dir, 0o770)
        #expect(throws: FileStateStore.UnsafeDirectory.self) { try FileStateStore(directory: dir) }
        chown(dir, geteuid(), getegid())
        _ = try FileStateStore(directory: dir)  // the agent's own group may write
    }

    @Test("A directory owned by another user is refused", .enabled(if: geteuid() == 0, "chown needs root"))
    func directoryOwnedByAnotherUserIsRefused() throws {
        let dir = workDir.path
        chown(dir, 65534, 0)  // nobody's: nobody could plant files in it for a root agent
        do {
            _ = try FileStateStore(directory: dir)
            Issue.record("accepted a directory owned by uid 65534")
        } catch let error as FileStateStore.UnsafeDirectory {
            #expect(error.description.contains("owned by uid 65534"))
        }
        chown(dir, 0, 0)
        _ = try FileStateStore(directory: dir)
    }

    @Test("A symlink planted as state.json.tmp is removed, never followed: its target stays untouched")
    func plantedTemporarySymlinkIsNotFollowed() throws {
        let dir = workDir.path
        let victimDir = otherDir.path
        let victim = victimDir + "/important"
        _ = FileManager.default.createFile(atPath: victim, contents: Data("root's file".utf8))
        chmod(victim, 0o644)
        let store = try FileStateStore(directory: dir)
        #expect(symlink(victim, store.path + ".tmp") == 0)
        var state = PersistentState(hwid: "H")
        state.userId = "alice"
        try store.save(state)
        #expect(bytes(victim) == Array("root's file".utf8))
        var st = stat()
        stat(victim, &st)
        #expect(st.st_mode & 0o777 == 0o644)
        lstat(store.path, &st)
        #expect(st.st_mode & S_IFMT == S_IFREG)
        #expect(try store.load().state == state)
        #expect(!FileManager.default.fileExists(atPath: store.path + ".tmp"))
    }

    @Test("A temporary file left by a crash does not stop the next save")
    func staleTemporaryFileIsReplaced() throws {
        let dir = workDir.path
        let store = try FileStateStore(directory: dir)
        _ = FileManager.default.createFile(atPath: store.path + ".tmp", contents: Data("half a state".utf8))
        let state = PersistentState(hwid: "H")
        try store.save(state)
        #expect(try store.load().state == state)
    }
}

/// The stored form reads `null` as absent, as Codable (whose shape it keeps) does.
@Suite struct PersistentStateJSONTests {
    func read(_ json: JSONValue) throws -> PersistentState { try PersistentState(stateBody: JSONWriter.encode(json)) }

    @Test("ST-6: a null optional field of a stored state is absent, not damage")
    func nullFieldsAreAbsent() throws {
        let state = try read(["hwid": "H", "userId": nil, "flags": nil, "primerLastShownAt": nil,
                              "clockOffset": nil, "push": ["token": "t", "notificationTypes": 7, "registeredAt": nil]])
        #expect(state.hwid == "H")
        #expect(state.userId == nil && state.flags == nil && state.primerLastShownAt == nil && state.clockOffset == nil)
        #expect(state.push?.token == "t" && state.push?.registeredAt == nil)
        // A wrong kind is still damage, naming the field.
        #expect(throws: StateFormatError.self) { try read(["hwid": "H", "clockOffset": "soon"]) }
    }
}
