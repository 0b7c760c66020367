import FoundationEssentials

/// Durations are seconds (`Double`): monotonic for scheduling, wall for validity.
public typealias Seconds = Double

/// The feature-flag timings of docs/rules.md §8. Defaults are the SDK's; soak tests shorten them.
public struct FeatureFlagSettings: Sendable, Equatable {
    /// ST-1, ST-3: stored flags are served for at most this long after receipt (wall clock).
    public var storedFlagsLifetime: Seconds = 24 * 3600
    /// SE-1, RF-1: a return to the foreground after this long in the background starts a session.
    public var sessionTimeout: Seconds = 30 * 60
    /// RF-2: foreground refresh period.
    public var refreshInterval: Seconds = 3600
    /// RF-6: manual refresh throttle window.
    public var throttleWindow: Seconds = 5 * 60
    /// RF-6: `Pushwoosh_FEATURE_FLAGS_DISABLE_THROTTLE`.
    public var disableThrottle: Bool = false

    public init() {}
}

/// SE-1: the app is active (foreground) or in the background.
public enum AppState: String, Sendable, Codable, CaseIterable {
    case active, background
}

/// The simulated notification authorization status (PR-1, B.2 `setNotificationAuthorization`).
public enum NotificationAuthorization: String, Sendable, Codable, CaseIterable {
    case notDetermined, denied, authorized, provisional, ephemeral

    /// Whether the system would deliver notifications (and so `notificationTypes` is non-zero).
    public var allowsNotifications: Bool {
        switch self {
        case .authorized, .provisional, .ephemeral: true
        case .notDetermined, .denied: false
        }
    }
}

/// What the simulated user answers the system permission prompt (`PermissionPromptAnswer`).
public enum PermissionPromptAnswer: String, Sendable, Codable, CaseIterable {
    case allow, deny
}

/// docs/device-clock.md H: whose clock the device's rules run on.
public enum DeviceClockMode: String, Sendable, Codable, CaseIterable {
    /// The host's clock.
    case system
    /// The host's clock plus an offset that `advanceClock` moves forward.
    case controlled
}

/// The simulated device: its app state at start and its notification settings.
public struct DeviceSettings: Sendable, Equatable {
    public var initialAppState: AppState = .active
    public var notificationAuthorization: NotificationAuthorization = .notDetermined
    public var permissionPromptAnswer: PermissionPromptAnswer = .allow
    /// `gateway` of `registerDevice` (docs/device-api.md A.2).
    public var pushGateway: String = "production"
    /// `Clock=` (docs/device-clock.md H): the real clock, or one that tests move forward.
    public var clock: DeviceClockMode = .system

    public init() {}
}

/// How the agent reaches the server (docs/device-api.md A.1).
public struct ServerSettings: Sendable, Equatable {
    public var applicationCode: String
    public var apiToken: String?
    /// A configured server URL, already normalised; nil uses the default or a stored `base_url`.
    public var serverURL: String?
    public var requestTimeout: Seconds = 30

    public init(applicationCode: String, apiToken: String? = nil, serverURL: String? = nil) {
        self.applicationCode = applicationCode
        self.apiToken = apiToken
        self.serverURL = serverURL
    }
}
