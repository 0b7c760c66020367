import AgentCore
import Foundation

/// What every driver shares.
public struct RunContext: Sendable {
    public var options: SoakOptions
    /// The lab the agents live in (the emulator's `/lab/*`).
    public var lab: LabDevices
    /// Which of the agents' processes ended, and which ends were the runner's doing.
    public var exits: ExitWatch
    /// What the agents told their notify sockets, as the lab read it.
    public var notify: NotifyLog
    public var recorder: Recorder
    public var deadline: Time
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
