import AgentCore
import Foundation

/// What every driver shares.
public struct RunContext: Sendable {
    public var options: SoakOptions
    public var agentBinary: String
    public var serverURL: String
    public var processes: ChildProcesses
    public var notify: NotifySockets
    public var recorder: Recorder
    public var root: String
    public var deadline: Time
    public var environment: [String: String]
    /// The device clocks' offset (0 unless `--real-timings`).
    public var timeline = DeviceTimeline()
    /// Clock steps happen only while no driver acts.
    public var gate = WorldGate()
    /// Left by each driver once its agent's first start is over (up or not): the clock's
    /// first step waits for it, or an agent still starting would miss the step and run
    /// behind the others' device time (the real-timings soak's one failure in four).
    public var firstStarts = DispatchGroup()
    /// `--real-timings`: the duties that make the run cover every invariant (nil: none planned).
    public var plan: CoveragePlan?
    /// The device time the plan's `at`s count from.
    public var planStart: Time = now()
    public var board = DutyBoard()

    public static let applicationCode = "ABCDE-12345"
    public static let userPool = ["alice", "bob", "carol", "dave", "erin"]
    public static let userFlag = "soak_user"
    public static let trackedFlag = "new_checkout"
    public static let observedKeys = ["new_checkout", "promo_banner", "rich_notifications", "home_layout", "legacy_onboarding", "soak_user"]
}
