import AgentCore
import AgentWire
import EmulatorCore
import Foundation
import Glibc
import LabClock

/// `POST /lab/advance` (docs/lab.md M): the lab clock (`LabClockDriver`, the one
/// implementation) over the emulator, moved in-process, and the targeted devices, through
/// their sockets. A device that cannot be moved is named in `skipped` with the reason, never
/// left out in silence.
struct LabTime {
    let emulator: LabEmulator
    let devices: [LabDevice]

    /// How far `until: nextRefresh` may go looking for a device's periodic refresh: past the
    /// hour and the RF-12 phase of every device, with room for a retry.
    static let refreshSearch = 3.0 * 3600

    static func isPeriodicRefresh(_ fired: FiredTimer) -> Bool {
        fired.event == AgentMachine.TimerKind.refresh.rawValue && fired.trigger == .periodic
    }

    func advance(_ request: LabAdvanceRequest) throws(LabRefusal) -> JSONValue {
        let until = request.until
        let clock = emulator.admin("GET", "/admin/clock", nil)
        guard clock.status == 200, let labOffset = clock.body["offsetSeconds"]?.numberValue else {
            throw LabRefusal(500, "cannot read the emulator's clock: \(JSONWriter.string(clock.body))")
        }
        // A time already past is the caller's mistake, whatever the devices.
        let labNow = Date().timeIntervalSince1970 + labOffset
        if case .time(let time) = until, time.timeIntervalSince1970 <= labNow {
            throw LabRefusal(400, "\(SocketTime.string(time)) is not after the lab's time \(SocketTime.string(Date(timeIntervalSince1970: labNow)))",
                             path: "until")
        }
        // At most a year on (LabAdvanceRequest.maximumSeconds), as `seconds`: a time further off stepped the devices through every timer up to it (an
        // advance that never ended, holding the lab and its stop) or, past the emulator's ten years, was a 502.
        if case .time(let time) = until, time.timeIntervalSince1970 - labNow > LabAdvanceRequest.maximumSeconds {
            throw LabRefusal(400, "\(SocketTime.string(time)) is more than a year after the lab's time \(SocketTime.string(Date(timeIntervalSince1970: labNow)))",
                             path: "until")
        }
        var skipped: [LabAdvanceAnswer.Skipped] = []
        var movable: [LabDevice] = []
        for d in devices {
            // Where the lab's offset ends, when the advance says (a device past it cannot follow).
            let goal: Double? = switch until {
            case .seconds(let seconds): labOffset + seconds
            case .time(let time): time.timeIntervalSinceNow  // the offset that puts the host's now at `time`
            case .nextRefresh, .nextTimer: nil
            }
            if let why = Self.unmovable(d, labOffset: labOffset, goal: goal, forRefresh: until == .nextRefresh) {
                skipped.append(.init(name: d.name, reason: why))
            } else {
                movable.append(d)
            }
        }
        // Never a silent move: an advance to a device's next timer or refresh that no targeted
        // device can make moves nothing (the emulator's clock included), and a strict one moves
        // nothing unless every targeted device can follow.
        let reasons = JSONValue.array(skipped.map(\.json))
        if movable.isEmpty, until == .nextRefresh || until == .nextTimer {
            let what = until == .nextRefresh ? "nextRefresh" : "nextTimer"
            throw LabRefusal(409, devices.isEmpty ? "until \(what): the lab has no device to move to it; nothing moved"
                             : "until \(what): no targeted device can get there; nothing moved", details: ["skipped": reasons])
        }
        if request.strict, !skipped.isEmpty {
            throw LabRefusal(409, "strict: \(skipped.map(\.name).joined(separator: ", ")) cannot move; nothing moved", details: ["skipped": reasons])
        }
        let driver = LabClockDriver(world: LabWorld(devices: movable, emulator: emulator), labOffset: labOffset)
        let result: LabClockAdvance
        do throws(LabClockError) {
            switch until {
            case .seconds(let seconds):
                result = try driver.advance(by: seconds)
            case .time(let time):
                result = try driver.advance(by: max(0.001, time.timeIntervalSince1970 - driver.labNow()))
            case .nextTimer:
                result = try driver.advance(by: Self.refreshSearch * 8) { $0.steps >= 1 }
            case .nextRefresh:
                let targets = Set(movable.indices)
                result = try driver.advance(by: Self.refreshSearch) { partial in
                    targets.allSatisfy { i in partial.fired[i, default: []].contains { Self.isPeriodicRefresh($0) } }
                }
                for i in targets where !(result.fired[i] ?? []).contains(where: { Self.isPeriodicRefresh($0) }) {
                    if result.problems[i] == nil {
                        skipped.append(.init(name: movable[i].name, reason: "no periodic refresh within \(TimeSpan.format(Self.refreshSearch)) of lab time"))
                    }
                }
            }
        } catch {
            throw LabRefusal(502, "the lab clock stopped: \(error.description)")
        }
        for (i, why) in result.problems.sorted(by: { $0.key < $1.key }) { skipped.append(.init(name: movable[i].name, reason: why)) }
        var fired: [String: [FiredTimer]] = [:]
        for (i, d) in movable.enumerated() { fired[d.name] = result.fired[i] ?? [] }
        return LabAdvanceAnswer(now: result.now, steps: result.steps, fired: fired,
                                requests: result.requests, skipped: skipped).json
    }

