import AgentPosix
import Glibc
import Testing
@testable import AgentDaemon

// Under journald each line carries its syslog priority and no identifier
// (sd-daemon(3)); elsewhere lines stay as readable as before.
@Suite struct LogTests {
    @Test func journalLinesCarryThePriority() {
        #expect(Log.format(.error, "refresh failed", ["code": 401, "error": "bad token"], journal: true)
                == "<3>refresh failed code=401 error=\"bad token\"\n")
        #expect(Log.format(.warning, "refresh failed", ["code": 0], journal: true) == "<4>refresh failed code=0\n")
        #expect(Log.format(.info, "ready", [:], journal: true) == "<6>ready\n")
        #expect(Log.format(.debug, "refresh ok", ["partial": nil], journal: true) == "<7>refresh ok\n")
    }

    @Test func terminalLinesKeepTheIdentifierAndLevel() {
        #expect(Log.format(.warning, "refresh failed", ["code": 0, "retry_in_s": 30], journal: false)
                == "pushwoosh-agentd[warning]: refresh failed code=0 retry_in_s=30\n")
        #expect(Log.format(.error, "stored state damaged; starting without it", [:], journal: false)
                == "pushwoosh-agentd[error]: stored state damaged; starting without it\n")
    }

    @Test func journalStreamMustMatchTheDescriptor() throws {
        var path = Array("/tmp/log-test-XXXXXX".utf8CString)
        let fd = mkstemp(&path)
        try #require(fd >= 0)
        defer { close(fd); unlink(path) }
        var info = stat()
        try #require(fstat(fd, &info) == 0)
        let mine = "\(info.st_dev):\(info.st_ino)"
        #expect(Log.isJournalStream(fd: fd, environment: ["JOURNAL_STREAM": mine]))
        #expect(!Log.isJournalStream(fd: fd, environment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino + 1)"]))
        #expect(!Log.isJournalStream(fd: fd, environment: [:]))
        #expect(!Log.isJournalStream(fd: fd, environment: ["JOURNAL_STREAM": "garbage"]))
        #expect(!Log.isJournalStream(fd: -1, environment: ["JOURNAL_STREAM": mine]))
    }

    /// What any client can cause is logged once, then at most once every 10 s per message,
    /// with how many were held back.
    @Test func repeatedWarningsAreHeldBack() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let clock = ManualLoopClock()
        let loop = try EventLoop(clock: clock)
        let warnings = RepeatedWarnings(loop: loop, log: Log(minimum: .info, fd: fds[1]))
        for _ in 0..<50 { warnings.warn("connection refused: too many connections", ["max": 8]) }
        warnings.warn("answer refused: longer than the line limit")
        clock.advance(by: 10)
        warnings.warn("connection refused: too many connections", ["max": 8])
        close(fds[1])
        var bytes = [UInt8](repeating: 0, count: 4096)
        let n = read(fds[0], &bytes, bytes.count)
        let lines = String(decoding: bytes.prefix(max(0, n)), as: UTF8.self).split(separator: "\n")
        #expect(lines == ["pushwoosh-agentd[warning]: connection refused: too many connections max=8",
                          "pushwoosh-agentd[warning]: answer refused: longer than the line limit",
                          "pushwoosh-agentd[warning]: connection refused: too many connections max=8 repeated=49"])
    }
}
