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
}
