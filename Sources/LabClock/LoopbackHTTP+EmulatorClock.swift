import AgentCore
import ToolSupport

/// The emulator's side of a lab-clock step (docs/emulator.md D.3), for every `LabClockWorld`
/// that reaches the emulator over loopback HTTP (agentctl's fleet advance-clock).
extension LoopbackHTTP {
    public func advanceEmulatorClock(by seconds: Double) throws(LabClockError) {
        do {
            _ = try json("POST", "/admin/clock", json: ["advanceSeconds": .number(seconds)])
        } catch {
            throw LabClockError("cannot move the emulator's clock: \(error)")
        }
    }
}
