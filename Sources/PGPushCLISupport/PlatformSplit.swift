import PGPushStore

/// A job's delivered count per platform (iOS, Android, Web), as `watch`, `jobs` and `stats` show it beside the
/// total. `push.job_progress` counts Android and Web on their own; iOS is the rest.
public struct PlatformSplit: Equatable, Sendable {
    /// The platforms in the order they are shown, with their display names.
    public static let platforms: [(key: String, name: String)] = [("ios", "iOS"), ("android", "Android"), ("web", "Web")]

    /// Delivered per platform key, for the platforms the job reaches (once expanded) or has delivered to.
    public var delivered: [String: Int64]
    /// How many platforms the job's audience spans (0 before expansion).
    public var audiencePlatforms: Int

    public init(
        total: Int64?, androidTotal: Int64?, webTotal: Int64?, iosDelivered: Int64?, androidDelivered: Int64?,
        webDelivered: Int64?
    ) {
        var audience: [String: Int64] = [:]
        if let total {
            let android = androidTotal ?? 0
            let web = webTotal ?? 0
            audience = ["ios": total - android - web, "android": android, "web": web]
        }
        let counts = ["ios": iosDelivered, "android": androidDelivered, "web": webDelivered]
        var delivered: [String: Int64] = [:]
        for (key, _) in Self.platforms {
            let count = counts[key].flatMap { $0 } ?? 0
            if count > 0 || (audience[key] ?? 0) > 0 { delivered[key] = count }
        }
        self.delivered = delivered
        self.audiencePlatforms = audience.values.filter { $0 > 0 }.count
    }

    /// Whether the job reaches more than one platform: only then does the split say more than the total.
    public var isMixed: Bool { audiencePlatforms > 1 }

    /// `iOS 2, Web 3`; `nil` when there is nothing to show.
    public var text: String? {
        let parts = Self.platforms.compactMap { platform in delivered[platform.key].map { "\(platform.name) \($0)" } }
        return parts.isEmpty ? nil : parts.joined(separator: ", ")
    }

    /// `ios_delivered`, `android_delivered`, `web_delivered` for `--json` (0 for a platform the job does not reach).
    public var json: [String: Any] {
        Dictionary(uniqueKeysWithValues: Self.platforms.map { platform -> (String, Any) in
            let count: Int64 = delivered[platform.key] ?? 0
            return ("\(platform.key)_delivered", count)
        })
    }
}

extension PlatformSplit {
    public init(_ progress: JobProgress) {
        self.init(
            total: progress.total, androidTotal: progress.androidTotal, webTotal: progress.webTotal,
            iosDelivered: progress.iosDelivered, androidDelivered: progress.androidDelivered,
            webDelivered: progress.webDelivered)
    }

    public init(_ job: JobListing) {
        self.init(
            total: job.total, androidTotal: job.androidTotal, webTotal: job.webTotal, iosDelivered: job.iosDelivered,
            androidDelivered: job.androidDelivered, webDelivered: job.webDelivered)
    }
}
