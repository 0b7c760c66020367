import FoundationEssentials

/// The device API requests the machine sends (docs/device-api.md A), built from the settings and the state.
extension AgentMachine {
    /// A.1: the server's base URL as the next request uses it: `ServerURL=`, else the `base_url`
    /// the server handed out, else the application's default.
    public var baseURL: String {
        settings.server.serverURL ?? state.baseURL ?? PushwooshAPI.defaultBaseURL(applicationCode: settings.server.applicationCode)
    }

    /// The User ID in effect: the HWID until one is set (A.1).
    public var userId: String { state.userId ?? state.hwid }
    public var hwid: String { state.hwid }

    public var notificationAuthorization: NotificationAuthorization {
        state.notificationAuthorization ?? settings.device.notificationAuthorization
    }

    var deviceFields: [String: JSONValue] {
        Self.deviceFields(settings.deviceInfo, authorization: notificationAuthorization)
    }

    /// The `applicationOpen` fields (A.2) of a device described by `info`.
    public static func deviceFields(_ info: DeviceInfo, authorization: NotificationAuthorization) -> [String: JSONValue] {
        [
            "package": .string(info.package), "timezone": .string(String(info.timezoneOffset)),
            "app_version": .string(info.appVersion), "os_version": .string(info.osVersion),
            "device_model": .string(info.deviceModel), "language": .string(info.language),
            "notificationTypes": .number(Double(authorization.allowsNotifications ? 7 : 0)),
        ]
    }

    func request(_ method: PushwooshAPI.Method, fields: [String: JSONValue] = [:], retryCount: Int = 0) -> HTTPRequest {
        let common = PushwooshAPI.CommonFields(applicationCode: settings.server.applicationCode, hwid: state.hwid, userId: userId)
        return PushwooshAPI.request(method, baseURL: baseURL, common: common, fields: fields,
                                    apiToken: settings.server.apiToken, retryCount: retryCount,
                                    timeout: settings.server.requestTimeout)
    }
}

extension Result {
    /// RF-7: a failed call as the error a refresh or a call reports.
    var failure: RefreshError? {
        guard case .failure(let error) = self else { return nil }
        if let f = error as? PushwooshAPI.Failure { return RefreshError(code: f.code, message: f.message) }
        return RefreshError(code: 0, message: "\(error)")
    }
}