    /// Why `d` cannot follow the lab (nil: it can): it does not answer, its clock is the
    /// system's, it runs ahead of where the advance ends (`goal`, the lab's offset then), or (for
    /// `nextRefresh`) it has no periodic refresh due. A device ahead of the lab but not of the
    /// goal waits for the lab and moves once the lab reaches its time (docs/device-clock.md J).
    static func unmovable(_ d: LabDevice, labOffset: Double, goal: Double?, forRefresh: Bool) -> String? {
        let answer: JSONValue
        switch d.call(.clock, timeout: 3) {
        case .failure(let why) where why.isSystemClock:
            return "its clock is the system's ([Device] Clock=system): only a controlled clock can be moved"
        case .failure(let why): return "does not answer: \(why)"
        case .success(let json): answer = json
        }
        guard let clock = try? ClockAnswer(json: answer) else { return "its clock answer is unreadable: \(JSONWriter.string(answer))" }
        guard clock.controlled else { return "its clock is the system's ([Device] Clock=system): only a controlled clock can be moved" }
        if let goal, clock.offsetSeconds > goal + 1 {
            return "its clock runs \(TimeSpan.format(clock.offsetSeconds - labOffset)) ahead of the lab's (moved on its own), "
                + "past where this advance ends: not moved"
        }
        guard forRefresh else { return nil }
        guard case .success(let status) = d.call(.status, timeout: 3) else { return "does not answer status" }
        if status["appState"] == "background" { return "in the background: no periodic refresh until it is active (RF-2)" }
        if status["nextRefreshAt"] == .null { return "no periodic refresh is due (nextRefreshAt is null)" }
        return nil
    }
}

/// The lab as the lab clock sees it: the emulator's clock in-process, the devices' through
/// their sockets.
struct LabWorld: LabClockWorld, @unchecked Sendable {
    let devices: [LabDevice]
    let emulator: LabEmulator

    var deviceCount: Int { devices.count }
    func hostNow() -> Double { Date().timeIntervalSince1970 }
    func pause(seconds: Double) { usleep(UInt32(seconds * 1_000_000)) }

    func deviceClock(_ i: Int) -> ClockAnswer? {
        devices[i].collectNotifications()
        guard case .success(let json) = devices[i].call(.clock, timeout: 5) else { return nil }
        return try? ClockAnswer(json: json)
    }

    func advanceEmulator(by seconds: Double) throws(LabClockError) {
        let answer = emulator.admin("POST", "/admin/clock", .object(["advanceSeconds": .number(seconds)]))
        guard answer.status == 200 else { throw LabClockError("the emulator's clock did not move: \(JSONWriter.string(answer.body))") }
    }

    func advanceDevice(_ i: Int, by seconds: Double) throws(LabClockError) -> AdvanceClockAnswer {
        switch devices[i].call(.advanceClock(.seconds(seconds)), timeout: 120) {
        case .failure(let why): throw LabClockError(why.description, device: i)
        case .success(let json):
            do throws(AnswerError) { return try AdvanceClockAnswer(json: json) } catch {
                throw LabClockError("advanceClock answer: \(error)", device: i)
            }
        }
    }
}
