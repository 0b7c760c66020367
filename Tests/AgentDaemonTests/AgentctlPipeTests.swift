import Foundation
import HarnessSupport
import Testing

/// `pushwoosh-agentctl … | grep -q …`: a reader that goes away early must not crash the
/// command (seen in the VM: Foundation's FileHandle.write trapped on EPIPE, "Illegal
/// instruction"); it ends quietly with exit code 0.
@Suite struct AgentctlPipeTests {
    @Test func aClosedStandardOutputEndsTheCommandQuietly() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Binaries.agentctl)
        p.arguments = ["--help"]  // many lines, no agent needed
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try out.fileHandleForReading.close()  // the reader is gone before the first line
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationReason == .exit, "killed by signal \(p.terminationStatus)")
        #expect(p.terminationStatus == 0)
        #expect(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).isEmpty)
    }
}
