@testable import Emulator
import AgentCore
import EmulatorCore
import Foundation
import Glibc
import HarnessSupport
import Testing

/// docs/real-pushwoosh.md, "Recording a session": `--record FILE.har` is written as itself
/// (0600, no symlink followed, nothing planted beside it used), one entry appended per
/// exchange, and appending to a recording continues its placeholders' numbering.
@Suite struct HARRecorderTests {
    static let answer = EmulatorResponse(status: 200, headers: [HTTPHeader("Content-Type", "application/json")],
                                         body: Array(#"{"status_code":200,"status_message":"OK","response":{}}"#.utf8))

    func record(_ recorder: HARRecorder, hwid: String, user: String = "alice-user") {
        let body = #"{"request":{"application":"ABCDE-12345","hwid":"\#(hwid)","userId":"\#(user)"}}"#
        #expect(recorder.append(started: Date(timeIntervalSince1970: 0), milliseconds: 1, url: "https://x.example/json/1.3/registerUser",
                                request: [HTTPHeader("Authorization", "Token T0KEN-secret"), HTTPHeader("Content-Type", "application/json")],
                                requestBody: Array(body.utf8), response: Self.answer, method: "registerUser") == nil)
    }

    func entries(_ path: String) throws -> [JSONValue] {
        try StrictJSONParser.parse(Array(FileManager.default.contents(atPath: path) ?? Data()))["log"]?["entries"]?.arrayValue ?? []
    }

    func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    func text(_ path: String) -> String { String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self) }

    @Test func aPlantedTemporarySymlinkIsNeverFollowedAndTheRecordingIs0600() throws {
        for existing in [false, true] {  // a new recording, and one in an older layout (rewritten once)
            let dir = TempDir(), har = dir.file("s.har"), victim = dir.file("victim")
            try Data("someone else's file\n".utf8).write(to: URL(fileURLWithPath: victim))
            #expect(symlink(victim, har + ".tmp") == 0)
            if existing {
                let old: JSONValue = ["log": ["version": "1.2", "creator": ["name": "x", "version": "1"],
                                              "entries": [["request": ["url": "https://x.example/json/1.3/applicationOpen"],
                                                           "response": ["status": 200, "content": ["text": "HWID-1"]]]]]]
                try Data(JSONWriter.encode(old)).write(to: URL(fileURLWithPath: har))
                #expect(chmod(har, 0o644) == 0)
            }
            let recorder = try HARRecorder(path: har)
            for i in 0..<3 { record(recorder, hwid: "hw-000\(i)-aaaa") }
            #expect(text(victim) == "someone else's file\n", "existing: \(existing)")
            #expect(mode(har) == 0o600, "existing: \(existing): mode \(String(mode(har), radix: 8))")
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: har + ".tmp")) == victim)
            #expect(try entries(har).count == (existing ? 4 : 3))
            // Nothing else left beside it (no temporary file of ours).
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["s.har", "s.har.tmp", "victim"])
        }
    }

    @Test func aRecordingThatIsASymlinkOrAnotherUsersFileIsRefused() throws {
        let dir = TempDir(), har = dir.file("s.har"), victim = dir.file("victim")
        try Data("someone else's file\n".utf8).write(to: URL(fileURLWithPath: victim))
        #expect(symlink(victim, har) == 0)
        #expect(throws: EmulatorServerError(description: "--record: \(har): is a symbolic link (refused: a recording is written as itself)")) {
            try HARRecorder(path: har)
        }
        #expect(text(victim) == "someone else's file\n")
        if geteuid() == 0 {  // root can give the file another owner
            let other = dir.file("other.har")
            try Data().write(to: URL(fileURLWithPath: other))
            #expect(chown(other, 4242, 4242) == 0)
            #expect(throws: EmulatorServerError(description: "--record: \(other): is owned by uid 4242, not this user (uid 0): "
                                                    + "a recording is written only to a file of one's own")) {
                try HARRecorder(path: other)
            }
        }
    }

    @Test func anExchangeIsAppendedNotTheFileRewritten() throws {
        let dir = TempDir(), har = dir.file("s.har")
        let recorder = try HARRecorder(path: har)
        for i in 0..<50 { record(recorder, hwid: "hw-\(i)-aaaa") }
        var before = stat()
        #expect(stat(har, &before) == 0)
        let old = text(har)
        record(recorder, hwid: "hw-last-aaaa")
        var after = stat()
        #expect(stat(har, &after) == 0)
        #expect(after.st_ino == before.st_ino, "the file was replaced, not appended to")
        let new = text(har)
        #expect(new.hasPrefix(String(old.dropLast(HARRecorder.tail.count))))
        #expect(try entries(har).count == 51)
        // Read back as a recording, and continued by a new recorder on the same file.
        #expect(try Recording(har: StrictJSONParser.parse(Array(new.utf8))).answers["registerUser"]?.count == 51)
        // Not while another recorder has it open: their entries would interleave.
        #expect(throws: EmulatorServerError(description: "--record: \(har): is being recorded to by another emulator")) {
            try HARRecorder(path: har)
        }
        withExtendedLifetime(recorder) {}
    }

    @Test func aRecordingIsContinuedByTheNextRecorder() throws {
        let dir = TempDir(), har = dir.file("s.har")
        do {
            let first = try HARRecorder(path: har)
            record(first, hwid: "hw-before-restart")
        }
        let again = try HARRecorder(path: har)
        record(again, hwid: "hw-after-restart")
        #expect(try entries(har).count == 2)
    }

    @Test func appendingContinuesTheNumberingSoTwoDevicesNeverShareAPlaceholder() throws {
        let dir = TempDir(), har = dir.file("s.har")
        do {
            let first = try HARRecorder(path: har)
            record(first, hwid: "hw-first-device", user: "alice-user")
        }
        let second = try HARRecorder(path: har)
        record(second, hwid: "hw-second-device", user: "bob-the-user")
        record(second, hwid: "hw-second-device", user: "bob-the-user")
        let bodies = try entries(har).map { $0["request"]?["postData"]?["text"]?.stringValue ?? "" }
        #expect(bodies.count == 3)
        #expect(bodies[0].contains("\"HWID-1\"") && bodies[0].contains("\"USER-1\""), "\(bodies[0])")
        #expect(bodies[1].contains("\"HWID-2\"") && bodies[1].contains("\"USER-2\""), "\(bodies[1])")
        #expect(bodies[2] == bodies[1])  // one placeholder per value
        #expect(!text(har).contains("hw-second-device") && !text(har).contains("bob-the-user") && !text(har).contains("T0KEN-secret"))
    }
}
