import AgentCore
import FoundationEssentials

// The answers of `clock` and `advanceClock` (docs/device-clock.md H) as values, both ways, like the
// answers of SocketAnswers.swift: the daemon encodes them, agentctl and the soak's clock
// driver decode them.

/// `clock`'s result.
public struct ClockAnswer: Sendable, Equatable {
    /// The device's time (to the second).
    public var now: Date
    /// How far the device's clock is ahead of the host's (to the millisecond).
    public var offsetSeconds: Double
    /// `Clock=controlled`.
    public var controlled: Bool
    /// The device time of the earliest armed timer (to the millisecond), nil when none: a
    /// driver of many devices steps them all to it together.
    public var nextTimerAt: Date?
    /// Requests on the network now (an answer may arm a timer).
    public var requestsInFlight: Int

    public init(now: Date, offsetSeconds: Double, controlled: Bool, nextTimerAt: Date?, requestsInFlight: Int) {
        self.now = now
        self.offsetSeconds = SocketTime.seconds(offsetSeconds)
        self.controlled = controlled
        self.nextTimerAt = nextTimerAt
        self.requestsInFlight = requestsInFlight
    }

    public var json: JSONValue {
        ["now": SocketTime.json(now), "offsetSeconds": .number(offsetSeconds), "controlled": .bool(controlled),
         "nextTimerAt": SocketTime.jsonMilliseconds(nextTimerAt), "requestsInFlight": .number(Double(requestsInFlight))]
    }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        self.init(now: try r.time("now"), offsetSeconds: try r.number("offsetSeconds"), controlled: try r.bool("controlled"),
                  nextTimerAt: try r.optionalTime("nextTimerAt"), requestsInFlight: Int(try r.number("requestsInFlight")))
    }
}

/// One timer's run during an `advanceClock`, or the end of a session in the background.
public struct FiredTimer: Sendable, Equatable {
    public var at: Date
    /// A timer's kind (`refresh`, `retry`, `expired`, …: `AgentMachine.TimerKind`), or
    /// `sessionEnd` (SE-1).
    public var event: String
    /// What the refresh it started was for (`periodic`, `retry`), when it started one.
    public var trigger: RefreshTrigger?
    /// In `firedBefore` only: the requests it sent (timers due at once: on the last of them).
    public var requests: Int?

    public static let sessionEnd = "sessionEnd"

    public init(at: Date, event: String, trigger: RefreshTrigger? = nil, requests: Int? = nil) {
        self.at = at
        self.event = event
        self.trigger = trigger
        self.requests = requests
    }

    public var json: JSONValue {
        // To the millisecond, as `nextTimerAt`: the lab compares it with the emulator's request log.
        var o: [String: JSONValue] = ["at": SocketTime.jsonMilliseconds(at), "event": .string(event)]
        if let trigger { o["trigger"] = .string(trigger.rawValue) }
        if let requests { o["requests"] = .number(Double(requests)) }
        return .object(o)
    }

    /// One fired timer as `json` writes it (the lab's `fired` lists them so).
    public init(json: JSONValue) throws(AnswerError) { try self.init(json: json, path: "") }

    init(json: JSONValue, path: String) throws(AnswerError) {
        let r = AnswerReader(json, path: path)
        self.init(at: try r.time("at"), event: try r.string("event"), trigger: try r.optionalEnumeration("trigger"),
                  requests: try r.optionalNumber("requests").map { Int($0) })
    }
}

/// `advanceClock`'s result: where the clock is now, what fired on the way, and how many
/// requests went to the server meanwhile.
public struct AdvanceClockAnswer: Sendable, Equatable {
    public var now: Date
    public var offsetSeconds: Double
    public var fired: [FiredTimer]
    public var requests: Int
    /// What ran on its own, as device time flowed with the host's, between the previous
    /// advance's answer and this advance (the most recent 256).
    public var firedBefore: [FiredTimer]
    /// How many older ones were not kept (0: `firedBefore` is all of them).
    public var firedBeforeDropped: Int

    public init(now: Date, offsetSeconds: Double, fired: [FiredTimer], requests: Int, firedBefore: [FiredTimer] = [],
                firedBeforeDropped: Int = 0) {
        self.now = now
        self.offsetSeconds = SocketTime.seconds(offsetSeconds)
        self.fired = fired
        self.requests = requests
        self.firedBefore = firedBefore
        self.firedBeforeDropped = firedBeforeDropped
    }

    public var json: JSONValue {
        ["now": SocketTime.json(now), "offsetSeconds": .number(offsetSeconds), "fired": .array(fired.map(\.json)),
         "requests": .number(Double(requests)), "firedBefore": .array(firedBefore.map(\.json)),
         "firedBeforeDropped": .number(Double(firedBeforeDropped))]
    }

    public init(json: JSONValue) throws(AnswerError) {
        let r = AnswerReader(json)
        // `firedBefore` may be absent: an agent from before it (attached to a lab) ran none it told of.
        func timers(_ key: String, required: Bool = true) throws(AnswerError) -> [FiredTimer] {
            var timers: [FiredTimer] = []
            for (i, f) in try (required ? r.array(key) : r.optionalArray(key) ?? []).enumerated() { timers.append(try FiredTimer(json: f, path: "\(key)[\(i)].")) }
            return timers
        }
        self.init(now: try r.time("now"), offsetSeconds: try r.number("offsetSeconds"), fired: try timers("fired"),
                  requests: Int(try r.number("requests")), firedBefore: try timers("firedBefore", required: false),
                  firedBeforeDropped: Int(try r.optionalNumber("firedBeforeDropped") ?? 0))
    }
}
